"""Fast, bounded-memory decoding of Kineto / Chrome JSON traces into Arrow columns.

A trace is one JSON object whose `traceEvents` array holds millions of small objects. Decoding it
whole into Python dicts costs several GB. Instead the array is cut into chunks of whole events
(a cut is only accepted if the chunk decodes, so a cut inside a string or a nested object is
never kept), and each chunk is decoded into Arrow columns: by the C++ reader (_json_native), on
threads beside the one that reads (and decompresses) the file, or with typed msgspec structs, in
worker processes when the file is large. Where the array ends is found by the parser (the piece
whose array closes), never guessed from brackets, so the top-level keys may come in any order.
Everything outside `traceEvents` (device properties, distributedInfo, metadata keys) is decoded as
plain JSON. `ts` and `dur` stay JSON text until they are converted, digit by digit, to integer
nanoseconds: a float64 would round epoch microseconds to multiples of 256 ns.

Values the run cannot hold are one-line errors (InputError, naming the file and the field), never
silently wrapped: an id, stream or byte count beyond int64, a memory device beyond int32, JSON
nested more than MAX_NESTING levels in args or metadata, a counter whose args are not an object of
numbers. A pid or tid beyond int64 is kept as text, as non-integer pids and tids are.

This module only turns bytes into columns; it knows nothing about links or the run format.
"""

from __future__ import annotations

import decimal
import gzip
import io
import os
import re
import threading
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Union

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from isal import igzip, isal_zlib

from ..errors import InputError
from . import _json_native
from ._malloc import set_mmap_threshold
from .raw import RAW_COUNTERS, RAW_MEMORY
from .kineto_names import (EXTERNAL_ID_ARG, EXTERNAL_ID_ARG_OLD, FLOW_PHASES, MEMORY_ARGS, MEMORY_EVENT_NAME, PYTHON_ID_ARG,
                           PYTHON_PARENT_ID_ARG, SLICE_PHASES)

CHUNK_BYTES = 16 << 20
"""Target size of one decoded chunk of the traceEvents array."""

PARALLEL_MIN_BYTES = 2 * CHUNK_BYTES
"""Plain files from this size are cut into byte ranges decoded several at a time (on threads by the
C++ reader, in worker processes by the Python decoder). Other files are streamed: their pieces are
decoded on threads with the C++ reader, else in worker processes from this size (on disk)."""

MAX_NESTING = 100
"""Deepest nesting of arrays and objects accepted in an event's args or in the trace's metadata.
Kineto writes 3 or 4 levels; the args are stored as JSON text that DuckDB and Python's json parse
again later, whose recursion limits (about 1000 levels, less deep inside a call stack) must never
be reached by a run that was written."""

_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)

_NULL = msgspec.Raw(b"null")
_ZERO = msgspec.Raw(b"0")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: Union[str, int, float, None] = None
    # ts and dur stay as their JSON text: a float64 cannot hold epoch microseconds to the
    # nanosecond (it rounds them to multiples of 256 ns); `_exact_ns` reads the digits.
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
    python_id: Union[int, None] = msgspec.field(default=None, name=PYTHON_ID_ARG)
    python_parent_id: Union[int, None] = msgspec.field(default=None, name=PYTHON_PARENT_ID_ARG)
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


@dataclass
class Decoded:
    header: dict  # every top-level key but traceEvents
    chunks: list[Chunk]


def open_bytes_stream(path: str) -> io.BufferedIOBase:
    raw = open(path, "rb")
    magic = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if magic == b"\x1f\x8b":  # (ISA-L's inflate: 3x zlib's here, for the same bytes)
        return igzip.IGzipFile(fileobj=raw)  # type: ignore[return-value]
    return raw


