"""The forest walks of the build: the C++ pass (parents before children) and numpy's pointer
jumping give the same arrays, on forests shaped like a rank's events and on any other order."""

from __future__ import annotations

import numpy as np
import pytest

from neuron_explorer.collectors import _forest, _json_native


def _rank_like_forest(rng: np.random.Generator, n: int) -> np.ndarray:
    """A parent array with every parent before its child, as build sorts a rank: a random walk
    of nesting on a few threads (open a child, close back up some levels, start a new root)."""
    parent = np.full(n, -1, dtype=np.int64)
    stacks: list[list[int]] = [[] for _ in range(4)]
    for i in range(n):
        stack = stacks[rng.integers(len(stacks))]
        del stack[len(stack) - int(rng.integers(0, min(len(stack), 3) + 1)):]
        parent[i] = stack[-1] if stack else -1
        if len(stack) < 40:
            stack.append(i)
    return parent


def _walks(parent: np.ndarray, marked: np.ndarray) -> tuple:
    return (_forest.nearest_marked(parent, marked), _forest.root_of(parent), _forest.depth_of(parent),
            _forest.depth_of(parent, marked))


def _numpy_only(monkeypatch) -> None:
    monkeypatch.setattr(_json_native, "loaded", lambda: None)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_the_cpp_walks_equal_pointer_jumping(monkeypatch, dtype):
    assert _json_native.load() is not None, "the C++ library did not build (is there a C++ compiler?)"
    rng = np.random.default_rng(7)
    parent = _rank_like_forest(rng, 20_000).astype(dtype)
    marked = rng.random(len(parent)) < 0.1
    native = _walks(parent, marked)
    _numpy_only(monkeypatch)
    jumped = _walks(parent, marked)
    for a, b in zip(native, jumped):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    # what the walks mean, on a few nodes checked by climbing by hand
    near, root, depth, counted = native
    for i in rng.integers(0, len(parent), 50).tolist():
        chain = [i]
        while parent[chain[-1]] >= 0:
            chain.append(int(parent[chain[-1]]))
        assert root[i] == chain[-1]
        assert depth[i] == len(chain) - 1
        assert counted[i] == sum(bool(marked[a]) for a in chain[1:])
        assert near[i] == next((a for a in chain if marked[a]), -1)


def test_a_forest_in_another_order_takes_pointer_jumping(monkeypatch):
    """A child before its parent: the C++ pass refuses it (it would read an unwritten row) and
    numpy's pointer jumping gives the answer."""
    rng = np.random.default_rng(3)
    parent = _rank_like_forest(rng, 10_000)
    perm = rng.permutation(len(parent))  # relabel the nodes in a random order
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(len(perm))
    shuffled = np.where(parent[perm] >= 0, inverse[np.maximum(parent[perm], 0)], -1)
    marked = rng.random(len(parent)) < 0.2
    got = _walks(shuffled, marked[perm])
    want = _walks(parent, marked)
    for k, (a, b) in enumerate(zip(got, want)):
        b = b[perm]
        if k < 2:  # nearest_marked and root_of answer node numbers: in the new labels
            b = np.where(b >= 0, inverse[np.maximum(b, 0)], -1)
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("track_type", [np.int32, np.int64])
@pytest.mark.parametrize("with_uncounted", [False, True])
def test_enclosing_slices_in_cpp_equal_pointer_jumping(monkeypatch, track_type, with_uncounted):
    """The walk that makes the forest: slices on a few threads with nesting, overlaps (a slice that
    ends after its parent), instants and zero-length slices, shared start times. The one C++ pass in
    time order, the C++ walk over the rows sorted by track, and numpy's pointer jumping agree, on the
    parents and on the overlaps counted (some rows left out of them: the profiler's steps)."""
    from neuron_explorer.collectors import _forest
    from neuron_explorer.collectors._forest import enclosing_parents, time_order

    rng = np.random.default_rng(11)
    n = 30_000
    track = rng.integers(0, 5, n).astype(track_type)
    ts = rng.integers(0, 200_000, n).astype(np.int64) // 7 * 7  # many equal starts
    dur = np.where(rng.random(n) < 0.1, 0, rng.exponential(300, n).astype(np.int64))
    order = time_order(ts, dur)
    track, ts, dur = track[order], ts[order], dur[order]
    end = ts + dur
    can = (dur > 0) & (rng.random(n) < 0.95)  # 5% instants, some of them with a duration
    uncounted = rng.random(n) < 0.2 if with_uncounted else None
    assert _forest._native_enclosing(track, ts, end, can, uncounted, np.int32) is not None, "the one-pass C++ walk did not run"
    native = enclosing_parents(track, ts, end, can, uncounted)
    monkeypatch.setattr(_forest, "_native_enclosing", lambda *a: None)
    by_track = enclosing_parents(track, ts, end, can, uncounted)
    _numpy_only(monkeypatch)
    jumped = enclosing_parents(track, ts, end, can, uncounted)
    for other in (by_track, jumped):
        np.testing.assert_array_equal(native[0], other[0])
        assert native[1] == other[1]
    assert native[1] > 0  # overlaps counted, and there are some
    parent = native[0]
    has = parent >= 0
    assert has.sum() > n // 2
    p = parent[has]
    # every parent is on the child's track, can contain, starts no later and ends no earlier (an
    # instant is a point at its start)
    assert (track[p] == track[has]).all() and can[p].all()
    assert (ts[p] <= ts[has]).all() and (end[p] >= np.where(can, end, ts)[has]).all()


