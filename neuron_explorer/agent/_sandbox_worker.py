"""The process a `Sandbox` runs its queries in (`main`, started by sandbox._Worker).

DuckDB checks for `interrupt()` only while it executes: parsing, binding and constant folding of
a hostile query (a regexp over a generated 300 MB string, list literals nested a thousand deep)
ignore it and can run for many times the time limit. So the locked-down connection lives in this
separate process, which the parent kills when a query outlasts its limit (and starts again for the
next query); an interrupt timer in here still stops ordinary long queries without losing the process.

Protocol: pickled messages over two pipes whose file descriptors the parent passes as arguments.
First reply: {"ok": True, "manifest": ...} or {"ok": False, "error": one line}. Then per request
{"sql", "max_rows", "timeout_s"} one reply {"ok", "error", "columns", "types", "rows", "truncated"}.
The process ends when the request pipe closes. It writes nothing to stdout (the MCP server's stdout
carries the protocol): fd 1 is pointed at stderr before anything runs.

Must not: be used for trusted analysis code, or write anything.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import os
import sys
import threading
import uuid
from multiprocessing.connection import Connection
from typing import Any

MEMORY_LIMIT = "1GB"
"""DuckDB's memory_limit inside the sandbox (its default is 80% of the machine's memory)."""
THREADS = 2
"""DuckDB's threads inside the sandbox (its default is every core)."""
MAX_CELL_CHARS = 2000
"""A single text cell longer than this is cut (with a marker): one cell cannot flood an agent."""


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
    return _json_value(str(v))


def one_line(e: BaseException | str) -> str:
    text = " ".join(str(e).split())
    return text[:500]


def interrupted_message(timeout_s: float) -> str:
    return f"interrupted: the query ran longer than the time limit of {timeout_s:g} s"


def check_statement(con, sql: str) -> str | None:
    """Why `sql` is refused (one line), or None when it is exactly one SELECT statement.
    DuckDB's own parser decides (`extract_statements`), not a regex."""
    import duckdb

    if not sql or not sql.strip():
        return "empty query: send one SELECT statement"
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as e:
        return one_line(e)
    if len(statements) != 1:
        return f"refused: {len(statements)} statements in one call; send exactly one SELECT statement"
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        name = str(kind).rsplit(".", 1)[-1]
        return f"refused: only SELECT statements are allowed here (got {name}); the run is read-only"
    return None


def open_locked(path: str):
    """A DuckDB connection over the run at `path` with its views, then locked down: only the run's
    files readable, no extensions, no temp directory, no replacement scans, lower memory and
    threads, and `lock_configuration` so that a query cannot undo any of it."""
    import duckdb

    from ..store import open_run, sql_literal

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        run = open_run(path, con)
        # The views are created above, while files can still be opened; the settings below keep
        # them readable (the run directory is allowed) and close everything else.
        allowed = str(path).rstrip("/") + "/"
        for stmt in (
            "SET python_enable_replacements = false",
            "SET temp_directory = ''",
            "SET enable_progress_bar = false",  # it would write into the CLI's output
            f"SET memory_limit = {sql_literal(MEMORY_LIMIT)}",
            f"SET threads = {THREADS}",
            f"SET allowed_directories = [{sql_literal(allowed)}]",
            "SET enable_external_access = false",
            "SET lock_configuration = true",
        ):
            con.execute(stmt)
    except BaseException:
        con.close()
        raise
    return con, run.manifest


def run_query(con, sql: str, max_rows: int, timeout_s: float) -> dict:
    """One checked SELECT with an interrupt timer; never raises for a bad query."""
    import duckdb

    refused = check_statement(con, sql)
    if refused:
        return {"ok": False, "error": refused}
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(timeout_s, stop)
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
        return {"ok": False, "error": interrupted_message(timeout_s)}
    except duckdb.PermissionException as e:
        return {"ok": False, "error": f"refused: only the run's own files can be read here ({one_line(e)})"}
    except duckdb.Error as e:
        return {"ok": False, "error": interrupted_message(timeout_s) if fired.is_set() else one_line(e)}
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
    return {"ok": True, "error": None, "columns": columns, "types": types, "rows": rows, "truncated": truncated}


def main(argv: list[str]) -> int:
    read_fd, write_fd, path = int(argv[0]), int(argv[1]), argv[2]
    os.dup2(2, 1)  # nothing this process prints may reach the parent's stdout
    requests = Connection(read_fd, writable=False)
    replies = Connection(write_fd, readable=False)
    try:
        con, manifest = open_locked(path)
    except Exception as e:  # noqa: BLE001 - the parent reports it as one line
        replies.send({"ok": False, "error": one_line(e)})
        return 1
    replies.send({"ok": True, "manifest": manifest})
    while True:
        try:
            req = requests.recv()
        except (EOFError, OSError):
            return 0  # the parent closed the sandbox (or died)
        try:
            reply = run_query(con, req["sql"], req["max_rows"], req["timeout_s"])
        except Exception as e:  # noqa: BLE001 - an unexpected failure is still one line for the agent
            reply = {"ok": False, "error": one_line(f"{type(e).__name__}: {e}")}
        replies.send(reply)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
