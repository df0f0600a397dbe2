"""The importer's C++ library, loaded with ctypes: the reader of traceEvents (native/kineto_json.cpp),
the build's walks over a rank's forest of events (native/forest.cpp, used by _forest.py) and the
rows of the packed args read from their blocks (native/packed_text.cpp, used by _packed_text.py and passes.py).

The reader reads slices and flow endpoints straight into columns, about ten times faster than
decoding them into Python objects; everything else is handed back as byte ranges for the Python
decoder, and a piece with anything it does not read exactly as the Python decoder would is read by
the Python decoder instead (`read` returns None). Results are equal either way
(tests/test_import_native.py); so are the forest walks' (tests/test_forest.py).

The sources ship with the package and are compiled on first use with the system's C++ compiler
(`$CXX`, else `c++`; no Python headers, no torch) into the native build folder
(`$NEURON_EXPLORER_NATIVE_DIR`, default `~/.cache/neuron-explorer/native/`), under a name that
changes with the source. No compiler, or `NEURON_EXPLORER_NATIVE=0`: the Python decoder reads
everything, more slowly (without a compiler, one line on stderr says so). A failed build leaves
`build-failed.txt` beside it and is not retried until that file is deleted.

Must not: decide what goes in the tables (_json_tables does; this mirrors it).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..native_build import NativeLibrary

SOURCES = tuple(Path(__file__).parent / "native" / f for f in ("kineto_json.cpp", "forest.cpp", "packed_text.cpp"))
_TEXTS = ("s_cat", "s_name", "s_pid_text", "s_tid_text", "s_args", "f_cat", "f_name", "f_phase", "f_bp")
_CODED = ("s_cat", "s_name", "f_cat", "f_name", "f_phase", "f_bp")
"""Text the reader codes: its text fields hold the distinct values, and the codes follow the others, in this order."""
_INTS = ("s_ts", "s_dur", "s_pid", "s_tid", "s_corr", "s_ext", "s_stream", "s_pyid", "s_pypid", "f_id", "f_ts", "f_pid", "f_tid")
_UNREAD = ("s_pyid", "s_pypid")
"""Fields the reader checks (a 'Python id' it cannot read exactly sends the piece to the Python
decoder) but the run does not keep (raw.RAW_EVENTS)."""


def _declare(lib: ctypes.CDLL) -> None:
    lib.nxj_read.restype = ctypes.c_void_p
    lib.nxj_read.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32]
    lib.nxj_status.restype = ctypes.c_int32
    lib.nxj_status.argtypes = [ctypes.c_void_p]
    lib.nxj_end.restype = ctypes.c_int64
    lib.nxj_end.argtypes = [ctypes.c_void_p]
    lib.nxj_field.restype = ctypes.c_void_p
    lib.nxj_field.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64)]
    lib.nxj_free.restype = None
    lib.nxj_free.argtypes = [ctypes.c_void_p]
    lib.nxj_take.restype = ctypes.c_void_p
    lib.nxj_take.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64)]
    lib.nxj_release.restype = None
    lib.nxj_release.argtypes = [ctypes.c_void_p]
    i64, i32, ptr = ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p
    for name, restype, args in (("nxf_nearest_marked", i32, [ptr, ptr, i64, i32, ptr]), ("nxf_root_of", i32, [ptr, i64, i32, ptr]),
                                ("nxf_depth_of", i32, [ptr, ptr, i64, i32, ptr]), ("nxf_enclosing", None, [ptr, ptr, ptr, i64, i32, ptr])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, args
    lib.nxf_enclosing_parents.restype = i64
    lib.nxf_enclosing_parents.argtypes = [ptr, i32, ptr, ptr, ptr, ptr, i64, i64, i32, ptr]
    lib.nxt_take.restype = None
    lib.nxt_take.argtypes = [ptr, ptr, ptr, ptr, i64, ptr, ptr]
    lib.nxt_int_after.restype = i32
    lib.nxt_int_after.argtypes = [ptr, ptr, ptr, i64, ctypes.c_char_p, i64, i64, ptr]
    lib.nxt_ints_after_all.restype = i64
    lib.nxt_ints_after_all.argtypes = [ptr, ptr, i64, ptr, ctypes.c_char_p, i64, ptr, ptr]
    lib.nxt_mark_holding.restype = i64
    lib.nxt_mark_holding.argtypes = [ptr, ptr, i64, ctypes.c_char_p, i64, ptr]
    lib.nxt_any_holds.restype = i32
    lib.nxt_any_holds.argtypes = [ptr, ptr, ptr, i64, ctypes.c_char_p, i64]


LIBRARY = NativeLibrary("nx_json", SOURCES, "the fast trace reader", "about 5 s on 2 cores",  # 3.5 s measured under a load of 4
                        "traces are read by the Python decoder, more slowly", _declare)


def load():
    """The loaded library, building it first if needed; None when it is off or cannot be built."""
    return LIBRARY.load()


def loaded():
    """The library if this process has loaded it, or can load it without compiling; else None.
    (The live collector's build must never wait for a compiler.)"""
    return LIBRARY.load(build=False)


@dataclass
class NativeChunk:
    events: pa.Table
    flows: pa.Table
    others: list[int]  # byte ranges of the events left to the Python decoder: start, end, start, end, ...
    array_end: int | None = None  # where the array closed in the piece (its ']'), read with `may_end`
    args: object = None  # the slices' args packed by `pack_args` (a PackedText; `events` has no args column then)


def read(array, max_nesting: int, bare: bool = False, may_end: bool = False,
         pack_args: Callable[[pa.Array], object] | None = None) -> NativeChunk | None:
    """The slices and flows of `array` (the bytes of one JSON array of events, nothing after it;
    with `bare`, a piece of one without its brackets: events separated by commas), and the byte
    ranges of its other events; None when the C++ reader is not available or leaves this array
    to the Python decoder. With `may_end` (and `bare`) the piece may run past the array's end:
    reading stops at its ']' (`array_end`), and what follows is left unread. With `pack_args`
    (_packed_text.PackedText.pack, handed in: that module takes rows with this library) the slices'
    args are compressed from the reader's memory (`NativeChunk.args`), whose buffer the reader then
    reuses for the next read on this thread.

    `array`: bytes or a writable buffer (a bytearray, a memoryview of one) are read in place, a
    read-only buffer from a copy."""
    lib = load()
    if lib is None:
        return None
    view = None if isinstance(array, bytes) else memoryview(array)
    data = array if view is None else view.tobytes() if view.readonly else (ctypes.c_char * view.nbytes).from_buffer(view)
    handle = lib.nxj_read(data, len(data), max_nesting, 2 if bare and may_end else int(bare))
    try:
        if lib.nxj_status(handle) != 0:
            return None
        chunk = _tables(lib, handle, pack_args)
        end = lib.nxj_end(handle)
        chunk.array_end = None if end < 0 else int(end)
        return chunk
    finally:
        lib.nxj_free(handle)


def _view(lib, handle, i: int) -> np.ndarray:
    """Field `i` of a result as bytes in place: valid until the result is freed."""
    n = ctypes.c_int64(0)
    ptr = lib.nxj_field(handle, i, ctypes.byref(n))
    return np.ctypeslib.as_array((ctypes.c_uint8 * n.value).from_address(ptr)) if n.value else np.zeros(0, np.uint8)


class _Held:
    """A column moved out of a result (nxj_take), released with the last Arrow buffer over it."""

    __slots__ = ("lib", "held")

    def __init__(self, lib, held):
        self.lib, self.held = lib, held

    def __del__(self):
        self.lib.nxj_release(self.held)


def _take(lib, handle, i: int) -> pa.Buffer:
    """Field `i` of a result as an Arrow buffer over the reader's own memory: no copy is made."""
    data, n = ctypes.c_void_p(), ctypes.c_int64(0)
    held = _Held(lib, lib.nxj_take(handle, i, ctypes.byref(data), ctypes.byref(n)))
    return pa.foreign_buffer(data.value, n.value, base=held) if n.value else pa.py_buffer(b"")


def _coded(lib, handle, i: int, values: pa.Array) -> pa.DictionaryArray:
    """A text column the reader coded (field `i`: int32 codes into `values`, -1 for a null), as
    Arrow's dictionary_encode of its text would give it (the values in order of first occurrence)."""
    codes = _take(lib, handle, i)
    bitmap, nulls = _validity(np.frombuffer(codes, dtype=np.int32) >= 0) if codes.size else (None, 0)
    return pa.DictionaryArray.from_arrays(pa.Array.from_buffers(pa.int32(), codes.size // 4, [bitmap, codes], nulls), values)


def _validity(valid: np.ndarray) -> tuple[pa.Buffer | None, int]:
    """(Arrow validity bitmap or None, null count) of one byte per row, 1 = a value."""
    nulls = int(len(valid) - np.count_nonzero(valid))
    return (pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None), nulls


_PHASES = pa.StringArray.from_buffers(2, pa.py_buffer(np.array([0, 1, 2], np.int32)), pa.py_buffer(b"Xi"))
"""The phases of the slices the reader reads, codes 0 and 1."""


def _tables(lib, handle, pack_args: Callable[[pa.Array], object] | None = None) -> NativeChunk:
    """The reader's columns as Arrow tables. Values, offsets and text are the reader's memory,
    moved into the arrays without a copy (which also spares the page faults of fresh copies).
    Arrays are made from their buffers, not with `pa.array`: pyarrow imports pandas at its first
    conversion from numpy (0.3 s), and these run on the decode's threads, which would wait for
    that import (the importing thread does it meanwhile, see _kineto_json._import_meanwhile)."""
    fields: dict[str, object] = {}
    packed = None
    i = 0
    for name in _TEXTS:
        bitmap, nulls = _validity(_view(lib, handle, i + 2))
        if name == "s_args" and pack_args is not None:  # compressed from the reader's memory, left to it
            offsets = pa.py_buffer(_view(lib, handle, i))
            n = offsets.size // 8 - 1
            packed = pack_args(pa.LargeStringArray.from_buffers(n, offsets, pa.py_buffer(_view(lib, handle, i + 1)), bitmap, nulls))
            i += 3
            continue
        offsets = _take(lib, handle, i)
        n = offsets.size // 8 - 1
        large = pa.LargeStringArray.from_buffers(n, offsets, _take(lib, handle, i + 1), bitmap, nulls)
        fields[name] = large.cast(pa.string())  # (of a _CODED column, its distinct values)
        i += 3
    for name in _INTS:
        if name in _UNREAD:  # (left to the reader, freed with its result)
            i += 2
            continue
        bitmap, nulls = _validity(_view(lib, handle, i + 1))
        values = _take(lib, handle, i)
        fields[name] = pa.Array.from_buffers(pa.int64(), values.size // 8, [bitmap, values], nulls)
        i += 2
    phase = _view(lib, handle, i)
    phase_codes = pa.Array.from_buffers(pa.int32(), len(phase), [None, pa.py_buffer((phase != ord("X")).astype(np.int32))])
    others = _view(lib, handle, i + 1).view(np.int64).tolist()  # (flat: no tuple per event for the collector to track)
    f = fields
    coded = {name: _coded(lib, handle, i + 2 + k, f[name]) for k, name in enumerate(_CODED)}
    events = {
        "category": coded["s_cat"],
        "name": coded["s_name"],
        "phase": pa.DictionaryArray.from_arrays(phase_codes, _PHASES),
        "ts_ns": f["s_ts"],
        "dur_ns": f["s_dur"],
        "pid": f["s_pid"],
        "tid": f["s_tid"],
        "pid_text": f["s_pid_text"],
        "tid_text": f["s_tid_text"],
        "correlation": f["s_corr"],
        "external_id": f["s_ext"],
        "stream": f["s_stream"],
    }
    if packed is None:
        events["args"] = f["s_args"]
    flows = pa.table({
        "flow_id": f["f_id"],
        "category": coded["f_cat"],
        "name": coded["f_name"],
        "phase": coded["f_phase"],
        "ts_ns": f["f_ts"],
        "pid": f["f_pid"],
        "tid": f["f_tid"],
        "binding_point": coded["f_bp"],
    })
    return NativeChunk(pa.table(events), flows, others, args=packed)

