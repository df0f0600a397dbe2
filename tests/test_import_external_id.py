"""Device events with neither a runtime call nor a flow join the CPU operator of their `External id`
(build._device_by_external_id): what several vendor plugins emit for PrivateUse1 kernels.

    host (pid 1, tid 1)  |ProfilerStep#1 ........................................................|
                           |aten::mm ext 5|   |aten::add ext 6|            |aten::mm ext 5 (again)|
    device 0 stream 7         |k1 ext 5|          |k2 ext 6|   |k3 ext 404|     |k4 ext 5|   |k5 corr 9 ext 6|
                                                            (no such op)                   (launch corr 9 exists)

k1 and k4 share External id 5 with two operators: each takes the latest to start at or before it.
k3 names no operator: it stays unlinked and counts as a device event with no launch. k5 has a
runtime call by correlation: its launch wins, as before.
"""

from __future__ import annotations

from pathlib import Path

from neuron_explorer import open_run
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import X, write_trace


def _k(name, ts, dur, ext, **more):
    return X(name, "kernel", ts, dur, pid=0, tid=7, device=0, stream=7, **{"External id": ext}, **more)


def test_kernels_join_the_operator_of_their_external_id(tmp_path: Path):
    events = [
        X("ProfilerStep#1", "user_annotation", 0, 200),
        X("aten::mm", "cpu_op", 10, 20, **{"External id": 5}),
        X("aten::add", "cpu_op", 40, 20, **{"External id": 6}),
        X("cudaLaunchKernel", "cuda_runtime", 45, 2, correlation=9, **{"External id": 6}),
        X("aten::mm", "cpu_op", 100, 20, **{"External id": 5}),
        _k("k1", 12, 5, 5),
        _k("k2", 42, 5, 6),
        _k("k3", 70, 5, 404),
        _k("k4", 105, 5, 5),
        _k("k5", 130, 5, 6, correlation=9),
    ]
    run_dir = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        ops = run.sql("SELECT event_id FROM events WHERE kind = 'cpu_op' ORDER BY ts_ns").fetchall()
        launch = run.sql("SELECT event_id FROM events WHERE kind = 'runtime'").fetchone()[0]
        rows = run.sql("SELECT name, op_id, top_op_id, launch_id, step FROM events WHERE kind = 'kernel' ORDER BY ts_ns").fetchall()
        quality = run.manifest["ranks"][0]["data_quality"]
    (mm1,), (add,), (mm2,) = ops
    assert rows == [("k1", mm1, mm1, None, 1), ("k2", add, add, None, 1), ("k3", None, None, None, None),
                    ("k4", mm2, mm2, None, 1), ("k5", add, add, launch, 1)]
    assert (quality["device_linked_by_external_id"], quality["device_events_without_launch"]) == (3, 1)
