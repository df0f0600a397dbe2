"""Synchronisation means the device (issue #33, items 1 and 4): hand-built traces of each case the
issue observed, with the figure a person would check.

- `.item()` on a CPU tensor (aten::item with no runtime call beneath) is no host sync;
- syncs cost the device idle they cause: before the next launch, at most what they waited
  (not the whole gap after them, nor the gap after each summed);
- a blocking device-to-host copy is a host sync, not launch overhead (rules and critical path);
- a launch never waits for its own kernel (critical path: a 30 µs launch is launch overhead);
- a graph launch that ran many short kernels is charged once by `launch-overhead`.

Times in the timelines are microseconds.
"""

from __future__ import annotations

from neuron_explorer.analyzers import analyze
from neuron_explorer.analyzers import critical_path as cp
from neuron_explorer.analyzers.rules.host_sync import figures_sql
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import open_run

from .conftest import X, write_trace
from .test_invariants import violations

US = 1000


def _k(name, ts, dur, corr, cat="kernel", stream=7):
    return X(name, cat, ts, dur, pid=0, tid=stream, correlation=corr, stream=stream, device=0)


def _rt(name, ts, dur, corr, ext=None):
    return X(name, "cuda_runtime", ts, dur, correlation=corr, **({"External id": ext} if ext is not None else {}))


def _run(tmp_path, events):
    return import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir


def _findings(run_dir, rule):
    report = analyze(run_dir, write=False)
    assert not violations(report.to_dict())  # and no figure of any rule is larger than the trace
    return [f for f in report.findings if f.rule_id == rule]


def _path_rows(run_dir):
    with open_run(run_dir) as run:
        names = dict(run.sql("SELECT event_id, name FROM events").fetchall())
        return [(names.get(r["event_id"]), r["category"], r["cause"], r["charged_ns"]) for r in cp.rank_path(run, 0)]


def test_item_on_cpu_tensors_is_no_host_sync(tmp_path):
    """100 `.item()` on CPU tensors between a kernel and the next one: nothing waits for the device.

        ProfilerStep#1 [0 ................................................ 1000)
        aten::mm [0-10) launch [2-6) -> K1 [10-20)
        aten::item [100-105) [110-115) ... 100 of them, aten::_local_scalar_dense inside, no runtime call
        aten::add [950-960) launch [952-956) -> K2 [960-965)

    The old rule charged each its idle up to K2, summed: 100 x ~440 µs = 44 ms in a 1 ms step.
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000),
              X("aten::mm", "cpu_op", 0, 10, **{"External id": 1}), _rt("cudaLaunchKernel", 2, 4, 1, 1), _k("K1", 10, 10, 1),
              X("aten::add", "cpu_op", 950, 10, **{"External id": 2}), _rt("cudaLaunchKernel", 952, 4, 2, 2), _k("K2", 960, 5, 2)]
    for i in range(100):
        t = 100 + 8 * i
        events += [X("aten::item", "cpu_op", t, 5), X("aten::_local_scalar_dense", "cpu_op", t + 1, 3)]
    assert _findings(_run(tmp_path, events), "host-sync") == []


def test_syncs_before_the_same_launch_cost_what_they_waited_not_the_whole_gap(tmp_path):
    """10 `.item()` on a device tensor, each with a 6 µs cudaStreamSynchronize beneath, then nothing
    runs on the device until K2 at 500.

        ProfilerStep#1 [0 ......................................................... 600)
        aten::mm [0-10) launch [2-6) -> K1 [10-90)
        aten::item [100+20i, 110+20i) for i < 10, cudaStreamSynchronize [102+20i, 108+20i) inside
        aten::add [490-500) launch [492-496) -> K2 [500-510)

    Without the syncs the host reaches aten::add 60 µs earlier (10 x 6 µs): K2 starts at 440, so they
    cost the device [440, 500) = 60 µs. The rest of the gap after the first sync, [110, 440), is host
    work that remains without them; the gap after each sync, summed, would say 3,000 µs.
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 600),
              X("aten::mm", "cpu_op", 0, 10, **{"External id": 1}), _rt("cudaLaunchKernel", 2, 4, 1, 1), _k("K1", 10, 80, 1),
              X("aten::add", "cpu_op", 490, 10, **{"External id": 2}), _rt("cudaLaunchKernel", 492, 4, 2, 2), _k("K2", 500, 10, 2)]
    for i in range(10):
        t = 100 + 20 * i
        events += [X("aten::item", "cpu_op", t, 10, **{"External id": 10 + i}),
                   _rt("cudaStreamSynchronize", t + 2, 6, 10 + i, 10 + i)]
    (f,) = _findings(_run(tmp_path, events), "host-sync")
    assert f.impact_ns == 60 * US and f.saving_bound_ns == 60 * US
    assert f.evidence.values["idle_summed_ns"] == sum(390 - 20 * i for i in range(10)) * US == 3000 * US
    assert f.evidence.values["stalls"] == 10 and f.evidence.values["wait_ns"] == 60 * US and f.location.op == "aten::item"
    assert f.title.startswith("10 host-device synchronisations cost the device 0.06 ms of idle (they wait 0.06 ms)")


