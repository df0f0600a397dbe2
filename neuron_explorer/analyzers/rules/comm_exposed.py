"""comm-exposed: communication that is not hidden behind compute.

With a device: the exposed communication of analyzers/device_time.py — time in the analysed window
(the profiler steps; the span without steps) when a collective kernel (names matching
nccl/gloo/rccl) runs on the device and no compute kernel runs on any stream: the step waits for it.
The finding names the collectives that carry it, with the operator that launched each and its
source line, and its advice follows what they do where one kind holds half the named time or more
(vocab.collective_kind: all-reduces → DDP's buckets and bf16 gradients; all-gathers and
reduce-scatters → FSDP's prefetch and wrapping; all-to-alls → pipelining the sparse features,
balancing the shards; point-to-point sends → micro-batches; broadcasts → DDP's buffers), else what
fits all of them. Without a device (CPU/gloo jobs): the host's collectives (collective operators, c10d::*
and record_param_comms, and the `gloo:*` ranges gloo records around the collectives it runs on its
own threads) within the analysed window while no other top-level operator runs on any thread of the
rank (device_time.cpu_comm_sql: `comm_cpu_exposed_ns`). Impact: exposed time. Saving bound: the
same (perfect overlap hides it all).

Across ranks (`less_the_job`, where collective-wait reported): the time a rank's collectives spent
waiting for the last rank to arrive (analyzers/ranks.py) is a late rank's doing, which collective-wait
and rank-skew name, and overlapping the collective would not hide it. With a device, the part of the
exposed communication that is such a wait (ranks.wait_intervals: each collective kernel's first
*wait* ns, within the analysed window, where no compute kernel runs) is taken out of the finding:
its impact is the rest, and its title says how much was waiting (multirank_128: rank 1's 303.52 ms
exposed, 104.80 ms of it waiting for rank 0, now 198.73 ms; rank 0's 336.98 ms, 145.03 ms of it
waiting, now 191.96 ms). Where that part is at least half of the exposed time, or the rest is under
the rule's share, the whole finding is left to collective-wait. Without a device the exposed time
is the host's, and where the rank's wait lies in it is not measured: the finding is left to
collective-wait when the rank's whole wait is at least half of it (test_planted's late gloo rank:
rank 0's 137.91 ms, 121.34 ms of it waiting for rank 1), else kept whole.
"""

from __future__ import annotations

import dataclasses

from ...vocab import collective_kind, cpu_collective
from .. import device_time, metrics, ranks
from ..engine import Context, severity_for
from ..model import Finding, Location
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


JOB_RULE = "collective-wait"
"""The run's rule that owns a rank's wait for the last rank to arrive."""


def less_the_job(run, finding: Finding, cross_rank: dict, analysed_ns: int) -> tuple[str, Finding | None] | None:
    """The finding without the rank's wait for the last rank to arrive (module docstring): None when
    it has none, (JOB_RULE, None) when it is left to that rule whole, else (JOB_RULE, the finding with
    the wait taken out of its impact and said in its title)."""
    rank = finding.location.rank
    wait = next((r["wait_ns"] for r in cross_rank.get("ranks", []) if r["rank"] == rank), 0) or 0
    if not wait:
        return None
    device = finding.location.device
    waiting = wait if device is None else waiting_exposed(run, rank, device)
    if not waiting:
        return None
    if 2 * waiting >= finding.impact_ns:
        return JOB_RULE, None
    if device is None:  # the host's exposed time: where its wait lies in it is not measured, so it stays whole
        return None
    rest = finding.impact_ns - waiting
    if not analysed_ns or rest / analysed_ns < THRESHOLDS["EXPOSED_SHARE_MIN"]:
        return JOB_RULE, None
    values = {**finding.evidence.values, "waiting_ns": waiting}
    return JOB_RULE, dataclasses.replace(
        finding, title=_device_title(device, finding.impact_ns, values.get("collectives") or [], waiting),
        impact_ns=rest, impact_share=round(min(rest / analysed_ns, 1.0), 6), severity=severity_for(rest / analysed_ns),
        saving_bound_ns=min(finding.saving_bound_ns, rest), evidence=dataclasses.replace(finding.evidence, values=values))


def waiting_exposed(run, rank: int, device: int) -> int:
    """The ns of a device's exposed communication (device_time: a collective kernel runs, no compute
    kernel does, within the analysed window) in which its collectives waited for the last rank to
    arrive (ranks.wait_intervals)."""
    waits = ranks.wait_intervals(run, rank).get(device)
    if not waits:
        return 0
    unions = metrics.device_unions_many(run, [rank]).get(rank, {}).get(device)
    exposed = metrics.Coverage(device_time.difference(waits, unions["compute"].tolist() if unions else []))
    return sum(exposed.within(lo, hi) for _, lo, hi in device_time.windows_many(run, [rank]).get(rank, []))


