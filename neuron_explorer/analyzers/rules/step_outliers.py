"""step-outliers: some steps are much slower than the typical one.

Over the steady-state steps (metrics.steady_steps: start-up, warm-up and partial steps left out,
the same selection as the summary's step statistics and `diff`), with at least MIN_STEPS of
them: a step is slow when it lasts more than SLOW_FACTOR times their median. To say what
differs, it compares, per event name (top-level operators, Python calls and annotations), the
mean time in slow steps with the mean time in the other steady steps, and names the one whose
time grew the most, with its source line. Impact: the sum over slow steps of (step time -
median step time). Saving bound: the same.
"""

from __future__ import annotations

from ..engine import Context, NotApplicable
from ..metrics import steady_steps
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


def check(ctx: Context) -> list:
    t = THRESHOLDS
    used = steady_steps(ctx.run, ctx.rank).used
    if len(used) < t["MIN_STEPS"]:
        raise NotApplicable(f"fewer than {t['MIN_STEPS']} steady-state profiler steps in this rank")
    in_used = ", ".join(str(int(s)) for s in used)
    steps_sql = f"""WITH s AS (SELECT step, max(ts_ns + dur_ns) - min(ts_ns) AS dur_ns FROM events WHERE rank = {ctx.rank} AND kind = 'step'
  AND step IN ({in_used}) GROUP BY step),
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
    slow_list = ", ".join(str(int(s)) for s in slow)
    diff = rows(ctx.run, f"""WITH e AS (SELECT kind, name, step, dur_ns, frame_id, event_id FROM events WHERE rank = {ctx.rank} AND step IN ({in_used})
      AND (kind = 'cpu_op' AND event_id = top_op_id OR kind IN ('python', 'user_annotation')))
    SELECT name, sum(dur_ns) FILTER (WHERE step IN ({slow_list})) / {len(slow)} - coalesce(sum(dur_ns) FILTER (WHERE step NOT IN ({slow_list})), 0) / {max(n_all - len(slow), 1)} AS grew_ns,
      mode(frame_id) FILTER (WHERE step IN ({slow_list})) AS frame_id, min(event_id) FILTER (WHERE step IN ({slow_list})) AS sample_id
    FROM e GROUP BY name HAVING grew_ns IS NOT NULL ORDER BY grew_ns DESC LIMIT 1""")
    top = diff[0] if diff and diff[0]["grew_ns"] > 0 else None
    what = (f"In slow steps {top['name']} takes {ms(top['grew_ns'])} more per step than in the others. ") if top else \
        "No recorded operator explains the difference (look for un-instrumented Python or waiting). "
    return [ctx.finding(
        title=f"{v['slow_steps']} of {n_all} steady steps are over {t['SLOW_FACTOR']}x the median step ({ms(v['median_ns'])})",
        impact_ns=v["excess_ns"], saving_bound_ns=v["excess_ns"],
        location=Location(steps=[int(s) for s in slow], op=top["name"] if top else None, source=ctx.source_of(top["frame_id"]) if top else None),
        sql=sql, values={"slow_steps": v["slow_steps"], "excess_ns": v["excess_ns"], "median_ns": v["median_ns"]},
        sample_event_ids=[top["sample_id"]] if top else [], uses_source=True,
        recommendation=what + "Make periodic work (checkpoints, evaluation, logging, garbage collection) "
        "asynchronous or rarer, and keep shapes stable between steps (recompilation, allocator growth).",
    )]
