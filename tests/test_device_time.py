"""Device time that adds up (issue #33, items 1, 5 and 8): the exclusive breakdown of a device's
analysed window (analyzers/device_time.py), communication that the critical path no longer calls
idle, and the GPU part of the text report; on a hand-built two-stream trace whose answer is worked
out by hand below, and on the shared NCCL traces.

Times in the timelines are microseconds.
"""

from __future__ import annotations

import pytest

from neuron_explorer.analyzers import analyze, render
from neuron_explorer.analyzers import critical_path as cp
from neuron_explorer.analyzers import device_time as dt
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import open_run

from .conftest import TRACES, X, write_trace
from .test_invariants import violations

US = 1000
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _dev(name, cat, ts, dur, stream, corr=None):
    return X(name, cat, ts, dur, pid=0, tid=stream, stream=stream, device=0, **({"correlation": corr} if corr else {}))


def _rt(name, ts, dur, corr, ext):
    return X(name, "cuda_runtime", ts, dur, correlation=corr, **{"External id": ext})


def _mem(ts, nbytes, total):
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "s": "t",
            "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096 + ts, "Bytes": nbytes, "Total Allocated": total,
                     "Total Reserved": 2 * total}}


TWO_STREAMS = [
    # ProfilerStep#1 [0 ................................................................ 1000)
    # host  aten::mm [0-10) launch [2-6) -> K1          aten::add [20-30) launch [22-26) -> K2
    #       c10d::allreduce_ [30-40): launches [32-35) -> N1, [36-39) -> N2
    #       cudaDeviceSynchronize [40-990)
    # stream 7  (compute)         K1 [100-300)                  K2 [500-600)
    # stream 20 (NCCL)                      N1 [250-450)                              N2 [950-1050)
    # stream 21 (copy)                           memcpy [420-520)
    # stream 7, after the step                                                               K3 [1100-1200)
    X("ProfilerStep#1", "user_annotation", 0, 1000),
    X("aten::mm", "cpu_op", 0, 10, **{"External id": 1}), _rt("cudaLaunchKernel", 2, 4, 1, 1),
    X("aten::add", "cpu_op", 20, 10, **{"External id": 2}), _rt("cudaLaunchKernel", 22, 4, 2, 2),
    X("c10d::allreduce_", "cpu_op", 30, 10, **{"External id": 3}), _rt("cudaLaunchKernel", 32, 3, 3, 3),
    _rt("cudaLaunchKernel", 36, 3, 4, 3),
    X("cudaDeviceSynchronize", "cuda_runtime", 40, 950),
    X("aten::mul", "cpu_op", 1090, 5, **{"External id": 5}), _rt("cudaLaunchKernel", 1091, 3, 5, 5),
    _dev("K1_gemm", "kernel", 100, 200, 7, 1), _dev("K2_add", "kernel", 500, 100, 7, 2),
    _dev(NCCL, "kernel", 250, 200, 20, 3), _dev(NCCL, "kernel", 950, 100, 20, 4),
    _dev("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 420, 100, 21),
    _dev("K3_mul", "kernel", 1100, 100, 7, 5),
    _mem(5, 2**20, 2**20), _mem(15, 3 * 2**20, 4 * 2**20), _mem(700, -2**20, 3 * 2**20),
]
"""By hand, in the step's window W = [0, 1000):
A (compute kernels) = [100,300) ∪ [500,600) = 300 µs: compute 300;
B (all kernels) = [100,450) ∪ [500,600) ∪ [950,1000) = 500: communication = 500 − 300 = 200
  (N1 alone on [300,450) = 150, N2 inside the step [950,1000) = 50; N1's [250,300) is under K1);
C (all device work) = [100,600) ∪ [950,1000) = 550: memory = 50 (the copy alone on [450,500));
idle = 1000 − 550 = 450. K3 (after the step) counts nowhere."""


@pytest.fixture(scope="module")
def two_streams(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two_streams")
    return import_traces(write_trace(tmp / "t.json", TWO_STREAMS), tmp / "run").run_dir


def test_the_breakdown_of_two_streams_is_exclusive_and_adds_up_to_the_window(two_streams):
    with open_run(two_streams) as run:
        (d,) = dt.breakdown(run, 0)
    assert {k: d[k] for k in ("window_ns", "compute_ns", "communication_ns", "memory_ns", "idle_ns")} == {
        "window_ns": 1000 * US, "compute_ns": 300 * US, "communication_ns": 200 * US, "memory_ns": 50 * US, "idle_ns": 450 * US}
    assert d["steps"] == [{"step": 1, "dur_ns": 1000 * US, "compute_ns": 300 * US, "communication_ns": 200 * US,
                           "memory_ns": 50 * US, "idle_ns": 450 * US}]
    (named,) = d["exposed_communication"]  # both collectives: same kernel, same caller
    assert (named["collective"], named["op"], named["ns"], named["kernels"], named["steps"]) == (
        "ncclKernel_AllReduce_RING_LL_Sum_float", "c10d::allreduce_", 200 * US, 2, [{"step": 1, "ns": 200 * US}])
    tops = {k["kernel"]: (k["dur_ns"], k["count"]) for k in d["top_kernels"]}
    # kernel time inside the window: K1 200, K2 100, N1 200 + N2 50 (its part in the step); K3 none
    assert tops == {"K1_gemm": (200 * US, 1), "K2_add": (100 * US, 1), "ncclKernel_AllReduce_RING_LL_Sum_float": (250 * US, 2)}
    assert sum(k["share"] for k in d["top_kernels"]) == pytest.approx(1.0)


def test_the_evidence_sql_gives_the_same_exposed_communication(two_streams):
    with open_run(two_streams) as run:
        got = run.sql(dt.exposed_sql(0, 0)).fetchone()
    assert got == (200 * US, 250 * US, 1000 * US)  # exposed, the collectives' union in the window, the window


def test_comm_exposed_reports_the_window_and_names_the_collective(two_streams):
    report = analyze(two_streams, write=False)
    assert not violations(report.to_dict())
    (f,) = [f for f in report.findings if f.rule_id == "comm-exposed"]
    assert f.impact_ns == f.saving_bound_ns == 200 * US
    assert f.location.kernel == "ncclKernel_AllReduce_RING_LL_Sum_float" and f.location.op == "c10d::allreduce_"
    assert "from c10d::allreduce_" in f.title
    # all of it all-reduces: the advice is theirs (DDP's buckets, bf16 gradients), not every collective's
    assert f.recommendation.startswith("Exposed per step: step 1 0.20 ms. All-reduces (data parallelism's gradients): overlap "
                                       "them with the backward (DDP's gradient buckets")


@pytest.mark.parametrize("kernel, op, kind", [
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "All2All_Pooled_Req", "all-to-all"),  # TorchRec: NCCL's all-to-all is send/recv
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "a gradient hook in backward (after AccumulateGrad)", None),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "c10d::recv_", "send/recv"),
    ("ncclDevKernel_AllGather_RING_LL", None, "all-gather"),
    ("ncclDevKernel_Generic", "c10d::_reduce_scatter_base_", "reduce-scatter"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float", "autograd::engine::evaluate_function: CompiledFunctionBackward", "all-reduce"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "c10d::broadcast_", "broadcast"),
    ("ncclDevKernel_Generic", None, None)])
