"""critical-path: what bounds the steps, one finding per class of work on each step's critical path.

The critical path (analyzers/critical_path.py, docs/METRICS.md "Critical path") charges every
nanosecond of every profiler step to one item: a kernel, copy or collective with the top-level
operator that launched it; a top-level operator (or Python call, runtime call) on the host; a
device idle gap with its cause. This rule groups the charged time by class, one cause with one
fix: device work by vocab.work_class (fp32 GEMM/convolution, other GEMM/convolution, attention,
normalisation, elementwise, communication, copies, other kernels), host time as host operators
and Python, launches, data loading, or waits on the device (`.item()`, synchronize, and a blocking
copy's time before its copy ran, critical_path.WAITING_IN_COPY: its advice names the copies), and idle
gaps as waiting for a launch or for other work (at least half of it ready work waiting behind work the
trace does not show, critical_path.UNSEEN_QUEUE → what can hold a device unseen and how to see it, not
to overlap streams). It names the heaviest classes, at most
MAX_CLASSES per rank, each at least CLASS_SHARE_MIN of step time, with the heaviest members and
what to try: fp32 GEMMs/convolutions → the lower precision the device's matrix units run
(analyzers/peaks.py precision_advice: fp16 autocast with GradScaler on V100/T4, bf16 autocast or
TF32 on A100 and later, FP8 where the device has it; where some of the class's kernels run TF32
already by their names, vocab.kernel_runs_tf32, `tf32_ns` of the class, TF32 only for the matrix
kernels beside them that run plain fp32, named); NCHW convolutions (4-d input, kernel not
NHWC, convolution work NCHW_SHARE_MIN of the class or more: a tiny one beside 122 ms of GEMMs was all xDiT's
FLUX was told) → channels_last; GEMM/convolution kernels (all of them) → the sizes the device's matrix units run at full
speed (peaks.matrix_sizes_advice: multiples of 8 on NVIDIA, 16 on AMD) and, where kernels that run 16 bits or
fewer hold half of them or more already (`_run_low`), kernels better tuned for their shapes (peaks.TUNED_GEMM); attention kernels that are fused
attention already (`_fused_attention`: scaled_dot_product_attention's, flash / memory-efficient) → what
is left (padding, context length, the backend), not scaled_dot_product_attention; many short kernels →
fusion / torch.compile, or CUDA/HIP graphs where they come from torch.compile'd code, but where a graph launch
replays most of their time already (`_replayed`, events.graph) → fewer, larger kernels; normalisation kernels → fused
LayerNorm / RMSNorm in lower precision, unless their names or inputs show 16 bits or fewer already
(vocab.kernel_precision), but a softmax there that is hand-written attention's (its softmax operator,
the forward one for backward work, between two matrix products on its statement,
vocab.ATTENTION_PRODUCT_OPS, or softmaxing [B, heads, L, L] scores over the last dimension;
`unfused_attention_ns` of the class) → torch.nn.functional.scaled_dot_product_attention, with the
size of the scores each call writes and reads back (h100_timesformer_inference: [8×12×3137×3137]
bf16, 1.76 GiB), and the normalisation advice for the class's other kernels only where they are
CLASS_SHARE_MIN of the path. Where that softmax is half the class or more, the finding is the
attention's (`_attention_finding`): its title, impact and saving bound are the softmax, the rest of the
attention below from each class that leaves its finding to this one or that no finding names, and the
normalisation kernels its advice names ('hand-written attention (softmax 68.77 ms, matrix products
44.85 ms, score arithmetic 20.66 ms): 134.28 ms on the critical path (35.1% of step time; steps
host-bound (59%))'; the class alone, 70.86 ms, left the products out). The rest of that attention on the same statement (`_attention_parts`: the
kernels of its matrix products and of the elementwise operators over its [B, heads, L, L] scores, and
in backward those of their autograd nodes, by the forward operator each was built from) is
named in that advice with the attention's whole time on the path (`attention_work_ns`), and a GEMM or
elementwise class at least half of which it is (their `unfused_attention_ns`) leaves its finding to
that one (one attention, one finding: h100_timesformer's products and scaling were two more findings
with other fixes); copies → pinned memory and
non_blocking; launch overhead and host time → CUDA graphs, torch.compile, fewer `.item()` calls
(launches most of whose time is one call → a kernel's first launch loading its code, a one-off:
profile steady steps; the call's charged ns is `one_off_ns` in the evidence, the hotspot
operator most of whose time it is leaves its finding to this one, and device-idle leaves out the
device's idle during the call, `one_off_launch`; host time most of which is
Python outside every operator and nn.Module, in a rank that records modules → code before or
after the model (decoding, preprocessing, logging): off the step's path; host time most of which
is charged to no event after the last event the trace holds (`unrecorded_ns`: a step's range
running on where nothing was recorded) → no Python to remove: profile with a schedule and
prof.step() once per step (the title then says first how much of the step was not recorded, not
the bound, and the impact and saving bound leave it out: `left_out_ns`); host time at least half of which is long stretches (`long_stretches_ns`:
pieces of LONG_STRETCH_NS or more, each charged whole to one operator or record_function range with
nothing recorded beneath it) → not the dispatcher overhead between operators that compiling removes
but a wait the trace does not show (a sync inside a library, the autograd engine's thread, a
collective waiting for another rank) or Python it does not record: record stacks or sample the
process to see which; host time at least half of which is in no traced call (`untraced_ns`: the path's
host time outside every operator, Python call and range, critical_path.UNTRACED) → not what compiling
or graphs remove but time the trace does not explain: record stacks or sample the process, or, where
the trace records Python calls (_util.records_python) and none ran then, native code or a wait
outside Python, which a sampler with native frames shows (device-idle leaves its finding of the same
idle to this one, HTA's trace_compare base: 222.43 ms of host time, 220.76 ms of idle); otherwise, where
DistributedDataParallel's broadcast of the module's buffers
at every forward (vocab.DDP_BUFFER_BROADCAST_OPS) is KNOWN_HOST_SHARE_MIN of the host time or
more, it is named first with its time → broadcast_buffers=False, or SyncBatchNorm; and so is an
optimizer's zero_grad (vocab.ZERO_GRAD_RANGE) → set_to_none=True; host time at least half of which is
calls of torch.compile'd code (vocab.is_compiled_run) → not torch.compile, which the model has: where
their kernels (MIN_COMPILED_KERNELS or more) include none a compiler generated, the backend fuses nothing and
inductor would (_util.unfused_backend_words), and CUDA/HIP graphs replay them (`_compiled_words`; HTA's
v100_ddp_compiled_aot_eager: 1,111 of its 1,448 ms); host waits on the device at least
half of which no device of the rank ran anything the trace holds (`waits_device_idle_ns` of
`waits_ns`, the path's host time inside the waiting calls, host_sync.waits_union) → also a wait on
work the trace does not show, as host-sync says it);
input pipeline → DataLoader workers. One cause, one finding: a class whose cause another rule
names (`LEFT_TO`: data loading → input-pipeline, launches → launch-overhead unless one call holds most of them, host waits →
host-sync, idle waiting on other work → device-idle, collectives → comm-exposed) is left to that
rule's finding where it reports the rank (the engine drops the class's finding then: `leaves_to`).
The fp32 GEMM/convolution class is the one finding for its cause: precision and device-underuse
leave theirs to it where it reports the rank (their `leaves_to`).
Impact: the class's charged ns on the path over all steps (the members' charged ns are disjoint,
so this is their union; time off the path is not counted), less `left_out_ns`: the host time the
trace did not record where it is most of the host class (`unrecorded_ns`), which is no one's to save;
for hand-written attention's finding, the charged ns of the members it names (`_attention_finding`).
Saving bound: per step, the class's charged ns (less what is left out; the attention finding's members'), but no more than the step's duration minus
the work of the other resource, which then becomes critical (`critical_path.saving_bound`
with the class's kernels removed from the device, docs/METRICS.md "Saving bound"). The evidence
query reads `analysis/critical_path.parquet`, which `analyze` writes. Not applicable without
steps, or on a CPU-only run (every step is then host-bound by its operators, which `hotspot`
names; the summary still gives the bound).
"""

from __future__ import annotations

import json
import re