def test_a_short_sync_before_long_host_work_is_no_finding(tmp_path):
    """A compiled function's first call, as a torch.compile trace records it: one 20 µs
    cudaDeviceSynchronize, then 50 ms of Python before the next kernel. The device idles 50 ms, but
    the sync caused 20 µs of it: removing it would launch the kernel 20 µs earlier. The idle is the
    critical path's host time, not a sync's.

        ProfilerStep#1 [0 ............................................. 60,000)
        aten::mm [0-10) launch [2-6) -> K1 [10-20)
        cudaDeviceSynchronize [25-45)
        aten::add [50,000-50,010) launch [50,002-50,006) -> K2 [50,010-50,020)
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 60_000),
              X("aten::mm", "cpu_op", 0, 10, **{"External id": 1}), _rt("cudaLaunchKernel", 2, 4, 1, 1), _k("K1", 10, 10, 1),
              _rt("cudaDeviceSynchronize", 25, 20, 3),
              X("aten::add", "cpu_op", 50_000, 10, **{"External id": 2}), _rt("cudaLaunchKernel", 50_002, 4, 2, 2),
              _k("K2", 50_010, 10, 2)]
    run_dir = _run(tmp_path, events)
    assert _findings(run_dir, "host-sync") == []  # 20 µs of 60 ms: under the rule's 1%
    with open_run(run_dir) as run:
        v = run.sql(figures_sql(0)).fetchone()
        cols = [c[0] for c in run.sql(figures_sql(0)).description]
    got = dict(zip(cols, v))
    assert (got["idle_after_ns"], got["wait_ns"], got["idle_summed_ns"]) == (20 * US, 20 * US, (50_010 - 45) * US)


def test_idle_after_a_sync_while_another_stream_works_is_not_idle(tmp_path):
    """A cudaStreamSynchronize on stream 7 returns at 50 while stream 8 still runs K8 to 80; the next
    work starts at 100: the device idles 20 µs after the sync, not 50."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 200),
              _rt("cudaLaunchKernel", 0, 2, 1), _k("K7", 2, 40, 1),
              _rt("cudaLaunchKernel", 3, 2, 2), _k("K8", 5, 75, 2, stream=8),
              _rt("cudaStreamSynchronize", 10, 40, 3),
              _rt("cudaLaunchKernel", 95, 2, 4), _k("K9", 100, 5, 4)]
    (f,) = _findings(_run(tmp_path, events), "host-sync")
    assert f.impact_ns == 20 * US and f.evidence.values["idle_summed_ns"] == 50 * US


def _blocking_copy_trace(bare: bool = False):
    """`.item()` on a device tensor as PyTorch records it: a blocking device-to-host cudaMemcpyAsync.

        ProfilerStep#1 [0 ............................................................ 400)
        aten::mm [0-10) launch [2-6) -> K1 [10-140)
        aten::item [100-230) > aten::_local_scalar_dense [100-230) > cudaMemcpyAsync [100-228) (128 µs)
        stream 7: K1 [10-140), Memcpy DtoH (Device -> Pageable) [140-147)
        aten::add [300-310) launch [302-306) -> K2 [310-320)

    The copy call waits for K1 (to 140), then for its copy (to 147), then stages the data into pageable
    memory until 228 while the device idles (63% of the call). `bare`: the copy call made outside
    every operator (no aten::item around it).
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 400),
              X("aten::mm", "cpu_op", 0, 10, **{"External id": 1}), _rt("cudaLaunchKernel", 2, 4, 1, 1), _k("K1", 10, 130, 1),
              _rt("cudaMemcpyAsync", 100, 128, 5, None if bare else 5),
              _k("Memcpy DtoH (Device -> Pageable)", 140, 7, 5, cat="gpu_memcpy"),
              X("aten::add", "cpu_op", 300, 10, **{"External id": 2}), _rt("cudaLaunchKernel", 302, 4, 2, 2), _k("K2", 310, 10, 2)]
    if not bare:
        events += [X("aten::item", "cpu_op", 100, 130, **{"External id": 5}),
                   X("aten::_local_scalar_dense", "cpu_op", 100, 130, **{"External id": 5})]
    return events


def test_a_blocking_device_to_host_copy_is_a_host_sync_not_launch_overhead(tmp_path):
    run_dir = _run(tmp_path, _blocking_copy_trace())
    (f,) = _findings(run_dir, "host-sync")
    # aten::item returns at 230; the device idles until K2 at 310
    assert f.impact_ns == 80 * US and f.evidence.values["stalls"] == 1 and f.location.op == "aten::item"
    assert _findings(run_dir, "launch-overhead") == []
    rows = _path_rows(run_dir)
    copy_call = [(cat, ns) for name, cat, cause, ns in rows if name == "cudaMemcpyAsync"]
    # on the critical path the call's 81 µs after its copy are host work of the sync, not a launch
    assert copy_call == [("host_compute", 81 * US)]
    assert not [r for r in rows if r[1] == "launch_overhead" and r[0] == "cudaMemcpyAsync"]
    assert ("Memcpy DtoH (Device -> Pageable)", "memcpy", None, 7 * US) in rows


def test_a_bare_blocking_copy_outside_every_operator_is_a_host_sync(tmp_path):
    run_dir = _run(tmp_path, _blocking_copy_trace(bare=True))
    (f,) = _findings(run_dir, "host-sync")
    assert f.impact_ns == 82 * US and f.location.op == "cudaMemcpyAsync"  # returns at 228, K2 at 310


def test_an_async_copy_to_the_device_is_no_host_sync(tmp_path):
    """A host-to-device cudaMemcpyAsync whose copy runs after the call returned waits for nothing."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 400),
              X("aten::copy_", "cpu_op", 100, 10, **{"External id": 5}), _rt("cudaMemcpyAsync", 101, 8, 5, 5),
              _k("Memcpy HtoD (Pinned -> Device)", 112, 50, 5, cat="gpu_memcpy"),
              _rt("cudaLaunchKernel", 300, 4, 2), _k("K2", 310, 10, 2)]
    assert _findings(_run(tmp_path, events), "host-sync") == []