class _Reader:
    """Reads a (possibly gzip) file in blocks; decompression errors become InputError."""

    def __init__(self, path: str):
        self.path = path
        try:
            self.f = open_bytes_stream(path)
        except OSError as e:
            raise InputError(path, f"cannot read the file ({_os_reason(e)})") from None
        self.eof = False
        self.done = 0

    def read(self, n: int) -> bytes:
        try:
            block = self.f.read(n)
        except (EOFError, OSError, zlib.error, isal_zlib.error) as e:
            raise InputError(self.path, f"cannot decompress: {_short(e)}") from None
        if len(block) < n:
            self.eof = True
        self.done = self.f.tell() if not isinstance(self.f, gzip.GzipFile) else self.f.fileobj.tell()  # type: ignore[union-attr]
        return block

    def read_rest(self) -> bytes:
        parts = []
        while not self.eof:
            parts.append(self.read(CHUNK_BYTES))
        return b"".join(parts)

    def close(self) -> None:
        self.f.close()


class _PieceError(InputError):
    """A piece of traceEvents did not decode. Either the file is malformed there, or a cut fell
    inside an event (between objects nested in its args that look like events): the caller
    then parses the whole document, which tells the two apart."""


def _short(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _os_reason(e: OSError) -> str:
    return " ".join((e.strerror or str(e)).split()) or type(e).__name__


_ARRAY_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")
_MAX_HEADER = 256 << 20


def _events_start(head: bytes) -> int | None:
    """Offset just after the '[' of the top-level traceEvents array in the first bytes of a
    document, or None. A candidate counts only when the document up to it, closed right there,
    parses as an object holding traceEvents: so a match inside a string or a nested object is
    never taken."""
    for m in _ARRAY_KEY.finditer(head):
        try:
            doc = msgspec.json.decode(head[: m.end()] + b"]}")
        except msgspec.DecodeError:
            continue
        if isinstance(doc, dict) and "traceEvents" in doc:
            return m.end()
    return None


class _Pipeline:
    """Decodes pieces in order, with few pieces in flight: on threads with the C++ reader (it runs
    without the GIL, beside the thread that reads and decompresses the file; a piece it leaves to
    the Python decoder is decoded on its thread), else in worker processes for large files.

    Pieces are cut without knowing where traceEvents ends, so the last one (or, when other
    arrays follow it, an earlier one) holds its closing bracket: decoding finds it (`array_end`)
    and every piece after it is dropped, whatever it decoded to.
    """

    def __init__(self, path: str, pool: str | None, workers: int):
        self.path = path
        self.pool = (ThreadPoolExecutor(max_workers=workers) if pool == "threads" else
                     ProcessPoolExecutor(max_workers=workers, initializer=_worker_init) if pool == "processes" else None)
        self.max_in_flight = workers + 1
        self.pending: deque = deque()
        self.chunks: list[Chunk] = []
        self.submitted = 0

    @property
    def ended(self) -> bool:
        return bool(self.chunks) and self.chunks[-1].array_end is not None

    def submit(self, piece: bytes, last: bool = False) -> None:
        if not piece.strip():
            return
        self.submitted += 1  # pieces offered, decoded or not
        if self.ended:
            return
        if self.pool is None:
            self.chunks.append(_decode_chunk(self.path, piece, last))
            return
        self.pending.append(self.pool.submit(_decode_chunk, self.path, piece, last))
        while len(self.pending) > self.max_in_flight:
            self._collect()

    def _collect(self) -> None:
        fut = self.pending.popleft()
        if self.ended:
            fut.cancel()
            return
        self.chunks.append(fut.result())

    def finish(self) -> list[Chunk]:
        try:
            while self.pending:
                self._collect()
        finally:
            self.close()
        return self.chunks

    def close(self) -> None:
        if self.pool is not None:
            for fut in self.pending:
                fut.cancel()
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def decode_trace(path: str, progress: Callable[[int, int], None] | None = None, workers: int | None = None) -> Decoded:
    """Decode a whole trace file. Raises InputError (naming the file) on bad input.

    A large plain-JSON file is cut into byte ranges by reading a little around each cut, and each
    worker reads and decodes its own range (the bytes never pass through this process). Other
    files are streamed block by block; pieces go to the workers when the file is large. Either
    way the end of traceEvents is found by parsing (the piece whose array closes), so any top-level
    key order works; documents of another layout are parsed whole.
    """
    try:
        return _decode_trace(path, progress, workers)
    except RecursionError:  # msgspec's parser recurses once per level: ~1000 levels end it
        raise InputError(path, f"JSON nested too deeply (more than {MAX_NESTING} levels of arrays and objects)") from None
    except msgspec.DecodeError as e:  # what the parts above did not name (a number beyond any type, ...)
        raise InputError(path, f"not a valid trace ({_short(e)})") from None


def _decode_trace(path: str, progress: Callable[[int, int], None] | None, workers: int | None) -> Decoded:
    try:
        total = os.path.getsize(path)
    except OSError as e:
        raise InputError(path, f"cannot read the file ({_os_reason(e)})") from None
    n_workers = workers or min(2, os.cpu_count() or 1)
    native = _json_native.load() is not None  # built (once) here, before any worker starts, so that workers only load it
    if total >= PARALLEL_MIN_BYTES and n_workers > 1:
        plan = _plan_ranges(path, total)
        if plan is not None:
            return _decode_ranges(path, plan, n_workers, progress)
    reader = _Reader(path)
    try:
        buf = reader.read(CHUNK_BYTES)
        start = _events_start(buf) if buf.lstrip()[:1] == b"{" else None
        while start is None and buf.lstrip()[:1] == b"{" and not reader.eof and len(buf) < _MAX_HEADER:
            buf += reader.read(CHUNK_BYTES)
            start = _events_start(buf)
        if start is None:
            return _decode_whole(path, buf + reader.read_rest())
        prefix, rest = buf[:start], buf[start:]
        del buf
        pool = None if n_workers < 2 else "threads" if native else "processes" if total >= PARALLEL_MIN_BYTES else None
        pipe = _Pipeline(path, pool, n_workers)
        try:
            while not reader.eof:  # `rest`: what is not yet in a piece
                block = reader.read(CHUNK_BYTES)
                if reader.eof:
                    rest += block
                    break
                # a cut near the block's end: each piece is about one block, copied once
                cut = _find_cut(block, max(0, len(block) - _WINDOW), len(block)) or _find_cut(block, 0, len(block))
                if cut is None:  # no clean cut in this block: carry it on to the next
                    rest += block
                    continue
                pipe.submit(b"".join((rest, memoryview(block)[: cut[0]])))
                rest = block[cut[1] :]
                del block
                if progress:
                    progress(reader.done, total)
            pipe.submit(rest, last=True)
            chunks = pipe.finish()
        except _PieceError:
            pipe.close()
            reader.close()
            return _decode_whole(path, _read_all(path))
        except BaseException:
            pipe.close()
            raise
        if not pipe.ended:
            raise InputError(path, "not valid JSON (the traceEvents array is not closed)")
        if len(chunks) < pipe.submitted:  # closed before the last piece (a large array follows it)
            reader.close()
            return _decode_whole(path, _read_all(path))
        header = _header(path, prefix, rest[chunks[-1].array_end + 1 :])
        del rest
    finally:
        reader.close()
    if progress:
        progress(total, total)
    return Decoded(header, chunks)


def _header(path: str, prefix: bytes, after: bytes) -> dict:
    """The top-level keys other than traceEvents: the document with an empty traceEvents array."""
    try:
        header = msgspec.json.decode(prefix + b"]" + after)
    except msgspec.DecodeError as e:
        raise InputError(path, f"not valid JSON after traceEvents ({_short(e)})") from None
    header.pop("traceEvents", None)
    check_nesting(path, header, "the trace's top-level keys")
    return header


@dataclass
class _Plan:
    prefix: bytes  # the document up to and including the '[' of traceEvents
    ranges: list[tuple[int, int]]  # byte ranges of whole events inside traceEvents


_WINDOW = 1 << 20
_LOOKBACK = 65536


def _plan_ranges(path: str, total: int) -> _Plan | None:
    """Byte ranges of a plain (not gzip) trace, found by reading windows around each cut; None when
    the file is gzip or its layout is not the usual one (the caller then streams it). The last
    range runs to the end of the file: where traceEvents closes is found by decoding."""
    with open(path, "rb") as f:
        head = f.read(CHUNK_BYTES)
        if head[:2] == b"\x1f\x8b" or head.lstrip()[:1] != b"{":
            return None
        start = _events_start(head)
        if start is None:
            return None
        ranges, a = [], start
        while total - a > CHUNK_BYTES * 3 // 2:
            base = a + max(CHUNK_BYTES - _LOOKBACK, 1)
            f.seek(base)
            window = f.read(_LOOKBACK + _WINDOW)
            cut = _find_cut(window, min(_LOOKBACK, CHUNK_BYTES // 2), len(window))
            if cut is None:  # an event larger than the window: the rest is one range
                break
            ranges.append((a, base + cut[0]))
            a = base + cut[1]
        ranges.append((a, total))
    return _Plan(head[:start], ranges)


WORKER_MMAP_THRESHOLD = 64 << 20


def _worker_init() -> None:
    """Workers decode one piece after another: let them reuse their heap (no mmap per large block).

    A parent that lowered glibc's mmap threshold for itself (_malloc.set_mmap_threshold)
    passes it on through fork; in a worker it only costs page faults.
    """
    set_mmap_threshold(WORKER_MMAP_THRESHOLD)


def _read_range(path: str, a: int, b: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(a)
        return f.read(b - a)


def _decode_range(path: str, a: int, b: int, last: bool) -> Chunk:
    return _decode_chunk(path, _read_range(path, a, b), last)


_thread_buffers = threading.local()


def _read_range_into(path: str, a: int, b: int) -> memoryview:
    """The bytes a..b of the file, in this thread's buffer: one buffer per thread, reused range
    after range, so that its memory is faulted in once (a fresh 16 MB per range cost 4,096 page
    faults each time, a sixth of the decode's system time)."""
    buf = getattr(_thread_buffers, "buf", None)
    if buf is None or len(buf) < b - a:
        buf = _thread_buffers.buf = bytearray(b - a)
    view = memoryview(buf)[: b - a]
    with open(path, "rb") as f:
        f.seek(a)
        return view[: f.readinto(view)]


def _native_range(path: str, a: int, b: int) -> Chunk | _PieceError | None:
    """A range read by the C++ reader, on a thread (it runs without the GIL); None when it leaves
    the range to the Python decoder. A bad range's error is returned, to be raised in order. The
    chunk holds nothing of the thread's buffer: the next range overwrites it."""
    try:
        return _native_piece(path, _read_range_into(path, a, b))
    except InputError as e:
        return _PieceError(e.path, e.problem)


def _last_needed(outcome) -> bool:
    """Whether a range's outcome makes the ranges after it unneeded: traceEvents closed in it, or it
    is an error (the whole document is then parsed)."""
    return isinstance(outcome, _PieceError) or (isinstance(outcome, Chunk) and outcome.array_end is not None)


def _decode_ranges(path: str, plan: _Plan, workers: int, progress: Callable[[int, int], None] | None) -> Decoded:
    """Decode the planned ranges, `workers` at a time.

    With the C++ reader, each range is read on a thread: no worker process to start, and no copy
    of its columns from one process to another. The ranges it leaves to the Python decoder (all
    of them, without it) are then decoded in worker processes, started once the threads are done
    (a fork while other threads run could copy a lock that one of them holds). Outcomes are taken
    in order: the range where traceEvents closes is the last, and an error counts only before it.
    """
    ranges, total = plan.ranges, plan.ranges[-1][1]
    outcomes: list = [None] * len(ranges)  # Chunk, _PieceError, or None (not decoded yet)
    done = ranges[0][0]  # bytes decoded, for `progress` (the header's first)

    def decoded(i: int) -> None:
        nonlocal done
        done += ranges[i][1] - ranges[i][0]
        if progress:
            progress(done, total)

    def take(indices: list[int], futures: list) -> None:  # in order, until the rest is not needed
        try:
            for i, fut in zip(indices, futures):
                try:
                    outcomes[i] = fut.result()
                except _PieceError as e:
                    outcomes[i] = e
                if outcomes[i] is not None:
                    decoded(i)
                if _last_needed(outcomes[i]):
                    break
        finally:
            for fut in futures:
                fut.cancel()

    if _json_native.load() is not None:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_native_range, path, a, b) for a, b in ranges]
            _import_meanwhile()
            take(list(range(len(ranges))), futures)
    upto = next((i + 1 for i, o in enumerate(outcomes) if _last_needed(o)), len(ranges))
    left = [i for i in range(upto) if outcomes[i] is None]
    if left:
        with ProcessPoolExecutor(max_workers=workers, initializer=_worker_init) as pool:
            take(left, [pool.submit(_decode_range, path, *ranges[i], ranges[i][1] == total) for i in left])
    chunks: list[Chunk] = []
    end = None
    failed = False
    for (a, _), outcome in zip(ranges, outcomes):
        if isinstance(outcome, _PieceError):
            failed = True
            break
        chunks.append(outcome)
        if outcome.array_end is not None:  # traceEvents closed here: what follows is not events
            end = a + outcome.array_end
            break
    if failed:
        del chunks, outcomes
        return _decode_whole(path, _read_all(path))
    if end is None:
        raise InputError(path, "not valid JSON (the traceEvents array is not closed)")
    with open(path, "rb") as f:
        f.seek(end + 1)
        after = f.read()
    header = _header(path, plan.prefix, after)
    if progress:
        progress(total, total)
    return Decoded(header, chunks)


def _import_meanwhile() -> None:
    """Import pandas while the reader threads read. pyarrow imports it at the first conversion
    between numpy and Arrow, which the build starts with; that import takes 0.3 s, here on the
    thread that would otherwise only wait, instead of alone between the decode and the build."""
    import pandas  # noqa: F401


def _read_all(path: str) -> bytes:
    reader = _Reader(path)
    try:
        return reader.read_rest()
    finally:
        reader.close()


def _find_cut(data: bytes, lo: int, hi: int) -> tuple[int, int] | None:
    """The first cut between two whole events in data[lo:hi]: (end of the piece, start of the next)."""
    for m in _CUT.finditer(data, lo, min(len(data), hi)):
        b = m.start() + 1
        if _looks_like_event_start(data, m.end() - 1) and _balanced(data, 0, b):
            return b, m.end() - 1
    return None


def _looks_like_event_start(data: bytes, pos: int) -> bool:
    head = data[pos : pos + 16]
    return head.startswith(b'{"') or head[:1] == b"{" and head[1:].lstrip()[:1] == b'"'


def _balanced(data: bytes, a: int, b: int) -> bool:
    """The last event before a cut must decode as a trace-event object on its own."""
    lo = max(a, b - 65536)
    start = data.rfind(b"{", lo, b)
    while start != -1:
        try:
            obj = msgspec.json.decode(data[start:b])
        except msgspec.DecodeError:
            start = data.rfind(b"{", lo, start)
            continue
        return isinstance(obj, dict) and "ph" in obj  # every trace event has a phase; objects in args rarely do
    return False


_TOP_DECODER = msgspec.json.Decoder(Union[dict[str, msgspec.Raw], list[msgspec.Raw]])


def _decode_whole(path: str, data: bytes) -> Decoded:
    """The whole document in memory: its top level parsed with every value left as JSON text."""
    try:
        doc = _TOP_DECODER.decode(data)
    except msgspec.ValidationError:
        raise InputError(path, "not a trace: the top level is not a JSON object") from None
    except msgspec.DecodeError as e:
        raise InputError(path, f"not valid JSON ({_short(e)})") from None
    if isinstance(doc, list):  # the bare-array form of the Chrome format
        return Decoded({}, [_decode_array(path, data)])
    if "traceEvents" not in doc:
        raise InputError(path, "not a trace: no 'traceEvents' key")
    events = doc.pop("traceEvents")
    if memoryview(events)[:1].tobytes() != b"[":
        raise InputError(path, "'traceEvents' is not a list")
    header = {k: msgspec.json.decode(v) for k, v in doc.items()}
    check_nesting(path, header, "the trace's top-level keys")
    return Decoded(header, [_decode_array(path, events)])


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


def _native_piece(path: str, piece: bytes | memoryview) -> Chunk | None:
    """A piece as `_decode_piece` decodes it, read by the C++ reader; None when it is not available
    or leaves the piece to the Python decoder."""
    fast = _json_native.read(piece, MAX_NESTING, bare=True, may_end=True)
    if fast is None:
        return None
    chunk = _with_native(path, piece, fast)
    chunk.array_end = fast.array_end
    return chunk


def _decode_chunk(path: str, piece: bytes, last: bool = False) -> Chunk:
    try:
        return _decode_piece(path, piece, last)
    except InputError as e:
        raise _PieceError(e.path, e.problem) from None


def _decode_piece(path: str, piece: bytes, last: bool) -> Chunk:
    """Events of a piece of the traceEvents array (whole events separated by commas).

    The piece may run past the end of the array (the last piece holds the rest of the document,
    and when other arrays follow traceEvents an earlier one may too): the parser stops at the
    array's closing bracket and reports what trails it, and the events are the array up to that
    bracket (`Chunk.array_end`). The C++ reader reads a piece as it is, without copying it into an
    array first, and stops at the bracket itself. For the Python decoder, the `last` piece's
    bracket is found first by a fast validating scan, so that its events are decoded once.
    """
    chunk = _native_piece(path, piece)
    if chunk is not None:
        return chunk
    data = b"[" + piece + b"]"
    end = None
    if last:
        try:
            _RAW_DECODER.decode(data)
        except msgspec.DecodeError as e:
            end = _closing_bracket(data, e, _RAW_DECODER)
            if end is None:
                raise InputError(path, f"not valid JSON in traceEvents ({_short(e)})") from None
    if end is not None:
        chunk = _decode_array(path, memoryview(data)[: end + 1])
    else:
        try:
            chunk = _decode_array(path, data)
        except _Trailing as t:
            chunk, end = _columns(path, t.events), t.end
    if end is not None:
        chunk.array_end = end - 1  # in the piece, without the '[' put before it
    return chunk


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
    memory, counters, metadata, unsupported = [], [], [], {}
    if fast.others:
        view = memoryview(array)
        _, _, memory, counters, metadata, unsupported = _sorted_out(
            path, _decode_events(path, b"[" + b",".join(view[a:b] for a, b in fast.others) + b"]"))
    return Chunk(fast.events, fast.flows,
                 _memory_table(path, memory) if memory else pa.Table.from_batches([], schema=RAW_MEMORY),
                 _counter_table(path, counters) if counters else pa.Table.from_batches([], schema=RAW_COUNTERS),
                 metadata, unsupported)


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


_NS_EXACT = pa.decimal128(38, 3)
"""Microseconds with 3 decimals: the 128-bit integer behind it is the value in ns."""
_NS_DECIMAL = pa.decimal128(38, 12)
"""What finer ts/dur are read into: up to 26 integer and 12 fraction digits of a microsecond."""
_NUMBER_START = np.zeros(256, dtype=bool)
_NUMBER_START[list(b"-0123456789")] = True
_INT64_MAX = 2**63 - 1


def _ns(path: str, values: list, what: str) -> np.ndarray:
    """Microseconds as JSON text (`msgspec.Raw`) → int64 ns, exact: the decimal digits are
    converted, never a float; below a nanosecond the value is rounded half to even; null is 0.

    The texts are joined into one buffer (by msgspec, in C) and read by Arrow's decimal parser;
    odd ones (numeric strings, more than 12 decimals, values that do not fit) go one by one.
    """
    n = len(values)
    if not n:
        return np.zeros(0, dtype=np.int64)
    text = msgspec.json.encode(values)  # b"[v0,v1,...]": numbers hold no commas
    inner = np.frombuffer(text, dtype=np.uint8)[1:-1]
    is_comma = inner == ord(",")
    commas = np.flatnonzero(is_comma)
    if len(commas) != n - 1:  # a string value with a comma in it
        return _ns_each(path, values, what)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = commas + 1
    first = inner[starts]
    is_null = first == ord("n")
    if not (_NUMBER_START[first] | is_null).all():  # strings, booleans, objects: one by one
        return _ns_each(path, values, what)
    ends = np.empty(n, dtype=np.int64)
    ends[:-1] = commas
    ends[-1] = len(inner)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=offsets[1:])
    digits = inner[~is_comma]
    nulls = int(np.count_nonzero(is_null))
    bitmap = pa.py_buffer(np.packbits(~is_null, bitorder="little")) if nulls else None
    texts = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(digits), bitmap, nulls)
    try:  # the usual case, at most 3 decimals (whole ns): read straight to ns
        ns = pc.cast(texts, _NS_EXACT)
    except pa.ArrowInvalid:
        try:  # below a nanosecond: round half to even
            ns = pc.round(pc.cast(texts, _NS_DECIMAL), ndigits=3, round_mode="half_to_even").cast(_NS_EXACT)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _ns_each(path, values, what)
    # a decimal128 with 3 decimals stores µs * 1000 = ns as a 128-bit little-endian integer
    words = np.frombuffer(ns.buffers()[1], dtype=np.int64, count=2 * n, offset=16 * ns.offset)
    low, high = words[0::2], words[1::2]
    fits = high == (low >> 63)
    if nulls:
        fits |= is_null
    if not fits.all():
        shown = bytes(values[int(np.flatnonzero(~fits)[0])]).decode(errors="replace")[:40]
        raise InputError(path, f"wrong value: {what} {shown} does not fit in int64 nanoseconds")
    out = low.copy()
    if nulls:
        out[is_null] = 0
    return out