def test_tracks_that_are_not_numbers_from_zero_take_the_sort_by_track():
    """Tracks given as any numbers (negative, sparse): the walk sorts by track, and the forest is the same
    as with the same tracks numbered 0, 1, 2."""
    from neuron_explorer.collectors._forest import enclosing_parents, time_order

    rng = np.random.default_rng(5)
    n = 10_000
    dense = rng.integers(0, 3, n)
    ts = rng.integers(0, 50_000, n).astype(np.int64)
    dur = rng.exponential(200, n).astype(np.int64)
    order = time_order(ts, dur)
    dense, ts, dur = dense[order], ts[order], dur[order]
    can = dur > 0
    sparse = np.array([-7, 10**12, 3])[dense]
    a, b = enclosing_parents(dense, ts, ts + dur, can), enclosing_parents(sparse, ts, ts + dur, can)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1]


@pytest.mark.parametrize("ids", ["int32", "wide"])
def test_tracks_are_numbered_by_first_appearance_of_pid_tid_and_their_names(ids):
    """One track per distinct (pid, tid, pid name, tid name), numbered as the rows first show it: pids and
    tids as a trace gives them (negative ones, and ones past 32 bits, where a key of both in 64 bits would
    not be one-to-one), names on a few rows only."""
    import pyarrow as pa

    rng = np.random.default_rng(3)
    n = 5000
    pids = [0, 1, -1, 7] if ids == "int32" else [0, 1, -1, 2**33 + 1, 1 - 2**32]
    tids = [5, -5, 2**31 - 1] if ids == "int32" else [5, -5, 2**32 + 5, 2**31 - 1]
    pid = np.array(pids, np.int64)[rng.integers(len(pids), size=n)]
    tid = np.array(tids, np.int64)[rng.integers(len(tids), size=n)]
    if ids == "int32":
        pid, tid = pid.astype(np.int32), tid.astype(np.int32)
    names = [None] * 20 + ["GPU 0", "stream 7", "Traces"]
    pid_text = pa.array([names[i] for i in rng.integers(len(names), size=n)], pa.string())
    tid_text = pa.array([names[i] for i in rng.integers(len(names), size=n)], pa.string())
    for texts in ((None, None), (pid_text, None), (pid_text, tid_text), (pa.nulls(n, pa.string()), tid_text)):
        seen: dict = {}
        rows = zip(pid.tolist(), tid.tolist(), *(t.to_pylist() if t is not None else [None] * n for t in texts))
        expected = [seen.setdefault(key, len(seen)) for key in rows]
        assert _forest.tracks_of(pid, tid, *texts).tolist() == expected