def test_a_launch_never_waits_for_its_own_kernel(tmp_path):
    """A 30 µs cudaLaunchKernel whose own kernel runs and ends inside it.

        ProfilerStep#1 [0 ...................................... 100)
        aten::add [10-50) > cudaLaunchKernel [12-42) (30 µs) -> K [15-20)

    The launch did not wait for the device: its 30 µs are launch overhead and K is off the path
    (the old walk moved to K at 20 and charged the launch's 22 µs after it as "its own time after
    the device work it waited for", K's 5 µs and 3 µs of idle before K).
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 100),
              X("aten::add", "cpu_op", 10, 40, **{"External id": 1}), _rt("cudaLaunchKernel", 12, 30, 1, 1), _k("K", 15, 5, 1)]
    rows = _path_rows(_run(tmp_path, events))
    assert ("cudaLaunchKernel", "launch_overhead", None, 30 * US) in rows
    assert not [r for r in rows if r[0] == "K"]
    assert not [r for r in rows if r[2] == "the call's own time after the device work it waited for"]
    assert sum(r[3] for r in rows) == 100 * US


def test_a_long_launch_still_waits_for_other_work(tmp_path):
    """A 30 µs launch during which an earlier kernel ended (a full launch queue) still waits for it."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 100),
              _rt("cudaLaunchKernel", 1, 2, 1), _k("K0", 4, 26, 1),
              X("aten::add", "cpu_op", 10, 40, **{"External id": 2}), _rt("cudaLaunchKernel", 12, 30, 2, 2), _k("K", 31, 5, 2)]
    rows = _path_rows(_run(tmp_path, events))
    assert ("K0", "device_compute", None, 26 * US) in rows
    assert ("cudaLaunchKernel", "launch_overhead", "the call's own time after the device work it waited for", 12 * US) in rows


def test_kernels_a_graph_launch_replays_are_no_launch_overhead(tmp_path):
    """Two cudaGraphLaunch calls of 100 µs, each replaying 70 kernels of 2 µs (140 short kernels):
    one call issues each graph, so the kernels pay no launch each and 'use CUDA graphs' is taken
    already: no finding (once, 140 x 100 µs = 14 ms, longer than the 1 ms trace; then 200 µs with
    that advice). The same kernels launched one by one are the finding (test_inference_loops)."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000)]
    for g, t in enumerate((100, 500)):
        corr = 100 + g
        events += [X("aten::graph_replay", "cpu_op", t, 110, **{"External id": corr}), _rt("cudaGraphLaunch", t + 5, 100, corr, corr)]
        events += [_k(f"graph_kernel_{i}", t + 10 + 3 * i, 2, corr) for i in range(70)]
    assert _findings(_run(tmp_path, events), "launch-overhead") == []


def test_without_steps_a_sync_costs_its_wait_not_its_operator(tmp_path):
    """No profiler steps: the first `.to('cuda')` runs 1,000 µs (creating the context) and ends with
    a 50 µs cudaStreamSynchronize; a later `.item()` copies asynchronously. The sync waits 50 µs, not
    the operator's 1,000 µs (the alexnet trace: a 29.9 s first `aten::to` around an 11 µs sync)."""
    events = [X("aten::to", "cpu_op", 0, 1000, **{"External id": 1}), _rt("cudaMemcpyAsync", 930, 5, 1, 1),
              _k("Memcpy HtoD (Pageable -> Device)", 936, 2, 1, cat="gpu_memcpy"),
              _rt("cudaStreamSynchronize", 940, 50, 2, 1),
              _rt("cudaLaunchKernel", 1010, 5, 3), _k("K", 1016, 400, 3),
              X("aten::item", "cpu_op", 1020, 30, **{"External id": 4}), _rt("cudaMemcpyAsync", 1025, 20, 4, 4),
              _k("Memcpy DtoH (Device -> Pinned)", 1417, 1, 4, cat="gpu_memcpy")]
    # the DtoH copy ends at 1418, after its call returned at 1045: an asynchronous copy, no sync
    (f,) = _findings(_run(tmp_path, events), "host-sync")
    assert f.impact_ns == 50 * US and f.evidence.values["syncs"] == 1 and f.location.op == "aten::to"
    assert f.title == "1 host-device synchronisation waits 0.05 ms"


