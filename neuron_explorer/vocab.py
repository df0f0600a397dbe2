"""The vocabulary of the analysis: every SQL fragment and name set that defines an idea, once.

In the spirit of Perfetto's standard library: a rule, the summary, the agent tools, `diff` and the
dashboard never spell "top-level operator", "device work", "a collective", "a sync" or "a GEMM"
themselves; they interpolate the fragment or test against the set defined here. Evidence SQL stays
self-contained (the fragment's text is pasted into it, so a user can run it with plain DuckDB).
tests/test_vocabulary.py fails when a module outside this one spells one of these ideas itself.

Fragments take an `alias` (the table alias of `events`, e.g. "e"; "" for none) and return a
boolean SQL expression, parenthesised where it contains OR.

Kineto's *spellings* (category names, arg keys, event-name prefixes) are not ideas of the analysis:
they live in collectors/kineto_names.py, which the importers use.

Must not: import anything but the standard library (every layer may import it), read a run, or
decide what is a problem.
"""

from __future__ import annotations

import re


def sql_literal(s: str) -> str:
    """A SQL string literal (quotes doubled), for paths and names put into DuckDB statements."""
    return "'" + s.replace("'", "''") + "'"


def kinds_sql(kinds) -> str:
    """A SQL list of string literals: ('a', 'b')."""
    return "(" + ", ".join(sql_literal(k) for k in kinds) + ")"


def _a(alias: str) -> str:
    return f"{alias}." if alias else ""


# ---- kinds ---------------------------------------------------------------------------------------

DEVICE_WORK_KINDS = ("kernel", "memcpy", "memset")
"""Kinds whose intervals make a device busy (device work). `sync` and `gpu_annotation` events also
sit on device lanes (schema.DEVICE_LANE_KINDS) but are not work."""
DEVICE_WORK_SQL = kinds_sql(DEVICE_WORK_KINDS)
"""`('kernel', 'memcpy', 'memset')`, for `kind IN …`."""


def device_work(alias: str = "") -> str:
    """An event is device work: a kernel, memcpy or memset."""
    return f"{_a(alias)}kind IN {DEVICE_WORK_SQL}"


TRAINING_PASSES = ("backward", "optimizer")
"""Passes (`events.pass`) that only training runs: a run with none of them is not training (an
inference or evaluation run), and gets no training advice (DataLoader workers, optimizers, ...)."""


def training_work(alias: str = "") -> str:
    """An event is training work: in the backward pass or the optimizer (TRAINING_PASSES)."""
    return f"{_a(alias)}pass IN {kinds_sql(TRAINING_PASSES)}"


def top_op(alias: str = "") -> str:
    """An event is a top-level CPU operator: an operator with no operator around it."""
    a = _a(alias)
    return f"{a}kind = 'cpu_op' AND {a}event_id = {a}top_op_id"


def top_host_call(alias: str = "") -> str:
    """An event is top-level host work: a top-level CPU operator, or a runtime call made outside
    every operator (a bare `torch.cuda.synchronize()`, a copy issued by a library)."""
    a = _a(alias)
    return f"({a}kind = 'cpu_op' AND {a}event_id = {a}top_op_id OR {a}kind = 'runtime' AND {a}top_op_id IS NULL)"


# ---- source lines ---------------------------------------------------------------------------

def line_key(file: str, line: int) -> str:
    """A source line's one key, `file:line`: what a finding's `source`, analyzers/lines.py's rows,
    the agent tools, `diff` and the dashboard name a line by (several frames, e.g. two call paths
    into one statement, share it, and a line's figures add up over them)."""
    return f"{file}:{line}"


def line_key_sql(alias: str = "f") -> str:
    """`line_key` in SQL, over a `frames` alias (NULL where the frame's file is NULL)."""
    a = _a(alias)
    return f"{a}file || ':' || {a}line"


# ---- the tool's own frames --------------------------------------------------------------------

TOOL_FRAME_PATTERN = (r"(^|[/\\])(neuron_explorer|typer|click)[/\\]|(^|[/\\])runpy\.py\(|<frozen runpy>"
                      r"|(^|[/\\])neuron-explorer\(")
"""A Python frame (a `kind = 'python'` event, named 'file(line): function') of the tool that ran
the user's script rather than of the script: `neuron-explorer record` (its CLI, typer, click,
collectors/record.py) and runpy, which start it. Views hide them by default."""


def tool_frame(alias: str = "") -> str:
    """An event is one of the tool's own Python frames (TOOL_FRAME_PATTERN)."""
    a = _a(alias)
    return f"({a}kind = 'python' AND regexp_matches({a}name, {sql_literal(TOOL_FRAME_PATTERN)}))"


