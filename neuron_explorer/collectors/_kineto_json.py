"""Decoding a Kineto / Chrome JSON trace into Arrow columns, in bounded memory: the entry
(`decode_trace`) and how a trace is cut into pieces and decoded several at a time.

A trace is one JSON object whose `traceEvents` array holds millions of small objects. Decoding it
whole into Python dicts costs several GB. Instead the array is cut into pieces of whole events
(a cut is only accepted if the event before it decodes, so a cut inside a string or a nested
object is never kept: _json_read finds them), and each piece is decoded into the raw tables'
columns (_json_tables): by the C++ reader (_json_native), on threads beside the one that reads
(and decompresses) the file, or with typed msgspec structs, in worker processes when the file is
large. A large plain file is cut into byte ranges that each thread or worker reads itself
(`_plan_ranges`, `_decode_ranges`); other files are streamed block by block (`_Pipeline`). Where
the array ends is found by the parser (the piece whose array closes), never guessed from
brackets, so the top-level keys may come in any order; a document of another layout, or a piece
that does not decode, is parsed whole (`_decode_whole`). Everything outside `traceEvents` (device
properties, distributedInfo, metadata keys) is decoded as plain JSON (`_header`). With `pack_args`
(what the importer asks for), each piece's args are compressed where it is decoded, on its thread
or worker (_packed_text: a trace's args are most of its bytes).

Values the run cannot hold are one-line errors (InputError, naming the file and the field), never
silently wrapped (_json_numbers, _json_tables).

The tuning lives here (CHUNK_BYTES, PARALLEL_MIN_BYTES, the pools): the tests shrink it to cut
small traces into many pieces.

Must not: know about links or the run format (chrome_trace and build do).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Union

import msgspec

from .. import no_pandas
from ..errors import InputError
from . import _json_native
from ._forked import keep_inherited
from ._json_read import _events_start, _find_cut, _os_reason, _read_all, _read_range, _read_range_into, _Reader, _short
from ._json_tables import (
    _RAW_DECODER,
    MAX_NESTING,
    Chunk,
    _closing_bracket,
    _columns,
    _decode_array,
    _Trailing,
    _with_native,
    check_nesting,
)
from ._json_tables import pack_args as _pack_args  # (decode_trace's `pack_args` is whether to)
from ._malloc import set_mmap_threshold

CHUNK_BYTES = 16 << 20
"""Target size of one decoded chunk of the traceEvents array."""

PARALLEL_MIN_BYTES = 2 * CHUNK_BYTES
"""Plain files from this size are cut into byte ranges decoded several at a time (on threads by the
C++ reader, in worker processes by the Python decoder). Other files are streamed: their pieces are
decoded on threads with the C++ reader, else in worker processes from this size (on disk)."""

_MAX_HEADER = 256 << 20
"""How far into a streamed file the traceEvents array must start."""
_WINDOW = 1 << 20
"""Where a cut is looked for: the last this many bytes of a streamed block, or after the lookback in
a byte range's window."""
_LOOKBACK = 65536
_FIRST_LOOK = 16384
"""How much of a byte range's window is read first: a cut is almost always a few hundred bytes in
(the next event's start), and reading the whole window for each of a 430 MB trace's 26 cuts (1 MiB
each, fresh pages every time) took 25-50 ms before the decode could begin; the rest of the window
is read only when no cut is in this much."""


@dataclass
class Decoded:
    header: dict  # every top-level key but traceEvents
    chunks: list[Chunk]


class _PieceError(InputError):
    """A piece of traceEvents did not decode. Either the file is malformed there, or a cut fell
    inside an event (between objects nested in its args that look like events): the caller
    then parses the whole document, which tells the two apart."""


class _Pipeline:
    """Decodes pieces in order, with few pieces in flight: on threads with the C++ reader (it runs
    without the GIL, beside the thread that reads and decompresses the file; a piece it leaves to
    the Python decoder is decoded on its thread), else in worker processes for large files.

    Pieces are cut without knowing where traceEvents ends, so the last one (or, when other
    arrays follow it, an earlier one) holds its closing bracket: decoding finds it (`array_end`)
    and every piece after it is dropped, whatever it decoded to.
    """

    def __init__(self, path: str, pool: str | None, workers: int, pack: bool = False):
        self.path = path
        self.pack = pack
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
            self.chunks.append(_decode_chunk(self.path, piece, last, self.pack))
            return
        self.pending.append(self.pool.submit(_decode_chunk, self.path, piece, last, self.pack))
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