from ...collectors.kineto_names import EVALUATE_PREFIX
from ...fmt import kernel_labels, kernel_name, size
from ...store import sql_file_literal
from ...vocab import (
    ATTENTION_KERNEL_PATTERN,
    ATTENTION_PRODUCT_OPS,
    CONV_KERNEL_RE,
    DDP_BUFFER_BROADCAST_OPS,
    ELEMENTWISE_OPS,
    SCORE_PRODUCT_OPS,
    SOFTMAX_OPS,
    SYNC_CALL_PART,
    SYNC_OPS,
    WORK_CLASSES,
    ZERO_GRAD_RANGE,
    is_compiled_run,
    is_matrix_kernel,
    is_sync_call_name,
    kernel_precision,
    kernel_runs_tf32,
    kinds_sql,
    top_op,
    work_class,
    work_class_sql,
)
from .. import critical_path as cp
from .. import flops, metrics
from .. import peaks as P
from ..engine import Context, NotApplicable
from ..metrics import DEVICE_WORK_NAMED
from ..model import Location
from ..utilisation import rank_work
from . import host_sync
from ._util import (
    ENGINE,
    FUSED_ATTENTION_LEFT,
    SEE_UNTRACED,
    SET_TO_NONE,
    STEADY_STEPS,
    graph_kind,
    graph_tip,
    ms,
    pct,
    profiler_tip,
    q,
    records_python,
    unfused_backend_words,
    unseen_queue_words,
)

RULE_ID = "critical-path"
TITLE = "Critical path: what bounds the step"
CATEGORY = "hotspot"
SCOPE = "rank"
THRESHOLDS = {
    "CLASS_SHARE_MIN": 0.02,  # a class's charged time / step time
    "MAX_CLASSES": 5,  # findings per rank
    "SMALL_KERNELS_PER_STEP": 10,  # a class with at least this many kernels per step...
    "SMALL_KERNEL_NS": 20_000,  # ...each charged less than this on average: many small kernels
    "LONG_STRETCH_NS": 1_000_000,  # a piece of host time charged whole to one operator or range: no dispatcher overhead
    "KNOWN_HOST_SHARE_MIN": 0.05,  # a known host cost (DDP's buffer broadcast, zero_grad's kernels) / the host class: named first
    "NCHW_SHARE_MIN": 0.25,  # convolution work / its class, with an NCHW convolution in it: channels_last advised
}
RANK_QUERIES = (DEVICE_WORK_NAMED, ENGINE)
"""The device work the saving bound leaves an item's names out of, and the serving engine the graph
advice names (_util.ENGINE), read once per batch of ranks (the last recorded event's end,
metrics.LAST_RECORDED, the summary prepares)."""
CONV = CONV_KERNEL_RE
NHWC = re.compile(r"(?i)(nhwc|channels_?last)")
DEVICE = ("device_compute", "communication", "memcpy")
HOST_CLASSES = {"host": "host time in operators and Python", "launch": "kernel launches", "input": "data loading",
                "host_sync": "host waits on the device", "idle_launch": "device idle waiting for launches",
                "idle": "device idle waiting on other work"}
_LAUNCH_WAIT = cp.LAUNCH_GAP


def _class_of(it: dict) -> str:
    """The class of a path item (`critical_path.path_items`): `_class_sql` is the same in SQL."""
    cat, item = it["category"], it["item"] or ""
    if cat == "device_compute":
        return work_class("kernel", item, it["op"], it["op_args"])
    if cat in ("memcpy", "communication"):
        return cat
    if cat == "idle":
        return "idle_launch" if (it["cause"] or "").startswith(_LAUNCH_WAIT) else "idle"
    if item in SYNC_OPS or (cat == "launch_overhead" and is_sync_call_name(item)) or it["cause"] == cp.WAITING_IN_COPY:
        return "host_sync"
    return {"launch_overhead": "launch", "input_pipeline": "input"}.get(cat, "host")


def _class_sql() -> str:
    item = "CASE WHEN p.category IN ('device_compute', 'communication', 'memcpy', 'idle') THEN e.name ELSE coalesce(o.name, e.name) END"
    return f"""CASE WHEN p.category = 'device_compute' THEN {work_class_sql("'kernel'", 'e.name', 'o.name', 'o.args')}
  WHEN p.category IN ('memcpy', 'communication') THEN p.category
  WHEN p.category = 'idle' THEN CASE WHEN starts_with(coalesce(p.cause, ''), {q(_LAUNCH_WAIT)}) THEN 'idle_launch' ELSE 'idle' END
  WHEN coalesce({item}, '') IN {kinds_sql(SYNC_OPS)}
    OR p.category = 'launch_overhead' AND contains(coalesce({item}, ''), {q(SYNC_CALL_PART)})
    OR p.cause = {q(cp.WAITING_IN_COPY)} THEN 'host_sync'
  WHEN p.category = 'launch_overhead' THEN 'launch' WHEN p.category = 'input_pipeline' THEN 'input' ELSE 'host' END"""


def _class_evidence_sql(src: str, rank: int, cls: str) -> str:
    """The class's charged ns on a rank's path (`src`: the path table), with its members: the evidence."""
    dev = ", ".join(q(c) for c in DEVICE + ("idle",))
    return f"""SELECT class, sum(charged_ns)::BIGINT AS charged_ns, count(DISTINCT event_id) AS events,
  count(DISTINCT item) AS items, arg_max(item, charged_ns) AS heaviest_charge FROM (
SELECT {_class_sql()} AS class,
  CASE WHEN p.category IN ({dev}) THEN e.name ELSE coalesce(o.name, e.name) END AS item, p.event_id, p.charged_ns
FROM {src} p LEFT JOIN events e ON e.event_id = p.event_id LEFT JOIN events o ON o.event_id = e.top_op_id
WHERE p.rank = {int(rank)}) WHERE class = {q(cls)} GROUP BY class"""


def _members_evidence_sql(src: str, rank: int, members: list[dict]) -> str:
    """The charged ns on a rank's path (`src`) of these device items (each its kernel's name, its
    launch's top-level operator and its statement, as `critical_path.path_items` keys them): the
    evidence of a finding that names items from several classes (hand-written attention's)."""
    keys = ", ".join(f"({q(m['item'])}, {q(m['op']) if m['op'] is not None else 'NULL'}, "
                     f"{int(m['frame_id']) if m['frame_id'] is not None else 'NULL'})" for m in members) or "(NULL, NULL, NULL)"
    return f"""WITH k(item, op, frame_id) AS (VALUES {keys})
SELECT sum(p.charged_ns)::BIGINT AS charged_ns, count(DISTINCT p.event_id) AS events, count(DISTINCT e.name) AS items,
  arg_max(e.name, p.charged_ns) AS heaviest_charge
FROM {src} p JOIN events e ON e.event_id = p.event_id LEFT JOIN events o ON o.event_id = e.top_op_id
JOIN k ON k.item = e.name AND k.op IS NOT DISTINCT FROM o.name AND k.frame_id IS NOT DISTINCT FROM p.source_frame_id
WHERE p.rank = {int(rank)} AND p.category IN ({", ".join(q(c) for c in DEVICE)})"""


def _first_input_rank(op_args: str | None) -> int | None:
    """The number of dimensions of an operator's first input (its Kineto `Input Dims`), if recorded."""
    try:
        dims = (json.loads(op_args or "{}") or {}).get("Input Dims") or []
    except (TypeError, ValueError):
        return None
    return len(dims[0]) if dims and isinstance(dims[0], list) else None


SDPA = "torch.nn.functional.scaled_dot_product_attention (flash / memory-efficient kernels)"
"""What the advice names for attention: the one call that runs it fused (the attention class, and hand-written attention's softmax)."""
_SOFTMAX_KERNEL = re.compile(r"(?i)softmax")


def _args(op_args: str | None) -> dict:
    try:
        return json.loads(op_args or "{}") or {}
    except (TypeError, ValueError):
        return {}


def _input_dims(args: dict):
    """An operator's first input's dimensions (its Kineto `Input Dims`), if recorded."""
    return (args.get("Input Dims") or [None])[0]


def _input_dtype(args: dict) -> str | None:
    """An operator's first input's type (its Kineto `Input type`) as flops.DTYPE names it."""
    return flops.DTYPE.get(str((args.get("Input type") or [""])[0]).lower())


def _scores_like(dims) -> bool:
    """Dimensions shaped as attention's scores: [B, heads, L, L]."""
    return isinstance(dims, list) and len(dims) == 4 and all(isinstance(d, int) for d in dims) and dims[2] == dims[3] > 1


def _scores_shape(args: dict) -> list[int] | None:
    """The input of a softmax operator (its Kineto args) where it is shaped as attention's scores,
    [B, heads, L, L] over the last dimension (`Concrete Inputs`' dim, where recorded, -1 or 3);
    else None. [8, 21, 64, 64] softmaxed over its classes (dim 1) is a segmentation map, not scores."""
    dims = _input_dims(args)
    if not _scores_like(dims):
        return None
    concrete = args.get("Concrete Inputs") or []
    dim = concrete[1] if isinstance(concrete, list) and len(concrete) > 1 else ""
    return dims if dim in ("", None, "-1", "3") else None