# ---- steady steps (the selection itself is analyzers.metrics.steady_steps) ----------------------

def in_steps(steps, alias: str = "") -> str:
    """An event lies in one of `steps` (e.g. the steady steps); FALSE for none."""
    steps = [int(s) for s in steps]
    return f"{_a(alias)}step IN ({', '.join(map(str, steps))})" if steps else "FALSE"


# ---- communication -------------------------------------------------------------------------------

COMM_KERNEL_PATTERN = "(?i)(nccl|gloo|rccl)"
"""A device kernel is a collective when its name matches this (regexp, case-insensitive)."""
COMM_OP_PATTERN = "^(c10d::|c10d_functional::|_c10d_functional::|record_param_comms$|gloo:|nccl:)"
"""A CPU operator is a collective when its name matches this regexp."""
COMM_KERNEL_RE = re.compile(COMM_KERNEL_PATTERN[4:], re.IGNORECASE)
COMM_OP_RE = re.compile(COMM_OP_PATTERN)


def comm_kernel(alias: str = "") -> str:
    """An event is a collective kernel (any stream)."""
    a = _a(alias)
    return f"{a}kind = 'kernel' AND regexp_matches({a}name, {sql_literal(COMM_KERNEL_PATTERN)})"


def comm_op(alias: str = "") -> str:
    """An event is a collective CPU operator (c10d, record_param_comms)."""
    a = _a(alias)
    return f"{a}kind = 'cpu_op' AND regexp_matches({a}name, {sql_literal(COMM_OP_PATTERN)})"


def is_comm_kernel_name(name: str | None) -> bool:
    return bool(name) and COMM_KERNEL_RE.search(name) is not None


# ---- synchronisation -----------------------------------------------------------------------------

SYNC_CALL_PART = "Synchronize"
"""Part of the name of every runtime call that waits for a device (cudaDeviceSynchronize,
cudaStreamSynchronize, cudaEventSynchronize, hipDeviceSynchronize, cuStreamSynchronize, ...). A
PrivateUse1 backend names its runtime calls itself: a sync is found only where its name has this
part (PRIVATEUSE1_RUNTIME_CALLS lists the names known, none of them a sync)."""
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero")
"""Operators that read a device value on the host (`.item()`, `float(t)`, `if t:`, a data-dependent
shape): a host sync when the tensor is on a device (a runtime sync or blocking copy beneath)."""
MEMCPY_CALL_PARTS = ("Memcpy", "memcpy")
"""Parts of the name of a runtime copy call (cudaMemcpy, hipMemcpyAsync, ...)."""
PRIVATEUSE1_RUNTIME_CALLS = {
    "neuronLaunchKernel": "launch",
    "nrt_execute": "device work",
}
"""The PrivateUse1 runtime and driver event names known (tests/native_fixture/neuron_backend.cpp,
shaped as TorchNeuron's: `privateuse1_runtime` launches, `privateuse1_driver` device work per
stream), with what each is. Besides these it emits `neuron::<op>` runtime calls and `nrt_<op>`
kernels named after the operator. None is a sync, a runtime copy or an allocator call: the
fragments below select none of them (tests/test_vocabulary.py), and a launch is found by the launch
flow and `collectors/kineto_names.LAUNCH_CALL`, which matches `neuronLaunchKernel`."""


def sync_call(alias: str = "") -> str:
    """An event is a runtime call that waits for a device."""
    a = _a(alias)
    return f"{a}kind = 'runtime' AND contains({a}name, {sql_literal(SYNC_CALL_PART)})"


def is_sync_call_name(name: str | None) -> bool:
    return bool(name) and SYNC_CALL_PART in name


def sync_op(alias: str = "") -> str:
    """An event is one of SYNC_OPS."""
    return f"{_a(alias)}kind = 'cpu_op' AND {_a(alias)}name IN {kinds_sql(SYNC_OPS)}"


def is_memcpy_call_name(name: str | None) -> bool:
    return bool(name) and any(p in name for p in MEMCPY_CALL_PARTS)


def memcpy_call(alias: str = "") -> str:
    """An event's name is a runtime copy call's (cudaMemcpyAsync, hipMemcpyWithStream, ...); combine with kind = 'runtime'."""
    a = _a(alias)
    return "(" + " OR ".join(f"contains({a}name, {sql_literal(p)})" for p in MEMCPY_CALL_PARTS) + ")"


