"""critical-path: the items that bound the steps, from each step's critical path.

The critical path (analyzers/critical_path.py, docs/METRICS.md "Critical path") charges every
nanosecond of every profiler step to one item. This rule groups the charged time by item — a
kernel, copy or collective with the top-level operator that launched it and its statement; a
top-level operator (or Python call, runtime call) and its statement on the host; a device idle
gap with its cause — and names the heaviest, at most MAX_ITEMS per rank, each at least
ITEM_SHARE_MIN of step time, with what to try where the evidence shows it: fp32 GEMMs → bf16
autocast or TF32; NCHW convolutions (4-d input, kernel not NHWC) → channels_last; many short
kernels → fusion / torch.compile; copies → pinned memory and
non_blocking; launch overhead and host time → CUDA graphs, torch.compile, fewer `.item()` calls;
input pipeline → DataLoader workers. Impact: the item's charged ns on the path over all steps
(time off the path, e.g. CPU work while the device bounds the step, is not counted). Saving
bound: per step, the charged ns, but no more than the step's duration minus the work of the
other resource, which then becomes critical (`critical_path.saving_bound`, docs/METRICS.md
"Saving bound": without a kernel the device still has its other work; without host time the
device's busy time stays). The evidence query
reads `analysis/critical_path.parquet`, which `analyze` writes. Not applicable without steps, or
on a CPU-only run (every step is then host-bound by its operators, which `hotspot` names; the
summary still gives the bound).
"""

from __future__ import annotations

import json
import re

from ...vocab import CONV_KERNEL_RE, GEMM_KERNEL_RE, SYNC_OPS, is_sync_call_name
from .. import critical_path as cp
from ..engine import Context, NotApplicable
from ..model import Location
from ._util import ms, pct, q

RULE_ID = "critical-path"
TITLE = "Critical path: what bounds the step"
CATEGORY = "hotspot"
SCOPE = "rank"
THRESHOLDS = {
    "ITEM_SHARE_MIN": 0.02,  # an item's charged time / step time
    "MAX_ITEMS": 5,  # findings per rank
    "SMALL_KERNELS_PER_STEP": 10,  # a kernel item with at least this many events per step...
    "SMALL_KERNEL_NS": 20_000,  # ...each charged less than this on average: many small kernels
}
GEMM = GEMM_KERNEL_RE
FP32 = re.compile(r"(?i)(sgemm|f32|fp32|tf32|float(?!16))")
CONV = CONV_KERNEL_RE
NHWC = re.compile(r"(?i)(nhwc|channels_?last)")
LOWER = re.compile(r"(?i)(bf16|fp16|half|h884|h1688|h16816|bfloat|f16)")
DEVICE = ("device_compute", "communication", "memcpy")


def _items_sql(src: str, rank: int, where: str = "TRUE") -> str:
    """Charged ns per item of a rank's path (`src`: the path table): `critical_path.path_items` in SQL, the evidence."""
    dev = ", ".join(q(c) for c in DEVICE + ("idle",))
    return f"""SELECT * FROM (SELECT p.category,
  CASE WHEN p.category IN ({dev}) THEN e.name ELSE coalesce(o.name, e.name) END AS item,
  o.name AS op, p.source_frame_id AS frame_id, p.cause,
  sum(p.charged_ns)::BIGINT AS charged_ns, count(DISTINCT p.event_id) AS events, count(DISTINCT p.step) AS steps,
  min(p.event_id) AS sample_id, any_value(e.module_path) AS module_path, any_value(o.args) AS op_args
FROM {src} p LEFT JOIN events e ON e.event_id = p.event_id LEFT JOIN events o ON o.event_id = e.top_op_id
WHERE p.rank = {int(rank)} GROUP BY ALL) WHERE {where}"""


def _first_input_rank(op_args: str | None) -> int | None:
    """The number of dimensions of an operator's first input (its Kineto `Input Dims`), if recorded."""
    try:
        dims = (json.loads(op_args or "{}") or {}).get("Input Dims") or []
    except (TypeError, ValueError):
        return None
    return len(dims[0]) if dims and isinstance(dims[0], list) else None


