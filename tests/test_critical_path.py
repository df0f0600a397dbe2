"""The critical path of a step (analyzers/critical_path.py): hand-built traces whose path is known
from the drawn timeline, every shared trace with steps, and a live CPU recording.

Times in the timelines are microseconds; the expected charges are worked out by hand from them,
following the model in docs/METRICS.md ("Critical path").
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from neuron_explorer.analyzers import critical_path as cp
from neuron_explorer.analyzers.metrics import span
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import open_run

from .conftest import TRACES, X, cli, real_traces, write_trace

pytestmark = pytest.mark.slow  # tier: records a real torch run

US = 1000


def _path(tmp_path: Path, events: list[dict]):
    run_dir = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        rows = cp.rank_path(run, 0)
        names = dict(run.sql("SELECT event_id, name FROM events").fetchall())
        bound = cp.bound(run, 0)
    return [(names.get(r["event_id"]), r["category"], r["charged_ns"]) for r in rows], rows, bound


def _by(items) -> dict:
    """(event name, category) → charged ns, summed."""
    out: dict = {}
    for name, cat, ns in items:
        out[(name, cat)] = out.get((name, cat), 0) + ns
    return out


def _k(name, cat, corr, ts, dur, stream=7, **args):
    return X(name, cat, ts, dur, pid=0, tid=stream, correlation=corr, stream=stream, device=0, **args)


def test_host_bound_loop_of_tiny_kernels(tmp_path):
    """Three tiny kernels; the device waits for the host every time, and the host never waits.

        host  0                                                                         100
        ProfilerStep#1 [=============================================================]
        aten::add        [10 ---- 20)      [30 ---- 40)      [50 ---- 60)
          cudaLaunchKernel  [14-18) c1        [34-38) c2        [54-58) c3
        stream 7                [19-21)           [39-41)           [59-61)

    The path stays on the host: 12 µs in launches, 18 in aten::add outside them, and the 70 µs
    between operators (and after the last) as host time outside every traced call.
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 100)]
    for i, t in enumerate((10, 30, 50), 1):
        events += [X("aten::add", "cpu_op", t, 10, **{"External id": i}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 4, 4, correlation=i, **{"External id": i}),
                   _k("elementwise_kernel", "kernel", i, t + 9, 2)]
    items, rows, bound = _path(tmp_path, events)
    assert _by(items) == {(None, "host_compute"): 70 * US, ("aten::add", "host_compute"): 18 * US,
                          ("cudaLaunchKernel", "launch_overhead"): 12 * US}
    assert sum(r["charged_ns"] for r in rows) == 100 * US
    assert bound["overall"]["bound"] == "host" and bound["overall"]["words"] == "host-bound (100%): CPU operators and Python"


def test_device_bound_gemm_chain(tmp_path):
    """Three 300 µs GEMMs back to back, then the host waits for them.

        host  0                                                                          1000
        ProfilerStep#1 [===============================================================]
        aten::mm  [10-20) [20-30) [30-40)
          launch    [12-16) [22-26) [32-36)   c1, c2, c3
        cudaDeviceSynchronize       [50 ------------------------------------ 925)
        stream 7           [20 --- k1 --- 320)[320 --- k2 --- 620)[620 --- k3 --- 920)

    From the end: 75 µs of host after the sync; the sync's own 5 µs after k3 ended; k3, k2, k1
    (900 µs, each waiting on the previous one on the stream); 4 µs idle before k1 waiting for its
    launch (launch ended at 16, k1 started at 20); the launch (4), aten::mm before it (2), and
    10 µs of host before that.
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000)]
    for i, t in enumerate((10, 20, 30), 1):
        events += [X("aten::mm", "cpu_op", t, 10, **{"External id": i}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 2, 4, correlation=i, **{"External id": i}),
                   _k(f"sgemm_{i}", "kernel", i, 20 + 300 * (i - 1), 300)]
    events.append(X("cudaDeviceSynchronize", "cuda_runtime", 50, 875, correlation=9))
    items, rows, bound = _path(tmp_path, events)
    assert _by(items) == {(None, "host_compute"): 85 * US, ("cudaDeviceSynchronize", "launch_overhead"): 5 * US,
                          ("sgemm_3", "device_compute"): 300 * US, ("sgemm_2", "device_compute"): 300 * US,
                          ("sgemm_1", "device_compute"): 300 * US, ("sgemm_1", "idle"): 4 * US,
                          ("cudaLaunchKernel", "launch_overhead"): 4 * US, ("aten::mm", "host_compute"): 2 * US}
    idle = [r for r in rows if r["category"] == "idle"]
    assert [(r["ts_ns"], r["cause"]) for r in idle] == [(16 * US, "waiting for its launch")]
    assert bound["overall"]["words"] == "device-bound (90%): device compute"


def test_sync_in_the_middle_of_the_step(tmp_path):
    """`.item()` halfway: the host waits for a kernel and a copy, then goes on alone.

        host  0                                                                         200
        ProfilerStep#1 [=============================================================]
        aten::mm   [10-20)  launch [12-16) c1
        aten::item           [30 -------------------------------- 110)
          cudaMemcpyAsync      [32-36) c2
          cudaStreamSynchronize    [40 -------------------------- 105) c3  (Stream Sync on stream 7)
        aten::add                                                      [120-130) launch [122-126) c4
        stream 7        [20 ------ mm_kernel ------ 100)[100-102) D2H copy   [127-140) add_kernel

    From the end: 70 µs of host after aten::add; aten::add (6) and its launch (4); 10 µs of host;
    aten::item's own 5 µs after the sync; the sync's 3 µs after the copy; the copy (2) and the
    GEMM before it on the stream (80); 4 µs idle waiting for the GEMM's launch; the launch (4),
    aten::mm (2) and 10 µs of host. add_kernel runs after the step's host work and is not on the path.
    """
    events = [
        X("ProfilerStep#1", "user_annotation", 0, 200),
        X("aten::mm", "cpu_op", 10, 10, **{"External id": 1}),
        X("cudaLaunchKernel", "cuda_runtime", 12, 4, correlation=1, **{"External id": 1}),
        X("aten::item", "cpu_op", 30, 80, **{"External id": 2}),
        X("cudaMemcpyAsync", "cuda_runtime", 32, 4, correlation=2, **{"External id": 2}),
        X("cudaStreamSynchronize", "cuda_runtime", 40, 65, correlation=3, **{"External id": 2}),
        X("aten::add", "cpu_op", 120, 10, **{"External id": 4}),
        X("cudaLaunchKernel", "cuda_runtime", 122, 4, correlation=4, **{"External id": 4}),
        _k("mm_kernel", "kernel", 1, 20, 80),
        _k("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 2, 100, 2),
        _k("Stream Sync", "cuda_sync", 3, 41, 63, cuda_sync_kind="Stream Sync"),
        _k("add_kernel", "kernel", 4, 127, 13),
    ]
    items, rows, bound = _path(tmp_path, events)
    assert _by(items) == {(None, "host_compute"): 90 * US, ("aten::add", "host_compute"): 6 * US,
                          ("cudaLaunchKernel", "launch_overhead"): 8 * US, ("aten::item", "host_compute"): 5 * US,
                          ("cudaStreamSynchronize", "launch_overhead"): 3 * US,
                          ("Memcpy DtoH (Device -> Pageable)", "memcpy"): 2 * US, ("mm_kernel", "device_compute"): 80 * US,
                          ("mm_kernel", "idle"): 4 * US, ("aten::mm", "host_compute"): 2 * US}
    shares = bound["overall"]["shares"]
    assert shares["device_compute"] == 0.4 and shares["memcpy"] == 0.01 and shares["idle"] == 0.02


_CUDA_WAIT = ("kernel", "cuda_runtime", "cudaLaunchKernel", "cudaEventRecord", "cudaStreamWaitEvent", "cudaDeviceSynchronize")
_MTIA_WAIT = ("mtia_ccp_events", "mtia_runtime", "gif_merge", "recordEvent", "enqueueCommand waitOnEvent", "synchronize")


def _stream_wait_record(how: tuple) -> dict:
    if how is _CUDA_WAIT:
        return _k("Stream Wait Event", "cuda_sync", 3, 28, 0.5, stream=9, cuda_sync_kind="Stream Wait Event", wait_on_stream=7)
    # MTIA's queue waits for another queue's event: an `event_wait` among its device events, held while it waits
    return X("event_wait", "mtia_ccp_events", 28, 92, pid=0, tid=9, stream=9, wait_on_stream=7, device=0)


@pytest.mark.parametrize("how", [_CUDA_WAIT, _MTIA_WAIT], ids=["cuda", "mtia"])
def test_two_streams_follow_the_recorded_stream_wait(tmp_path, how):
    """A kernel on stream 9 waits (cudaStreamWaitEvent; on MTIA an `event_wait` on its queue) for a kernel on stream 7.

        host  0                                                                          300
        ProfilerStep#1 [===============================================================]
        aten::a [10-20) launch [12-16) c1
          cudaEventRecord [22-24) c2   cudaStreamWaitEvent [26-28) c3
        aten::b           [30-40) launch [32-36) c4
        cudaDeviceSynchronize          [50 ------------------------------ 205) c5
        stream 7        [20 ------ kA ------ 120)
        stream 9   (Stream Wait Event on 7 at 28)  [120 ---- kB ---- 200)

    kB's launch ended at 36 but it started at 120, when kA ended: the path goes from kB to kA
    (stream 9 waited for stream 7), not to kB's launch. From the end: 95 µs of host, the sync's
    5 µs after kB, kB (80), kA (100), 4 µs idle before kA, its launch (4), aten::a (2), 10 µs host.
    """
    kernel, runtime, launch, record, wait, sync = how
    events = [
        X("ProfilerStep#1", "user_annotation", 0, 300),
        X("aten::a", "cpu_op", 10, 10, **{"External id": 1}),
        X(launch, runtime, 12, 4, correlation=1, **{"External id": 1}),
        X(record, runtime, 22, 2, correlation=2),
        X(wait, runtime, 26, 2, correlation=3),
        X("aten::b", "cpu_op", 30, 10, **{"External id": 4}),
        X(launch, runtime, 32, 4, correlation=4, **{"External id": 4}),
        X(sync, runtime, 50, 155, correlation=5),
        _k("kA", kernel, 1, 20, 100),
        _stream_wait_record(how),
        _k("kB", kernel, 4, 120, 80, stream=9),
    ]
    items, rows, bound = _path(tmp_path, events)
    assert _by(items) == {(None, "host_compute"): 105 * US, (sync, "launch_overhead"): 5 * US,
                          ("kB", "device_compute"): 80 * US, ("kA", "device_compute"): 100 * US, ("kA", "idle"): 4 * US,
                          (launch, "launch_overhead"): 4 * US, ("aten::a", "host_compute"): 2 * US}
    assert [r["ts_ns"] for r in rows] == sorted(r["ts_ns"] for r in rows)
    assert bound["overall"]["bound"] == "device"


def test_a_kernel_that_waits_while_another_stream_computes_is_not_idle(tmp_path):
    """No record says why kS waited: its launch ended at 44, but it started at 600, when the big
    kernel on stream 8 left the device (MTIA's inference trace: its queues' work waits so, and the
    path read idle-bound (46%) while the device computed 91.7% of the span).

        host  0                                                                          700
        ProfilerStep#1 [===============================================================]
        aten::big [10-30) launch [20-24) c1     aten::small [36-48) launch [40-44) c2
        cudaDeviceSynchronize                        [50 ---------------------------- 612) c3
        stream 8        [30 ---------------- kBig ----------------- 600)
        stream 7                                                          [600 - kS - 610)

    From the end: 88 µs of host, the sync's own 2 µs after kS, kS (10), then the 556 µs from kS's
    launch to its start, charged to kBig (the device computing on stream 8: not idle), kS's launch
    (4), aten::small (4), 6 µs of host, aten::big (16) and its launch (4), 10 µs of host: 566 of
    700 µs on the device."""
    events = [
        X("ProfilerStep#1", "user_annotation", 0, 700),
        X("aten::big", "cpu_op", 10, 20, **{"External id": 1}),
        X("cudaLaunchKernel", "cuda_runtime", 20, 4, correlation=1, **{"External id": 1}),
        X("aten::small", "cpu_op", 36, 12, **{"External id": 2}),
        X("cudaLaunchKernel", "cuda_runtime", 40, 4, correlation=2, **{"External id": 2}),
        X("cudaDeviceSynchronize", "cuda_runtime", 50, 562, correlation=3),
        _k("kBig", "kernel", 1, 30, 570, stream=8),
        _k("kS", "kernel", 2, 600, 10),
    ]
    items, rows, bound = _path(tmp_path, events)
    assert _by(items) == {(None, "host_compute"): (88 + 6 + 10) * US, ("cudaDeviceSynchronize", "launch_overhead"): 2 * US,
                          ("kS", "device_compute"): 10 * US, ("kBig", "device_compute"): 556 * US,
                          ("cudaLaunchKernel", "launch_overhead"): 8 * US, ("aten::small", "host_compute"): 4 * US,
                          ("aten::big", "host_compute"): 16 * US}
    (big,) = [r for r in rows if r["charged_ns"] == 556 * US]
    assert big["cause"] == "a kernel ran on another stream while the path's device work waited"
    assert sum(r["charged_ns"] for r in rows) == 700 * US
    assert bound["overall"]["words"] == "device-bound (81%): device compute"


def test_step_that_ends_while_its_kernels_still_run_is_charged_to_them(tmp_path):
    """The host finishes launching and ends the step while the device still works through the queue.

        host  0                                                        200
        ProfilerStep#1 [=================================================]
        aten::mm [10-20) launch [12-16) c1    aten::mm [30-40) launch [32-36) c2
        stream 7          [20 ----------- k1 ----------- 150)[150 ---- k2 ----|---- 260)

    k2 runs at the step's end, so the path starts on it: k2 (50 up to the end), k1 (130), 4 µs idle
    waiting for k1's launch, the launch (4), aten::mm (2), 10 µs host.
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 200)]
    for i, (t, k_ts, k_dur) in enumerate(((10, 20, 130), (30, 150, 110)), 1):
        events += [X("aten::mm", "cpu_op", t, 10, **{"External id": i}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 2, 4, correlation=i, **{"External id": i}),
                   _k(f"k{i}", "kernel", i, k_ts, k_dur)]
    items, rows, bound = _path(tmp_path, events)
    assert _by(items) == {("k2", "device_compute"): 50 * US, ("k1", "device_compute"): 130 * US, ("k1", "idle"): 4 * US,
                          ("cudaLaunchKernel", "launch_overhead"): 4 * US, ("aten::mm", "host_compute"): 2 * US,
                          (None, "host_compute"): 10 * US}
    assert bound["overall"]["words"] == "device-bound (90%): device compute"