def _softmax_op(run, rank: int, event_id: int) -> tuple | None:
    """The top-level operator of a kernel (`event_id`) or of its forward operator for backward work
    (`fwd_op_id`): (event_id, name, args, tid, start, end, source_frame_id), None where there is none.
    Three lookups of one event each, which the events' row groups' bounds on event_id keep to a
    row group (a join of the events with themselves read the whole rank: 80-100 ms a kernel)."""
    r = int(rank)
    got = run.sql(f"SELECT coalesce(fwd_op_id, top_op_id) FROM events WHERE rank = {r} AND event_id = {int(event_id)}").fetchone()
    if got and got[0] is not None:
        got = run.sql(f"SELECT top_op_id FROM events WHERE rank = {r} AND event_id = {int(got[0])}").fetchone()
    if not got or got[0] is None:
        return None
    return run.sql(f"SELECT event_id, name, args, tid, ts_ns, ts_ns + dur_ns, source_frame_id FROM events "
                   f"WHERE rank = {r} AND event_id = {int(got[0])}").fetchone()


def _between_products_sql(rank: int, op: tuple) -> str:
    """Whether on the statement of the softmax operator `op` (_softmax_op's row; same thread) the
    nearest top-level matrix product or softmax before it and after it are both matrix products
    (vocab.ATTENTION_PRODUCT_OPS): `softmax(q @ k.T) @ v`. Where the statement is a def line (an
    imported trace's Python frames), only the operators inside the same call of its function count:
    the outermost Python call of that frame around the softmax."""
    both = kinds_sql(sorted(ATTENTION_PRODUCT_OPS | SOFTMAX_OPS))
    products = kinds_sql(sorted(ATTENTION_PRODUCT_OPS))
    op_id, tid, t0, t1, fr = ("NULL" if op[i] is None else int(op[i]) for i in (0, 3, 4, 5, 6))  # (a null compares as in a join)
    return f"""WITH c AS (SELECT p.ts_ns AS c0, p.ts_ns + p.dur_ns AS c1 FROM events p
  WHERE p.rank = {int(rank)} AND p.tid = {tid} AND p.frame_id = {fr} AND p.kind = 'python' AND p.ts_ns <= {t0}
    AND p.ts_ns + p.dur_ns >= {t1} ORDER BY p.ts_ns, p.dur_ns DESC LIMIT 1),
seq AS (SELECT e.event_id, lag(e.name) OVER w AS before, lead(e.name) OVER w AS after
  FROM events e LEFT JOIN c ON true
  WHERE e.rank = {int(rank)} AND e.tid = {tid} AND e.source_frame_id = {fr} AND {top_op('e')} AND e.name IN {both}
    AND (c.c0 IS NULL OR e.ts_ns BETWEEN c.c0 AND c.c1)
  WINDOW w AS (ORDER BY e.ts_ns, e.event_id))
SELECT coalesce(bool_or(before IN {products} AND after IN {products}) FILTER (WHERE event_id = {op_id}), false) FROM seq"""


def _unfused_attention(run, rank: int, members: list[dict]) -> list[dict]:
    """The normalisation class's members that are the softmax of hand-written attention, heaviest
    first, each with `scores` (the softmax's input shape where it is [B, heads, L, L], `_scores_shape`),
    `dtype` (its input's, flops.DTYPE) and `between` (a matrix product before and after it on its
    statement, `_between_products_sql`): a kernel named softmax (or of a softmax operator)
    whose softmax operator, the forward one for backward work, is either. h100_timesformer_inference:
    cunn_SoftMaxForward over [8×12×3137×3137] bf16 inside linear → matmul → mul → softmax → dropout →
    matmul of modeling_timesformer.py:200, 68.69 ms, was told to use a fused LayerNorm in lower precision."""
    out = []
    for m in members:
        if m["sample_id"] is None or not (_SOFTMAX_KERNEL.search(m["item"] or "") or _SOFTMAX_KERNEL.search(m["op"] or "")):
            continue
        op = _softmax_op(run, rank, m["sample_id"])
        if not op or op[1] not in SOFTMAX_OPS:
            continue
        # (no thread or no statement: nothing is on its statement)
        between = op[3] is not None and op[6] is not None and bool(run.sql(_between_products_sql(rank, op)).fetchone()[0])
        args = _args(op[2])
        scores = _scores_shape(args)
        if scores is None and not between:
            continue
        out.append({**m, "scores": scores, "dtype": _input_dtype(args), "between": between})
    return out


_SCORE_OPS = frozenset({"aten::masked_fill", "aten::masked_fill_", "aten::dropout", "aten::native_dropout", "aten::_to_copy"})
"""Operators over attention's scores beside the elementwise ones (ELEMENTWISE_OPS): the mask, the dropout, a cast."""


ATTENTION_PART_CLASSES = ("matmul", "fp32_matmul", "elementwise")
"""The classes whose members can be hand-written attention's products and score arithmetic."""


def _attention_parts(run, rank: int, members: list[dict], attention: list[dict]) -> list[dict]:
    """The members of a class that are the rest of hand-written attention (`attention`: its softmaxes,
    `_unfused_attention`) on the same statement: the kernels of its matrix products (SCORE_PRODUCT_OPS,
    the copies they make included) and of the elementwise operators over [B, heads, L, L] scores (the
    scaling, the mask), all of which scaled_dot_product_attention computes in its one kernel, and in
    backward the kernels of the autograd nodes of those operators (backward work takes its forward's
    statement; its operator is the node, so the forward operator it was built from is read:
    `_forward_ops`). h100_timesformer_inference, modeling_timesformer.py:200: the products' 43.21 ms
    and the scaling's 15.55 ms were two more findings, 'shapes that are multiples of 8' and 'fuse them
    with torch.compile'."""
    frames = {m["frame_id"] for m in attention if m["frame_id"] is not None}
    mine = [m for m in members if m["frame_id"] in frames and m["op"]]
    forward = _forward_ops(run, rank, [m["sample_id"] for m in mine if m["op"].startswith(EVALUATE_PREFIX) and m["sample_id"] is not None])
    out = []
    for m in mine:
        op, args = (forward.get(m["sample_id"]) or (None, None)) if m["op"].startswith(EVALUATE_PREFIX) else (m["op"], m.get("op_args"))
        if op in SCORE_PRODUCT_OPS:
            out.append(m)
        elif op is not None and (op in ELEMENTWISE_OPS or op in _SCORE_OPS) and _scores_like(_input_dims(_args(args))):
            out.append(m)
    return out


def _forward_ops(run, rank: int, event_ids: list[int]) -> dict[int, tuple[str, str | None]]:
    """{event id: (name, Kineto args)} of the forward operator each backward event was built from
    (`fwd_op_id`); one query for all."""
    if not event_ids:
        return {}
    rows = run.sql(f"""SELECT e.event_id, o.name, o.args FROM events e JOIN events o ON o.rank = {int(rank)} AND o.event_id = e.fwd_op_id
WHERE e.rank = {int(rank)} AND e.event_id IN ({", ".join(str(int(i)) for i in sorted(set(event_ids)))})""").fetchall()
    return {int(i): (name, args) for i, name, args in rows}


def _key(m: dict) -> tuple:
    """A path item's identity (critical_path.path_items groups by these)."""
    return m["category"], m["item"], m["op"], m["frame_id"], m["cause"]


def _low_precision(m: dict) -> str | None:
    """The 16-bit (or narrower) type a kernel runs in: its name's (vocab.kernel_precision), else its
    operator's first input's (flops.DTYPE); None for fp32 or unknown."""
    dtype = _input_dtype(_args(m.get("op_args")))
    return kernel_precision(m.get("item")) or (dtype if dtype in ("bf16", "fp16", "fp8") else None)


def _run_low(members: list[dict]) -> str | None:
    """What kernels that run in 16 bits or fewer (`_low_precision`) run in ('they run in bf16',
    'most of them run in bf16/fp16') where they hold at least half of the members' time, else
    None: the one test of whether a class runs in a lower precision already, for its advice's
    precision words (`_in_lower_precision`) and the matrix class's 'what is left'. The rest may be
    fp32 on purpose or of no type the trace shows (h100 Qwen1.5 chat: 80% of its elementwise kernels'
    time bf16 by their operators' inputs, the rest launched outside any operator)."""
    low: dict = {}
    for m in members:
        dtype = _low_precision(m)
        low[dtype] = low.get(dtype, 0) + m["charged_ns"]
    known = sorted(k for k in low if k is not None)
    if not known or sum(low[k] for k in known) * 2 < sum(low.values()):
        return None
    return f"{'they run' if None not in low else 'most of them run'} in {'/'.join(known)}"