def test_what_a_collective_does_is_read_from_its_operator_then_its_kernel(kernel, op, kind):
    """The kinds comm-exposed's advice follows (vocab.collective_kind), on names from the vendored and
    held-out traces: HTA's trace_diff run's SendRecv kernels of TorchRec's All2All_Pooled_Req were told
    DDP's buckets; a SendRecv kernel alone may be an all-to-all or a pipeline's send, and says neither."""
    from neuron_explorer.vocab import collective_kind

    assert collective_kind(kernel, op) == kind


def test_the_critical_path_calls_time_under_a_collective_communication_not_idle(two_streams):
    """K2 waits on its stream for K1 from 300 to 500: N1 runs on [300, 450) (communication, charged
    to N1), nothing on [450, 500) but the copy (idle, as before)."""
    with open_run(two_streams) as run:
        names = dict(run.sql("SELECT event_id, name FROM events").fetchall())
        rows = [(r["ts_ns"] // US, r["charged_ns"] // US, names.get(r["event_id"]), r["category"]) for r in cp.rank_path(run, 0)]
        overall = cp.bound(run, 0)["overall"]["ns"]
    assert (300, 150, NCCL, "communication") in rows
    assert (450, 50, "K2_add", "idle") in rows
    assert not any(c == "idle" and ts < 450 and ts + ns > 300 for ts, ns, _, c in rows)
    assert sum(ns for _, ns, _, _ in rows) == 1000
    assert overall["communication"] == 150 * US and overall["idle"] == (94 + 50) * US  # idle [6,100) before K1 and [450,500)


def test_the_text_report_shows_the_device_time(two_streams):
    report = analyze(two_streams, write=False)
    r = report.summary["ranks"][0]
    assert r["peak_memory"] == [{"device_type": 1, "device": 0, "peak_allocated_bytes": 4 * 2**20,
                                 "peak_reserved_bytes": 8 * 2**20, "events": 3}]
    assert r["achieved"]["compute_ns"] == 300 * US
    text = render.text(report, width=200)
    assert ("device 0 time in the analysed window (1.00 ms): compute 300.00 µs (30.0%), communication 200.00 µs (20.0%), "
            "memory copies/sets 50.00 µs (5.0%), idle 450.00 µs (45.0%)") in text
    assert "ncclKernel_AllReduce_RING_LL_Sum_float from c10d::allreduce_ 200.00 µs (2 kernels)" in text
    assert "exposed communication per step: 1 200.00 µs" in text
    assert "ncclKernel_AllReduce_RING_LL_Sum_float  250.00 µs  45.5%  ×2" in text  # 250 of 550 µs of kernel time
    assert "peak device memory: device 0 4.0 MiB allocated, 8.0 MiB reserved" in text
    assert "first to last device event, 1.10 ms (63.6%), kernels 700.00 µs, memcpy" in text  # a sum, no more than busy
    assert "memory copies/sets 50.00 µs (5.0%)" in render.markdown(report)


# ---- the shared NCCL traces ---------------------------------------------------------------------

def _real(tmp_path, name):
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{name} not in {TRACES}")
    return import_traces(path, tmp_path / "run").run_dir


def test_nccl_rank_breakdown_and_exposed_communication(tmp_path):
    """cuda_nccl_rank0_of_2: steps 4-6 (667.11 ms); all-reduces from AccumulateGrad exposed 39.45 ms."""
    with open_run(_real(tmp_path, "cuda_nccl_rank0_of_2.json.gz")) as run:
        (d,) = dt.breakdown(run, 0)
        assert run.sql(dt.exposed_sql(0, d["device"])).fetchone()[0] == d["communication_ns"]
    assert d["window_ns"] == 667_105_339
    assert sum(d[k] for k in ("compute_ns", "communication_ns", "memory_ns", "idle_ns")) == d["window_ns"]
    assert d["communication_ns"] == 39_559_468
    top = d["exposed_communication"][0]
    assert (top["collective"], top["op"], top["kernels"]) == (
        "ncclKernel_AllReduce_RING_LL_Sum_float", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 15)
    assert top["ns"] == 39_445_134


def test_multirank_critical_path_communication_is_no_longer_zero(tmp_path):
    """multirank_128 rank 1: 19.65 of the 30.57 ms the path called idle had a collective running;
    they are communication now (was 0), idle 10.92 ms."""
    with open_run(_real(tmp_path, "multirank_128")) as run:
        ns = cp.bound(run, 1)["overall"]["ns"]
        (d,) = dt.breakdown(run, 1)
    assert ns["communication"] == 19_645_000 and ns["idle"] == 10_923_000
    assert sum(d[k] for k in ("compute_ns", "communication_ns", "memory_ns", "idle_ns")) == d["window_ns"] == 1_238_543_000
    assert d["communication_ns"] == 303_523_000


def test_multirank_exposed_communication_leaves_the_wait_for_the_late_rank_to_collective_wait(tmp_path):
    """multirank_128: each rank's exposed communication (303.52 ms on rank 1, 336.98 ms on rank 0) holds
    time its SendRecv kernels spent waiting for the other rank to arrive (collective-wait's and
    rank-skew's). comm-exposed keeps the rest: the two figures add up to the device's exposed
    communication, the wait part is no more than the rank's collective wait, and the title says both."""
    from neuron_explorer.analyzers.rules import comm_exposed

    run_dir = _real(tmp_path, "multirank_128")
    report = analyze(run_dir, write=False)
    waits = {r["rank"]: r["wait_ns"] for r in report.summary["cross_rank"]["ranks"]}
    found = {f.location.rank: f for f in report.findings if f.rule_id == "comm-exposed"}
    assert sorted(found) == [0, 1] and {"collective-wait", "rank-skew"} <= {f.rule_id for f in report.findings}
    with open_run(run_dir) as run:
        for rank, exposed in ((0, 336_983_000), (1, 303_523_000)):
            (d,) = dt.breakdown(run, rank)
            waiting = comm_exposed.waiting_exposed(run, rank, d["device"])
            f = found[rank]
            assert d["communication_ns"] == exposed and 0 < waiting <= waits[rank]
            assert f.impact_ns + waiting == exposed and f.evidence.values["waiting_ns"] == waiting
            assert f"({exposed / 1e6:,.2f} ms exposed, {waiting / 1e6:,.2f} ms of it waiting for the last rank to arrive" in f.title
    assert (found[1].impact_ns, found[0].impact_ns) == (198_726_000, 191_956_000)


def test_top_kernels_by_the_windows_coverage_equal_the_join_of_kernels_and_windows(two_streams, monkeypatch):
    """A rank with many steps has its top kernels from the windows' coverage (two ASOF joins,
    `_covered_kernels_sql`) when its windows are disjoint: the same figures as the join of every
    kernel with every window, also for kernels that cross a gap between windows; overlapping
    windows keep the join."""
    disjoint = [(1, 0, 200 * US), (2, 250 * US, 400 * US), (3, 420 * US, 1000 * US)]
    overlapping = [(1, 0, 300 * US), (2, 250 * US, 1000 * US)]
    with open_run(two_streams) as run:
        joined = {k: dt._top_kernels_many(run, {0: w}) for k, w in (("disjoint", disjoint), ("overlapping", overlapping))}
        monkeypatch.setattr(dt, "GROUPED_WINDOWS_MAX", 1)  # a query of the rank's own
        seen = []
        real = dt._covered_kernels_sql
        monkeypatch.setattr(dt, "_covered_kernels_sql", lambda w: seen.append(w) or real(w))
        own = {k: dt._top_kernels_many(run, {0: w}) for k, w in (("disjoint", disjoint), ("overlapping", overlapping))}
    assert own == joined and len(seen) == 1  # the coverage only for the disjoint windows
    tops = {k["kernel"]: (k["dur_ns"], k["count"]) for k in own["disjoint"][0][0]}
    assert tops["K1_gemm"] == (150 * US, 1)  # [100, 300) less the gap [200, 250)
    assert tops["ncclKernel_AllReduce_RING_LL_Sum_float"][1] == 2


def test_multirank_host_time_is_long_empty_stretches_not_compile_advice(tmp_path):
    """multirank_128 (a recommendation model, all-to-all and send/recv between two ranks): the path
    charges most of each rank's steps to the main thread's host time, 1,188 ms on rank 0, and advised
    compiling. Most of it is stretches with nothing recorded beneath: `## backward ##` while the
    autograd thread works and waits, `forward`, and `aten::_foreach_mul_` of the Shampoo optimizer,
    which on rank 0 runs 107.39 ms between two of its aten::mul_ calls with nothing recorded. The
    advice now says that is a wait or unrecorded Python, and how to tell which."""
    from neuron_explorer.analyzers import analyze

    run_dir = _real(tmp_path, "multirank_128")
    with open_run(run_dir) as run:
        gap = run.sql("""SELECT max(gap) FROM (SELECT c.ts_ns - lag(c.ts_ns + c.dur_ns) OVER (PARTITION BY c.parent_id ORDER BY c.ts_ns)
            AS gap FROM events c JOIN events p ON p.event_id = c.parent_id
            WHERE c.rank = 0 AND p.name = 'aten::_foreach_mul_' AND c.name = 'aten::mul_')""").fetchone()[0]
    assert gap == 107_394_000
    report = analyze(run_dir, write=False)
    host = {f.location.rank: f for f in report.findings if f.rule_id == "critical-path" and f.evidence.values["class"] == "host"}
    assert sorted(host) == [0, 1]
    for f in host.values():
        v = f.evidence.values
        assert v["long_stretches_ns"] * 2 >= v["charged_ns"] and v["charged_ns"] <= v["path_ns"]
        assert f.recommendation.startswith(f"{v['long_stretches_ns'] / 1e6:,.2f} ms of this time is long stretches")
        assert "(## backward ## " in f.recommendation and "aten::_foreach_mul_" in f.recommendation
        assert "torch.compile cuts" not in f.recommendation
    assert host[0].evidence.values["long_stretches_ns"] >= gap
    # rank 0 arrives last in one step: "in 1 step"
    skew = {f.location.rank: f.title for f in report.findings if f.rule_id == "rank-skew"}
    assert skew[0].endswith("late over 2 calls in 1 step; the other ranks wait for it") and " 1 steps" not in skew[0]
    # a collective exposed in one kernel reads "(1 kernel)"
    assert "from autograd::engine::evaluate_function: All2All_Pooled_WaitBackward 89.03 ms (1 kernel);" in " ".join(
        render.text(report, width=400).split())


def test_the_busy_line_says_when_kernels_are_summed_over_concurrent_streams(tmp_path):
    """Two 100 µs kernels on two streams, overlapping by 50 µs: busy 150 µs of a 150 µs window,
    kernels 200 µs, a sum over streams (docs/METRICS.md `kernel_ns`) that the line says it is, so
    that it is not read as more time than the window; the two-streams step's do not overlap."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 400), X("aten::mm", "cpu_op", 0, 10, **{"External id": 1}),
              _rt("cudaLaunchKernel", 2, 2, 1, 1), _rt("cudaLaunchKernel", 5, 2, 2, 1),
              _dev("k_a", "kernel", 100, 100, 7, 1), _dev("k_b", "kernel", 150, 100, 8, 2)]
    text = render.text(analyze(import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir, write=False), width=300)
    assert ("device 0: busy 150.00 µs of its window, first to last device event, 150.00 µs (100.0%), "
            "kernels 200.00 µs (summed over concurrent streams), memcpy 0 ns") in text


def test_no_window_rate_where_the_flops_describe_almost_none_of_the_devices_work(tmp_path):
    """achieved.tflops_per_s is the counted FLOPs over the window. mtia_inference's only counted
    operators launched no compute kernel (0% of the compute kernels' time): the report said
    'achieved: 3.97 MFLOP/s over the analysed window' for a device 91.7% busy computing. Under 1% of
    the compute kernels' time counted, there is no window rate and no MFU, and the report says why; at
    1% or more, and on a run with no compute kernels (the CPU's operators), the rate is given."""
    def got(kernel_ns, all_ns):
        u = {"flops": 2e9, "kernel_flops": 2e9, "kernel_ns": kernel_ns, "compute_kernel_ns": all_ns,
             "dtype": "bf16", "peak": {"tflops": {"bf16": 100.0}}}
        return dt.achieved(u, [{"compute_ns": all_ns}], 1_000_000)  # a 1 ms window
    few = got(5_000, 1_000_000)  # 0.5% of the compute kernels' time counted
    assert few["tflops_per_s"] is None and few["mfu"] is None and few["counted_share"] == 0.005
    enough = got(10_000, 1_000_000)  # 1%
    assert enough["tflops_per_s"] == pytest.approx(2.0) and enough["mfu"] == pytest.approx(0.02)
    assert got(0, 0)["tflops_per_s"] == pytest.approx(2.0)  # no compute kernels: the operators' rate
    line = render._achieved_line({"achieved": few})
    assert line.startswith("  achieved: not counted: 0.5% of the compute kernels' time ran in an operator with a FLOP count")
    report = analyze(import_traces(TRACES / "mtia_inference.json.gz", tmp_path / "run").run_dir, write=False)
    a = report.summary["ranks"][0]["achieved"]
    assert a["flops"] > 0 and a["counted_share"] == 0 and a["tflops_per_s"] is None
    assert "achieved: not counted: 0.0% of the compute kernels' time" in render.text(report, width=200)