def decode_trace(path: str, progress: Callable[[int, int], None] | None = None, workers: int | None = None,
                 pack_args: bool = False) -> Decoded:
    """Decode a whole trace file. Raises InputError (naming the file) on bad input. With
    `pack_args`, each chunk's args are compressed where the chunk is decoded (`Chunk.packed`).

    A large plain-JSON file is cut into byte ranges by reading a little around each cut, and each
    worker reads and decodes its own range (the bytes never pass through this process). Other
    files are streamed block by block; pieces go to the workers when the file is large. Either
    way the end of traceEvents is found by parsing (the piece whose array closes), so any top-level
    key order works; documents of another layout are parsed whole.
    """
    try:
        decoded = _decode_trace(path, progress, workers, pack_args)
        if pack_args:  # (a document parsed whole, or a piece decoded here)
            decoded.chunks = [c.packed() for c in decoded.chunks]
        return decoded
    except RecursionError:  # msgspec's parser recurses once per level: ~1000 levels end it
        raise InputError(path, f"JSON nested too deeply (more than {MAX_NESTING} levels of arrays and objects)") from None
    except msgspec.DecodeError as e:  # what the parts above did not name (a number beyond any type, ...)
        raise InputError(path, f"not a valid trace ({_short(e)})") from None


def _decode_trace(path: str, progress: Callable[[int, int], None] | None, workers: int | None, pack: bool) -> Decoded:
    try:
        total = os.path.getsize(path)
    except OSError as e:
        raise InputError(path, f"cannot read the file ({_os_reason(e)})") from None
    n_workers = workers or min(2, os.cpu_count() or 1)
    native = _json_native.load() is not None  # built (once) here, before any worker starts, so that workers only load it
    if total >= PARALLEL_MIN_BYTES and n_workers > 1:
        plan = _plan_ranges(path, total)
        if plan is not None:
            return _decode_ranges(path, plan, n_workers, progress, pack)
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
        pipe = _Pipeline(path, pool, n_workers, pack)
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
    if b'"traceEvents"' in after and "traceEvents" in _AFTER_DECODER.decode(b'{"":0' + after.lstrip()):
        raise _twice(path)
    check_nesting(path, header, "the trace's top-level keys")
    return header


_AFTER_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _twice(path: str) -> InputError:
    """A second top-level traceEvents: JSON readers differ on which one counts (Python's json and
    browsers take the last, a streaming reader the first), so the trace is refused, not guessed."""
    return InputError(path, "'traceEvents' appears twice at the top level (readers disagree on which counts): keep one")


@dataclass
class _Plan:
    prefix: bytes  # the document up to and including the '[' of traceEvents
    ranges: list[tuple[int, int]]  # byte ranges of whole events inside traceEvents