def _in_lower_precision(members: list[dict], words: str, say_already: bool = True) -> str:
    """`words` (" in lower precision") unless the members run in 16 bits or fewer already (`_run_low`);
    else what they run in (with `say_already`) or "", so that bf16 kernels are not told to lower it."""
    low = _run_low(members)
    if low is None:
        return words
    return f" ({low} already)" if say_already else ""


def _fused_attention(members: list[dict]) -> bool:
    """The attention class's heaviest kernels are fused attention already: kernels named as attention
    kernels are (vocab.ATTENTION_KERNEL_PATTERN: flash, memory-efficient, `attn_fwd`), not the matrix
    products and softmax that scaled_dot_product_attention's math backend runs, which the class holds
    by their operator. Telling them to use it is advice taken (Qwen1.5 chat on an H100:
    flash_fwd_kernel of aten::scaled_dot_product_attention was told to use scaled_dot_product_attention)."""
    top = members[:3]
    return bool(top) and all(_ATTENTION_KERNEL.search(m["item"] or "") for m in top)


_ATTENTION_KERNEL = re.compile(ATTENTION_KERNEL_PATTERN)


def _norm_words(members: list[dict]) -> str:
    """The advice for LayerNorm / RMSNorm / BatchNorm kernels."""
    return ("normalisation bounds the step: fused implementations (torch.compile, apex / fused LayerNorm, RMSNorm)"
            + _in_lower_precision(members, " in lower precision"))


def _attention_words(attention: list[dict], parts: dict[str, list[dict]] | None = None) -> str:
    """The advice for the softmax of hand-written attention (`_unfused_attention`): SDPA, with the
    size of the heaviest one's scores, which each call writes to memory and reads back, and the rest
    of that attention on the path (`parts`: `_attention_parts` of the other classes), whose own
    findings leave it to this one (`leaves_to`)."""
    ns = sum(m["charged_ns"] for m in attention)
    why = ("between two matrix products of one statement" if all(m["between"] for m in attention) else
           "over [batch, heads, L, L] scores" if all(m["scores"] for m in attention) else
           "between two matrix products of one statement, or over [batch, heads, L, L] scores")
    text = f"unfused attention: {_names_of(attention)} ({ms(ns)} in all) is the softmax of hand-written attention ({why}"
    shaped = next((m for m in attention if m["scores"]), None)
    if shaped:
        dims, dtype = shaped["scores"], shaped["dtype"]
        nbytes = flops.SIZE.get(dtype or "", 4) * dims[0] * dims[1] * dims[2] * dims[3]
        text += (f"; at L={dims[2]} each call's [L×L] scores, [{'×'.join(map(str, dims))}]{' ' + dtype if dtype else ''}, "
                 f"are {size(nbytes)} written to memory and read back")
    rest = [(cls, sum(m["charged_ns"] for m in ms_)) for cls, ms_ in (parts or {}).items() if ms_]
    if rest:
        words = {"matmul": "its matrix products", "fp32_matmul": "its fp32 matrix products", "elementwise": "its score arithmetic"}
        text += ("; with " + ", ".join(f"{words[c]} {ms(n)}" for c, n in rest) + " on the same statement, the attention holds "
                 f"{ms(ns + sum(n for _, n in rest))} of the path")
    return (text + f"). Use {SDPA}" + _in_lower_precision(attention, " in bf16/fp16", False)
            + ": one kernel computes the products, the scaling, the mask, the softmax and the dropout without writing the "
            "scores to memory")


