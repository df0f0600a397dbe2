"""The fast parts of the critical path (analyzers/_path_index.py, critical_path.py) against
straightforward references: a host thread's innermost event at each change point, on random
slices that nest and overlap; and the walks of overlapping steps, which share their moves,
against each step walked alone. The exact charged ns of the model are checked by
test_critical_path.py on hand-built traces.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from neuron_explorer.analyzers import critical_path as cp
from neuron_explorer.analyzers._path_index import RankIndex, _innermost, factorize_rows
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import open_run

from .conftest import TRACES


def _innermost_by_hand(ts, end, ids):
    """At each start or end time b, the slice open at b (ts <= b < end) that is last in
    (ts, -end, id) order; kept where it changes (None: no slice open)."""
    points, inner = [], []
    for b in sorted(set(ts) | set(end)):
        open_ = [(t, -e, i, k) for k, (t, e, i) in enumerate(zip(ts, end, ids)) if t <= b < e]
        top = max(open_)[3] if open_ else None
        if not inner or inner[-1] != top:
            points.append(b)
            inner.append(top)
    return points, inner


def test_innermost_event_of_random_nested_and_overlapping_slices():
    rng = np.random.default_rng(17)
    for trial in range(200):
        n = int(rng.integers(1, 40))
        ts = rng.integers(0, 60, n)
        dur = rng.integers(1, 30 if trial % 2 else 8, n)  # long slices overlap more
        ids = rng.permutation(n) + 100
        end = ts + dur
        points, inner = _innermost(ts, end, ids, np.arange(n))
        want_points, want_inner = _innermost_by_hand(ts.tolist(), end.tolist(), ids.tolist())
        assert list(points) == want_points
        assert [None if i < 0 else i for i in inner] == want_inner


def _copied(src: Path, dst: Path, copies: int) -> Path:
    """The trace `copies` times over, each copy 1 ms after the one before on threads of its own
    (tid + 1000 per copy), link ids offset per copy: every ProfilerStep#N occurs `copies` times on
    ranges that overlap (one step on several threads, as the import keeps them), so step N runs
    1 ms into step N+1 and the steps overlap."""
    with gzip.open(src, "rt") as f:
        d = json.load(f)
    timed = [e for e in d["traceEvents"] if isinstance(e, dict) and "ts" in e and e.get("ph") != "M"]
    out = [e for e in d["traceEvents"] if isinstance(e, dict) and (e.get("ph") == "M" or "ts" not in e)]
    for c in range(copies):
        for e in timed:
            n = dict(e, ts=float(e["ts"]) + c * 1000)
            if isinstance(n.get("tid"), int):
                n["tid"] += c * 1000
            if isinstance(n.get("id"), int):
                n["id"] += c * 10**9
            if n.get("args"):
                n["args"] = {k: (v + c * 10**9 if k in ("External id", "correlation", "Python id", "Python parent id", "Ev Idx",
                                                        "Record function id") and isinstance(v, int) and v >= 0 else v)
                             for k, v in n["args"].items()}
            out.append(n)
    d["traceEvents"] = out
    dst.write_text(json.dumps(d))
    return dst


def test_rows_are_numbered_in_the_order_of_the_distinct_rows():
    """factorize_rows (hashed rows, the distinct ones sorted) against numpy's sort of whole rows: the
    same first row of each distinct row and the same code per row, on random int columns of mixed
    widths, with values at the int64 extremes the index uses for a null."""
    rng = np.random.default_rng(5)
    for trial in range(300):
        n, m = int(rng.integers(1, 300)), int(rng.integers(1, 5))
        cols = [rng.integers(-3, int(rng.integers(1, 20)), n).astype(rng.choice([np.int8, np.int32, np.int64])) for _ in range(m)]
        if trial % 5 == 0:
            cols[0] = np.where(rng.random(n) < 0.3, -(2**62), cols[0].astype(np.int64))
        _, first, code = np.unique(np.stack([c.astype(np.int64) for c in cols], axis=1), axis=0, return_index=True, return_inverse=True)
        got_first, got_code = factorize_rows(*cols)
        assert got_first.tolist() == first.tolist() and got_code.tolist() == code.ravel().tolist()
    first, code = factorize_rows(np.zeros(0, np.int64), np.zeros(0, np.int32))
    assert len(first) == len(code) == 0


def test_overlapping_steps_get_the_path_each_gets_alone(tmp_path):
    run_dir = import_traces(_copied(TRACES / "cuda_train_68k_events.json.gz", tmp_path / "t.json", 2), tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        path = cp.path_of(run, 0)
        steps = run.sql("SELECT s.step, s.ts_ns, s.dur_ns, e.pid, coalesce(CAST(e.tid AS VARCHAR), e.tid_text, '') "
                        "FROM steps s JOIN events e ON e.event_id = s.event_id WHERE s.rank = 0 ORDER BY s.step").fetchall()
        assert len(steps) == 5 and all(b[1] < a[1] + a[2] for a, b in zip(steps, steps[1:]))  # each step overlaps the next
        index = RankIndex(run, 0)
        shared = 0
        for step, ts, dur, pid, tid in steps:
            alone = cp._Walker(index)  # walks nothing else: no move to share
            got = cp._step_rows(alone, *alone.walk(ts, ts + dur, index.track_of.get((pid, tid))))
            got = cp._not_idle(index, cp._covers_of(alone, index), got)  # idle under another stream's kernel: its
            sel = path.step == step
            assert int(got[1].sum()) == dur  # every ns of the step charged once
            for mine, theirs in zip(got, (path.ts[sel], path.ns[sel], None, path.category[sel], None)):
                if theirs is not None:
                    assert np.array_equal(mine, theirs)
            assert np.array_equal(np.where(got[2] >= 0, index.ids[np.maximum(got[2], 0)], -1), path.event_id[sel])
            assert [alone.cause_texts()[c] for c in got[4]] == [path.causes[c] for c in path.cause[sel]]
            shared += int(sel.sum())
        assert shared == len(path)
