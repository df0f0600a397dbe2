"""launch-overhead: many short kernels, each paying a launch.

Counts kernels shorter than SHORT_KERNEL_NS on each device. When there are many per step and
they make up most kernels, the time the host spends in their launch calls (the runtime call that
launched each one, `launch_id`) is the cost: the device finishes each kernel faster than the host
can issue the next. Impact: host time in the launch calls of the short kernels. Saving bound: the
same (fusion, torch.compile or CUDA graphs remove most launches).
"""

from __future__ import annotations

from ..engine import Context
from ..model import Location
from ._util import ms, no_device, row

RULE_ID = "launch-overhead"
TITLE = "Kernel launch overhead: many short kernels"
CATEGORY = "launch_overhead"
SCOPE = "rank"
THRESHOLDS = {
    "SHORT_KERNEL_NS": 10_000,  # a kernel shorter than this is 'short'
    "SHORT_KERNELS_PER_STEP_MIN": 100,  # at least this many short kernels per step (or in total without steps)
    "SHORT_KERNEL_FRACTION_MIN": 0.5,  # and at least this fraction of all kernels
}


def screen(run, summaries: dict) -> set[int]:
    """Ranks without a device (not applicable) and those with a device whose short kernels pass
    both of the check's counts."""
    t = THRESHOLDS
    out = no_device(summaries)
    for r, d, short, kernels in run.sql(f"SELECT rank, device, count(*) FILTER (WHERE dur_ns < {t['SHORT_KERNEL_NS']}), count(*) "
                                        "FROM events WHERE kind = 'kernel' GROUP BY rank, device").fetchall():
        if r in summaries and kernels and short / max(summaries[r]["steps"]["count"], 1) >= t["SHORT_KERNELS_PER_STEP_MIN"] \
                and short / kernels >= t["SHORT_KERNEL_FRACTION_MIN"]:
            out.add(r)
    return out


def check(ctx: Context) -> list:
    ctx.require_device()
    out = []
    steps = max(ctx.summary["steps"]["count"], 1)
    for dev in ctx.summary["devices"]:
        d = dev["device"]
        sql = f"""SELECT count(*) FILTER (WHERE k.dur_ns < {THRESHOLDS['SHORT_KERNEL_NS']}) AS short_kernels, count(*) AS kernels,
  coalesce(sum(k.dur_ns) FILTER (WHERE k.dur_ns < {THRESHOLDS['SHORT_KERNEL_NS']}), 0)::BIGINT AS short_kernel_ns,
  coalesce(sum(l.dur_ns) FILTER (WHERE k.dur_ns < {THRESHOLDS['SHORT_KERNEL_NS']}), 0)::BIGINT AS launch_ns,
  min(k.event_id) FILTER (WHERE k.dur_ns < {THRESHOLDS['SHORT_KERNEL_NS']}) AS sample_id
FROM events k LEFT JOIN events l ON l.event_id = k.launch_id
WHERE k.rank = {ctx.rank} AND k.device = {d} AND k.kind = 'kernel'"""
        v = row(ctx.run, sql)
        if not v["kernels"] or v["short_kernels"] / steps < THRESHOLDS["SHORT_KERNELS_PER_STEP_MIN"] \
                or v["short_kernels"] / v["kernels"] < THRESHOLDS["SHORT_KERNEL_FRACTION_MIN"]:
            continue
        top = row(ctx.run, f"""SELECT o.name AS op, any_value(k.source_frame_id) AS frame_id, count(*) AS n FROM events k JOIN events o ON o.event_id = k.top_op_id
            WHERE k.rank = {ctx.rank} AND k.device = {d} AND k.kind = 'kernel' AND k.dur_ns < {THRESHOLDS['SHORT_KERNEL_NS']}
            GROUP BY o.name ORDER BY n DESC LIMIT 1""")
        out.append(ctx.finding(
            title=f"{v['short_kernels']} short kernels on device {d} ({v['short_kernels'] // steps}/step), {ms(v['launch_ns'])} launching them",
            impact_ns=v["launch_ns"], saving_bound_ns=v["launch_ns"],
            location=Location(device=d, op=top["op"], source=ctx.source_of(top["frame_id"])),
            sql=sql, values={k: v[k] for k in ("short_kernels", "kernels", "short_kernel_ns", "launch_ns")},
            sample_event_ids=[v["sample_id"]] if v["sample_id"] else [], uses_source=True,
            recommendation=f"Most kernels run under {THRESHOLDS['SHORT_KERNEL_NS'] // 1000} us, so launches dominate"
            + (f" (most under {top['op']})" if top["op"] else "") + ". Fuse them: torch.compile, CUDA graphs "
            "(torch.cuda.graphs / mode='reduce-overhead'), foreach/fused optimizers, larger batches.",
        ))
    return out
