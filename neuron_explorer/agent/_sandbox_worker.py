"""The process a `Sandbox` runs its queries in (`main`, started by sandbox._Worker).

DuckDB checks for `interrupt()` only while it executes: parsing, binding and constant folding of
a hostile query (a regexp over a generated 300 MB string, list literals nested a thousand deep)
ignore it and can run for many times the time limit. So the locked-down connection lives in this
separate process, which the parent kills when a query outlasts its limit (and starts again for the
next query); an interrupt timer in here still stops ordinary long queries without losing the process.

Its memory is bounded as a whole, not only DuckDB's buffer manager (`memory_limit` leaves out the
list and string vectors a query builds and the rows fetched into Python): once the run is open, the
process's address space is capped (RLIMIT_AS) at what it holds then plus the room left under the
sandbox's memory limit, so an allocation past it fails at once (DuckDB's out-of-memory error or
Python's MemoryError, answered as one line naming the limit); DuckDB's own `memory_limit` is a part
of that room, and the rows fetched into Python stop at MAX_FETCH_BYTES (the result says it was cut).

Protocol: pickled messages over two pipes whose file descriptors the parent passes as arguments
(and the memory limit in MB). First reply: {"ok": True, "manifest": ...} or {"ok": False, "error":
one line}. Then per request {"sql", "max_rows", "timeout_s", "interrupt_after_s"} one reply {"ok",
"error", "columns", "types", "rows", "truncated", "note"}.
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
"""The most DuckDB's memory_limit inside the sandbox is (its default is 80% of the machine's memory);
less when the sandbox's whole memory limit leaves less room (DUCKDB_SHARE of it)."""
DEFAULT_MEMORY_LIMIT_MB = 2048
"""The sandbox worker's whole memory (MB): what it holds once the run is open (about 170 MB) plus
everything a query allocates, DuckDB's and Python's. An option: `query --memory-limit`,
`mcp --memory-limit`, `Sandbox(run, memory_limit_mb=...)`."""
MIN_MEMORY_LIMIT_MB = 256
MAX_MEMORY_LIMIT_MB = 1024 * 1024
DUCKDB_SHARE = 0.6
"""DuckDB's memory_limit is at most this share of the room a query has (the rest is for what DuckDB
allocates outside its buffer manager and for the rows fetched into Python)."""
MAX_FETCH_BYTES = 64 * 1024 * 1024
"""The most bytes of rows (text, blobs and 8 per other value) fetched into Python per query, or a
quarter of the room when that is less: past it the rows are cut and the result says so."""
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


def memory_message(limit_mb: int) -> str:
    return (f"stopped: the query needed more memory than the sandbox's limit of {limit_mb} MB "
            "(memory_limit_mb; --memory-limit on the command line); narrow it or raise the limit")


