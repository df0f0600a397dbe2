"""Normalise the raw events of one rank into the run tables, with every link precomputed.

Both collectors end here: the importer (decoded JSON) and the live collector (the profiler's
in-memory results) hand over a `RawRank` and get back Arrow tables in the schema of `schema.py`.
Each event's kind, track, parent, operator, launch, step, frame, module and pass are computed
over whole columns: the forest of slices (parents, time order, walks) by _forest (in C++ where
built, else vectorised pointer jumping in O(n log depth)), the backward links and statements by
passes; never a Python loop per event, so a 2-million-event rank builds in about a second.

The frames table's `code` column is left as the raw frames give it (null for imported traces):
the collector fills it from the source files (sources.with_code).

Must not: read files, know about JSON or torch objects.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import schema
from ..schema import DEVICE_KINDS, ID_STRIDE
from ..vocab import DEVICE_DMA_RE, DEVICE_WAIT_KERNEL_RE
from . import graph_capture, passes
from ._forest import BLOCK_ROWS as _BLOCK
from ._forest import depth_of, enclosing_parents, index_dtype, nearest_marked, root_of, slice_at, time_order, track_lookup, tracks_of
from ._packed_text import PackedText
from .kineto_names import (
    FORWARD_BACKWARD_FLOW,
    GRAPH_LAUNCH_CALL,
    LAUNCH_CALL,
    LAUNCH_FLOW_CATEGORIES,
    MODULE_PREFIX,
    OLD_LAUNCH_FLOW,
    PY_FRAME,
    STEP_NAME,
    kind_of_category,
    launched_before_trace,
)
from .launches import first_call_of
from .raw import RawRank, check_raw_rank  # noqa: F401  (RawRank: collectors import it from here too)
from .sources import is_user_frame

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+(?=>)")


@dataclass
class RankTables:
    rank: int
    tables: dict[str, pa.Table]
    steps: list[dict]
    quality: dict[str, int]
    counts: dict[str, int]
    devices: list[int]
    span_ns: int | None = None  # the rank's events from the first start to the last end (None: no events)
    op_args_named: bool | None = None  # whether an operator's args name its inputs or flops (passes.args_name_inputs)


# --- the build ------------------------------------------------------------------------------


def _backward_links(fl: _Flows, flow_event, backward: dict) -> tuple:
    """passes.backward_links(**backward) with the fwdbwd flows whose ends are bound to slices
    (`flow_event`: the future of the flows' _flow_events)."""
    return passes.backward_links(**backward, fwdbwd=_flow_pairs(fl, flow_event.result(), (FORWARD_BACKWARD_FLOW,)))


def _flow_pairs(fl: _Flows, fl_event: np.ndarray, categories: tuple[str, ...], start_ok: np.ndarray | None = None,
                finish_ok: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(start event, finish event) of each flow of `categories` whose two ends are bound to slices
    (and, where given, to slices for which start_ok / finish_ok hold)."""
    none = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if not fl.n:
        return none
    fid = fl.filled("flow_id")
    mine = fl.text_in("category", categories, lower=True) & (fl_event >= 0)
    s, f = np.flatnonzero(mine & fl.text_in("phase", ("s",))), np.flatnonzero(mine & fl.text_in("phase", ("f",)))
    if start_ok is not None:
        s = s[start_ok[fl_event[s]]]
    if finish_ok is not None:
        f = f[finish_ok[fl_event[f]]]
    if not len(s) or not len(f):
        return none
    o = np.argsort(fid[s], kind="stable")
    s_ids, s_ev = fid[s][o], fl_event[s][o]
    pos = np.clip(np.searchsorted(s_ids, fid[f]), 0, len(s_ids) - 1)
    hit = s_ids[pos] == fid[f]
    return s_ev[pos[hit]].astype(np.int64), fl_event[f][hit].astype(np.int64)


def _np(col: pa.ChunkedArray | pa.Array, fill: int = -1) -> np.ndarray:
    return np.asarray(col.fill_null(fill).to_numpy(zero_copy_only=False), dtype=np.int64)


def _parse_frame(name: str) -> tuple[str, int, str] | None:
    m = PY_FRAME.match(name)
    if not m:
        return None
    return m.group("file"), int(m.group("line")), m.group("func")


_KIND_NAMES = list(schema.KINDS)
_KIND_CODE = {k: i for i, k in enumerate(_KIND_NAMES)}


def _codes(col: pa.ChunkedArray, *, null_code: bool = True) -> tuple[np.ndarray, pa.Array]:
    """A string column as (int codes, dictionary of distinct values); nulls become '' (a code of
    their own), or with `null_code=False` stay null (code -1, as Coded reads it)."""
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    col = pa.chunked_array(col.chunks, type=col.type).unify_dictionaries()
    if col.num_chunks == 0 or len(col) == 0:
        return np.zeros(0, dtype=np.int32), pa.array([""], pa.string())
    dictionary = col.chunk(0).dictionary.cast(pa.string())
    null = len(dictionary) if null_code else -1
    codes = np.concatenate([np.asarray(c.indices.fill_null(null).to_numpy(zero_copy_only=False), dtype=np.int32)
                            for c in col.chunks])
    if null_code:
        dictionary = pa.concat_arrays([dictionary, pa.array([""], pa.string())])
    return codes, dictionary


@dataclass
class Coded:
    """A coded string column (code -1: null) made into dictionary arrays: each holds the values of
    a scope of rows (its row group, so that the pieces of one group share one dictionary, as a
    Parquet column chunk needs to stay dictionary-encoded) and no others."""

    codes: np.ndarray
    dictionary: pa.Array

    def scope(self, sl: slice) -> tuple[np.ndarray, pa.Array]:
        """(remap from code to position, values) for the rows of `sl`."""
        codes = self.codes[sl]
        used = np.flatnonzero(np.bincount(codes[codes >= 0] if (codes < 0).any() else codes, minlength=len(self.dictionary)))
        remap = np.zeros(len(self.dictionary) + 1, dtype=np.int32)  # (the extra slot: code -1)
        remap[used] = np.arange(len(used), dtype=np.int32)
        return remap, self.dictionary.take(pa.array(used))

    def array(self, sl: slice, scope: tuple[np.ndarray, pa.Array]) -> pa.DictionaryArray:
        codes = self.codes[sl]
        none = codes < 0
        remap, values = scope
        return pa.DictionaryArray.from_arrays(pa.array(remap[codes], pa.int32(), mask=none if none.any() else None), values)

    def __call__(self, sl: slice) -> pa.DictionaryArray:
        return self.array(sl, self.scope(sl))


@dataclass
class SortedTable:
    """A table whose rows are materialised batch by batch when written, never copied whole.

    The importer holds millions of rows; sorting them by time with one `take` would double the
    memory. Each column is a function from a row slice (in sorted order) to an Arrow array.
    """

    spec: schema.Table
    num_rows: int
    makers: dict

    @property
    def schema(self) -> pa.Schema:
        return self.spec.arrow_schema()

    @property
    def column_names(self) -> list[str]:
        return self.spec.column_names

    def batches(self, size: int, *, dictionaries: bool = False, pieces: int = 1):
        """Record batches of `size` rows in order, each in `pieces` batches (of size / pieces rows)
        when asked. With `dictionaries`, string columns built from codes stay dictionary arrays
        (holding only the values of their `size` rows, shared by its pieces): a Parquet writer writes
        those without hashing every string again. Otherwise every column has the schema's type.

        A row group handed to a writer in pieces is made and held a piece at a time: the events of
        a large trace are ~35 MiB per 128k rows, and with the one being encoded and the next being
        made, that was most of the import's peak beside the columns held (Coded keeps one dictionary
        per group, so each column chunk stays dictionary-encoded)."""
        step = -(-size // pieces)
        for start in range(0, self.num_rows, size):
            group = slice(start, min(self.num_rows, start + size))
            scopes = {name: m.scope(group) for name, m in self.makers.items() if isinstance(m, Coded)}
            for at in range(group.start, group.stop, step):
                sl = slice(at, min(group.stop, at + step))
                arrays = []
                for c in self.spec.columns:
                    maker = self.makers[c.name]
                    arr = maker.array(sl, scopes[c.name]) if c.name in scopes else maker(sl)
                    keep = dictionaries and pa.types.is_dictionary(arr.type) and arr.type.value_type == c.arrow_type
                    arrays.append(arr if keep or arr.type == c.arrow_type else arr.cast(c.arrow_type))
                if dictionaries:
                    yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema(
                        [pa.field(c.name, a.type) for c, a in zip(self.spec.columns, arrays)], metadata=self.schema.metadata))
                else:
                    yield pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.batches(1 << 20)), schema=self.schema)


@dataclass
class _Flows:
    """The raw flow endpoints as the build reads them, in the trace's order: numbers as numpy arrays
    (a null as 0, with its mask where there are nulls), text as codes (-1: null) into the few distinct
    values ('ac2g', 's'). Made once, the raw table let go: 22 MiB against the raw flows' 41 MiB for
    the 743k flows of a 1.45M-event trace, and the build's passes over them (pairing, binding, the
    table written) read codes and arrays, not the raw's text chunk by chunk."""

    n: int
    ints: dict  # flow_id, pid, tid, ts_ns: (values, null mask or None)
    text: dict  # category, name, phase, binding_point: (codes, values), once coded (code_text)
    raw_text: pa.Table | None = None  # the text columns until coded

    @classmethod
    def take(cls, raw: RawRank) -> _Flows:
        """The flows of `raw`, which gives them up (`raw.flows` is left empty): each raw column goes
        once read. The numbers are read now (what binding endpoints to slices needs); the text
        when `code_text` is called (meanwhile the build's helper binds them)."""
        fl, raw.flows = raw.flows, raw.flows.slice(0, 0)
        ints = {}
        for name in ("ts_ns", "flow_id", "pid", "tid"):
            col = fl[name]
            fl = fl.drop_columns([name])
            mask = col.is_null().to_numpy(zero_copy_only=False) if col.null_count else None
            ints[name] = (narrow(_np(col, 0), np.int8) if name != "ts_ns" else _np(col, 0), mask)
            del col
        return cls(fl.num_rows, ints, {}, fl)

    def code_text(self) -> None:
        """The text columns as codes; the raw ones let go."""
        fl, self.raw_text = self.raw_text, None
        for name in ("category", "name", "phase", "binding_point"):
            col = fl[name]
            fl = fl.drop_columns([name])
            codes, values = _codes(col, null_code=False)
            self.text[name] = (codes.astype(_code_type(len(values))), values)
            del col

    def filled(self, name: str, fill: int = -1) -> np.ndarray:
        """An integer column as int64, nulls as `fill`."""
        values, mask = self.ints[name]
        values = values.astype(np.int64)
        if mask is not None:
            values[mask] = fill
        return values

    def text_in(self, name: str, wanted, *, lower: bool = False) -> np.ndarray:
        """Per row: whether its text (lower-cased, with `lower`) is one of `wanted`; a null (code -1) never."""
        codes, values = self.text[name]
        if lower:
            values = pc.utf8_lower(values)
        ok = pc.is_in(values, pa.array(list(wanted), pa.string())).to_numpy(zero_copy_only=False)
        return np.append(np.asarray(ok, dtype=bool), False)[codes]


