"""import → export --chrome → import keeps every event, link and timing."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_explorer import open_run
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.export import export_chrome

from .conftest import TRACES, cli

pytestmark = pytest.mark.slow  # tier: import, export and import again through CLI processes (~20 s alone)

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


def test_several_ranks_to_a_file_name_is_a_one_line_error(tmp_path: Path):
    run = import_traces(TRACES / "multirank_128", tmp_path / "run").run_dir
    for name in ("out.json.gz", "out.json"):
        res = cli("export", run, "--chrome", tmp_path / name)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr, res.stderr
        assert "2 ranks" in res.stderr and "--rank" in res.stderr and "directory" in res.stderr
        assert not (tmp_path / name).exists()
    # one rank of them to a file, or all of them to a directory
    assert cli("export", run, "--chrome", tmp_path / "r1.json.gz", "--rank", "1").returncode == 0
    assert (tmp_path / "r1.json.gz").is_file()
    assert cli("export", run, "--chrome", tmp_path / "all").returncode == 0
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == ["rank-0.json.gz", "rank-1.json.gz"]
