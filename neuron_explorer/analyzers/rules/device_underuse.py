"""device-underuse: heavy matrix kernels far below the device's roofline for their shape.

Per rank with a known device peak (analyzers/peaks.py), over kernels of matrix operators
(GEMM, convolution, attention; vocab.MATRIX_OPS) grouped by kernel name: a group is
under-used when its device time is at least TIME_SHARE_MIN of the analysed time and its achieved
FLOP/s is below EFFICIENCY_MAX of the roofline bound it could reach (min(peak, intensity x peak
bandwidth); analyzers/utilisation.py), where the peak is that of its dtype, or of bf16 (fp16 on
devices without bf16) for fp32 work on devices whose matrix units make that at least
TENSOR_CORE_RATIO times faster. The finding names the heaviest such kernel, its operator
and source line, and the reasons its evidence shows: fp32 work on a device whose bf16 peak is
(fp16 where it has no bf16) at least 4x its fp32 peak (the autocast, TF32 and FP8 advice of its
architecture: peaks.precision_advice; not TF32 for a kernel whose name says it runs TF32 already,
vocab.kernel_runs_tf32), GEMM dimensions that are not multiples of 8 (pad them),
tiny GEMMs (M or N below 64: batch more work per call); with none of those, fused attention is told
what keeps it from the peak (ATTENTION_WORDS) and other matrix work a kernel tuned for its shapes;
`causes` in the evidence names them ('precision', 'alignment', 'small', 'attention', 'kernel').
Impact: the group's device time. Saving bound: its time less the time its FLOPs would take at
the roofline bound of the dtype it could use (the bf16 bound for fp32 work on such devices).
One cause, one finding: a group whose one cause is its fp32 work is left to critical-path's fp32
GEMM/convolution class where that rule reports the rank (`leaves_to`), which names the same fix with
the time the fp32 work holds on the steps' critical path (v100_resnet50_torch19_memory: dgrad_engine's
80.68 ms here, 80.27 ms of it inside the path's 239.34 ms of fp32 convolutions); and a group of
matrix products on the statement of critical-path's finding on hand-written attention is left to that
finding, whose fix removes them (scaled_dot_product_attention), not padding.
"""

from __future__ import annotations

import json

from ...vocab import ATTENTION_BACKWARD_OPS, ATTENTION_OPS, ATTENTION_PRODUCT_OPS, GEMM_OPS, MATRIX_OPS, kernel_runs_tf32
from .. import peaks as P
from ..engine import Context, NotApplicable
from ..model import Location
from ..utilisation import kernel_table, rank_work, roofline
from . import critical_path as critical_path_rule
from ._util import FUSED_ATTENTION_LEFT, ms, pct, q

RULE_ID = "device-underuse"
TITLE = "Device under-used by matrix kernels"
CATEGORY = "hotspot"
SCOPE = "rank"
THRESHOLDS = {
    "TIME_SHARE_MIN": 0.05,  # the kernel group's device time / analysed time
    "EFFICIENCY_MAX": 0.30,  # achieved / roofline bound below this is under-used
    "TENSOR_CORE_RATIO": 4.0,  # bf16 peak / fp32 peak at or above this: fp32 work leaves matrix units idle
    "SMALL_DIM": 64,  # GEMMs with M or N below this are too small to fill the device
}


ATTENTION_WORDS = ("fused attention falls short of the matrix units' peak where each call's work is small: short sequences, few "
                   "heads or a small head dimension (its FLOPs grow with batch x heads x length^2 x head dimension); batch more "
                   "sequences per call, " + FUSED_ATTENTION_LEFT)
"""The words for fused attention (vocab.ATTENTION_OPS) below the roofline with no shape or precision to
fix: its finding gave only where the peak came from (h100 Qwen1.5 chat: 'aten::scaled_dot_product_attention
kernels reach 19.3% of the roofline', no advice)."""


