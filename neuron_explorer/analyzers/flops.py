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

Must not: read runs, decide which operators count (utilisation.py does) or define a class of
operators (vocab.py's GEMM_OPS, CONV_OPS, ... are the classes).
"""

from __future__ import annotations

import json
import math
import re

from ..vocab import ATTENTION_BACKWARD_OPS, ATTENTION_OPS, CONV_BACKWARD_OPS, CONV_OPS, ELEMENTWISE_OPS, GEMM_OPS, NORM_OPS

DTYPE = {"float": "fp32", "double": "fp64", "c10::bfloat16": "bf16", "bfloat16": "bf16", "c10::half": "fp16", "half": "fp16",
         "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8", "c10::float8_e4m3fnuz": "fp8", "c10::float8_e5m2fnuz": "fp8"}
SIZE = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "long int": 8, "int": 4, "bool": 1, "unsigned char": 1,
        "signed char": 1, "short int": 2}

KNOWN = GEMM_OPS | CONV_OPS | CONV_BACKWARD_OPS | ATTENTION_OPS | ATTENTION_BACKWARD_OPS | NORM_OPS | ELEMENTWISE_OPS
"""Operators with a formula here (the operator classes are vocab.py's)."""

# The formulas' own knowledge of ATen signatures (where an operand sits among the inputs), keyed by
# the operator's name without its `aten::` namespace: not a class of operators (vocab.py has those).
_BIAS_FIRST = frozenset({"addmm", "baddbmm", "_addmm_activation"})
"""GEMMs whose first input is the added term (input, mat1, mat2, beta, alpha): the operands are inputs 1 and 2."""
_WEIGHT_ROWS = "linear"
"""The GEMM whose weight is [N, K] (input, weight, bias)."""
_CONV_WITH_TRANSPOSED = frozenset({"convolution", "_convolution"})
"""Convolutions whose concrete inputs are (input, weight, bias, stride, padding, dilation, transposed, ...)."""
_CONV_ND = re.compile(r"^conv[123]d$")
"""Convolutions whose concrete inputs are (input, weight, bias, stride, padding, dilation, groups)."""
_CONV_BACKWARD_GRAD_FIRST = "convolution_backward"
"""The convolution backward whose inputs are (grad_output, input, weight, ...); the cudnn/miopen ones
of torch <= 1.x take (input, grad_output, weight, ...)."""


def _aten(name: str) -> str:
    """An ATen operator's name without its namespace: `aten::addmm` -> `addmm`."""
    return name[6:] if name.startswith("aten::") else name


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
        if _aten(name) in _CONV_WITH_TRANSPOSED:
            stride, padding, dilation = (_ints(concrete[i]) if len(concrete) > i else None for i in (3, 4, 5))
            if len(concrete) > 6 and str(concrete[6]).lower() == "true":
                transposed = True
        elif _CONV_ND.match(_aten(name)):
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
    if name in GEMM_OPS:
        if _aten(name) in _BIAS_FIRST:
            dims = dims[1:3]
        if _aten(name) == _WEIGHT_ROWS:
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
    if name in CONV_OPS or name in CONV_BACKWARD_OPS:
        concrete = a.get("Concrete Inputs")
        if name in CONV_BACKWARD_OPS:  # grad_input and grad_weight: twice the forward
            if _aten(name) == _CONV_BACKWARD_GRAD_FIRST:
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
    if name in ATTENTION_OPS or name in ATTENTION_BACKWARD_OPS:
        q, k, v = (dims[1], dims[2], dims[3]) if name in ATTENTION_BACKWARD_OPS and len(dims) > 3 else (dims[0], dims[1], dims[2])
        if "_flash_attention_forward" in name or name == "aten::_flash_attention_backward" or "efficient_attention_" in name:
            b, l_, h, e = q  # [B, L, H, E]
            s_, ev = k[1], v[-1]
        else:
            b, h, l_, e = q[0], q[-3] if len(q) == 4 else 1, q[-2], q[-1]
            s_, ev = k[-2], v[-1]
        flops = 2.0 * b * h * l_ * s_ * (e + ev)
        if name in ATTENTION_BACKWARD_OPS:
            flops *= 2.5
        return flops, float(in_bytes + _numel(q) * size), dtype, "estimated"
    largest = max(_numel(d) for d in dims if isinstance(d, list) and d)
    per = 5 if name in NORM_OPS else 1
    return float(per * largest), float(in_bytes + largest * size), dtype, "estimated"
