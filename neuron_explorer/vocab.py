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


def top_op(alias: str = "") -> str:
    """An event is a top-level CPU operator: an operator with no operator around it."""
    a = _a(alias)
    return f"{a}kind = 'cpu_op' AND {a}event_id = {a}top_op_id"


def top_host_call(alias: str = "") -> str:
    """An event is top-level host work: a top-level CPU operator, or a runtime call made outside
    every operator (a bare `torch.cuda.synchronize()`, a copy issued by a library)."""
    a = _a(alias)
    return f"({a}kind = 'cpu_op' AND {a}event_id = {a}top_op_id OR {a}kind = 'runtime' AND {a}top_op_id IS NULL)"


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
cudaStreamSynchronize, cudaEventSynchronize, their hip/driver/PrivateUse1 equivalents)."""
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero")
"""Operators that read a device value on the host (`.item()`, `float(t)`, `if t:`, a data-dependent
shape): a host sync when the tensor is on a device (a runtime sync or blocking copy beneath)."""
MEMCPY_CALL_PARTS = ("Memcpy", "memcpy")
"""Parts of the name of a runtime copy call (cudaMemcpy, hipMemcpyAsync, ...)."""


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


# ---- allocator -----------------------------------------------------------------------------------

ALLOCATOR_CALL_PATTERN = r"^(cuda|hip|cu|nrt_?)(Malloc|Free|MemAlloc|MemFree)"
"""A runtime call that allocates or frees device memory outside the caching allocator's cache
(cudaMalloc, cudaFree, cudaMallocAsync, hipMalloc, hipFree, cuMemAlloc, ...): in a steady step,
the caching allocator is off, `empty_cache()` runs in the loop, or memory is fragmented."""
ALLOCATOR_CALL_RE = re.compile(ALLOCATOR_CALL_PATTERN)


def allocator_call(alias: str = "") -> str:
    a = _a(alias)
    return f"{a}kind = 'runtime' AND regexp_matches({a}name, {sql_literal(ALLOCATOR_CALL_PATTERN)})"


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
