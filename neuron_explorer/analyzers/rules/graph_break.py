"""graph-break: torch.compile split a compiled function into several graphs.

Each graph break the live collector recorded while Dynamo compiled (vocab.GRAPH_BREAK_EVENT: the
user statement that broke the graph, Dynamo's reason and hint, the compiled function) is listed,
once per statement and reason, with how often it was recorded; the breaks of a function compiled
before profiling started (a warm-up call) are recorded too, when the recording starts. No break
recorded (the function compiled whole): no finding. The figure is the time
outside the compiled graphs (`outside_graphs_sql`): per profiler step, the time inside a call of a
compiled function (the union of Dynamo's `Torch-Compiled Region` ranges) that is not inside one of
its compiled graphs' runs (AOT autograd's `CompiledFunction`, Inductor's `## Call CompiledFxGraph`:
vocab.graph_call) nor inside a compile (vocab.compile_range: reported by compile-time); each
interval cut to its step, so at most the step. It is the eager code the breaks leave between the
graphs (the breaking statement itself, the Python around it, the guards of each resumed graph).
The backward of a compiled graph runs as one node (`CompiledFunctionBackward`) and is not counted.
Impact: that time summed over the steps (over the whole span without steps). Saving bound: the
same (the breaking statement's own work may remain). With a backend that records no graph run
(`backend="eager"`) the figure cannot be told apart and is not given (impact 0).
"""

from __future__ import annotations

import json

from ...vocab import GRAPH_BREAK_EVENT, compile_range, compiled_region, graph_call, line_key_sql
from ..engine import Context
from ..metrics import union_of_sql
from ..model import Location
from ._util import ms, q, ranks_with, rows, step_bounds_sql

RULE_ID = "graph-break"
TITLE = "torch.compile graph breaks"
CATEGORY = "compilation"
SCOPE = "rank"
THRESHOLDS = {
    "MAX_LISTED": 5,  # break sites named in the recommendation (all are in the values)
}


def outside_graphs_sql(rank: int) -> str:
    """Per profiler step of the rank (step NULL: the whole span, for a rank without steps):
    region_ns (the union of its compiled regions, cut to the step), inside_ns (of that, the time
    inside a graph run or a compile) and outside_ns = region_ns - inside_ns (0 ≤ outside_ns ≤ the step)."""
    r = int(rank)
    steps = f"""{step_bounds_sql(r)}
  UNION ALL SELECT NULL, min(ts_ns), max(ts_ns + dur_ns) FROM events WHERE rank = {r}
    AND NOT EXISTS (SELECT 1 FROM events WHERE rank = {r} AND kind = 'step')"""

    def cut(where: str) -> str:
        return f"""SELECT st.step, greatest(e.ts_ns, st.s0) AS ts_ns, least(e.ts_ns + e.dur_ns, st.s1) AS end_ns
  FROM events e JOIN st ON e.ts_ns < st.s1 AND e.ts_ns + e.dur_ns > st.s0
  WHERE e.rank = {r} AND e.dur_ns > 0 AND ({where}) AND least(e.ts_ns + e.dur_ns, st.s1) > greatest(e.ts_ns, st.s0)"""

    return f"""WITH st AS ({steps}),
reg AS ({union_of_sql(cut(compiled_region('e')), by=('step',))}),
ins AS ({union_of_sql(cut(f"{graph_call('e')} OR {compile_range('e')}"), by=('step',))}),
per AS (SELECT reg.step, reg.start_ns, reg.end_ns, coalesce(sum(least(reg.end_ns, ins.end_ns) - greatest(reg.start_ns, ins.start_ns)), 0) AS inside
  FROM reg LEFT JOIN ins ON ins.step IS NOT DISTINCT FROM reg.step AND ins.start_ns < reg.end_ns AND ins.end_ns > reg.start_ns
  GROUP BY ALL)
SELECT step, sum(end_ns - start_ns)::BIGINT AS region_ns, sum(inside)::BIGINT AS inside_ns, sum(end_ns - start_ns - inside)::BIGINT AS outside_ns
FROM per GROUP BY step ORDER BY step"""


