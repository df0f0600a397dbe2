"""FLOPs and bytes moved per operator: recorded by the profiler, else estimated from shapes.

`op_work(name, args)` gives (flops, bytes, dtype, how) for one CPU operator from its args (the
JSON of `events.args`): the profiler's own `flops` when it recorded them (`with_flops=True`),
else the formulas below from `Input Dims`, `Input type` and, for convolutions, `Concrete Inputs`
(stride, padding, dilation, groups). A multiply-add counts 2 FLOPs. docs/METRICS.md lists them:

- mm `[M,K]x[K,N]`, addmm, linear `[..,K]x[N,K]`, bmm/baddbmm `[B,M,K]x[B,K,N]`, matmul (with
  broadcast batch): 2·batch·M·K·N;
- convolution (1–3-d, transposed, and the cudnn/miopen/mkldnn variants): 2·N·O·prod(out)·(C/g)·prod(k),
  `out` from stride/padding/dilation when the trace has them, else from the input of the next
  operator on the thread when that is shaped [N, O, ...] (utilisation.py), else stride 1 with
  "same" padding (`how = 'estimated (stride 1 assumed)'`: an upper bound); convolution_backward
  (and the cudnn/miopen backward of torch 1.x): twice the forward. These are the direct
  convolution's FLOPs: kernels using Winograd or FFT algorithms can show more than the peak;
- scaled-dot-product / flash / efficient attention, `[B,H,L,E]` (flash_attention_forward
  `[B,L,H,E]`): 2·B·H·L·S·(E + Ev); their backward: 2.5x the forward;
- layer, group and batch norm: 5 FLOPs per element; softmax: 5 per element; elementwise ops
  (add, mul, gelu, ...): 1 per element of the largest input;
- bytes: every tensor input once plus an output the size of the largest input (GEMMs: M·N;
  attention: the query's size), at the dtype's size.

Must not: read runs or decide which operators count (utilisation.py does).
"""

from __future__ import annotations

import json
import math
import re

DTYPE = {"float": "fp32", "double": "fp64", "c10::bfloat16": "bf16", "bfloat16": "bf16", "c10::half": "fp16", "half": "fp16",
         "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8", "c10::float8_e4m3fnuz": "fp8", "c10::float8_e5m2fnuz": "fp8"}
SIZE = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "long int": 8, "int": 4, "bool": 1, "unsigned char": 1,
        "signed char": 1, "short int": 2}

GEMM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear", "aten::_addmm_activation"}
CONV = {"aten::convolution", "aten::_convolution", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::cudnn_convolution",
        "aten::miopen_convolution", "aten::mkldnn_convolution", "aten::conv_transpose1d", "aten::conv_transpose2d",
        "aten::conv_transpose3d", "aten::cudnn_convolution_transpose", "aten::miopen_convolution_transpose"}
CONV_BACKWARD = {"aten::convolution_backward", "aten::cudnn_convolution_backward", "aten::miopen_convolution_backward"}
ATTENTION = {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
             "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
             "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_flash_attention_forward", "aten::_efficient_attention_forward"}
ATTENTION_BACKWARD = {"aten::_scaled_dot_product_flash_attention_backward", "aten::_scaled_dot_product_efficient_attention_backward",
                      "aten::_scaled_dot_product_cudnn_attention_backward", "aten::_flash_attention_backward",
                      "aten::_efficient_attention_backward", "aten::_scaled_dot_product_flash_attention_for_cpu_backward"}
NORM = {"aten::layer_norm", "aten::native_layer_norm", "aten::group_norm", "aten::native_group_norm", "aten::batch_norm",
        "aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm", "aten::_batch_norm_impl_index",
        "aten::rms_norm", "aten::_fused_rms_norm", "aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax"}
ELEMENTWISE = {f"aten::{n}" for n in (
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "relu", "relu_", "gelu", "silu", "silu_", "sigmoid", "tanh",
    "exp", "log", "pow", "sqrt", "rsqrt", "neg", "abs", "clamp", "clamp_", "where", "maximum", "minimum", "threshold_backward",
    "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward", "addcmul_", "addcdiv_", "lerp_", "mul_scalar")}
KNOWN = GEMM | CONV | CONV_BACKWARD | ATTENTION | ATTENTION_BACKWARD | NORM | ELEMENTWISE
MATRIX = GEMM | CONV | CONV_BACKWARD | ATTENTION | ATTENTION_BACKWARD
"""Operators whose work runs on matrix units (Tensor Cores and the like): the under-use rule's subject."""


def _numel(shape) -> int:
    return math.prod(int(x) for x in shape) if shape else 1


def _dtype(types) -> str | None:
    for t in types or ():
        d = DTYPE.get(str(t).lower())
        if d:
            return d
    return None


def _ints(text) -> list[int] | None:
    if text in (None, ""):
        return None
    try:
        v = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None
    if isinstance(v, int):
        return [v]
    if isinstance(v, list) and all(isinstance(x, int) for x in v):
        return v
    return None