def _advice(it: dict, step_count: int) -> str:
    cat, item, op = it["category"], it["item"] or "", it["op"] or ""
    per_step = it["events"] / max(step_count, 1)
    if cat == "device_compute":
        tips = []
        if (GEMM.search(item) or GEMM.search(op)) and (FP32.search(item) or "float" in (it["op_args"] or "")) and not LOWER.search(item):
            tips.append("fp32 GEMMs: run them in bf16 under torch.autocast(device_type='cuda', dtype=torch.bfloat16), or allow TF32 "
                        "(torch.set_float32_matmul_precision('high')) on GPUs with Tensor Cores")
        if (CONV.search(op) or CONV.search(item)) and not NHWC.search(item) and _first_input_rank(it["op_args"]) == 4:
            tips.append("NCHW convolutions: convert the model and its inputs to channels_last "
                        "(model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)) so that "
                        "cuDNN / MIOpen use their NHWC Tensor Core kernels")
        if per_step >= THRESHOLDS["SMALL_KERNELS_PER_STEP"] and it["charged_ns"] / max(it["events"], 1) < THRESHOLDS["SMALL_KERNEL_NS"]:
            tips.append(f"{per_step:.0f} short kernels per step: fuse them (torch.compile the module, fused or foreach implementations)")
        if not tips:
            tips.append("this kernel bounds the step: make it cheaper (lower precision, shapes that are multiples of 8) or run it less often")
        return "; ".join(tips) + "."
    if cat == "communication":
        return ("A collective bounds the step: overlap it with compute (DDP gradient buckets, gradient_as_bucket_view, FSDP "
                "prefetch) or communicate less often (gradient accumulation, larger buckets).")
    if cat == "memcpy":
        return ("Copies on the critical path: keep tensors on the device, pin host memory (DataLoader(pin_memory=True)) and copy "
                "with .to(device, non_blocking=True) so copies overlap compute.")
    if cat == "input_pipeline":
        return "Data loading bounds the step: DataLoader(num_workers>0, pin_memory=True, persistent_workers=True, prefetch_factor)."
    if cat == "idle":
        if (it["cause"] or "").startswith("waiting for its launch"):
            return ("The device waits for the host to launch work: the host is the bottleneck here; CUDA graphs "
                    "(torch.compile(mode='reduce-overhead')) or torch.compile to launch fewer kernels.")
        return "The device waits on another stream or between kernels: overlap independent work across streams."
    if item in SYNC_OPS or (cat == "launch_overhead" and is_sync_call_name(item)):
        return ("The host waits on the device here: fewer .item() / float(t) / data-dependent branches in the loop; log "
                "metrics every N steps; keep values on the device.")
    if cat == "launch_overhead":
        return ("Launch overhead bounds the step: CUDA graphs (torch.compile(mode='reduce-overhead') or torch.cuda.graphs), "
                "torch.compile to fuse kernels, or a larger batch per launch.")
    return ("Host time bounds the step: torch.compile cuts Python and dispatcher overhead, CUDA graphs remove per-kernel "
            "launches, a larger batch amortises both; fewer .item() calls keep the host from waiting.")


def _describe(it: dict) -> str:
    cat, item = it["category"], it["item"]
    if item is None:
        return "host time outside every traced call (Python)"
    short = item if len(item) <= 70 else item[:67] + "…"
    if cat in DEVICE:
        kind = {"device_compute": "kernel", "communication": "collective", "memcpy": "copy"}[cat]
        return f"{kind} {short}" + (f" of {it['op']}" if it["op"] else "")
    if cat == "idle":
        return f"device idle ({it['cause']}) before {short}"
    return {"launch_overhead": "launches in ", "input_pipeline": "data loading: "}.get(cat, "") + short


def check(ctx: Context) -> list:
    ctx.require_device()  # on a CPU-only run every step is host-bound by its operators: the hotspot rules name them
    path = cp.path_of(ctx.run, ctx.rank)  # columns, computed once per rank
    if not len(path):
        raise NotApplicable("no profiler steps (ProfilerStep#N ranges): no step to find a critical path in")
    bound = cp.bound(ctx.run, ctx.rank)
    step_count = len(bound["steps"])
    total = int(path.ns.sum())
    items = cp.path_items(ctx.run, path, by_step=True)[:THRESHOLDS["MAX_ITEMS"]]
    parquet = f"read_parquet({q(str(ctx.run.path / 'analysis' / 'critical_path.parquet'))})"
    out = []
    for it in items:
        if not total or it["charged_ns"] / total < THRESHOLDS["ITEM_SHARE_MIN"]:
            continue
        key = " AND ".join(f"{col} IS NOT DISTINCT FROM {q(it[col]) if isinstance(it[col], str) else ('NULL' if it[col] is None else int(it[col]))}"
                           for col in ("category", "item", "op", "frame_id", "cause"))
        sql = _items_sql(parquet, ctx.rank, key)
        source = ctx.source_of(it["frame_id"])
        out.append(ctx.finding(
            title=f"{bound['overall']['words']}; on the critical path: {_describe(it)}"
                  f"{' at ' + source if source else ''} {ms(it['charged_ns'])} ({pct(it['charged_ns'] / total)} of step time)",
            impact_ns=it["charged_ns"], saving_bound_ns=cp.saving_bound(ctx.run, ctx.rank, it),
            location=Location(op=it["op"] or (it["item"] if it["category"] not in DEVICE + ("idle",) else None),
                              kernel=it["item"] if it["category"] in DEVICE else None, source=source,
                              module_path=it["module_path"], steps=[s["step"] for s in bound["steps"]]),
            sql=sql, values={"charged_ns": it["charged_ns"], "events": it["events"], "category": it["category"],
                             "bound": bound["overall"]["bound"], "path_ns": total},
            sample_event_ids=[it["sample_id"]] if it["sample_id"] is not None else [], uses_source=True,
            recommendation=_advice(it, step_count)))
    return out