def _device_title(device: int, exposed: int, named: list[dict], waiting: int = 0) -> str:
    """'303.52 ms of communication not overlapped with compute on device 1: …', or with `waiting`
    taken out: '198.73 ms … on device 1 (303.52 ms exposed, 104.80 ms of it waiting for the last rank
    to arrive: collective-wait's): …' (the collectives named are parts of the exposed time)."""
    head = f"{ms(exposed - waiting)} of communication not overlapped with compute on device {device}"
    if waiting:
        head += f" ({ms(exposed)} exposed, {ms(waiting)} of it waiting for the last rank to arrive: {JOB_RULE}'s)"
    return head + (f": {_named(named)}" if named else "")


GENERIC = ("Overlap collectives with compute: DDP gradient bucketing (bucket_cap_mb), async collectives (async_op=True, "
           "wait later), FSDP prefetch; reduce traffic with gradient compression or fewer, larger all-reduces.")
"""The advice where no kind of collective holds most of the exposed time (or none says what it is)."""
BY_KIND = {
    "all-reduce": ("All-reduces (data parallelism's gradients): overlap them with the backward (DDP's gradient buckets: "
                   "bucket_cap_mb, gradient_as_bucket_view=True; async_op=True and wait later for your own), and send fewer "
                   "bytes (bf16 gradients through a DDP communication hook, bf16_compress_hook) or fewer, larger all-reduces."),
    "all-gather": ("All-gathers and reduce-scatters (FSDP's parameters and gradients): prefetch them (FSDP's "
                   "forward_prefetch=True and backward_prefetch=BACKWARD_PRE; FSDP2 prefetches by default), wrap larger units "
                   "(fewer, larger collectives), or keep them inside a node (HYBRID_SHARD)."),
    "all-to-all": ("All-to-alls (embedding or expert sharding): overlap them with compute (TorchRec's TrainPipelineSparseDist "
                   "sends the next batch's features during this one; expert parallelism's dispatch beside the shared experts), "
                   "balance the shards (the slowest rank sets every rank's wait: collective-wait says how long), and send "
                   "fewer bytes (fp16/bf16 or quantised communication)."),
    "send/recv": ("Point-to-point sends (pipeline parallelism): more micro-batches per step, or an interleaved schedule, "
                  "to shrink the pipeline's bubble."),
    "broadcast": ("Broadcasts: DistributedDataParallel broadcasts its buffers at every forward (broadcast_buffers=False where "
                  "the ranks' buffers need not match); others move parameters or inputs that each rank could load itself."),
}
BY_KIND_KEY = {"reduce-scatter": "all-gather"}
"""FSDP's two collectives, one advice: counted together."""


def _advice(named: list[dict]) -> str:
    """The advice for the exposed collectives by what they do (vocab.collective_kind), where one kind
    holds at least half of the named time: a TorchRec all-to-all (send/recv kernels of
    `All2All_Pooled_Req`, HTA's trace_diff trace) was told DDP's buckets and fewer all-reduces; else GENERIC."""
    by: dict[str, int] = {}
    for x in named:
        kind = collective_kind(x.get("collective"), x.get("op"))
        if kind is not None:
            key = BY_KIND_KEY.get(kind, kind)
            by[key] = by.get(key, 0) + int(x.get("ns") or 0)
    total = sum(int(x.get("ns") or 0) for x in named)
    kind = max(by, key=lambda k: (by[k], k)) if by else None
    return BY_KIND[kind] if kind is not None and total and by[kind] * 2 >= total else GENERIC


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
                title=_device_title(d["device"], exposed, named),
                impact_ns=exposed, saving_bound_ns=exposed,
                location=Location(device=d["device"], op=top.get("op"), kernel=top.get("collective"), source=top.get("source"),
                                  steps=[s["step"] for s in d["steps"] if s["communication_ns"]]),
                sql=device_time.exposed_sql(ctx.rank, d["device"]),
                values={"communication_ns": exposed, "window_ns": d["window_ns"],
                        "collectives": [{k: x[k] for k in ("collective", "op", "source", "ns", "kernels")} for x in named]},
                sample_event_ids=[x["sample_id"] for x in named[:3]], uses_source=True,
                recommendation=(f"Exposed per step: {per_step}. " if per_step else "") + _advice(named),
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
