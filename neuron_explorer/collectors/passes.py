"""Which pass every event belongs to, and the forward operator behind each piece of backward work.

Backward work runs under `autograd::engine::evaluate_function: XBackward0` operators, called from
`loss.backward()`: charged to where it was called, two thirds of a training step would land on
that one line. The autograd node `XBackward0` was created by a forward operator, and the profiler
records the link twice:
- a `fwdbwd` flow from the forward operator to the backward node (the first choice), and
- the node's `Sequence number`, which the forward operator that created it carries too (the
  fallback: among forward operators with that number, the last one to start before the node
  ran is the one that took the number; sequence numbers count per forward thread).
`AccumulateGrad` nodes (sequence number -1, no flow) go with the node evaluated just before them
on the same thread, except those in which a gradient hook runs a collective (DDP's bucket
all-reduce): they go with no forward operator. Every event inside an `evaluate_function` takes its node's forward operator
(`fwd_op_id`); device events take their launch's (build.py).

Work inside a `Torch-Compiled Region` (torch.compile) takes the region's frame, the statement that
called the compiled function, and so does the backward of a compiled function (its forward
operator is inside the region).

Torch 1.8-1.10 record no `evaluate_function`: there the autograd nodes' own operators
(`AddmmBackward`, `CudnnConvolutionBackward`, `torch::autograd::AccumulateGrad`: BACKWARD_NODE)
take its place, found by name in a rank that has no `evaluate_function` at all (never in one
that has), linked the same way (they carry the `Sequence number` themselves). They run on the
autograd engine's thread for a GPU: a thread with such nodes, no profiler step and no forward
operator (one with a `Sequence number` outside any node) is an autograd thread, and everything
on it is backward work (the engine's gradient sums between nodes, `aten::add`, included).

Passes, from the innermost marker around an event: `backward` (inside `evaluate_function`, a
node found by name, or the `run_backward` call, or on an autograd thread), `optimizer` (inside torch's `Optimizer.step#…` / `Optimizer.zero_grad#…`
ranges), `data` (inside torch's `enumerate(DataLoader)#…` range), else `forward` for host work
and `other` for steps, annotations of the profiler itself and device events with no launch. The
optimizer's and the DataLoader's ranges are found by name whatever their kind: torch 1.8-1.10
file them as operators.

Must not: read files or know about JSON or torch objects (build.py hands over arrays).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..vocab import COMM_OP_RE, GRAPH_BREAK_EVENT, RECOMPILE_EVENT
from . import _json_native
from ._forest import nearest_marked, root_of
from ._packed_text import PackedText, needles
from .kineto_names import ARGS_NAMING_INPUTS, COMPILED_REGION_PREFIX, EVALUATE_PREFIX, SEQUENCE_NUMBER_KEY
from .kineto_names import BACKWARD_CALL as _BACKWARD_CALL
from .kineto_names import BACKWARD_NODE as _BACKWARD_NODE
from .kineto_names import DATALOADER_NEXT as _DATA
from .kineto_names import OPTIMIZER_STEP as _OPTIMIZER
from .kineto_names import SEQUENCE_NUMBER_ARG as _SEQUENCE

PASSES = ("forward", "backward", "optimizer", "data", "other")
"""Values of `events.pass`, in code order."""

P = {name: code for code, name in enumerate(PASSES)}


def _name_flags(name_values: list, pattern) -> np.ndarray:
    return np.array([bool(v) and bool(pattern(v)) for v in name_values], dtype=bool)


_SEQUENCE_KEY = SEQUENCE_NUMBER_KEY.encode()
"""The key whose integer the C++ library reads as the regex `_SEQUENCE` does: the same key, then
\\s*:\\s*-?\\d+, its leftmost match."""
_SEQUENCE_BLOCK = 1 << 16
"""Rows of an Arrow array of args read at once (a PackedText is read a block at a time)."""


def sequence_numbers(args, rows: np.ndarray) -> np.ndarray:
    """The `Sequence number` in the args JSON of the given rows (-1 where there is none). `args`: an
    Arrow string array or the importer's PackedText, read a compressed block at a time (each block
    unpacked once, and only one at a time: the operators' args of a large rank would be 100 MB or
    more, at the build's memory peak)."""
    out = np.full(len(rows), -1, dtype=np.int64)
    if args is None or not len(rows):
        return out
    if isinstance(args, PackedText) and args.number_after == SEQUENCE_NUMBER_KEY:  # (read as the decode packed them)
        return args.numbers_of(rows)
    lib = _json_native.loaded() if isinstance(args, PackedText) else None
    if lib is not None:  # each block's rows read where they lie in it (native/packed_text.cpp), else as below
        for at, local, block in args.rows_by_block(rows):
            text, found = block.unpack(), np.empty(len(local), dtype=np.int64)
            if lib.nxt_int_after(block.offsets.ctypes.data, text.address, local.ctypes.data, len(local), _SEQUENCE_KEY,
                                 len(_SEQUENCE_KEY), -1, found.ctypes.data) != 0:
                found = _sequence_in(block.array().take(pa.array(local)))  # (a number past int64: the regex's error)
            elif (valid := block.valid_rows()) is not None:
                found[~valid[local]] = -1
            out[at] = found
        return out
    for at, text in _texts(args, rows):
        out[at] = _sequence_in(text)
    return out