def _collective_then_queued(queued: bool) -> list[dict]:
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    events = [X("ProfilerStep#1", "user_annotation", 0, 200),
              X("aten::mm", "cpu_op", 10, 10, **{"External id": 1}),
              X("cudaLaunchKernel", "cuda_runtime", 12, 4, correlation=1, **{"External id": 1}),
              _k("k1", "kernel", 1, 20, 130),
              X("c10d::allreduce_", "cpu_op", 30, 10, **{"External id": 2}),
              X("cudaLaunchKernel", "cuda_runtime", 32, 4, correlation=2, **{"External id": 2}),
              _k(nccl, "kernel", 2, 40, 220, stream=9)]
    if queued:  # launched at 52-56, still waiting on its stream when the step ends
        events += [X("aten::add", "cpu_op", 50, 10, **{"External id": 3}),
                   X("cudaLaunchKernel", "cuda_runtime", 52, 4, correlation=3, **{"External id": 3}),
                   _k("k2", "kernel", 3, 270, 20)]
    return events


def test_step_that_ends_in_a_collective_with_work_queued_behind_it_is_charged_to_it(tmp_path):
    """The host ran ahead: when the step ends, an all-reduce runs and a kernel launched long before
    still waits on its stream. The step is the device's (here the collective's), not the host's.

        host  0                                                                   200
        ProfilerStep#1 [============================================================]
        aten::mm [10-20) launch [12-16) c1; c10d::allreduce_ [30-40) launch [32-36) c2;
        aten::add [50-60) launch [52-56) c3
        stream 7     [20 ------ k1 ------ 150)                                         [270 k2 290)
        stream 9          [40 ------------------- all-reduce ----------------------|----- 260)

    From the end: the all-reduce back to its start (160), the 4 µs it waited after its launch (k1
    computing then: k1's, not idle), the launch (4), then the host: c10d::allreduce_ (2), 10 µs,
    aten::mm (4 + 2), k1's launch (4), 10 µs.
    """
    items, rows, bound = _path(tmp_path, _collective_then_queued(queued=True))
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    assert _by(items) == {(nccl, "communication"): 160 * US, ("k1", "device_compute"): 4 * US,
                          ("cudaLaunchKernel", "launch_overhead"): 8 * US, ("c10d::allreduce_", "host_compute"): 2 * US,
                          ("aten::mm", "host_compute"): 6 * US, (None, "host_compute"): 20 * US}
    assert bound["overall"]["words"].startswith("device-bound (82%)")


def test_step_that_ends_in_a_collective_with_nothing_queued_stays_on_the_host(tmp_path):
    """The same step with no work waiting behind the all-reduce: it may be spinning for other ranks
    while the host goes on, so the path starts on the host (docs/METRICS.md "Critical path")."""
    items, rows, bound = _path(tmp_path, _collective_then_queued(queued=False))
    assert ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication") not in _by(items)
    assert bound["overall"]["words"].startswith("host-bound")