def test_without_steps_a_wait_while_the_device_works_costs_nothing(tmp_path):
    """No profiler steps: a kernel runs [10, 410) µs; cudaDeviceSynchronize waits for it [20, 412),
    then a second one [500, 560) with nothing running. The host waited 452 µs, but for 390 of them
    the device worked: the window lost only what neither side worked, the 2 µs after the kernel and the
    60 µs of the second wait, 62 µs. (A benchmark's synchronize at its end, 11.87 ms of a 13.28 ms
    device-bound span, was its first finding, 'Remove host syncs from the step'.) With the first wait
    alone, the device works through all but 2 µs of it: under the rule's 1% of the window, no finding."""
    events = [_rt("cudaLaunchKernel", 0, 5, 1), _k("K", 10, 400, 1), _rt("cudaDeviceSynchronize", 20, 392, 2),
              _rt("cudaDeviceSynchronize", 500, 60, 3)]
    (f,) = _findings(_run(tmp_path / "two", events), "host-sync")
    assert f.impact_ns == 62 * US and f.evidence.values["sync_ns"] == 452 * US
    # its evidence query gives the figure, in plain DuckDB
    with open_run(tmp_path / "two" / "run") as run:
        cur = run.sql(f.evidence.sql)
        got = dict(zip([c[0] for c in cur.description], cur.fetchone()))
    assert (got["sync_idle_ns"], got["sync_ns"]) == (f.evidence.values["sync_idle_ns"], 452 * US) == (62 * US, 452 * US)
    assert f.title == "2 host-device synchronisations wait 0.45 ms, the device idle for 0.06 ms of it"
    one = events[:3] + [_rt("cudaLaunchKernel", 500, 5, 4), _k("K2", 510, 400, 4)]
    assert _findings(_run(tmp_path / "one", one), "host-sync") == []


def test_idle_after_syncs_from_the_busy_unions_equals_the_evidence_sql(tmp_path, monkeypatch):
    """host-sync's figures, with the busy time inside the idle after the syncs taken from the
    devices' busy unions the summary merged (`_figures`), are the evidence SQL's (`figures_sql`,
    which unions every device event itself): on real traces with syncs inside steps, and on a
    two-device rank where device 1 works through part of the idle after a sync."""
    from neuron_explorer.analyzers import summary
    from neuron_explorer.analyzers.rules import host_sync

    from .conftest import TRACES

    events = [X("ProfilerStep#1", "user_annotation", 0, 1000),
              X("aten::item", "cpu_op", 10, 100, **{"External id": 1}),
              _rt("cudaMemcpyAsync", 12, 95, 50, ext=1), _k("Memcpy DtoH (Device -> Pageable)", 80, 20, 50, cat="gpu_memcpy"),
              _rt("cudaLaunchKernel", 300, 5, 51), _k("gemm", 320, 50, 51),
              X("other_gpu", "kernel", 100, 100, pid=1, tid=9, stream=9, device=1)]  # started before the sync returned: busy in [110, 200)
    runs = [_run(tmp_path, events), *(TRACES / n for n in ("a100_train_blocking_dtoh.json.gz", "v100_resnet50_torch19_memory.json.gz",
                                                           "cuda_event_sync_multistream.json.gz", "multirank_128"))]
    in_sql, stalls = [], []
    real = host_sync.figures_sql
    monkeypatch.setattr(host_sync, "figures_sql", lambda rank, busy_in_sql=True: in_sql.append(busy_in_sql) or real(rank, busy_in_sql))
    for run_dir in runs:
        with open_run(run_dir) as run:
            summary.rank_summaries(run, run.ranks, per_rank=False)  # prepares each device's busy union, as the engine does
            in_sql.clear()
            fast = host_sync._figures(run, None)
            assert in_sql == [False], run_dir  # taken from the unions, not the full SQL
            cur = run.sql(real(None))
            cols = [c[0] for c in cur.description]
            assert fast == {int(r[0]): dict(zip(cols, r)) for r in cur.fetchall()}, run_dir
            stalls.append(sum(v["stalls"] for v in fast.values()))
    assert all(stalls[:3]) and len(stalls) == 5  # syncs inside steps: the hand-built rank, the A100's, the V100's
    with open_run(runs[0]) as run:
        summary.rank_summaries(run, run.ranks, per_rank=False)
        (v,) = host_sync._figures(run, 0).values()
    # aten::item returns at 110 and gemm starts at 320; device 1 works until 200. Without its 95 µs wait
    # the host launches gemm 95 µs earlier: the sync causes [225, 320), where no device works
    assert v["idle_after_ns"] == 95 * US and v["idle_summed_ns"] == (320 - 110) * US