TO_HOST_COPY_PATTERN = r"(?i)(DtoH|D2H|Device ?-> ?(Host|Pageable|Pinned)|DeviceToHost)"
"""A device copy (kind 'memcpy') whose name says it goes from a device to the host: Kineto's
`Memcpy DtoH (Device -> Pageable)`, `Memcpy DtoH (Device -> Pinned)`, ROCm's `CopyDeviceToHost`.
A runtime copy call that returns only after its copy to the host ended is a blocking copy: a sync."""


def to_host_copy(alias: str = "") -> str:
    """An event is a device copy to the host (TO_HOST_COPY_PATTERN)."""
    a = _a(alias)
    return f"{a}kind = 'memcpy' AND regexp_matches({a}name, {sql_literal(TO_HOST_COPY_PATTERN)})"


PAGEABLE_TO_DEVICE_COPY_PATTERN = r"(?i)(HtoD.*Pageable|Pageable ?-> ?Device)"
"""A device copy (kind 'memcpy') from pageable (not pinned) host memory to a device: Kineto's
`Memcpy HtoD (Pageable -> Device)`. The driver stages it through a bounce buffer; it cannot overlap compute."""


def pageable_to_device_copy(alias: str = "") -> str:
    """An event is a device copy from pageable host memory (PAGEABLE_TO_DEVICE_COPY_PATTERN)."""
    a = _a(alias)
    return f"{a}kind = 'memcpy' AND regexp_matches({a}name, {sql_literal(PAGEABLE_TO_DEVICE_COPY_PATTERN)})"


# ---- allocator -----------------------------------------------------------------------------------

ALLOCATOR_CALL_PATTERN = r"^(cuda|hip|cu)(Malloc|Free|MemAlloc|MemFree)"
"""A runtime call that allocates or frees device memory outside the caching allocator's cache
(cudaMalloc, cudaFree, cudaMallocAsync, hipMalloc, hipFree, cuMemAlloc, ...): in a steady step,
the caching allocator is off, `empty_cache()` runs in the loop, or memory is fragmented. No
PrivateUse1 allocator call name is known (PRIVATEUSE1_RUNTIME_CALLS): none is matched."""
ALLOCATOR_CALL_RE = re.compile(ALLOCATOR_CALL_PATTERN)


def allocator_call(alias: str = "") -> str:
    a = _a(alias)
    return f"{a}kind = 'runtime' AND regexp_matches({a}name, {sql_literal(ALLOCATOR_CALL_PATTERN)})"


ALLOCATOR_FREE_PART = "Free"
"""Part of the name of every allocator call that frees (cudaFree, hipFreeAsync, cuMemFree, ...)."""


def allocator_free(alias: str = "") -> str:
    """An allocator call (allocator_call) frees: its name has ALLOCATOR_FREE_PART."""
    return f"contains({_a(alias)}name, {sql_literal(ALLOCATOR_FREE_PART)})"


# ---- operator classes (ATen names) ---------------------------------------------------------------

GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                      "aten::_addmm_activation"})
CONV_OPS = frozenset({
    "aten::convolution", "aten::_convolution", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::cudnn_convolution",
    "aten::miopen_convolution", "aten::mkldnn_convolution", "aten::conv_transpose1d", "aten::conv_transpose2d",
    "aten::conv_transpose3d", "aten::cudnn_convolution_transpose", "aten::miopen_convolution_transpose"})
CONV_BACKWARD_OPS = frozenset({"aten::convolution_backward", "aten::cudnn_convolution_backward", "aten::miopen_convolution_backward"})
ATTENTION_OPS = frozenset({
    "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_flash_attention_forward", "aten::_efficient_attention_forward"})
ATTENTION_BACKWARD_OPS = frozenset({
    "aten::_scaled_dot_product_flash_attention_backward", "aten::_scaled_dot_product_efficient_attention_backward",
    "aten::_scaled_dot_product_cudnn_attention_backward", "aten::_flash_attention_backward",
    "aten::_efficient_attention_backward", "aten::_scaled_dot_product_flash_attention_for_cpu_backward"})
NORM_OPS = frozenset({
    "aten::layer_norm", "aten::native_layer_norm", "aten::group_norm", "aten::native_group_norm", "aten::batch_norm",
    "aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm", "aten::_batch_norm_impl_index",
    "aten::rms_norm", "aten::_fused_rms_norm", "aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax"})
ELEMENTWISE_OPS = frozenset(f"aten::{n}" for n in (
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "relu", "relu_", "gelu", "silu", "silu_", "sigmoid", "tanh",
    "exp", "log", "pow", "sqrt", "rsqrt", "neg", "abs", "clamp", "clamp_", "where", "maximum", "minimum", "threshold_backward",
    "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward", "addcmul_", "addcdiv_", "lerp_", "mul_scalar"))