def test_a_ddp_step_ending_in_an_all_reduce_the_host_ran_ahead_of_is_the_communications(tmp_path):
    """mi300x_ddp_resnet_act_checkpoint (DDP on an MI300X, bf16): ProfilerStep#17 ends while an
    all-reduce runs on stream 4 and a copy the host launched 33 ms before still waits on stream 0.
    The step was the device's: the all-reduces ran through it back to back (it was charged to the
    host when a collective at the step's end was always left out)."""
    run_dir = import_traces(TRACES / "mi300x_ddp_resnet_act_checkpoint.json.gz", tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        step = {s["step"]: s for s in cp.bound(run, 0)["steps"]}[17]
    assert sum(step["ns"].values()) == step["dur_ns"]
    assert step["words"] == "device-bound (100%): communication"


def test_device_work_with_no_launch_after_a_gap_returns_to_the_host(tmp_path):
    """Kernels whose launches were not recorded: after a 40 µs gap nothing says what kB waited for.

        host  0                                               100
        ProfilerStep#1 [===========================================]
        cudaDeviceSynchronize          [30 ----------------- 95)
        stream 7      [10-20) kA                [60 --- kB --- 90)      (no launch, no correlation)

    From the end: 5 µs host; the sync's 5 µs after kB; kB (30); no predecessor for kB (its stream's
    previous work ended 40 µs before, beyond UNLINKED_GAP_MAX_NS), so back to the host at 60: the
    sync (30 → 60, it waited for nothing recorded yet), then 30 µs of host. kA is not on the path.
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 100),
              X("cudaDeviceSynchronize", "cuda_runtime", 30, 65, correlation=5),
              X("kA", "kernel", 10, 10, pid=0, tid=7, stream=7, device=0),
              X("kB", "kernel", 60, 30, pid=0, tid=7, stream=7, device=0)]
    items, rows, bound = _path(tmp_path, events)
    assert _by(items) == {(None, "host_compute"): 35 * US, ("cudaDeviceSynchronize", "launch_overhead"): 35 * US,
                          ("kB", "device_compute"): 30 * US}


def test_device_work_launched_before_the_trace_began_follows_its_stream(tmp_path):
    """The same step, with the kernels' correlation ids (2, 3) below the runtime call's (5): their
    launches precede every runtime call the trace holds, so they were launched before the trace's host
    side began recording (Kineto keeps the device work queued before; mi300x_ddp_resnet_act_checkpoint's
    steps 15-16, a100_train_blocking_dtoh's step 550). The host did not hold kB back: the path follows
    its stream, the 40 µs gap is the device's idle, then kA, and only then the host.

    From the end: 5 µs host; the sync's 5 µs after kB; kB (30); the gap 20 → 60 idle (40); kA (10);
    10 µs of host before it."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 100),
              X("cudaDeviceSynchronize", "cuda_runtime", 30, 65, correlation=5),
              X("kA", "kernel", 10, 10, pid=0, tid=7, stream=7, device=0, correlation=2),
              X("kB", "kernel", 60, 30, pid=0, tid=7, stream=7, device=0, correlation=3)]
    items, rows, bound = _path(tmp_path, events)
    assert _by(items) == {(None, "host_compute"): 15 * US, ("cudaDeviceSynchronize", "launch_overhead"): 5 * US,
                          ("kB", "device_compute"): 30 * US, ("kB", "idle"): 40 * US, ("kA", "device_compute"): 10 * US}


def test_a_ddp_run_whose_first_steps_ran_work_launched_before_the_trace_is_the_communications(tmp_path):
    """mi300x_ddp_resnet_act_checkpoint: the device of steps 15-16 ran 968 events launched before the trace
    began (correlations 4066-5178; the first runtime call is 5179), its all-reduces among them. The path
    returned to the host at each and read the rank 'host-bound (61%)' while the device was busy 95% of
    the steps' time: every step is now the device's, communication first."""
    run_dir = import_traces(TRACES / "mi300x_ddp_resnet_act_checkpoint.json.gz", tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        b = cp.bound(run, 0)
    assert [s["words"].split(" (")[0] for s in b["steps"]] == ["device-bound"] * 3
    assert b["overall"]["words"].startswith("device-bound") and b["overall"]["words"].endswith(": communication")


def _shared_runs() -> list[Path]:
    runs = list(real_traces())
    if (TRACES / "multirank_128").is_dir():
        runs.append(TRACES / "multirank_128")
    return runs


@pytest.mark.parametrize("trace", _shared_runs(), ids=lambda p: p.name)
def test_path_length_equals_step_duration_on_shared_traces(trace):
    with open_run(trace) as run:
        steps = run.sql("SELECT rank, step, ts_ns, dur_ns FROM steps ORDER BY 1, 2").fetchall()
        if not steps:  # no step: no step's path; a rank with device work has one over its span, which it tiles
            for (r,) in run.sql("SELECT DISTINCT rank FROM events").fetchall():
                assert cp.rank_path(run, r) == []
                window, overall = cp.window_of(run, r), cp.bound(run, r)["overall"]
                if not window:
                    assert overall is None
                    continue
                ((_, ts, dur, *_),) = window
                path = cp.window_path(run, r)
                spans = sorted(zip(path.ts.tolist(), (path.ts + path.ns).tolist()))
                assert spans[0][0] == ts and spans[-1][1] == ts + dur and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
                assert overall["over"] == "window" and overall["dur_ns"] == dur == span(run, r)["span_ns"]
            return
        for rank in sorted({s[0] for s in steps}):
            rows = cp.rank_path(run, rank)
            for _, step, ts, dur in (s for s in steps if s[0] == rank):
                mine = [r for r in rows if r["step"] == step]
                assert sum(r["charged_ns"] for r in mine) == dur, (rank, step)
                assert all(r["charged_ns"] > 0 and ts <= r["ts_ns"] and r["ts_ns"] + r["charged_ns"] <= ts + dur for r in mine)
                spans = sorted((r["ts_ns"], r["ts_ns"] + r["charged_ns"]) for r in mine)
                assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "segments must tile the step"
                assert {r["category"] for r in mine} <= set(cp.CATEGORIES)


def test_items_per_step_are_the_same_counted_in_a_table_or_by_sorting(monkeypatch):
    """`path_items` counts each item's steps and sums its ns per step in an item x step table where
    that fits (`DENSE_CELLS`), else by sorting the rows' cells: on every shared trace with steps the
    items are the same either way, and their per-step ns add up to their charged ns."""
    checked = []
    for trace in _shared_runs():
        with open_run(trace) as run:
            rank = run.sql("SELECT min(rank) FROM steps").fetchone()[0]
            if rank is None:  # no steps, no path
                continue
            path = cp.path_of(run, rank)
            monkeypatch.setattr(cp, "DENSE_CELLS", 50_000_000)
            table = cp.path_items(run, path, by_step=True)
            monkeypatch.setattr(cp, "DENSE_CELLS", 0)
            sorted_ = cp.path_items(run, path, by_step=True)
        assert table == sorted_, trace.name
        assert all(sum(it["step_ns"].values()) == pytest.approx(it["charged_ns"], abs=len(it["step_ns"])) for it in table)
        assert all(it["steps"] == len(it["step_ns"]) for it in table)
        checked.append(max(it["steps"] for it in table))
    assert len(checked) >= 5 and max(checked) > 1


LOOP = """\
    import torch
    from torch import nn

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32)
    for step in range(6):
        loss = model(x).pow(2).mean()  # forward
        loss.backward()
        opt.step()
        opt.zero_grad()
"""


def test_live_cpu_recording_is_host_bound_on_its_lines(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(LOOP))
    r = cli("record", "-o", tmp_path / "run", script)
    assert r.returncode == 0, r.stderr
    with open_run(tmp_path / "run") as run:
        b = cp.bound(run, 0)
        rows = cp.rank_path(run, 0)
        durs = dict(run.sql("SELECT step, dur_ns FROM steps WHERE rank = 0").fetchall())
        on_script = run.sql(f"""SELECT count(*) FROM frames WHERE file = '{script}' AND frame_id IN
            ({', '.join(str(r['source_frame_id']) for r in rows if r['source_frame_id'] is not None) or 'NULL'})""").fetchone()[0]
    assert len(b["steps"]) == len(durs) >= 4
    assert all(s["bound"] == "host" for s in b["steps"]), [s["words"] for s in b["steps"]]
    assert {r["category"] for r in rows} <= {"host_compute", "input_pipeline"}
    assert {s["step"]: s["dur_ns"] for s in b["steps"]} == durs
    assert on_script >= 2  # the forward statement and others of the script are on the path


def test_analyze_writes_the_path_and_says_what_bounds_the_steps(tmp_path):
    """The GEMM chain of test_device_bound_gemm_chain, analysed: the table, the summary and the text."""
    import pyarrow.parquet as pq

    from neuron_explorer.analyzers import analyze
    from neuron_explorer.analyzers.render import text

    events = [X("ProfilerStep#1", "user_annotation", 0, 1000)]
    for i, t in enumerate((10, 20, 30), 1):
        events += [X("aten::mm", "cpu_op", t, 10, **{"External id": i}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 2, 4, correlation=i, **{"External id": i}),
                   _k(f"sgemm_{i}", "kernel", i, 20 + 300 * (i - 1), 300)]
    events.append(X("cudaDeviceSynchronize", "cuda_runtime", 50, 875, correlation=9))
    run_dir = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    report = analyze(run_dir)
    table = pq.read_table(run_dir / "analysis" / "critical_path.parquet").to_pylist()
    assert sum(r["charged_ns"] for r in table) == 1000 * US
    assert [r["seq"] for r in table] == list(range(len(table)))
    by_cat: dict = {}
    for r in table:
        by_cat[r["category"]] = by_cat.get(r["category"], 0) + r["charged_ns"]
    assert by_cat == {"device_compute": 900 * US, "host_compute": 87 * US, "launch_overhead": 9 * US, "idle": 4 * US}
    bound = report.summary["ranks"][0]["bound"]
    assert bound["overall"]["ns"]["device_compute"] == 900 * US and bound["steps"][0]["bound"] == "device"
    assert "bound: device-bound (90%): device compute" in text(report)


# ---- a rank with no profiler steps: what bounds it, over its span ----------------------------------

def _queued_gemms() -> list[dict]:
    """test_device_bound_gemm_chain's three GEMMs with no ProfilerStep range and no sync: a server's
    decode loop, which queues the work and goes back to its own (untraced) loop."""
    events = []
    for i, t in enumerate((10, 20, 30), 1):
        events += [X("aten::mm", "cpu_op", t, 10, **{"External id": i}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 2, 4, correlation=i, **{"External id": i}),
                   _k(f"sgemm_{i}", "kernel", i, 20 + 300 * (i - 1), 300)]
    return events


def _window_bound(tmp_path: Path, events: list[dict]):
    from neuron_explorer.analyzers import analyze
    from neuron_explorer.analyzers.render import text

    run_dir = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    report = analyze(run_dir, write=False)
    rank = report.summary["ranks"][0]
    return rank, rank["bound"], " ".join(text(report).split()), run_dir


def test_a_loop_without_steps_that_queues_its_gemms_is_device_bound_over_its_span(tmp_path):
    """
        host      aten::mm [10-20) [20-30) [30-40), launches [12-16) [22-26) [32-36)
        stream 7           [20 --- k1 --- 320)[320 --- k2 --- 620)[620 --- k3 --- 920)

    The span (the analysed window) is [10, 920) µs. The span ends with k3, so the walk starts on it:
    900 µs of GEMMs, 4 µs idle before k1 waiting for its launch, the launch (4) and aten::mm before
    it (2). Started on the host at 920 instead, it would charge the host's 880 µs after its last
    call (its untraced wait for the GEMMs) as host time: 'host-bound (97%)'."""
    rank, bound, report_text, _ = _window_bound(tmp_path, _queued_gemms())
    o = bound["overall"]
    assert rank["steps"]["count"] == 0 and bound["steps"] == [] and o["over"] == "window"
    assert o["dur_ns"] == rank["analysed_ns"] == rank["span_ns"] == 910 * US
    assert {c: ns for c, ns in o["ns"].items() if ns} == {"device_compute": 900 * US, "idle": 4 * US,
                                                         "launch_overhead": 4 * US, "host_compute": 2 * US}
    assert o["words"] == "device-bound (99%): device compute"
    assert "bound: device-bound (99%): device compute (critical path over the span, no profiler steps: compute 99%)" in report_text


def test_a_loop_without_steps_of_tiny_kernels_is_host_bound_over_its_span(tmp_path):
    """test_host_bound_loop_of_tiny_kernels with no ProfilerStep range: the span is [10, 61) µs.
    It ends with the third kernel (2 µs), which waited 1 µs for its launch; then the host: 12 µs
    of launches, 16 in aten::add outside them, 20 between the operators."""
    events = []
    for i, t in enumerate((10, 30, 50), 1):
        events += [X("aten::add", "cpu_op", t, 10, **{"External id": i}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 4, 4, correlation=i, **{"External id": i}),
                   _k("elementwise_kernel", "kernel", i, t + 9, 2)]
    rank, bound, report_text, _ = _window_bound(tmp_path, events)
    o = bound["overall"]
    assert o["dur_ns"] == rank["analysed_ns"] == 51 * US
    assert {c: ns for c, ns in o["ns"].items() if ns} == {"device_compute": 2 * US, "idle": 1 * US,
                                                         "launch_overhead": 12 * US, "host_compute": 36 * US}
    assert o["words"] == "host-bound (94%): CPU operators and Python"
    assert "bound: host-bound (94%): CPU operators and Python (critical path over the span, no profiler steps:" in report_text
    # no critical-path finding names a window's items: the verdict does, its three heaviest
    assert [(h["category"], h["item"], h["ns"]) for h in o["heaviest"]] == [
        ("host_compute", None, 20 * US), ("host_compute", "aten::add", 16 * US), ("launch_overhead", "aten::add", 12 * US)]
    assert ("; heaviest on it: host time outside every traced call 20.00 µs, aten::add 16.00 µs, aten::add (runtime calls) "
            "12.00 µs") in report_text


@pytest.mark.parametrize("first_call, words", [
    ("cudaDeviceGetStreamPriorityRange", "host-bound (100%): runtime calls other than launches: cudaDeviceGetStreamPriorityRange 89%"),
    ("cudaLaunchKernel", "host-bound (100%): a kernel's first launch, loading its code: cudaLaunchKernel 89%"),
    ("cudaGraphLaunch", "host-bound (100%): launch overhead")])
def test_a_scripts_first_cuda_call_is_named_not_called_launch_overhead(tmp_path, first_call, words):
    """A script's first CUDA call creates the device's context (cuda_alexnet_train: 29.9 s in
    cudaDeviceGetStreamPriorityRange under the first aten::to, then a copy and one add):

        host  aten::to [0 --------------------------------------- 1000)  aten::add [1000 - 1010)
                 first_call [5 ------ 905)  cudaMemcpyAsync [910-920)       cudaLaunchKernel [1004-1008)
        stream 7                                  memcpy [921-925)                    kernel [1009-1011)

    The span [0, 1011) µs ends with the kernel: 2 µs of it, 1 µs idle for its launch, then the host:
    runtime calls 900 + 10 + 4 µs, aten::to and aten::add outside them 94. The runtime calls were
    89% (900 of 1011 µs) the first call: the words name it, not "launch overhead". Where it is
    itself a launch, one launch holding most of the runtime time is a kernel's first launch loading
    its code (a one-off): the words say that, not "launch overhead" either; a graph's launch is paid
    at every replay, no one-off: launch overhead."""
    events = [X("aten::to", "cpu_op", 0, 1000, **{"External id": 1}),
              X(first_call, "cuda_runtime", 5, 900, **{"External id": 1}),
              X("cudaMemcpyAsync", "cuda_runtime", 910, 10, correlation=1, **{"External id": 1}),
              _k("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 1, 921, 4),
              X("aten::add", "cpu_op", 1000, 10, **{"External id": 2}),
              X("cudaLaunchKernel", "cuda_runtime", 1004, 4, correlation=2, **{"External id": 2}),
              _k("elementwise_kernel", "kernel", 2, 1009, 2)]
    rank, bound, report_text, _ = _window_bound(tmp_path, events)
    o = bound["overall"]
    assert {c: ns for c, ns in o["ns"].items() if ns} == {"device_compute": 2 * US, "idle": 1 * US,
                                                         "launch_overhead": 914 * US, "host_compute": 94 * US}
    assert o["top_category"] == "launch_overhead" and o["words"] == words
    assert f"bound: {words} (critical path over the span, no profiler steps: host 9%, runtime 90%)" in report_text


def test_many_launches_are_launch_overhead(tmp_path):
    """Ten adds of 10 µs, each launching a 1 µs kernel through an 8 µs cudaLaunchKernel: the span
    [0, 100) µs has 80 µs of launches, none of them most of the rest (the one-off words are for one
    call holding half): "launch overhead", the cost of every launch."""
    events = []
    for i in range(10):
        t = 10 * i
        events += [X("aten::add", "cpu_op", t, 10, **{"External id": i + 1}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 1, 8, correlation=i + 1, **{"External id": i + 1}),
                   _k("elementwise_kernel", "kernel", i + 1, t + 9.5, 0.5)]
    rank, bound, report_text, _ = _window_bound(tmp_path, events)
    o = bound["overall"]
    assert o["ns"]["launch_overhead"] == 80 * US and o["words"] == "host-bound (99%): launch overhead"


@pytest.mark.parametrize("late_us, words, cause", [
    (3000, "idle-bound (100%): device work queued behind work the trace does not show",
     "waiting behind work the trace does not show"),
    (900, "idle-bound (99%): device idle", "waiting for its launch")])
def test_a_kernel_queued_long_after_its_launch_waited_behind_unseen_work(tmp_path, late_us, words, cause):
    """An inference server's scheduler (mi300x_sglang_qwen3_decode's shape): its stream waits on an
    event (cudaStreamWaitEvent at 8 µs) of work launched before the trace began; aten::add's launch
    returns at 14 µs and the kernel starts `late_us` later (2 µs), while the host waits in a sync.
    Nothing the trace holds ran on the device meanwhile. The span [8, 16 + late_us) µs: the kernel 2 µs,
    the gap, the launch's 2 µs, aten::add's 2 µs before it and the wait call's 2 µs. A gap of 1 ms or more after the launch returned is no launch
    latency: its cause and the bound's words say the work waited behind work the trace does not show;
    a shorter one stays a device idle waiting for its launch."""
    events = [X("cudaStreamWaitEvent", "cuda_runtime", 8, 2),
              X("aten::add", "cpu_op", 10, 6, **{"External id": 1}),
              X("cudaLaunchKernel", "cuda_runtime", 12, 2, correlation=1, **{"External id": 1}),
              _k("elementwise_kernel", "kernel", 1, 14 + late_us, 2),
              X("cudaDeviceSynchronize", "cuda_runtime", 16, late_us, correlation=9)]
    rank, bound, report_text, run_dir = _window_bound(tmp_path, events)
    o = bound["overall"]
    assert o["dur_ns"] == rank["analysed_ns"] == (late_us + 8) * US
    assert {c: ns for c, ns in o["ns"].items() if ns} == {"device_compute": 2 * US, "idle": late_us * US,
                                                         "launch_overhead": 4 * US, "host_compute": 2 * US}
    assert o["words"] == words and f"bound: {words} (critical path over the span" in report_text
    with open_run(run_dir) as run:
        path = cp.window_path(run, 0)
        (idle,) = [path.causes[c] for c, k in zip(path.cause, path.category) if k == cp.CATEGORIES.index("idle")]
    assert idle == cause


@pytest.mark.parametrize("copy_beside, cause", [(False, "waiting behind work the trace does not show"),
                                                 (True, "gap after the previous work on its stream")])
def test_a_graphs_node_that_waits_with_nothing_running_waited_behind_unseen_work(tmp_path, copy_beside, cause):
    """a100_train_blocking_dtoh's shape: a CUDA graph launched at 10 µs runs a kernel on stream 7 at
    20-30 µs, then its memset at 3,030 µs: 3 ms after the stream's previous work, with nothing the
    trace holds running on the device (a graph's dependency the trace does not show), while the host
    waits in a blocking copy. That gap's cause is the unseen work. With a copy running on another
    stream through the gap (work the trace shows, which the memset may have waited for), it stays
    the stream's gap."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 3100),
              X("cudaGraphLaunch", "cuda_runtime", 10, 5, correlation=1),
              _k("elementwise_kernel", "kernel", 1, 20, 10),
              _k("Memset (Device)", "gpu_memset", 1, 3030, 2),
              X("aten::to", "cpu_op", 20, 3060, **{"External id": 5}),
              X("cudaMemcpyAsync", "cuda_runtime", 21, 3058, correlation=5, **{"External id": 5}),
              _k("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 5, 3070, 5)]
    if copy_beside:
        events.append(_k("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 9, 40, 2990, stream=9))
    _, path, _ = _path(tmp_path, events)
    idle = [r for r in path if r["category"] == "idle" and r["charged_ns"] >= 1000 * US]
    assert [(r["ts_ns"], r["charged_ns"], r["cause"]) for r in idle] == [(30 * US, 3000 * US, cause)]


def test_a_window_path_is_not_handed_over_as_the_steps_path(tmp_path):
    """The dashboard's analysis child hands the paths it computed to the server (computed_paths ->
    adopt_paths), which reads them as each rank's steps' path: a stepless rank's window path must not
    go as one (the Overview's top lists would read it as the steps' critical path)."""
    _, bound, _, run_dir = _window_bound(tmp_path, _queued_gemms())
    cp._CACHE.clear()  # as a child computes them: the steps' path (none), then the window's
    with open_run(run_dir) as run:
        assert cp.bound(run, 0)["overall"]["over"] == "window" and len(cp.window_path(run, 0))
        handed = cp.computed_paths(run)
        assert all(len(p) == 0 for p in handed.values())
        cp.adopt_paths(run, handed)
        assert len(cp.path_of(run, 0)) == 0


def test_a_cpu_run_without_steps_has_no_bound_to_read(tmp_path):
    """No device work: nothing to be bound by but the host, so no verdict (as for device events lost)."""
    rank, bound, report_text, _ = _window_bound(tmp_path, [X("aten::mm", "cpu_op", 10, 100), X("aten::add", "cpu_op", 120, 30)])
    assert bound["overall"] is None and "bound:" not in report_text


def test_agent_tool_walks_a_run_without_steps_over_its_span(tmp_path):
    """The agent's critical_path on the queued GEMMs: the window's verdict and its items, in one call."""
    from neuron_explorer.agent.tools import AgentRuns

    run_dir = import_traces(write_trace(tmp_path / "t.json", _queued_gemms()), tmp_path / "run").run_dir
    tools = AgentRuns([run_dir])
    try:
        res = tools.critical_path(k=3)
        bad = tools.critical_path(step=1)
    finally:
        tools.close()
    (r,) = res["ranks"]
    assert r["over"] == "window" and r["bound"] == "device-bound (99%): device compute" and r["step_ns"] == 910 * US
    assert [(i["item"], i["op"], i["charged_ns"]) for i in r["items"]] == [
        ("sgemm_1", "aten::mm", 300 * US), ("sgemm_2", "aten::mm", 300 * US), ("sgemm_3", "aten::mm", 300 * US)]
    assert "over its span" in res["note"]
    assert not bad["ok"] and "no profiler steps" in bad["error"]


# ---- the critical-path rule ---------------------------------------------------------------------

def _analyze(tmp_path: Path, events: list[dict]):
    from neuron_explorer.analyzers import analyze

    run_dir = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    report = analyze(run_dir)
    return run_dir, [f for f in report.findings if f.rule_id == "critical-path"]


def _evidence_rows(run_dir: Path, finding) -> dict:
    import duckdb

    con = duckdb.connect()
    con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{run_dir}/rank=*/events.parquet')")
    rel = con.execute(finding.evidence.sql)
    return dict(zip([d[0] for d in rel.description], rel.fetchone()))


def _gemm_chain(device_properties=None, kernels=("volta_sgemm_128x64_nn_{i}",) * 3):
    """The GEMM chain of test_device_bound_gemm_chain: three fp32 sgemms of 300 µs each (30% of the
    path apiece), 85 µs of untraced host time, 2 µs of aten::mm, 9 µs of launches, 4 µs idle."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000)]
    for i, t in enumerate((10, 20, 30), 1):
        events += [X("aten::mm", "cpu_op", t, 10, **{"External id": i, "Input type": ["float", "float"]}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 2, 4, correlation=i, **{"External id": i}),
                   _k(kernels[i - 1].format(i=i), "kernel", i, 20 + 300 * (i - 1), 300)]
    events.append(X("cudaDeviceSynchronize", "cuda_runtime", 50, 875, correlation=9))
    return events


def test_a_first_launch_under_a_device_bound_step_is_named_in_its_finding(tmp_path):
    """One step of 1000 µs: aten::mm's first cudaLaunchKernel takes 200 µs (its kernel's code loaded),
    its sgemm runs 600 µs while the host waits in a sync, then aten::add's launch of 4 µs and its 2 µs
    kernel, and a sync to the step's end. The path: 600 µs of the sgemm (device-bound, 60%), 204 µs of launches,
    200 of them that one call. The launch finding's title says
    what its time was: that first launch (98.0% of 204 µs), the advice a one-off's."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000),
              X("aten::mm", "cpu_op", 10, 210, **{"External id": 1}),
              X("cudaLaunchKernel", "cuda_runtime", 12, 200, correlation=1, **{"External id": 1}),
              _k("volta_sgemm_128x64_nn", "kernel", 1, 213, 600),
              X("cudaDeviceSynchronize", "cuda_runtime", 225, 589, correlation=8),
              X("aten::add", "cpu_op", 815, 10, **{"External id": 2}),
              X("cudaLaunchKernel", "cuda_runtime", 817, 4, correlation=2, **{"External id": 2}),
              _k("elementwise_kernel", "kernel", 2, 822, 2),
              X("cudaDeviceSynchronize", "cuda_runtime", 826, 174, correlation=9)]
    _, found = _analyze(tmp_path, events)
    (f,) = [f for f in found if f.evidence.values["class"] == "launch"]
    assert f.evidence.values["charged_ns"] == 204 * US and f.evidence.values["one_off_ns"] == 200 * US
    assert f.title.startswith("kernel launches: 0.20 ms on the critical path (20.4% of step time; steps device-bound (60%)), "
                              "98.0% of it one call: a kernel's first launch, loading its code; heaviest: aten::mm 0.20 ms")
    assert f.recommendation.startswith("One launch call of 0.20 ms holds 98.0% of this time")


def test_idle_on_the_path_behind_unseen_work_is_not_told_to_overlap_streams(tmp_path):
    """One step of 20 ms: a CUDA graph launched at 10 µs runs a 9 ms kernel, then its memset 1.5 ms
    after it with nothing running on the device (a dependency the trace does not show), then a 9.46
    ms kernel; the host waits in a sync to the step's end. The idle on the path is 1.5 ms (7.5%: under
    device-idle's 10%, so the critical path's idle finding is the one for it), 1.50 ms of it waiting
    behind unseen work: its advice says so, not to overlap streams."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 20000),
              X("cudaGraphLaunch", "cuda_runtime", 10, 5, correlation=1),
              _k("elementwise_kernel", "kernel", 1, 20, 9000),
              _k("Memset (Device)", "gpu_memset", 1, 10520, 2),
              _k("elementwise_kernel", "kernel", 1, 10530, 9460),
              X("cudaDeviceSynchronize", "cuda_runtime", 20, 19975, correlation=9)]
    _, found = _analyze(tmp_path, events)
    (f,) = [f for f in found if f.evidence.values["class"] == "idle"]
    assert f.evidence.values["charged_ns"] == (1500 + 8) * US
    assert f.recommendation.startswith("1.50 ms of this time is device work that was ready (launched, its stream's earlier work "
                                       "done) yet waited while nothing the trace holds ran on any device")
    assert "overlap independent work" not in f.recommendation


