"""The critical path walk in C++ (neuron_explorer/native/critical_path.cpp), loaded with ctypes.

The C++ walk mirrors critical_path._Walker move for move over the same RankIndex, so it charges the
same segments in the same order; the Python walk stays the reference (tests/test_critical_path_native.py
holds them equal on every trace in tests/data/traces and on generated ones). It walks a rank in
about 1 µs a move where the Python walk takes 20-40 µs.

The library is _path_lib's (built on first use). No compiler, or `NEURON_EXPLORER_NATIVE=0`: `walk`
returns None and the Python walk runs.

Private to critical_path.py (may change). Must not: decide the model (the Python walk does).
"""

from __future__ import annotations

import ctypes

import numpy as np

from ._path_index import F_SYNC_CALL, RUNTIME_WAIT_MIN_NS, UNLINKED_GAP_MAX_NS, RankIndex
from ._path_lib import i64 as _i64
from ._path_lib import load

__all__ = ["load", "walk"]


def _concat(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of a list of int64 sequences."""
    arrays = [_i64(p) if len(p) else np.zeros(0, dtype=np.int64) for p in parts]
    off = np.zeros(len(arrays) + 1, dtype=np.int64)
    if arrays:
        np.cumsum([len(a) for a in arrays], out=off[1:])
    return off, (np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64))


def _columns(index: RankIndex) -> tuple[list, list[np.ndarray]]:
    """The index as the C++ walk reads it: (dims, arrays in nxcp_walk's order)."""
    n = index.n
    col = [np.asarray(index.ts, dtype=np.int64), np.asarray(index.end, dtype=np.int64), np.asarray(index.device, dtype=np.int64),
           np.asarray(index.launch, dtype=np.int64), np.asarray(index.id, dtype=np.int64),
           np.ascontiguousarray(np.asarray(index.kind), dtype=np.int8), np.ascontiguousarray(np.asarray(index.flags), dtype=np.int8),
           np.ascontiguousarray(np.asarray(index.stream_of), dtype=np.int32),
           np.ascontiguousarray(np.asarray(index.at_in_stream), dtype=np.int32)]
    tr_off, tr_points = _concat([p for p, _ in index.tracks])
    _, tr_inner = _concat([i for _, i in index.tracks])
    st_off, st_rows = _concat([r for r, _ in index.streams])
    _, st_starts = _concat([s for _, s in index.streams])
    w_ts, w_target, w_other = [], [], []
    for key in index.stream_keys:  # the waits recorded on each stream, and the stream each waits on (-1: none known)
        wts, ws = index.stream_waits.get(key, ([], []))
        w_ts.append(np.array(wts, dtype=np.int64))
        targets, others = [], []
        for w in ws:
            ok = (key[0], w.wait_on)
            targets.append(index.stream_index[ok] if w.wait_on >= 0 and ok != key and ok in index.stream_index else -1)
            others.append(w.wait_on)
        w_target.append(np.array(targets, dtype=np.int64))
        w_other.append(np.array(others, dtype=np.int64))
    w_off, w_ts_all = _concat(w_ts)
    _, w_target_all = _concat(w_target)
    _, w_other_all = _concat(w_other)
    # sync calls: the streams each waits on, as the reference reads them from the sync records (-1: every stream)
    sync_set = np.full(n, -1, dtype=np.int32)
    sets: list[list[int]] = []
    flags = col[6]
    for r in np.flatnonzero(flags & F_SYNC_CALL).tolist():
        targets = index.wait_targets(r)
        if targets:
            sync_set[r] = len(sets)
            sets.append(sorted(index.stream_index[k] for k in targets if k in index.stream_index))
    set_off, set_streams = _concat([np.array(s, dtype=np.int64) for s in sets])
    lb_by, lb_rows = _i64(index._launched_by), _i64(index._launched)
    arrays = [*col, tr_off, tr_points, tr_inner, st_off, st_rows, st_starts, w_off, w_ts_all, w_target_all, w_other_all,
              lb_by, lb_rows, sync_set, set_off, set_streams]
    dims = [n, len(index.tracks), len(index.streams), len(lb_by), RUNTIME_WAIT_MIN_NS, UNLINKED_GAP_MAX_NS]
    return dims, arrays


def walk(index: RankIndex, steps: list[tuple]) -> tuple[np.ndarray, np.ndarray] | None:
    """The walks of steps [(start, end, host thread or None[, the time the walk looks for device work
    still running at: default the end])], in order: (segments, step offsets).
    Segments are rows (ts, ns, row, category code, cause), each step's latest first as the Python
    walk charges them; cause 0-2 as the walk's, device causes as raw codes -1 (its launch), -2 (its
    stream), -10 - N (stream N). None when the library is not available."""
    lib = load()
    if lib is None:
        return None
    dims, arrays = _columns(index)
    ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    d = np.array(dims, dtype=np.int64)
    starts = np.array([s[0] for s in steps], dtype=np.int64)
    ends = np.array([s[1] for s in steps], dtype=np.int64)
    owns = np.array([-1 if s[2] is None else s[2] for s in steps], dtype=np.int64)
    ats = np.array([s[3] if len(s) > 3 and s[3] is not None else s[1] for s in steps], dtype=np.int64)
    p64 = ctypes.POINTER(ctypes.c_int64)
    res = lib.nxcp_walk(d.ctypes.data_as(p64), ptrs, starts.ctypes.data_as(p64), ends.ctypes.data_as(p64),
                        owns.ctypes.data_as(p64), ats.ctypes.data_as(p64), len(steps))
    try:
        if lib.nxcp_status(res) != 0:
            raise RuntimeError("critical path walk did not finish")
        seg = np.empty((lib.nxcp_segments(res), 5), dtype=np.int64)
        off = np.empty(len(steps) + 1, dtype=np.int64)
        lib.nxcp_copy(res, seg.ctypes.data_as(p64), off.ctypes.data_as(p64))
    finally:
        lib.nxcp_free(res)
    del arrays  # kept alive until the walk is done
    return seg, off

