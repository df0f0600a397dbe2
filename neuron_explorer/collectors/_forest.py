"""The forest of a rank's slices: which slice each event is nested in, and the walks over it.

Events lie on tracks (one per pid and tid: `tracks_of`, `track_lookup`). In time order (`time_order`:
by start, longest first) each slice's parent is its innermost enclosing slice on its track
(`enclosing_parents`; `slice_at` answers the same for any point in time); every link of a rank is
then a walk over that forest given as a parent array (-1 = root), which build.py and passes.py
compute with: the nearest marked ancestor, the root, the depth.

A rank's events are sorted so that a parent comes before its children: then one pass in row
order does each walk, in C++ (native/forest.cpp, through _json_native's library, when it is
built). Otherwise, or for a forest in any other order, vectorised pointer jumping does it in
O(n log depth) passes with no loop per node. Both give the same arrays (tests/test_forest.py).

Must not: know what the nodes are (their kinds, names or tables): only tracks, times and marks.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import _json_native

NATIVE_MIN_NODES = 4096
"""Below this many nodes numpy's few passes cost less than calling into the library."""


def _native(parent: np.ndarray):
    """The C++ library and whether parent is int64, for a forest worth it; else None."""
    if len(parent) < NATIVE_MIN_NODES or parent.dtype not in (np.int32, np.int64):
        return None
    lib = _json_native.loaded()
    return lib and (lib, int(parent.dtype == np.int64))


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def nearest_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """For each node, its nearest ancestor-or-self with marked=True, or -1."""
    native = _native(parent)
    if native:
        lib, wide = native
        p, m = np.ascontiguousarray(parent), np.ascontiguousarray(marked, dtype=np.uint8)
        out = np.empty_like(p)
        if lib.nxf_nearest_marked(_ptr(p), _ptr(m), len(p), wide, _ptr(out)) == 0:
            return out
    idx = np.arange(len(parent), dtype=parent.dtype)
    res = np.where(marked, idx, parent)
    while True:
        valid = res >= 0
        pending = np.zeros(len(res), dtype=bool)
        pending[valid] = ~marked[res[valid]]
        if not pending.any():
            return res
        res[pending] = res[res[pending]]


def root_of(parent: np.ndarray) -> np.ndarray:
    """For each node of a forest given by parent (-1 = root), its root."""
    native = _native(parent)
    if native:
        lib, wide = native
        p = np.ascontiguousarray(parent)
        out = np.empty_like(p)
        if lib.nxf_root_of(_ptr(p), len(p), wide, _ptr(out)) == 0:
            return out
    res = np.where(parent >= 0, parent, np.arange(len(parent), dtype=parent.dtype))
    while True:
        nxt = res[res]
        if np.array_equal(nxt, res):
            return res
        res = nxt


def depth_of(parent: np.ndarray, counted: np.ndarray | None = None) -> np.ndarray:
    """Per node, how many of its ancestors (parent, its parent, ...) there are, or with `counted`
    (a bool per node) how many of them are counted. int32."""
    native = _native(parent)
    if native:
        lib, wide = native
        p = np.ascontiguousarray(parent)
        c = None if counted is None else np.ascontiguousarray(counted, dtype=np.uint8)
        out = np.empty(len(p), np.int32)
        if lib.nxf_depth_of(_ptr(p), None if c is None else _ptr(c), len(p), wide, _ptr(out)) == 0:
            return out
    has = parent >= 0
    if counted is None:
        d = has.astype(np.int32)
    else:
        d = np.zeros(len(parent), np.int32)
        d[has] = counted[parent[has]]
    p = parent.copy()
    while True:
        m = p >= 0
        if not m.any():
            return d
        pm = p[m]
        d2 = d.copy()
        d2[m] = d[m] + d[pm]
        p2 = p.copy()
        p2[m] = p[pm]
        d, p = d2, p2


