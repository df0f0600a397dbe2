"""The read-only SQL sandbox that agents (and `neuron-explorer query`) run their SQL in.

A `Sandbox` is one DuckDB connection over one run with the run's views (events, frames, flows,
memory, counters, steps, ranks, devices, schema_fields) created first and the connection locked
down afterwards:

- only one statement per call, and only of type SELECT (checked by DuckDB's own parser via
  `extract_statements`, not by a regex) — this is what keeps COPY/ATTACH/CREATE/SET/PRAGMA/
  INSTALL/LOAD/CALL out, and it matters because `allowed_directories` grants write access too;
- file access only inside the run directory (`allowed_directories`, `enable_external_access=false`),
  no extension autoload/autoinstall, no spilling to a temp directory, no Python replacement scans
  (a query cannot read the host process's DataFrames), and `lock_configuration=true` so a query
  cannot undo any of it;
- a time limit (DuckDB has no timeout setting: a timer thread calls `interrupt()`) and a row
  limit that says when it cut.

It must not be used for trusted analysis code: Python users keep unrestricted DuckDB through
`neuron_explorer.open_run`. It never writes anything.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from ..store import open_run, resolve_run, sql_literal

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_ROWS = 1000
MAX_CELL_CHARS = 2000
"""A single text cell longer than this is cut (with a marker): one cell cannot flood an agent."""

VIEWS = ("events", "frames", "flows", "memory", "counters", "steps", "ranks", "devices", "schema_fields")


@dataclass
class QueryResult:
    """The envelope every sandboxed query returns. Keys are only ever added, never renamed.

    ok: the query ran; error: one line saying why not (None when ok); columns/types: names and
    DuckDB types of the result; rows: lists of JSON-ready values; row_count: len(rows);
    truncated: more rows existed than max_rows (or a cell was cut); elapsed_s: wall time.
    """

    ok: bool
    error: str | None = None
    columns: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    truncated: bool = False
    row_count: int = 0
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "error": self.error,
            "columns": self.columns,
            "types": self.types,
            "rows": self.rows,
            "row_count": self.row_count,
            "truncated": self.truncated,
            "elapsed_s": round(self.elapsed_s, 4),
        }

    def records(self) -> list[dict]:
        return [dict(zip(self.columns, r)) for r in self.rows]


class SandboxError(Exception):
    """A query the sandbox refuses or that failed; the message is one line for the agent."""


def _json_value(v: Any) -> tuple[Any, bool]:
    """A JSON-ready form of one DuckDB value and whether it had to be cut."""
    if v is None or isinstance(v, (bool, int, str)):
        if isinstance(v, str) and len(v) > MAX_CELL_CHARS:
            return v[:MAX_CELL_CHARS] + f"…[cut, {len(v)} chars]", True
        return v, False
    if isinstance(v, float):
        return (v if math.isfinite(v) else str(v)), False
    if isinstance(v, decimal.Decimal):
        return float(v), False
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat(), False
    if isinstance(v, _dt.timedelta):
        return str(v), False
    if isinstance(v, uuid.UUID):
        return str(v), False
    if isinstance(v, (bytes, bytearray, memoryview)):
        return f"<{len(bytes(v))} bytes>", False
    if isinstance(v, (list, tuple)):
        cut = False
        out = []
        for x in v[:1000]:
            jx, c = _json_value(x)
            out.append(jx)
            cut |= c
        return out, cut or len(v) > 1000
    if isinstance(v, dict):
        cut = False
        out = {}
        for k, x in list(v.items())[:1000]:
            jx, c = _json_value(x)
            out[str(k)] = jx
            cut |= c
        return out, cut or len(v) > 1000
    s = str(v)
    return _json_value(s)


def check_statement(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Refuse anything that is not exactly one SELECT statement (raises SandboxError)."""
    if not sql or not sql.strip():
        raise SandboxError("empty query: send one SELECT statement")
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as e:
        raise SandboxError(_one_line(e)) from None
    if len(statements) != 1:
        raise SandboxError(f"refused: {len(statements)} statements in one call; send exactly one SELECT statement")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        name = str(kind).rsplit(".", 1)[-1]
        raise SandboxError(f"refused: only SELECT statements are allowed here (got {name}); the run is read-only")


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:500]


