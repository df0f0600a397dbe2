"""Shared fixtures: the real traces in tests/data/traces (or $NEURON_EXPLORER_TRACES) and hand-built traces written in code."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("NEURON_EXPLORER_TRACES", REPO / "tests" / "data" / "traces"))


def real_traces() -> list[Path]:
    files = sorted(p for p in TRACES.glob("*.json*"))
    assert files, f"the real traces are missing: {TRACES} (set NEURON_EXPLORER_TRACES)"
    return files


def X(name, cat, ts, dur, pid=1, tid=1, **args):
    """A complete ('X') Kineto event for hand-built traces (ts and dur in microseconds)."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write_trace(path: Path, events: list[dict], **header) -> Path:
    doc = {"schemaVersion": 1, **header, "traceEvents": events}
    path.parent.mkdir(parents=True, exist_ok=True)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt") as f:
            json.dump(doc, f)
    else:
        path.write_text(json.dumps(doc))
    return path


def workload_env() -> dict:
    """Environment of recorded workloads (read when called: tests set variables such as
    NEURON_EXPLORER_CACHE first). On a 2-core machine that anything else also uses, OpenMP's
    spinning barrier makes a 2-thread 128x128 matmul take ~30 ms instead of 0.04 ms (measured
    here), so which line is hottest would depend on the machine's load, not on the code under test."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the installed CLI the way a user does (a separate process)."""
    return subprocess.run([sys.executable, "-m", "neuron_explorer", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=600, env=workload_env())


@pytest.fixture(autouse=True, scope="session")
def _private_import_cache(tmp_path_factory):
    """Traces opened as runs are imported into a cache: keep the tests' cache out of the user's."""
    os.environ["NEURON_EXPLORER_CACHE"] = str(tmp_path_factory.mktemp("import-cache"))


@pytest.fixture(autouse=True, scope="session")
def _fast_trace_reader_built():
    """Build the C++ trace reader, Parquet writer and critical path walk before the tests, as the first import on a
    machine does: their one-time "compiling" notices must not land in whichever test happens to
    run first on a worker (tests assert one-line errors on stderr)."""
    from neuron_explorer import parquet_native
    from neuron_explorer.analyzers import _path_native
    from neuron_explorer.collectors import _json_native

    _json_native.load()
    parquet_native.load()
    _path_native.load()


@pytest.fixture
def tmp_run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


@contextlib.contextmanager
def dashboard_server(paths):
    """The dashboard of these runs on a free local port (warmed as `neuron-explorer dashboard`
    warms it), for a module's browser tests: yields (url, RunSet)."""
    from werkzeug.serving import make_server

    from neuron_explorer.dashboard.app import create_app, warm
    from neuron_explorer.dashboard.runs import RunSet

    rs = RunSet(list(paths))
    try:
        warm(rs)
        srv = make_server("127.0.0.1", 0, create_app(rs).server, threaded=True)  # port 0: a free port
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{srv.server_port}/", rs
        finally:
            srv.shutdown()
    finally:
        rs.close()