def _props(name, major, minor):
    return {"deviceProperties": [{"id": 0, "name": name, "computeMajor": major, "computeMinor": minor, "warpSize": 32}]}


def test_rule_names_one_class_for_the_fp32_gemms_on_a_device_bound_path(tmp_path):
    """The three sgemms are one cause (fp32 GEMMs): one finding whose impact is their union on the
    path, 900 µs; host time (85 µs outside traced calls + 2 µs aten::mm) is the other class over 2%;
    launches (9 µs) and idle (4 µs) are under it. Without device properties the advice names both
    fixes. 75 µs of the host time is the step running on after the sync, the trace's last event:
    nothing was recorded there, so the host finding's impact is the 12 µs the trace shows."""
    run_dir, found = _analyze(tmp_path, _gemm_chain())
    assert [(f.evidence.values["class"], f.location.kernel, f.location.op, f.impact_ns) for f in found] == [
        ("fp32_matmul", "volta_sgemm_128x64_nn_1", "aten::mm", 900 * US), ("host", None, None, 12 * US)]
    assert found[1].evidence.values["unrecorded_ns"] == found[1].evidence.values["left_out_ns"] == 75 * US
    assert found[1].title.startswith("not recorded: 0.07 ms of step time (7.5%) lies after the last event the trace holds; on the "
                                     "critical path: host time in operators and Python 0.01 ms recorded (1.2% of step time)")
    assert found[0].evidence.values["items"] == 3 and found[0].evidence.values["events"] == 3
    assert found[0].title.startswith("fp32 GEMM/convolution kernels (3 names): 0.90 ms on the critical path (90.0% of step time; "
                                     "steps device-bound (90%)); heaviest: volta_sgemm_128x64_nn_1 of aten::mm 0.30 ms")
    assert 0 < found[0].saving_bound_ns <= found[0].impact_ns
    assert "bf16" in found[0].recommendation and "GradScaler" in found[0].recommendation
    assert _evidence_rows(run_dir, found[0])["charged_ns"] == 900 * US
    assert _evidence_rows(run_dir, found[0])["items"] == 3
    assert _evidence_rows(run_dir, found[1])["charged_ns"] == 87 * US  # the path's charge, what is left out included


def test_fp32_gemm_advice_on_a_v100_is_fp16_with_gradscaler(tmp_path):
    """A V100 (compute capability 7.0) has fp16 Tensor Cores and neither bf16 nor TF32. The precision
    rule finds the same cause (the float32 aten::mm kernels) with the same advice: one cause, one
    finding, so it is left to critical-path's fp32 class, and reported where that rule does not run."""
    run_dir = import_traces(write_trace(tmp_path / "t.json", _gemm_chain(), **_props("Tesla V100-SXM2-16GB", 7, 0)),
                            tmp_path / "run").run_dir
    from neuron_explorer.analyzers import analyze

    report = analyze(run_dir)
    (f, _host) = [f for f in report.findings if f.rule_id == "critical-path"]
    assert "torch.float16" in f.recommendation and "GradScaler" in f.recommendation
    assert "bfloat16" not in f.recommendation and "set_float32_matmul_precision" not in f.recommendation
    assert f.evidence.values["device_arch"] == "NVIDIA Volta (sm70: V100)"
    assert not [f for f in report.findings if f.rule_id == "precision"]
    assert [f.rule_id for f in report.findings if f.rule_id in ("critical-path", "precision", "device-underuse")
            and "GradScaler" in f.recommendation] == ["critical-path"]
    from neuron_explorer.analyzers.engine import all_rules

    alone = analyze(run_dir, write=False, rules=[r for r in all_rules() if r.RULE_ID != "critical-path"])
    (p,) = [f for f in alone.findings if f.rule_id == "precision"]
    assert "torch.float16" in p.recommendation and "GradScaler" in p.recommendation and "bfloat16" not in p.recommendation
    device = report.summary["ranks"][0]["utilisation"]["device"]
    assert device == {"arch": "NVIDIA Volta (sm70: V100)", "matrix_dtypes": ["fp16"],
                      "how": "device name 'Tesla V100-SXM2-16GB' in the trace"}


def test_fp32_gemm_advice_on_an_a100_is_bf16_or_tf32(tmp_path):
    """An A100 named only by its compute capability (8.0) has bf16 and TF32, no FP8."""
    run_dir, _ = None, None
    run_dir = import_traces(write_trace(tmp_path / "t.json", _gemm_chain(), **_props("NVIDIA Graphics Device", 8, 0)),
                            tmp_path / "run").run_dir
    from neuron_explorer.analyzers import analyze

    report = analyze(run_dir)
    f = next(f for f in report.findings if f.rule_id == "critical-path")
    assert "torch.bfloat16" in f.recommendation and "set_float32_matmul_precision('high')" in f.recommendation
    assert "GradScaler needed" in f.recommendation and "FP8" not in f.recommendation
    assert report.summary["ranks"][0]["utilisation"]["device"]["how"] == (
        "compute capability 8.0 of NVIDIA Graphics Device in deviceProperties")


S1688 = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align{i}>(cutlass_80_tensorop_s1688gemm::Params)"


@pytest.mark.parametrize(("kernels", "tf32_us", "told"), [
    ((S1688,) * 3, 900, None),  # every fp32 GEMM runs TF32 already: bf16 is what is left
    ((S1688, S1688, "ampere_sgemm_128x64_nn"), 600, "ampere_sgemm_128x64_nn of aten::mm 0.30 ms"),
    (("volta_sgemm_128x64_nn_{i}",) * 3, 0, "the fp32 matmuls and convolutions"),
])
def test_fp32_gemms_that_run_tf32_already_are_not_told_to_allow_it(tmp_path, kernels, tf32_us, told):
    """An A100's cutlass_80_tensorop_s1688gemm kernels are fp32 data on the Tensor Cores, run as TF32
    (NVIDIA/cutlass#466): a100_train_blocking_dtoh's were told to allow TF32. They are told bf16
    autocast; TF32 is advised only for the plain fp32 (SIMT) sgemms beside them, named."""
    run_dir = import_traces(write_trace(tmp_path / "t.json", _gemm_chain(kernels=kernels), **_props("NVIDIA A100-SXM4-80GB", 8, 0)),
                            tmp_path / "run").run_dir
    from neuron_explorer.analyzers import analyze

    (f,) = [f for f in analyze(run_dir, write=False).findings if f.evidence.values.get("class") == "fp32_matmul"]
    assert f.impact_ns == 900 * US and f.evidence.values["tf32_ns"] == tf32_us * US
    assert "torch.autocast(device_type='cuda', dtype=torch.bfloat16)" in f.recommendation
    if told is None:
        assert "set_float32_matmul_precision" not in f.recommendation and "allow TF32" not in f.recommendation
        assert "they already run TF32 on the Tensor Cores" in f.recommendation
    elif tf32_us:
        assert f"allow TF32 for those that run plain fp32 ({told}: torch.set_float32_matmul_precision('high')" in f.recommendation
    else:
        assert f"allow TF32 for {told} (torch.set_float32_matmul_precision('high')" in f.recommendation
        assert "already run" not in f.recommendation


def test_rule_says_fuse_many_short_kernels(tmp_path):
    """Thirty 10 µs kernels back to back, launched well ahead, then a sync.

        host  0                                                                       400
        ProfilerStep#1 [=============================================================]
        aten::add i    [10+5i, 14+5i), its launch [11+5i, 13+5i)   i = 0..29
        cudaDeviceSynchronize                 [170 --------------------------- 325)
        stream 7          [20 + 10i, 30 + 10i) add_kernel, i = 0..29 (ends at 320)

    From the end: 75 µs host, the sync's 5, the thirty kernels (300), 7 µs idle waiting for the first
    launch (13 → 20), that launch (2), aten::add before it (1), 10 µs host.
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 400)]
    for i in range(30):
        events += [X("aten::add", "cpu_op", 10 + 5 * i, 4, **{"External id": i + 1}),
                   X("cudaLaunchKernel", "cuda_runtime", 11 + 5 * i, 2, correlation=i + 1, **{"External id": i + 1}),
                   _k("add_kernel", "kernel", i + 1, 20 + 10 * i, 10)]
    events.append(X("cudaDeviceSynchronize", "cuda_runtime", 170, 155, correlation=99))
    run_dir, found = _analyze(tmp_path, events)
    # host: 85 µs outside calls and aten::add's 1 µs, less the 75 µs after the sync, the last event: nothing recorded there
    assert [(f.location.kernel, f.impact_ns, f.evidence.values["events"]) for f in found] == [
        ("add_kernel", 300 * US, 30), (None, 11 * US, 1)]
    assert found[1].severity == "low" and found[1].saving_bound_ns <= 11 * US  # 2.75% of the step
    assert found[0].evidence.values["class"] == "elementwise"
    assert "30 short kernels per step" in found[0].recommendation and "torch.compile" in found[0].recommendation


def test_rule_on_a_host_bound_loop_points_at_launches_and_host_time(tmp_path):
    """The loop of test_host_bound_loop_of_tiny_kernels: host time outside calls (70), aten::add (18)
    and the launches inside aten::add (12)."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 100)]
    for i, t in enumerate((10, 30, 50), 1):
        events += [X("aten::add", "cpu_op", t, 10, **{"External id": i}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 4, 4, correlation=i, **{"External id": i}),
                   _k("elementwise_kernel", "kernel", i, t + 9, 2)]
    run_dir, found = _analyze(tmp_path, events)
    assert [(f.evidence.values["class"], f.location.op, f.impact_ns) for f in found] == [
        ("host", None, 88 * US), ("launch", "aten::add", 12 * US)]
    assert found[0].evidence.values["heaviest"] == [{"item": None, "op": None, "charged_ns": 70 * US},
                                                    {"item": "aten::add", "op": "aten::add", "charged_ns": 18 * US}]
    assert "CUDA graphs" in found[1].recommendation
    assert _evidence_rows(run_dir, found[1])["charged_ns"] == 12 * US


def test_agent_tool_returns_the_top_items_with_their_lines(tmp_path):
    """The GEMM chain through the MCP tool: verdict, shares, and the items by charged ns, bounded by k."""
    from neuron_explorer.agent.tools import AgentRuns

    events = [X("ProfilerStep#1", "user_annotation", 0, 1000)]
    for i, t in enumerate((10, 20, 30), 1):
        events += [X("aten::mm", "cpu_op", t, 10, **{"External id": i}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 2, 4, correlation=i, **{"External id": i}),
                   _k(f"sgemm_{i}", "kernel", i, 20 + 300 * (i - 1), 300)]
    events.append(X("cudaDeviceSynchronize", "cuda_runtime", 50, 875, correlation=9))
    run_dir = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    tools = AgentRuns([run_dir])
    try:
        res = tools.critical_path(k=4)
        one = tools.critical_path(step=1, k=50)
        bad = tools.critical_path(step=7)
    finally:
        tools.close()
    assert res["ok"] and res["truncated"]
    (r,) = res["ranks"]
    assert r["bound"] == "device-bound (90%): device compute" and r["step_ns"] == 1000 * US
    assert r["shares"] == {"device_compute": 0.9, "host_compute": 0.087, "launch_overhead": 0.009, "idle": 0.004}
    assert [(i["item"], i["op"], i["charged_ns"]) for i in r["items"]] == [
        ("sgemm_1", "aten::mm", 300 * US), ("sgemm_2", "aten::mm", 300 * US), ("sgemm_3", "aten::mm", 300 * US), (None, None, 85 * US)]
    assert sum(i["charged_ns"] for i in one["ranks"][0]["items"]) == 1000 * US and not one["truncated"]
    assert not bad["ok"] and "no step 7" in bad["error"]


