"""The SQL sandbox: SELECT works on every view; every escape is refused or interrupted; the run is unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from neuron_explorer import open_run
from neuron_explorer.agent import QueryResult, Sandbox, query
from neuron_explorer.agent import sandbox as sandbox_mod
from neuron_explorer.agent.sandbox import VIEWS
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.errors import InputError

from .conftest import TRACES, cli


def run_digest(run_dir: Path) -> dict[str, str]:
    """Every file under the run (names and contents): a change anywhere changes this."""
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(run_dir.rglob("*"))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sandbox")
    run = import_traces(TRACES / "cuda_alexnet_train.json.gz", tmp / "alexnet").run_dir
    other = import_traces(TRACES / "cuda_simple_add.json.gz", tmp / "other").run_dir
    (tmp / "secret.csv").write_text("password\nhunter2\n")
    return run, other, tmp


@pytest.fixture(scope="module")
def box(runs):
    with Sandbox(runs[0]) as b:
        yield b


def test_every_view_reads_after_lockdown_and_matches_open_run(runs, box):
    run = runs[0]
    with open_run(run) as r:
        for view in VIEWS:
            expected = r.sql(f"SELECT count(*) FROM {view}").fetchone()[0]
            res = box.query(f"SELECT count(*) AS n FROM {view}")
            assert res.ok, (view, res.error)
            assert res.rows == [[expected]], view
        expected_kinds = dict(r.sql("SELECT kind, count(*) FROM events GROUP BY 1").fetchall())
    res = box.query("SELECT kind, count(*) AS n FROM events GROUP BY 1 ORDER BY 1")
    assert res.ok and res.columns == ["kind", "n"] and res.types == ["VARCHAR", "BIGINT"]
    assert dict(map(tuple, res.rows)) == expected_kinds
    assert expected_kinds["kernel"] > 0


def test_row_limit_reports_truncation(box):
    cut = box.query("SELECT range AS i FROM range(10)", max_rows=3)
    assert cut.ok and cut.rows == [[0], [1], [2]] and cut.row_count == 3 and cut.truncated
    whole = box.query("SELECT range AS i FROM range(10)", max_rows=10)
    assert whole.row_count == 10 and not whole.truncated


def test_select_forms_agents_use_are_allowed(box):
    for sql in ("DESCRIBE events", "SUMMARIZE SELECT dur_ns FROM events", "FROM steps LIMIT 1",
                "WITH k AS (SELECT * FROM events WHERE kind = 'kernel') SELECT count(*) FROM k",
                "SELECT table_name, column_name FROM schema_fields LIMIT 3;"):
        res = box.query(sql)
        assert res.ok, (sql, res.error)


def _escapes(run: Path, other: Path, tmp: Path) -> list[tuple[str, str]]:
    """(sql, what the error must say) for each way out we know of."""
    return [
        ("SELECT * FROM read_csv('/etc/passwd')", "refused: only the run's own files"),
        ("SELECT * FROM read_text('/etc/hostname')", "refused: only the run's own files"),
        (f"SELECT * FROM read_csv('{tmp / 'secret.csv'}')", "refused: only the run's own files"),
        (f"SELECT count(*) FROM read_parquet('{other}/rank=0/events.parquet')", "refused: only the run's own files"),
        (f"SELECT count(*) FROM read_parquet('{run}/../{other.name}/rank=0/events.parquet')", "refused: only the run's own files"),
        ("SELECT * FROM glob('/etc/*')", "refused: only the run's own files"),
        (f"COPY (SELECT * FROM events) TO '{run}/stolen.csv'", "only SELECT statements are allowed here (got COPY)"),
        (f"COPY events FROM '{run}/manifest.json'", "only SELECT statements are allowed here (got COPY)"),
        (f"ATTACH '{run}/x.duckdb' AS x", "only SELECT statements are allowed here (got ATTACH)"),
        ("INSTALL httpfs", "only SELECT statements are allowed here (got LOAD)"),  # DuckDB types INSTALL as LOAD
        ("LOAD httpfs", "only SELECT statements are allowed here (got LOAD)"),
        ("SET enable_external_access = true", "only SELECT statements are allowed here (got SET)"),
        ("RESET lock_configuration", "only SELECT statements are allowed here"),
        ("PRAGMA version", "only SELECT statements are allowed here (got PRAGMA)"),
        ("CALL pragma_version()", "only SELECT statements are allowed here (got CALL)"),
        ("SELECT 1; SELECT 2", "2 statements in one call"),
        (f"SELECT 1; COPY (SELECT 1) TO '{run}/x.csv'", "2 statements in one call"),
        ("CREATE TABLE t AS SELECT * FROM events", "only SELECT statements are allowed here (got CREATE)"),
        ("CREATE OR REPLACE VIEW events AS SELECT 1", "only SELECT statements are allowed here (got CREATE)"),
        ("DROP VIEW events", "only SELECT statements are allowed here (got DROP)"),
        ("INSERT INTO events SELECT * FROM events", "only SELECT statements are allowed here (got INSERT)"),
        ("EXPORT DATABASE '/tmp/out'", "only SELECT statements are allowed here"),
        (f"SELECT * FROM query('COPY (SELECT 1) TO ''{run}/q.csv''')", "Expected a single SELECT statement"),
        ("", "empty query"),
        ("SELEC 1", "Parser Error"),
    ]


def test_escape_attempts_are_refused_and_the_run_is_unchanged(runs, box):
    run, other, tmp = runs
    before, other_before = run_digest(run), run_digest(other)
    for sql, message in _escapes(run, other, tmp):
        res = box.query(sql)
        assert not res.ok and res.rows == [], sql
        assert message in res.error, (sql, res.error)
        assert "\n" not in res.error
    assert run_digest(run) == before and run_digest(other) == other_before
    assert not Path("/tmp/out").exists()
    assert box.query("SELECT count(*) FROM events").ok  # the connection is still usable


def test_settings_cannot_be_changed_through_a_select(box):
    res = box.query("SELECT current_setting('enable_external_access') AS e, current_setting('lock_configuration') AS l")
    assert res.ok and res.rows == [[False, True]]


def test_a_query_cannot_read_the_host_process_dataframes(box, monkeypatch):
    # DuckDB's Python "replacement scan" would read a DataFrame visible in the calling frame.
    monkeypatch.setattr(sandbox_mod, "host_secrets", pd.DataFrame({"token": ["s3cr3t"]}), raising=False)
    res = box.query("SELECT * FROM host_secrets")
    assert not res.ok and "host_secrets" in res.error


def test_a_query_that_runs_forever_is_interrupted(runs, box):
    before = run_digest(runs[0])
    res = box.query("SELECT count(*) FROM range(1000000000000) t WHERE t.range % 7 = 3", timeout_s=0.5)
    assert not res.ok
    assert res.error == "interrupted: the query ran longer than the time limit of 0.5 s"
    assert res.elapsed_s >= 0.5
    assert box.query("SELECT 42 AS x").rows == [[42]]  # the sandbox still answers
    assert run_digest(runs[0]) == before


def test_python_entry_point_envelope(runs):
    res = query(runs[0], "SELECT name, dur_ns FROM events WHERE kind = 'kernel' ORDER BY dur_ns DESC", max_rows=2)
    assert isinstance(res, QueryResult)
    d = res.to_dict()
    assert set(d) >= {"ok", "error", "columns", "rows", "truncated", "row_count"}
    assert d["ok"] and d["error"] is None and d["columns"] == ["name", "dur_ns"] and d["row_count"] == 2 and d["truncated"]
    with open_run(runs[0]) as r:
        top = r.sql("SELECT max(dur_ns) FROM events WHERE kind = 'kernel'").fetchone()[0]
    assert d["rows"][0][1] == top
    json.dumps(d)  # JSON-ready
    bad = query(runs[0], "DROP VIEW events").to_dict()
    assert bad["ok"] is False and "got DROP" in bad["error"] and bad["rows"] == []


def test_bad_run_raises_input_error(tmp_path):
    with pytest.raises(InputError, match="no such run directory"):
        query(tmp_path / "missing", "SELECT 1")


def test_long_cells_are_cut_and_marked(box):
    res = box.query("SELECT repeat('x', 5000) AS s")
    assert res.ok and res.truncated
    assert res.rows[0][0].startswith("x" * sandbox_mod.MAX_CELL_CHARS) and "cut, 5000 chars" in res.rows[0][0]


# --- the CLI -------------------------------------------------------------------------------

def test_cli_query_formats(runs):
    run = runs[0]
    sql = "SELECT kind, count(*) AS n FROM events GROUP BY 1 ORDER BY n DESC, kind"
    with open_run(run) as r:
        expected = [list(x) for x in r.sql(sql).fetchall()]
    j = cli("query", run, sql, "--format", "json")
    assert j.returncode == 0, j.stderr
    env = json.loads(j.stdout)
    assert env["ok"] and env["rows"] == expected and not env["truncated"]
    c = cli("query", run, sql, "--format", "csv", "--max-rows", "2")
    assert c.returncode == 0
    assert c.stdout.splitlines() == ["kind,n"] + [f"{k},{n}" for k, n in expected[:2]]
    assert "truncated" in c.stderr
    t = cli("query", run, sql)
    lines = t.stdout.splitlines()
    assert lines[0].split() == ["kind", "n"] and lines[2].split() == [str(v) for v in expected[0]]
    assert lines[-1] == f"({len(expected)} rows)"


@pytest.mark.slow  # a CLI process per refused query
def test_cli_query_refusals_are_one_line_with_exit_2(runs):
    run = runs[0]
    before = run_digest(run)
    for sql in (f"COPY (SELECT 1) TO '{run}/x.csv'", "SELECT * FROM read_csv('/etc/passwd')", "SELECT 1; SELECT 2"):
        p = cli("query", run, sql)
        assert p.returncode == 2, sql
        assert p.stderr.startswith("error: ") and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    p = cli("query", run, "SET threads = 1", "--format", "json")
    assert p.returncode == 2 and json.loads(p.stdout)["ok"] is False
    p = cli("query", run, "SELECT count(*) FROM range(1000000000000) t WHERE t.range % 7 = 3", "--timeout", "0.5")
    assert p.returncode == 2 and "time limit of 0.5 s" in p.stderr
    assert cli("query", run, "SELECT 1", "--format", "xml").returncode == 2
    assert run_digest(run) == before


def test_cli_schema_of_a_run_lists_every_view_and_column(runs):
    run = runs[0]
    p = cli("schema", run, "--json")
    assert p.returncode == 0, p.stderr
    tables = {t["table"]: t for t in json.loads(p.stdout)["tables"]}
    assert set(tables) == set(VIEWS)
    with open_run(run) as r:
        for name, t in tables.items():
            described = [(c["name"], c["type"]) for c in t["columns"]]
            actual = [(n, _plain_type(ty)) for n, ty, *_ in r.sql(f"DESCRIBE {name}").fetchall()]
            assert described == actual, name
            assert all(c["doc"] for c in t["columns"]), name
    text = cli("schema", run).stdout
    assert "ts_ns" in text and "[ns]" in text and "steps:" in text
    assert cli("schema", runs[2] / "nope").returncode == 2


def _plain_type(duck: str) -> str:
    return {"BIGINT": "int64", "INTEGER": "int32", "DOUBLE": "double", "VARCHAR": "string", "BOOLEAN": "bool"}[duck]
