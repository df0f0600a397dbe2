"""rank-skew: a straggler rank makes the others wait at collectives.

With several ranks in the run: the k-th call of each collective operator (top-level CPU operators
named c10d::*, record_param_comms, ...) within the same profiler step is matched across ranks, and
its arrival skew is the last rank's start minus the first rank's start — the time the earliest
rank waits. The rank that
arrives last most often is the straggler. To say why, it compares, per event name (top-level
operators, Python calls, annotations), the straggler's time with the mean of the other ranks and
names the one that grew the most, with its source line. Impact: the sum of arrival skews.
Saving bound: the same. Not applicable with one rank.

Ranks' traces need not share a clock or a profiling window: matching calls per step (not from
the start of each trace) keeps a rank whose window began a step later from being compared with
the wrong calls, and each rank's clock is aligned on the steps all ranks recorded: its offset is
the median, over those steps, of its step start minus the median start of that step across ranks.
Synchronous training starts each step together (the previous step ended in a collective), so a
constant offset is the clock, not the work. Without common steps the times are used as they are.
"""

from __future__ import annotations

from .. import metrics
from ..engine import Context, NotApplicable
from ..model import Location
from ._util import ms, q, row, rows

RULE_ID = "rank-skew"
TITLE = "Cross-rank skew: a straggler rank"
CATEGORY = "communication"
SCOPE = "run"
THRESHOLDS = {
    "SKEW_SHARE_MIN": 0.05,  # summed arrival skew / the straggler's analysed time
}


def check(ctx: Context) -> list:
    ranks = sorted(ctx.summaries)
    if len(ranks) < 2:
        raise NotApplicable("one rank only: cross-rank skew needs several ranks in the run")
    where = f"kind = 'cpu_op' AND event_id = top_op_id AND regexp_matches(name, {q(metrics.COMM_OP_PATTERN)})"
    sql = f"""WITH n AS (SELECT count(DISTINCT rank) AS ranks FROM events),
s0 AS (SELECT rank, step, min(ts_ns) AS ts_ns FROM events WHERE kind = 'step' GROUP BY rank, step),
st AS (SELECT rank, step, ts_ns FROM s0 WHERE step IN (SELECT step FROM s0 GROUP BY step HAVING count(DISTINCT rank) = (SELECT ranks FROM n))),
mid AS (SELECT step, quantile_disc(ts_ns, 0.5) AS mid_ns FROM st GROUP BY step),
off AS (SELECT rank, quantile_disc(st.ts_ns - mid.mid_ns, 0.5) AS offset_ns FROM st JOIN mid USING (step) GROUP BY rank),
c AS (SELECT rank, name, coalesce(step, -1) AS step, ts_ns - coalesce(offset_ns, 0) AS at_ns,
             row_number() OVER (PARTITION BY rank, coalesce(step, -1), name ORDER BY ts_ns) AS k
      FROM events LEFT JOIN off USING (rank) WHERE {where}),
g AS (SELECT name, step, k, (max(at_ns) - min(at_ns)) AS skew_ns, arg_max(rank, at_ns) AS last_rank FROM c GROUP BY name, step, k
      HAVING count(DISTINCT rank) = (SELECT ranks FROM n))
SELECT coalesce(sum(skew_ns), 0)::BIGINT AS skew_ns, count(*) AS collectives, mode(last_rank) AS straggler_rank,
       (SELECT coalesce(max(abs(offset_ns)), 0) FROM off)::BIGINT AS max_clock_offset_ns FROM g"""
    v = row(ctx.run, sql)
    if not v["collectives"] or v["straggler_rank"] is None:
        return []
    straggler = int(v["straggler_rank"])
    denom = ctx.summaries[straggler]["analysed_ns"]
    if not denom or v["skew_ns"] / denom < THRESHOLDS["SKEW_SHARE_MIN"]:
        return []
    others = len(ranks) - 1
    diff = rows(ctx.run, f"""SELECT name, coalesce(sum(dur_ns) FILTER (WHERE rank = {straggler}), 0)
          - coalesce(sum(dur_ns) FILTER (WHERE rank <> {straggler}), 0) / {others} AS grew_ns,
        mode(source_frame_id) FILTER (WHERE rank = {straggler}) AS frame_id, min(event_id) FILTER (WHERE rank = {straggler}) AS sample_id
        FROM events WHERE step IS NOT NULL AND (kind = 'cpu_op' AND event_id = top_op_id OR kind IN ('python', 'user_annotation'))
        GROUP BY name ORDER BY grew_ns DESC LIMIT 1""")
    top = diff[0] if diff and diff[0]["grew_ns"] and diff[0]["grew_ns"] > 0 else None
    coll = row(ctx.run, f"SELECT name, min(event_id) AS sample_id FROM events WHERE rank = {straggler} AND {where} GROUP BY name ORDER BY count(*) DESC LIMIT 1")
    why = f"It spends {ms(top['grew_ns'])} more than the other ranks in {top['name']}. " if top else ""
    return [ctx.finding(
        title=f"Rank {straggler} arrives last at collectives: the others wait {ms(v['skew_ns'])} over {v['collectives']} calls",
        impact_ns=v["skew_ns"], saving_bound_ns=v["skew_ns"], rank=straggler,
        location=Location(rank=straggler, op=top["name"] if top else coll.get("name"),
                          source=ctx.source_of(top["frame_id"]) if top else None),
        sql=sql, values={"skew_ns": v["skew_ns"], "collectives": v["collectives"], "straggler_rank": straggler,
                         "max_clock_offset_ns": v["max_clock_offset_ns"]},
        sample_event_ids=[i for i in (top["sample_id"] if top else None, coll.get("sample_id")) if i is not None], uses_source=True,
        recommendation=why + f"Balance the work before {coll.get('name') or 'the collective'}: uneven data shards or "
        "sequence lengths, rank-specific logging or checkpointing, a slower host or device.",
    )]