MATRIX_OPS = GEMM_OPS | CONV_OPS | CONV_BACKWARD_OPS | ATTENTION_OPS | ATTENTION_BACKWARD_OPS
"""Operators whose work runs on matrix units (Tensor Cores and the like)."""
LOWER_PRECISION_CANDIDATE_OPS = GEMM_OPS | CONV_OPS
"""Forward matmul/convolution operators whose fp32 inputs autocast would lower."""
PLAIN_PRODUCT_OPS = frozenset(n for n in GEMM_OPS if n.split("::")[-1] in ("mm", "matmul"))
"""GEMMs whose first two inputs are the operands, `[M,K] x [K,N]` (no bias first, no transposed weight)."""
INVERSE_OPS = frozenset({"aten::linalg_inv", "aten::linalg_inv_ex", "aten::inverse"})
"""Operators that invert a matrix (`torch.linalg.inv`, `torch.inverse`)."""


def op_in(names, alias: str = "") -> str:
    """An event is a CPU operator named in `names` (sorted, so the SQL text is stable)."""
    return f"{_a(alias)}kind = 'cpu_op' AND {_a(alias)}name IN {kinds_sql(sorted(names))}"


# ---- kernel-name classes (device kernels have vendor names, not ATen names) ---------------------

GEMM_KERNEL_RE = re.compile(r"(?i)(gemm|matmul|cutlass|xmma|cublas|(^|::)(mm|addmm|bmm|baddbmm|linear)$)")
"""A kernel (or operator) name that is a matrix product."""
CONV_KERNEL_RE = re.compile(r"(?i)conv")
"""A kernel (or operator) name that is a convolution."""


# ---- work classes (what a kernel or copy does: one finding per class, one fix) -------------------

FP32_KERNEL_PATTERN = "(?i)(sgemm|scudnn|f32|fp32|float|s1688|s884|s16816)"
"""A matrix kernel whose name says it computes in fp32 (cuBLAS sgemm, cuDNN scudnn, `<float>`
templates, CUTLASS f32 and its TF32 s1688/s884 kernels: fp32 data), unless LOWER_PRECISION_KERNEL_PATTERN also matches."""
LOWER_PRECISION_KERNEL_PATTERN = "(?i)(bf16|f16|half|bfloat|float16|h884|h1688|h16816|hgemm|hcudnn|e4m3|e5m2|fp8|int8|i8816)"
"""A kernel whose name says it computes in 16 bits or fewer (bf16, fp16, fp8, int8)."""
ATTENTION_KERNEL_PATTERN = "(?i)(flash|fmha|attention|attn|sdpa)"
NORM_KERNEL_PATTERN = "(?i)(norm([^a]|$)|softmax|bn_fw|bn_bw)"
"""Normalisation and softmax kernels (layer/batch/group/RMS norm, cuDNN bn_fw/bn_bw), not `normal_` sampling."""
MATRIX_KERNEL_PATTERN = ("(?i)(gemm|matmul|cutlass|xmma|cublas|cudnn|conv|dgrad|wgrad|fprop|winograd|implicit_gemm|Cijk_|"
                         "h884|s884|h1688|s1688|h16816|i8816|hmma|wmma|(^|::)(mm|addmm|bmm|baddbmm|linear)$)")
"""A kernel that runs a matrix product or convolution (cuBLAS, cuDNN, CUTLASS, rocBLAS/Tensile `Cijk_`)."""
ELEMENTWISE_KERNEL_PATTERN = "(?i)(elementwise|pointwise|triton_poi|multi_tensor_apply|foreach)"
MATRIX_OP_PATTERN = "(?i)(conv|(^|::)(mm|addmm|bmm|baddbmm|matmul|linear)$|(Mm|Addmm|Bmm|Matmul)Backward)"
"""An operator (ATen name or autograd node, e.g. CudnnConvolutionBackward, MmBackward0) that is a matrix product or convolution."""
NORM_OP_PATTERN = "(?i)(norm([^a]|$)|softmax)"

WORK_CLASSES = {
    "fp32_matmul": "fp32 GEMM/convolution",
    "matmul": "GEMM/convolution",
    "attention": "attention",
    "norm": "normalisation/softmax",
    "elementwise": "elementwise",
    "communication": "communication",
    "memcpy": "copies",
    "other": "other",
}
"""The classes of device work (key → words), in the order `work_class` tests them: a kernel's own
name first (collective, attention, norm, matrix, elementwise), then its operator's name
(ATTENTION_OPS, matrix operators, NORM_OPS, ELEMENTWISE_OPS), else `other`. A matrix kernel is
`fp32_matmul` when its name says fp32 (FP32_KERNEL_PATTERN), or its operator's first recorded
input type is `float`, and its name does not say a lower precision."""

