"""The README's install tells the truth (issue 37): its first command installs the project without
extras (the test, Ray, S3 and framework extras took 13 minutes and 2.1 GB more), it says how to get
the CPU torch on a CPU-only machine, and CI (.ci/run) runs that command literally, after pinning the
CPU torch and before installing the test extras."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _first_command() -> str:
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S)[1]
    return block.splitlines()[0].split("#")[0].strip()


def test_the_first_command_installs_no_extra_and_the_readme_says_how_to_get_the_cpu_torch():
    first = _first_command()
    assert first == "pip install -e . && neuron-explorer demo"
    readme = (REPO / "README.md").read_text()
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in readme
    assert "pins the CPU build" not in readme  # on the public index torch==2.13.0 is the CUDA build


def test_ci_runs_the_first_command_between_the_cpu_torch_and_the_test_extras():
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines() if line.strip() and not line.startswith("#")]
    order = [lines.index(c) for c in ("pip install torch==2.13.0", _first_command(), 'pip install -e ".[test]"', "scripts/test")]
    assert order == sorted(order)
    assert "pip install -q -e \".[test]\"" in (REPO / "scripts" / "test").read_text()  # the test command installs its extras itself


def test_the_duckdb_example_says_it_needs_the_duckdb_program_and_gives_the_query_command():
    readme = (REPO / "README.md").read_text()
    duckdb_line = next(i for i, line in enumerate(readme.splitlines()) if line.startswith("duckdb -c"))
    nearby = "\n".join(readme.splitlines()[duckdb_line - 1:duckdb_line + 5])
    assert "neuron-explorer query runs/exp1" in nearby and "needs the DuckDB command-line program" in nearby
