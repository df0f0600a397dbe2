"""compile-time: time spent compiling with torch.compile, per compiled function.

The live collector records one range per compile (vocab.compile_range: `torch.compile: <function>
(<file>:<line>)`, `torch.compile: backward of …`, `torch.compile: setup` for the `torch.compile(...)`
call). A compile's time is its outermost range's duration (a range inside another compile range on its
thread is already counted); a function's compile time sums its forward and backward compiles. This
rule is the one place compile time is reported: the line hotspot and the hotspot operator leave
these ranges out (analyzers/lines.py). A finding per function whose compile time is at least
MIN_SPAN_SHARE of the rank's span, with its share of the span and the calling line. Impact: the
part of it inside profiler steps (what the measured steps paid; at most their time), else 0.
Saving bound: the same. Warm-up advice only where compile time lies inside the steps; a function
that was also recompiled points at the recompile finding.
"""

from __future__ import annotations

from ...vocab import COMPILE_NAME_PREFIX, RECOMPILE_EVENT, compile_range, line_key_sql
from ..engine import Context
from ..model import Location
from ._util import in_steps_ns_sql, ms, pct, q, ranks_with, rows, step_bounds_sql

RULE_ID = "compile-time"
TITLE = "torch.compile compile time"
CATEGORY = "compilation"
SCOPE = "rank"
THRESHOLDS = {
    "MIN_SPAN_SHARE": 0.01,  # compile time of a function / the rank's span
}


def compile_time_sql(rank: int) -> str:
    """One row per compiled function of the rank: function (`backward of` folded in; `setup` for
    torch.compile(...) itself), compiles (its outermost forward compile ranges), backward_compiles,
    compile_ns (the durations of its outermost compile ranges), in_steps_ns (of that, the time inside
    profiler steps), source (the line the first compile was triggered from), event_id (the longest)."""
    r = int(rank)
    prefix = len(COMPILE_NAME_PREFIX) + 1
    return f"""WITH c AS (SELECT e.event_id, e.ts_ns, e.dur_ns, e.source_frame_id, substr(e.name, {prefix}) AS what
  FROM events e WHERE e.rank = {r} AND {compile_range('e')} AND NOT EXISTS (SELECT 1 FROM events o WHERE o.rank = {r}
    AND {compile_range('o')} AND o.pid IS NOT DISTINCT FROM e.pid AND o.tid IS NOT DISTINCT FROM e.tid AND o.event_id <> e.event_id
    AND o.ts_ns <= e.ts_ns AND o.ts_ns + o.dur_ns >= e.ts_ns + e.dur_ns AND (o.ts_ns < e.ts_ns OR o.dur_ns > e.dur_ns OR o.event_id < e.event_id))),
st AS ({step_bounds_sql(r)}),
cut AS (SELECT c.event_id, {in_steps_ns_sql('c')} AS in_steps_ns
  FROM c LEFT JOIN st ON c.ts_ns < st.s1 AND c.ts_ns + c.dur_ns > st.s0 GROUP BY c.event_id)
SELECT CASE WHEN starts_with(c.what, 'backward of ') THEN substr(c.what, 13) ELSE c.what END AS function,
  count(*) FILTER (WHERE NOT starts_with(c.what, 'backward of ')) AS compiles,
  count(*) FILTER (WHERE starts_with(c.what, 'backward of ')) AS backward_compiles,
  sum(c.dur_ns)::BIGINT AS compile_ns, sum(cut.in_steps_ns)::BIGINT AS in_steps_ns,
  arg_min(f.source, c.ts_ns) AS source, arg_max(c.event_id, c.dur_ns) AS event_id
FROM c JOIN cut USING (event_id) LEFT JOIN (SELECT fr.frame_id, {line_key_sql('fr')} AS source FROM frames fr) f ON f.frame_id = c.source_frame_id
GROUP BY 1 ORDER BY compile_ns DESC, 1"""


SCREEN_WHERES = (compile_range(),)
"""The compile ranges `screen` looks for (the engine asks for every rule's in one query: `ranks_with_many`)."""


def screen(run, summaries: dict) -> set[int]:
    """Ranks with a compile range (the check finds nothing on the others): one query for a batch."""
    return ranks_with(run, SCREEN_WHERES[0], summaries)


def check(ctx: Context) -> list:
    sql = compile_time_sql(ctx.rank)
    got = rows(ctx.run, sql)
    if not got:
        return []
    span = ctx.summary.get("span_ns") or ctx.analysed_ns
    recompiled = {r[0] for r in ctx.run.sql(f"SELECT DISTINCT json_extract_string(args, '$.function') FROM events WHERE rank = {int(ctx.rank)} "
                                            f"AND name = {q(RECOMPILE_EVENT)}").fetchall()}
    has_steps = bool(ctx.summary["steps"]["count"])
    out = []
    for r in got:
        share = r["compile_ns"] / span if span else 0.0
        if share < THRESHOLDS["MIN_SPAN_SHARE"]:
            continue
        what = "torch.compile(...) itself (importing the compiler)" if r["function"] == "setup" else r["function"]
        n = f"{r['compiles']} compile{'s' if r['compiles'] != 1 else ''}" + (
            f" and {r['backward_compiles']} of its backward" if r["backward_compiles"] else "")
        if r["in_steps_ns"] and has_steps:
            todo = (f"{ms(r['in_steps_ns'])} of it lies inside the profiled steps, which then measure compiling, not training: "
                    "call the compiled function once before profiling (or record with a schedule that waits a step: "
                    "record --wait 1, nx.schedule(wait=1, active=N)).")
        else:
            todo = "It lies outside the profiled steps: a one-time cost, not in the step figures."
        if r["function"] in recompiled:
            todo += " It was also recompiled: see the recompile finding for the guard that failed."
        out.append(ctx.finding(
            title=f"torch.compile spent {ms(r['compile_ns'])} compiling {what} ({pct(share)} of the profiled span)",
            impact_ns=r["in_steps_ns"], saving_bound_ns=r["in_steps_ns"],
            location=Location(source=r["source"], op=COMPILE_NAME_PREFIX + r["function"]),
            sql=sql, values={"function": r["function"], "compiles": r["compiles"], "backward_compiles": r["backward_compiles"],
                             "compile_ns": r["compile_ns"], "in_steps_ns": r["in_steps_ns"], "span_share": round(share, 6)},
            sample_event_ids=[r["event_id"]],
            recommendation=f"{n} of {what}, called from {r['source'] or 'an unknown line'}: {ms(r['compile_ns'])}. " + todo,
        ))
    return out