def breaks_sql(rank: int) -> str:
    """The recorded graph breaks of the rank, one row per statement and reason: source (file:line),
    code, reason, hint, function, count, first event id."""
    return f"""SELECT {line_key_sql('f')} AS source, any_value(f.code) AS code, json_extract_string(e.args, '$.reason') AS reason,
  any_value(json_extract_string(e.args, '$.hint')) AS hint, string_agg(DISTINCT json_extract_string(e.args, '$.function'), ', ') AS function,
  count(*) AS count, min(e.event_id) AS event_id
FROM events e LEFT JOIN frames f ON f.frame_id = e.source_frame_id
WHERE e.rank = {int(rank)} AND e.name = {q(GRAPH_BREAK_EVENT)}
GROUP BY 1, 3 ORDER BY count DESC, min(e.ts_ns)"""


SCREEN_WHERES = (f"name = {q(GRAPH_BREAK_EVENT)}",)
"""The graph-break records `screen` looks for (the engine asks for every rule's in one query: `ranks_with_many`)."""


def screen(run, summaries: dict) -> set[int]:
    """Ranks with a graph-break record (the check finds nothing on the others): one query for a batch."""
    return ranks_with(run, SCREEN_WHERES[0], summaries)


def check(ctx: Context) -> list:
    breaks = rows(ctx.run, breaks_sql(ctx.rank))
    if not breaks:
        return []
    sql = outside_graphs_sql(ctx.rank)
    per_step = rows(ctx.run, sql)
    graph_runs = ctx.run.sql(f"SELECT count(*) FROM events WHERE rank = {int(ctx.rank)} AND {graph_call()}").fetchone()[0]
    steady = ctx.steady_steps
    if graph_runs:
        total = sum(int(s["outside_ns"] or 0) for s in per_step)
        # per steady step (steps without a compiled call count as 0); without steps, the whole span
        per = (int(sum(int(s["outside_ns"] or 0) for s in per_step if s["step"] in steady) / len(steady)) if steady
               else total)
        step_ns = (ctx.summary["steps"].get("mean_ns") or 0) if steady else ctx.analysed_ns
    else:
        total, per, step_ns = 0, None, 0
    first = breaks[0]
    where = ", ".join(f"{b['source'] or 'an unknown line'} ({b['reason']})" for b in breaks[:THRESHOLDS["MAX_LISTED"]])
    more = f" and {len(breaks) - THRESHOLDS['MAX_LISTED']} more" if len(breaks) > THRESHOLDS["MAX_LISTED"] else ""
    if per is None:
        figure = ("the time outside the compiled graphs is not measured: the backend records no run of a graph "
                  "(backend='eager'); record with the backend you train with. ")
    else:
        unit = "per steady step" if steady else "over the profiled span"
        of = f" of a {ms(step_ns)} step" if steady and step_ns else ""
        figure = f"{ms(per)} {unit}{of} runs inside the compiled function{'s' if len({b['function'] for b in breaks}) > 1 else ''} " \
                 "but outside its compiled graphs. "
    hints = {b["hint"] for b in breaks if b.get("hint")}
    advice = (f"Graph break{'s' if len(breaks) > 1 else ''} at {where}{more}: {figure}"
              "Move the breaking statement out of the compiled function (log or check `.item()` values after the step), "
              "or follow Dynamo's hint" + (f": {'; '.join(h.rstrip('.') for h in sorted(hints)[:2])}" if hints else "") + ".")
    code = f" `{first['code'].strip()[:60]}`" if first.get("code") else ""
    return [ctx.finding(
        title=f"torch.compile graph break at {first['source']}{code}: {first['reason']}"
              + (f" (+{len(breaks) - 1} more break site{'s' if len(breaks) > 2 else ''})" if len(breaks) > 1 else ""),
        impact_ns=total, saving_bound_ns=total, uses_source=True,
        location=Location(source=first["source"], op=GRAPH_BREAK_EVENT),
        sql=breaks_sql(ctx.rank) + ";\n" + sql,
        values={"breaks": json.loads(json.dumps([{k: b[k] for k in ("source", "reason", "hint", "function", "count")} for b in breaks])),
                "outside_graphs_ns": total if per is not None else None, "outside_graphs_per_step_ns": per,
                "graph_runs": int(graph_runs)},
        sample_event_ids=[b["event_id"] for b in breaks],
        recommendation=advice,
    )]