def test_each_rank_of_a_job_has_the_figures_it_has_alone_from_one_query(tmp_path, monkeypatch):
    """Three ranks, rank r with 10 - 3r `.item()` syncs as in
    `test_syncs_before_the_same_launch_cost_what_they_waited_not_the_whole_gap` (6 µs each, before
    the launch at 500 µs): each rank's host-sync finding says what the rank says analysed alone (60,
    42 and 24 µs of idle caused, 10, 7 and 4 stalls), and the job's syncs are read by one query, the
    screen's, whose figures the checks of the ranks it selects take."""
    from neuron_explorer.analyzers.rules import host_sync

    def rank(r):
        events = [X("ProfilerStep#1", "user_annotation", 0, 600),
                  X("aten::mm", "cpu_op", 0, 10, **{"External id": 1}), _rt("cudaLaunchKernel", 2, 4, 1, 1), _k("K1", 10, 80, 1),
                  X("aten::add", "cpu_op", 490, 10, **{"External id": 2}), _rt("cudaLaunchKernel", 492, 4, 2, 2), _k("K2", 500, 10, 2)]
        for i in range(10 - 3 * r):
            t = 100 + 20 * i
            events += [X("aten::item", "cpu_op", t, 10, **{"External id": 10 + i}), _rt("cudaStreamSynchronize", t + 2, 6, 10 + i, 10 + i)]
        return events

    for r in range(3):
        write_trace(tmp_path / "job" / f"rank{r}.json", rank(r), distributedInfo={"rank": r, "world_size": 3})
    job = import_traces(tmp_path / "job", tmp_path / "job_run").run_dir
    alone = {r: _findings(_run(tmp_path / f"alone{r}", rank(r)), "host-sync") for r in range(3)}
    queries = []
    real = host_sync._figures
    monkeypatch.setattr(host_sync, "_figures", lambda run, rank: queries.append(rank) or real(run, rank))
    found = _findings(job, "host-sync")
    together = {r: [f for f in found if f.location.rank == r] for r in range(3)}
    assert queries == [None]  # the screen's query for the whole job; no rank queried again
    for r in range(3):
        (f,), (g,) = together[r], alone[r]
        assert (f.impact_ns, f.evidence.values, f.title) == (g.impact_ns, g.evidence.values, g.title)
        assert f.impact_ns == 6 * (10 - 3 * r) * US, r
    assert [together[r][0].evidence.values["stalls"] for r in range(3)] == [10, 7, 4]


def _one_long_blocking_copy():
    """A decode step as an inference server's trace records it (no profiler steps): one `aten::copy_`
    to the host whose cudaMemcpyAsync waits 990 µs for the device, then an add.

        aten::copy_ [0-1000) > cudaMemcpyAsync [5-995) -> Memcpy DtoH (Device -> Pinned) [990-993)
        aten::add [1000-1100) launch [1002-1006) -> K [1010-1020)
    """
    return [X("aten::copy_", "cpu_op", 0, 1000, **{"External id": 1}), _rt("cudaMemcpyAsync", 5, 990, 5, 1),
            _k("Memcpy DtoH (Device -> Pinned)", 990, 3, 5, cat="gpu_memcpy"),
            X("aten::add", "cpu_op", 1000, 100, **{"External id": 2}), _rt("cudaLaunchKernel", 1002, 4, 2, 2), _k("K", 1010, 10, 2)]


