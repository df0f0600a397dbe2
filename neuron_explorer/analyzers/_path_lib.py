"""The critical-path C++ library (neuron_explorer/native/critical_path.cpp), loaded with ctypes, for
the two modules that call it: the walk (_path_native) and the index it walks (_path_index, a host
thread's innermost events). It knows nothing of either: it declares the library's functions and
hands NumPy arrays to them.

The source ships with the package and is compiled on first use with the system's C++ compiler into
the native build folder (native_build.py: `$NEURON_EXPLORER_NATIVE_DIR`, a failed build is
remembered). No compiler, or `NEURON_EXPLORER_NATIVE=0`: `load` returns None and the callers run
their Python / NumPy reference instead.

Private to _path_native.py and _path_index.py (may change).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from ..native_build import NativeLibrary

SOURCE = Path(__file__).resolve().parents[1] / "native" / "critical_path.cpp"


def _declare(lib: ctypes.CDLL) -> None:
    vp, i64p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
    lib.nxcp_walk.restype = vp
    lib.nxcp_walk.argtypes = [i64p, ctypes.POINTER(vp), i64p, i64p, i64p, i64p, ctypes.c_int64]
    lib.nxcp_status.restype = ctypes.c_int32
    lib.nxcp_status.argtypes = [vp]
    lib.nxcp_segments.restype = ctypes.c_int64
    lib.nxcp_segments.argtypes = [vp]
    lib.nxcp_copy.restype = None
    lib.nxcp_copy.argtypes = [vp, i64p, i64p]
    lib.nxcp_free.restype = None
    lib.nxcp_free.argtypes = [vp]
    lib.nxcp_innermost.restype = ctypes.c_int64
    lib.nxcp_innermost.argtypes = [i64p, i64p, i64p, ctypes.c_int64, i64p, ctypes.c_int64, i64p, i64p]


LIBRARY = NativeLibrary("nx_path", (SOURCE,), "the fast critical path walk", "about 3 s on 2 cores",
                        "the Python walk runs, more slowly", _declare)


def load():
    """The loaded library, building it first if needed; None when it is off or cannot be built."""
    return LIBRARY.load()


def i64(a) -> np.ndarray:
    """`a` (a NumPy array, or a buffer of int64 such as an `array('q')`) as a contiguous int64 NumPy array."""
    return np.ascontiguousarray(np.frombuffer(a, dtype=np.int64) if not isinstance(a, np.ndarray) else a, dtype=np.int64)


def innermost(ts: np.ndarray, end: np.ndarray, pos: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """A host thread's change points and innermost rows (`_path_index._innermost`'s definition) by the
    C++ sweep: `ts`, `end`, `pos` the thread's rows sorted by (ts, -end, id), `bounds` their distinct
    starts and ends, sorted. None when the library is not available."""
    lib = load()
    if lib is None:
        return None
    ts, end, pos, bounds = i64(ts), i64(end), i64(pos), i64(bounds)
    points, inner = np.empty(max(len(bounds), 1), dtype=np.int64), np.empty(max(len(bounds), 1), dtype=np.int64)
    p64 = ctypes.POINTER(ctypes.c_int64)
    m = lib.nxcp_innermost(ts.ctypes.data_as(p64), end.ctypes.data_as(p64), pos.ctypes.data_as(p64), len(ts),
                           bounds.ctypes.data_as(p64), len(bounds), points.ctypes.data_as(p64), inner.ctypes.data_as(p64))
    return points[:m], inner[:m]
