"""Pointer jumping over a forest given as a parent array (-1 = root): the vectorised walks that
every link of a rank is computed with (build.py, passes.py), O(n log depth), no loop per node.

Must not: know what the nodes are.
"""

from __future__ import annotations

import numpy as np


def nearest_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """For each node, its nearest ancestor-or-self with marked=True, or -1."""
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
    res = np.where(parent >= 0, parent, np.arange(len(parent), dtype=parent.dtype))
    while True:
        nxt = res[res]
        if np.array_equal(nxt, res):
            return res
        res = nxt