def enclosing_in_order(track: np.ndarray, end: np.ndarray, can_contain: np.ndarray, dtype) -> np.ndarray:
    """Rows sorted by (track, start, longest first): each row's innermost enclosing row on its track
    (its position in this order, -1 for none). A row encloses a later one of its track when it can
    contain (`can_contain`) and ends at or after it. One pass in C++ (a row's walk climbs from the
    previous row of its track through rows already answered), else pointer jumping."""
    n = len(end)
    lib = _json_native.loaded() if n >= NATIVE_MIN_NODES else None
    if lib is not None:
        out = np.empty(n, dtype)
        t, e = np.ascontiguousarray(track, dtype=np.int64), np.ascontiguousarray(end, dtype=np.int64)
        c = np.ascontiguousarray(can_contain, dtype=np.uint8)
        lib.nxf_enclosing(_ptr(t), _ptr(e), _ptr(c), n, int(np.dtype(dtype) == np.int64), _ptr(out))
        return out
    cand = np.arange(-1, n - 1, dtype=dtype)
    if n:
        cand[np.r_[True, track[1:] != track[:-1]]] = -1
    # Pointer jumping over the rows still looking: a row whose candidate encloses it is done for
    # good (only looking rows move), so each pass works on a shrinking set, not on all n rows.
    active = np.flatnonzero(cand >= 0).astype(dtype)
    while len(active):
        c = cand[active]
        ok = can_contain[c] & (end[c] >= end[active])
        active = active[~ok]
        cand[active] = cand[cand[active]]
        active = active[cand[active] >= 0]
    return cand


# --- nesting: tracks, time order, enclosing slices -------------------------------------------