def test_an_operator_that_waits_for_the_device_is_host_syncs_not_a_hotspot(tmp_path):
    """The copy's 1,000 µs are 990 µs of waiting for the device: host-sync's finding names it (its
    figure the 987 µs of the wait with the device idle: its own copy runs 3 µs of it), and the hotspot
    operator leaves the wait out (10 µs remain, under its 25%), so no finding tells the user to give a
    copy cheaper shapes and dtype."""
    run_dir = _run(tmp_path, _one_long_blocking_copy())
    (sync,) = _findings(run_dir, "host-sync")
    assert sync.impact_ns == 987 * US and sync.evidence.values["sync_ns"] == 990 * US and sync.location.op == "aten::copy_"
    assert not [f for f in _findings(run_dir, "hotspot") if f.location.op == "aten::copy_"]


def test_device_idle_leaves_the_idle_in_allocator_calls_and_syncs_to_their_rules(tmp_path):
    """No profiler steps, one device (an inference server's trace, or a job with the caching
    allocator off). The device idles 805 µs of the analysed window, the trace's 1,000 µs span (the
    summary's device time: 10 of them before K1): 200 µs while the host is in a cudaFree, 195 µs
    while it waits in a blocking copy (its own 5 µs copy runs at the end), and 410 µs of host work.
    Each cause is one finding: allocator-churn 200 µs, host-sync 195 µs (the wait with the device idle:
    device-idle's idle in syncs), device-idle the 410 µs left, naming the rest as theirs; they add up to
    no more than the trace.

        launch [0-5) -> K1 [10-100)
        cudaFree [120-320)                        (device idle)
        aten::copy_ [400-600) > cudaMemcpyAsync [400-600) -> Memcpy DtoH [590-595)
        launch [890-895) -> K2 [900-1000)
    """
    events = [_rt("cudaLaunchKernel", 0, 5, 1), _k("K1", 10, 90, 1),
              X("aten::empty", "cpu_op", 115, 210, **{"External id": 2}), _rt("cudaFree", 120, 200, 2, 2),
              X("aten::copy_", "cpu_op", 400, 200, **{"External id": 3}), _rt("cudaMemcpyAsync", 400, 200, 3, 3),
              _k("Memcpy DtoH (Device -> Pinned)", 590, 5, 3, cat="gpu_memcpy"),
              _rt("cudaLaunchKernel", 890, 5, 4), _k("K2", 900, 100, 4)]
    run_dir = _run(tmp_path, events)
    (idle,) = _findings(run_dir, "device-idle")
    (alloc,) = _findings(run_dir, "allocator-churn")
    (sync,) = _findings(run_dir, "host-sync")
    assert (alloc.impact_ns, sync.impact_ns) == (200 * US, 195 * US)
    v = idle.evidence.values
    (dt,) = analyze(run_dir, write=False).summary["ranks"][0]["device_time"]  # the summary's device time: the same idle
    assert (v["window_ns"], v["idle_ns"]) == (dt["window_ns"], dt["idle_ns"]) == (1000 * US, 805 * US)
    assert (v["idle_in_allocator_calls_ns"], v["idle_in_syncs_ns"]) == (200 * US, 195 * US)
    assert idle.impact_ns == 410 * US
    with open_run(run_dir) as run:  # the evidence SQL, plain DuckDB over the events, says the same
        row = dict(zip(("busy_ns", "window_ns", "idle_ns", "idle_left_out_ns", "impact_ns"), run.sql(idle.evidence.sql).fetchone()))
    assert row == {"busy_ns": 195 * US, "window_ns": 1000 * US, "idle_ns": 805 * US, "idle_left_out_ns": 395 * US, "impact_ns": 410 * US}
    assert idle.title == ("Device 0 idle 41.0% of the analysed window (0.41 ms, besides 0.20 ms while the host was in device allocator "
                          "calls (allocator-churn's) and 0.20 ms while the host waited in syncs (host-sync's))")
    # the gaps named are the idle left outside the free and the wait: 300 µs before K2's launch, 80 µs after the free
    assert "gap of 0.30 ms: host ran cudaLaunchKernel 0.01 ms; gap of 0.08 ms: " in idle.recommendation, idle.recommendation


def test_device_idle_names_no_part_that_prints_as_zero(tmp_path):
    """No profiler steps (the analysed window is the span, 0-1000). The device idles 810 µs: 200 µs
    while the host is in a cudaFree, 3 µs while it waits in a sync. Both are left out of the idle
    figure, but a title once named the second as '0.00 ms while the host waited in syncs'. A part
    that prints as 0.00 ms is left out of the title; its figure stays in the evidence.

        launch [0-5) -> K1 [10-100)
        cudaFree [120-320)   cudaStreamSynchronize [400-403)   (device idle)
        launch [890-895) -> K2 [900-1000)
    """
    events = [_rt("cudaLaunchKernel", 0, 5, 1), _k("K1", 10, 90, 1), _rt("cudaFree", 120, 200, 2),
              _rt("cudaStreamSynchronize", 400, 3, 3), _rt("cudaLaunchKernel", 890, 5, 4), _k("K2", 900, 100, 4)]
    (idle,) = _findings(_run(tmp_path, events), "device-idle")
    v = idle.evidence.values
    assert (v["idle_ns"], v["idle_in_allocator_calls_ns"], v["idle_in_syncs_ns"]) == (810 * US, 200 * US, 3 * US)
    assert idle.impact_ns == 607 * US
    assert idle.title == ("Device 0 idle 60.7% of the analysed window (0.61 ms, besides 0.20 ms while the host was in device allocator "
                          "calls (allocator-churn's))")


