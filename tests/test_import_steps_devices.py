"""Steps of old torch traces and the devices a rank's events ran on, on hand-built traces.

    host (pid 1, tid 1)  |ProfilerStep#3 (Operator)------|ProfilerStep#4 (Operator)------|
                           |aten::mm|                       |aten::mm|
                              |cudaLaunchKernel|               |cudaLaunchKernel|
    device (pid D)                   |gemm|                           |gemm|
"""

from __future__ import annotations

import json
from pathlib import Path

from neuron_explorer import open_run
from neuron_explorer.analyzers import analyze
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import X, cli, write_trace


def _steps_trace(device: int, step_category: str = "Operator") -> list[dict]:
    events = []
    for k, t0 in ((3, 0), (4, 100)):
        events += [
            X(f"ProfilerStep#{k}", step_category, t0, 90),
            X("aten::mm", "Operator", t0 + 10, 30, **{"External id": k}),
            X("cudaLaunchKernel", "Runtime", t0 + 12, 5, correlation=50 + k, **{"external id": k}),
            X("gemm", "Kernel", t0 + 20, 40, pid=device, tid=7, correlation=50 + k, device=device, stream=7),
        ]
    return events


def test_old_torch_profiler_steps_under_operator_are_steps(tmp_path: Path):
    props = [{"id": 0, "name": "Tesla V100-SXM2-16GB"}]
    path = write_trace(tmp_path / "old.json", _steps_trace(0), computeProperties=props)
    run = import_traces(path, tmp_path / "run")
    entry = run.manifest["ranks"][0]
    assert [(s["step"], s["ts_ns"], s["dur_ns"]) for s in entry["steps"]] == [(3, 0, 90_000), (4, 100_000, 90_000)]
    assert entry["devices_used"] == [{"device": 0, "name": "Tesla V100-SXM2-16GB"}]
    with open_run(run.run_dir) as r:
        # the steps are not operators: aten::mm is its own top-level operator, in its step
        rows = r.sql("SELECT name, kind, step, top_op_id = event_id FROM events WHERE name = 'aten::mm' OR name LIKE 'ProfilerStep#%' "
                     "ORDER BY ts_ns, name").fetchall()
        assert rows == [("ProfilerStep#3", "step", 3, None), ("aten::mm", "cpu_op", 3, True), ("ProfilerStep#4", "step", 4, None),
                        ("aten::mm", "cpu_op", 4, True)]
        # the kernel inherits the step of its launch
        assert r.sql("SELECT list(step ORDER BY ts_ns) FROM events WHERE name = 'gemm'").fetchone()[0] == [3, 4]
    text = cli("info", run.run_dir).stdout
    assert "steps: 2 (#3..#4)" in text and "Tesla V100-SXM2-16GB" in text


def test_events_on_a_device_no_property_lists_are_reported(tmp_path: Path):
    # an SGLang-like rank: kernels on device 9, properties for device 0 only
    path = write_trace(tmp_path / "t.json", _steps_trace(9, "user_annotation"), deviceProperties=[{"id": 0, "name": "NVIDIA H100"}])
    run = import_traces(path, tmp_path / "run")
    entry = run.manifest["ranks"][0]
    assert entry["devices_used"] == [{"device": 9, "name": None}]
    assert entry["devices_without_properties"] == [9] and entry["devices_listed_without_events"] == [0]
    assert any("device 9" in w and "do not list" in w for w in run.manifest["warnings"])
    text = cli("info", run.run_dir).stdout
    assert "events ran on device 9, which the device properties do not list" in text


def test_properties_of_devices_no_event_used_are_named_apart(tmp_path: Path):
    # a DLRM-like rank: the properties list the host's 8 GPUs, this rank used GPU 3
    props = [{"id": d, "name": f"NVIDIA A100 #{d}"} for d in range(8)]
    path = write_trace(tmp_path / "t.json", _steps_trace(3, "user_annotation"), deviceProperties=props)
    run = import_traces(path, tmp_path / "run")
    entry = run.manifest["ranks"][0]
    assert entry["devices_used"] == [{"device": 3, "name": "NVIDIA A100 #3"}]
    assert entry["devices_listed_without_events"] == [0, 1, 2, 4, 5, 6, 7]
    assert not any("do not list" in w for w in run.manifest["warnings"])
    info = json.loads(cli("info", run.run_dir, "--json").stdout)["ranks"][0]
    assert info["devices"] == [{"device": 3, "name": "NVIDIA A100 #3"}]
    text = cli("info", run.run_dir).stdout
    assert "devices: 3 (NVIDIA A100 #3)" in text and "also list device 0-2, 4-7, with no events" in text


