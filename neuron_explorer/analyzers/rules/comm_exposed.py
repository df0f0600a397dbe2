"""comm-exposed: communication that is not hidden behind compute.

With a device: the exposed communication of analyzers/device_time.py — time in the analysed window
(the profiler steps; the span without steps) when a collective kernel (names matching
nccl/gloo/rccl) runs on the device and no compute kernel runs on any stream: the step waits for it.
The finding names the collectives that carry it, with the operator that launched each and its
source line. Without a device (CPU/gloo jobs): the host's collectives (collective operators, c10d::*
and record_param_comms, and the `gloo:*` ranges gloo records around the collectives it runs on its
own threads) within the analysed window while no other top-level operator runs on any thread of the
rank (device_time.cpu_comm_sql: `comm_cpu_exposed_ns`). Impact: exposed time. Saving bound: the
same (perfect overlap hides it all).

On either: where the rank spent at least half of it waiting for the last rank to arrive at its
collectives (analyzers/ranks.py, `wait_ns`), the finding is collective-wait's, which names the ranks
waited for (`leaves_to_job`): a late rank's work, not the collective, is the cause (test_planted's
late gloo rank: rank 0's 137.91 ms, 121.34 ms of it waiting for rank 1; multirank_128's rank 0:
336.98 ms, its wait 381.26 ms).
"""

from __future__ import annotations

from ...vocab import cpu_collective
from .. import device_time
from ..engine import Context
from ..model import Location
from ._util import ms, share_at_least

RULE_ID = "comm-exposed"
TITLE = "Communication not overlapped with compute"
CATEGORY = "communication"
SCOPE = "rank"
THRESHOLDS = {
    "EXPOSED_SHARE_MIN": 0.05,  # exposed communication / analysed time
}


def screen(run, summaries: dict) -> set[int]:
    """Ranks whose communication could pass the check's share (the summary's figures: no query): the
    collective union bounds the exposed part from above."""
    ns = {r: max((d["comm_ns"] for d in s["devices"]), default=0) if s["devices"] else s.get("comm_cpu_exposed_ns", 0)
          for r, s in summaries.items()}
    return share_at_least(summaries, ns, THRESHOLDS["EXPOSED_SHARE_MIN"])


def _named(exposed: list[dict]) -> str:
    """'ncclKernel_AllReduce_… from a gradient hook in backward (after AccumulateGrad) 39.45 ms, …' (the heaviest 3)."""
    parts = []
    for x in exposed[:3]:
        parts.append(f"{x['collective']} from {device_time.launched_by(x)} {ms(x['ns'])}")
    return ", ".join(parts)


def leaves_to_job(finding, cross_rank: dict) -> str | None:
    """collective-wait, when at least half of the finding's exposed communication is the rank's wait
    for the last rank to arrive (`cross_rank`'s `wait_ns`, analyzers/ranks.py): the late rank is the
    cause (collective-wait and rank-skew name it), and overlapping the collective would not hide it."""
    wait = next((r["wait_ns"] for r in cross_rank.get("ranks", []) if r["rank"] == finding.location.rank), 0) or 0
    return "collective-wait" if wait and 2 * wait >= finding.impact_ns else None


def check(ctx: Context) -> list:
    out = []
    if ctx.has_device():
        for d in ctx.summary.get("device_time") or []:
            exposed = d["communication_ns"]
            if not ctx.analysed_ns or exposed / ctx.analysed_ns < THRESHOLDS["EXPOSED_SHARE_MIN"]:
                continue
            named = d["exposed_communication"]
            top = named[0] if named else {}
            per_step = ", ".join(f"step {s['step']} {ms(s['communication_ns'])}" for s in d["steps"][:6])
            out.append(ctx.finding(
                title=f"{ms(exposed)} of communication not overlapped with compute on device {d['device']}"
                + (f": {_named(named)}" if named else ""),
                impact_ns=exposed, saving_bound_ns=exposed,
                location=Location(device=d["device"], op=top.get("op"), kernel=top.get("collective"), source=top.get("source"),
                                  steps=[s["step"] for s in d["steps"] if s["communication_ns"]]),
                sql=device_time.exposed_sql(ctx.rank, d["device"]),
                values={"communication_ns": exposed, "window_ns": d["window_ns"],
                        "collectives": [{k: x[k] for k in ("collective", "op", "source", "ns", "kernels")} for x in named]},
                sample_event_ids=[x["sample_id"] for x in named[:3]], uses_source=True,
                recommendation=(f"Exposed per step: {per_step}. " if per_step else "")
                + "Overlap collectives with compute: DDP gradient bucketing (bucket_cap_mb), "
                "async collectives (async_op=True, wait later), FSDP prefetch; reduce traffic with gradient "
                "compression or fewer, larger all-reduces.",
            ))
        return out
    exposed = int(ctx.summary.get("comm_cpu_exposed_ns") or 0)
    if not ctx.analysed_ns or exposed / ctx.analysed_ns < THRESHOLDS["EXPOSED_SHARE_MIN"]:
        return out
    named = ctx.run.sql(  # the collectives that run in the window, by their time in it
        f"SELECT e.name, count(DISTINCT e.event_id), any_value(e.source_frame_id), min(e.event_id) FROM events e "
        f"JOIN ({device_time.windows_sql(str(ctx.rank))}) w ON e.ts_ns < w.hi AND e.ts_ns + e.dur_ns > w.lo "
        f"WHERE e.rank = ? AND {cpu_collective('e')} GROUP BY e.name "
        "ORDER BY sum(least(e.ts_ns + e.dur_ns, w.hi) - greatest(e.ts_ns, w.lo)) DESC, e.name LIMIT 3", [ctx.rank]).fetchall()
    top = named[0] if named else (None, 0, None, None)
    out.append(ctx.finding(
        title=f"{ms(exposed)} of communication not overlapped with compute"
        + (": " + ", ".join(f"{name} x{n}" for name, n, *_ in named) if named else ""),
        impact_ns=exposed, saving_bound_ns=exposed,
        location=Location(op=top[0], source=ctx.source_of(top[2])),
        sql=device_time.cpu_comm_sql(str(ctx.rank)), values={k: ctx.summary.get(k) for k in ("comm_cpu_ns", "comm_cpu_exposed_ns")},
        sample_event_ids=[x[3] for x in named], uses_source=True,
        recommendation="Overlap collectives with compute: DDP gradient bucketing (bucket_cap_mb), "
        "async collectives (async_op=True, wait later), FSDP prefetch; reduce traffic with gradient "
        "compression or fewer, larger all-reduces.",
    ))
    return out