def _kernels_named(pattern, name_values: list, name_codes: np.ndarray, kind: np.ndarray) -> np.ndarray | None:
    """The rows filed as kernels whose name `pattern` matches (tested once per distinct name), or None
    where no name matches: a device queue's own events that a trace files with its kernels (MTIA's)."""
    named = np.array([bool(v) and pattern.match(v) is not None for v in name_values], dtype=bool)
    return named[name_codes] & (kind == _KIND_CODE["kernel"]) if named.any() else None


def build_rank(raw: RawRank, captures: graph_capture.Captures | None = None) -> RankTables:
    """The run tables of one rank. Consumes `raw`: its event columns are released as they are read.
    With `captures` (chrome_trace.read_captures of the capture traces), replayed device work takes
    the operator and statement it had at capture (graph_capture's rule)."""
    check_raw_rank(raw)
    rank = raw.rank
    clock_shift = dict(raw.device_clock_shift)
    ev = raw.events
    n = ev.num_rows
    quality: dict[str, int] = {}

    # Order: by time, longer first at equal start so that parents precede children.
    ts = _np(ev["ts_ns"], 0) + raw.base_ns
    dur = _np(ev["dur_ns"], 0)
    idx = index_dtype(n)  # (kept link arrays; `order` stays intp while numpy sorts every column by it)
    order = time_order(ts, dur)
    ts, dur = ts[order], narrow(dur[order])

    cat_codes, cat_dict = _codes(ev["category"])
    name_codes, name_dict = _codes(ev["name"])
    phase_codes, phase_dict = _codes(ev["phase"])
    cat_codes, name_codes, phase_codes = (c[order].astype(_code_type(len(d))) for c, d in
                                          ((cat_codes, cat_dict), (name_codes, name_dict), (phase_codes, phase_dict)))
    # each raw column goes once read into sorted arrays (`raw` is consumed): they are the decode's
    # memory, and the build's first peak was the raw columns beside their sorted copies
    ev = ev.drop_columns(["ts_ns", "dur_ns", "category", "name", "phase"])
    raw.events = ev
    cat_values, name_values = cat_dict.to_pylist(), name_dict.to_pylist()
    # '<built-in method run_backward of ... object at 0x7f66d3d4f780>': an address differs per
    # process, so the same call would never compare or group across runs
    if any(v and " at 0x" in v for v in name_values):
        name_values = [_ADDRESS.sub("", v) if v else v for v in name_values]
        name_dict = pa.array(name_values, pa.string())

    # kinds, via the (few) distinct categories and names
    kind_of_cat = np.array([_KIND_CODE[kind_of_category(c)] for c in cat_values], dtype=np.int8)
    kind = kind_of_cat[cat_codes] if n else np.zeros(0, np.int8)
    step_no_of_name = np.array([int(m.group(1)) if (m := STEP_NAME.match(v or "")) else -1 for v in name_values])
    is_step_name = step_no_of_name[name_codes] >= 0
    K = _KIND_CODE
    # torch >= 1.11 files ProfilerStep#N under user_annotation; torch 1.8-1.10 under Operator
    kind[is_step_name & ((kind == K["user_annotation"]) | (kind == K["other"]) | (kind == K["cpu_op"]))] = K["step"]
    is_instant = np.array([v == "i" for v in phase_dict.to_pylist()], dtype=bool)[phase_codes]
    no_cat = np.array([c == "" for c in cat_values], dtype=bool)[cat_codes]
    kind[is_instant & (kind == K["other"]) & no_cat] = K["instant"]
    # a device queue's wait on an event (MTIA's `event_wait`, filed with its kernels) holds the
    # queue and does no work: a synchronisation on a device stream, as CUDA's `cuda_sync`
    is_wait = _kernels_named(DEVICE_WAIT_KERNEL_RE, name_values, name_codes, kind)
    if is_wait is not None:
        kind[is_wait] = K["sync"]
    # a DMA the device makes itself (MTIA's `dma_request`, filed with its kernels) moves memory and has no host launch
    is_dma = _kernels_named(DEVICE_DMA_RE, name_values, name_codes, kind)
    if is_dma is not None:
        kind[is_dma] = K["memcpy"]
    is_device = np.isin(kind, [K[k] for k in DEVICE_KINDS])
    is_op = kind == K["cpu_op"]
    is_python = kind == K["python"]
    is_runtime = kind == K["runtime"]

    end = ts + np.maximum(dur, 0)

    # The build runs on two threads (numpy and Arrow release the GIL in their loops, so the two
    # share the cores). While this thread finds each event's track and enclosing slice, a helper
    # readies what is needed only after them: the other id columns, the args and the steps. Then
    # the helper binds the flows and links backward work to forward operators (about a third of
    # the build), which need nothing computed below, while this thread runs the other passes.
    with ThreadPoolExecutor(max_workers=1) as helper:
        args = raw.packed_args if raw.packed_args is not None else ev["args"]
        raw.packed_args = None
        early = helper.submit(_early_columns, [ev[c] for c in ("correlation", "stream", "external_id")] + [args], order,
                              kind == K["step"], step_no_of_name[name_codes], ts, end, rank * ID_STRIDE, is_device)
        pid, pid_null = _np_mask(ev["pid"], order)
        tid, tid_null = _np_mask(ev["tid"], order)
        pid_text, tid_text = _sorted_text(ev["pid_text"], order), _sorted_text(ev["tid_text"], order)
        # Everything needed from the raw columns is now in sorted arrays or with the helper: let the
        # raw ones go (build consumes `raw`), which lowers the import's memory peak by their size.
        raw.events = ev.select([c for c in ("module_path", "frame_index") if c in ev.column_names])
        del ev, args
        track = tracks_of(pid, tid, pid_text, tid_text)
        pid_text, tid_text = _sparse(pid_text), _sparse(tid_text)

        quality["nonpositive_duration"] = int(np.count_nonzero((~is_instant) & (dur <= 0)))
        quality["negative_duration"] = int(np.count_nonzero(dur < 0))
        can_contain = (~is_instant) & (dur > 0)
        # a profiler step is a range, not a call: it ends where prof.step() is called, inside the
        # optimizer's step or a framework's callback, so it overlaps their frames without anything dropped
        parent, overlaps = enclosing_parents(track, ts, end, can_contain, uncounted=kind == K["step"])
        quality["overlapping_slices"] = overlaps

        fl = _Flows.take(raw)  # (consumed: the built flows table below is the only copy kept)
        flow_event = helper.submit(_flow_events, fl, raw.base_ns, track, pid, tid, ts, end, parent)
        fl.code_text()  # (while the helper binds the endpoints)
        ((correlation, correlation_null), (stream_arg, stream_null), (external_id, external_null), args,
         (steps, step)) = early.result()
        order = order.astype(idx, copy=False)  # (the columns are sorted; held for the args until the write)
        quality["steps_renumbered"] = sum("number_in_trace" in s for s in steps)
        backward_links = helper.submit(_backward_links, fl, flow_event, dict(
            name_codes=name_codes, name_values=name_values, is_op=is_op, is_python=is_python, parent=parent, ts=ts,
            track=track, args=args, order=order, is_step=kind == K["step"]))
        depth = depth_of(parent)
        python_ancestors = depth_of(parent, is_python)
        # self time: the duration less the slices directly inside it on its track
        nested = parent >= 0  # (summed in int64, exact: the durations' sum fits, trace_rank._check_ranges)
        inner = np.zeros(n, dtype=np.int64)  # (ufunc.at's fast loop needs its operands in the array's type)
        np.add.at(inner, parent[nested].astype(np.intp), np.maximum(dur[nested], 0).astype(np.int64))
        self_ns = narrow(np.maximum(np.maximum(dur, 0) - inner, 0))
        del inner, nested

        # operators: innermost and outermost cpu_op around each event
        op = nearest_marked(parent, is_op)
        op_parent = np.full(n, -1, dtype=parent.dtype)
        has_parent = parent >= 0
        op_parent[has_parent] = op[parent[has_parent]]
        op_root = root_of(op_parent)
        top_op = np.where(op >= 0, op_root[np.maximum(op, 0)], -1)
        del op_parent, op_root, has_parent

        # launches: device event -> runtime call, by correlation (the ac2g flows fill the rest below)
        launch = _launch_by_correlation(is_runtime, is_device, correlation, correlation_null, parent.dtype)

        # source frames: from the collector (live), else from python_function events (def lines)
        frames, ev_frame, module_path = _frames_and_modules(raw, order, n, parent, is_python, name_values, name_codes)
        ev_frame = narrow(ev_frame)

        # the statement each event's time belongs to (work inside a torch.compile region belongs to the
        # statement that called the compiled function); backward work takes its forward's below
        statement = passes.compiled_region_frames(name_codes=name_codes, name_values=name_values, parent=parent, frame=ev_frame)

        # a device number is an int32: a device event's pid beyond it names no device
        device = np.where(is_device & ~pid_null & (pid >= 0) & (pid < 2**31), pid, -1).astype(np.int32)
        stream = np.where(is_device, np.where(stream_null, tid, stream_arg), -1)
        stream_mask = ~is_device | (stream_null & tid_null)
        del stream_arg, stream_null
        counters = _counters(raw)
        counts = {name: c for k, name in enumerate(_KIND_NAMES) if (c := int(np.count_nonzero(kind == k)))}

        # flows: each endpoint's slice; a device event without a launch by correlation takes its
        # ac2g flow's (the start binds to the runtime call, the finish to the device event)
        fl_event = flow_event.result()
        del end  # (the memory rows' ends are made again where there are any: 11 MiB a million events)
        flow_src, flow_dev = _flow_pairs(fl, fl_event, LAUNCH_FLOW_CATEGORIES, start_ok=~is_device, finish_ok=is_device)
        need = launch[flow_dev] < 0
        launch[flow_dev[need]] = flow_src[need]
        del flow_src, flow_dev, need
        quality |= _launches_without_device_work(kind, is_runtime, name_codes, name_values, fl)
        # whether any operator's args name its inputs (a trace recorded with shapes; the analysis then knows it from
        # the manifest instead of reading every operator's args): marked as the decode packed the args, else read here
        op_args_named = passes.args_name_inputs(args, order[is_op])
        # (what needs the launches but not the backward links, while the helper links them)
        has_launch = launch >= 0
        li = np.maximum(launch, 0)
        quality["device_before_launch"] = int(np.count_nonzero(has_launch & (ts < ts[li]))) if n else 0
        quality |= _first_work_wait(kind, device, launch, ts, dur)
        if clock_shift:  # device_clock moved this device's events to its launches: the longest move
            moved = max(clock_shift, key=lambda d: (clock_shift[d], -d))
            quality |= {"device_clock_shift_ns": clock_shift[moved], "device_clock_shift_device": moved}
        # a device event with neither a runtime call nor a flow (plugins that give kernels only the
        # operator's External id) joins the operator of that External id: operator, step, statement,
        # module and pass come from it; it still has no launch
        by_external = _device_by_external_id(is_device & ~has_launch & (kind != K["gpu_annotation"]), is_op, external_id, external_null)
        linked_by_external = by_external >= 0
        quality["device_linked_by_external_id"] = int(np.count_nonzero(linked_by_external))
        dev_no_launch = is_device & ~has_launch & ~linked_by_external & (kind != K["gpu_annotation"])
        if is_dma is not None:  # a DMA the device makes for its work has no launch to lose
            dev_no_launch &= ~is_dma
        quality["device_events_without_launch"] = int(np.count_nonzero(dev_no_launch))
        # of those, the work queued before the trace's host side recorded (its correlation id before every runtime call's,
        # or its start before the first runtime call's)
        quality["device_launched_before_trace"] = int(np.count_nonzero(launched_before_trace(
            correlation, ~correlation_null, ts, dev_no_launch, is_runtime)))
        # the event each device event inherits from: its launch, else its operator by External id
        anchor = np.where(has_launch, launch, by_external)
        del has_launch, li, by_external
        quality["negative_timestamps"] = int(np.count_nonzero(ts < 0))
        # backward work: the forward operator that built its autograd node, and every event's pass
        fwd, pass_code, backward_counts = backward_links.result()
    if isinstance(args, PackedText):  # (what the decode read from the args is used: not held through the write)
        args.forget_reads()

    # backward work's statement is its forward operator's (in place, as below: a column per event
    # rewritten whole by np.where was two temporaries of its size at the build's peak)
    source_frame = statement.copy() if np.may_share_memory(statement, ev_frame) else statement
    linked = np.flatnonzero(fwd >= 0)
    fwd_frame = statement[fwd[linked]]
    linked = linked[fwd_frame >= 0]
    source_frame[linked] = fwd_frame[fwd_frame >= 0]
    del statement, fwd_frame, linked

    # device events inherit operator, step, frame, module, backward link and pass of their anchor
    # (a host event: every anchored row is a device event, so each column is read before it is written)
    dev = np.flatnonzero(is_device)
    dev_anchor = anchor[dev]
    anchored = dev_anchor >= 0
    dev_anchor = np.maximum(dev_anchor, 0)
    del anchor

    inherit = partial(_inherit, rows=dev, source=dev_anchor, has_source=anchored)

    fwd = inherit(fwd, otherwise=-1).astype(idx, copy=False)
    source_frame = inherit(source_frame).astype(idx, copy=False)
    pass_code = inherit(pass_code, otherwise=passes.P["other"]).astype(np.int8, copy=False)
    pass_code[(kind == K["step"]) | (kind == K["other"])] = passes.P["other"]
    # backward time: outermost operators and device work of the backward pass, and the part linked
    outermost = (is_op & (top_op == np.arange(n, dtype=top_op.dtype))) | is_device
    backward = (pass_code == passes.P["backward"]) & outermost
    quality["backward_ns"] = int(dur[backward].sum())
    quality["backward_linked_ns"] = int(dur[backward & (fwd >= 0)].sum())
    del outermost, backward
    # graph replays: device work launched by a graph launch (cudaGraphLaunch/hipGraphLaunch) takes
    # that launch's statement like any other; how much of it has one
    graph_call = np.array([bool(v and GRAPH_LAUNCH_CALL.search(v)) for v in name_values] + [False])
    replayed = is_device & (launch >= 0) & graph_call[np.where(launch >= 0, name_codes[np.maximum(launch, 0)], -1)] if n else np.zeros(0, bool)
    quality["graph_replay_device_events"] = int(np.count_nonzero(replayed))
    quality["graph_launches"] = int(np.unique(launch[replayed]).size)
    capture_codes, capture_names, capture_frames = _link_captures(captures, replayed, launch, kind, name_codes, name_values, quality)
    op, top_op = inherit(op, otherwise=-1), inherit(top_op, otherwise=-1)
    if quality["graph_replay_device_events"]:  # replayed work with an operator: its capture's, else its launch's
        with_capture = capture_codes[0] >= 0 if capture_codes[0] is not None else False
        quality["graph_replay_with_operator"] = int(np.count_nonzero(replayed & (with_capture | (top_op >= 0))))
    step = inherit(step)
    op, top_op, step = _syncs_by_external_id(kind == K["sync"], is_op, external_id, external_null, ts, op, top_op, step)
    ev_frame = inherit(ev_frame).astype(idx, copy=False)
    if capture_frames is not None:  # replayed work paired with a captured node: its statement and frame at capture
        frame_base = frames.num_rows
        node_frame, node_statement = capture_frames
        source_frame = np.where(node_statement >= 0, frame_base + node_statement, source_frame).astype(idx)
        ev_frame = np.where(node_frame >= 0, frame_base + node_frame, ev_frame).astype(idx)
        frames = _with_capture_frames(frames, captures.frames, rank)
    quality["graph_replay_on_a_line"] = int(np.count_nonzero(replayed & (source_frame >= 0)))  # (at capture, where paired)
    if module_path is not None:  # (codes, -1 = none; their dictionary)
        module_path = (inherit(module_path[0]), module_path[1])
    del inherit, dev, dev_anchor, anchored

    kind_dict = pa.array(_KIND_NAMES, pa.string())
    pass_dict = pa.array(passes.PASSES, pa.string())
    base = rank * ID_STRIDE
    memory = _memory(raw, track, pid, tid, ts, dur, parent, op, ev_frame, step, steps)
    del track, is_op, is_python, is_runtime, can_contain

    def ids(local):
        return lambda sl: _ids(local[sl], base)

    def dict_col(codes, dictionary):
        if codes is None:  # (no row has a value)
            return lambda sl: pa.nulls(sl.stop - sl.start, pa.string())
        return Coded(codes, dictionary)

    def text(values):
        if values is None:
            return lambda sl: pa.nulls(sl.stop - sl.start, pa.string())
        if isinstance(values, tuple):  # (rows, their values): the column null elsewhere
            rows, texts = values
            def sparse(sl):
                a, b = np.searchsorted(rows, [sl.start, sl.stop])
                at = np.full(sl.stop - sl.start, -1, dtype=np.int32)
                at[rows[a:b] - sl.start] = np.arange(a, b, dtype=np.int32)
                return texts.take(pa.array(at, mask=at < 0))
            return sparse
        return lambda sl: values[sl]

    def plain(values, mask=None, type_=pa.int64()):
        if mask is NEGATIVE:  # (null where negative: the mask made a row group at a time)
            return lambda sl: pa.array(values[sl], type_, mask=values[sl] < 0)
        return lambda sl: pa.array(values[sl], type_, mask=None if mask is None else mask[sl])

    # the columns held until the write, each at the narrowest width its values fit, masks only where a row is null
    dur, self_ns, stream, step, pid, tid, device, correlation, external_id, depth, python_ancestors = (
        narrow(c, np.int8) for c in (dur, self_ns, stream, step, pid, tid, device, correlation, external_id, depth, python_ancestors))
    pid_null, tid_null, stream_mask = (m if m.any() else None for m in (pid_null, tid_null, stream_mask))

    makers = {
        "event_id": lambda sl: pa.array(np.arange(base + sl.start, base + sl.stop, dtype=np.int64)),
        "rank": lambda sl: pa.array(np.full(sl.stop - sl.start, rank, dtype=np.int32)),
        "kind": dict_col(kind, kind_dict),
        "category": dict_col(cat_codes, cat_dict),
        "name": dict_col(name_codes, name_dict),
        "phase": dict_col(phase_codes, phase_dict),
        "ts_ns": plain(ts),
        "dur_ns": plain(dur),
        "pid": plain(pid, pid_null),
        "tid": plain(tid, tid_null),
        "pid_text": text(pid_text),
        "tid_text": text(tid_text),
        "device": plain(device, NEGATIVE, pa.int32()),
        "stream": plain(stream, stream_mask),
        "depth": plain(depth, None, pa.int32()),
        "python_ancestors": plain(python_ancestors, None, pa.int32()),
        "parent_id": ids(parent),
        "op_id": ids(op),
        "top_op_id": ids(top_op),
        "launch_id": ids(launch),
        "correlation": plain(correlation, correlation_null),
        "external_id": plain(external_id, external_null),
        "step": plain(step, NEGATIVE),
        "module_path": dict_col(*module_path) if module_path is not None else dict_col(None, None),
        "frame_id": ids(ev_frame),
        "self_ns": plain(self_ns),
        "fwd_op_id": ids(fwd),
        "pass": dict_col(pass_code, pass_dict),
        "source_frame_id": ids(source_frame),
        "args": (lambda sl: args.take(pa.array(order[sl]))) if n else (lambda sl: pa.nulls(0, pa.string())),
        "graph": plain(replayed, None, pa.bool_()),
        "capture_op": dict_col(capture_codes[0], capture_names),
        "capture_top_op": dict_col(capture_codes[1], capture_names),
    }
    # the flows' columns sorted last, when the build's temporaries are gone
    flows = _flows_table(fl, fl_event, rank, raw.base_ns)
    del fl, fl_event
    events = SortedTable(schema.EVENTS, n, makers)

    counts |= {"flows": flows.num_rows, "memory": memory.num_rows, "counters": counters.num_rows, "frames": frames.num_rows}
    devices = np.unique(device[device >= 0]).tolist()
    span = int((ts + dur).max() - ts[0]) if n else None  # ts is sorted
    return RankTables(rank, {"events": events, "frames": frames, "flows": flows, "memory": memory, "counters": counters},
                      steps, quality, counts, devices, span, op_args_named)