def _vm_bytes(key: str) -> int:
    """A `Vm...` figure of this process from /proc/self/status, in bytes (0 where there is none)."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def memory_room(limit_mb: int) -> int:
    """Bytes a query may still allocate under `limit_mb`, from what this process holds now (its
    resident memory); a one-line ValueError when the limit is below that."""
    held = _vm_bytes("VmRSS")
    room = limit_mb * 1024 * 1024 - held
    if room < 64 * 1024 * 1024:
        raise ValueError(f"the sandbox's memory limit of {limit_mb} MB leaves no room for a query: the worker holds "
                         f"{held // (1024 * 1024)} MB once the run is open; raise --memory-limit (memory_limit_mb)")
    return room


def cap_address_space(room: int) -> None:
    """Cap this process's address space at its size now plus `room` (RLIMIT_AS): every later
    allocation, DuckDB's or Python's, fails once the process would hold more."""
    import resource

    size = _vm_bytes("VmSize")
    if not size:  # no /proc (not Linux): the DuckDB limit and the fetch cap still hold
        return
    cap = size + room
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


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


def open_locked(path: str, memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB):
    """A DuckDB connection over the run at `path` with its views, then locked down: only the run's
    files readable, no extensions, no temp directory, no replacement scans, lower memory and
    threads, and `lock_configuration` so that a query cannot undo any of it. Returns the
    connection, the manifest and the room (bytes) a query has under `memory_limit_mb`; the caller
    caps the address space (`cap_address_space`) once nothing else is loaded."""
    import duckdb

    from ..store import open_run, sql_file_literal, sql_literal

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        run = open_run(path, con)
        # The views are created above, while files can still be opened; the settings below keep
        # them readable (the run directory is allowed) and close everything else.
        # The views name their files glob-escaped (store.sql_file_literal: `s[0]` as `s[[]0]`), and
        # DuckDB checks the name as written, so the escaped spelling of the directory is allowed too.
        allowed = str(path).rstrip("/") + "/"
        allowed_sql = ", ".join(dict.fromkeys([sql_literal(allowed), sql_file_literal(allowed)]))
        con.execute("SELECT 1").fetchall()  # DuckDB's first query loads what every query needs: counted as held, not room
        room = memory_room(memory_limit_mb)
        duckdb_bytes = min(int(room * DUCKDB_SHARE), 1000 ** 3)
        for stmt in (
            "SET python_enable_replacements = false",
            "SET temp_directory = ''",
            "SET enable_progress_bar = false",  # it would write into the CLI's output
            f"SET memory_limit = '{duckdb_bytes // 1000 ** 2}MB'",
            f"SET threads = {THREADS}",
            f"SET allowed_directories = [{allowed_sql}]",
            "SET enable_external_access = false",
            "SET lock_configuration = true",
        ):
            con.execute(stmt)
    except BaseException:
        con.close()
        raise
    return con, run.manifest, room


def _value_bytes(v: Any) -> int:
    """What a fetched value holds, roughly: its text or bytes, 8 per other value."""
    if isinstance(v, (str, bytes, bytearray)):
        return len(v)
    if isinstance(v, (list, tuple)):
        return 8 + sum(_value_bytes(x) for x in v)
    if isinstance(v, dict):
        return 8 + sum(_value_bytes(k) + _value_bytes(x) for k, x in v.items())
    return 8


def fetch_rows(cur, max_rows: int, max_bytes: int) -> tuple[list, bool]:
    """Up to max_rows + 1 rows (one more tells that more existed), fetched a few at a time and
    stopped once they hold more than max_bytes; whether that byte limit cut them."""
    raw: list = []
    held = 0
    batch = 1
    while len(raw) <= max_rows:
        rows = cur.fetchmany(min(batch, max_rows + 1 - len(raw)))
        if not rows:
            break
        for r in rows:
            held += sum(_value_bytes(v) for v in r)
            raw.append(r)
            if held > max_bytes:
                return raw[:-1] if len(raw) > 1 else [], True
        per_row = max(1, held // len(raw))
        batch = max(1, min(1024, (max_bytes - held) // (4 * per_row)))  # a batch is a quarter of what is left, at most
    return raw, False


def run_query(con, sql: str, max_rows: int, timeout_s: float, *, interrupt_after_s: float | None = None,
              memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB, max_fetch_bytes: int = MAX_FETCH_BYTES) -> dict:
    """One checked SELECT with an interrupt timer; never raises for a bad query. `timeout_s` is
    the limit named in the message, `interrupt_after_s` what is left of it (the caller's clock
    started before the request reached this process)."""
    import duckdb

    fired = threading.Event()

    def stop() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(max(0.0, timeout_s if interrupt_after_s is None else interrupt_after_s), stop)
    timer.daemon = True
    timer.start()
    try:
        refused = check_statement(con, sql)
        if refused:
            return {"ok": False, "error": refused}
        # execute() streams: fetching max_rows + 1 rows is how we learn that more existed
        # without computing (or holding) the rest.
        cur = con.execute(sql)
        columns = [d[0] for d in cur.description]
        types = [str(d[1]) for d in cur.description]
        raw, cut_bytes = fetch_rows(cur, max_rows, max_fetch_bytes)
    except duckdb.InterruptException:
        return {"ok": False, "error": interrupted_message(timeout_s)}
    except duckdb.PermissionException as e:
        return {"ok": False, "error": f"refused: only the run's own files can be read here ({one_line(e)})"}
    except (duckdb.OutOfMemoryException, MemoryError):
        return {"ok": False, "error": memory_message(memory_limit_mb)}
    except duckdb.Error as e:
        if fired.is_set():
            return {"ok": False, "error": interrupted_message(timeout_s)}
        if "memory" in str(e).lower() and ("allocat" in str(e).lower() or "out of" in str(e).lower()):
            return {"ok": False, "error": memory_message(memory_limit_mb)}
        return {"ok": False, "error": one_line(e)}
    finally:
        timer.cancel()
    truncated = len(raw) > max_rows or cut_bytes
    note = (f"cut after {len(raw)} rows: the rows fetched reached the sandbox's limit of {max_fetch_bytes // (1024 * 1024)} MB"
            if cut_bytes else None)
    rows = []
    for r in raw[:max_rows]:
        out = []
        for v in r:
            jv, cut = _json_value(v)
            truncated |= cut
            out.append(jv)
        rows.append(out)
    return {"ok": True, "error": None, "columns": columns, "types": types, "rows": rows, "truncated": truncated, "note": note}


def main(argv: list[str]) -> int:
    read_fd, write_fd, path = int(argv[0]), int(argv[1]), argv[2]
    memory_limit_mb = int(argv[3]) if len(argv) > 3 else DEFAULT_MEMORY_LIMIT_MB
    os.dup2(2, 1)  # nothing this process prints may reach the parent's stdout
    requests = Connection(read_fd, writable=False)
    replies = Connection(write_fd, readable=False)
    try:
        con, manifest, room = open_locked(path, memory_limit_mb)
        cap_address_space(room)
    except Exception as e:  # noqa: BLE001 - the parent reports it as one line
        replies.send({"ok": False, "error": one_line(e)})
        return 1
    max_fetch_bytes = min(MAX_FETCH_BYTES, room // 4)
    replies.send({"ok": True, "manifest": manifest})
    while True:
        try:
            req = requests.recv()
        except (EOFError, OSError):
            return 0  # the parent closed the sandbox (or died)
        try:
            reply = run_query(con, req["sql"], req["max_rows"], req["timeout_s"], interrupt_after_s=req.get("interrupt_after_s"),
                              memory_limit_mb=memory_limit_mb, max_fetch_bytes=max_fetch_bytes)
        except MemoryError:
            reply = {"ok": False, "error": memory_message(memory_limit_mb)}
        except Exception as e:  # noqa: BLE001 - an unexpected failure is still one line for the agent
            reply = {"ok": False, "error": one_line(f"{type(e).__name__}: {e}")}
        try:
            replies.send(reply)
        except MemoryError:  # the reply itself did not fit: say so in a reply that does
            replies.send({"ok": False, "error": memory_message(memory_limit_mb)})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
