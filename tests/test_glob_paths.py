"""Run and trace paths with glob characters are read literally (issue 40.2).

DuckDB expands `*`, `?` and `[...]` in a path given to `read_parquet`: a run directory named
`s[0]` read the run `s0` beside it, and `r?` read `r?` and `rX` together. Here every command that
opens a run (import, info, analyze, export, diff, query) is given runs and traces whose paths hold
`[`, `]`, `?`, `*` and spaces, each beside a decoy run that such a pattern matches; each command must
see only its own run's events (told apart by the operator names, which differ per run).
"""

from __future__ import annotations

import json

import pytest

from neuron_explorer.store import sql_file_literal

from .conftest import X, cli, write_trace

NAMES = ["s[0]", "r?", "a*b c", "[ab] x", "e[!x]"]
"""Run names with glob characters; DECOYS holds, per name, a sibling that the name matches as a pattern."""
DECOYS = {"s[0]": "s0", "r?": "rX", "a*b c": "aZZb c", "[ab] x": "a x", "e[!x]": "ey"}


def _trace(path, op: str, n: int):
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000)]
    events += [X(op, "cpu_op", 10 + 50 * i, 40) for i in range(n)]
    return write_trace(path, events)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (run dir, trace path, operator name, its count) for the hostile names and their decoys."""
    root = tmp_path_factory.mktemp("glob")
    made = {}
    for i, name in enumerate([*NAMES, *DECOYS.values()]):
        op, n = f"aten::op{i}", i + 1
        trace = _trace(root / "traces" / f"{name}.json", op, n)
        out = root / "runs" / name
        r = cli("import", trace, "-o", out)
        assert r.returncode == 0, r.stderr
        made[name] = (out, trace, op, n)
    return made


def test_sql_file_literal_escapes_each_glob_character():
    assert sql_file_literal("/r/s[0]/a?b*c.parquet") == "'/r/s[[]0]/a[?]b[*]c.parquet'"
    assert sql_file_literal("/plain/it's.parquet") == "'/plain/it''s.parquet'"


@pytest.mark.parametrize("name", NAMES)
def test_query_reads_only_its_own_run(runs, name):
    out, _, op, n = runs[name]
    r = cli("query", out, "SELECT name, count(*) AS n FROM events WHERE kind = 'cpu_op' GROUP BY name", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rows"] == [[op, n]]


@pytest.mark.parametrize("name", NAMES)
def test_info_analyze_export_read_only_their_own_run(runs, name, tmp_path):
    out, _, op, n = runs[name]
    info = json.loads(cli("info", out, "--json").stdout)
    assert sum(r["events"] for r in info["ranks"]) == n + 1  # the step and this run's n operators, not the decoy's
    a = cli("analyze", out, "--json")
    assert a.returncode == 0, a.stderr
    assert DECOYS[name] not in a.stdout
    chrome = tmp_path / f"{name}.json"
    e = cli("export", out, "--chrome", chrome)
    assert e.returncode == 0, e.stderr
    names = [ev["name"] for ev in json.loads(chrome.read_text())["traceEvents"] if ev.get("ph") == "X"]
    assert names.count(op) == n and all(not x.startswith("aten::op") or x == op for x in names)


@pytest.mark.parametrize("name", NAMES)
def test_traces_with_glob_characters_are_opened_literally(runs, name):
    _, trace, op, n = runs[name]
    r = cli("query", trace, "SELECT count(*) FROM events WHERE name = " + f"'{op}'", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rows"] == [[n]]


def test_diff_compares_the_runs_named(runs):
    base, test = runs["s[0]"][0], runs["r?"][0]
    r = cli("diff", base, test, "--json")
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert runs["s[0]"][2] in text and runs["r?"][2] in text
    for decoy in ("s0", "rX"):
        assert runs[decoy][2] not in text