def _shape_reasons(ctx: Context, event_id: int) -> tuple[list[tuple[str, str]], dict]:
    """The reasons an operator's shapes give, as (cause, words): 'alignment', 'small'."""
    got = ctx.run.sql("SELECT name, args, source_frame_id FROM events WHERE event_id = ?", [event_id]).fetchone()
    if not got:
        return [], {}
    name, args, frame = got
    try:
        dims = (json.loads(args) or {}).get("Input Dims") or []
    except (TypeError, ValueError):
        dims = []
    reasons = []
    mats = [d for d in dims if isinstance(d, list) and len(d) >= 2]
    if name in GEMM_OPS and len(mats) >= 2:
        a, b = mats[-2], mats[-1]
        m, k = a[-2], a[-1]
        n = b[0] if name == "aten::linear" else b[-1]
        if any(int(x) % 8 for x in (m, k, n)):
            reasons.append(("alignment", f"GEMM dimensions {m}x{k}x{n} are not all multiples of 8: pad them (or the batch) to "
                                         "multiples of 8/16"))
        if min(m, n) < THRESHOLDS["SMALL_DIM"]:
            reasons.append(("small", f"the GEMM is small ({m}x{k}x{n}): batch more rows per call (larger batch, fused heads)"))
    return reasons, {"shapes": mats, "frame_id": frame}


def check(ctx: Context) -> list:
    t = THRESHOLDS
    ctx.require_device()
    work = rank_work(ctx.run, ctx.rank)
    if work.peak is None:
        raise NotApplicable(f"no peak known for device {work.device_name or '(unnamed)'}: give --peak-tflops/--peak-gbps")
    half = "bf16" if work.peak.tflops.get("bf16") else "fp16"
    low, fp32 = work.peak.tflops.get(half), work.peak.tflops.get("fp32")
    tensor_cores = bool(low and fp32 and low / fp32 >= t["TENSOR_CORE_RATIO"])

    def could_use(r) -> str | None:  # the dtype whose roofline the work should be held to
        return half if (r["dtype"] == "fp32" and tensor_cores) else r["dtype"]

    rows = []
    for r in kernel_table(work, limit=50):
        if r["op"] not in MATRIX_OPS or not r["dur_ns"]:
            continue
        bound = roofline(work.peak, could_use(r), r["flops"], r["bytes"], r["dur_ns"])["bound_tflops_per_s"]
        if bound and r["tflops_per_s"] is not None:
            rows.append({**r, "target_dtype": could_use(r), "target_tflops_per_s": bound, "target_efficiency": r["tflops_per_s"] / bound})
    heavy = [r for r in rows if ctx.analysed_ns and r["dur_ns"] / ctx.analysed_ns >= t["TIME_SHARE_MIN"]
             and r["target_efficiency"] < t["EFFICIENCY_MAX"]]
    if not heavy:
        return []
    top = heavy[0]
    sample = work.first_kernel(top["kernel"])
    reasons, shape = _shape_reasons(ctx, sample["op_event_id"])
    if top["target_dtype"] != top["dtype"]:
        arch = (work.detected.arch if work.detected else None) or P.arch_of(work.peak, work.device_name)
        reasons.insert(0, ("precision", f"fp32 work on {work.peak.name}, whose {half} peak is {low:g} TFLOP/s against {fp32:g} for "
                                        "fp32: " + P.precision_advice(arch, tf32_already=kernel_runs_tf32(top["kernel"]))))
    if top["op"] in ATTENTION_OPS | ATTENTION_BACKWARD_OPS and not reasons:
        reasons.append(("attention", ATTENTION_WORDS))
    elif not reasons and top["op"] in GEMM_OPS and len(shape.get("shapes") or []) >= 2 and top["dtype"]:
        # a GEMM whose shapes were read and are aligned and large enough, in the dtype it is held to
        reasons.append(("kernel", f"its shapes are aligned and large enough and it runs {top['dtype']}: what is left is {P.TUNED_GEMM}"))
    best_ns = top["flops"] / (top["target_tflops_per_s"] * 1e12) * 1e9
    saving = max(0, int(top["dur_ns"] - best_ns))
    sql = (f"SELECT k.name AS kernel, o.name AS op, count(*) AS calls, sum(k.dur_ns) AS device_ns, any_value(o.args) AS op_args\n"
           f"FROM events k JOIN events o ON o.event_id = k.op_id WHERE k.rank = {ctx.rank} AND k.kind = 'kernel' "
           f"AND k.name = {q(top['kernel'])} GROUP BY 1, 2")
    return [ctx.finding(
        title=f"{top['op']} kernels reach {pct(top['target_efficiency'])} of the roofline ({top['tflops_per_s']:.1f} of "
              f"{top['target_tflops_per_s']:.1f} TFLOP/s at {top['target_dtype']}; they run {top['dtype'] or 'unknown dtype'}) "
              f"over {ms(top['dur_ns'])}",
        impact_ns=int(top["dur_ns"]), saving_bound_ns=saving,
        location=Location(op=top["op"], kernel=top["kernel"], source=ctx.source_of(shape.get("frame_id"))),
        sql=sql, values={k: top[k] for k in ("kernel", "op", "dtype", "calls", "flops", "bytes", "dur_ns", "tflops_per_s",
                                              "bound_tflops_per_s", "efficiency", "intensity_flops_per_byte", "target_dtype",
                                              "target_tflops_per_s", "target_efficiency")}
        | {"peak": work.peak.to_dict(), "shapes": shape.get("shapes"), "causes": [c for c, _ in reasons]},
        sample_event_ids=[sample["event_id"]], uses_source=True,
        recommendation=("; ".join(words for _, words in reasons) + ". " if reasons else "")
        + f"Peak from {work.peak.source}; FLOPs {sample['how']} from the operator's shapes (docs/METRICS.md).")]