def test_with_steps_the_idle_while_a_sync_waits_stays_device_idles(tmp_path):
    """With steps host-sync counts the idle its syncs cause after they return (here none: the next
    launch follows at once), so the 490 µs the device idles while the host waits in a
    cudaStreamSynchronize stay in device-idle's figure: the step's idle, 520 µs (10 before K1)."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000), _rt("cudaLaunchKernel", 0, 5, 1), _k("K1", 10, 90, 1),
              _rt("cudaStreamSynchronize", 110, 490, 2), _rt("cudaLaunchKernel", 600, 5, 3), _k("K2", 610, 390, 3)]
    (idle,) = _findings(_run(tmp_path, events), "device-idle")
    assert idle.evidence.values["idle_in_syncs_ns"] == 0 and idle.impact_ns == idle.evidence.values["idle_ns"] == 520 * US


def test_the_allocator_intervals_device_idle_leaves_out_are_allocator_churns_figure(tmp_path):
    """allocator_churn.claimed (the intervals device-idle leaves to allocator-churn) measures what
    the rule's impact does: with steps, the calls of the steady steps within their ranges. Six
    1,000 µs steps, a 100 µs cudaFree in each, the last one running 50 µs past its step's end."""
    import numpy as np

    from neuron_explorer.analyzers.rules import allocator_churn

    events = []
    for s in range(6):
        t = s * 1000
        free_at = t + (950 if s == 5 else 300)
        events += [X(f"ProfilerStep#{s + 1}", "user_annotation", t, 1000), _rt("cudaLaunchKernel", t, 5, 10 * s + 1),
                   _k("K", t + 10, 200, 10 * s + 1), _rt("cudaFree", free_at, 100, 10 * s + 2)]
    run_dir = _run(tmp_path, events)
    report = analyze(run_dir, write=False)
    (f,) = [f for f in report.findings if f.rule_id == "allocator-churn"]
    steady = report.to_dict()["summary"]["ranks"][0]["steps"]["steady_steps"]
    with open_run(run_dir) as run:
        calls = np.asarray(run.sql("SELECT ts_ns, ts_ns + dur_ns, step FROM events WHERE name = 'cudaFree'").fetchall()).T
        steps = np.asarray(run.sql("SELECT step, ts_ns, ts_ns + dur_ns FROM steps").fetchall()).T
    got = allocator_churn.claimed(tuple(calls), tuple(steps), steady)
    assert int((got[:, 1] - got[:, 0]).sum()) == f.impact_ns == 100 * US * (len(steady) - 1) + 50 * US


def test_a_job_of_ranks_with_and_without_steps_reads_each_ranks_claimed_calls_as_alone(tmp_path):
    """device-idle's batch read of the calls it leaves to other rules (device_idle.CLAIMED, whose
    batch read skips the syncs of ranks with steps) gives each rank of a job the rows its one-rank
    query gives: rank 0 with steps, rank 1 without (its blocking copy's wait among them), rank 2
    without steps and with a cudaFree; and each rank's device-idle finding is the one it has alone."""
    from neuron_explorer.analyzers import rank_rows
    from neuron_explorer.analyzers.rules import device_idle

    def rank(r):
        events = [_rt("cudaLaunchKernel", 0, 5, 1), _k("K1", 10, 90, 1),
                  X("aten::copy_", "cpu_op", 400, 200, **{"External id": 3}), _rt("cudaMemcpyAsync", 400, 200, 3, 3),
                  _k("Memcpy DtoH (Device -> Pinned)", 590, 5, 3, cat="gpu_memcpy"),
                  _rt("cudaLaunchKernel", 890, 5, 4), _k("K2", 900, 100, 4)]
        if r == 0:
            events.append(X("ProfilerStep#1", "user_annotation", 0, 1000))
        if r == 2:
            events += [X("aten::empty", "cpu_op", 115, 210, **{"External id": 2}), _rt("cudaFree", 120, 200, 2, 2)]
        return events

    for r in range(3):
        write_trace(tmp_path / "job" / f"rank{r}.json", rank(r), distributedInfo={"rank": r, "world_size": 3})
    job = import_traces(tmp_path / "job", tmp_path / "job_run").run_dir
    with open_run(job) as run:
        batch = rank_rows.prepare(run, [device_idle.CLAIMED], [0, 1, 2])["device_idle_claimed"]
        alone = {r: {k: v.tolist() for k, v in run.sql(device_idle.CLAIMED.one, [r]).fetchnumpy().items()} for r in range(3)}
    assert {r: {k: v.tolist() for k, v in batch[r].items()} for r in range(3)} == alone
    assert [sorted(set(alone[r]["what"])) for r in range(3)] == [[2], [1], [0, 1]]
    found = {f.location.rank: f for f in _findings(job, "device-idle")}
    for r in range(3):
        (g,) = _findings(_run(tmp_path / f"alone{r}", rank(r)), "device-idle")
        assert (found[r].impact_ns, found[r].evidence.values) == (g.impact_ns, g.evidence.values), r


