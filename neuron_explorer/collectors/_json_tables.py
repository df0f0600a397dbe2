"""Events of the traceEvents array into the raw tables' Arrow columns (`Chunk`): slices, flows,
`[memory]` instants, counters, and metadata events as dicts (identical ones once, with their `count`:
a trace can repeat the same 24 metadata events 300,000 times).

An array of events is read by the C++ reader (_json_native) where it can; what it leaves (or all
of it, without the library) is decoded with typed msgspec structs (`_Event`, `_Args`), and each
table is built column by column (`_slice_table`, `_flow_table`, `_memory_table`,
`_counter_table`); the numbers in them by _json_numbers. Args are kept as their JSON text, and
JSON nested deeper than MAX_NESTING levels in args or metadata is an InputError. A counter whose
args are not an object of numbers is an InputError.

Must not: read files or cut the array into pieces (_json_read, _kineto_json), know links or the run
format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Union

import msgspec
import numpy as np
import pyarrow as pa

from ..errors import InputError
from . import _json_native
from ._json_numbers import _INT32, _INT64, _id_columns, _int_column, _ns, _opt_int, id_value, odd_times
from ._json_read import _short
from ._packed_text import PackedText
from .kineto_names import (
    ARGS_NAMING_INPUTS,
    EXTERNAL_ID_ARG,
    EXTERNAL_ID_ARG_OLD,
    FLOW_PHASES,
    MEMORY_ARGS,
    MEMORY_EVENT_NAME,
    SEQUENCE_NUMBER_KEY,
    SLICE_PHASES,
)
from .raw import RAW_COUNTERS, RAW_MEMORY


def pack_args(args: pa.Array | pa.ChunkedArray) -> PackedText:
    """Events' args packed (PackedText), with what the build asks of every operator's args read from
    them while the decode has their text at hand (`marks` and `number_after`): whether they name the
    operator's inputs, and its sequence number (passes.args_name_inputs, sequence_numbers), which
    otherwise unpacked every block of args twice (a 2.2M-event trace: 70 and 40 ms)."""
    return PackedText.pack(args, ARGS_NAMING_INPUTS, SEQUENCE_NUMBER_KEY)


MAX_NESTING = 100
"""Deepest nesting of arrays and objects accepted in an event's args or in the trace's metadata.
Kineto writes 3 or 4 levels; the args are stored as JSON text that DuckDB and Python's json parse
again later, whose recursion limits (about 1000 levels, less deep inside a call stack) must never
be reached by a run that was written."""

_NULL = msgspec.Raw(b"null")
_ZERO = msgspec.Raw(b"0")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: Union[str, int, float, None] = None
    # ts and dur stay as their JSON text: a float64 cannot hold epoch microseconds to the
    # nanosecond (it rounds them to multiples of 256 ns); `_json_numbers._ns` reads the digits.
    ts: msgspec.Raw = _NULL
    dur: msgspec.Raw = _NULL
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    id: Union[int, str, None] = None
    bp: Union[str, None] = None
    args: msgspec.Raw = msgspec.Raw(b"null")


class _Args(msgspec.Struct, gc=False):
    """The args that links and tables need; the rest stays in the args JSON text."""

    external_id: Union[int, None] = msgspec.field(default=None, name=EXTERNAL_ID_ARG)
    external_id_old: Union[int, None] = msgspec.field(default=None, name=EXTERNAL_ID_ARG_OLD)
    correlation: Union[int, None] = None
    stream: Union[int, str, None] = None
    device: Union[int, str, None] = None
    # [memory] instants
    addr: Union[int, None] = msgspec.field(default=None, name=MEMORY_ARGS["addr"])
    bytes_: Union[int, None] = msgspec.field(default=None, name=MEMORY_ARGS["bytes"])
    total_allocated: Union[int, None] = msgspec.field(default=None, name=MEMORY_ARGS["total_allocated"])
    total_reserved: Union[int, None] = msgspec.field(default=None, name=MEMORY_ARGS["total_reserved"])
    device_type: Union[int, None] = msgspec.field(default=None, name=MEMORY_ARGS["device_type"])
    device_id: Union[int, None] = msgspec.field(default=None, name=MEMORY_ARGS["device"])


_EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
_ARGS_DECODER = msgspec.json.Decoder(list[Union[_Args, None]])
_COUNTER_ARGS_DECODER = msgspec.json.Decoder(list[Union[dict[str, Union[int, float, str, bool, None]], None]])


@dataclass
class Chunk:
    """Columns of one decoded chunk, split by table. Plain Arrow tables, picklable."""

    events: pa.Table
    flows: pa.Table
    memory: pa.Table
    counters: pa.Table
    metadata: list  # 'M' events, as dicts
    unsupported: dict = field(default_factory=dict)  # phase -> count
    array_end: int | None = None  # where traceEvents closed inside this piece (its ']'), if it did
    odd_times: tuple[int, int] = (0, 0)  # events (dropped: no time, read: a numeric-string time), `_timed`
    args: PackedText | None = None  # the events' args, packed (`packed`); the events table then has no args column

    def packed(self) -> Chunk:
        """This chunk with its events' args compressed (_packed_text), the args column dropped."""
        if self.args is None:
            i = self.events.schema.get_field_index("args")
            if i < 0:  # (no args column: every event's args are null)
                self.args = pack_args(pa.nulls(self.events.num_rows, pa.string()))
                return self
            self.args = pack_args(self.events.column(i))
            self.events = self.events.remove_column(i)
        return self