def leaves_to(finding) -> list:
    """A group of matrix products (vocab.ATTENTION_PRODUCT_OPS) on the statement of critical-path's
    finding on hand-written attention (`is_attention_finding`: its products are those of its statement)
    is left to it: that finding names them with the fix that removes them (scaled_dot_product_attention), not
    padding. A group of fused attention with no other cause is left to critical-path's attention class
    where that class names its kernel among its heaviest, and a GEMM with nothing to fix but its kernel
    to the GEMM/convolution class likewise: one finding for one kernel, with its fix.
    A group whose one cause is its fp32 work ('precision' alone in `causes`) is left to
    critical-path's fp32 GEMM/convolution class on the same rank (engine.leave_to_owners), which
    names that fix with the time the fp32 work holds on the critical path; a group with a shape to fix
    stays (critical-path does not name it)."""
    v = finding.evidence.values
    if (cls := {("attention",): "attention", ("kernel",): "matmul"}.get(tuple(v.get("causes") or ()))) is not None:
        # fused attention, or a GEMM with nothing to fix but its kernel: critical-path's attention or GEMM class, where it
        # names the same kernel, says what is left to do (h100 Qwen1.5 chat: flash_fwd_kernel 'reach 19.3% of the roofline'
        # beside 'attention kernels (1 name): 3.57 ms')
        return [(critical_path_rule.RULE_ID, lambda c: c.evidence.values.get("class") == cls
                 and v.get("kernel") in {h.get("item") for h in c.evidence.values.get("heaviest", [])})]
    if v.get("op") in ATTENTION_PRODUCT_OPS and finding.location.source:
        # hand-written attention's products: critical-path's finding on that attention names them with its fix
        # (owlv2 on an H100, TraceLens: aten::bmm 'not all multiples of 8: pad them' beside 'use scaled_dot_product_attention')
        return [(critical_path_rule.RULE_ID, lambda c: c.location.source == finding.location.source
                 and critical_path_rule.is_attention_finding(c))]
    if v.get("causes") != ["precision"]:
        return []
    return critical_path_rule.owns_fp32_work()