def _advice(cls: str, members: list[dict], events: int, charged: int, step_count: int, arch, graphs: str = "",
            one_off_ns: int = 0, has_modules: bool = False, unrecorded_ns: int = 0,
            stretches: tuple[int, list[tuple[str, int]]] = (0, []), attention: list[dict] = (), path_ns: int = 0,
            attention_parts: dict[str, list[dict]] | None = None, profiler: str = "", compiled: str = "",
            replayed: bool = False, untraced: tuple[int, bool] = (0, False)) -> str:
    """The class's advice. `one_off_ns`: the launch class's one-off, the ns the path charges the one
    call that holds most of it (`critical_path.one_off_launch`: a kernel's first launch loading its code), 0 for none.
    `has_modules`: the rank's path items carry nn.Module paths (so Python without one is outside the model).
    `unrecorded_ns`: host time charged to no event after the last event the trace holds (critical_path.unrecorded_by_step, in the bound's steps).
    `stretches`: the host time in long stretches and the names holding it (`_long_stretches`).
    `attention`: the normalisation class's members that are hand-written attention's softmax
    (`_unfused_attention`): SDPA first, then the normalisation advice for the rest where it is
    CLASS_SHARE_MIN of the path (`path_ns`) or more. `compiled`: the host class's words where most of it
    runs torch.compile'd code (`_compiled_words`), which replace the advice to compile. `replayed`: most of
    the class's kernels' time is kernels a CUDA/HIP graph replays (`_replayed`), so graphs are not advised.
    `untraced`: the host class's time in no traced call (`_untraced_ns`), and whether the trace records
    Python calls (then none ran in that time: native code or a wait outside Python)."""
    if cls == "host" and unrecorded_ns * 2 >= charged:
        return (f"{ms(unrecorded_ns)} of the step's time is its range running on after the last event the trace holds: nothing "
                "was recorded there, so it is no Python to speed up and no saving (this finding's impact and saving bound leave it "
                "out). The profiler's window closed (or its events were dropped) before the step ended. Profile with a schedule "
                "(torch.profiler.schedule(wait=1, warmup=1, active=3)) "
                "and call prof.step() once per step, so that each recorded step ends where the next begins.")
    graphs, profiler = graphs or P.graph_advice(None), profiler or P.profiler_advice(None)
    per_step = events / max(step_count, 1)
    if cls in WORK_CLASSES and cls not in ("communication", "memcpy"):
        tips = []
        from_compiled = sum(m["charged_ns"] for m in members if is_compiled_run(m["op"])) * 2 >= charged  # torch.compile'd already
        if cls == "fp32_matmul":
            tips.append("fp32 GEMMs/convolutions: " + _fp32_advice(members, arch))
        # convolution work: a kernel or its operator named so (a backward node's included: its inputs' layout is its
        # forward's), told channels_last where some forward one takes a 4-d NCHW input and they are NCHW_SHARE_MIN of the class
        convs = [m for m in members if CONV.search(m["op"] or "") or CONV.search(m["item"] or "")]
        conv = sum(m["charged_ns"] for m in convs)
        nchw = any(not NHWC.search(m["item"] or "") and _first_input_rank(m["op_args"]) == 4 for m in convs)
        if nchw and conv >= THRESHOLDS["NCHW_SHARE_MIN"] * charged:
            tips.append("NCHW convolutions" + (f" ({ms(conv)} of this time)" if conv < charged else "") + ": convert the model and "
                        "its inputs to channels_last (model.to(memory_format=torch.channels_last), "
                        "x.to(memory_format=torch.channels_last)) so that "
                        f"{P.conv_library(arch)} runs them with its NHWC kernels on the {P.matrix_units(arch)[0]}")
        if cls == "matmul":  # GEMMs and convolutions alike: the sizes the matrix units run at full speed
            tips.append(f"{'all of them: ' if tips else 'these kernels bound the step: '}{P.matrix_sizes_advice(arch)}; "
                        + (f"{low} already: what is left is {P.TUNED_GEMM}" if (low := _run_low(members)) else
                           "larger batches, or run them less often"))
        if attention:
            tips.append(_attention_words(attention, attention_parts))
            keys = {_key(m) for m in attention}
            rest = [m for m in members if _key(m) not in keys]
            if rest and _at_least_share(rest, path_ns):
                tips.append("the other kernels: " + _norm_words(rest))
        if _many_small(events, charged, step_count):
            if replayed:  # no launch each already: graphs are advice taken (xDiT FLUX's Inductor kernels, replayed by hipGraphLaunch)
                tips.append(f"{per_step:.0f} short kernels per step, " + ("most from torch.compile'd code and " if from_compiled else "")
                            + f"replayed from a {graph_kind(graphs)} graph already (no launch each): "
                            "what is left is fewer, larger kernels, "
                            + ("letting the compiler fuse more (graph-break names any breaks)" if from_compiled else
                               "fused (torch.compile the module, fused or foreach implementations)"))
            elif from_compiled:  # not 'torch.compile'
                tips.append(f"{per_step:.0f} short kernels per step, most from torch.compile'd code already: "
                            + (f"{graphs} replay them without a launch each" if not graphs.startswith("torch.compile") else
                               "a larger batch per kernel"))
            else:
                tips.append(f"{per_step:.0f} short kernels per step: fuse them (torch.compile the module, fused or foreach implementations)")
        if not tips and cls == "attention" and _fused_attention(members):
            ops = sorted({m["op"] for m in members[:3] if m["op"]})
            tips.append("attention bounds the step, and it runs fused already (" + (", ".join(ops) if ops else "its kernels' names say so")
                        + "): its time grows with the sequence length squared and the heads; " + FUSED_ATTENTION_LEFT)
        elif not tips and cls == "attention":
            tips.append(f"attention bounds the step: use {SDPA}" + _in_lower_precision(members, " in bf16/fp16", False))
        elif not tips and cls == "norm":
            tips.append(_norm_words(members))
        elif not tips and cls == "elementwise":
            tips.append("elementwise kernels bound the step: they move bytes and do little arithmetic; "
                        + ("they come from torch.compile'd code already: make fewer passes over the tensors" if from_compiled else
                           "fuse them with torch.compile or make fewer passes over the tensors")
                        + _in_lower_precision(members, ", or move fewer bytes (a lower precision)"))
        elif not tips:
            tips.append("these kernels bound the step: check what they do for the shapes and dtypes they are given, call them "
                        "less often or on bigger batches, or swap in faster implementations"
                        + _in_lower_precision(members, ", or run them in a lower precision"))
        return "; ".join(tips) + "."
    if cls == "communication":
        return ("Collectives bound the step: overlap them with compute (DDP gradient buckets, gradient_as_bucket_view, FSDP "
                "prefetch) or communicate less often (gradient accumulation, larger buckets).")
    if cls == "memcpy":
        return ("Copies on the critical path: keep tensors on the device, pin host memory (DataLoader(pin_memory=True)) and copy "
                "with .to(device, non_blocking=True) so copies overlap compute.")
    if cls == "input":
        return "Data loading bounds the step: DataLoader(num_workers>0, pin_memory=True, persistent_workers=True, prefetch_factor)."
    if cls == "idle_launch":
        return ("The device waits for the host to launch work: the host is the bottleneck here; " + graphs
                + ("" if graphs.startswith("torch.compile") else " or torch.compile") + " to launch fewer kernels.")
    if cls == "idle":
        unseen = sum(m["charged_ns"] for m in members if m["cause"] == cp.UNSEEN_QUEUE)
        if unseen * 2 >= charged > 0:  # ready work that waited with nothing the trace holds running: not a stream to overlap
            return unseen_queue_words(unseen, "this time", profiler) + "; overlapping streams does not shorten it."
        return "The device waits on another stream or between kernels: overlap independent work across streams."
    if cls == "host_sync":
        copies = sum(m["charged_ns"] for m in members if m["cause"] == cp.WAITING_IN_COPY)
        syncs = ("fewer .item() / float(t) / data-dependent branches in the loop; log metrics every N steps; keep values on "
                 "the device.")
        if not copies:
            return "The host waits on the device here: " + syncs
        in_copies = (f"{ms(copies)} of this time is the host inside blocking copies to the host ({_names(members, cp.WAITING_IN_COPY)}), "
                     "each waiting for the device work queued before it: copy into pinned memory with non_blocking=True and "
                     "synchronise only where the value is used, or keep the value on the device.")
        return in_copies + " Other waits: " + syncs if copies * 2 >= charged else "The host waits on the device here: " + syncs + " " + in_copies
    if cls == "launch" and one_off_ns:
        return (f"One launch call of {ms(one_off_ns)} holds {pct(min(1.0, one_off_ns / charged))} of this time: a kernel's first "
                "launch loads its code (CUDA's lazy module loading, ROCm's code objects), a one-off that warm-up steps absorb, "
                "not the cost of every launch. " + STEADY_STEPS + " before fusing or capturing graphs.")
    if cls == "launch":
        return ("Launch overhead bounds the step: " + graphs + ("" if graphs.startswith("torch.compile") else ", torch.compile to fuse kernels")
                + ", or a larger batch per launch.")
    # Python outside every torch operator and every nn.Module (a rank that records modules): work before or
    # after the model (decoding, preprocessing), which compiling the model or capturing its graphs does not touch
    outside = [m for m in members if m["op"] is None and m["item"] is not None and m["module_path"] is None] if has_modules else []
    outside_ns = sum(m["charged_ns"] for m in outside)
    if cls == "host" and outside_ns * 2 >= charged:
        return (f"Python outside the model (in no operator and no nn.Module) is {ms(outside_ns)} of this time "
                f"({', '.join(_describe(m) for m in outside[:3])}): code before or after the model, such as input decoding, "
                "preprocessing or logging, which compiling the model or capturing its graphs does not speed up. Take it off "
                "the step's path: prepare the next input while the model runs (a DataLoader with num_workers>0, or a "
                "background thread or process), do it with tensor operations on the device, or do it less often.")
    long_ns, long_names = stretches
    if cls == "host" and long_ns * 2 >= charged:
        names = ", ".join(f"{n} {ms(ns)}" for n, ns in long_names[:3])
        return (f"{ms(long_ns)} of this time is long stretches ({ms(THRESHOLDS['LONG_STRETCH_NS'])} or more each) inside "
                f"operators or ranges with nothing recorded beneath them ({names}): not the dispatcher overhead between "
                "operators that compiling removes, but a wait the trace does not show (a sync inside a library or the "
                "optimizer, the autograd engine's thread, a collective waiting for another rank) or Python it does not "
                "record. " + SEE_UNTRACED + ", to see which before compiling; "
                "where ranks wait for each other, collective-wait and rank-skew say for how long.")
    untraced_ns, python = untraced
    if cls == "host" and untraced_ns * 2 >= charged:
        what, see = (("in no traced call, not even a Python one: the host was in native code or waiting outside Python (a sleep, "
                      "a sync inside a library, the GIL held by another thread), so the trace does not say what to make faster",
                      "Sample the process with its native frames (py-spy record --native) to see it.") if python else
                     ("in no traced call: the host ran code or waited where the trace records no operator, Python call or range "
                      "(Python between operators, a sleep, a wait the profiler does not record such as a sync inside a library), so it "
                      "does not say what to make faster",
                      SEE_UNTRACED + ", to see what it did."))
        return f"{ms(untraced_ns)} of this time is {what}, and compiling or capturing graphs may not touch it. {see}"
    if compiled:
        return _known_host_costs(cls, members, charged) + compiled
    tools = (graphs + " cuts Python and dispatcher overhead and per-kernel launches" if graphs.startswith("torch.compile") else
             "torch.compile cuts Python and dispatcher overhead, " + graphs + " remove per-kernel launches")
    return (_known_host_costs(cls, members, charged) + "Host time bounds the step: " + tools
            + ", a larger batch amortises both; fewer .item() calls keep the host from waiting.")


def _compiled_words(ctx: Context, members: list[dict], charged: int) -> str:
    """The host class's advice where at least half of it is calls of torch.compile'd code
    (vocab.is_compiled_run: AOT autograd's CompiledFunction / CompiledFunctionBackward, Inductor's graph
    calls, Dynamo's regions), else "": the model runs compiled, and compiling it is advice taken. Where
    those calls launched MIN_COMPILED_KERNELS kernels or more and none was generated by a compiler
    (COMPILER_KERNEL), the backend runs ATen's kernels one by one (backend='aot_eager'), and the default
    backend would fuse them. HolisticTraceAnalysis's df_index_resolver trace (V100, DDP, 2022): 1,111 of
    1,448 ms of host time in CompiledFunction / CompiledFunctionBackward, 19,370 kernels, none Triton's,
    was told 'torch.compile cuts Python and dispatcher overhead'."""
    runs = [m for m in members if is_compiled_run(m["item"])]
    ns = sum(m["charged_ns"] for m in runs)
    if not runs or ns * 2 < charged:
        return ""
    graphs = graph_tip(ctx)
    text = (f"{ms(ns)} of this time is in calls of torch.compile'd code ({_names_of(runs)}): the model runs compiled already, "
            "so compiling it again does not cut it. " + unfused_backend_words(ctx, [m["item"] for m in runs]))
    text += "What is inside those calls shows where their host time goes (the operators and launches their graphs run)"
    if not graphs.startswith("torch.compile"):
        text += f"; {graphs} replay their kernels without launching each one"
    return text + "; a larger batch amortises it."