def test_saving_bound_stops_where_the_other_stream_becomes_critical(tmp_path):
    """Two kernels on two streams, no recorded dependency between them; the host waits for both.

        host  0                                                                          1000
        ProfilerStep#1 [===============================================================]
        aten::add [10-20) aten::mm [20-30)     launches [12-16) c1, [22-26) c2
        cudaDeviceSynchronize     [50 ------------------------------------------ 905)
        stream 7     [20 ------- k_long (elementwise) ------- 820)
        stream 8            [100 ---------- k_short (GEMM) ---------- 900)

    The path charges k_short 800 µs (it ended last). Without it the device still has k_long's 800
    µs of the step, so the step cannot shrink below 800 µs: the saving bound is 1000 - 800 = 200 µs,
    not the 800 charged. Of the 105 µs of host time outside traced calls, the 95 after the sync (the
    trace's last event) recorded nothing: no one's to save, left out of the host finding; the 10
    before the first operator can go (the device is busy 880 µs of the step, so the step can lose up
    to 120 µs). The 74 µs k_short waited after its launch, k_long computing on stream 7, are k_long's
    (not idle); without k_long the device has k_short's 800, so they can go.
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000),
              X("aten::add", "cpu_op", 10, 10, **{"External id": 1}),
              X("cudaLaunchKernel", "cuda_runtime", 12, 4, correlation=1, **{"External id": 1}),
              _k("vectorized_elementwise_kernel", "kernel", 1, 20, 800, stream=7),
              X("aten::mm", "cpu_op", 20, 10, **{"External id": 2}),
              X("cudaLaunchKernel", "cuda_runtime", 22, 4, correlation=2, **{"External id": 2}),
              _k("k_short", "kernel", 2, 100, 800, stream=8),
              X("cudaDeviceSynchronize", "cuda_runtime", 50, 855, correlation=9)]
    run_dir, found = _analyze(tmp_path, events)
    by_item = {(f.location.kernel, f.location.op): f for f in found}
    short = by_item[("k_short", "aten::mm")]
    assert short.impact_ns == 800 * US and short.saving_bound_ns == 200 * US
    host = by_item[(None, None)]  # one class: the 105 µs outside traced calls and the host time of the operators
    assert host.evidence.values["heaviest"][0] == {"item": None, "op": None, "charged_ns": 105 * US}
    ops = sum(m["charged_ns"] for m in host.evidence.values["heaviest"][1:])
    assert host.evidence.values["left_out_ns"] == 95 * US
    assert host.impact_ns == 10 * US + ops and 0 < ops <= 20 * US and host.saving_bound_ns == host.impact_ns  # under the 120 µs
    long_ = by_item[("vectorized_elementwise_kernel", "aten::add")]
    assert long_.impact_ns == 74 * US and long_.saving_bound_ns == 74 * US
    assert not [f for f in found if f.evidence.values.get("category") == "idle"]


def test_two_ranks_one_late_at_an_all_reduce(tmp_path):
    """Two ranks, one step of 1000 µs: a GEMM then an all-reduce on the same stream, then the host
    waits for both. Rank 1's GEMM is 300 µs longer, so it arrives at the all-reduce at 800 µs and
    rank 0, there at 500 µs, waits for it; the all-reduce ends on both at 900 µs.

        rank 0   stream 7  [100 --- gemm --- 500)[500 ------ all-reduce ------ 900)
        rank 1   stream 7  [100 --------- gemm --------- 800)[800 all-reduce 900)
        both     cudaDeviceSynchronize [50 --------------------------------------- 905)

    Rank 0's path charges its all-reduce 400 µs: in analysis/critical_path.parquet the first 300
    are "waiting for rank 1 to arrive", the last 100 the transfer; the step still adds up to 1000.
    """
    import duckdb

    from neuron_explorer.analyzers import analyze

    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    for rank, gemm_us in ((0, 400), (1, 700)):
        events = [X("ProfilerStep#1", "user_annotation", 0, 1000),
                  X("aten::mm", "cpu_op", 10, 10, **{"External id": 1}),
                  X("cudaLaunchKernel", "cuda_runtime", 12, 4, correlation=1, **{"External id": 1}),
                  _k("sgemm", "kernel", 1, 100, gemm_us),
                  X("c10d::allreduce_", "cpu_op", 20, 10, **{"External id": 2}),
                  X("cudaLaunchKernel", "cuda_runtime", 22, 4, correlation=2, **{"External id": 2}),
                  _k(nccl, "kernel", 2, 100 + gemm_us, 900 - 100 - gemm_us),
                  X("cudaDeviceSynchronize", "cuda_runtime", 50, 855, correlation=9)]
        write_trace(tmp_path / "traces" / f"rank{rank}.json", events, distributedInfo={"rank": rank, "world_size": 2})
    run_dir = import_traces(tmp_path / "traces", tmp_path / "run").run_dir
    analyze(run_dir)
    path = str(run_dir / "analysis" / "critical_path.parquet")
    rows = duckdb.sql(f"SELECT p.rank, p.ts_ns - min(p.ts_ns) OVER (PARTITION BY p.rank), p.charged_ns, p.cause, p.seq "
                      f"FROM '{path}' p JOIN read_parquet('{run_dir}/rank=*/events.parquet') e USING (event_id) "
                      f"WHERE e.name = '{nccl}' ORDER BY p.rank, p.ts_ns").fetchall()
    start = duckdb.sql(f"SELECT rank, min(ts_ns) FROM '{path}' GROUP BY 1").fetchall()
    assert [(r, ns, cause) for r, _, ns, cause, _ in rows] == [
        (0, 300 * US, "waiting for rank 1 to arrive"), (0, 100 * US, None), (1, 100 * US, None)]
    assert rows[1][4] == rows[0][4] + 1  # consecutive segments of the step
    totals = duckdb.sql(f"SELECT rank, sum(charged_ns) FROM '{path}' GROUP BY 1 ORDER BY 1").fetchall()
    assert totals == [(0, 1000 * US), (1, 1000 * US)] and len(start) == 2


def test_rule_says_channels_last_for_nchw_convolutions_on_the_path(tmp_path):
    """A device-bound step of two 400 µs NCHW convolution kernels (aten::conv2d on a 4-d input)."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000)]
    for i, t in enumerate((10, 20), 1):
        events += [X("aten::conv2d", "cpu_op", t, 10, **{"External id": i, "Input Dims": [[32, 64, 56, 56], [64, 64, 3, 3]],
                                                          "Input type": ["float", "float"]}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 2, 4, correlation=i, **{"External id": i}),
                   _k(f"implicit_convolve_sgemm_{i}", "kernel", i, 100 + 400 * (i - 1), 400)]
    events.append(X("cudaDeviceSynchronize", "cuda_runtime", 50, 855, correlation=9))
    _, found = _analyze(tmp_path, events)
    convs = [f for f in found if (f.location.kernel or "").startswith("implicit_convolve")]
    assert len(convs) == 1 and "channels_last" in convs[0].recommendation  # one class: both convolutions
    assert convs[0].impact_ns == 800 * US and convs[0].evidence.values["items"] == 2
    events_nhwc = [dict(e, name=e["name"].replace("implicit_convolve_sgemm", "nhwc_conv_kernel")) for e in events]
    _, found = _analyze(tmp_path / "nhwc", events_nhwc)
    assert not any("channels_last" in f.recommendation for f in found)  # already NHWC: nothing to say


@pytest.mark.parametrize("device, says, never", [
    ("NVIDIA A100-SXM4-80GB", "CUDA graphs (torch.cuda.graph,", "Neuron compiler"),
    ("AMD Instinct MI300X", "HIP graphs (torch.cuda.graph, which ROCm runs as HIP graphs", "CUDA graphs"),
    ("AWS Trainium2", "the Neuron compiler runs each compiled region as one device program", "CUDA graphs"),
])
def test_launch_advice_fits_the_device(tmp_path, device, says, never):
    """The host-bound loop above on an NVIDIA GPU, an AMD GPU and on Trainium (the device named in the
    trace's deviceProperties): graphs are advised where they exist, in the device's own name (ROCm's are
    HIP graphs, through the same torch.cuda API), never on a device without them. (The operators fill
    the step: host time in no traced call has advice of its own.)"""
    events = [X("ProfilerStep#1", "user_annotation", 0, 100)]
    for i, t in enumerate((5, 35, 65), 1):
        events += [X("aten::add", "cpu_op", t, 30, **{"External id": i}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 4, 4, correlation=i, **{"External id": i}),
                   _k("elementwise_kernel", "kernel", i, t + 9, 2)]
    from neuron_explorer.analyzers import analyze

    trace = write_trace(tmp_path / "t.json", events, deviceProperties=[{"id": 0, "name": device}])
    report = analyze(import_traces(trace, tmp_path / "run").run_dir)
    advice = [f.recommendation for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] in ("host", "launch")]
    assert len(advice) == 2, [f.title for f in report.findings]
    assert all(says in a and never not in a for a in advice), advice


@pytest.mark.parametrize("name", ["mi300x_vllm_hipgraph_full_decode", "v100_resnet50_torch19_memory", "cuda_nccl_rank0_of_2"])
def test_path_event_names_read_without_a_self_join_are_the_sql_join(name, tmp_path):
    """The names the path's items and the critical-path rule read of its events (`_Info.table`:
    each event's own row, then the top-level operators' names looked up by id) are the rows of the
    one-query definition (`_INFO_SQL`, a LEFT JOIN on top_op_id; a graph replay charged to its
    operator at capture): on a hipGraph decode with its capture traces and two device traces."""
    import numpy as np
    import pyarrow as pa

    from neuron_explorer.analyzers.rank_rows import arrow_of

    captures = TRACES / "graph_capture" / name / "capture_traces"
    run_dir = import_traces(TRACES / f"{name}.json.gz", tmp_path / "run", captures=[captures] if captures.is_dir() else None).run_dir
    with open_run(run_dir) as run:
        path = cp.path_of(run, 0)
        ids = np.unique(path.event_id[path.event_id >= 0])
        if not len(ids):  # a decode without profiler steps has no path: every other event of the rank
            ids = np.array([i for i, in run.sql("SELECT event_id FROM events WHERE event_id % 2 = 0 ORDER BY 1").fetchall()])
        got = cp._Info.table(run, ids)
        want = arrow_of(run, cp._INFO_SQL, [], {"_path_ids": pa.table({"id": ids})})
        assert got.to_pylist() == want.to_pylist() and got.num_rows == len(ids) > 100
        if captures.is_dir():  # replays charged to their operator at capture, which is not the operator they ran under
            replayed = run.sql("SELECT count(*) FROM events WHERE capture_top_op IS NOT NULL AND event_id IN (SELECT unnest(?::BIGINT[]))",
                               [ids.tolist()]).fetchone()[0]
            assert replayed > 0


def test_the_paths_kept_are_the_ones_used_last():
    """The process keeps the paths used last (critical_path.CACHE_PATHS of them): a rank whose path
    an analysis thread is still reading stays while another thread adds the paths of its ranks, so
    it is not walked again. (The cache used to be emptied when full: about 5% of 256 ranks analysed
    on two threads were walked twice.)"""
    from types import SimpleNamespace

    run = SimpleNamespace(path="/runs/job", manifest={"created": "t0"})
    paths = {r: object() for r in range(cp.CACHE_PATHS + 1)}
    cp._CACHE.clear()
    try:
        cp.adopt_paths(run, {r: paths[r] for r in range(cp.CACHE_PATHS)})
        assert cp.path_of(run, 0) is paths[0]  # used: kept over the ones added after it
        cp.adopt_paths(run, {cp.CACHE_PATHS: paths[cp.CACHE_PATHS]})
        assert sorted(cp.computed_paths(run)) == [0, *range(2, cp.CACHE_PATHS + 1)]  # rank 1, used longest ago, dropped
    finally:
        cp._CACHE.clear()


def _loader_then_gemm(fetch_us: int) -> list[dict]:
    """One 1,000 µs step: a DataLoader fetch of `fetch_us` at its start (a user annotation, as torch
    records it), then one aten::mm whose 600 µs sgemm runs to the step's end, the host waiting."""
    t = fetch_us + 10
    return [X("ProfilerStep#1", "user_annotation", 0, 1000),
            X("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", 0, fetch_us),
            X("aten::mm", "cpu_op", t, 10, **{"External id": 1}),
            X("cudaLaunchKernel", "cuda_runtime", t + 2, 4, correlation=1, **{"External id": 1}),
            _k("volta_sgemm_128x64_nn", "kernel", 1, 400, 600),
            X("cudaDeviceSynchronize", "cuda_runtime", t + 10, 1000 - (t + 10), correlation=9)]


def test_a_finding_leaves_only_to_an_owner_that_is_kept():
    """engine.leave_to_owners: a hotspot operator whose time is the path's one-off launch is left to
    the path's launch finding, also when launch-overhead reports the rank: a kernel's first launch
    loading its code is a cause launch-overhead (many short kernels) does not name, so the path's
    finding stays (device-idle says the idle during that call is critical-path's). Launches without a
    one-off are left to launch-overhead. A chain of owners never drops every finding of a cause: the
    last owner dropped, the one before keeps its finding. A test that fails (another operator) keeps
    the finding."""
    from types import ModuleType, SimpleNamespace

    from neuron_explorer.analyzers.engine import leave_to_owners
    from neuron_explorer.analyzers.rules import critical_path as cp_rule
    from neuron_explorer.analyzers.rules import hotspot

    def f(**values):
        return SimpleNamespace(evidence=SimpleNamespace(values=values))

    op = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
    launch = f(**{"class": "launch", "one_off_ns": 6_543_109, "heaviest": [{"op": op, "item": op, "charged_ns": 6_547_768}]})
    hot = f(name=op, cpu_ns=6_675_842, calls=2, on_path_ns=6_675_842)
    other = f(name="aten::mm", cpu_ns=6_675_842, calls=2, on_path_ns=6_675_842)
    overhead = ModuleType("launch_overhead")
    overhead.RULE_ID = "launch-overhead"
    rules = [hotspot, cp_rule, overhead]

    results = {"hotspot": ("findings", [hot]), "critical-path": ("findings", [launch])}
    leave_to_owners(rules, results)
    assert results == {"hotspot": ("findings", []), "critical-path": ("findings", [launch])}
    results = {"hotspot": ("findings", [hot]), "critical-path": ("findings", [launch]), "launch-overhead": ("findings", [f()])}
    leave_to_owners(rules, results)
    assert results["hotspot"] == ("findings", []) and results["critical-path"] == ("findings", [launch])
    spread = f(**{"class": "launch", "heaviest": [{"op": op, "item": op, "charged_ns": 6_547_768}]})  # no one-off
    results = {"critical-path": ("findings", [spread]), "launch-overhead": ("findings", [f()])}
    leave_to_owners(rules, results)
    assert results["critical-path"] == ("findings", [])
    # a chain: a -> b -> c, each left to the next; c is kept, so b is dropped and a keeps its finding
    chain = []
    for rid, to in (("a", "b"), ("b", "c"), ("c", None)):
        m = ModuleType(rid)
        m.RULE_ID, m.leaves_to = rid, (lambda _f, to=to: to)
        chain.append(m)
    results = {"a": ("findings", [f()]), "b": ("findings", [f()]), "c": ("findings", [f()])}
    leave_to_owners(chain, results)
    assert [len(results[r][1]) for r in "abc"] == [1, 0, 1]
    results = {"hotspot": ("findings", [other]), "critical-path": ("findings", [launch])}
    leave_to_owners(rules, results)
    assert results["hotspot"] == ("findings", [other])
    # the launches (one-off or charged under it on the path) are less than half its time on the path
    half = f(name=op, cpu_ns=2 * 6_547_768 + 2, calls=2, on_path_ns=2 * 6_547_768 + 2)
    results = {"hotspot": ("findings", [half]), "critical-path": ("findings", [launch])}
    leave_to_owners(rules, results)
    assert results["hotspot"] == ("findings", [half])
    # launches spread over its calls, no one-off, but half its time on the path or more: the launches' finding
    mostly = f(name=op, cpu_ns=9_000_000, calls=9, on_path_ns=2 * 6_547_768)
    results = {"hotspot": ("findings", [mostly]), "critical-path": ("findings", [spread])}
    leave_to_owners(rules, results)
    assert results["hotspot"] == ("findings", [])


def test_data_loading_is_named_once(tmp_path):
    """A fetch of 300 µs in a 1,000 µs step is input-pipeline's (30% >= its 10%): the critical path
    charges it to data loading, and leaves the finding to that rule; a fetch of 50 µs (5%, under
    input-pipeline's share) stays a class of the critical path."""
    from neuron_explorer.analyzers import analyze

    for fetch_us, named_by in ((300, "input-pipeline"), (50, "critical-path")):
        run_dir = import_traces(write_trace(tmp_path / f"t{fetch_us}.json", _loader_then_gemm(fetch_us)),
                                tmp_path / f"run{fetch_us}").run_dir
        report = analyze(run_dir)
        assert report.summary["ranks"][0]["bound"]["overall"]["ns"]["input_pipeline"] == fetch_us * US
        loading = [f for f in report.findings if f.rule_id == "input-pipeline"
                   or (f.rule_id == "critical-path" and f.evidence.values["class"] == "input")]
        assert [(f.rule_id, f.impact_ns) for f in loading] == [(named_by, fetch_us * US)]


