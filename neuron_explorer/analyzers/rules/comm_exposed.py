"""comm-exposed: communication that is not hidden behind compute.

With a device: the exposed communication of analyzers/device_time.py — time in the analysed window
(the profiler steps; the span without steps) when a collective kernel (names matching
nccl/gloo/rccl) runs on the device and no compute kernel runs on any stream: the step waits for it.
The finding names the collectives that carry it, with the operator that launched each and its
source line. Without a device (CPU/gloo jobs): collective CPU operators (c10d::*,
record_param_comms) block the thread, so their whole union is exposed. Impact: exposed time.
Saving bound: the same (perfect overlap hides it all).
"""

from __future__ import annotations

from ...vocab import comm_op, top_op
from .. import device_time, metrics
from ..engine import Context
from ..model import Location
from ._util import ms, row, share_at_least

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
    ns = {r: max((d["comm_ns"] for d in s["devices"]), default=0) if s["devices"] else s["comm_cpu_ns"]
          for r, s in summaries.items()}
    return share_at_least(summaries, ns, THRESHOLDS["EXPOSED_SHARE_MIN"])


def _named(exposed: list[dict]) -> str:
    """'ncclKernel_AllReduce_… from a gradient hook in backward (after AccumulateGrad) 39.45 ms, …' (the heaviest 3)."""
    parts = []
    for x in exposed[:3]:
        parts.append(f"{x['collective']} from {device_time.launched_by(x)} {ms(x['ns'])}")
    return ", ".join(parts)


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
    where = f"rank = {ctx.rank} AND {comm_op()}"
    sql = (f"WITH u AS ({metrics.union_sql(where)}) SELECT coalesce(sum(end_ns - start_ns), 0)::BIGINT AS comm_ns, "
           "0::BIGINT AS comm_overlap_ns, coalesce(sum(end_ns - start_ns), 0)::BIGINT AS comm_exposed_ns FROM u")
    v = row(ctx.run, sql)
    if not ctx.analysed_ns or v["comm_exposed_ns"] / ctx.analysed_ns < THRESHOLDS["EXPOSED_SHARE_MIN"]:
        return out
    top = row(ctx.run, f"SELECT name, any_value(source_frame_id) AS frame_id, min(event_id) AS sample_id FROM events WHERE {where} "
                       f"AND {top_op()} GROUP BY name ORDER BY sum(dur_ns) DESC LIMIT 1")
    out.append(ctx.finding(
        title=f"{ms(v['comm_exposed_ns'])} of communication not overlapped with compute",
        impact_ns=v["comm_exposed_ns"], saving_bound_ns=v["comm_exposed_ns"],
        location=Location(op=top.get("name"), source=ctx.source_of(top.get("frame_id"))),
        sql=sql, values=v, sample_event_ids=[top["sample_id"]] if top.get("sample_id") else [], uses_source=True,
        recommendation="Overlap collectives with compute: DDP gradient bucketing (bucket_cap_mb), "
        "async collectives (async_op=True, wait later), FSDP prefetch; reduce traffic with gradient "
        "compression or fewer, larger all-reduces.",
    ))
    return out