class Sandbox:
    """A locked-down, read-only DuckDB connection over one run. Thread-safe (queries run one at a time)."""

    def __init__(self, run_dir: Path | str):
        self.path = resolve_run(run_dir).resolve()  # a trace is imported into the cache first
        con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
        try:
            run = open_run(self.path, con)
            self.manifest = run.manifest
            # The views are created above, while files can still be opened; the settings below
            # keep them readable (the run directory is allowed) and close everything else.
            allowed = str(self.path).rstrip("/") + "/"
            for stmt in (
                "SET python_enable_replacements = false",
                "SET temp_directory = ''",
                # The progress bar would write into the CLI's output and the MCP server's log.
                "SET enable_progress_bar = false",
                f"SET allowed_directories = [{sql_literal(allowed)}]",
                "SET enable_external_access = false",
                "SET lock_configuration = true",
            ):
                con.execute(stmt)
        except BaseException:
            con.close()
            raise
        self._con = con
        self._lock = threading.Lock()

    def query(self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S) -> QueryResult:
        """Run one SELECT; never raises for a bad query (the envelope says what went wrong)."""
        t0 = time.perf_counter()
        max_rows = max(0, int(max_rows))
        with self._lock:
            if self._con is None:
                return QueryResult(ok=False, error="the sandbox is closed")
            try:
                check_statement(self._con, sql)
            except SandboxError as e:
                return QueryResult(ok=False, error=str(e), elapsed_s=time.perf_counter() - t0)
            con = self._con
            fired = threading.Event()

            def stop() -> None:
                fired.set()
                con.interrupt()

            timer = threading.Timer(float(timeout_s), stop)
            timer.daemon = True
            timer.start()
            try:
                # execute() streams: fetching max_rows + 1 rows is how we learn that more existed
                # without computing (or holding) the rest.
                cur = con.execute(sql)
                columns = [d[0] for d in cur.description]
                types = [str(d[1]) for d in cur.description]
                raw = cur.fetchmany(max_rows + 1)
            except duckdb.InterruptException:
                return QueryResult(ok=False, error=f"interrupted: the query ran longer than the time limit of {timeout_s:g} s",
                                   elapsed_s=time.perf_counter() - t0)
            except duckdb.PermissionException as e:
                return QueryResult(ok=False, error=f"refused: only the run's own files can be read here ({_one_line(e)})",
                                   elapsed_s=time.perf_counter() - t0)
            except duckdb.Error as e:
                msg = _one_line(e)
                if fired.is_set():
                    msg = f"interrupted: the query ran longer than the time limit of {timeout_s:g} s"
                return QueryResult(ok=False, error=msg, elapsed_s=time.perf_counter() - t0)
            finally:
                timer.cancel()
        truncated = len(raw) > max_rows
        rows = []
        for r in raw[:max_rows]:
            out = []
            for v in r:
                jv, cut = _json_value(v)
                truncated |= cut
                out.append(jv)
            rows.append(out)
        return QueryResult(ok=True, columns=columns, types=types, rows=rows, truncated=truncated, row_count=len(rows),
                           elapsed_s=time.perf_counter() - t0)

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def query(run: Path | str, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S) -> QueryResult:
    """Run one read-only SELECT on a run in the sandbox: the entry point for agent frameworks.

    A bad run directory raises InputError (the caller's mistake); a refused, failing or
    interrupted query returns `QueryResult(ok=False, error=...)` (the agent's mistake, to retry).
    """
    with Sandbox(run) as box:
        return box.query(sql, max_rows=max_rows, timeout_s=timeout_s)