def _backward_step(gaps_us: int) -> list[dict]:
    """A 10 ms step (µs): `## backward ##` [0, 6000) on the main thread, holding one aten::mm (and its
    kernel) every `gaps_us` + 100 µs, then twenty aten::add of 100 µs, 100 µs apart, each launching a
    short kernel."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 10_000), X("## backward ##", "user_annotation", 0, 6_000)]
    ext = 0
    for t in range(gaps_us, 6_000 - 100, gaps_us + 100):
        ext += 1
        events += [X("aten::mm", "cpu_op", t, 100, **{"External id": ext}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 10, 10, correlation=ext, **{"External id": ext}),
                   _k("gemm_kernel", "kernel", ext, t + 30, 20)]
    for t in range(6_000, 10_000, 200):
        ext += 1
        events += [X("aten::add", "cpu_op", t, 100, **{"External id": ext}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 10, 10, correlation=ext, **{"External id": ext}),
                   _k("elementwise_kernel", "kernel", ext, t + 30, 5)]
    return events


def test_host_time_in_long_empty_stretches_is_no_compile_advice(tmp_path):
    """`## backward ##` holds one aten::mm at 2,900 µs, and nothing else is recorded beneath it: the
    path charges the range 2,900 µs before the mm and 3,000 µs after it, two long stretches (1 ms or
    more each) of 5,900 µs in all, more than half the host time. That is not dispatcher overhead to
    compile away: a wait the trace does not show (the main thread of multirank_128 inside its
    backward range) or Python it does not record, and the advice says how to tell which."""
    _, found = _analyze(tmp_path, _backward_step(2_900))
    (host,) = [f for f in found if f.evidence.values["class"] == "host"]
    v = host.evidence.values
    assert v["long_stretches_ns"] == (2_900 + 3_000) * US
    assert v["long_stretches_ns"] * 2 >= v["charged_ns"] and v["charged_ns"] <= v["path_ns"] == 10_000 * US
    assert host.recommendation.startswith("5.90 ms of this time is long stretches (1.00 ms or more each) inside operators or "
                                          "ranges with nothing recorded beneath them (## backward ## 5.90 ms)")
    assert "with_stack=True" in host.recommendation and "Host time bounds the step" not in host.recommendation


def test_host_time_in_short_gaps_between_operators_keeps_the_compile_advice(tmp_path):
    """The same step with an aten::mm every 200 µs under `## backward ##`: its time between them comes
    in 100 µs pieces, dispatcher overhead and Python between operators, and no stretch is long."""
    _, found = _analyze(tmp_path, _backward_step(100))
    (host,) = [f for f in found if f.evidence.values["class"] == "host"]
    assert host.evidence.values["long_stretches_ns"] == 0
    assert host.recommendation.startswith("Host time bounds the step: torch.compile")


def _copy_waits_for_unlaunched_work() -> list[dict]:
    """A 200 µs step: aten::mm [0, 10) launches K1 [5, 15); aten::to [20, 190) is a blocking copy to
    the host, cudaMemcpyAsync [21, 189) with its copy [185, 186) on stream 7, behind K2 [60, 180),
    whose launch the trace does not hold (another thread's, not profiled)."""
    return [X("ProfilerStep#1", "user_annotation", 0, 200),
            X("aten::mm", "cpu_op", 0, 10, **{"External id": 1}),
            X("cudaLaunchKernel", "cuda_runtime", 2, 2, correlation=1, **{"External id": 1}), _k("K1", "kernel", 1, 5, 10),
            X("aten::to", "cpu_op", 20, 170, **{"External id": 2}),
            X("cudaMemcpyAsync", "cuda_runtime", 21, 168, correlation=2, **{"External id": 2}),
            _k("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 2, 185, 1), _k("K2", "kernel", 99, 60, 120)]


def test_a_blocking_copy_waiting_for_work_it_did_not_launch_is_a_wait_not_host_work(tmp_path):
    """The path goes from the copy back along stream 7 to K2 [60, 180), which has no launch and no
    work just before it: it returns to the host at 60, inside the blocking copy, 39 µs before its
    own copy could run. That is the host waiting on the device (cause WAITING_IN_COPY), counted with
    the host's waits, not as host work to compile: the class was 'host time in operators and
    Python', as a100_train_blocking_dtoh's 130 ms in aten::to was."""
    items, rows, _ = _path(tmp_path, _copy_waits_for_unlaunched_work())
    waits = [(r["ts_ns"], r["charged_ns"]) for r in rows if r["cause"] == cp.WAITING_IN_COPY]
    assert waits == [(21 * US, 39 * US)]
    assert sum(r["charged_ns"] for r in rows) == 200 * US
    assert _by(items)[("K2", "device_compute")] == 120 * US
    # the rule: the wait is not host work; host-sync reports the copy, so the path's class of waits is left to it
    from neuron_explorer.analyzers import analyze

    report = analyze(import_traces(write_trace(tmp_path / "r.json", _copy_waits_for_unlaunched_work()), tmp_path / "r").run_dir,
                     write=False)
    (host,) = [f for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] == "host"]
    # untraced [10, 20) and [190, 200); aten::mm less its launch; the copy's own time [186, 189) (and aten::to's
    # [20, 21) and [189, 190), a member of its own)
    assert [(h["item"], h["charged_ns"]) for h in host.evidence.values["heaviest"]] == [(None, 20 * US), ("aten::mm", 8 * US),
                                                                                         ("aten::to", 3 * US)]
    assert host.impact_ns == 33 * US
    assert [f.location.op for f in report.findings if f.rule_id == "host-sync"] == ["aten::to"]


# ---- the normalisation class: hand-written attention's softmax, and real normalisation ------------

BF16_SOFTMAX = "void cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, SoftMaxForwardEpilogue>(c10::BFloat16*)"
FP32_SOFTMAX = "void cunn_SoftMaxForward<4, float, float, float, SoftMaxForwardEpilogue>(float*)"
BF16_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


def _forward_calls(calls: list[list[tuple]], frame: bool = True) -> list[dict]:
    """A device-bound step: each call of `model.py(20): forward` (a Python frame around its operators,
    or none without `frame`) runs its operators (name, input dims, input types, concrete inputs,
    kernel, kernel µs) 10 µs apart from 10 µs on; their kernels run back to back on stream 7 from
    100 µs on, and a sync waits for the last one; the step ends 10 µs after it.

        host  ProfilerStep#1 [==============================================================]
              forward [5 --- op op op --- )  forward [ --- op op op --- )   cudaDeviceSynchronize [--- )
        stream 7                 [kernel][kernel      ][kernel] ...
    """
    events, t, dev, corr = [], 5, 100, 0
    for ops in calls:
        start = t
        for name, dims, types, concrete, kernel, dur in ops:
            corr, t = corr + 1, t + 5
            events += [X(name, "cpu_op", t, 8, **{"External id": corr, "Input Dims": dims, "Input type": types,
                                                   **({"Concrete Inputs": concrete} if concrete else {})}),
                       X("cudaLaunchKernel", "cuda_runtime", t + 2, 4, correlation=corr, **{"External id": corr}),
                       _k(kernel, "kernel", corr, dev, dur)]
            t, dev = t + 5, dev + dur
        if frame:
            events.append(X("model.py(20): forward", "python_function", start, t + 3 - start))
        t += 5
    events.append(X("cudaDeviceSynchronize", "cuda_runtime", t, dev - t + 2, correlation=999))
    return [X("ProfilerStep#1", "user_annotation", 0, dev + 10)] + events


def _bmm(b=32, l_=1024, d=64, us=50):
    return ("aten::bmm", [[b, l_, d], [b, d, l_]], ["c10::BFloat16", "c10::BFloat16"], None, BF16_GEMM, us)


def _softmax(dims, kernel=BF16_SOFTMAX, dtype="c10::BFloat16", dim="-1", us=600):
    return ("aten::softmax", [dims, [], []], [dtype, "Scalar", ""], ["", dim, ""], kernel, us)


def _norm_finding(tmp_path, events):
    _, found = _analyze(tmp_path, events)
    (f,) = [f for f in found if f.evidence.values["class"] == "norm"]
    return f


def test_the_softmax_between_two_matmuls_of_a_statement_is_unfused_attention(tmp_path):
    """bmm → softmax → bmm in one call of forward (3-d scores, [B·heads, L, L]: no [B, heads, L, L]
    shape to go by): the 600 µs bf16 softmax kernel is hand-written attention's. The advice is
    scaled_dot_product_attention, not a fused LayerNorm, and no lower precision for a bf16 kernel."""
    f = _norm_finding(tmp_path, _forward_calls([[_bmm(), _softmax([32, 1024, 1024]), _bmm()]]))
    # the finding is the attention's: its softmax and its products (the GEMM class, all of it the attention's), one cause
    assert f.impact_ns == 700 * US and f.evidence.values["unfused_attention_ns"] == 600 * US
    assert f.location.source == "model.py:20"
    assert f.title.startswith("hand-written attention (softmax 0.60 ms, matrix products 0.10 ms): 0.70 ms on the critical path (")
    assert f.recommendation.startswith(
        "unfused attention: cunn_SoftMaxForward<8, BFloat16, float, BFloat1… of aten::softmax 0.60 ms (0.60 ms in all) "
        "is the softmax of hand-written attention (between two matrix products of one statement; with its matrix products "
        "0.10 ms on the same statement, the attention holds 0.70 ms of the path). Use "
        "torch.nn.functional.scaled_dot_product_attention (flash / memory-efficient kernels): one kernel computes")
    assert "LayerNorm" not in f.recommendation and "precision" not in f.recommendation and "bf16/fp16" not in f.recommendation


def test_hand_written_attention_is_one_finding_with_its_products_and_scaling(tmp_path):
    """One call of forward: the q/k/v projection (aten::linear, 30 µs), q @ k.T (bmm, 50 µs), the scaling
    of the [4, 8, 1024, 1024] scores (aten::mul, 200 µs), their softmax (600 µs), p @ v (bmm, 50 µs) and
    the output projection (linear, 30 µs). The attention was three critical-path findings (the softmax,
    'GEMM/convolution kernels … shapes that are multiples of 8', 'elementwise kernels … fuse them with
    torch.compile') and a hotspot line, each with its own fix. SDPA computes the products, the
    scaling and the softmax in one kernel: the softmax's finding says so with the attention's 900 µs
    on the path (600 + 100 + 200), and the GEMM class (100 of its 160 µs the attention's), the
    elementwise class (all of it) and the statement's hotspot (900 of its 1,060 µs of device time)
    leave it to that finding."""
    from neuron_explorer.analyzers import analyze

    proj = ("aten::linear", [[4096, 512], [1536, 512], [1536]], ["c10::BFloat16"] * 3, None, BF16_GEMM, 30)
    scale = ("aten::mul", [[4, 8, 1024, 1024], []], ["c10::BFloat16", "Scalar"], None,
             "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
             "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int)", 200)
    events = _forward_calls([[proj, _bmm(), scale, _softmax([4, 8, 1024, 1024]), _bmm(), proj]])
    report = analyze(import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir)
    path = [f for f in report.findings if f.rule_id == "critical-path"]
    classes = [f.evidence.values["class"] for f in path]
    assert "norm" in classes and not {"matmul", "fp32_matmul", "elementwise"} & set(classes)  # (idle_launch: the step's start)
    (f,) = [f for f in path if f.evidence.values["class"] == "norm"]
    assert f.impact_ns == 900 * US and f.evidence.values["attention_work_ns"] == 900 * US
    assert _evidence_rows(tmp_path / "run", f)["charged_ns"] == 900 * US  # the evidence query gives the same figure
    assert f.title.startswith("hand-written attention (softmax 0.60 ms, matrix products 0.10 ms, score arithmetic 0.20 ms): 0.90 ms on ")
    assert f.saving_bound_ns <= f.impact_ns
    assert ("with its matrix products 0.10 ms, its score arithmetic 0.20 ms on the same statement, the attention holds 0.90 ms "
            "of the path). Use torch.nn.functional.scaled_dot_product_attention") in f.recommendation
    assert not [h for h in report.findings if h.rule_id == "hotspot" and h.location.source == "model.py:20"]
    # without the softmax's finding (no attention), the products and the scaling keep their own findings
    plain = _forward_calls([[proj, _bmm(), scale, _bmm(), proj]])
    report = analyze(import_traces(write_trace(tmp_path / "p.json", plain), tmp_path / "plain").run_dir)
    assert {f.evidence.values["class"] for f in report.findings if f.rule_id == "critical-path"} >= {"matmul", "elementwise"}


BF16_SOFTMAX_BACKWARD = "void cunn_SoftMaxBackward<8, c10::BFloat16, float, c10::BFloat16, SoftMaxBackwardEpilogue>(c10::BFloat16*)"
BF16_MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
            "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int)")


def test_hand_written_attentions_backward_is_its_finding_too(tmp_path):
    """A training step of hand-written attention (µs): forward in `model.py(20): forward`, q @ k.T (bmm,
    50), the scaling of the [4, 8, 1024, 1024] scores (mul, 200), their softmax (600), p @ v (bmm, 50);
    then backward, each autograd node linked to its forward operator by sequence number: BmmBackward0
    (two bmm kernels, 50 each), SoftmaxBackward0 (600), MulBackward0 (200), BmmBackward0 (2 × 50).
    Backward work takes its forward's statement, but its operator is the autograd node: the backward
    products (200) and scaling (200) were the GEMM class's finding ('multiples of 8', 200 of its 300 µs
    backward) and half the elementwise class. Gathered by their forward operators, the attention holds
    1,900 µs of the path in the softmax's finding, and neither class has one of its own."""
    from neuron_explorer.analyzers import analyze

    eval_ = "autograd::engine::evaluate_function: "
    scores = [4, 8, 1024, 1024]
    fwd = [("aten::bmm", [[32, 1024, 64], [32, 64, 1024]], BF16_GEMM, 50, 1),
           ("aten::mul", [scores, []], BF16_MUL, 200, 2),
           ("aten::softmax", [scores, [], []], BF16_SOFTMAX, 600, 3),
           ("aten::bmm", [[32, 1024, 1024], [32, 1024, 64]], BF16_GEMM, 50, 4)]
    bwd = [("BmmBackward0", "aten::bmm", BF16_GEMM, [50, 50], 4),
           ("SoftmaxBackward0", "aten::_softmax_backward_data", BF16_SOFTMAX_BACKWARD, [600], 3),
           ("MulBackward0", "aten::mul", BF16_MUL, [200], 2), ("BmmBackward0", "aten::bmm", BF16_GEMM, [50, 50], 1)]
    events, t, dev, corr = [], 5, 100, 0
    for name, dims, kernel, us, seq in fwd:
        corr, t = corr + 1, t + 5
        events += [X(name, "cpu_op", t, 8, **{"External id": corr, "Input Dims": dims, "Input type": ["c10::BFloat16"] * len(dims),
                                               "Sequence number": seq, "Fwd thread id": 0}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 2, 4, correlation=corr, **{"External id": corr}),
                   _k(kernel, "kernel", corr, dev, us)]
        t, dev = t + 5, dev + us
    events.append(X("model.py(20): forward", "python_function", 5, t + 3 - 5))
    t += 5
    for node, op, kernel, kernels, seq in bwd:
        start = t
        t += 1
        for us in kernels:
            corr, t = corr + 1, t + 2
            events += [X(op, "cpu_op", t, 6, **{"External id": corr}),
                       X("cudaLaunchKernel", "cuda_runtime", t + 2, 3, correlation=corr, **{"External id": corr}),
                       _k(kernel, "kernel", corr, dev, us)]
            t, dev = t + 6, dev + us
        events += [X(eval_ + node, "cpu_op", start, t + 1 - start, **{"Sequence number": seq, "Fwd thread id": 1}),
                   X(node, "cpu_op", start + 0.5, t - start, **{"Sequence number": seq, "Fwd thread id": 1})]
        t += 3
    events.append(X("cudaDeviceSynchronize", "cuda_runtime", t, dev - t + 2, correlation=999))
    events.insert(0, X("ProfilerStep#1", "user_annotation", 0, dev + 10))
    report = analyze(import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir)
    path = [f for f in report.findings if f.rule_id == "critical-path"]
    classes = [f.evidence.values["class"] for f in path]
    assert "norm" in classes and not {"matmul", "fp32_matmul", "elementwise"} & set(classes), classes
    (f,) = [f for f in path if f.evidence.values["class"] == "norm"]
    assert f.evidence.values["unfused_attention_ns"] == 1200 * US and f.evidence.values["attention_work_ns"] == 1900 * US
    assert ("with its matrix products 0.30 ms, its score arithmetic 0.40 ms on the same statement, the attention holds 1.90 ms "
            "of the path). Use torch.nn.functional.scaled_dot_product_attention") in f.recommendation


def test_a_softmax_over_batch_heads_l_l_scores_is_unfused_attention_with_their_size(tmp_path):
    """No Python frames and no matmul beside it: the softmax's input [4, 8, 1024, 1024] over its last
    dimension is attention's scores by its shape; each call writes and reads 4·8·1024·1024 bf16 =
    64 MiB. An fp32 softmax is told bf16/fp16 as well."""
    f = _norm_finding(tmp_path, _forward_calls([[_softmax([4, 8, 1024, 1024])]], frame=False))
    assert f.evidence.values["unfused_attention_ns"] == 600 * US
    assert ("is the softmax of hand-written attention (over [batch, heads, L, L] scores; at L=1024 each call's [L×L] scores, "
            "[4×8×1024×1024] bf16, are 64.0 MiB written to memory and read back). Use "
            "torch.nn.functional.scaled_dot_product_attention (flash / memory-efficient kernels): ") in f.recommendation
    f = _norm_finding(tmp_path / "fp32", _forward_calls([[_softmax([4, 8, 1024, 1024], FP32_SOFTMAX, "float")]], frame=False))
    assert "[4×8×1024×1024] fp32, are 128.0 MiB" in f.recommendation
    assert "(flash / memory-efficient kernels) in bf16/fp16: " in f.recommendation


def test_a_classifiers_softmax_or_a_softmax_over_channels_is_normalisation(tmp_path):
    """linear → softmax in each of two calls of forward: the second call's linear follows the first
    softmax on the same def line, but in another call, so no softmax lies between two products; and a
    [8, 21, 64, 64] segmentation map softmaxed over its classes (dim 1) is no [B, heads, L, L] scores.
    Both fp32: the normalisation advice, lower precision included."""
    linear = ("aten::linear", [[64, 512], [1000, 512], [1000]], ["float", "float", "float"], None, "volta_sgemm_64x64_nt", 50)
    classifier = [linear, _softmax([64, 1000], FP32_SOFTMAX, "float", us=400)]
    for name, events in (("classifier", _forward_calls([classifier, classifier])),
                         ("channels", _forward_calls([[_softmax([8, 21, 64, 64], FP32_SOFTMAX, "float", "1")]], frame=False))):
        f = _norm_finding(tmp_path / name, events)
        assert f.evidence.values["unfused_attention_ns"] == 0, name
        assert "hand-written attention" not in f.title, name
        assert f.recommendation == ("normalisation bounds the step: fused implementations (torch.compile, apex / fused LayerNorm, "
                                    "RMSNorm) in lower precision."), name


def test_normalisation_kernels_that_run_bf16_already_are_not_told_lower_precision(tmp_path):
    """A bf16 LayerNorm kernel bounds the step: fused implementations, and that it runs bf16 already."""
    norm = ("aten::layer_norm", [[64, 4096, 1024], [1024], [1024], [1024]], ["c10::BFloat16"] * 4, None,
            "void vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float)", 600)
    f = _norm_finding(tmp_path, _forward_calls([[norm]]))
    assert f.evidence.values["unfused_attention_ns"] == 0
    assert f.recommendation == ("normalisation bounds the step: fused implementations (torch.compile, apex / fused LayerNorm, "
                                "RMSNorm) (they run in bf16 already).")


def test_a_layernorm_beside_attentions_softmax_keeps_its_own_advice(tmp_path):
    """bmm → softmax (600 µs, bf16) → bmm, then an fp32 LayerNorm of 300 µs (a third of the path):
    SDPA for the softmax first, then the normalisation advice, lower precision included, for the rest."""
    norm = ("aten::layer_norm", [[64, 4096, 1024], [1024], [1024], [1024]], ["float"] * 4, None,
            "void vectorized_layer_norm_kernel<float, float>(int, float)", 300)
    f = _norm_finding(tmp_path, _forward_calls([[_bmm(), _softmax([32, 1024, 1024]), _bmm(), norm]]))
    # the attention (softmax 600, its products 100) and the LayerNorm its advice names (300): the finding's time
    assert f.impact_ns == 1000 * US and f.evidence.values["unfused_attention_ns"] == 600 * US
    assert f.title.startswith("hand-written attention (softmax 0.60 ms, matrix products 0.10 ms) and normalisation/softmax kernels "
                              "(1 name) 0.30 ms: 1.00 ms on the critical path (")
    assert f.recommendation.startswith("unfused attention: ")
    assert f.recommendation.endswith("without writing the scores to memory; the other kernels: normalisation bounds the step: "
                                     "fused implementations (torch.compile, apex / fused LayerNorm, RMSNorm) in lower precision.")


A100_PROPS = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_899_345_920, "computeMajor": 8, "computeMinor": 0,
               "numSms": 108}]