def nesting_depth(value, limit: int) -> int:
    """Levels of lists and dicts in a decoded JSON value (a scalar is 0), counted without
    recursion; stops counting once past `limit`."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (list, dict)):
            deepest = max(deepest, depth)
            if depth > limit:
                return deepest
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def check_nesting(path: str, value, what: str) -> None:
    if nesting_depth(value, MAX_NESTING) > MAX_NESTING:
        raise InputError(path, f"{what} nested more than {MAX_NESTING} levels deep")


_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_RAW_DECODER = msgspec.json.Decoder(msgspec.Raw)


def _closing_bracket(data: bytes, error: msgspec.DecodeError, decoder) -> int | None:
    """Where the array at the start of `data` closes, given the parser's 'trailing characters'
    error: the last ']' before the reported byte. Only the true end parses as a whole array, so
    each candidate is checked with `decoder`."""
    m = _TRAILING.search(str(error))
    if not m:
        return None
    view = memoryview(data)
    pos = int(m.group(1))
    for end in dict.fromkeys((data.rfind(b"]", 0, pos - 1), data.rfind(b"]", 0, pos))):
        if end <= 0:
            continue
        try:
            decoder.decode(view[: end + 1])
        except msgspec.DecodeError:
            continue
        return end
    return None


class _Trailing(Exception):
    def __init__(self, events: list, end: int):
        self.events, self.end = events, end


def _decode_array(path: str, array) -> Chunk:
    fast = _json_native.read(array, MAX_NESTING)
    if fast is None:  # no C++ reader, or a piece it leaves to this decoder
        return _columns(path, _decode_events(path, array))
    return _with_native(path, array, fast)


def _with_native(path: str, array, fast: _json_native.NativeChunk) -> Chunk:
    """The chunk of what the C++ reader read, and of the other events (decoded here).

    The C++ reader reads every slice and flow, so the others are metadata, memory and counter
    events. A table is made of them only when there are some: most pieces have only metadata, or
    nothing, and then no conversion imports pandas on this thread (which would wait for the
    import that the importing thread runs meanwhile)."""
    memory, counters, metadata, unsupported, odd = [], [], [], {}, (0, 0)
    if fast.others:
        view = memoryview(array)
        parts: list = []
        ranges = fast.others
        for i in range(0, len(ranges), 2):  # '[' event ',' event ... ']' joined in one copy
            parts += (b",", view[ranges[i]:ranges[i + 1]])
        parts[0], parts[-1:] = b"[", [parts[-1], b"]"]
        _, _, memory, counters, metadata, unsupported, odd = _sorted_out(path, _decode_events(path, b"".join(parts)))
    return Chunk(fast.events, fast.flows,
                 _memory_table(path, memory) if memory else pa.Table.from_batches([], schema=RAW_MEMORY),
                 _counter_table(path, counters) if counters else pa.Table.from_batches([], schema=RAW_COUNTERS),
                 metadata, unsupported, odd_times=odd, args=fast.args)


def _decode_events(path: str, array) -> list:
    try:
        return _EVENTS_DECODER.decode(array)
    except msgspec.ValidationError as e:
        raise InputError(path, f"wrong value type in traceEvents: {_short(e)}") from None
    except msgspec.DecodeError as e:
        end = _closing_bracket(array, e, _RAW_DECODER) if isinstance(array, bytes) else None
        if end is not None:  # the array closed before the end of the data
            raise _Trailing(_decode_events(path, memoryview(array)[: end + 1]), end) from None
        raise InputError(path, f"not valid JSON in traceEvents ({_short(e)})") from None


def _args_text(path: str, raws: list) -> pa.Array:
    """Raw JSON args → a string array without per-item Python strings; 'null' and '{}' → null.
    Args nested more than MAX_NESTING levels are an InputError."""
    lens = np.fromiter((len(r) for r in raws), dtype=np.int64, count=len(raws))
    offsets = np.zeros(len(raws) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    data = b"".join(raws)
    _check_nesting_text(path, data, offsets, raws)
    arr = pa.LargeStringArray.from_buffers(len(raws), pa.py_buffer(offsets), pa.py_buffer(data))
    empty = np.isin(lens, (2, 4))  # '{}' or 'null'
    if empty.any():
        first = np.frombuffer(data, dtype=np.uint8)[offsets[:-1][empty]] if len(data) else np.array([], np.uint8)
        mask = np.zeros(len(raws), dtype=bool)
        mask[np.flatnonzero(empty)] = (first == ord("{")) | (first == ord("n"))
        arr = pa.compute.if_else(pa.array(mask), pa.scalar(None, pa.large_string()), arr)
    return arr.cast(pa.string())


def _check_nesting_text(path: str, data: bytes, offsets: np.ndarray, raws: list) -> None:
    """Only args with more than MAX_NESTING opening brackets can nest that deep: counted for all at
    once (numpy over the bytes), parsed one by one only for those few."""
    if len(data) <= 2 * MAX_NESTING:
        return
    b = np.frombuffer(data, dtype=np.uint8)
    at = np.flatnonzero((b == ord("[")) | (b == ord("{")))  # brackets are a small share of the bytes
    per_args = np.bincount(np.searchsorted(offsets, at, side="right") - 1, minlength=len(raws))
    for i in np.flatnonzero(per_args > MAX_NESTING).tolist():
        check_nesting(path, msgspec.json.decode(raws[i]), "the args of an event")


def _columns(path: str, evs: list[_Event]) -> Chunk:
    slices, flows, memory, counters, metadata, unsupported, odd = _sorted_out(path, evs)
    return Chunk(
        events=_slice_table(path, slices),
        flows=_flow_table(path, flows),
        memory=_memory_table(path, memory),
        counters=_counter_table(path, counters),
        metadata=metadata,
        unsupported=unsupported,
        odd_times=odd,
    )


def _timed(evs: list[_Event], with_dur: bool) -> tuple[list[_Event], int, int]:
    """`evs` without those whose ts (or an 'X' event's dur, with `with_dur`) is no time, and
    (events dropped, events kept whose time was a numeric string): `_json_numbers.odd_times`. The
    C++ reader gives such pieces up, so both readers drop the same events."""
    none, strings = odd_times([e.ts for e in evs])
    if with_dur:
        dur_none, dur_strings = odd_times([e.dur for e in evs if e.ph == "X"])
        if dur_none or dur_strings:
            x = [i for i, e in enumerate(evs) if e.ph == "X"]
            none, strings = none + [x[i] for i in dur_none], strings + [x[i] for i in dur_strings]
    if not (none or strings):
        return evs, 0, 0
    drop = set(none)
    kept = [e for i, e in enumerate(evs) if i not in drop]
    return kept, len(drop), len(set(strings) - drop)


def _sorted_out(path: str, evs: list[_Event]) -> tuple[list, list, list, list, list, dict, tuple[int, int]]:
    """The events by table: (slices, flows, memory, counters, metadata as dicts, unsupported phases'
    counts, (events dropped for want of a time, events whose time was a numeric string))."""
    slices, flows, memory, counters = [], [], [], []
    metadata: dict[tuple, dict] = {}  # identical metadata events once, with their count
    unsupported: dict[str, int] = {}
    for e in evs:
        ph = e.ph
        if ph in SLICE_PHASES:
            if e.name == MEMORY_EVENT_NAME:
                memory.append(e)
            else:
                slices.append(e)
        elif ph in FLOW_PHASES:
            flows.append(e)
        elif ph == "C":
            counters.append(e)
        elif ph == "M":
            same = (e.name, e.cat, e.pid, e.tid, bytes(e.args))
            if (seen := metadata.get(same)) is not None:
                seen["count"] += 1
                continue
            meta = msgspec.structs.asdict(e) | {"ts": msgspec.json.decode(e.ts), "dur": msgspec.json.decode(e.dur),
                                                "args": msgspec.json.decode(e.args)}
            for key in ("pid", "tid"):  # an integer's text names the thread the events' integer tid names
                if type(meta[key]) is str and (number := id_value(meta[key])) is not None:
                    meta[key] = number
            check_nesting(path, meta["args"], f"the args of metadata event {e.name!r}")
            metadata[same] = meta | {"count": 1}
        else:
            unsupported[ph] = unsupported.get(ph, 0) + 1
    dropped = read = 0
    timed = []
    for evs_of, with_dur in ((slices, True), (flows, False), (memory, False), (counters, False)):
        kept, d, r = _timed(evs_of, with_dur)
        timed.append(kept)
        dropped, read = dropped + d, read + r
    slices, flows, memory, counters = timed
    return slices, flows, memory, counters, list(metadata.values()), unsupported, (dropped, read)


def _names(values: list) -> pa.Array:
    return pa.array([v if v is None or type(v) is str else str(v) for v in values], pa.string())


def _decode_args(path: str, raws: list) -> list:
    try:
        return _ARGS_DECODER.decode(b"[" + b",".join(raws) + b"]")
    except msgspec.ValidationError:
        # A known key with an odd type: decode one by one and drop only what does not fit.
        out = []
        for r in raws:
            try:
                out.append(_ARGS_DECODER.decode(b"[" + bytes(r) + b"]")[0])
            except msgspec.ValidationError:
                out.append(None)
        return out
    except msgspec.DecodeError as e:  # pragma: no cover - the events decoded, so the args are JSON
        raise InputError(path, f"bad args JSON: {_short(e)}") from None


def _slice_table(path: str, evs: list[_Event]) -> pa.Table:
    raws = [e.args for e in evs]
    args = _decode_args(path, raws)
    pid, pid_text = _id_columns([e.pid for e in evs])
    tid, tid_text = _id_columns([e.tid for e in evs])
    ext = [None if a is None else (a.external_id if a.external_id is not None else a.external_id_old) for a in args]
    return pa.table(
        {
            "category": pa.array([e.cat or "" for e in evs], pa.string()).dictionary_encode(),
            "name": _names([e.name for e in evs]).dictionary_encode(),
            "phase": pa.array(["X" if e.ph == "X" else "i" for e in evs], pa.string()).dictionary_encode(),
            "ts_ns": _ns(path, [e.ts for e in evs], "ts"),
            "dur_ns": _ns(path, [e.dur if e.ph == "X" else _ZERO for e in evs], "dur"),
            "pid": pid,
            "tid": tid,
            "pid_text": pid_text,
            "tid_text": tid_text,
            "correlation": _int_column(path, [None if a is None else a.correlation for a in args], "args 'correlation'"),
            "external_id": _int_column(path, ext, "args 'External id'"),
            "stream": _opt_int(path, [None if a is None else a.stream for a in args], "args 'stream'"),
            "args": _args_text(path, raws),
        }
    )


def _flow_table(path: str, evs: list[_Event]) -> pa.Table:
    pid, _ = _id_columns([e.pid for e in evs])
    tid, _ = _id_columns([e.tid for e in evs])
    return pa.table(
        {
            "flow_id": _opt_int(path, [e.id for e in evs], "flow 'id'"),
            "category": pa.array([e.cat or "" for e in evs], pa.string()).dictionary_encode(),
            "name": _names([e.name for e in evs]).dictionary_encode(),
            "phase": pa.array([e.ph for e in evs], pa.string()).dictionary_encode(),
            "ts_ns": _ns(path, [e.ts for e in evs], "ts"),
            "pid": pid,
            "tid": tid,
            "binding_point": pa.array([e.bp for e in evs], pa.string()).dictionary_encode(),
        }
    )


def _memory_table(path: str, evs: list[_Event]) -> pa.Table:
    args = _decode_args(path, [e.args for e in evs])
    pid, _ = _id_columns([e.pid for e in evs])
    tid, _ = _id_columns([e.tid for e in evs])

    def col(attr: str, column: str, bounds=_INT64, typ=pa.int64()):
        what = f"{MEMORY_EVENT_NAME} args {MEMORY_ARGS[column]!r}"
        return _int_column(path, [None if a is None else getattr(a, attr) for a in args], what, bounds, typ)

    return pa.table(
        {
            "ts_ns": _ns(path, [e.ts for e in evs], "ts"),
            "pid": pid,
            "tid": tid,
            "device_type": col("device_type", "device_type", _INT32, pa.int32()),
            "device": col("device_id", "device", _INT32, pa.int32()),
            "addr": col("addr", "addr"),
            "bytes": col("bytes_", "bytes"),
            "total_allocated": col("total_allocated", "total_allocated"),
            "total_reserved": col("total_reserved", "total_reserved"),
            "category": pa.array([e.cat or "" for e in evs], pa.string()),
        }
    )


def _counter_table(path: str, evs: list[_Event]) -> pa.Table:
    rows: dict[str, list] = {"ts_ns": [], "pid": [], "name": [], "series": [], "value": [], "category": []}
    if evs:
        try:
            all_args = _COUNTER_ARGS_DECODER.decode(b"[" + b",".join(e.args for e in evs) + b"]")
        except msgspec.ValidationError:
            for e in evs:  # name the counter whose args are not an object of numbers
                try:
                    _COUNTER_ARGS_DECODER.decode(b"[" + bytes(e.args) + b"]")
                except msgspec.ValidationError:
                    shown = bytes(e.args).decode(errors="replace")[:60]
                    raise InputError(path, f"wrong value type: the args of counter {e.name!r} are {shown}, "
                                           "not an object of numbers") from None
            raise  # pragma: no cover - one of them failed above
        ts = _ns(path, [e.ts for e in evs], "ts")
        for e, t, a in zip(evs, ts, all_args):
            for k, v in (a or {}).items():
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    try:
                        v = float(v)  # type: ignore[arg-type]
                    except (TypeError, ValueError):
                        raise InputError(path, f"wrong value type: counter {e.name!r} series {k!r} is {v!r}") from None
                try:
                    v = float(v)
                except OverflowError:
                    raise InputError(path, f"wrong value: counter {e.name!r} series {k!r} is beyond a double") from None
                rows["ts_ns"].append(int(t))
                rows["pid"].append(id_value(e.pid))
                rows["name"].append(str(e.name) if e.name is not None else "")
                rows["series"].append(k)
                rows["value"].append(float(v))
                rows["category"].append(e.cat or "")
    return pa.table(
        {
            "ts_ns": pa.array(rows["ts_ns"], pa.int64()),
            "pid": pa.array(rows["pid"], pa.int64()),
            "name": pa.array(rows["name"], pa.string()),
            "series": pa.array(rows["series"], pa.string()),
            "value": pa.array(rows["value"], pa.float64()),
            "category": pa.array(rows["category"], pa.string()),
        }
    )
