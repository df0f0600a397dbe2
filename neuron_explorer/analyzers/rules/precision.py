"""precision: float32 matrix multiplies and convolutions on a device with faster low-precision units.

Finds matmul and convolution operators (vocab.LOWER_PRECISION_CANDIDATE_OPS: aten::mm, addmm, bmm,
baddbmm, matmul, linear, conv*, convolution and its cudnn, miopen and mkldnn forms) whose
recorded input types are float32 ('float'; needs record_shapes=True) and the kernels they
launched, on devices with tensor cores (compute capability 7.0 and newer in the device properties),
or whose architecture (analyzers/peaks.py detect) has lower-precision matrix units and reports no
compute capability (AWS Trainium, TorchNeuron's PrivateUse1 device 'neuron', Meta MTIA). Impact: device time of those kernels. Saving bound: half
of it (bf16/fp16 or TF32 usually runs these at least 2x faster). The advice fits the device
(analyzers/peaks.py precision_advice): fp16 autocast with GradScaler on V100/T4, bf16 autocast or
TF32 on A100 and later, FP8 where the device has it, torch.autocast(device_type='neuron') on TorchNeuron;
TF32 is not advised where the kernels' names say they run it already (vocab.kernel_runs_tf32:
`tf32_kernel_ns`), only for the matrix kernels that run plain fp32 (`plain_matrix_kernel_ns`). Not applicable without device events,
without dtype information, or on devices without such units.
One cause, one finding: where critical-path reports the rank's fp32 GEMM/convolution class, that
finding names this cause with the time it holds on the steps' critical path, and this one is left to
it (`leaves_to`): v100_resnet50_torch19_memory's forward convolutions ran 126.97 ms here, charged 0 ns
on the path, beside the path's 239.34 ms of fp32 convolutions with the same advice.
"""

from __future__ import annotations

import json

from ...vocab import LOWER_PRECISION_CANDIDATE_OPS, is_matrix_kernel_sql, kernel_runs_tf32_sql, op_in
from .. import peaks as P
from ..engine import Context, NotApplicable
from ..metrics import rank_entry
from ..model import Location
from ..rank_rows import RankQuery
from ..rank_rows import rows as rank_rows
from ..utilisation import rank_work, rows_if_args_named
from . import critical_path as critical_path_rule
from ._util import ms

RULE_ID = "precision"
TITLE = "float32 matmul/convolution where lower precision is faster"
CATEGORY = "precision"
SCOPE = "rank"
THRESHOLDS = {
    "MIN_COMPUTE_MAJOR": 7,  # NVIDIA compute capability with tensor cores
    "FP32_SHARE_MIN": 0.05,  # fp32 matmul/conv kernel time / analysed time
    "SAVING_FRACTION": 0.5,  # assumed saving bound of moving to bf16/fp16/TF32
}


_TYPED = f"{op_in(LOWER_PRECISION_CANDIDATE_OPS)} AND args LIKE '%\"Input type\"%'"
_FP32 = f"""k.kind = 'kernel' AND {op_in(LOWER_PRECISION_CANDIDATE_OPS, 'o')}
  AND regexp_matches(json_extract_string(o.args, '$."Input type"[0]'), '^float$')"""
_TF32 = kernel_runs_tf32_sql("k.name")
_PLAIN = f"{is_matrix_kernel_sql('k.name')} AND NOT {_TF32}"
_SPLIT = (f"coalesce(sum(k.dur_ns) FILTER (WHERE {_TF32}), 0)::BIGINT AS tf32_kernel_ns, "
          f"coalesce(sum(k.dur_ns) FILTER (WHERE {_PLAIN}), 0)::BIGINT AS plain_matrix_kernel_ns")
"""The kernels whose names say they run TF32 already, and the matrix kernels that run plain fp32."""
_FIGURES = "coalesce(sum(k.dur_ns), 0)::BIGINT AS fp32_kernel_ns, count(*) AS kernels, count(DISTINCT o.event_id) AS ops, " + _SPLIT


def _has_properties(run, ranks) -> bool:
    """Whether a rank of `ranks` has device properties (without them the check asks nothing)."""
    return any(rank_entry(run, r).get("device_properties") for r in ranks)


TYPED = RankQuery("precision_typed", f"SELECT 1 FROM events WHERE rank = ? AND {_TYPED} LIMIT 1",
                  f"SELECT DISTINCT rank, 1 FROM events WHERE {_TYPED} ORDER BY rank", when=_has_properties)
