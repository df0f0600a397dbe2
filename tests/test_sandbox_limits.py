"""The sandbox's time limit holds for hostile query shapes (issue 13, item 9): DuckDB does not look
at interrupts while it parses, binds and folds constants, so such queries are stopped by killing
the sandbox's worker process. Limits are checked; memory and threads are lowered.

Each pathological query takes 15-50 s on this machine when only interrupted (measured with DuckDB
2.0.1 and a 1 s limit: nested lists 16 s and 51 s, the regexp 49 s). The tests assert that it
stopped with the time-limit error and that the call returned before a generous watchdog (30 s)
fires, never a tight time."""

from __future__ import annotations

import math
import threading

import pytest

from neuron_explorer.agent import Sandbox, query
from neuron_explorer.agent import sandbox as sandbox_mod
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import TRACES, cli
from .test_sandbox import run_digest

WATCHDOG_S = 30.0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return import_traces(TRACES / "cuda_simple_add.json.gz", tmp_path_factory.mktemp("limits") / "run").run_dir


@pytest.fixture(scope="module")
def box(run):
    with Sandbox(run) as b:
        yield b


def call_with_watchdog(fn):
    """fn() in a thread; its result, or a failure when it has not returned within WATCHDOG_S."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(WATCHDOG_S)
    assert not t.is_alive(), f"the query did not return within {WATCHDOG_S} s"
    return out[0]


NESTED = "[" * 990 + "1" + "]" * 990
PATHOLOGICAL = {
    "five nested list literals 990 deep": "SELECT " + ", ".join([NESTED] * 5),
    "constant-folded regexp over a generated 300 MB string": "SELECT length(regexp_replace(repeat('ab', 150000000), 'a', 'xyz', 'g'))",
}


@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_pathological_shapes_stop_with_the_time_limit_error(run, box, name):
    before = run_digest(run)
    res = call_with_watchdog(lambda: box.query(PATHOLOGICAL[name], timeout_s=1))
    assert not res.ok and res.error == "interrupted: the query ran longer than the time limit of 1 s", res.error
    assert box.query("SELECT 42 AS x").rows == [[42]]  # a fresh worker answers the next query
    assert run_digest(run) == before


def test_the_cli_keeps_the_time_limit_on_a_nested_literal(run):
    p = call_with_watchdog(lambda: cli("query", run, PATHOLOGICAL["five nested list literals 990 deep"], "--timeout", "1"))
    assert p.returncode == 2 and "time limit of 1 s" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, 1e308, -math.inf, sandbox_mod.MAX_TIMEOUT_S + 1, "5", None, True])
def test_bad_time_limits_are_refused_with_one_line(box, timeout):
    res = call_with_watchdog(lambda: box.query("SELECT 1", timeout_s=timeout))
    assert not res.ok and "timeout_s must be" in res.error and "\n" not in res.error, res.error


def test_good_time_limits_work(box):
    for t in (0.5, 1, sandbox_mod.MAX_TIMEOUT_S):
        res = box.query("SELECT 1 AS one", timeout_s=t)
        assert res.ok and res.rows == [[1]], (t, res.error)


@pytest.mark.parametrize("rows", [math.nan, math.inf, "10", None])
def test_bad_row_limits_are_refused_with_one_line(box, rows):
    res = box.query("SELECT 1", max_rows=rows)
    assert not res.ok and "max_rows must be" in res.error


@pytest.mark.parametrize("timeout", ["inf", "1e308", "nan", "0", "-1"])
def test_bad_time_limits_from_the_cli_are_one_line_exit_2(run, timeout):
    p = call_with_watchdog(lambda: cli("query", run, "SELECT 1", f"--timeout={timeout}"))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "timeout_s must be" in p.stderr, p.stderr


def test_sql_that_is_not_text_is_an_envelope(run, box):
    for sql in (b"SELECT 1", None, 42, ["SELECT 1"]):
        res = box.query(sql)  # type: ignore[arg-type]
        assert not res.ok and "must be text" in res.error
        d = query(run, sql).to_dict()  # type: ignore[arg-type]
        assert d["ok"] is False and "must be text" in d["error"] and d["rows"] == []


def test_memory_and_threads_are_lowered_and_locked(box):
    res = box.query("SELECT current_setting('memory_limit') AS m, current_setting('threads') AS t")
    assert res.ok, res.error
    memory, threads = res.rows[0]
    assert threads == sandbox_mod.THREADS
    assert memory.replace(" ", "").upper().startswith(("953.6MIB", "1.0GB", "1GB", "1000.0MB", "953.6MB")), memory
    for stmt in ("SET memory_limit = '100GB'", "SET threads = 64", "SELECT * FROM duckdb_settings() WHERE 0; SET threads = 64"):
        assert not box.query(stmt).ok
    again = box.query("SELECT current_setting('threads') AS t")
    assert again.rows == [[sandbox_mod.THREADS]]
