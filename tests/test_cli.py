"""The CLI as a user meets it: import, info, info --json, export, schema, demo, --help."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_explorer.fmt import duration

from .conftest import TRACES, cli


def test_import_then_info_text_and_json(tmp_path: Path):
    res = cli("import", TRACES / "cuda_nccl_rank0_of_2.json.gz", "-o", tmp_path / "run")
    assert res.returncode == 0, res.stderr
    assert "rank 0 of 2" in res.stdout and "NVIDIA" in res.stdout
    text = cli("info", tmp_path / "run")
    assert text.returncode == 0 and "steps:" in text.stdout and "kernel" in text.stdout
    data = json.loads(cli("info", tmp_path / "run", "--json").stdout)
    rank = data["ranks"][0]
    assert rank["counts"]["kernel"] == 2700 and rank["world_size"] == 2 and rank["steps"] >= 1
    # the text shows the JSON's figures, written by fmt.duration as everywhere else
    assert f"over {duration(rank['span_ns'])}" in text.stdout and f"median {duration(rank['step_median_ns'])}" in text.stdout
    # the span (first start to last end) is the events' own, written by the importer into the manifest
    from neuron_explorer import open_run

    run = open_run(tmp_path / "run")
    span = run.sql("SELECT max(ts_ns + dur_ns) - min(ts_ns) FROM events").fetchone()[0]
    assert run.manifest["ranks"][0]["span_ns"] == span == rank["span_ns"] > 0
    run.close()
    # a run written before the manifest held it: info reads the events instead
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    del manifest["ranks"][0]["span_ns"]
    (tmp_path / "run" / "manifest.json").write_text(json.dumps(manifest))
    assert json.loads(cli("info", tmp_path / "run", "--json").stdout)["ranks"][0]["span_ns"] == span


@pytest.mark.slow  # records a real torch training loop
def test_demo_records_analyses_and_points_at_user_lines(tmp_path: Path):
    res = cli("demo", "-o", tmp_path / "runs" / "demo")
    assert res.returncode == 0, res.stderr[-2000:]
    run = tmp_path / "runs" / "demo"
    assert (run / "manifest.json").is_file() and (run / "analysis" / "report.json").is_file()
    report = json.loads((run / "analysis" / "report.json").read_text())
    assert report["findings"], "the demo job has known bottlenecks"
    assert all(f["location"]["source"].startswith(str(tmp_path / "runs" / "demo_train.py")) for f in report["findings"]
               if f["location"]["source"])
    assert "Neuron Explorer report" in res.stdout and f"neuron-explorer dashboard {run}" in res.stdout


def test_help_explains_every_command():
    res = cli("--help")
    assert res.returncode == 0
    for command in ("import", "info", "export", "schema", "demo"):
        assert command in res.stdout
    assert "--force" in cli("import", "--help").stdout


HEAVY = {"torch", "pandas", "dash", "ray", "pyarrow", "duckdb", "numpy"}


@pytest.mark.parametrize("args", [[], ["--help"], ["version"], ["import", "--help"]])
def test_start_up_loads_no_heavy_package(args):
    """--help and version answer without importing torch, pandas, dash, ray, pyarrow, duckdb or numpy
    (seconds of start-up each; bench/bench_startup.py times it): the commands that use them import them."""
    import subprocess
    import sys

    code = ("import sys\nfrom neuron_explorer.cli import main\nsys.argv = ['neuron-explorer', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('LOADED', *sorted({m.split('.')[0] for m in sys.modules}))")
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    loaded = set(res.stdout.split("LOADED")[-1].split())
    assert "typer" in loaded and "neuron_explorer" in loaded  # the probe saw the CLI run
    assert loaded & HEAVY == set()


def test_help_is_plain_text_grouped_by_panel_without_rich():
    """--help prints click's plain help with the commands under their panels, and never imports rich
    (with markdown-it and pygments, 0.15-0.3 s of a 0.5 s start-up budget: issue 37)."""
    import subprocess
    import sys

    code = ("import sys\nfrom neuron_explorer.cli import main\nsys.argv = ['neuron-explorer', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('LOADED', *sorted({m.split('.')[0] for m in sys.modules}))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    help_text, loaded = res.stdout.split("LOADED")
    assert not {"rich", "markdown_it", "pygments"} & set(loaded.split())
    lines = help_text.splitlines()
    panels = [line for line in lines if line in ("Record:", "Analyse:", "Explore:")]
    assert panels == ["Record:", "Analyse:", "Explore:"], help_text
    record = lines[lines.index("Record:") + 1:lines.index("Analyse:")]
    assert [line.split()[0] for line in record if line.strip()] == ["import", "demo", "record"]


@pytest.mark.parametrize("command", ["import", "analyze"])
def test_help_names_the_ray_extra_whole(command):
    """The install command is printed whole: `[ray]` kept (rich markup took it for a style), never cut at its hyphen."""
    import os
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "neuron_explorer", command, "--help"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "COLUMNS": "300"})
    assert res.returncode == 0 and 'Needs pip install "neuron-explorer[ray]".' in res.stdout, res.stdout


def test_schema_lists_columns_with_units():
    res = cli("schema")
    assert res.returncode == 0 and "| `ts_ns` | int64 | ns |" in res.stdout


def test_numpy_blas_on_one_thread_only_where_no_user_code_runs():
    """The tool's own commands start numpy's OpenBLAS on one thread (its idle threads spin ~0.1 s of
    CPU at import) and run without transparent huge pages (zeroed 2 MiB at a time: seconds of an
    analysis in the kernel); `record` and `demo` run a workload, whose BLAS and pages are left as
    the user set them."""
    import subprocess
    import sys

    # (the child clears the huge-page setting first: it is inherited, and a test before may have run the CLI in this process)
    code = ("import ctypes, os, sys; from neuron_explorer import cli; assert 'numpy' not in sys.modules; "
            "linux = sys.platform.startswith('linux'); libc = ctypes.CDLL('libc.so.6') if linux else None; "
            "linux and libc.prctl(41, 0, 0, 0, 0); "
            "cli._tune_tool_process(sys.argv[1:]); import numpy; print(os.environ.get('OPENBLAS_NUM_THREADS'), "
            "libc.prctl(42, 0, 0, 0, 0) if linux else 1)")

    def blas_threads(*argv, env_value=None):
        import os

        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        if env_value is not None:
            env["OPENBLAS_NUM_THREADS"] = env_value
        return subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, check=True).stdout.strip()

    # (OPENBLAS_NUM_THREADS, PR_GET_THP_DISABLE: 1 where huge pages are off)
    assert blas_threads("import", "trace.json", "-o", "run") == "1 1"
    assert blas_threads("analyze", "run") == "1 1"
    assert blas_threads("dashboard", "run") == "1 1"
    assert blas_threads("record", "train.py", "-o", "run") == "None 0"
    assert blas_threads("demo") == "None 0"
    assert blas_threads("--help") == "None 0"
    assert blas_threads("import", "trace.json", env_value="4") == "4 1"  # the user's own setting is kept
