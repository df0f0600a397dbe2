"""comm-exposed: communication that is not hidden behind compute.

With a device: collective kernels (names matching nccl/gloo/rccl) whose time does not overlap
any other kernel, memcpy or memset on the same device — exposed communication the step waits for.
Without a device (CPU/gloo jobs): collective CPU operators (c10d::*, record_param_comms) block the
thread, so their whole union is exposed. Impact: exposed time. Saving bound: the same (perfect
overlap hides it all).
"""

from __future__ import annotations

from ...vocab import comm_kernel, comm_op, top_op
from .. import metrics
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
    """Ranks whose exposed communication (the summary's figures: no query) passes the check's share."""
    ns = {r: max((d["comm_exposed_ns"] for d in s["devices"]), default=0) if s["devices"] else s["comm_cpu_ns"]
          for r, s in summaries.items()}
    return share_at_least(summaries, ns, THRESHOLDS["EXPOSED_SHARE_MIN"])


def check(ctx: Context) -> list:
    out = []
    if ctx.has_device():
        # the summary already ran this query (metrics.comm_overlap_sql); its numbers are reused, the SQL is the evidence
        targets = [(d["device"], metrics.comm_overlap_sql(ctx.rank, d["device"]),
                    {k: d[k] for k in ("comm_ns", "comm_overlap_ns", "comm_exposed_ns")}) for d in ctx.summary["devices"]]
        name_sql = (f"SELECT o.name AS name, any_value(k.source_frame_id) AS frame_id, min(k.event_id) AS sample_id FROM events k "
                    f"LEFT JOIN events o ON o.event_id = k.top_op_id WHERE k.rank = {ctx.rank} AND {comm_kernel('k')} "
                    f"GROUP BY o.name ORDER BY sum(k.dur_ns) DESC LIMIT 1")
    else:
        where = f"rank = {ctx.rank} AND {comm_op()}"
        targets = [(None, f"WITH u AS ({metrics.union_sql(where)}) SELECT coalesce(sum(end_ns - start_ns), 0)::BIGINT AS comm_ns, "
                          "0::BIGINT AS comm_overlap_ns, coalesce(sum(end_ns - start_ns), 0)::BIGINT AS comm_exposed_ns FROM u", None)]
        name_sql = (f"SELECT name, any_value(source_frame_id) AS frame_id, min(event_id) AS sample_id FROM events WHERE {where} "
                    f"AND {top_op()} GROUP BY name ORDER BY sum(dur_ns) DESC LIMIT 1")
    for device, sql, known in targets:
        v = known or row(ctx.run, sql)
        if not ctx.analysed_ns or v["comm_exposed_ns"] / ctx.analysed_ns < THRESHOLDS["EXPOSED_SHARE_MIN"]:
            continue
        top = row(ctx.run, name_sql)
        out.append(ctx.finding(
            title=f"{ms(v['comm_exposed_ns'])} of communication not overlapped with compute" + (f" on device {device}" if device is not None else ""),
            impact_ns=v["comm_exposed_ns"], saving_bound_ns=v["comm_exposed_ns"],
            location=Location(device=device, op=top.get("name"), source=ctx.source_of(top.get("frame_id"))),
            sql=sql, values=v, sample_event_ids=[top["sample_id"]] if top.get("sample_id") else [], uses_source=True,
            recommendation="Overlap collectives with compute: DDP gradient bucketing (bucket_cap_mb), "
            "async collectives (async_op=True, wait later), FSDP prefetch; reduce traffic with gradient "
            "compression or fewer, larger all-reduces.",
        ))
    return out