def _known_host_costs(cls: str, members: list[dict], charged: int) -> str:
    """What the host class's advice says first where a known cost with a known fix is at least
    KNOWN_HOST_SHARE_MIN of the class: DistributedDataParallel's buffer broadcast at every forward
    (vocab.DDP_BUFFER_BROADCAST_OPS: a broadcast with its flatten and unflatten), an optimizer's
    zero_grad zeroing each gradient with a kernel (vocab.ZERO_GRAD_RANGE); else ""."""
    if cls != "host":
        return ""
    least = THRESHOLDS["KNOWN_HOST_SHARE_MIN"] * charged
    out = ""
    ddp = [m for m in members if m["item"] in DDP_BUFFER_BROADCAST_OPS]
    ns = sum(m["charged_ns"] for m in ddp)
    if DDP_BUFFER_BROADCAST_OPS[0] in {m["item"] for m in ddp} and ns >= least:
        out += (f"DistributedDataParallel's broadcast of the module's buffers is {ms(ns)} of this time ({_names_of(ddp)}): at every "
                "forward it copies rank 0's buffers (BatchNorm's running statistics) to every rank. Where the ranks' buffers need not "
                "be identical, DistributedDataParallel(model, broadcast_buffers=False) skips it (or torch.nn.SyncBatchNorm keeps the "
                "statistics in step as they are computed). ")
    zero = [m for m in members if (m["item"] or "").startswith(ZERO_GRAD_RANGE)]
    ns = sum(m["charged_ns"] for m in zero)
    if ns >= least and ns:
        out += (f"The optimizer's zero_grad is {ms(ns)} of this time ({zero[0]['item']}): it zeroes each gradient with a kernel "
                f"launched from the host; {SET_TO_NONE}. ")
    return out


def _fp32_advice(members: list[dict], arch) -> str:
    """The fp32 class's precision advice (peaks.precision_advice): TF32 is not advised for kernels
    whose names say the Tensor Cores run them as TF32 already (vocab.kernel_runs_tf32:
    a100_train_blocking_dtoh's cutlass_80_tensorop_s1688gemm kernels), only for the matrix kernels
    beside them that run plain fp32 (ampere_sgemm, implicit_convolve_sgemm), named with their time."""
    if not any(kernel_runs_tf32(m["item"]) for m in members):
        return P.precision_advice(arch)
    # TF32 moves only matrix kernels onto the Tensor Cores (not a GEMM's bias reduction, its split-K reduce, a gemv)
    plain = [m for m in members if is_matrix_kernel(m["item"]) and not kernel_runs_tf32(m["item"])]
    more = f" and {len(plain) - 3} more" if len(plain) > 3 else ""
    return P.precision_advice(arch, tf32_already=True, not_tf32=_names_of(plain) + more if plain else "")


def _untraced_ns(members: list[dict]) -> int:
    """The host class's time in no traced call: its members with no item (critical_path.UNTRACED, host
    time outside every operator, Python call and range the trace records)."""
    return sum(m["charged_ns"] for m in members if m["item"] is None and m["category"] == "host_compute")


def _names_of(members: list[dict]) -> str:
    """Members with their charged time, heaviest first, at most three (kernels that would read alike told apart)."""
    shown = members[:3]
    labels = kernel_labels((m["item"] for m in shown if m["category"] in DEVICE), 48)
    return ", ".join(f"{_describe(m, labels)} {ms(m['charged_ns'])}" for m in shown)


def _names(members: list[dict], cause: str) -> str:
    """The items of `members` with this cause, heaviest first, at most three, with their charged time."""
    return _names_of([m for m in members if m["cause"] == cause])


def _describe(it: dict, labels: dict | None = None) -> str:
    """An item as people read it; a kernel by its label among the items shown beside it (`labels`)."""
    cat, item = it["category"], it["item"]
    if item is None:
        return cp.UNTRACED
    if cat in DEVICE:
        return ((labels or {}).get(item) or kernel_name(item, 48)) + (f" of {it['op']}" if it["op"] else "")
    short = item if len(item) <= 48 else item[:45] + "…"
    if cat == "idle":
        return f"before {short}"
    return short


def _class_words(cls: str, members: list[dict]) -> str:
    if cls in WORK_CLASSES:
        noun = {"communication": "collectives", "memcpy": "copies"}.get(cls, "kernels")
        words = WORK_CLASSES[cls] if cls not in ("communication", "memcpy") else ""
        names = len({m["item"] for m in members if m["item"] is not None})
        return (f"{words} {noun}" if words else noun) + f" ({names} name{'s' if names != 1 else ''})"
    return HOST_CLASSES[cls]


def _recorded(members: list[dict], unrecorded: int) -> list[dict]:
    """The host class's members less the unrecorded time (critical_path.unrecorded_by_step, in the bound's steps), which the path charges
    to untraced host time (item None, heaviest first): what the trace shows, heaviest first, members
    left with nothing dropped. cuda_triton: 'Python outside every traced call' 13,334.91 ms was
    13,334.48 ms after the last event and 0.43 ms between the recorded calls."""
    out, left = [], unrecorded
    for m in members:
        if m["item"] is None and left > 0:
            taken = min(left, m["charged_ns"])
            left -= taken
            m = {**m, "charged_ns": m["charged_ns"] - taken}
        if m["charged_ns"] > 0:
            out.append(m)
    return sorted(out, key=lambda m: -m["charged_ns"])


def _unseen_waits(ctx: Context, path) -> tuple[int, int]:
    """(the host time on the path inside the rank's waiting runtime calls, host_sync.waits_union; the
    part of it in which no device of the rank ran anything the trace holds). a100_train_blocking_dtoh:
    its host waits on the path are two blocking copies of 64 ms each with nothing on the device."""
    import numpy as np

    host = np.isin(path.category, [cp.CATEGORIES.index(c) for c in ("host_compute", "launch_overhead")])
    if not host.any():
        return 0, 0
    pieces = metrics.union_array(path.ts[host], path.ts[host] + path.ns[host])
    on_path = metrics.intersect_unions(pieces, host_sync.waits_union(ctx.run, ctx.rank))
    if not len(on_path):
        return 0, 0
    return int((on_path[:, 1] - on_path[:, 0]).sum()), host_sync.unseen_ns(ctx.run, ctx.rank, on_path)


STRETCH_KINDS = ("cpu_op", "user_annotation")
"""The events a long stretch is charged to: operators and record_function ranges (a Python function
of a trace with stacks is Python the trace shows, not a stretch it cannot see into)."""


def _long_stretches(run, path) -> tuple[int, list[tuple[str, int]]]:
    """Host time the path charges in pieces of LONG_STRETCH_NS or more, each whole to one operator or
    record_function range (STRETCH_KINDS) with nothing recorded beneath it, and the names holding most
    of it (heaviest first). Dispatcher overhead comes in microseconds between operators; a stretch of
    a millisecond or more with nothing recorded is a wait the trace does not show (a sync inside a
    library, the autograd engine's thread, a collective) or Python it does not record. multirank_128:
    957 of rank 0's 1,188 ms, inside `## backward ##` (27 ms at most at once), `aten::_foreach_mul_`
    (one gap of 107 ms between its calls of aten::mul_) and `forward`. The kinds and names are the
    path's own (`critical_path.derived`): no query."""
    import numpy as np

    mask = ((path.category == cp.CATEGORIES.index("host_compute")) & (path.event_id >= 0)
            & (path.ns >= THRESHOLDS["LONG_STRETCH_NS"]))
    if not mask.any():
        return 0, []
    info, _ = cp.derived(run, path)
    rows = info.rows(path.event_id[mask])
    keep = info.of_kinds(rows, STRETCH_KINDS)
    if not keep.any():
        return 0, []
    names, inverse = np.unique(info.name[rows[keep]], return_inverse=True)
    per = np.bincount(inverse, weights=path.ns[mask][keep]).astype(np.int64)
    by_name = sorted(((info.strs[int(c)], int(ns)) for c, ns in zip(names, per)), key=lambda kv: (-kv[1], kv[0] or ""))
    return int(per.sum()), by_name


def one_off_launch(ctx: Context) -> tuple[int, int] | None:
    """The rank's one-off launch as this rule's launch finding names it (`one_off_ns`): (event id,
    charged ns) when the launch class holds at least CLASS_SHARE_MIN of the path and one call holds
    at least half of it; else None. device-idle leaves the device's idle during that call to this
    rule. Computed by the check (kept with the rank's path), or here when the check did not run."""
    path = cp.path_of(ctx.run, ctx.rank)
    if "one_off_launch" not in path._derived:
        if not len(path):
            return None
        classes = _classes(ctx.run, path)
        _keep_one_off(ctx.run, path, classes, _ranked(classes))
    return path._derived["one_off_launch"]


