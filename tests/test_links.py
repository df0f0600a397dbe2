"""Every link column on a hand-built trace whose right answer is known.

    pid 1 / tid 1 (host), times in us after baseTimeNanoseconds:
    0 ............................................................ 100  ProfilerStep#7
     1 ........................................................ 90     train.py(10): train_step
      2 .................................. 60                          nn.Module: Net_0
       3 ................................ 59                           torch/nn/modules/module.py(1500): _call_impl
        4 ........................ 50                                 aten::linear
         5 ............... 40                                         aten::addmm
          6 .. 8  cudaLaunchKernel (corr 500)   [memory] at 7
                           41 .. 43 cudaLaunchKernel (corr 501, ac2g flow 501)
                                                  70 .... 80           aten::pow
    pid 0 / tid 7 (device 0, stream 7):
                20 .... 30 gemm (corr 500)     50 .. 55 other (flow 501)  60..61 orphan
"""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_explorer import open_run
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import X, write_trace

BASE = 1_700_000_000_000_000_000


EVENTS = [
    X("ProfilerStep#7", "user_annotation", 0, 100),
    X("train.py(10): train_step", "python_function", 1, 89),
    X("nn.Module: Net_0", "python_function", 2, 58),
    X("torch/nn/modules/module.py(1500): _call_impl", "python_function", 3, 56),
    X("aten::linear", "cpu_op", 4, 46, **{"External id": 100}),
    X("aten::addmm", "cpu_op", 5, 35, **{"External id": 101, "Input Dims": [[8, 4], [4, 2]]}),
    X("cudaLaunchKernel", "cuda_runtime", 6, 2, correlation=500, **{"External id": 101}),
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 7, "s": "t",
     "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": 512, "Total Allocated": 1024, "Total Reserved": 2048}},
    X("cudaLaunchKernel", "cuda_runtime", 41, 2, **{"External id": 100}),
    {"ph": "s", "id": 501, "pid": 1, "tid": 1, "ts": 41, "cat": "ac2g", "name": "ac2g"},
    X("aten::pow", "cpu_op", 70, 10, **{"External id": 102}),
    X("gemm", "kernel", 20, 10, pid=0, tid=7, correlation=500, stream=7, device=0),
    X("other", "kernel", 50, 5, pid=0, tid=7, stream=7),
    {"ph": "f", "id": 501, "pid": 0, "tid": 7, "ts": 50, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    X("orphan", "kernel", 60, 1, pid=0, tid=7),
    {"ph": "C", "name": "queue", "pid": 1, "ts": 5.5, "args": {"a": 1, "b": 2.5}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("links")
    trace = write_trace(tmp / "t.json", EVENTS, baseTimeNanoseconds=BASE, distributedInfo={"rank": 2, "world_size": 4})
    run_dir = import_traces(trace, tmp / "run").run_dir
    with open_run(run_dir) as r:
        yield r


def ev(run, name: str) -> dict:
    rel = run.sql("SELECT * FROM events WHERE name = ?", [name])
    cols = [d[0] for d in rel.description]
    rows = rel.fetchall()
    assert len(rows) == 1, (name, rows)
    return dict(zip(cols, rows[0]))


def frame(run, frame_id) -> tuple:
    return run.sql("SELECT file, line, function, is_user, line_kind FROM frames WHERE frame_id = ?", [frame_id]).fetchone()


def test_timestamps_are_int_ns_on_the_epoch_clock(run):
    e = ev(run, "aten::addmm")
    assert e["ts_ns"] == BASE + 5_000 and e["dur_ns"] == 35_000
    assert e["rank"] == 2 and e["event_id"] // 10**12 == 2


def test_kinds_and_original_categories(run):
    assert ev(run, "ProfilerStep#7")["kind"] == "step"
    assert ev(run, "aten::linear")["kind"] == "cpu_op"
    assert ev(run, "gemm")["kind"] == "kernel" and ev(run, "gemm")["category"] == "kernel"
    assert ev(run, "train.py(10): train_step")["kind"] == "python"


def test_nesting_parent_and_depth(run):
    step, linear, addmm = ev(run, "ProfilerStep#7"), ev(run, "aten::linear"), ev(run, "aten::addmm")
    assert step["depth"] == 0 and step["parent_id"] is None
    assert addmm["parent_id"] == linear["event_id"] and addmm["depth"] == 5
    assert ev(run, "aten::pow")["parent_id"] == ev(run, "train.py(10): train_step")["event_id"]


def test_operator_links_innermost_and_top_level(run):
    linear, addmm, pow_ = ev(run, "aten::linear"), ev(run, "aten::addmm"), ev(run, "aten::pow")
    assert linear["op_id"] == linear["event_id"] and linear["top_op_id"] == linear["event_id"]
    assert addmm["op_id"] == addmm["event_id"] and addmm["top_op_id"] == linear["event_id"]
    assert pow_["top_op_id"] == pow_["event_id"]
    assert ev(run, "train.py(10): train_step")["op_id"] is None


def test_device_events_link_to_launch_by_correlation_and_by_flow(run):
    gemm, other, orphan = ev(run, "gemm"), ev(run, "other"), ev(run, "orphan")
    launches = dict(run.sql("SELECT ts_ns, event_id FROM events WHERE kind = 'runtime'").fetchall())
    assert gemm["launch_id"] == launches[BASE + 6_000]
    assert other["launch_id"] == launches[BASE + 41_000]
    assert orphan["launch_id"] is None
    assert gemm["device"] == 0 and gemm["stream"] == 7
    assert gemm["op_id"] == ev(run, "aten::addmm")["event_id"] and gemm["top_op_id"] == ev(run, "aten::linear")["event_id"]
    assert other["op_id"] == ev(run, "aten::linear")["event_id"]
    assert orphan["op_id"] is None and orphan["step"] is None
    assert run.manifest["ranks"][0]["data_quality"]["device_events_without_launch"] == 1


def test_steps_modules_and_source_frames(run):
    gemm, addmm, pow_ = ev(run, "gemm"), ev(run, "aten::addmm"), ev(run, "aten::pow")
    assert addmm["step"] == 7 and gemm["step"] == 7 and pow_["step"] == 7
    assert addmm["module_path"] == "Net_0" and gemm["module_path"] == "Net_0" and pow_["module_path"] is None
    # the innermost *user* frame (module.py is torch's): train.py, marked as a def-line location
    assert frame(run, addmm["frame_id"]) == ("train.py", 10, "train_step", True, "def")
    assert gemm["frame_id"] == addmm["frame_id"] == pow_["frame_id"]
    torch_frame = run.sql("SELECT is_user FROM frames WHERE file LIKE 'torch/%'").fetchone()
    assert torch_frame == (False,)


def test_flows_bind_to_their_slices(run):
    rows = run.sql("SELECT phase, event_id FROM flows ORDER BY phase DESC").fetchall()
    launch = run.sql(f"SELECT event_id FROM events WHERE kind = 'runtime' AND ts_ns = {BASE + 41_000}").fetchone()[0]
    assert rows == [("s", launch), ("f", ev(run, "other")["event_id"])]


def test_memory_rows_carry_operator_step_and_frame(run):
    m = run.sql("SELECT ts_ns, bytes, total_allocated, total_reserved, device, op_id, step, frame_id FROM memory").fetchall()
    addmm = ev(run, "aten::addmm")
    assert m == [(BASE + 7_000, 512, 1024, 2048, 0, addmm["event_id"], 7, addmm["frame_id"])]


def test_counters_one_row_per_series(run):
    rows = run.sql("SELECT ts_ns, name, series, value FROM counters ORDER BY series").fetchall()
    assert rows == [(BASE + 5_500, "queue", "a", 1.0), (BASE + 5_500, "queue", "b", 2.5)]


def test_args_are_kept_as_json(run):
    args = run.sql("SELECT args->>'$.\"Input Dims\"' FROM events WHERE name = 'aten::addmm'").fetchone()[0]
    assert args == "[[8,4],[4,2]]"


def test_overlapping_slices_are_counted(tmp_path: Path):
    trace = write_trace(tmp_path / "o.json", [X("a", "cpu_op", 0, 10), X("b", "cpu_op", 5, 10), X("c", "cpu_op", 20, 0)])
    run = import_traces(trace, tmp_path / "run")
    q = run.manifest["ranks"][0]["data_quality"]
    assert q["overlapping_slices"] == 1 and q["nonpositive_duration"] == 1


def test_enclosing_parent_is_the_innermost_slice_that_contains_the_event():
    """build.enclosing_parents on random properly nested slices (several tracks, shared start
    times, zero-length slices) against the definition: the shortest slice on the same track that
    starts at or before the event and ends at or after it, other than the event itself (a slice
    of zero length contains nothing)."""
    import numpy as np

    from neuron_explorer.collectors._forest import enclosing_parents

    rng = np.random.default_rng(7)
    for _ in range(60):
        rows = []  # (track, start, end), nested by construction: children inside their parent

        def grow(track, start, end, depth, rows=rows):
            rows.append((track, start, end))
            t = start
            while depth < 5 and t < end and rng.random() < 0.7:
                a = int(rng.integers(t, end + 1))
                b = int(rng.integers(a, end + 1))
                grow(track, a, b, depth + 1)
                t = b + 1 if b > a else b + 1
        for track in range(3):
            t = 0
            for _ in range(int(rng.integers(1, 4))):
                a = t + int(rng.integers(0, 5))
                grow(track, a, a + int(rng.integers(0, 60)), 0)
                t = rows[-1][2] + 1 if rows else 0
                t = max(t, a + 1)
        track = np.array([r[0] for r in rows])
        ts = np.array([r[1] for r in rows])
        end = np.array([r[2] for r in rows])
        dur = end - ts
        order = np.lexsort((-dur, ts))
        track, ts, end, dur = track[order], ts[order], end[order], dur[order]
        can = dur > 0
        got, _ = enclosing_parents(track, ts, end, can)
        for i in range(len(ts)):
            # candidates: earlier rows in (ts, -dur) order on the same track that contain row i
            cands = [j for j in range(i) if track[j] == track[i] and can[j] and ts[j] <= ts[i] and end[j] >= end[i]]
            want = min(cands, key=lambda j: (end[j] - ts[j], -j)) if cands else -1
            assert got[i] == want, (i, got[i], want)


def test_time_order_is_by_start_then_longest_first_and_stable():
    """build.time_order: rows by start time, longer first among equal starts, and rows equal in
    both keep their input order (what np.lexsort((-dur, ts)) gives), on inputs with long sorted
    runs, many ties and random order."""
    import numpy as np

    from neuron_explorer.collectors._forest import time_order

    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 17, 1000, 5000):
        for shape in ("random", "runs", "ties"):
            if shape == "random":
                ts = rng.integers(0, 10**6, n)
            elif shape == "runs":
                ts = np.concatenate([np.sort(rng.integers(0, 10**6, n // 2)), np.sort(rng.integers(0, 10**6, n - n // 2))])
            else:
                ts = rng.integers(0, 5, n)
            dur = rng.integers(-1, 4, n)
            got = time_order(ts, dur)
            want = sorted(range(n), key=lambda i: (ts[i], -dur[i], i))
            assert got.tolist() == want, (n, shape)


def test_a_dispatch_hook_is_no_statement_its_caller_is(tmp_path: Path):
    """A library's tensor subclass hooks every torch call (vLLM's parameters define
    `__torch_function__`): the operator's statement is the code that called it, not the hook's def
    line, which every operator of the model would otherwise share. The hook's frame is kept, marked
    not the user's."""
    events = [
        X("model.py(30): forward", "python_function", 0, 50),
        X("vllm/model_executor/parameter.py(122): __torch_function__", "python_function", 1, 40),
        X("aten::linear", "cpu_op", 2, 30),
        X("mylib/ops.py(7): __torch_dispatch__", "python_function", 60, 20),
        X("aten::add", "cpu_op", 61, 10),
    ]
    run_dir = import_traces(write_trace(tmp_path / "t.json", events, baseTimeNanoseconds=BASE), tmp_path / "run").run_dir
    with open_run(run_dir) as r:
        assert frame(r, ev(r, "aten::linear")["frame_id"]) == ("model.py", 30, "forward", True, "def")
        assert ev(r, "aten::add")["frame_id"] is None  # only a hook above it: no statement
        assert r.sql("SELECT file, is_user FROM frames WHERE function LIKE '__torch_%' ORDER BY 1").fetchall() == [
            ("mylib/ops.py", False), ("vllm/model_executor/parameter.py", False)]


def test_device_work_launched_before_the_trace_began_is_told_apart_from_dropped_events(tmp_path):
    """Kineto keeps device work queued before its host side records: such kernels have no launch in the
    trace and a correlation id below every runtime call's (a100_train_blocking_dtoh: 872 of them, ids
    815091-824946 against a first runtime call at 824968). They were warned about as 'no launch found'
    and noted as '(dropped events?)'. The import counts them apart and says what they are; a kernel
    whose correlation id comes after the first runtime call's and matches none is still the dropped kind.
    Work that starts before the first runtime call was launched before it, with or without an id
    (mtia_inference: 98 of its 102 device events with no launch, all without one; its DMA requests
    with no launch are the device's own and not counted); after it, work with no id is the dropped kind."""
    from neuron_explorer.analyzers.engine import quality_notes
    from neuron_explorer.collectors.chrome_trace import import_traces as imp

    events = [X("ProfilerStep#1", "user_annotation", 0, 100),
              X("aten::mm", "cpu_op", 10, 10, **{"External id": 1}),
              X("cudaLaunchKernel", "cuda_runtime", 12, 2, correlation=50, **{"External id": 1}),
              X("queued_before", "kernel", 5, 10, pid=0, tid=7, stream=7, device=0, correlation=40),
              X("launched", "kernel", 20, 10, pid=0, tid=7, stream=7, device=0, correlation=50),
              X("lost_launch", "kernel", 40, 10, pid=0, tid=7, stream=7, device=0, correlation=60),
              X("queued_no_id", "kernel", 1, 3, pid=0, tid=8, stream=8, device=0),
              X("lost_no_id", "kernel", 60, 3, pid=0, tid=8, stream=8, device=0)]
    result = imp(write_trace(tmp_path / "t.json", events), tmp_path / "run")
    with open_run(result.run_dir) as run:
        dq = run.manifest["ranks"][0]["data_quality"]
        assert (dq["device_events_without_launch"], dq["device_launched_before_trace"]) == (4, 2)
        assert quality_notes(run)[0][0] == "4 device events with no launch (2 launched before the trace began; 2 dropped?)"
    assert any("4 device events with no launch found (2 of them launched before the trace began: their correlation ids precede "
               "its first runtime call's or they start before that call: work queued" in w for w in result.manifest["warnings"])
