"""step-outliers: some steps are much slower than the typical one.

Over the steady-state steps (metrics.steady_steps: start-up, warm-up and partial steps left out,
the same selection as the summary's step statistics and `diff`), with at least MIN_STEPS of
them: a step is slow when it lasts more than SLOW_FACTOR times their median. To say what
differs, it compares, per user statement (analyzers/lines.py: its outermost operators, its
Python-level time and its device work), the mean time in slow steps with the mean time in the
other steady steps, and names the statement whose time grew the most, with the statements that
called it; never a frame of torch, the standard library or Neuron Explorer. Compiling is no
statement's time (lines.compile_inside_sql): when the time spent compiling (torch.compile ranges,
lines.compile_per_step_sql) grew more than any statement's, the finding says that instead. Impact: the sum over slow steps of (step time -
median step time). Saving bound: the same.
"""

from __future__ import annotations

from ...vocab import in_steps, line_key_sql
from ..engine import Context, NotApplicable
from ..lines import compile_inside_sql, compile_per_step_sql, own_ns_sql
from ..model import Location
from ._util import ms, rows

RULE_ID = "step-outliers"
TITLE = "Step-time outliers"
CATEGORY = "step_variance"
SCOPE = "rank"
THRESHOLDS = {
    "MIN_STEPS": 3,  # fewer steps cannot show an outlier
    "SLOW_FACTOR": 1.5,  # slow: step time > this x median step time
}


def _callers(ctx: Context, frame_id: int, limit: int = 3) -> list[str]:
    """'file:line' of the user statements that called this one, innermost first."""
    out, seen = [], {frame_id}
    cur = ctx.run.sql("SELECT parent_frame_id FROM frames WHERE frame_id = ?", [frame_id]).fetchone()
    while cur and cur[0] is not None and cur[0] not in seen and len(out) < limit:
        seen.add(cur[0])
        r = ctx.run.sql("SELECT file, line, is_user, parent_frame_id FROM frames WHERE frame_id = ?", [cur[0]]).fetchone()
        if not r:
            break
        if r[2]:
            out.append(f"{r[0]}:{r[1]}")
        cur = (r[3],)
    return out


def screen(run, summaries: dict) -> set[int]:
    """Ranks with too few steady steps (not applicable) and those whose slowest steady step is
    over SLOW_FACTOR x their median (from the summary's step figures: no query)."""
    t = THRESHOLDS
    return {r for r, s in summaries.items() if s["steps"]["steady_count"] < t["MIN_STEPS"]
            or (s["steps"]["max_ns"] or 0) > t["SLOW_FACTOR"] * (s["steps"]["p50_ns"] or 0)}


def check(ctx: Context) -> list:
    t = THRESHOLDS
    used = ctx.summary["steps"]["steady_steps"]  # metrics.steady_steps, as the summary selected them
    if len(used) < t["MIN_STEPS"]:
        raise NotApplicable(f"fewer than {t['MIN_STEPS']} steady-state profiler steps in this rank")
    steps_sql = f"""WITH s AS (SELECT step, max(ts_ns + dur_ns) - min(ts_ns) AS dur_ns FROM events WHERE rank = {ctx.rank} AND kind = 'step'
  AND {in_steps(used)} GROUP BY step),
m AS (SELECT median(dur_ns) AS median_ns FROM s)"""
    sql = steps_sql + f"""
SELECT count(*) AS slow_steps, coalesce(sum(s.dur_ns - m.median_ns), 0)::BIGINT AS excess_ns, any_value(m.median_ns)::BIGINT AS median_ns,
  list(s.step ORDER BY s.step) AS steps
FROM s, m WHERE s.dur_ns > {t['SLOW_FACTOR']} * m.median_ns"""
    v = rows(ctx.run, sql)[0]
    if not v["slow_steps"]:
        return []
    slow = list(v["steps"])
    n_all = len(used)
    diff = rows(ctx.run, f"""WITH e AS (SELECT e.step, {line_key_sql('f')} AS source, f.code, f.frame_id, e.event_id,
        {own_ns_sql(compile_ns='c.compile_ns')} AS ns
      FROM events e JOIN frames f ON f.frame_id = e.source_frame_id
      LEFT JOIN ({compile_inside_sql(ctx.rank)}) c ON c.top_op_id = e.event_id
      WHERE e.rank = {ctx.rank} AND {in_steps(used, 'e')} AND f.is_user)
    SELECT source, any_value(code) AS code, min(frame_id) AS frame_id,
      coalesce(sum(ns) FILTER (WHERE {in_steps(slow)}), 0) / {len(slow)}
        - coalesce(sum(ns) FILTER (WHERE NOT {in_steps(slow)}), 0) / {max(n_all - len(slow), 1)} AS grew_ns,
      min(event_id) FILTER (WHERE {in_steps(slow)}) AS sample_id
    FROM e GROUP BY source ORDER BY grew_ns DESC, source LIMIT 1""")
    top = diff[0] if diff and diff[0]["grew_ns"] and diff[0]["grew_ns"] > 0 else None
    compiling = rows(ctx.run, f"""SELECT coalesce(sum(compile_ns) FILTER (WHERE {in_steps(slow)}), 0) / {len(slow)}
        - coalesce(sum(compile_ns) FILTER (WHERE NOT {in_steps(slow)}), 0) / {max(n_all - len(slow), 1)} AS grew_ns
      FROM ({compile_per_step_sql(ctx.rank)}) WHERE {in_steps(used)}""")[0]["grew_ns"] or 0
    if compiling > 0 and (top is None or compiling >= top["grew_ns"]):
        top = None
        what = (f"In slow steps torch.compile compiles for {ms(compiling)} more per step (the recompile and compile-time "
                "findings say what and why). ")
    elif top:
        code = f" `{top['code'][:60]}`" if top.get("code") else ""
        callers = _callers(ctx, top["frame_id"])
        what = (f"In slow steps {top['source']}{code} takes {ms(top['grew_ns'])} more per step than in the others"
                + (f" (called from {' ← '.join(callers)})" if callers else "") + ". ")
    else:
        what = "No user statement explains the difference (look for un-instrumented work or waiting). "
    grew = {"grew_source": top["source"] if top else None, "grew_ns": top["grew_ns"] if top else None,
            "compile_grew_ns": int(compiling) if compiling > 0 else None}
    return [ctx.finding(
        title=f"{v['slow_steps']} of {n_all} steady steps are over {t['SLOW_FACTOR']}x the median step ({ms(v['median_ns'])})",
        impact_ns=v["excess_ns"], saving_bound_ns=v["excess_ns"],
        location=Location(steps=[int(s) for s in slow], source=top["source"] if top else None),
        sql=sql, values={"slow_steps": v["slow_steps"], "excess_ns": v["excess_ns"], "median_ns": v["median_ns"], **grew},
        sample_event_ids=[top["sample_id"]] if top else [], uses_source=True,
        recommendation=what + "Make periodic work (checkpoints, evaluation, logging, garbage collection) "
        "asynchronous or rarer, and keep shapes stable between steps (recompilation, allocator growth).",
    )]