def _many_small(events: int, charged: int, step_count: int) -> bool:
    """A class of many small kernels: SMALL_KERNELS_PER_STEP or more per step, each charged under
    SMALL_KERNEL_NS on average (its advice's short-kernel words)."""
    return (events / max(step_count, 1) >= THRESHOLDS["SMALL_KERNELS_PER_STEP"]
            and charged / max(events, 1) < THRESHOLDS["SMALL_KERNEL_NS"])


def _replayed(run, rank: int, members: list[dict]) -> bool:
    """At least half of the device time of the members' kernels (by name, over the rank) is kernels a
    CUDA/HIP graph launch replayed (`events.graph`): they pay no launch each, and graphs are advice
    taken (launch-overhead leaves such kernels out for the same reason)."""
    names = sorted({m["item"] for m in members if m["item"] is not None})
    if not names:
        return False
    graph_ns, all_ns = run.sql(f"SELECT coalesce(sum(dur_ns) FILTER (WHERE graph), 0), coalesce(sum(dur_ns), 0) FROM events "
                               f"WHERE rank = {int(rank)} AND kind = 'kernel' AND name IN ({', '.join(q(n) for n in names)})").fetchone()
    return _mostly(int(graph_ns), int(all_ns))


def _classes(run, path) -> dict[str, list[dict]]:
    """The path's items (`critical_path.path_items`, heaviest first) by class, in that order."""
    classes: dict[str, list[dict]] = {}
    for it in cp.path_items(run, path, by_step=True):
        classes.setdefault(_class_of(it), []).append(it)
    return classes


def _attention_finding(members: list[dict], attention: list[dict], parts: dict[str, list[dict]],
                       classes: dict[str, list[dict]], named: set[str], total: int) -> tuple[list[dict], int, dict, dict]:
    """The members, charged ns, per-step ns and folded parts of the finding on hand-written attention,
    which a normalisation class most of which is its softmax becomes: the softmax (`attention`), the
    rest of the attention (`parts`, `_attention_parts`) from each class that leaves its finding to this
    one (`_mostly`) or that the check does not name (`named`): the folded parts, by class;
    and the class's other kernels where its advice names them (CLASS_SHARE_MIN of the path `total`).
    Parts of a class the check names with a finding of its own stay that finding's (no time in two
    findings). h100_timesformer_inference: the softmax 68.77 ms, its products 44.85 ms and its
    scores' scaling 20.66 ms, 134.28 ms in all (the class alone was 70.86 ms: the title led with
    'normalisation/softmax kernels' and the impact left the products out)."""
    keys = {_key(m) for m in attention}
    rest = [m for m in members if _key(m) not in keys]
    folded = {c: ms_ for c, ms_ in parts.items() if ms_ and (c not in named or _mostly(
        sum(x["charged_ns"] for x in ms_), sum(x["charged_ns"] for x in classes.get(c, []))))}
    kept = attention + [m for ms_ in folded.values() for m in ms_] + (rest if _at_least_share(rest, total) else [])
    shown = sorted(kept, key=lambda m: (-m["charged_ns"], str(m["item"])))
    step_ns: dict = {}
    for m in shown:
        for st, ns in (m.get("step_ns") or {}).items():
            step_ns[st] = step_ns.get(st, 0) + ns
    return shown, sum(m["charged_ns"] for m in shown), step_ns, folded


def _mostly(part_ns: int, class_ns: int) -> bool:
    """`part_ns` is at least half of a class's `class_ns`: a normalisation class mostly hand-written
    attention's softmax is that attention's finding (`is_attention_finding`), and a GEMM or elementwise
    class mostly that attention's products and score arithmetic leaves its finding to it (`leaves_to`),
    which holds that part (`_attention_finding`)."""
    return part_ns * 2 >= class_ns > 0


def _attention_class_words(attention: list[dict], folded: dict[str, list[dict]], shown: list[dict]) -> str:
    """The attention finding's class words: what its time is made of ('hand-written attention (softmax
    68.77 ms, matrix products 44.85 ms, score arithmetic 20.66 ms)'), then the normalisation kernels
    beside it that it names (`_attention_finding`: ' and normalisation/softmax kernels (1 name) 0.30 ms')."""
    words = {"matmul": "matrix products", "fp32_matmul": "fp32 matrix products", "elementwise": "score arithmetic"}
    pieces = [("softmax", sum(m["charged_ns"] for m in attention))]
    pieces += [(words[c], sum(m["charged_ns"] for m in ms_)) for c, ms_ in folded.items()]
    attention_keys = {_key(m) for ms_ in [attention, *folded.values()] for m in ms_}
    rest = [m for m in shown if _key(m) not in attention_keys]
    text = "hand-written attention (" + ", ".join(f"{w} {ms(n)}" for w, n in pieces if n) + ")"
    return text + (f" and {_class_words('norm', rest)} {ms(sum(m['charged_ns'] for m in rest))}" if rest else "")


def _at_least_share(members: list[dict], total: int) -> bool:
    """Members whose charged ns are CLASS_SHARE_MIN of the path's `total` or more: a class the check
    names (among the ranked ones), or a part of one its advice names."""
    return bool(total) and sum(m["charged_ns"] for m in members) >= THRESHOLDS["CLASS_SHARE_MIN"] * total


def _ranked(classes: dict[str, list[dict]]) -> list[tuple[str, list[dict]]]:
    """The classes the check may name: the MAX_CLASSES heaviest (ties: by name)."""
    return sorted(classes.items(), key=lambda kv: (-sum(m["charged_ns"] for m in kv[1]), kv[0]))[:THRESHOLDS["MAX_CLASSES"]]


def _keep_one_off(run, path, classes: dict[str, list[dict]], ranked: list[tuple[str, list[dict]]]) -> tuple[int | None, int]:
    """The path's one-off launch (`critical_path.one_off_launch`, the bound's words' definition: one
    call holding at least half of the launch rows, a kernel's first launch loading its code), kept
    with the path for `one_off_launch`: None there unless the check names the launch class (among
    the heaviest, `ranked`, and CLASS_SHARE_MIN of the path)."""
    members = classes.get("launch", [])
    event_id, longest, _ = cp.one_off_launch(run, path) if members else (None, 0, 0)
    total = int(path.ns.sum())
    named = any(cls == "launch" for cls, _ in ranked)
    reported = named and _at_least_share(members, total)
    path._derived["one_off_launch"] = (event_id, longest) if event_id is not None and reported else None
    return event_id, longest


LEFT_TO = {"input": "input-pipeline", "launch": "launch-overhead", "host_sync": "host-sync", "idle": "device-idle",
           "communication": "comm-exposed"}
"""The classes whose cause another rule names, and that rule: where it reports the rank, its finding
is the one for that cause."""


def is_attention_finding(finding) -> bool:
    """This rule's finding on hand-written attention: a normalisation class most of which is its
    softmax (`_attention_finding`), whose location is the attention's statement."""
    v = finding.evidence.values
    return v.get("class") == "norm" and _mostly(v.get("unfused_attention_ns", 0), v.get("charged_ns", 0))


def owns_fp32_work() -> list:
    """The owner that precision's and device-underuse's findings on fp32 matrix work leave their
    cause to (their `leaves_to`): this rule's fp32 GEMM/convolution class on the same rank, which
    names the same fix with the time the work holds on the steps' critical path."""
    return [(RULE_ID, lambda c: c.evidence.values.get("class") == "fp32_matmul")]


def leaves_to(finding) -> str | list | None:
    """The rule whose finding on the same rank names this finding's cause (the engine keeps that
    one alone: engine.leave_to_owners), else None. A GEMM or elementwise class at least half of which
    is hand-written attention's products and score arithmetic (`unfused_attention_ns`,
    `_attention_parts`) leaves to this rule's finding on that attention (`is_attention_finding`: a
    normalisation class most of which is its softmax, holding the products' time); not to a normalisation class
    that only names the softmax among other kernels, whose figure leaves the products out. Launches most of whose time is one call, a
    kernel's first launch loading its code (`one_off_ns`), are a cause launch-overhead does not name
    (it counts many short kernels): that finding stays beside launch-overhead's, and so does
    device-idle's word that the idle during the call is this rule's."""
    v = finding.evidence.values
    if v.get("class") == "launch" and v.get("one_off_ns"):
        return None
    if v.get("class") in ATTENTION_PART_CLASSES and _mostly(v.get("unfused_attention_ns", 0), v.get("charged_ns", 0)):
        # most of the class is hand-written attention's products and score arithmetic: the softmax's finding names it
        return [(RULE_ID, is_attention_finding)]
    return LEFT_TO.get(v.get("class"))


