"""Commands that read a run also take a Kineto trace (or a directory of them), imported once into a cache."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from neuron_explorer import open_run
from neuron_explorer.store import resolve_run

from .conftest import TRACES, cli


def test_a_trace_directory_opens_as_a_run_and_the_import_is_reused(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("NEURON_EXPLORER_CACHE", str(tmp_path / "cache"))
    log = tmp_path / "log"
    log.mkdir()
    shutil.copy(TRACES / "cuda_simple_add.json.gz", log / "worker0.pt.trace.json.gz")
    first = resolve_run(log)
    assert (first / "manifest.json").is_file() and first.parent == tmp_path / "cache"
    created = (first / "manifest.json").stat().st_mtime_ns
    assert resolve_run(log) == first and (first / "manifest.json").stat().st_mtime_ns == created
    with open_run(log) as run:
        assert run.sql("SELECT count(*) FROM events WHERE kind = 'kernel'").fetchone()[0] == 79
    # a changed trace is imported again
    trace = log / "worker0.pt.trace.json.gz"
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 10**9))
    assert resolve_run(log) != first


def test_cli_info_on_a_trace_file(tmp_path: Path, monkeypatch):
    env_cache = tmp_path / "cache"
    monkeypatch.setenv("NEURON_EXPLORER_CACHE", str(env_cache))
    res = cli("info", TRACES / "rocm_mi250_train.json.gz", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["ranks"][0]["counts"]["kernel"] == 14
    assert any(env_cache.iterdir())


def test_a_directory_that_is_neither_run_nor_traces_is_a_clear_error(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    res = cli("info", tmp_path / "empty")
    assert res.returncode == 2 and "not a run directory" in res.stderr


def test_analyze_a_trace_file_writes_into_the_cached_run(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("NEURON_EXPLORER_CACHE", str(tmp_path / "cache"))
    trace = tmp_path / "t.json.gz"
    shutil.copy(TRACES / "cuda_alexnet_train.json.gz", trace)
    res = cli("analyze", trace, "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["findings"]
    assert list((tmp_path / "cache").glob("*/analysis/report.json")), "the report goes into the cached run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "t.json.gz"], "nothing is written beside the trace"


def test_query_and_schema_take_a_trace_too(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("NEURON_EXPLORER_CACHE", str(tmp_path / "cache"))
    trace = TRACES / "rocm_mi250_train.json.gz"
    res = cli("query", trace, "SELECT count(*) AS n FROM events WHERE kind = 'kernel'", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["rows"] == [[14]]
    schema = cli("schema", trace)
    assert schema.returncode == 0 and "events:" in schema.stdout