def _texts(args, rows: np.ndarray):
    """The given rows' text a part at a time, where the C++ library does not read it in place: (their
    positions in `rows`, an Arrow string array of them), a PackedText's block by block, an Arrow
    array's _SEQUENCE_BLOCK rows at a time."""
    if isinstance(args, PackedText):
        yield from args.take_by_block(rows)
        return
    by_row = np.argsort(rows, kind="stable")
    for start in range(0, len(rows), _SEQUENCE_BLOCK):
        at = by_row[start:start + _SEQUENCE_BLOCK]
        yield at, args.take(pa.array(rows[at]))


def args_name_inputs(args, rows: np.ndarray) -> bool:
    """Whether the args of any of the given rows hold kineto_names.ARGS_NAMING_INPUTS (an operator's
    args naming its inputs or flops: a trace recorded with shapes or flops). `args`: an Arrow string
    array or the importer's PackedText, read a block at a time up to the first row found."""
    if args is None or not len(rows):
        return False
    if isinstance(args, PackedText) and args.marks == ARGS_NAMING_INPUTS:  # (marked as the decode packed them)
        return args.any_marked(rows)
    lib = _json_native.loaded() if isinstance(args, PackedText) else None
    if lib is not None:  # each block's rows read where they lie in it (native/packed_text.cpp)
        for _, local, block in args.rows_by_block(rows):
            text = block.unpack()
            if lib.nxt_any_holds(block.offsets.ctypes.data, text.address, local.ctypes.data, len(local), _NAMING_KEYS, len(_NAMING_KEYS)):
                return True
        return False
    for _, text in _texts(args, rows):
        for needle in ARGS_NAMING_INPUTS:
            if pc.any(pc.match_substring(text, needle)).as_py():
                return True
    return False


_NAMING_KEYS = needles(ARGS_NAMING_INPUTS)
"""kineto_names.ARGS_NAMING_INPUTS as the C++ library reads them."""


def _sequence_in(text: pa.StringArray) -> np.ndarray:
    """The `Sequence number` of each row of args text, by the regex (-1 where there is none)."""
    found = pc.extract_regex(text, _SEQUENCE).field("seq")
    found = pc.if_else(pc.equal(found, ""), pa.scalar(None, pa.string()), found)  # rows with no match
    return pc.cast(found, pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False)