def _session(t0: float, first: int, steps: int, corr: int, tid: int = 1) -> list[dict]:
    """One profiling session's steps #first.. on host thread `tid`, each 90 µs with one launched kernel."""
    events = []
    for i in range(steps):
        k, t = first + i, t0 + 100 * i
        events += [X(f"ProfilerStep#{k}", "user_annotation", t, 90, tid=tid),
                   X("aten::mm", "cpu_op", t + 10, 30, tid=tid, **{"External id": corr + i}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 12, 5, tid=tid, correlation=corr + i),
                   X("gemm", "kernel", t + 20, 40, pid=0, tid=7, correlation=corr + i, device=0, stream=7)]
    return events


def test_a_trace_of_joined_sessions_has_each_step_once(tmp_path: Path):
    # two profiling windows concatenated into one trace (as a job's windows joined, or a trace tiled):
    # ProfilerStep#5..#7 at 0-290 µs, then #5..#7 again at 1000-1290 µs. Read by number, step 5 would
    # run 1,090 µs and the three steps 3,270 µs, more than the trace's 1,290 µs
    path = write_trace(tmp_path / "joined.json", _session(0, 5, 3, 100) + _session(1000, 5, 3, 200))
    run = import_traces(path, tmp_path / "run")
    entry = run.manifest["ranks"][0]
    assert [(s["step"], s["ts_ns"], s.get("number_in_trace")) for s in entry["steps"]] == [
        (5, 0, None), (6, 100_000, None), (7, 200_000, None), (8, 1_000_000, 5), (9, 1_100_000, 6), (10, 1_200_000, 7)]
    assert entry["data_quality"]["steps_renumbered"] == 3
    assert any("3 profiler steps numbered on" in w for w in run.manifest["warnings"])
    with open_run(run.run_dir) as r:  # each kernel in the step of its launch, as numbered on
        assert r.sql("SELECT list(step ORDER BY ts_ns) FROM events WHERE name = 'gemm'").fetchone()[0] == [5, 6, 7, 8, 9, 10]
    summary = analyze(run.run_dir, write=False).to_dict()["summary"]["ranks"][0]
    assert summary["analysed_ns"] == 6 * 90_000  # six steps of 90 µs, within the trace's 1,290 µs
    assert "6 steps" in cli("analyze", run.run_dir).stdout


def test_one_step_on_two_threads_stays_one_step(tmp_path: Path):
    # the same step numbers on two host threads at the same time: one step each, numbers kept
    path = write_trace(tmp_path / "two.json", _session(0, 5, 2, 100) + _session(5, 5, 2, 200, tid=2))
    run = import_traces(path, tmp_path / "run")
    entry = run.manifest["ranks"][0]
    assert sorted({s["step"] for s in entry["steps"]}) == [5, 6] and not entry["data_quality"]["steps_renumbered"]
    assert not any("numbered on" in w for w in run.manifest["warnings"])


def test_joined_sessions_of_a_step_on_two_threads(tmp_path: Path):
    # each session records steps #5 and #6 on two threads at once (5 µs apart); the second session
    # starts at 1000 µs: its steps go on as #7 and #8, each still one step over both threads
    events = (_session(0, 5, 2, 100) + _session(5, 5, 2, 200, tid=2)
              + _session(1000, 5, 2, 300) + _session(1005, 5, 2, 400, tid=2))
    run = import_traces(write_trace(tmp_path / "joined2.json", events), tmp_path / "run")
    entry = run.manifest["ranks"][0]
    assert [(s["step"], s["ts_ns"]) for s in entry["steps"]] == [
        (5, 0), (5, 5_000), (6, 100_000), (6, 105_000), (7, 1_000_000), (7, 1_005_000), (8, 1_100_000), (8, 1_105_000)]
    with open_run(run.run_dir) as r:
        assert r.sql("SELECT step, dur_ns FROM steps ORDER BY step").fetchall() == [(s, 95_000) for s in (5, 6, 7, 8)]
