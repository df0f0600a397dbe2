"""Reading a trace's bytes: opening it (gzip or plain, ISA-L's inflate), reading it in blocks or
by byte range (one reused buffer per thread), and finding where the traceEvents array starts and
where a cut between two whole events may fall. Nothing here decodes an event.

Must not: decode events or know the tables (_json_tables does), plan the pieces (_kineto_json does).
"""

from __future__ import annotations

import gzip
import io
import re
import threading
import zlib

import msgspec
from isal import igzip, isal_zlib

from ..errors import InputError

BLOCK_BYTES = 16 << 20
"""What `_Reader.read_rest` reads at a time."""


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
            parts.append(self.read(BLOCK_BYTES))
        return b"".join(parts)

    def close(self) -> None:
        self.f.close()


def _short(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _os_reason(e: OSError) -> str:
    return " ".join((e.strerror or str(e)).split()) or type(e).__name__


_ARRAY_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")


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


def _read_range(path: str, a: int, b: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(a)
        return f.read(b - a)


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