def _conv_flops(name: str, dims: list, concrete: list | None, transposed: bool, out_shape: list | None = None) -> tuple[float, bool] | None:
    x, w = dims[0], dims[1]
    if len(x) < 3 or len(w) != len(x):
        return None
    nd = len(x) - 2
    stride = padding = dilation = None  # (groups need no argument: the weight is [O, C/g, *k])
    if concrete:
        if name == "aten::convolution" or name == "aten::_convolution":
            stride, padding, dilation = (_ints(concrete[i]) if len(concrete) > i else None for i in (3, 4, 5))
            if len(concrete) > 6 and str(concrete[6]).lower() == "true":
                transposed = True
        elif re.match(r"aten::conv[123]d$", name):
            stride, padding, dilation = (_ints(concrete[i]) if len(concrete) > i else None for i in (3, 4, 5))
    exact = stride is not None and padding is not None
    spatial_in, k = x[2:], w[2:]
    if not exact and not transposed and out_shape and len(out_shape) == len(x) and out_shape[0] == x[0] and out_shape[1] == w[0]:
        return 2.0 * x[0] * w[0] * _numel(out_shape[2:]) * w[1] * _numel(k), True

    def each(v, default):
        if not v:
            return [default] * nd
        return v * nd if len(v) == 1 else v

    stride, dilation = each(stride, 1), each(dilation, 1)
    padding = each(padding, None) if padding else [None] * nd
    if transposed:  # weight [C_in, O/g, *k]: each input element scatters into O/g * prod(k) outputs
        return 2.0 * x[0] * _numel(spatial_in) * x[1] * w[1] * _numel(k), exact
    out = []
    for s_in, kk, st, pd, dl in zip(spatial_in, k, stride, padding, dilation):
        if pd is None:  # "same" output size at stride 1
            out.append(math.ceil(s_in / st))
        else:
            out.append(max(0, (s_in + 2 * pd - dl * (kk - 1) - 1) // st + 1))
    return 2.0 * x[0] * w[0] * _numel(out) * w[1] * _numel(k), exact


def op_work(name: str, args: str | dict | None, out_shape: list | None = None) -> tuple[float, float, str | None, str] | None:
    """(flops, bytes, dtype, how) of one operator, or None when neither recorded nor estimable.
    `out_shape`: the output's shape when known from elsewhere (a convolution without its stride:
    the input of the operator that consumes it, see utilisation.py)."""
    if args is None:
        return None
    a = json.loads(args) if isinstance(args, str) else args
    if not isinstance(a, dict):
        return None
    dims = a.get("Input Dims") or []
    types = a.get("Input type") or []
    try:
        dtype = _dtype(types)
        size = SIZE.get(dtype or "", 4)
        tensors = [d for d in dims if isinstance(d, list) and d]
        in_bytes = sum(_numel(d) for d in tensors) * size
    except (TypeError, ValueError, OverflowError):  # args not in Kineto's shape (imported traces can hold anything)
        return None
    recorded = a.get("flops")
    if isinstance(recorded, (int, float)) and recorded > 0:
        return float(recorded), float(in_bytes + (max((_numel(d) for d in tensors), default=0) * size)), dtype, "recorded"
    if name not in KNOWN or not tensors:
        return None
    try:
        return _estimate(name, dims, a, dtype, size, in_bytes, out_shape)
    except (TypeError, ValueError, IndexError):
        return None


def _estimate(name, dims, a, dtype, size, in_bytes, out_shape=None):
    if name in GEMM:
        if name in ("aten::addmm", "aten::baddbmm", "aten::_addmm_activation"):
            dims = dims[1:3]
        if name == "aten::linear":
            x, w = dims[0], dims[1]
            batch, k, n, m = _numel(x[:-1]), x[-1], w[0], 1
        else:
            x, w = dims[0], dims[1]
            if len(x) == 1:
                x = [1, x[0]]
            if len(w) == 1:
                w = [w[0], 1]
            batch = max(_numel(x[:-2]), _numel(w[:-2]))
            m, k, n = x[-2], x[-1], w[-1]
        flops = 2.0 * batch * m * k * n
        return flops, float(in_bytes + batch * m * n * size), dtype, "estimated"
    if name in CONV or name in CONV_BACKWARD:
        concrete = a.get("Concrete Inputs")
        if name in CONV_BACKWARD:  # grad_input and grad_weight: twice the forward
            if name == "aten::convolution_backward":
                go, x, w = dims[0], dims[1], dims[2]  # (grad_output, input, weight, ...)
            else:
                x, go, w = dims[0], dims[1], dims[2]  # cudnn/miopen (torch <= 1.x): (input, grad_output, weight, ...)
            if len(go) < 3 or len(w) != len(go):
                return None
            fwd = 2.0 * go[0] * go[1] * _numel(go[2:]) * w[1] * _numel(w[2:])
            return 2 * fwd, float(in_bytes + _numel(x) * size), dtype, "estimated"
        got = _conv_flops(name, dims, concrete if isinstance(concrete, list) else None, "transpose" in name, out_shape)
        if got is None:
            return None
        flops, exact = got
        return flops, float(in_bytes + _numel(dims[0]) * size), dtype, "estimated" if exact else "estimated (stride 1 assumed)"
    if name in ATTENTION or name in ATTENTION_BACKWARD:
        q, k, v = (dims[1], dims[2], dims[3]) if name in ATTENTION_BACKWARD and len(dims) > 3 else (dims[0], dims[1], dims[2])
        if "_flash_attention_forward" in name or name == "aten::_flash_attention_backward" or "efficient_attention_" in name:
            b, l_, h, e = q  # [B, L, H, E]
            s_, ev = k[1], v[-1]
        else:
            b, h, l_, e = q[0], q[-3] if len(q) == 4 else 1, q[-2], q[-1]
            s_, ev = k[-2], v[-1]
        flops = 2.0 * b * h * l_ * s_ * (e + ev)
        if name in ATTENTION_BACKWARD:
            flops *= 2.5
        return flops, float(in_bytes + _numel(q) * size), dtype, "estimated"
    largest = max(_numel(d) for d in dims if isinstance(d, list) and d)
    per = 5 if name in NORM else 1
    return float(per * largest), float(in_bytes + largest * size), dtype, "estimated"