def _plan_ranges(path: str, total: int) -> _Plan | None:
    """Byte ranges of a plain (not gzip) trace, found by reading windows around each cut; None when
    the file is gzip or its layout is not the usual one (the caller then streams it). The last
    range runs to the end of the file: where traceEvents closes is found by decoding."""
    with open(path, "rb") as f:
        first = min(_LOOKBACK, CHUNK_BYTES)  # (the rest of the first chunk only when traceEvents starts later)
        head = f.read(first)
        if head[:2] == b"\x1f\x8b":
            return None
        start = _events_start(head) if head.lstrip()[:1] == b"{" else None
        if start is None and len(head) == first < CHUNK_BYTES:
            head += f.read(CHUNK_BYTES - first)
            start = _events_start(head) if head.lstrip()[:1] == b"{" else None
        if start is None:
            return None
        ranges, a = [], start
        while total - a > CHUNK_BYTES * 3 // 2:
            base = a + max(CHUNK_BYTES - _LOOKBACK, 1)
            f.seek(base)
            lo = min(_LOOKBACK, CHUNK_BYTES // 2)
            window = f.read(_LOOKBACK + _FIRST_LOOK)
            cut = _find_cut(window, lo, len(window))
            if cut is None and len(window) == _LOOKBACK + _FIRST_LOOK < _LOOKBACK + _WINDOW:  # (a cut at its end may need what follows)
                window += f.read(_WINDOW - _FIRST_LOOK)
                cut = _find_cut(window, lo, len(window))
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
    passes it on through fork; in a worker it only costs page faults. What the worker inherited is
    never collected there (_forked.keep_inherited).
    """
    keep_inherited()
    set_mmap_threshold(WORKER_MMAP_THRESHOLD)


def _decode_range(path: str, a: int, b: int, last: bool, pack: bool = False) -> Chunk:
    return _decode_chunk(path, _read_range(path, a, b), last, pack)


def _native_range(path: str, a: int, b: int, pack: bool = False) -> Chunk | _PieceError | None:
    """A range read by the C++ reader, on a thread (it runs without the GIL); None when it leaves
    the range to the Python decoder. A bad range's error is returned, to be raised in order. The
    chunk holds nothing of the thread's buffer: the next range overwrites it."""
    try:
        chunk = _native_piece(path, _read_range_into(path, a, b), pack)
    except InputError as e:
        return _PieceError(e.path, e.problem)
    return chunk.packed() if pack and chunk is not None else chunk


def _last_needed(outcome) -> bool:
    """Whether a range's outcome makes the ranges after it unneeded: traceEvents closed in it, or it
    is an error (the whole document is then parsed)."""
    return isinstance(outcome, _PieceError) or (isinstance(outcome, Chunk) and outcome.array_end is not None)


def _decode_ranges(path: str, plan: _Plan, workers: int, progress: Callable[[int, int], None] | None, pack: bool = False) -> Decoded:
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
            futures = [pool.submit(_native_range, path, a, b, pack) for a, b in ranges]
            _import_meanwhile()
            take(list(range(len(ranges))), futures)
    upto = next((i + 1 for i, o in enumerate(outcomes) if _last_needed(o)), len(ranges))
    left = [i for i in range(upto) if outcomes[i] is None]
    if left:
        with ProcessPoolExecutor(max_workers=workers, initializer=_worker_init) as pool:
            take(left, [pool.submit(_decode_range, path, *ranges[i], ranges[i][1] == total, pack) for i in left])
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
    thread that would otherwise only wait, instead of alone between the decode and the build. Not
    where the import runs without pandas (a batch import: no_pandas.without_pandas)."""
    if no_pandas.hidden():
        return
    import pandas  # noqa: F401


_TOP_DECODER = msgspec.json.Decoder(Union[dict[str, msgspec.Raw], list[msgspec.Raw]])


def _top_keys(data: bytes) -> list[str]:
    """The top-level keys of a JSON object in document order, repeats kept (a rare check: only
    when a key's text occurs twice)."""
    import json

    try:
        top = json.loads(data, object_pairs_hook=lambda items: [k for k, _ in items])
    except (ValueError, TypeError, RecursionError):
        return []
    return top if isinstance(top, list) and all(isinstance(k, str) for k in top) else []


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
    if data.count(b'"traceEvents"') > 1 and _top_keys(data).count("traceEvents") > 1:
        raise _twice(path)
    events = doc.pop("traceEvents")
    if memoryview(events)[:1].tobytes() != b"[":
        raise InputError(path, "'traceEvents' is not a list")
    header = {k: msgspec.json.decode(v) for k, v in doc.items()}
    check_nesting(path, header, "the trace's top-level keys")
    return Decoded(header, [_decode_array(path, events)])


def _native_piece(path: str, piece: bytes | memoryview, pack: bool = False) -> Chunk | None:
    """A piece as `_decode_piece` decodes it, read by the C++ reader; None when it is not available
    or leaves the piece to the Python decoder. With `pack`, its args are packed by the reader."""
    fast = _json_native.read(piece, MAX_NESTING, bare=True, may_end=True, pack_args=_pack_args if pack else None)
    if fast is None:
        return None
    chunk = _with_native(path, piece, fast)
    chunk.array_end = fast.array_end
    return chunk


def _decode_chunk(path: str, piece: bytes, last: bool = False, pack: bool = False) -> Chunk:
    try:
        chunk = _decode_piece(path, piece, last, pack)
    except InputError as e:
        raise _PieceError(e.path, e.problem) from None
    return chunk.packed() if pack else chunk


def _decode_piece(path: str, piece: bytes, last: bool, pack: bool = False) -> Chunk:
    """Events of a piece of the traceEvents array (whole events separated by commas).

    The piece may run past the end of the array (the last piece holds the rest of the document,
    and when other arrays follow traceEvents an earlier one may too): the parser stops at the
    array's closing bracket and reports what trails it, and the events are the array up to that
    bracket (`Chunk.array_end`). The C++ reader reads a piece as it is, without copying it into an
    array first, and stops at the bracket itself. For the Python decoder, the `last` piece's
    bracket is found first by a fast validating scan, so that its events are decoded once.
    """
    chunk = _native_piece(path, piece, pack)
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
