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


def test_enclosing_slices_in_cpp_equal_pointer_jumping(monkeypatch):
    """The walk that makes the forest: slices on a few threads with nesting, overlaps (a slice that
    ends after its parent), instants and zero-length slices, shared start times."""
    from neuron_explorer.collectors._forest import enclosing_parents, time_order

    rng = np.random.default_rng(11)
    n = 30_000
    track = rng.integers(0, 5, n).astype(np.int64)
    ts = rng.integers(0, 200_000, n).astype(np.int64) // 7 * 7  # many equal starts
    dur = np.where(rng.random(n) < 0.1, 0, rng.exponential(300, n).astype(np.int64))
    order = time_order(ts, dur)
    track, ts, dur = track[order], ts[order], dur[order]
    end = ts + dur
    can = (dur > 0) & (rng.random(n) < 0.95)  # 5% instants, some of them with a duration
    native = enclosing_parents(track, ts, end, can)
    _numpy_only(monkeypatch)
    jumped = enclosing_parents(track, ts, end, can)
    np.testing.assert_array_equal(native[0], jumped[0])
    assert native[1] == jumped[1] and native[1] > 0  # overlaps counted, and there are some
    parent = native[0]
    has = parent >= 0
    assert has.sum() > n // 2
    p = parent[has]
    # every parent is on the child's track, can contain, starts no later and ends no earlier (an
    # instant is a point at its start)
    assert (track[p] == track[has]).all() and can[p].all()
    assert (ts[p] <= ts[has]).all() and (end[p] >= np.where(can, end, ts)[has]).all()
