"""rank-skew: a straggler rank arrives last at collectives and the others wait for it.

With several ranks: each collective instance (the k-th collective of one name within a profiler
step, matched across ranks by order; analyzers/ranks.py and docs/METRICS.md "Across ranks" define
it) has a last arrival, on clocks aligned on what ranks share (collective kernels' ends, else the
starts of common steps; never raw start times of windows that began at different moments). A rank's
lateness at an instance where it arrived last is its arrival minus the median arrival of the other
participants. A straggler is a rank whose summed lateness is at least SKEW_SHARE_MIN of its analysed
time; the heaviest MAX_STRAGGLERS are reported, each with the steps it was late in (and by how much),
the collective the others waited in, and, to say why, the event (top-level operator, Python call or
annotation) whose time on the straggler exceeds the other ranks' mean the most in those steps, with
its source line. Impact: the summed lateness. Saving bound: the summed time between its arrival and
the second-latest arrival (model: were it on time, each collective would start when the next-latest
rank arrived; the others then wait for that rank). Not applicable with one rank or without a
collective matched on two ranks.
"""

from __future__ import annotations

from ...vocab import in_steps, top_op
from .. import ranks as xr
from ..engine import Context, NotApplicable
from ..model import Location
from ._util import ms, rows

RULE_ID = "rank-skew"
TITLE = "Cross-rank skew: a straggler rank"
CATEGORY = "communication"
SCOPE = "run"
THRESHOLDS = {
    "SKEW_SHARE_MIN": 0.05,  # a rank's summed lateness / its analysed time
    "MAX_STRAGGLERS": 3,  # at most this many straggler findings, the latest first
}


def check(ctx: Context) -> list:
    if len(ctx.summaries) < 2:
        raise NotApplicable("one rank only: cross-rank skew needs several ranks in the run")
    got = xr.collective_waits(ctx.run)
    if not got["instances"]:
        raise NotApplicable("no collective matched on two ranks (same name, same step, same order)")
    max_offset = max((abs(r["offset_ns"]) for r in got["ranks"]), default=0)
    late = [r for r in got["ranks"] if r["late_ns"] > 0 and r["rank"] in ctx.summaries
            and ctx.summaries[r["rank"]]["analysed_ns"]
            and r["late_ns"] / ctx.summaries[r["rank"]]["analysed_ns"] >= THRESHOLDS["SKEW_SHARE_MIN"]]
    late.sort(key=lambda r: (-r["late_ns"], r["rank"]))
    return [_finding(ctx, r, got, max_offset) for r in late[:THRESHOLDS["MAX_STRAGGLERS"]]]


def _finding(ctx: Context, r: dict, got: dict, max_offset: int):
    rank, coll = r["rank"], r["late_collective"]
    steps = [s["step"] for s in r["late_steps"] if s["late_ns"] > 0 and s["step"] >= 0]
    top = _why(ctx, rank, steps)
    on_device = r["aligned_on"] == "collective_ends"  # its collectives are device kernels (ranks.py)
    sql = f"SELECT * FROM ({xr.per_rank_sql()}) WHERE rank = {rank}"
    per_step = ", ".join(f"step {s['step']} {ms(s['late_ns'])}" for s in r["late_steps"][:6]) + (", ..." if len(r["late_steps"]) > 6 else "")
    why = f"In those steps it spends {ms(top['grew_ns'])} more than the other ranks' mean in {top['name']}. " if top else ""
    return ctx.finding(
        title=f"Rank {rank} arrives last at {coll}: {ms(r['late_ns'])} late over {r['times_last']} call{'' if r['times_last'] == 1 else 's'}"
              + (f" in {len(steps)} step{'' if len(steps) == 1 else 's'}" if steps else "") + "; the other ranks wait for it",
        impact_ns=r["late_ns"], saving_bound_ns=r["late_saving_ns"], rank=rank,
        location=Location(rank=rank, steps=steps, op=(top["name"] if top else (None if on_device else coll)),
                          kernel=coll if on_device else None, source=ctx.source_of(top["frame_id"]) if top else None),
        sql=sql, values={"straggler_rank": rank, "late_ns": r["late_ns"], "saving_bound_ns": r["late_saving_ns"],
                         "collectives": r["times_last"], "matched_instances": got["instances"], "late_collective": coll,
                         "late_by_step": {str(s["step"]): s["late_ns"] for s in r["late_steps"]},
                         "offset_ns": r["offset_ns"], "aligned_on": r["aligned_on"], "max_clock_offset_ns": max_offset,
                         "saving_model": "were it on time, each collective would start at the second-latest arrival"},
        sample_event_ids=[i for i in ((top or {}).get("sample_id"), r["sample_event_id"]) if i is not None], uses_source=True,
        recommendation=f"Late by step: {per_step}. " + why + f"Balance the work before {coll}: uneven data shards or "
        "sequence lengths, rank-specific logging or checkpointing, a slower host or device.",
    )


def _why(ctx: Context, rank: int, steps: list[int]) -> dict | None:
    """The event whose time on the straggler exceeds the other ranks' mean the most, in the steps it
    was late in (one grouped query over the run)."""
    if not steps:
        return None
    got = rows(ctx.run, f"""SELECT name, coalesce(sum(dur_ns) FILTER (WHERE rank = {rank}), 0)
          - coalesce(sum(dur_ns) FILTER (WHERE rank <> {rank}), 0) / {max(len(ctx.summaries) - 1, 1)} AS grew_ns,
        mode(source_frame_id) FILTER (WHERE rank = {rank}) AS frame_id, min(event_id) FILTER (WHERE rank = {rank}) AS sample_id
        FROM events WHERE {in_steps(steps)} AND ({top_op()} OR kind IN ('python', 'user_annotation'))
        GROUP BY name ORDER BY grew_ns DESC, name LIMIT 1""")
    return got[0] if got and got[0]["grew_ns"] and got[0]["grew_ns"] > 0 else None