_RE = {k: re.compile(v[4:], re.IGNORECASE) for k, v in (
    ("fp32", FP32_KERNEL_PATTERN), ("lower", LOWER_PRECISION_KERNEL_PATTERN), ("attention", ATTENTION_KERNEL_PATTERN),
    ("norm", NORM_KERNEL_PATTERN), ("matrix", MATRIX_KERNEL_PATTERN), ("elementwise", ELEMENTWISE_KERNEL_PATTERN),
    ("matrix_op", MATRIX_OP_PATTERN), ("norm_op", NORM_OP_PATTERN))}


def _first_input_type(op_args) -> str | None:
    import json

    try:
        types = (json.loads(op_args or "{}") or {}).get("Input type") or []
    except (TypeError, ValueError, AttributeError):
        return None
    return types[0] if types and isinstance(types[0], str) else None


def work_class(kind: str | None, name: str | None, op: str | None = None, op_args: str | None = None) -> str:
    """The WORK_CLASSES key of a device event (`kind`, `name`) launched by operator `op` (its Kineto
    args `op_args`); `work_class_sql` is the same test in SQL."""
    name, op = name or "", op or ""
    if kind in ("memcpy", "memset"):
        return "memcpy"
    if COMM_KERNEL_RE.search(name):
        return "communication"
    r = _RE
    if r["attention"].search(name):
        return "attention"
    if r["norm"].search(name):
        return "norm"
    matrix = bool(r["matrix"].search(name))
    if not matrix and r["elementwise"].search(name):
        return "elementwise"
    if not matrix:
        if op in ATTENTION_OPS or op in ATTENTION_BACKWARD_OPS:
            return "attention"
        matrix = op in MATRIX_OPS or bool(r["matrix_op"].search(op))
    if matrix:
        fp32 = (r["fp32"].search(name) or _first_input_type(op_args) == "float") and not r["lower"].search(name)
        return "fp32_matmul" if fp32 else "matmul"
    if op in NORM_OPS or r["norm_op"].search(op):
        return "norm"
    if op in ELEMENTWISE_OPS:
        return "elementwise"
    return "other"


def work_class_sql(kind: str, name: str, op: str, op_args: str) -> str:
    """`work_class` as a SQL CASE expression over the given column expressions (e.g. "e.kind",
    "e.name", "o.name", "o.args"), so that evidence queries group by the same classes."""
    def m(col: str, pattern: str) -> str:
        return f"regexp_matches(coalesce({col}, ''), {sql_literal(pattern)})"

    matrix_op = (f"(coalesce({op}, '') IN {kinds_sql(sorted(MATRIX_OPS))} OR {m(op, MATRIX_OP_PATTERN)})")
    matrix = f"({m(name, MATRIX_KERNEL_PATTERN)} OR NOT {m(name, ELEMENTWISE_KERNEL_PATTERN)} AND {matrix_op})"
    fp32 = (f"(({m(name, FP32_KERNEL_PATTERN)} OR coalesce(json_extract_string({op_args}, '$.\"Input type\"[0]'), '') = 'float') "
            f"AND NOT {m(name, LOWER_PRECISION_KERNEL_PATTERN)})")
    return f"""CASE WHEN {kind} IN ('memcpy', 'memset') THEN 'memcpy'
  WHEN {m(name, COMM_KERNEL_PATTERN)} THEN 'communication'
  WHEN {m(name, ATTENTION_KERNEL_PATTERN)} THEN 'attention'
  WHEN {m(name, NORM_KERNEL_PATTERN)} THEN 'norm'
  WHEN NOT {m(name, MATRIX_KERNEL_PATTERN)} AND {m(name, ELEMENTWISE_KERNEL_PATTERN)} THEN 'elementwise'
  WHEN NOT {m(name, MATRIX_KERNEL_PATTERN)} AND coalesce({op}, '') IN {kinds_sql(sorted(ATTENTION_OPS | ATTENTION_BACKWARD_OPS))} THEN 'attention'
  WHEN {matrix} AND {fp32} THEN 'fp32_matmul'
  WHEN {matrix} THEN 'matmul'
  WHEN coalesce({op}, '') IN {kinds_sql(sorted(NORM_OPS))} OR {m(op, NORM_OP_PATTERN)} THEN 'norm'
  WHEN coalesce({op}, '') IN {kinds_sql(sorted(ELEMENTWISE_OPS))} THEN 'elementwise'
  ELSE 'other' END"""