_DEVICE_WORK = [_KIND_CODE["kernel"], _KIND_CODE["memcpy"], _KIND_CODE["memset"]]


def _ids(local: np.ndarray, base: int) -> pa.Array:
    """Row numbers of a rank (-1: none) as the run's ids: `base` (the rank's first id) on, null for none."""
    none = local < 0
    return pa.array(np.where(none, 0, base + local.astype(np.int64)), pa.int64(), mask=none)


def _inherit(column: np.ndarray, rows: np.ndarray, source: np.ndarray, has_source: np.ndarray, otherwise=None) -> np.ndarray:
    """`column` with each of `rows` given its `source` row's value where `has_source`, else its own
    value or `otherwise`; in place (the sources are read before any row is written)."""
    column[rows] = np.where(has_source, column[source], column[rows] if otherwise is None else otherwise)
    return column


def _first_work_wait(kind: np.ndarray, device: np.ndarray, launch: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> dict:
    """`first_work_wait_ns`: the longest wait, over the devices, from the end of the launch of a
    device's first work (kernel, copy or set) to its start, where that work has a launch, and
    `first_work_wait_device`, the device; {} when none waited. Nothing the trace holds ran on the
    device before its first work: a wait of milliseconds there is a device clock offset from the
    host's or work the trace does not hold (rank_entry.FIRST_WORK_WAIT_WARN_NS), not queueing.
    The vLLM MI300X traces in tests/data waited 7.8 and 149.0 ms as recorded (their device clocks
    are moved to their launches first, device_clock: 0.94 and 2.60 ms are left); the others at most 0.01 ms.
    `ts` in time order, so a device's first row is its first work."""
    rows = np.flatnonzero(np.isin(kind, _DEVICE_WORK) & (device >= 0))
    if not len(rows):
        return {}
    _, first = np.unique(device[rows], return_index=True)
    first = rows[first]
    first = first[launch[first] >= 0]
    if not len(first):
        return {}
    li = launch[first]
    wait = ts[first] - (ts[li] + np.maximum(dur[li], 0))
    worst = int(np.argmax(wait))
    if wait[worst] <= 0:
        return {}
    return {"first_work_wait_ns": int(wait[worst]), "first_work_wait_device": int(device[first[worst]])}


def _link_captures(captures, replayed, launch, kind, name_codes, name_values, quality):
    """Replayed device work paired with the graphs of `captures` (graph_capture.link_replays):
    ((capture_op codes, capture_top_op codes) or (None, None) when nothing was paired, their dictionary, (per-event capture frame index,
    statement index) or None), and the counts in `quality`: graph_replay_capture_linked (paired
    with a captured node that had an operator), graph_replay_launch_only (the rest of the replayed
    work: it keeps its launch's operator and statement), graph_launches_matched, graph_captures."""
    n = len(replayed)
    if captures is None or not captures.graphs or not replayed.any():
        if captures is not None and replayed.any():
            quality |= {"graph_replay_capture_linked": 0, "graph_replay_launch_only": int(np.count_nonzero(replayed)),
                        "graph_launches_matched": 0, "graph_captures": 0}
        return (None, None), pa.array([], pa.string()), None
    none = np.full(n, -1, dtype=np.int32)
    keys = {}
    memcpy, memset = _KIND_CODE["memcpy"], _KIND_CODE["memset"]
    for i in np.flatnonzero(replayed).tolist():
        keys[i] = _KIND_NAMES[kind[i]] if kind[i] in (memcpy, memset) else name_values[name_codes[i]]
    linked = graph_capture.link_replays(replayed, launch, keys, captures.graphs)
    names: dict[str, int] = {}
    op_codes, top_codes = none.copy(), none.copy()
    node_frame, node_statement = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    for i in np.flatnonzero(linked.node >= 0).tolist():
        g = captures.graphs[linked.graph[i]]
        j = linked.node[i]
        if g.op[j] is not None:
            op_codes[i] = names.setdefault(g.op[j], len(names))
        if g.top_op[j] is not None:
            top_codes[i] = names.setdefault(g.top_op[j], len(names))
        node_frame[i], node_statement[i] = g.frame[j], g.source_frame[j]
    with_op = op_codes >= 0
    quality["graph_replay_capture_linked"] = int(np.count_nonzero(replayed & with_op))
    quality["graph_replay_launch_only"] = int(np.count_nonzero(replayed & ~with_op))
    quality["graph_launches_matched"] = linked.launches_matched
    quality["graph_captures"] = len(captures.graphs)
    return (op_codes, top_codes), pa.array(list(names), pa.string()), (node_frame, node_statement)


def frames_table(rank: int, first_id: int, keys: list, line_kind, parents: np.ndarray | None = None,
                 is_user: list | None = None, schema: pa.Schema | None = None) -> pa.Table:
    """Frame rows of one rank, ids from `first_id` on, one per key (file, line, function, ...):
    `line_kind` one for all or one per row; `parents` each row's parent frame id (< 0: none; None:
    no parents); `is_user` per row, else from the file and function (sources.is_user_frame). `code` is left null
    (the live collector reads it: sources.with_code)."""
    n = len(keys)
    kinds = [line_kind] * n if isinstance(line_kind, str) else line_kind
    parent_ids = (pa.nulls(n, pa.int64()) if parents is None
                  else pa.array(np.maximum(parents, 0), pa.int64(), mask=parents < 0))
    return pa.table({
        "frame_id": pa.array(first_id + np.arange(n, dtype=np.int64)),
        "rank": pa.array(np.full(n, rank, dtype=np.int32)),
        "file": pa.array([k[0] for k in keys], pa.string()),
        "line": pa.array([k[1] for k in keys], pa.int32()),
        "function": pa.array([k[2] for k in keys], pa.string()),
        "is_user": pa.array([is_user_frame(k[0], k[2]) for k in keys] if is_user is None else is_user, pa.bool_()),
        "line_kind": pa.array(kinds, pa.string()),
        "parent_frame_id": parent_ids,
        "code": pa.nulls(n, pa.string()),
    }, schema=schema)


def _with_capture_frames(frames: pa.Table, captured: list, rank: int) -> pa.Table:
    """The rank's frames and, after them, the capture's (graph_capture.Captures.frames), with ids and
    parents in the rank's numbering."""
    if not captured:
        return frames
    base = rank * ID_STRIDE + frames.num_rows
    cols = list(zip(*captured))
    parent = np.array(cols[5], dtype=np.int64)
    extra = frames_table(rank, base, captured, list(cols[4]), np.where(parent < 0, -1, base + parent),
                         is_user=list(cols[3]), schema=frames.schema)
    return pa.concat_tables([frames, extra])


def _launches_without_device_work(kind, is_runtime, name_codes, name_values, flows: _Flows) -> dict[str, int]:
    """A rank with launch calls or launch flow starts but no device work (kernel, memcpy, memset)
    lost its device events: {"launches_without_device_events": launch calls,
    "launch_flows_without_device_events": launch flow starts}, the counts that are not 0; {} for
    every other rank (one with device work, or a CPU-only one)."""
    if np.isin(kind, _DEVICE_WORK).any():
        return {}
    launch_names = np.array([bool(v) and bool(LAUNCH_CALL.search(v)) for v in name_values], dtype=bool)
    launches = int(np.count_nonzero(is_runtime & launch_names[name_codes])) if len(kind) else 0
    starts = 0
    if flows.n:
        launch_flow = flows.text_in("category", LAUNCH_FLOW_CATEGORIES, lower=True) | (
            flows.text_in("category", OLD_LAUNCH_FLOW[:1], lower=True) & flows.text_in("name", OLD_LAUNCH_FLOW[1:]))
        starts = int(np.count_nonzero(launch_flow & flows.text_in("phase", ("s",))))
    out = {"launches_without_device_events": launches, "launch_flows_without_device_events": starts}
    return {k: v for k, v in out.items() if v}


def _launch_by_correlation(is_runtime, is_device, correlation, correlation_null, dtype) -> np.ndarray:
    """Each device event's runtime call (the first of the same correlation id: launches.first_call_of), else -1."""
    launch = np.full(len(is_device), -1, dtype=dtype)
    rt_idx = np.flatnonzero(is_runtime & ~correlation_null)
    dev_idx = np.flatnonzero(is_device & ~correlation_null)
    at = first_call_of(correlation[rt_idx], correlation[dev_idx])  # (rows in time order: the calls are)
    hit = at >= 0
    launch[dev_idx[hit]] = rt_idx[at[hit]]
    return launch


def _early_columns(columns: list, order: np.ndarray, is_step, step_no, ts, end, first_id: int, is_device) -> tuple:
    """On the build's helper thread: (values, nulls) of the correlation, stream and External id
    columns in sorted order, the args as one array or PackedText (source order; either has `take`), and
    `_steps`. `columns` holds those four raw columns and is emptied as each is read, so each goes once
    done with."""
    args = columns.pop()
    if not len(order):
        args = None
    elif isinstance(args, pa.ChunkedArray):  # (one chunk: combine_chunks would copy it all the same)
        args = args.chunk(0) if args.num_chunks == 1 else args.combine_chunks()
    ids = [_np_mask(columns.pop(0), order) for _ in range(3)]
    return (*ids, args, _steps(is_step, step_no, ts, end, first_id, is_device))


def _flows_table(fl: _Flows, fl_event: np.ndarray, rank: int, base_ns: int) -> SortedTable:
    """The run's flows table: each endpoint with the event it binds to (`fl_event`, -1: none), by time
    (stable: endpoints at one time keep the trace's order). Its columns are held in that order as the
    build holds them (_Flows), each row group made from them as it is written: a fifth of the time it
    took to take a row group's rows from the raw flows' chunks, and no hashing of their text again
    in the writer (the text columns are written from their codes)."""
    base = rank * ID_STRIDE
    order = np.argsort(fl.ints["ts_ns"][0], kind="stable")
    ts = fl.ints.pop("ts_ns")[0][order] + base_ns
    event = narrow(fl_event[order])

    def ints(values: np.ndarray, mask: np.ndarray | None):
        values, mask = values[order], None if mask is None else mask[order]
        return lambda sl: pa.array(values[sl], pa.int64(), mask=None if mask is None else mask[sl])

    makers = {name: ints(*fl.ints.pop(name)) for name in ("flow_id", "pid", "tid")}
    makers |= {name: Coded(codes[order], values) for name in ("category", "name", "phase", "binding_point")
               for codes, values in [fl.text.pop(name)]}
    makers |= {"rank": lambda sl: pa.array(np.full(sl.stop - sl.start, rank, dtype=np.int32)), "ts_ns": lambda sl: pa.array(ts[sl]),
               "event_id": lambda sl: _ids(event[sl], base)}
    return SortedTable(schema.FLOWS, fl.n, makers)


def _flow_events(fl: _Flows, base_ns: int, track, pid, tid, ts, end, parent) -> np.ndarray:
    """The slice each flow endpoint binds to (the innermost on its thread around its time), else -1."""
    fl_event = np.full(fl.n, -1, dtype=parent.dtype)
    if fl.n and len(ts):
        f_track = track_lookup(track, pid, tid, fl.filled("pid"), fl.filled("tid"))
        ok = f_track >= 0
        if ok.any():
            fl_event[ok] = slice_at(track, ts, end, parent, f_track[ok], (fl.filled("ts_ns", 0) + base_ns)[ok])
    return fl_event


def _sorted_text(col: pa.ChunkedArray, order: np.ndarray) -> pa.Array | None:
    """A text column in sorted order; None when every row is null (most traces' ids are numbers)."""
    if col.null_count == len(col):
        return None
    return col.take(pa.array(order)).combine_chunks()


def _sparse(text: pa.Array | None) -> pa.Array | tuple[np.ndarray, pa.Array] | None:
    """A text column with few values (a trace's text pids: 96 rows of 1.45M) as (rows, values),
    which the write fills in with nulls a row group at a time; else as it is."""
    if text is None or text.null_count < len(text) * 0.9:
        return text
    valid = np.asarray(text.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    rows = np.flatnonzero(valid)
    return rows, text.filter(pa.array(valid))


def _np_mask(col: pa.ChunkedArray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(integer values with nulls as -1, null mask), both in sorted order; the values int32 where
    they fit (`narrow`)."""
    bounds = pc.min_max(col)
    values = np.empty(len(col), dtype=_fitting(min(bounds["min"].as_py() or 0, -1), max(bounds["max"].as_py() or 0, -1)))
    at = 0  # (a chunk at a time: the column whole at int64, and again as a numpy copy, was 22 MiB a million rows)
    for chunk in col.chunks:
        values[at:at + len(chunk)] = chunk.fill_null(-1).to_numpy(zero_copy_only=False)
        at += len(chunk)
    nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    return values[order], nulls[order]


def _fitting(lo: int, hi: int, smallest=np.int32):
    """The narrowest integer type, from `smallest` up to int64, that holds every value from `lo` to `hi`."""
    for t in (np.int8, np.int16, np.int32):
        if np.dtype(t).itemsize >= np.dtype(smallest).itemsize and np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return t
    return np.int64


def _code_type(distinct: int):
    """The integer type for the codes of a dictionary of `distinct` values (and -1)."""
    return _fitting(-1, distinct, np.int8)


NEGATIVE = object()
"""A column's mask in build_rank's makers: null where the value is negative."""


def narrow(values: np.ndarray, smallest=np.int32) -> np.ndarray:
    """Integer `values` at the narrowest width from `smallest` up that holds every one, never wider
    than they are. The build holds a dozen columns of a row per event until the write (ids, pids,
    thread ids, correlations, steps and durations mostly fit 32 bits): at half the width, the
    import's memory is smaller by ~5.5 MiB per column per million events. Every use of them
    compares, indexes or widens (a sum, `ts + dur`): none computes a value of its own in their
    width. The columns held only to be written go down to 8 bits (`smallest=np.int8`: each row
    group widens them to the file's type)."""
    if not len(values) or values.dtype.itemsize <= np.dtype(smallest).itemsize:
        return values
    t = _fitting(int(values.min()), int(values.max()), smallest)
    return values.astype(t) if np.dtype(t).itemsize < values.dtype.itemsize else values


def _device_by_external_id(need_mask, is_op, external_id, external_null) -> np.ndarray:
    """For each row of `need_mask` that has an External id, the CPU operator with that External id
    (the latest to start at or before it, else the first after; rows are in time order), else -1."""
    n = len(need_mask)
    out = np.full(n, -1, dtype=np.int64)
    need = np.flatnonzero(need_mask & ~external_null)
    ops = np.flatnonzero(is_op & ~external_null)
    if not len(need) or not len(ops):
        return out
    ids = np.unique(external_id[ops])
    op_code = np.searchsorted(ids, external_id[ops])
    p = np.clip(np.searchsorted(ids, external_id[need]), 0, len(ids) - 1)
    known = ids[p] == external_id[need]
    need, code = need[known], p[known]
    if not len(need):
        return out
    # one sorted key per operator: (External id's code, row); a device row looks up its own key
    stride = np.int64(n + 1)
    op_key = np.sort(op_code.astype(np.int64) * stride + ops)
    key = code.astype(np.int64) * stride + need
    before = np.searchsorted(op_key, key, side="right") - 1
    ok_before = (before >= 0) & (op_key[np.maximum(before, 0)] // stride == code)
    after = np.minimum(before + 1, len(op_key) - 1)
    pick = np.where(ok_before, before, after)
    found = op_key[pick] // stride == code
    out[need[found]] = op_key[pick[found]] % stride
    return out


def _syncs_by_external_id(is_sync, is_op, external_id, external_null, ts, op, top_op, step):
    """cuda_sync events still without an operator (their runtime call ran outside any, or was not
    recorded) take the operator that shares their `External id`: the latest to start at or
    before them, else the first after. Syncs are few: a loop over them is cheap."""
    need = np.flatnonzero(is_sync & (op < 0) & ~external_null)
    if not len(need):
        return op, top_op, step
    ops = np.flatnonzero(is_op & ~external_null)
    by_id: dict[int, list[int]] = {}
    for r in ops[np.argsort(ts[ops], kind="stable")].tolist():
        by_id.setdefault(int(external_id[r]), []).append(r)
    op, top_op, step = op.copy(), top_op.copy(), step.copy()
    for r in need.tolist():
        rows = by_id.get(int(external_id[r]))
        if not rows:
            continue
        before = [o for o in rows if ts[o] <= ts[r]]
        o = before[-1] if before else rows[0]
        op[r], top_op[r] = o, top_op[o]
        if step[r] < 0:
            step[r] = step[o]
    return op, top_op, step


def renumbered_steps(numbers: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The step numbers of a rank's profiler steps (in time order), numbered on where the trace's
    numbers start again. A trace that joins profiling sessions (a job's windows concatenated, or a
    trace tiled) holds ProfilerStep#1..#5 twice; read by number, each step would span both
    sessions and the steps would add up to more than the trace. When a number's ranges are
    disjoint in time, each session after the first is shifted to go on after the one before it
    (#1..#5, #1..#5 -> #1..#5, #6..#10); numbers that only repeat on ranges that overlap (one step
    on several threads) are kept."""
    if len(numbers) < 2:
        return numbers
    by_no = np.lexsort((ts, numbers))  # by number, then start
    same = numbers[by_no][1:] == numbers[by_no][:-1]
    s_ts = ts[by_no]
    if not (same & (s_ts[1:] >= end[by_no][:-1]) & (s_ts[1:] > s_ts[:-1])).any():  # none starts once one of its number ended
        return numbers
    out = numbers.copy()
    shift = 0
    for i in range(1, len(numbers)):
        a, b = numbers[i - 1], numbers[i]
        if b < a or (b == a and ts[i] >= end[i - 1]):  # the numbers start again: a session joined after the one before
            shift = out[i - 1] + 1 - b
        out[i] = b + shift  # (the same number on a range that overlaps the one before: the same step)
    return out


def _steps(is_step: np.ndarray, step_no: np.ndarray, ts: np.ndarray, end: np.ndarray, first_id: int,
           is_device: np.ndarray) -> tuple[list[dict], np.ndarray]:
    """Profiler steps of the rank, and the step of each host event (the step range its start falls in).
    `first_id`: the event id of the rank's first event (row 0)."""
    rows = np.flatnonzero(is_step)
    if not len(rows):
        return [], np.full(len(ts), -1, dtype=np.int32)
    s_ts, s_end = ts[rows], end[rows]
    s_no = renumbered_steps(step_no[rows], s_ts, s_end)
    step = np.full(len(ts), -1, dtype=narrow(s_no).dtype)
    for at in range(0, len(ts), _BLOCK):  # (a block at a time: each temporary a column of int64 otherwise)
        t = ts[at:at + _BLOCK]
        p = np.searchsorted(s_ts, t, side="right") - 1
        inside = (p >= 0) & (t < s_end[np.maximum(p, 0)]) & ~is_device[at:at + _BLOCK]
        step[at:at + _BLOCK][inside] = s_no[p[inside]]
    step[rows] = s_no  # a step range is in its own step, even one of no duration
    steps = [{"step": int(a), "ts_ns": int(b), "dur_ns": int(c - b), "event_id": first_id + int(r)}
             for a, b, c, r in zip(s_no, s_ts, s_end, rows)]
    for s, number in zip(steps, step_no[rows].tolist()):
        if s["step"] != number:
            s["number_in_trace"] = number  # (renumbered_steps: the trace's numbers started again)
    return steps, step


def _memory(raw: RawRank, track, pid, tid, ts, dur, parent, op, ev_frame, step, steps) -> pa.Table:
    """Allocator rows with the operator, step and frame of the slice around them on their thread."""
    mem = raw.memory
    rank = raw.rank
    base = rank * ID_STRIDE
    m_ts = _np(mem["ts_ns"], 0) + raw.base_ns
    m_slice = np.full(mem.num_rows, -1, dtype=np.int64)
    if mem.num_rows and len(ts):
        m_track = track_lookup(track, pid, tid, _np(mem["pid"]), _np(mem["tid"]))
        ok = m_track >= 0
        if ok.any():
            m_slice[ok] = slice_at(track, ts, ts + np.maximum(dur, 0), parent, m_track[ok], m_ts[ok])
    ms = np.maximum(m_slice, 0)
    has_slice = m_slice >= 0
    m_op = np.where(has_slice, op[ms], -1) if len(ts) else m_slice
    m_frame = np.where(has_slice, ev_frame[ms], -1) if len(ts) else m_slice
    m_step = np.where(has_slice, step[ms], -1) if len(ts) else m_slice
    if steps and mem.num_rows:  # allocations outside any slice still fall in a step by time
        s_ts = np.array([s["ts_ns"] for s in steps])
        s_end = s_ts + np.array([s["dur_ns"] for s in steps])
        s_no = np.array([s["step"] for s in steps])
        p = np.searchsorted(s_ts, m_ts, side="right") - 1
        inside = (p >= 0) & (m_ts < s_end[np.maximum(p, 0)])
        m_step = np.where((m_step < 0) & inside, s_no[np.maximum(p, 0)], m_step)
    table = pa.table(
        {
            "rank": pa.array(np.full(mem.num_rows, rank, dtype=np.int32)),
            "ts_ns": pa.array(m_ts, pa.int64()),
            "pid": mem["pid"],
            "tid": mem["tid"],
            "device_type": mem["device_type"],
            "device": mem["device"],
            "addr": mem["addr"],
            "bytes": mem["bytes"],
            "total_allocated": _running_total(mem, m_ts),
            "total_reserved": mem["total_reserved"],
            "op_id": _ids(m_op, base),
            "step": pa.array(m_step, pa.int64(), mask=m_step < 0),
            "frame_id": _ids(m_frame, base),
            "category": mem["category"],
        }
    )
    return _conform(table, schema.MEMORY).sort_by([("ts_ns", "ascending")])


def _running_total(mem: pa.Table, m_ts: np.ndarray) -> pa.Array:
    """`total_allocated` as recorded; where a device has no recorded total at all (torch <= 1.9
    wrote only `Bytes`), the running sum of `bytes` on that device in time order, counted from the
    trace's first allocator event (what was allocated before profiling started is unknown)."""
    total = mem["total_allocated"].combine_chunks() if mem.num_rows else pa.array([], pa.int64())
    if total.null_count == 0:
        return total
    values = _np(total, 0).astype(np.int64)
    recorded = ~np.asarray(total.is_null().to_numpy(zero_copy_only=False))
    sizes = _np(mem["bytes"], 0).astype(np.int64)
    device = _np(mem["device_type"], 0).astype(np.int64) * (1 << 32) + _np(mem["device"], 0).astype(np.int64)
    derived = np.zeros(len(values), dtype=bool)
    for d in np.unique(device):
        rows = np.flatnonzero(device == d)
        if recorded[rows].any():
            continue
        rows = rows[np.argsort(m_ts[rows], kind="stable")]
        values[rows] = np.cumsum(sizes[rows])
        derived[rows] = True
    return pa.array(values, pa.int64(), mask=~(recorded | derived))


def _counters(raw: RawRank) -> pa.Table:
    cn = raw.counters
    table = pa.table(
        {
            "rank": pa.array(np.full(cn.num_rows, raw.rank, dtype=np.int32)),
            "ts_ns": pa.array(_np(cn["ts_ns"], 0) + raw.base_ns, pa.int64()),
            "pid": cn["pid"],
            "name": cn["name"],
            "series": cn["series"],
            "value": cn["value"],
            "category": cn["category"],
        }
    )
    return _conform(table, schema.COUNTERS).sort_by([("ts_ns", "ascending")])


def _frames_and_modules(raw: RawRank, order: np.ndarray, n: int, parent: np.ndarray, is_python: np.ndarray,
                        name_values: list, name_idx: np.ndarray):
    """frames table, per-event frame index (-1 = none) and per-event module path (None, or int32
    codes, -1 = none, with their dictionary of paths).

    Arrays are in sorted event order.
    """
    rank = raw.rank
    ev = raw.events
    module_path = None
    if "module_path" in ev.column_names:
        codes, dictionary = _codes(ev["module_path"])
        module_path = (np.where(codes == len(dictionary) - 1, -1, codes).astype(np.int32)[order], dictionary)
    if raw.frames is not None and "frame_index" in ev.column_names:
        fr = raw.frames
        ev_frame = _np(ev["frame_index"])[order]
        parent_index = _np(fr["parent_index"])
        frames = pa.table(
            {
                "frame_id": pa.array(rank * ID_STRIDE + np.arange(fr.num_rows, dtype=np.int64)),
                "rank": pa.array(np.full(fr.num_rows, rank, dtype=np.int32)),
                "file": fr["file"],
                "line": pc.cast(fr["line"], pa.int32()),
                "function": fr["function"],
                "is_user": fr["is_user"],
                "line_kind": fr["line_kind"],
                "parent_frame_id": pa.array(np.where(parent_index >= 0, rank * ID_STRIDE + parent_index, 0), pa.int64(), mask=parent_index < 0),
                "code": fr["code"] if "code" in fr.column_names else pa.nulls(fr.num_rows, pa.string()),
            }
        )
        return _conform(frames, schema.FRAMES), ev_frame, module_path

    # Imported traces: python_function events named 'file.py(123): func' (their def line).
    parsed = [_parse_frame(v) if v else None for v in name_values]
    frame_keys: dict[tuple, int] = {}
    name_frame = np.full(len(name_values), -1, dtype=np.int32)
    name_user = np.zeros(len(name_values), dtype=bool)
    name_module = [None] * len(name_values)
    for i, (v, p) in enumerate(zip(name_values, parsed)):
        if v and v.startswith(MODULE_PREFIX):
            name_module[i] = v[len(MODULE_PREFIX):]
        if p is None:
            continue
        key = p
        name_frame[i] = frame_keys.setdefault(key, len(frame_keys))
        name_user[i] = is_user_frame(p[0], p[2])
    ev_frame_own = name_frame[name_idx] if n else np.zeros(0, np.int32)
    ev_frame_own[~is_python] = -1
    user_mark = is_python & name_user[name_idx] if n else np.zeros(0, bool)
    nearest_user = nearest_marked(parent, user_mark)
    del user_mark
    ev_frame = ev_frame_own[np.maximum(nearest_user, 0)]
    ev_frame[nearest_user < 0] = -1
    del ev_frame_own, nearest_user
    frames = frames_table(rank, rank * ID_STRIDE, list(frame_keys), "def")
    if module_path is None and any(m is not None for m in name_module):
        is_module = np.array([m is not None for m in name_module], dtype=bool)[name_idx]
        nearest_mod = nearest_marked(parent, is_module)
        mod_rows = np.flatnonzero(is_module)
        mod_parent = {}
        for r in mod_rows.tolist():
            p = parent[r]
            mod_parent[r] = int(nearest_mod[p]) if p >= 0 else -1
        paths: dict[int, str] = {}
        for r in mod_rows.tolist():  # rows are in time order: a parent module precedes its children
            seg = name_module[name_idx[r]]
            pm = mod_parent[r]
            paths[r] = f"{paths[pm]}.{seg}" if pm >= 0 and pm in paths else seg
        distinct = list(dict.fromkeys(paths.values()))
        code_of_path = {p: i for i, p in enumerate(distinct)}
        path_of_row = np.full(n + 1, -1, dtype=np.int32)  # the last slot answers "no module"
        for r, path in paths.items():
            path_of_row[r] = code_of_path[path]
        module_path = (path_of_row[nearest_mod], pa.array(distinct, pa.string()))
    return _conform(frames, schema.FRAMES), ev_frame, module_path



def _conform(table: pa.Table, spec: schema.Table) -> pa.Table:
    """Select and cast columns to the schema (dictionary-decoded, exact types, format metadata)."""
    cols = []
    for c in spec.columns:
        col = table[c.name]
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        if col.type != c.arrow_type:
            col = col.cast(c.arrow_type)
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=spec.arrow_schema())