def time_order(ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Row order by (ts, -dur), stable: `np.lexsort((-dur, ts))`, computed faster.

    Events come in long runs already sorted by start (a thread's ops, a stream's kernels), which
    a stable sort on ts alone takes in near-linear time; only rows that share a start time with
    another are then put longest-first, among themselves."""
    order = np.argsort(ts, kind="stable")
    t = ts[order]
    tie = np.flatnonzero(t[1:] == t[:-1])
    if len(tie):
        at = np.union1d(tie, tie + 1)  # positions inside groups of equal start
        rows = order[at]
        order[at] = rows[np.lexsort((-dur[rows], ts[rows]))]
    return order


def index_dtype(n: int):
    """Row indices fit int32 below 2^31 rows: half the memory of the link arrays of a large rank."""
    return np.int32 if n < 2**31 - 1 else np.int64


def enclosing_parents(track: np.ndarray, ts: np.ndarray, end: np.ndarray, can_contain: np.ndarray,
                      uncounted: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Innermost slice on the same track that contains each event, and the count of overlaps.

    Input rows must be sorted by (ts, -dur). Returns parent indices (-1 for top level). A row that
    cannot contain others (an instant, a slice of no duration) is a point at its start here. Rows
    marked `uncounted` (ranges that are not calls, which may start and end anywhere in the calls)
    are left out of the overlaps, whatever they overlap.
    """
    n = len(ts)
    idx = index_dtype(n)
    native = _native_enclosing(track, ts, end, can_contain, uncounted, idx)
    if native is not None:
        return native
    end = np.where(can_contain, end, ts)
    # by (track, ts, -dur); few tracks: as 16-bit keys numpy's stable sort is a radix sort
    small = n and int(track.max()) < 2**15 and int(track.min()) >= 0
    order = np.argsort(track.astype(np.int16) if small else track, kind="stable").astype(idx)
    t_ts, t_end, t_track, t_can = ts[order], end[order], track[order], can_contain[order]
    counted = slice(None) if uncounted is None else ~uncounted[order]
    overlaps = _overlaps(t_track[counted], t_ts[counted], t_end[counted], t_can[counted])
    cand = enclosing_in_order(t_track, t_end, t_can, idx)
    del t_ts, t_track
    parent = np.full(n, -1, dtype=idx)
    has = cand >= 0
    parent[order[has]] = order[cand[has]]
    return parent, overlaps


def _native_enclosing(track: np.ndarray, ts: np.ndarray, end: np.ndarray, can_contain: np.ndarray,
                      uncounted: np.ndarray | None, idx) -> tuple[np.ndarray, int] | None:
    """enclosing_parents in one C++ pass in row order (a stack per track, no sort by track: 5 ms
    against 55 ms for 1.45M events); None without the library, for few rows, or for tracks that
    are not dense numbers from 0 (tracks_of's are)."""
    n = len(ts)
    lib = _json_native.loaded() if n >= NATIVE_MIN_NODES else None
    if lib is None or track.dtype not in (np.int32, np.int64):
        return None
    ntracks = int(track.max()) + 1
    if int(track.min()) < 0 or ntracks > n:
        return None
    t, s, e = np.ascontiguousarray(track), np.ascontiguousarray(ts, dtype=np.int64), np.ascontiguousarray(end, dtype=np.int64)
    c = np.ascontiguousarray(can_contain, dtype=bool).view(np.uint8)
    u = None if uncounted is None else np.ascontiguousarray(uncounted, dtype=bool).view(np.uint8)
    parent = np.empty(n, idx)
    overlaps = lib.nxf_enclosing_parents(_ptr(t), int(t.dtype == np.int64), _ptr(s), _ptr(e), _ptr(c), None if u is None else _ptr(u),
                                         n, ntracks, int(np.dtype(idx) == np.int64), _ptr(parent))
    return parent, int(overlaps)


def _overlaps(track: np.ndarray, ts: np.ndarray, end: np.ndarray, can_contain: np.ndarray) -> int:
    """Slices (sorted by track, then start) that start inside the one before them on their track and
    end after it."""
    if len(ts) < 2:
        return 0
    same = track[1:] == track[:-1]
    return int(np.count_nonzero(same & can_contain[:-1] & (ts[1:] < end[:-1]) & (end[:-1] < end[1:])))


BLOCK_ROWS = 1 << 16
"""Rows per block where a pass over every event goes a block at a time (its temporaries a block's,
not a column's: 11 MiB of int64 a million events)."""


def slice_at(track: np.ndarray, ev_ts: np.ndarray, ev_end: np.ndarray, parent: np.ndarray,
             q_track: np.ndarray, q_ts: np.ndarray) -> np.ndarray:
    """For query points (track, ts): the innermost event on that track that starts at or encloses ts.

    Events must be sorted by (ts, -dur), so that among slices starting at the same time the
    innermost comes last. Returns event indices, -1 where none.
    """
    out = np.full(len(q_ts), -1, dtype=np.int64)
    if not len(ev_ts) or not len(q_ts):
        return out
    tmin = int(min(ev_ts.min(), q_ts.min()))
    shift = int(max(ev_ts.max(), q_ts.max()) - tmin + 1).bit_length()
    if shift + int(max(track.max(), q_track.max()) + 1).bit_length() > 62:
        for t in np.unique(q_track):  # very long spans: one search per track
            sel, qsel = np.flatnonzero(track == t), np.flatnonzero(q_track == t)
            pos = np.searchsorted(ev_ts[sel], q_ts[qsel], side="right") - 1
            out[qsel] = np.where(pos >= 0, sel[np.maximum(pos, 0)], -1)
    else:
        # the events are in time order, so sorted stably by track alone they are in (track, ts)
        # order; track numbers are dense and few, and numpy sorts 16-bit keys by radix
        order = np.argsort(track.astype(np.int16) if track.max() < 2**15 else track, kind="stable")
        # (track << shift) | (ts - tmin), made in place and the track part a block at a time: each
        # temporary column of int64 is 11 MiB a million events, and this runs at the build's peak
        key = ev_ts[order]
        key -= tmin
        for at in range(0, len(key), BLOCK_ROWS):
            high = track[order[at:at + BLOCK_ROWS]].astype(np.int64)
            high <<= shift
            key[at:at + BLOCK_ROWS] |= high
        order = order.astype(index_dtype(len(order)))
        pos = np.searchsorted(key, (q_track << shift) | (q_ts - tmin), side="right") - 1
        del key
        out = np.where(pos >= 0, order[np.maximum(pos, 0)], -1)
        out[(out >= 0) & (track[np.maximum(out, 0)] != q_track)] = -1
    while True:  # climb while the candidate ended before the query time
        valid = np.flatnonzero(out >= 0)
        bad = valid[ev_end[out[valid]] < q_ts[valid]]
        if not len(bad):
            return out
        out[bad] = parent[out[bad]]


def tracks_of(pid: np.ndarray, tid: np.ndarray, pid_text: pa.Array | None, tid_text: pa.Array | None) -> np.ndarray:
    """A dense track number per event: one per distinct (pid, tid, pid_text, tid_text); a text column None: all null.
    In the index type (a track number is below the number of events)."""
    n = len(pid)
    if not n:
        return np.zeros(0, dtype=np.int64)
    if _fits_int32(pid) and _fits_int32(tid):  # (pid, tid) as one int64 key: one hash pass, numbered in order of first appearance
        key = _factorize((pid.astype(np.int64) << 32) | (tid.astype(np.int64) & 0xFFFFFFFF))
    else:  # (as one 16-byte key)
        pairs = np.empty((n, 2), dtype=np.int64)
        pairs[:, 0], pairs[:, 1] = pid, tid
        key = np.asarray(pc.dictionary_encode(pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(16), n, [None, pa.py_buffer(pairs)])).indices, dtype=np.int64)
    texts = [t for t in (pid_text, tid_text) if t is not None and t.null_count < len(t)]  # (most traces have none)
    if not texts:
        return key.astype(index_dtype(n))
    for t in texts:
        c = _text_codes(t)
        key = key * (int(c.max()) + 2) + c
    return _factorize(key).astype(index_dtype(n))