def _ns_each(path: str, values: list, what: str) -> np.ndarray:
    return np.array([_ns_of_text(path, bytes(v), what) for v in values], dtype=np.int64)


def _ns_of_text(path: str, token: bytes, what: str) -> int:
    """One JSON value (number, numeric string or null) in microseconds → exact int ns."""
    if token == b"null":
        return 0
    shown = token.decode(errors="replace")[:40]
    text = msgspec.json.decode(token) if token[:1] == b'"' else token.decode() if _NUMBER_START[token[0]] else None
    if not isinstance(text, str):
        raise InputError(path, f"wrong value type: {what} is {shown}, not a number")
    try:
        us = decimal.Decimal(text.strip())
    except decimal.InvalidOperation:
        raise InputError(path, f"wrong value type: {what} is {shown}, not a number") from None
    if not us.is_finite():
        raise InputError(path, f"wrong value: {what} is {shown}")
    with decimal.localcontext() as ctx:
        ctx.prec = max(60, len(text) + 10)
        ctx.Emax = 10**6
        ns = int((us * 1000).to_integral_value(rounding=decimal.ROUND_HALF_EVEN)) if abs(us.adjusted()) < 10**4 else 2**64
    if not -_INT64_MAX - 1 <= ns <= _INT64_MAX:
        raise InputError(path, f"wrong value: {what} {shown} does not fit in int64 nanoseconds")
    return ns