def _title(bound_words: str, class_words: str, recorded: int, unrecorded: int, total: int) -> str:
    """A class's title, before its heaviest members: the class first (a table of findings cuts long
    titles, and the rank's findings all shared their first words, the bound's), its time on the path,
    then the steps' bound group ('fp32 GEMM/convolution kernels (12 names): 100.40 ms on the critical
    path (9.3% of step time; steps idle-bound (64%))'; the bound's words are the summary's). Host time
    most of which the trace did not record (`unrecorded`: a step's range running on after the last
    event, left out of `recorded`) is named first, as what it is, not as the bound the path's
    categories give (cuda_triton: 'host-bound (100%): CPU operators and Python' for 13,334.48 ms of
    nothing recorded in a 13,336.32 ms step)."""
    if unrecorded:
        return (f"not recorded: {ms(unrecorded)} of step time ({pct(unrecorded / total)}) lies after the last event the trace holds; "
                f"on the critical path: {class_words} {ms(recorded)} recorded ({pct(recorded / total)} of step time)")
    return (f"{class_words}: {ms(recorded)} on the critical path ({pct(recorded / total)} of step time; "
            f"steps {cp.group_words(bound_words)})")


def check(ctx: Context) -> list:
    ctx.require_device()  # on a CPU-only run every step is host-bound by its operators: the hotspot rules name them
    path = cp.path_of(ctx.run, ctx.rank)  # columns, computed once per rank
    if not len(path):
        raise NotApplicable("no profiler steps (ProfilerStep#N ranges): no step to find a critical path in")
    bound = cp.bound(ctx.run, ctx.rank)
    step_count = len(bound["steps"])
    total = int(path.ns.sum())
    classes = _classes(ctx.run, path)  # heaviest first: each class's members stay in that order
    has_modules = any(it["module_path"] is not None for members in classes.values() for it in members)
    ranked = _ranked(classes)
    one_off_id, longest = _keep_one_off(ctx.run, path, classes, ranked)
    profiler = profiler_tip(ctx)  # (the device's own profiler, for what the trace does not show)
    parquet = f"read_parquet({sql_file_literal(ctx.run.path / 'analysis' / 'critical_path.parquet')})"
    arch = None
    out = []
    # hand-written attention's softmax (the normalisation class, where it is named) and the rest of that attention
    # in the other classes: one finding for it (`_attention_parts`, `leaves_to`)
    norm = dict(ranked).get("norm", [])
    attention = _unfused_attention(ctx.run, ctx.rank, norm) if _at_least_share(norm, total) else []
    attention_ns = sum(m["charged_ns"] for m in attention)
    parts = {c: _attention_parts(ctx.run, ctx.rank, classes.get(c, []), attention) for c in ATTENTION_PART_CLASSES} if attention else {}
    named = {c for c, ms_ in ranked if _at_least_share(ms_, total)}
    for cls, members in ranked:
        charged = sum(m["charged_ns"] for m in members)
        if cls not in named:
            continue
        if cls in WORK_CLASSES and arch is None:  # (device work: its advice speaks of the device's precisions and libraries)
            work = rank_work(ctx.run, ctx.rank)
            arch = work.detected.arch if work.detected and work.detected.arch else P.arch_of(work.peak, work.device_name)
        events = sum(m["events"] for m in members)
        one_off = cls == "launch" and one_off_id is not None  # one launch call holds most of the class
        unrecorded_steps = {b["step"]: b["unrecorded_ns"] for b in bound["steps"] if b["unrecorded_ns"]} if cls == "host" else {}
        unrecorded = sum(unrecorded_steps.values())
        # most of the host class recorded nothing (the advice says so: `_advice`): time the trace did not record is no
        # one's to save, and the impact and the saving bound are the rest; a smaller tail after the last event stays in
        # (the Python between the last call and the step's end)
        left_out = unrecorded if unrecorded and unrecorded * 2 >= charged else 0
        stretches = _long_stretches(ctx.run, path) if cls == "host" else (0, [])
        untraced = _untraced_ns(members) if cls == "host" else 0
        compiled = _compiled_words(ctx, members, charged) if cls == "host" else ""
        unseen = _unseen_waits(ctx, path) if cls == "host_sync" else (0, 0)
        step_ns: dict = {}
        for m in members:
            for st, ns in (m.get("step_ns") or {}).items():
                step_ns[st] = step_ns.get(st, 0) + ns
        recorded = charged - left_out
        if left_out:
            step_ns = {st: ns - unrecorded_steps.get(st, 0) for st, ns in step_ns.items()}
        shown = _recorded(members, left_out) if left_out else members
        # a normalisation class most of which is hand-written attention's softmax is that attention's finding: its cause
        # and its fix, with the rest of the attention whose classes leave it here (`_attention_finding`)
        as_attention = cls == "norm" and _mostly(attention_ns, charged)
        folded = parts
        if as_attention:
            shown, recorded, step_ns, folded = _attention_finding(members, attention, parts, classes, named, total)
        merged = {"category": members[0]["category"], "item": tuple(m["item"] for m in shown if m["item"] is not None),
                  "step_ns": step_ns}
        top = shown[0]
        heaviest = _names_of(shown)
        source = ctx.source_of(top["frame_id"])
        of_it = f", {pct(min(1.0, longest / charged))} of it one call: {cp.ONE_OFF_LAUNCH_WORDS}" if one_off else ""
        words = _attention_class_words(attention, folded, shown) if as_attention else _class_words(cls, shown)
        out.append(ctx.finding(
            title=_title(bound["overall"]["words"], words, recorded, left_out, total) + f"{of_it}; heaviest: {heaviest}",
            impact_ns=recorded, saving_bound_ns=min(recorded, cp.saving_bound(ctx.run, ctx.rank, merged)),
            location=Location(op=top["op"] or (top["item"] if top["category"] not in DEVICE + ("idle",) else None),
                              kernel=top["item"] if top["category"] in DEVICE else None, source=source,
                              module_path=top["module_path"], steps=[s["step"] for s in bound["steps"]]),
            sql=_members_evidence_sql(parquet, ctx.rank, shown) if as_attention else _class_evidence_sql(parquet, ctx.rank, cls),
            values={"class": cls, "charged_ns": charged, "events": events,
                    "items": len({m["item"] for m in members if m["item"] is not None}), "category": top["category"],
                    "bound": bound["overall"]["bound"], "path_ns": total,
                    "heaviest": [{"item": m["item"], "op": m["op"], "charged_ns": m["charged_ns"]} for m in (shown if as_attention else members)[:3]],
                    "device_arch": arch.name if arch else None,
                    **({"unrecorded_ns": unrecorded, "left_out_ns": left_out, "long_stretches_ns": stretches[0],
                        "untraced_ns": untraced} if cls == "host" else {}),
                    **({"waits_ns": unseen[0], "waits_device_idle_ns": unseen[1]} if cls == "host_sync" else {}),
                    **({"tf32_ns": sum(m["charged_ns"] for m in members if kernel_runs_tf32(m["item"]))} if cls == "fp32_matmul" else {}),
                    **({"unfused_attention_ns": attention_ns,
                        "attention_work_ns": attention_ns + sum(m["charged_ns"] for ms_ in parts.values() for m in ms_)}
                       if cls == "norm" else {}),
                    # (the part of the class that is hand-written attention's products and score arithmetic: leaves_to)
                    **({"unfused_attention_ns": sum(m["charged_ns"] for m in parts.get(cls, []))} if cls in ATTENTION_PART_CLASSES else {}),
                    **({"one_off_ns": longest} if one_off else {})},
            sample_event_ids=[top["sample_id"]] if top["sample_id"] is not None else [], uses_source=True,
            recommendation=" ".join(x for x in (_advice(cls, members, events, charged, step_count, arch, graph_tip(ctx),
                                                        longest if one_off else 0, has_modules, unrecorded, stretches,
                                                        attention if cls == "norm" else [], total, folded, profiler, compiled,
                                                        cls in WORK_CLASSES and _many_small(events, charged, step_count)
                                                        and _replayed(ctx.run, ctx.rank, members),
                                                        (untraced, records_python(ctx)) if untraced else (0, False)),
                                                host_sync.unseen_words(unseen[0], unseen[1], _names_of(members), profiler)) if x)))
    return out
