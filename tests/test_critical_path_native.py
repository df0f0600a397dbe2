"""The C++ critical path walk (analyzers/_path_native.py, native/critical_path.cpp) against the
Python walk, its reference (critical_path._Walker): the same path — the same segments, events,
categories, causes and charged ns, row for row — on every shared trace (with no steps, over its span), on a trace whose
steps overlap (their walks share moves), and on generated traces that exercise every move of the
model (nested and overlapping host slices on two threads, launches, blocking copies, stream,
event and device syncs, long calls, stream waits, collectives, device work with no launch).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from neuron_explorer.analyzers import _path_native
from neuron_explorer.analyzers import critical_path as cp
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import open_run

from .conftest import TRACES, X, real_traces, write_trace
from .test_critical_path_index import _copied


@pytest.fixture(autouse=True, scope="module")
def _native_walk():
    if _path_native.load() is None:
        pytest.skip("the C++ critical path walk cannot be built here (no C++ compiler, or NEURON_EXPLORER_NATIVE=0)")


def _steps(run, rank):
    return run.sql("SELECT s.step, s.ts_ns, s.dur_ns, s.event_id, e.pid, coalesce(CAST(e.tid AS VARCHAR), e.tid_text, '') "
                   "FROM steps s JOIN events e ON e.event_id = s.event_id WHERE s.rank = ? ORDER BY s.step", [rank]).fetchall()


def _assert_same_paths(run_dir: Path) -> int:
    """Both walks of every rank give the same path; returns the rows compared."""
    rows = 0
    with open_run(run_dir) as run:
        for (rank,) in run.sql("SELECT DISTINCT rank FROM events ORDER BY 1").fetchall():
            steps = _steps(run, rank) or cp.window_of(run, rank)  # a rank with no steps: its path over its span
            native, python = cp._walked(run, rank, steps, native=True), cp._walked(run, rank, steps, native=False)
            assert native.causes == python.causes
            assert native.table().equals(python.table()), f"rank {rank}: the C++ walk's path differs from the Python walk's"
            if steps:
                assert int(native.ns.sum()) == sum(int(d) for _s, _t, d, *_ in steps)  # every ns of every step charged once
            rows += len(native)
    return rows


@pytest.mark.parametrize("trace", real_traces(), ids=lambda p: p.name)
def test_same_path_on_shared_traces(trace, tmp_path):
    _assert_same_paths(import_traces(trace, tmp_path / "run").run_dir)


def test_same_path_when_steps_overlap_and_share_moves(tmp_path):
    run_dir = import_traces(_copied(TRACES / "cuda_train_68k_events.json.gz", tmp_path / "t.json", 2), tmp_path / "run").run_dir
    assert _assert_same_paths(run_dir) > 10_000


def test_same_path_on_two_ranks_of_a_job(tmp_path):
    files = sorted((TRACES / "multirank_128").glob("rank-*.json*"))[:2]
    assert len(files) == 2
    src = tmp_path / "job"
    src.mkdir()
    for f in files:
        (src / f.name).write_bytes(f.read_bytes())
    _assert_same_paths(import_traces(src, tmp_path / "run").run_dir)


def _generated(rng: random.Random) -> list[dict]:
    """A random trace (µs): steps on thread 1 (sometimes overlapping), operators on threads 1 and 2
    with launches, copies and syncs inside, kernels on streams 7 and 9 (some collectives, some with
    no launch), sync records (stream, event, device syncs and stream waits)."""
    events, corr, t = [], 0, 0.0
    kernels = ["gemm", "elementwise", "ncclDevKernel_AllReduce_Sum_f32", "softmax"]
    n_steps = rng.randint(1, 4)
    for s in range(n_steps):
        step_start = t
        for _ in range(rng.randint(3, 12)):
            tid = 1 if rng.random() < 0.75 else 2
            op_ts = t + rng.uniform(0, 5)
            op_dur = rng.uniform(3, 60)
            events.append(X(rng.choice(["aten::mm", "aten::add", "aten::item", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"]),
                            rng.choice(["cpu_op", "cpu_op", "python_function", "user_annotation"]), op_ts, op_dur, tid=tid))
            inner = op_ts + rng.uniform(0, 2)
            while inner < op_ts + op_dur - 1:
                corr += 1
                what = rng.random()
                dur = rng.uniform(0.5, 4) if rng.random() < 0.8 else rng.uniform(15, 40)  # some calls long enough to wait
                stream = 7 if rng.random() < 0.7 else 9
                k_ts = inner + rng.uniform(-1, 30)  # may start before the call returns, or long after
                k_dur = rng.uniform(0.5, 50)
                if what < 0.5:
                    events.append(X("cudaLaunchKernel", "cuda_runtime", inner, dur, tid=tid, correlation=corr))
                    events.append(X(rng.choice(kernels), "kernel", k_ts, k_dur, pid=0, tid=stream, correlation=corr, stream=stream, device=0))
                elif what < 0.65:
                    events.append(X("cudaMemcpyAsync", "cuda_runtime", inner, dur, tid=tid, correlation=corr))
                    events.append(X(rng.choice(["Memcpy DtoH (Device -> Pageable)", "Memcpy HtoD (Pageable -> Device)"]), "gpu_memcpy",
                                    inner + rng.uniform(0, dur), rng.uniform(0.5, 5), pid=0, tid=stream, correlation=corr,
                                    stream=stream, device=0))
                elif what < 0.75:
                    name, kind = rng.choice([("cudaStreamSynchronize", "Stream Sync"), ("cudaEventSynchronize", "Event Sync"),
                                             ("cudaDeviceSynchronize", "Context Sync")])
                    events.append(X(name, "cuda_runtime", inner, dur, tid=tid, correlation=corr))
                    events.append(X(kind, "cuda_sync", inner + 0.2, max(dur - 0.4, 0.1), pid=0, tid=stream, correlation=corr,
                                    stream=stream, device=0, cuda_sync_kind=kind, wait_on_stream=16 - stream))
                elif what < 0.82:
                    events.append(X("cudaStreamWaitEvent", "cuda_runtime", inner, dur, tid=tid, correlation=corr))
                    events.append(X("Stream Wait Event", "cuda_sync", inner + dur, 0.5, pid=0, tid=stream, correlation=corr,
                                    stream=stream, device=0, cuda_sync_kind="Stream Wait Event", wait_on_stream=16 - stream))
                elif what < 0.9:
                    events.append(X(rng.choice(kernels), "kernel", k_ts, k_dur, pid=0, tid=stream, stream=stream, device=0))  # no launch
                else:
                    events.append(X("cudaFuncGetAttributes", "cuda_runtime", inner, dur, tid=tid, correlation=corr))
                inner += dur + rng.uniform(0, 3)
            t = op_ts + op_dur + rng.uniform(0, 10) * (tid == 1)
        step_end = t + rng.uniform(0, 20)
        overlap = rng.uniform(0, 40) if s and rng.random() < 0.3 else 0  # a step that starts before the previous one ended
        events.append(X(f"ProfilerStep#{s + 1}", "user_annotation", step_start - overlap, step_end - step_start + overlap))
        t = step_end + rng.uniform(0, 5)
    return events


@pytest.mark.parametrize("seed", range(12))
def test_same_path_on_generated_traces(seed, tmp_path):
    rng = random.Random(seed)
    rows = 0
    for k in range(3):
        events = _generated(rng)
        run_dir = import_traces(write_trace(tmp_path / f"t{k}.json", events), tmp_path / f"run{k}").run_dir
        rows += _assert_same_paths(run_dir)
    assert rows > 0


@pytest.mark.parametrize("seed", range(12))
def test_innermost_event_by_the_cpp_sweep_equals_the_numpy_passes(seed):
    """A host thread's change points and innermost events (`_path_index._innermost`) from the C++
    sweep equal the NumPy passes', on nested, touching, improperly nested and zero-length slices,
    given in id order and out of it."""
    import numpy as np

    from neuron_explorer.analyzers._path_index import _innermost

    rng = random.Random(seed)
    n = rng.choice([0, 1, 2, 50, 3000])
    ts = np.array([rng.randrange(0, 400) for _ in range(n)], dtype=np.int64)
    end = ts + np.array([rng.choice([0, 1, 5, 40, 300]) for _ in range(n)], dtype=np.int64)
    ids = np.array(rng.sample(range(10 * n + 1), n), dtype=np.int64)
    pos = np.arange(n, dtype=np.int64) * 7
    native, reference = _innermost(ts, end, ids, pos, native=True), _innermost(ts, end, ids, pos, native=False)
    assert list(native[0]) == list(reference[0]) and list(native[1]) == list(reference[1])
    if n >= 50:
        assert len(set(reference[1])) > 10  # not trivial: many innermost events