def _compiled_step(kernel: str) -> list[dict]:
    """A host-bound step of a torch.compile'd model (µs):

        host  ProfilerStep#1 [0 ========================================================= 2000)
              CompiledFunction [10 ---------------------------------------------- 1810)
                aten::mm ×12, 100 each from 20, 150 apart; cudaLaunchKernel [+10, +20) in each
        stream 7      [k] [k] ... 12 kernels of 10 µs, each 25 µs after its aten::mm began

    The device idles while the compiled graph's run issues its operators one by one: the host class
    holds CompiledFunction's 1,800 µs less its 12 launches (120 µs, the launch class), 1,680 µs, and the
    200 µs the trace holds no call for."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 2000), X("CompiledFunction", "cpu_op", 10, 1800)]
    for i in range(12):
        t = 20 + 150 * i
        events += [X("aten::mm", "cpu_op", t, 100, **{"External id": i + 1}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 10, 10, correlation=i + 1, **{"External id": i + 1}),
                   _k(kernel, "kernel", i + 1, t + 25, 10)]
    return events


@pytest.mark.parametrize("kernel", ["ampere_sgemm_32x32_sliced1x4_nn", "triton_poi_fused_add_mul_0"])
def test_a_compiled_models_host_time_is_not_told_to_compile(tmp_path, kernel):
    """Host time most of which is a compiled graph's run (AOT autograd's CompiledFunction) was told
    'torch.compile cuts Python and dispatcher overhead': the model is compiled. It is told so, with the
    run's time; where none of the kernels the run launched was generated by the compiler (ATen's
    ampere_sgemm, no Triton kernel), that the backend fuses nothing and inductor would; with Inductor's
    Triton kernels, not. The hotspot operator (the same call, heading the host class) leaves its finding
    to the class; alone, it is not told to compile either."""
    from neuron_explorer.analyzers import analyze

    path = write_trace(tmp_path / "t.json", _compiled_step(kernel), deviceProperties=A100_PROPS)
    report = analyze(import_traces(path, tmp_path / "run").run_dir, write=False)
    (host,) = [f for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] == "host"]
    assert [(h["item"], h["charged_ns"]) for h in host.evidence.values["heaviest"]] == [("CompiledFunction", 1680 * US),
                                                                                        (None, 200 * US)]
    rec = host.recommendation
    assert rec.startswith("1.68 ms of this time is in calls of torch.compile'd code (CompiledFunction 1.68 ms): the model runs "
                          "compiled already, so compiling it again does not cut it. ")
    unfused = ("None of the 12 kernels those calls launched was generated by the compiler (no Triton kernels): the backend runs "
               "each ATen operator's own kernel (as backend='aot_eager' does), so nothing is fused; the default backend, inductor, "
               "generates fused kernels. ")
    assert (unfused in rec) == kernel.startswith("ampere")
    assert "torch.compile cuts" not in rec and "CUDA graphs (torch.cuda.graph, or torch.compile(mode='reduce-overhead')) " in rec
    assert not [f for f in report.findings if f.rule_id == "hotspot" and f.location.op == "CompiledFunction"]
    from neuron_explorer.analyzers.engine import analyze_run
    from neuron_explorer.analyzers.rules import hotspot

    with open_run(tmp_path / "run") as run:
        (op,) = [f for f in analyze_run(run, [hotspot]).findings if f.location.op == "CompiledFunction" and not f.location.kernel]
    assert op.recommendation.startswith("It runs torch.compile'd code already, so compiling again does not cut it. "
                                        + (unfused.replace("those calls", "its calls") if kernel.startswith("ampere") else "Its time"))
    assert "fused / compiled version" not in op.recommendation


def test_an_mtia_step_without_device_properties_launches_with_run_function(tmp_path):
    """An MTIA step as its runtime records it, and no deviceProperties: four kernels, each submitted by
    `runFunction - job_prep_and_submit_for_execution` (mtia_runtime, 200 µs) and run as an
    mtia_ccp_events kernel of 10 µs. Those calls are the launches (the bound read 'runtime calls
    other than launches'), and the device is MTIA's by its categories: the launch advice is
    torch.compile, not CUDA graphs."""
    from neuron_explorer.analyzers import analyze

    events = [X("ProfilerStep#1", "user_annotation", 0, 1000)]
    for i in range(4):
        t = 10 + 240 * i
        events += [X("aten::mm", "cpu_op", t, 230, **{"External id": i + 1}),
                   X("runFunction - job_prep_and_submit_for_execution", "mtia_runtime", t + 10, 200, correlation=i + 1),
                   X("fc-dtype_Float", "mtia_ccp_events", t + 215, 10, pid=9, tid=801, correlation=i + 1)]
    report = analyze(import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir, write=False)
    (rank,) = report.summary["ranks"]
    assert rank["utilisation"]["device"]["arch"] == "Meta MTIA"
    assert rank["bound"]["overall"]["words"].startswith("host-bound (") and ": launch overhead" in rank["bound"]["overall"]["words"]
    (launches,) = [f for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] == "launch"]
    assert launches.impact_ns == 800 * US  # the four calls' 200 µs, all on the path
    assert launches.recommendation.startswith("Launch overhead bounds the step: torch.compile (it fuses kernels into fewer, "
                                              "larger ones)")


def test_device_idle_behind_unseen_work_in_a_blocking_copy_is_no_one_off(tmp_path):
    """SGLang's prefill/decode shape (TraceLens), without steps: stream 3 waits on an event of work
    launched before the trace began (cudaStreamWaitEvent at 8 µs); a kernel is launched on it at 12 µs;
    the host then copies 15 ints to the device with a blocking cudaMemcpy (inside aten::to, 20 µs to
    30,030 µs), which returns only after the kernel ran at 30,000 µs and its own copy after it. Device
    work of 4 µs at 2 µs comes first. device-idle named the 29.99 ms gap 'a one-off more likely than the
    cost of every iteration, such as a library's first use': the host sat in aten::to with no device
    work. The critical path charges the gap to work waiting behind work the trace does not show, and
    device-idle says so."""
    from neuron_explorer.analyzers import analyze

    events = [X("aten::zeros", "cpu_op", 0, 6, **{"External id": 1}),
              X("cudaLaunchKernel", "cuda_runtime", 1, 1, correlation=1, **{"External id": 1}),
              _k("fill_kernel", "kernel", 1, 2, 4, stream=3),
              X("cudaStreamWaitEvent", "cuda_runtime", 8, 2),
              X("aten::add", "cpu_op", 11, 3, **{"External id": 2}),
              X("cudaLaunchKernel", "cuda_runtime", 12, 1, correlation=2, **{"External id": 2}),
              _k("resolve_future_token_ids_kernel", "kernel", 2, 30000, 7, stream=3),
              X("aten::to", "cpu_op", 20, 30010, **{"External id": 3}),
              X("cudaMemcpy", "cuda_runtime", 21, 30008, correlation=3, **{"External id": 3}),
              _k("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 3, 30020, 5, stream=3)]
    report = analyze(import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir, write=False)
    assert report.summary["ranks"][0]["bound"]["overall"]["words"].endswith(cp.UNSEEN_QUEUE_WORDS)
    (idle,) = [f for f in report.findings if f.rule_id == "device-idle"]
    rec = idle.recommendation
    assert rec.startswith("29.99 ms of the longest gaps' 30.01 ms is device work that was ready (launched, its stream's earlier "
                          "work done) yet waited while nothing the trace holds ran on any device"), rec
    assert "one-off" not in rec and "Keep the device fed" not in rec


H100_PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "numSms": 132}]
MI300X_PROPS = [{"id": 0, "name": "AMD Instinct MI300X", "computeMajor": 9, "computeMinor": 4}]


def _device_step(tmp_path, ops, props):
    from neuron_explorer.analyzers import analyze

    path = write_trace(tmp_path / "t.json", _forward_calls([ops]), deviceProperties=props)
    return analyze(import_traces(path, tmp_path / "run").run_dir, write=False)


@pytest.mark.parametrize("props, sizes", [
    (H100_PROPS, "the Tensor Cores: M, N and K (and channels) in multiples of 8 for fp16/bf16, 16 for fp8/int8"),
    (MI300X_PROPS, "the matrix cores (MFMA): M, N and K in multiples of 16, the width of the MFMA instructions' tiles")])
def test_a_bf16_gemm_class_gets_the_devices_sizes_and_no_second_finding(tmp_path, props, sizes):
    """Two bf16 GEMMs of 300 µs bound the step (one kernel name). The class said 'shapes that are
    multiples of 8 (16 for fp8), larger batches' on every device, beside a hotspot finding on the same
    kernel with the device's sizes and what is left for bf16 work (Qwen1.5 chat on an H100: 11.51 and
    11.92 ms, two findings, two fixes). One finding now, in the device's terms: the class's."""
    report = _device_step(tmp_path, [_bmm(us=300), _bmm(us=300)], props)
    (f,) = [f for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] == "matmul"]
    assert f.impact_ns == 600 * US
    assert f.recommendation == (f"these kernels bound the step: shapes that run at full speed on {sizes}; they run in bf16 already: "
                                "what is left is a kernel better tuned for its shapes (for cuBLAS/hipBLASLt GEMMs PyTorch's TunableOp, "
                                "PYTORCH_TUNABLEOP_ENABLED=1; for Triton kernels their autotune configs; "
                                "torch.compile(mode='max-autotune')) and fewer, larger products.")
    assert not [h for h in report.findings if h.rule_id == "hotspot" and h.location.kernel == BF16_GEMM]


def test_fused_attention_bounding_the_step_is_not_told_to_use_sdpa(tmp_path):
    """A step bound by flash attention run by aten::scaled_dot_product_attention (600 µs): it was told
    'use torch.nn.functional.scaled_dot_product_attention'. It runs it: the advice is what is left."""
    sdpa = ("aten::scaled_dot_product_attention", [[4, 8, 1024, 64]] * 3, ["c10::BFloat16"] * 3, None,
            "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t> >(Flash_fwd_params)", 600)
    report = _device_step(tmp_path, [sdpa], H100_PROPS)
    (f,) = [f for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] == "attention"]
    assert f.recommendation.startswith("attention bounds the step, and it runs fused already (aten::scaled_dot_product_attention): ")
    assert "use torch.nn.functional.scaled_dot_product_attention" not in f.recommendation
    # its kernel runs at a small share of the roofline (8.6 GFLOP in 600 µs): device-underuse leaves that to this finding,
    # which says what is left (h100 Qwen1.5 chat: 'reach 19.3% of the roofline' with no advice, beside the class)
    assert not [u for u in report.findings if u.rule_id == "device-underuse"], [u.title for u in report.findings]
    from neuron_explorer.analyzers.engine import analyze_run
    from neuron_explorer.analyzers.rules import device_underuse

    with open_run(tmp_path / "run") as run:  # the rule alone, no class to leave it to: its own words
        (under,) = analyze_run(run, [device_underuse]).findings
    assert under.evidence.values["causes"] == ["attention"] and under.location.kernel.startswith("void flash_fwd_kernel")
    assert under.recommendation.startswith("fused attention falls short of the matrix units' peak where each call's work is small")


def test_hand_written_attentions_products_are_not_a_second_finding_to_pad(tmp_path):
    """bmm → softmax → bmm on one statement, on an H100, the products' dimensions 1025 (not multiples of
    8) and slow (300 µs each for 2.15 GFLOP: a small share of the roofline): device-underuse told them
    'pad them to multiples of 8/16' beside the attention's finding, which removes them
    (scaled_dot_product_attention; owlv2 on an H100: aten::bmm 130.02 ms both). One cause, one finding:
    the attention's, with the products in its figure."""
    ops = [_bmm(l_=1025, us=300), _softmax([32, 1025, 1025]), _bmm(l_=1025, us=300)]
    ops[2] = ("aten::bmm", [[32, 1025, 1025], [32, 1025, 64]], ["c10::BFloat16", "c10::BFloat16"], None, BF16_GEMM, 300)
    report = _device_step(tmp_path, ops, H100_PROPS)
    (f,) = [f for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] == "norm"]
    assert f.title.startswith("hand-written attention (softmax 0.60 ms, matrix products 0.60 ms): 1.20 ms on the critical path")
    assert not [u for u in report.findings if u.rule_id == "device-underuse" and u.location.op == "aten::bmm"], \
        [u.title for u in report.findings]