def _first_launch_loop(first_us: int) -> tuple[list[dict], int]:
    """No steps: 120 kernels of 2 µs, ten names launched twelve times each, every launch 5 µs but the
    first of each name, `first_us`; and the time the loop ends."""
    out, t = [], 0
    for i in range(120):
        dur = first_us if i < 10 else 5
        out += [_rt("cudaLaunchKernel", t, dur, i + 1), _k(f"elementwise_kernel_{i % 10}", t + dur + 1, 2, i + 1)]
        t += dur + 10
    return out, t


def test_short_kernels_whose_launch_time_is_their_first_launches_are_a_one_off(tmp_path):
    """No steps: 120 kernels of 2 µs, ten names launched twelve times each, every launch 5 µs but the
    first of each name, 2,000 µs (loading the kernel's code). Launch time 20,550 µs, 20,000 of it the
    ten first launches: not what every launch costs (TraceLens's normalisation test on an MI300X,
    147 short kernels launched in 727.21 ms, 726.51 of it their 31 first launches, was told to fuse
    them). With every launch 5 µs, the same kernels get the advice to fuse."""
    def events(first_us):
        return _first_launch_loop(first_us)[0]
    (f,) = _findings(_run(tmp_path / "first", events(2000)), "launch-overhead")
    v = f.evidence.values
    assert (v["launches"], v["first_launches"], v["launch_ns"], v["first_launch_ns"]) == (120, 10, 20_550 * US, 20_000 * US)
    assert f.recommendation.startswith("20.00 ms of the 20.55 ms is the first launch of each of 10 kernels: a kernel's first launch "
                                       "loads its code")
    assert "; if it does repeat: most kernels run under 10 us" in f.recommendation
    # the title says what the launch time is, as the advice does
    assert f.title.endswith(", 20.55 ms launching them, 20.00 ms of it first launches (loading 10 kernels' code)"), f.title
    (g,) = _findings(_run(tmp_path / "every", events(5)), "launch-overhead")
    assert g.recommendation.startswith("Most kernels run under 10 us, so launches dominate")
    assert g.title.endswith("launching them"), g.title


def test_the_idle_while_the_host_loads_kernels_code_is_launch_overheads(tmp_path):
    """test_short_kernels_whose_launch_time_is_their_first_launches_are_a_one_off's loop, then 5,000 µs
    of host work with no kernel. launch-overhead names the ten first launches (20,000 µs); the device
    idles through them too, and device-idle counted them again (TraceLens's normalisation test: 726.51
    ms of first launches inside 'Device 2 idle 99.9% (1,187.80 ms)'). device-idle leaves that idle to
    launch-overhead, as it does a step's one-off launch to critical-path: its figure is the rest, its
    evidence query gives the same, and the first launches are counted once. With every launch 5 µs,
    nothing is left out."""
    def events(first_us):
        out, t = _first_launch_loop(first_us)
        return out + [X("aten::nonzero", "cpu_op", t, 5000), _rt("cudaLaunchKernel", t + 5000, 5, 999),
                      _k("elementwise_kernel_0", t + 5006, 2, 999)]
    run_dir = _run(tmp_path / "first", events(2000))
    (idle,) = _findings(run_dir, "device-idle")
    (launches,) = _findings(run_dir, "launch-overhead")
    v = idle.evidence.values
    assert v["idle_in_first_launches_ns"] == launches.evidence.values["first_launch_ns"] == 20_000 * US
    assert idle.impact_ns == v["idle_ns"] - 20_000 * US and idle.impact_ns >= 5000 * US
    assert "20.00 ms while the host was in kernels' first launches, loading their code (launch-overhead's)" in idle.title
    with open_run(run_dir) as run:
        assert run.sql(idle.evidence.sql).fetchone()[-1] == idle.impact_ns  # (impact_ns, the query's last column)
    assert idle.impact_ns + launches.evidence.values["first_launch_ns"] <= v["window_ns"]
    (every,) = _findings(_run(tmp_path / "every", events(5)), "device-idle")
    assert every.evidence.values["idle_in_first_launches_ns"] == 0 and every.impact_ns == every.evidence.values["idle_ns"]