def _fits(v: int, bounds: tuple[int, int] = _INT64) -> bool:
    return bounds[0] <= v <= bounds[1]


def _id_columns(values: list) -> tuple[pa.Array, pa.Array]:
    """pid/tid → (int64 with nulls for non-integers, original text for non-integers). An integer
    beyond int64 is kept as its text, like a named thread: nothing is lost or wrapped."""
    try:  # the common case: all integers
        return pa.array(values, pa.int64()), pa.nulls(len(values), pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    ints = [v if type(v) is int and _fits(v) else None for v in values]
    texts = [None if v is None or type(v) is int and _fits(v) else str(v) for v in values]
    return pa.array(ints, pa.int64()), pa.array(texts, pa.string())


def _int_column(path: str, values: list, what: str, bounds: tuple[int, int] = _INT64,
                typ: pa.DataType = pa.int64()) -> pa.Array:
    """Integers (or None) that must fit the column: one beyond it is an InputError naming the field."""
    try:
        return pa.array(values, typ)
    except (pa.ArrowInvalid, OverflowError):
        bad = str(next(v for v in values if v is not None and not _fits(v, bounds)))
        shown = bad if len(bad) <= 40 else bad[:37] + "..."
        raise InputError(path, f"wrong value: {what} {shown} does not fit in a {64 if bounds == _INT64 else 32}-bit integer") from None


def _opt_int(path: str, values: list, what: str) -> pa.Array:
    """Integers, numeric strings or floats → int64; what is not a number → null; a number beyond
    int64 → InputError."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    out = []
    for v in values:
        if v is None or type(v) is int:
            out.append(v)
        else:
            try:
                out.append(int(v))
            except (TypeError, ValueError, OverflowError):
                out.append(None)
    return _int_column(path, out, what)


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
    slices, flows, memory, counters, metadata, unsupported = _sorted_out(path, evs)
    return Chunk(
        events=_slice_table(path, slices),
        flows=_flow_table(path, flows),
        memory=_memory_table(path, memory),
        counters=_counter_table(path, counters),
        metadata=metadata,
        unsupported=unsupported,
    )


def _sorted_out(path: str, evs: list[_Event]) -> tuple[list, list, list, list, list, dict]:
    """The events by table: (slices, flows, memory, counters, metadata as dicts, unsupported phases' counts)."""
    slices, flows, memory, counters, metadata = [], [], [], [], []
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
            meta = msgspec.structs.asdict(e) | {"ts": msgspec.json.decode(e.ts), "dur": msgspec.json.decode(e.dur),
                                                "args": msgspec.json.decode(e.args)}
            check_nesting(path, meta["args"], f"the args of metadata event {e.name!r}")
            metadata.append(meta)
        else:
            unsupported[ph] = unsupported.get(ph, 0) + 1
    return slices, flows, memory, counters, metadata, unsupported


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
            "python_id": _sparse_int(path, [None if a is None else a.python_id for a in args], "args 'Python id'"),
            "python_parent_id": _sparse_int(path, [None if a is None else a.python_parent_id for a in args],
                                            "args 'Python parent id'"),
            "args": _args_text(path, raws),
        }
    )


def _sparse_int(path: str, values: list, what: str) -> pa.Array:
    """int64 column that is often entirely null (no buffer allocated then)."""
    if not any(v is not None for v in values):
        return pa.nulls(len(values), pa.int64())
    return _int_column(path, values, what)


def _flow_table(path: str, evs: list[_Event]) -> pa.Table:
    pid, _ = _id_columns([e.pid for e in evs])
    tid, _ = _id_columns([e.tid for e in evs])
    return pa.table(
        {
            "flow_id": _opt_int(path, [e.id for e in evs], "flow 'id'"),
            "category": pa.array([e.cat or "" for e in evs], pa.string()),
            "name": _names([e.name for e in evs]),
            "phase": pa.array([e.ph for e in evs], pa.string()),
            "ts_ns": _ns(path, [e.ts for e in evs], "ts"),
            "pid": pid,
            "tid": tid,
            "binding_point": pa.array([e.bp for e in evs], pa.string()),
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
                rows["pid"].append(e.pid if type(e.pid) is int and _fits(e.pid) else None)
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