def _fits_int32(values: np.ndarray) -> bool:
    return values.dtype.itemsize <= 4 and values.dtype.kind == "i" or bool(
        len(values) and values.min() >= -(2**31) and values.max() < 2**31)


def _text_codes(text: pa.Array) -> np.ndarray:
    """int64 codes of a text column, 0 for a null and 1 on for its values in order of first appearance;
    only the rows with a value are hashed (a trace names a few threads or processes, if any)."""
    codes = np.zeros(len(text), dtype=np.int64)
    rows = np.flatnonzero(np.asarray(text.is_valid()))
    if len(rows):
        codes[rows] = np.asarray(pc.dictionary_encode(text.take(pa.array(rows))).indices, dtype=np.int64) + 1
    return codes


def _factorize(values: np.ndarray) -> np.ndarray:
    """Dense int64 codes of int64 `values`, numbered in order of first appearance (a hash table,
    not a sort)."""
    return np.asarray(pc.dictionary_encode(pa.array(values, pa.int64())).indices, dtype=np.int64)


def track_lookup(track: np.ndarray, pid: np.ndarray, tid: np.ndarray, q_pid: np.ndarray, q_tid: np.ndarray) -> np.ndarray:
    """Track number of integer (pid, tid) query points, -1 where no event has that track."""
    out = np.full(len(q_pid), -1, dtype=np.int64)
    if not len(track) or not len(q_pid):
        return out
    one = np.full(int(track.max()) + 1, -1, dtype=np.int64)  # an event of each track (all share its pid and tid)
    one[track] = np.arange(len(track))
    first = one[one >= 0]
    known = {(int(pid[i]), int(tid[i])): int(track[i]) for i in first}
    if len(known) > 64:  # many tracks: one dict lookup per point
        return np.array([known.get(k, -1) for k in zip(q_pid.tolist(), q_tid.tolist())], dtype=np.int64)
    for (p_, t_), tr in known.items():  # few tracks, many points: one vectorised pass per track
        out[(q_pid == p_) & (q_tid == t_)] = tr
    return out
