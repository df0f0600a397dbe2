"""A folder of runs (`runs/`, what `record --runs N` or a training integration writes) given where
one run is expected: the command says so and lists the runs, and nothing is imported or cached
for it (issue 37: `info runs/` took the runs' manifest.json files for traces and left a `.kept`
directory in the cache)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from neuron_explorer import store
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import TRACES, cli


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """runs/a and runs/b (two runs), runs/pl/version_0/fit-x (a run two levels down, as Lightning
    writes), runs/pl/version_0/metrics.csv beside it; runs/a/inner is inside a run (not listed)."""
    root = tmp_path_factory.mktemp("runs")
    small = TRACES / "cuda_simple_add.json.gz"
    for sub in ("a", "b", "pl/version_0/fit-x"):
        (root / sub).parent.mkdir(parents=True, exist_ok=True)
        import_traces(small, root / sub)
    (root / "pl" / "version_0" / "metrics.csv").write_text("step,loss\n")
    (root / "a" / "inner").mkdir()
    return root


def test_runs_in_lists_the_runs_under_a_folder(runs):
    assert store.runs_in(runs) == [runs / "a", runs / "b", runs / "pl" / "version_0" / "fit-x"]
    assert store.runs_in(runs / "pl") == [runs / "pl" / "version_0" / "fit-x"]
    assert store.runs_in(runs, depth=1) == [runs / "a", runs / "b"]
    assert store.runs_in(runs / "a") == [] and store.runs_in(runs / "pl" / "version_0" / "metrics.csv") == []


def _cache_entries() -> set[str]:
    cache = Path(os.environ["NEURON_EXPLORER_CACHE"])
    return {p.name for p in cache.iterdir()} if cache.is_dir() else set()


@pytest.mark.parametrize("command", [["info"], ["analyze"], ["query", "{}", "SELECT 1"], ["export", "{}", "--chrome", "out.json"],
                                     ["import", "{}", "-o", "out"]])
def test_commands_given_a_folder_of_runs_say_so_and_cache_nothing(runs, command, tmp_path):
    before = _cache_entries()
    args = [a.replace("{}", str(runs)) for a in command] if "{}" in command else [*command, str(runs)]
    res = cli(*args, cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip() == (f"error: {runs}: a folder of 3 runs, not a run: {runs / 'a'}, {runs / 'b'}, "
                                  f"{runs / 'pl' / 'version_0' / 'fit-x'}; give one of them (diff, dashboard and mcp take the folder)")
    assert _cache_entries() == before  # no import, no .kept
    assert list(tmp_path.iterdir()) == []  # no --out written


def test_a_long_list_is_cut(tmp_path):
    for i in range(12):
        (tmp_path / f"r{i:02d}").mkdir()
        (tmp_path / f"r{i:02d}" / store.MANIFEST).write_text("{}")
    message = str(store.folder_of_runs(tmp_path, store.runs_in(tmp_path)))
    assert "a folder of 12 runs" in message and f"{tmp_path / 'r09'}, ... and 2 more;" in message and "r10" not in message


def test_dashboard_and_mcp_take_each_run_of_a_folder(runs):
    from neuron_explorer.cli import _each_run

    single = runs / "a"
    assert _each_run([runs, single]) == [runs / "a", runs / "b", runs / "pl" / "version_0" / "fit-x", single]
