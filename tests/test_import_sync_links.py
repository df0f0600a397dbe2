"""cuda_sync events link to their operator through `External id` when their launch does not.

    host (pid 1, tid 1)  |aten::item ext 9|        |cudaDeviceSynchronize corr 77 ext 9|
                                                   (outside any operator)
    device (pid 0)                                        |Context Sync corr 77 ext 9|
                                                                 |Event Sync ext 9 (no correlation)|
                                                                 |Event Sync ext 404 (no such operator)|
"""

from __future__ import annotations

from pathlib import Path

from neuron_explorer import open_run
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import X, write_trace


def test_sync_events_take_the_operator_of_their_external_id(tmp_path: Path):
    events = [
        X("ProfilerStep#1", "user_annotation", 0, 200),
        X("aten::item", "cpu_op", 10, 20, **{"External id": 9}),
        X("cudaDeviceSynchronize", "cuda_runtime", 50, 40, correlation=77, **{"External id": 9}),
        X("Context Sync", "cuda_sync", 55, 30, pid=0, tid=7, correlation=77, device=0, **{"External id": 9}),
        X("Event Sync", "cuda_sync", 60, 5, pid=0, tid=7, device=0, **{"External id": 9}),
        X("Event Sync", "cuda_sync", 70, 5, pid=0, tid=7, device=0, **{"External id": 404}),
    ]
    run_dir = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        item = run.sql("SELECT event_id FROM events WHERE name = 'aten::item'").fetchone()[0]
        rows = run.sql("SELECT name, external_id, op_id, top_op_id, step FROM events WHERE kind = 'sync' ORDER BY ts_ns").fetchall()
    assert rows == [("Context Sync", 9, item, item, 1), ("Event Sync", 9, item, item, 1), ("Event Sync", 404, None, None, None)]
