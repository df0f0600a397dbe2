"""Walks over a forest given as a parent array (-1 = root), which every link of a rank is computed
with (build.py, passes.py): the nearest marked ancestor, the root, the depth; and the walk that
makes the forest (each slice's innermost enclosing slice on its track).

A rank's events are sorted so that a parent comes before its children: then one pass in row
order does each walk, in C++ (native/forest.cpp, through _json_native's library, when it is
built). Otherwise, or for a forest in any other order, vectorised pointer jumping does it in
O(n log depth) passes with no loop per node. Both give the same arrays (tests/test_forest.py).

Must not: know what the nodes are.
"""

from __future__ import annotations

import numpy as np

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
