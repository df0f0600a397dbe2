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
