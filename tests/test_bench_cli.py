"""The dashboard-start benchmarks answer `--help` with their usage and refuse a run that is not a
run in one line, at once: `bench_serve_start.py --help` used to take "--help" for a run directory
and poll a server that never came (issue 42)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import REPO

SCRIPTS = ["bench_page.py", "bench_serve_start.py", "page_phases.py"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_the_usage(script):
    out = subprocess.run([sys.executable, str(REPO / "bench" / script), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and f"python bench/{script}" in out.stdout, out.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_path_that_is_not_a_run_is_refused_in_one_line(script, tmp_path):
    for bad, why in ((tmp_path / "missing", "no such path"), (tmp_path, "not a run directory (no manifest.json)")):
        out = subprocess.run([sys.executable, str(REPO / "bench" / script), str(bad)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and out.stderr.strip().splitlines() == [
            f"{script}: {bad}: {why}; make one with `neuron-explorer import TRACE -o RUN` (--help for usage)"]
