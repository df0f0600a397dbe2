"""import → export --chrome → import keeps every event, link and timing."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_explorer import open_run
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.export import export_chrome

from .conftest import TRACES, cli

COLUMNS = ("event_id, rank, kind, category, name, phase, ts_ns, dur_ns, pid, tid, pid_text, tid_text, device, stream, depth, "
           "parent_id, op_id, top_op_id, launch_id, correlation, external_id, step, module_path, frame_id, args")


def _tables(run_dir: Path) -> dict:
    with open_run(run_dir) as run:
        return {
            "events": run.sql(f"SELECT {COLUMNS} FROM events ORDER BY event_id").fetchall(),
            "flows": run.sql("SELECT * FROM flows ORDER BY rank, ts_ns, flow_id, phase").fetchall(),
            "memory": run.sql("SELECT * FROM memory ORDER BY rank, ts_ns, addr").fetchall(),
            "counters": run.sql("SELECT * FROM counters ORDER BY rank, ts_ns, name, series").fetchall(),
            "frames": run.sql("SELECT * FROM frames ORDER BY frame_id").fetchall(),
        }


@pytest.mark.parametrize("name", ["cuda_nccl_rank0_of_2.json.gz", "mtia_inference.json.gz", "edge_old_category_names.json.gz",
                                  "cpu_only_rank34_of_300.json.gz", "multirank_128"])
def test_roundtrip_keeps_everything(tmp_path: Path, name: str):
    first = import_traces(TRACES / name, tmp_path / "a").run_dir
    out = tmp_path / ("out" if name == "multirank_128" else "out.json.gz")
    export_chrome(first, out)
    second = import_traces(out, tmp_path / "b").run_dir
    a, b = _tables(first), _tables(second)
    for table in a:
        assert a[table] == b[table], table


def test_roundtrip_of_the_sample_with_frames_memory_and_modules(tmp_path: Path):
    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "cpu_train_step.json.gz"
    first = import_traces(sample, tmp_path / "a").run_dir
    res = cli("export", first, "--chrome", tmp_path / "out.json")
    assert res.returncode == 0, res.stderr
    second = import_traces(tmp_path / "out.json", tmp_path / "b").run_dir
    a, b = _tables(first), _tables(second)
    assert a["memory"] and a["frames"]
    for table in a:
        assert a[table] == b[table], table