def test_a_small_nchw_convolution_beside_the_gemms_is_not_the_classes_advice(tmp_path):
    """Two bf16 GEMMs of 300 µs and one NCHW convolution of 20 µs in the GEMM/convolution class (xDiT's
    FLUX on an MI300X, TraceLens: 122.10 ms of GEMMs were told only 'NCHW convolutions: convert the
    model to channels_last'). The convolution is 3% of the class: no channels_last; the sizes the
    matrix units run at full speed, for all of them. With the convolution 600 µs, both."""
    conv = ("aten::conv2d", [[8, 3, 224, 224], [64, 3, 7, 7], [64]], ["c10::BFloat16"] * 3, None,
            "void cudnn::engines_precompiled::conv2d_fprop_kernel(int)", 20)
    report = _device_step(tmp_path / "small", [_bmm(us=300), _bmm(us=300), conv], H100_PROPS)
    (f,) = [f for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] == "matmul"]
    assert f.recommendation.startswith("these kernels bound the step: shapes that run at full speed on the Tensor Cores")
    assert "channels_last" not in f.recommendation
    report = _device_step(tmp_path / "large", [_bmm(us=300), _bmm(us=300), conv[:5] + (600,)], H100_PROPS)
    (f,) = [f for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] == "matmul"]
    assert f.recommendation.startswith("NCHW convolutions (0.60 ms of this time): convert the model and its inputs to channels_last")
    assert "; all of them: shapes that run at full speed on the Tensor Cores" in f.recommendation


def test_short_kernels_of_compiled_code_are_not_told_to_compile(tmp_path):
    """Twelve 5 µs Triton kernels launched by a compiled region's calls, the elementwise class: '12
    short kernels per step: fuse them (torch.compile the module …)' was advice the region has taken;
    CUDA graphs replay them without a launch each."""
    triton = ("Torch-Compiled Region: 0/0", [[4096, 1024]], ["c10::BFloat16"], None, "triton_poi_fused_add_mul_0", 5)
    report = _device_step(tmp_path, [triton] * 12, H100_PROPS)
    (f,) = [f for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] == "elementwise"]
    assert f.recommendation.startswith("12 short kernels per step, most from torch.compile'd code already: CUDA graphs "
                                       "(torch.cuda.graph, or torch.compile(mode='reduce-overhead')) replay them"), f.recommendation


def test_an_aligned_bf16_gemm_far_below_the_roofline_is_one_finding(tmp_path):
    """Two bf16 [4096, 4096] x [4096, 4096] products of 3 ms each bound the step on an H100 (137 GFLOP
    each: 46 TFLOP/s, under a tenth of the peak). Their shapes are aligned and large: device-underuse
    says that what is left is a tuned kernel, which the path's GEMM class says too; with the class
    naming the kernel, one finding, the class's. The rule alone gives its own words."""
    mm = ("aten::mm", [[4096, 4096], [4096, 4096]], ["c10::BFloat16", "c10::BFloat16"], None, BF16_GEMM, 3000)
    report = _device_step(tmp_path, [mm, mm], H100_PROPS)
    (f,) = [f for f in report.findings if f.location.kernel == BF16_GEMM]
    assert f.rule_id == "critical-path" and f.evidence.values["class"] == "matmul" and "what is left is a kernel better tuned" \
        in f.recommendation
    from neuron_explorer.analyzers.engine import analyze_run
    from neuron_explorer.analyzers.rules import device_underuse

    with open_run(tmp_path / "run") as run:
        (under,) = analyze_run(run, [device_underuse]).findings
    assert under.evidence.values["causes"] == ["kernel"]
    assert under.recommendation.startswith("its shapes are aligned and large enough and it runs bf16: what is left is a kernel "
                                           "better tuned for its shapes")


def test_a_gemm_class_most_of_whose_time_runs_bf16_is_told_what_is_left(tmp_path):
    """Two bf16 GEMMs of 300 µs and one of 200 µs whose type the trace does not show (an operator
    without input types, a kernel name without one): most of the class runs in bf16, and its advice
    says so and what is left, as every other class's precision words do (the class had been told
    'larger batches' unless every kernel showed a 16-bit type). Where the unknown ones hold most of
    the time, no precision is claimed."""
    unknown = ("aten::mm", [[4096, 4096], [4096, 4096]], ["", ""], None, "gemm_kernel_generic", 200)

    def advice(sub, bf16_us, unknown_us):
        ops = [_bmm(us=bf16_us), _bmm(us=bf16_us), unknown[:5] + (unknown_us,)]
        report = _device_step(tmp_path / sub, ops, H100_PROPS)
        (f,) = [f for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] == "matmul"]
        assert f.impact_ns == (2 * bf16_us + unknown_us) * US
        return f.recommendation
    assert advice("most", 300, 200).endswith("multiples of 8 for fp16/bf16, 16 for fp8/int8; most of them run in bf16 already: "
                                             "what is left is a kernel better tuned for its shapes (for cuBLAS/hipBLASLt GEMMs "
                                             "PyTorch's TunableOp, PYTORCH_TUNABLEOP_ENABLED=1; for Triton kernels their autotune "
                                             "configs; torch.compile(mode='max-autotune')) and fewer, larger products.")
    assert advice("least", 100, 400).endswith("multiples of 8 for fp16/bf16, 16 for fp8/int8; larger batches, or run them less often.")


def test_attentions_products_stay_a_finding_where_the_softmax_is_not_most_of_its_class(tmp_path):
    """bmm (300 µs) → softmax (100 µs) → bmm (300 µs) on one statement, then an fp32 LayerNorm of 500 µs:
    the normalisation class (600 µs) is mostly the LayerNorm, so its finding is no attention's and
    does not hold the products' time. The GEMM class, all of it the attention's products, had left its
    finding to it all the same, and its 0.60 ms came back as a hotspot and a device-underuse finding on
    the one kernel. The class keeps its finding, with the products' time, and nothing else names them."""
    norm = ("aten::layer_norm", [[64, 4096, 1024], [1024], [1024], [1024]], ["float"] * 4, None,
            "void vectorized_layer_norm_kernel<float, float>(int, float)", 500)
    report = _device_step(tmp_path, [_bmm(us=300), _softmax([32, 1024, 1024], us=100), _bmm(us=300), norm], H100_PROPS)
    path = {f.evidence.values["class"]: f for f in report.findings if f.rule_id == "critical-path"}
    assert path["norm"].impact_ns == 600 * US and path["norm"].evidence.values["unfused_attention_ns"] == 100 * US
    assert path["matmul"].impact_ns == 600 * US and path["matmul"].location.kernel == BF16_GEMM
    assert not [f for f in report.findings if f.rule_id != "critical-path" and f.location.kernel == BF16_GEMM], \
        [f.title for f in report.findings]


def test_short_kernels_a_graph_replays_are_not_told_to_capture_a_graph(tmp_path):
    """Twelve 5 µs Triton kernels of a compiled region, each step replayed by one cudaGraphLaunch (xDiT
    FLUX on an MI300X: 2,181 short Inductor kernels per step replayed by hipGraphLaunch were told 'HIP
    graphs … replay them without a launch each', advice taken). They pay no launch each: what is left is
    fewer, larger kernels. Launched one by one instead, graphs are the advice."""
    def finding(sub, replayed):
        events, corr = [X("ProfilerStep#1", "user_annotation", 0, 200)], 0
        corr += 1
        events.append(X("Torch-Compiled Region: 0/0", "cpu_op", 5, 20 if replayed else 80, **{"External id": 1}))
        if replayed:
            events.append(X("cudaGraphLaunch", "cuda_runtime", 10, 5, correlation=1, **{"External id": 1}))
        for i in range(12):
            if not replayed:
                corr += 1
                events.append(X("cudaLaunchKernel", "cuda_runtime", 6 + 6 * i, 4, correlation=corr, **{"External id": 1}))
            events.append(_k("triton_poi_fused_add_mul_0", "kernel", corr, 100 + 6 * i, 5))
        events.append(X("cudaDeviceSynchronize", "cuda_runtime", 90, 100, correlation=999))
        path = write_trace(tmp_path / sub / "t.json", events, deviceProperties=H100_PROPS)
        from neuron_explorer.analyzers import analyze

        report = analyze(import_traces(path, tmp_path / sub / "run").run_dir, write=False)
        (f,) = [f for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] == "elementwise"]
        return f.recommendation
    assert finding("graph", True) == ("12 short kernels per step, most from torch.compile'd code and replayed from a CUDA graph "
                                      "already (no launch each): what is left is fewer, larger kernels, letting the compiler fuse "
                                      "more (graph-break names any breaks).")
    assert finding("launched", False).startswith("12 short kernels per step, most from torch.compile'd code already: CUDA graphs ")


# ---- a one-rank batch's path begun on a thread of its own while its summary's queries run ---------

def test_a_ranks_path_begun_ahead_is_the_one_the_summary_takes(tmp_path, monkeypatch):
    """The analysis of a one-rank run begins the rank's critical path on a thread beside the summary's
    queries (engine._path_ahead); the summary takes that path, not a second walk, and the report is the
    one made without it (a shared trace recorded with steps, CUDA and NCCL)."""
    import threading

    from neuron_explorer.analyzers import analyze, engine

    run_dir = import_traces(TRACES / "cuda_nccl_rank0_of_2.json.gz", tmp_path / "run").run_dir
    walked, started = [], []
    real_walk, real_start = cp._computed, threading.Thread.start
    monkeypatch.setattr(cp, "_computed", lambda run, rank: walked.append(threading.current_thread().name) or real_walk(run, rank))
    monkeypatch.setattr(threading.Thread, "start", lambda t: started.append(t.name) or real_start(t))
    cp._CACHE.clear()
    ahead = analyze(run_dir, write=False)
    assert walked == ["nx-critical-path"] and "nx-critical-path" in started  # walked once, on its own thread
    assert not cp._AHEAD
    cp._CACHE.clear()
    monkeypatch.setattr(engine, "_path_ahead", lambda *a: None)
    walked.clear()
    alone = analyze(run_dir, write=False)
    assert walked == ["MainThread"]
    assert ahead.to_dict()["summary"] == alone.to_dict()["summary"] and ahead.summary["ranks"][0]["bound"]["overall"]
    assert [f.to_dict() for f in ahead.findings] == [f.to_dict() for f in alone.findings]


def test_a_path_begun_ahead_that_nobody_takes_is_stopped_with_its_batch(tmp_path, monkeypatch):
    """A batch that fails after its rank's path was begun ahead (here its summary's first query): the
    error is the batch's, the path's thread is stopped and gone, and the run's connection closes."""
    import threading

    from neuron_explorer.analyzers import analyze, summary

    run_dir = import_traces(TRACES / "cuda_nccl_rank0_of_2.json.gz", tmp_path / "run").run_dir
    cp._CACHE.clear()

    def fails(*a, **k):
        raise RuntimeError("the summary's query failed")

    monkeypatch.setattr(summary, "rank_summaries", fails)
    with pytest.raises(RuntimeError, match="the summary's query failed"):
        analyze(run_dir, write=False)
    assert not cp._AHEAD
    assert not [t for t in threading.enumerate() if t.name == "nx-critical-path"]