"""A row (1) where the rank has a matmul/convolution with recorded input types: the first found
ends the read of the operators' args."""
_BY_OP = ("o.name, coalesce(sum(k.dur_ns), 0)::BIGINT AS fp32_kernel_ns, count(*) AS kernels, count(DISTINCT o.event_id) AS ops, "
          "mode(o.source_frame_id) AS frame_id, min(k.event_id) AS sample_id, " + _SPLIT)
FP32 = RankQuery("precision_fp32", f"SELECT {_BY_OP} FROM events k JOIN events o ON o.event_id = k.op_id WHERE k.rank = ? AND {_FP32} "
                                   "GROUP BY o.name ORDER BY 2 DESC, 1",
                 f"SELECT k.rank, {_BY_OP} FROM events k JOIN events o ON o.event_id = k.op_id WHERE {_FP32} GROUP BY k.rank, o.name "
                 "ORDER BY 1, 3 DESC, 2", when=_has_properties)
"""The float32 matmul/convolution kernels' figures (`_FIGURES`) per operator name, the heaviest
first, with its commonest source line and a sample kernel: one read of the operators' args gives
the rule's figures (summed over the names) and the operator it names."""
RANK_QUERIES = (TYPED, FP32)
"""The operators with recorded input types, and the float32 kernels' figures, for a batch of ranks at once."""


def check(ctx: Context) -> list:
    ctx.require_device()
    # the rows of the `devices` view, read from the manifest it is made of (a query per rank costs more than the check)
    props = [json.loads(json.dumps(p)) for p in rank_entry(ctx.run, ctx.rank).get("device_properties") or []]
    if not props:
        raise NotApplicable("no device properties in the trace: cannot tell whether the device has tensor cores")
    work = rank_work(ctx.run, ctx.rank)
    detected = work.detected.arch if work.detected else None
    # devices with no compute capability (Trainium, TorchNeuron's 'neuron', MTIA) count by their architecture's matrix units
    fast = [p for p in props if (p.get("computeMajor") or 0) >= THRESHOLDS["MIN_COMPUTE_MAJOR"]
            or detected is not None and detected.vendor not in ("nvidia", "amd") and detected.matrix_dtypes]
    if not fast:
        raise NotApplicable("device properties show no tensor-core device (compute capability >= 7.0) and no architecture "
                            "with lower-precision matrix units")
    if not rows_if_args_named(ctx.run, TYPED, ctx.rank):
        raise NotApplicable("no input dtypes recorded for matmul/convolution operators (record_shapes=True)")
    sql = f"""SELECT {_FIGURES}
FROM events k JOIN events o ON o.event_id = k.op_id
WHERE k.rank = {ctx.rank} AND {_FP32}"""
    by_op = rank_rows(ctx.run, FP32, ctx.rank)  # no row: no such kernel (what `sql` gives as 0, 0, 0)
    v = {"fp32_kernel_ns": sum(r[1] for r in by_op), "kernels": sum(r[2] for r in by_op), "ops": sum(r[3] for r in by_op),
         "tf32_kernel_ns": sum(r[6] for r in by_op), "plain_matrix_kernel_ns": sum(r[7] for r in by_op)}
    if not ctx.analysed_ns or v["fp32_kernel_ns"] / ctx.analysed_ns < THRESHOLDS["FP32_SHARE_MIN"]:
        return []
    top = dict(zip(("name", "frame_id", "sample_id"), (by_op[0][0], by_op[0][4], by_op[0][5])))
    arch = (work.detected.arch if work.detected else None) or P.arch_of(work.peak, fast[0].get("name"))
    return [ctx.finding(
        title=f"float32 {top['name']} and similar ops run {ms(v['fp32_kernel_ns'])} on a {fast[0].get('name', 'tensor-core device')}",
        impact_ns=v["fp32_kernel_ns"], saving_bound_ns=int(v["fp32_kernel_ns"] * THRESHOLDS["SAVING_FRACTION"]),
        location=Location(op=top["name"], source=ctx.source_of(top["frame_id"])),
        sql=sql, values=v, sample_event_ids=[top["sample_id"]], uses_source=True,
        recommendation="Use the matrix units: " + _advice(arch, v) + ".",
    )]


def _advice(arch, v: dict) -> str:
    """peaks.precision_advice, with TF32 left out for the kernels whose names say they run it already."""
    if not v["tf32_kernel_ns"]:
        return P.precision_advice(arch)
    plain = v["plain_matrix_kernel_ns"]
    return P.precision_advice(arch, tf32_already=True, not_tf32=f"{ms(plain)} of these kernels" if plain else "")


def leaves_to(finding) -> list:
    """critical-path's fp32 GEMM/convolution class on the same rank names this cause, with the time
    it holds on the steps' critical path (engine.leave_to_owners): this finding is left to it."""
    return critical_path_rule.owns_fp32_work()
