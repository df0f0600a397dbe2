"""Bad input gets one line naming the file and the problem, exit code 2, no traceback; runs survive."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from .conftest import TRACES, cli, write_trace


def _bad_files(tmp: Path) -> dict[str, Path]:
    good = (TRACES / "cuda_simple_add.json.gz").read_bytes()
    files = {
        "not JSON": tmp / "notjson.json",
        "truncated gzip": tmp / "truncated.json.gz",
        "empty file": tmp / "empty.json",
        "no traceEvents": tmp / "noevents.json",
        "traceEvents not a list": tmp / "notlist.json",
        "wrong value type": tmp / "badts.json",
        "events not objects": tmp / "notobjects.json",
    }
    files["not JSON"].write_text("this is not json {")
    files["truncated gzip"].write_bytes(good[: len(good) // 2])
    files["empty file"].write_bytes(b"")
    files["no traceEvents"].write_text(json.dumps({"schemaVersion": 1, "events": []}))
    files["traceEvents not a list"].write_text(json.dumps({"traceEvents": {"a": 1}}))
    write_trace(files["wrong value type"], [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": "soon", "dur": 1}])
    files["events not objects"].write_text(json.dumps({"traceEvents": [1, 2, 3]}))
    return files


def test_each_bad_file_gets_a_one_line_error_and_exit_2(tmp_path: Path):
    for problem, path in _bad_files(tmp_path).items():
        res = cli("import", path, "-o", tmp_path / f"run-{path.stem}")
        assert res.returncode == 2, (problem, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1, (problem, res.stderr)
        assert str(path) in lines[0] and "Traceback" not in res.stderr, (problem, res.stderr)
        assert not (tmp_path / f"run-{path.stem}").exists(), problem


def test_directory_without_traces(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    res = cli("import", tmp_path / "empty", "-o", tmp_path / "run")
    assert res.returncode == 2 and "no .json or .json.gz traces" in res.stderr and "Traceback" not in res.stderr


def test_existing_run_is_never_damaged_and_force_replaces_it(tmp_path: Path):
    run = tmp_path / "run"
    assert cli("import", TRACES / "cuda_simple_add.json.gz", "-o", run).returncode == 0
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    res = cli("import", TRACES / "rocm_mi250_train.json.gz", "-o", run)
    assert res.returncode == 2 and "already exists" in res.stderr and str(run) in res.stderr
    # a failing import with --force leaves the old run as it was
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert cli("import", bad, "-o", run, "--force").returncode == 2
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run")], "temporary directories left behind"
    # --force replaces it with a whole new run
    assert cli("import", TRACES / "rocm_mi250_train.json.gz", "-o", run, "--force").returncode == 0
    info = json.loads(cli("info", run, "--json").stdout)
    assert info["ranks"][0]["devices"][0]["name"].startswith("AMD") or "MI250" in json.dumps(info)


def test_reading_a_missing_or_newer_run_is_a_clear_error(tmp_path: Path):
    res = cli("info", tmp_path / "nope")
    assert res.returncode == 2 and "no such run directory" in res.stderr
    run = tmp_path / "run"
    assert cli("import", TRACES / "cuda_simple_add.json.gz", "-o", run).returncode == 0
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["format_version"] = 99
    (run / "manifest.json").write_text(json.dumps(manifest))
    res = cli("info", run)
    assert res.returncode == 2 and "newer" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_bare_array_and_both_encodings_import(tmp_path: Path, suffix: str):
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2}]
    path = tmp_path / f"t{suffix}"
    data = json.dumps(events).encode()
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    res = cli("import", path, "-o", tmp_path / "run")
    assert res.returncode == 0, res.stderr


def test_a_bad_event_decoded_by_a_worker_process_is_a_one_line_error(tmp_path: Path, monkeypatch):
    from neuron_explorer.collectors import _kineto_json
    from neuron_explorer.collectors.chrome_trace import import_traces
    from neuron_explorer.errors import InputError

    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(5000)]
    events[4000]["ts"] = "soon"
    path = write_trace(tmp_path / "big.json", events)
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 32 << 10)
    monkeypatch.setattr(_kineto_json, "PARALLEL_MIN_BYTES", 0)
    with pytest.raises(InputError) as err:
        import_traces(path, tmp_path / "run")
    assert str(path) in str(err.value) and "soon" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()