def compiled_region_frames(*, name_codes: np.ndarray, name_values: list, parent: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """Each event's frame, except that events inside a `Torch-Compiled Region` range take the
    region's frame: the statement that called the compiled function (inside it, the tracer sees
    only the compiled code's entry line). The outermost region wins. A graph break or recompile the
    live collector recorded (vocab.GRAPH_BREAK_EVENT, RECOMPILE_EVENT) keeps its own frame: the
    statement it names, interned under the line that called the compiled function."""
    n = len(name_codes)
    if not n:
        return frame
    is_region = _name_flags(name_values, lambda v: v.startswith(COMPILED_REGION_PREFIX))[name_codes]
    if not is_region.any():
        return frame
    region = nearest_marked(parent, is_region)  # innermost region around (or at) each event
    up = np.where(is_region & (parent >= 0), region[np.maximum(parent, 0)], -1)  # a region's enclosing region
    outer = root_of(up)
    around = np.where(region >= 0, outer[np.maximum(region, 0)], -1)
    own = _name_flags(name_values, lambda v: v in (GRAPH_BREAK_EVENT, RECOMPILE_EVENT))[name_codes]
    return np.where((around >= 0) & ~own, frame[np.maximum(around, 0)], frame)


def _gradient_collectives(fwd: np.ndarray, hook_nodes: np.ndarray, eval_of: np.ndarray, is_op: np.ndarray,
                          name_codes: np.ndarray, name_values: list) -> int:
    """Nodes with no number (`AccumulateGrad`) in which a gradient hook runs a collective (a DDP or
    FSDP bucket's all-reduce or reduce-scatter, started when the bucket's last parameter is
    accumulated) leave the forward operator they took from the node evaluated before: the
    collective carries a bucket of many parameters' gradients, and that operator was only the last
    to finish (mi300x_ddp_resnet_act_checkpoint: three all-reduces of 20.34 ms were charged to one
    convolution's statement). Every event inside such a node keeps no forward operator (`fwd` set
    to -1 in place). Collectives inside a node with its own number (a tensor-parallel layer's
    backward) stay that layer's. Returns how many nodes left."""
    if not len(hook_nodes):
        return 0
    is_comm = is_op & _name_flags(name_values, COMM_OP_RE.search)[name_codes]
    hook = np.zeros(len(fwd), dtype=bool)
    hook[hook_nodes] = True
    in_hook = np.flatnonzero(is_comm & (eval_of >= 0))
    in_hook = in_hook[hook[eval_of[in_hook]]]
    if not len(in_hook):
        return 0
    leaving = np.zeros(len(fwd), dtype=bool)
    leaving[eval_of[in_hook]] = True
    fwd[(eval_of >= 0) & leaving[np.maximum(eval_of, 0)]] = -1
    return int(np.count_nonzero(leaving))


def backward_links(*, name_codes: np.ndarray, name_values: list, is_op: np.ndarray, is_python: np.ndarray,
                   parent: np.ndarray, ts: np.ndarray, track: np.ndarray, fwdbwd: tuple[np.ndarray, np.ndarray],
                   args: pa.Array | None, order: np.ndarray,
                   is_step: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """(forward operator index per event or -1, pass code per host event, counts).

    Arrays are in the rank's time order; `fwdbwd` is (start event, finish event) of each bound
    `fwdbwd` flow; `args` is in the source order, `order[i]` its row for sorted event i;
    `is_step` marks profiler steps (a thread with one is no autograd thread).
    """
    n = len(name_codes)
    fwd = np.full(n, -1, dtype=parent.dtype)  # (rows, in the rank's index type)
    is_eval = is_op & _name_flags(name_values, lambda v: v.startswith(EVALUATE_PREFIX))[name_codes] if n else np.zeros(0, bool)
    by_name = False
    if n and not is_eval.any():  # torch 1.8-1.10: the nodes' own operators mark backward work
        is_eval = is_op & _name_flags(name_values, _BACKWARD_NODE.match)[name_codes]
        by_name = bool(is_eval.any())
    evals = np.flatnonzero(is_eval)
    counts = {"backward_nodes": int(len(evals)), "linked_by_flow": 0, "linked_by_sequence": 0, "linked_after": 0, "gradient_hooks": 0,
              "nodes_by_name": len(evals) if by_name else 0, "autograd_threads": 0}
    on_autograd_thread = np.zeros(n, dtype=bool)
    if len(evals):
        eval_of = nearest_marked(parent, is_eval)  # innermost evaluate_function around each event
        link = np.full(n, -1, dtype=parent.dtype)  # per evaluate_function: its forward operator
        starts, finishes = fwdbwd
        ok = (starts >= 0) & (finishes >= 0)
        starts, finishes = starts[ok], finishes[ok]
        owner = eval_of[finishes]
        ok = (owner >= 0) & (eval_of[starts] < 0)  # a forward operator is not itself backward work
        link[owner[ok]] = starts[ok]
        counts["linked_by_flow"] = int(np.count_nonzero(link[evals] >= 0))

        outside = np.flatnonzero(is_op & (eval_of < 0))  # forward operators, and others outside any node
        seq_outside = None
        missing = evals[link[evals] < 0]
        if len(missing):
            # the node is the operator directly inside evaluate_function; it and the wrapper carry the number
            # (one pass over the args for both: each compressed block is unpacked once)
            seq_missing, seq_outside = np.split(sequence_numbers(args, order[np.concatenate((missing, outside))]), [len(missing)])
            candidates, seq_cand = outside, seq_outside
            keep = seq_cand >= 0
            candidates, seq_cand = candidates[keep], seq_cand[keep]
            o = np.lexsort((ts[candidates], seq_cand))
            candidates, seq_cand = candidates[o], seq_cand[o]
            lo = np.searchsorted(seq_cand, seq_missing, side="left")
            hi = np.searchsorted(seq_cand, seq_missing, side="right")
            for i, (a, b) in enumerate(zip(lo, hi)):
                if a == b or seq_missing[i] < 0:
                    continue
                group = candidates[a:b]
                k = np.searchsorted(ts[group], ts[missing[i]], side="right") - 1
                if k >= 0:
                    link[missing[i]] = group[k]
            counts["linked_by_sequence"] = int(np.count_nonzero(link[missing] >= 0))

        # AccumulateGrad and other nodes with no number: the node evaluated just before on the thread
        o = np.lexsort((ts[evals], track[evals]))
        ordered = evals[o]
        tr = track[ordered]
        group_start = np.searchsorted(tr, tr, side="left")
        pos = np.arange(len(ordered))
        last = np.maximum.accumulate(np.where(link[ordered] >= 0, pos, -1))
        fill = (link[ordered] < 0) & (last >= group_start)
        link[ordered[fill]] = link[ordered[last[fill]]]
        counts["linked_after"] = int(np.count_nonzero(fill))

        inside = eval_of >= 0
        fwd[inside] = link[eval_of[inside]]
        counts["gradient_hooks"] = _gradient_collectives(fwd, ordered[fill], eval_of, is_op, name_codes, name_values)

        if by_name:  # autograd threads: nodes, but no step and no forward operator
            if seq_outside is None:
                seq_outside = sequence_numbers(args, order[outside])
            not_autograd = track[outside[seq_outside >= 0]]
            if is_step is not None:
                not_autograd = np.concatenate([not_autograd, track[is_step]])
            autograd_tracks = np.setdiff1d(track[evals], not_autograd)
            counts["autograd_threads"] = len(autograd_tracks)
            on_autograd_thread = np.isin(track, autograd_tracks)

    # passes, from the innermost marker around each event
    marker = np.full(n, -1, dtype=np.int8)
    if n:
        marker[is_eval] = P["backward"]
        marker[is_python & _name_flags(name_values, _BACKWARD_CALL.search)[name_codes]] = P["backward"]
        # (torch 1.8-1.10 file these ranges as operators: matched by name whatever their kind)
        marker[~is_python & _name_flags(name_values, _OPTIMIZER.match)[name_codes]] = P["optimizer"]
        marker[~is_python & _name_flags(name_values, _DATA.match)[name_codes]] = P["data"]
        around = nearest_marked(parent, marker >= 0)
        pass_code = np.where(around >= 0, marker[np.maximum(around, 0)], P["forward"]).astype(np.int8)
        pass_code[on_autograd_thread] = P["backward"]
    else:
        pass_code = np.zeros(0, dtype=np.int8)
    return fwd, pass_code, counts
