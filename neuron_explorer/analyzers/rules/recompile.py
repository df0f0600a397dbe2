"""recompile: torch.compile compiled a function again because a guard failed.

Each recompile the live collector recorded (vocab.RECOMPILE_EVENT: the function, its `def` line and
Dynamo's recompile reason, i.e. the guard of the earlier compile that failed), grouped per function.
What it cost: the duration of the compile range (vocab.compile_range) the record lies in, the
innermost one on its thread, summed over the function's recompiles; the time of those ranges inside
profiler steps is the impact (0 for recompiles outside every step), at most the steps' time.
Saving bound: the same. The advice follows the guard: a size guard (`size mismatch`) calls for
dynamic shapes (`torch.compile(dynamic=True)`, `torch._dynamo.mark_dynamic`) or padding to a few
sizes; a guard on a value (`== 1.37…`: a Python number, often from `.item()`, passed into the
compiled code) for passing it as a tensor; any other for keeping what the guard checks stable.
"""

from __future__ import annotations

from ...vocab import RECOMPILE_EVENT, compile_range, line_key_sql
from ..engine import Context
from ..model import Location
from ._util import in_steps_ns_sql, ms, q, ranks_with, rows, step_bounds_sql

RULE_ID = "recompile"
TITLE = "torch.compile recompiles"
CATEGORY = "compilation"
SCOPE = "rank"
THRESHOLDS = {
    "MAX_GUARDS": 3,  # distinct failed guards quoted per function
}


def recompiles_sql(rank: int) -> str:
    """One row per recompiled function of the rank: function, source (its `def` line), recompiles,
    guards (the distinct failed guards, first first), compile_ns (the durations of the compile ranges the
    recompiles lie in), in_steps_ns (of those ranges, the time inside profiler steps), event_id (the first)."""
    r = int(rank)
    return f"""WITH rec AS (SELECT e.event_id, e.ts_ns, e.pid, e.tid, json_extract_string(e.args, '$.function') AS function,
    json_extract_string(e.args, '$.guard') AS guard, {line_key_sql('f')} AS source
  FROM events e LEFT JOIN frames f ON f.frame_id = e.source_frame_id WHERE e.rank = {r} AND e.name = {q(RECOMPILE_EVENT)}),
c AS (SELECT rec.event_id, arg_min(c.event_id, c.dur_ns) AS compile_id FROM rec JOIN events c ON c.rank = {r} AND {compile_range('c')}
    AND c.pid IS NOT DISTINCT FROM rec.pid AND c.tid IS NOT DISTINCT FROM rec.tid AND c.ts_ns <= rec.ts_ns AND rec.ts_ns <= c.ts_ns + c.dur_ns
  GROUP BY rec.event_id),
st AS ({step_bounds_sql(r)}),
cost AS (SELECT c.event_id, any_value(x.dur_ns) AS compile_ns, {in_steps_ns_sql('x')} AS in_steps_ns
  FROM c JOIN events x ON x.event_id = c.compile_id LEFT JOIN st ON x.ts_ns < st.s1 AND x.ts_ns + x.dur_ns > st.s0 GROUP BY c.event_id)
SELECT rec.function, any_value(rec.source) AS source, count(*) AS recompiles, list(DISTINCT rec.guard) AS guards,
  coalesce(sum(cost.compile_ns), 0)::BIGINT AS compile_ns, coalesce(sum(cost.in_steps_ns), 0)::BIGINT AS in_steps_ns,
  min(rec.event_id) AS event_id
FROM rec LEFT JOIN cost USING (event_id) GROUP BY rec.function ORDER BY compile_ns DESC, rec.function"""


def advice(guards: list[str]) -> str:
    """What to do about recompiles failing these guards."""
    text = " ".join(guards)
    if "size mismatch" in text or "size(" in text or ".size()" in text:
        return ("The function is called with changing shapes: compile it with `dynamic=True` (or mark the changing dimension with "
                "`torch._dynamo.mark_dynamic`), or pad inputs to a few fixed sizes.")
    if " == " in text:
        return ("A Python value passed into the compiled code changes between calls and is guarded on (often a number read with "
                "`.item()`): pass it as a tensor, or keep it out of the compiled function.")
    return "Keep what the guard checks (inputs' dtype, device, grad mode, globals, module attributes) the same between calls."


SCREEN_WHERES = (f"name = {q(RECOMPILE_EVENT)}",)
"""The recompile records `screen` looks for (the engine asks for every rule's in one query: `ranks_with_many`)."""


def screen(run, summaries: dict) -> set[int]:
    """Ranks with a recompile record (the check finds nothing on the others): one query for a batch."""
    return ranks_with(run, SCREEN_WHERES[0], summaries)


def check(ctx: Context) -> list:
    sql = recompiles_sql(ctx.rank)
    out = []
    for r in rows(ctx.run, sql):
        guards = [g for g in (r["guards"] or []) if g][:THRESHOLDS["MAX_GUARDS"]]
        n = int(r["recompiles"])
        out.append(ctx.finding(
            title=f"torch.compile recompiled {r['function']} {n} time{'s' if n > 1 else ''} ({ms(r['compile_ns'])} compiling): "
                  f"guard failed: {guards[0] if guards else 'unknown'}"[:240],
            impact_ns=r["in_steps_ns"], saving_bound_ns=r["in_steps_ns"], uses_source=True,
            location=Location(source=r["source"], op=RECOMPILE_EVENT),
            sql=sql, values={"function": r["function"], "recompiles": n, "guards": guards, "compile_ns": r["compile_ns"],
                             "in_steps_ns": r["in_steps_ns"]},
            sample_event_ids=[r["event_id"]],
            recommendation=f"{ms(r['compile_ns'])} went to recompiling {r['function']} ({ms(r['in_steps_ns'])} of it inside the "
                           f"profiled steps); the guard{'s' if len(guards) > 1 else ''} that failed: {'; '.join(guards) or 'not recorded'}. "
                           + advice(guards),
        ))
    return out
