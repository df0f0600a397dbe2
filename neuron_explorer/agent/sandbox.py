"""The read-only SQL sandbox that agents (and `neuron-explorer query`) run their SQL in.

A `Sandbox` is one DuckDB connection over one run, in a worker process of its own
(`_sandbox_worker`), with the run's views (events, frames, flows, memory, counters, steps, ranks,
devices, schema_fields) created first and the connection locked down afterwards:

- only one statement per call, and only of type SELECT (checked by DuckDB's own parser via
  `extract_statements`, not by a regex) — this is what keeps COPY/ATTACH/CREATE/SET/PRAGMA/
  INSTALL/LOAD/CALL out, and it matters because `allowed_directories` grants write access too;
- file access only inside the run directory (`allowed_directories`, `enable_external_access=false`),
  no extension autoload/autoinstall, no spilling to a temp directory, no Python replacement scans,
  `memory_limit` at most 1 GB and 2 threads, and `lock_configuration=true` so a query cannot undo any of it;
- a memory limit on the worker as a whole (`memory_limit_mb`, default DEFAULT_MEMORY_LIMIT_MB): its
  address space is capped, so a query that builds huge lists or strings, or fetches wide rows, fails
  at the allocation that crosses the limit, with one line naming it (see `_sandbox_worker`);
- a time limit that holds from the moment the call starts, on the caller's side: the SQL text is
  at most MAX_SQL_CHARS (longer is refused before anything is sent), the worker's interrupt timer
  gets what is left of the limit once the text has reached it, and when the worker has not
  answered KILL_GRACE_S after the limit (DuckDB ignores interrupts while it parses, binds and folds
  constants) it is killed, and started again for the next query. A call waiting for another
  query on the same sandbox waits within its own limit too. (Starting a worker, the first time or
  after one was killed, is not counted: START_TIMEOUT_S bounds it);
- a row limit that says when it cut. The limit itself is checked: a positive, finite number of
  seconds up to MAX_TIMEOUT_S; anything else (0, -1, NaN, inf, 1e308, a string) is refused with a
  one-line error, not clamped.

It must not be used for trusted analysis code: Python users keep unrestricted DuckDB through
`neuron_explorer.open_run`. It never writes anything.
"""

from __future__ import annotations

import math
import numbers
import os
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..store import read_manifest, resolve_run
from ._sandbox_worker import (  # noqa: F401
    DEFAULT_MEMORY_LIMIT_MB,
    MAX_CELL_CHARS,
    MAX_MEMORY_LIMIT_MB,
    MEMORY_LIMIT,
    MIN_MEMORY_LIMIT_MB,
    THREADS,
    interrupted_message,
    memory_message,
    one_line,
)

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_ROWS = 1000
MAX_TIMEOUT_S = 3600.0
"""The longest time limit accepted (seconds); longer ones are refused, not clamped."""
KILL_GRACE_S = 1.0
"""How long after the time limit a worker that has not answered (its interrupt went unheard) is killed."""
START_TIMEOUT_S = 120.0
"""How long a worker may take to start and open the run."""
MAX_SQL_CHARS = 1_000_000
"""The longest SQL text accepted (characters); longer is refused in one line, before it is sent to
the worker (300 MB of text took 4-7 s to reach it, past a 1 s limit)."""

VIEWS = ("events", "frames", "flows", "memory", "counters", "steps", "ranks", "devices", "schema_fields")


@dataclass
class QueryResult:
    """The envelope every sandboxed query returns. Keys are only ever added, never renamed.

    ok: the query ran; error: one line saying why not (None when ok); columns/types: names and
    DuckDB types of the result; rows: lists of JSON-ready values; row_count: len(rows);
    truncated: more rows existed than max_rows (or a cell was cut, or the rows fetched reached the
    sandbox's byte limit); elapsed_s: wall time; note: one line saying why rows were cut by bytes (else None).
    """

    ok: bool
    error: str | None = None
    columns: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    truncated: bool = False
    row_count: int = 0
    elapsed_s: float = 0.0
    note: str | None = None

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
            "note": self.note,
        }

    def records(self) -> list[dict]:
        return [dict(zip(self.columns, r)) for r in self.rows]


class SandboxError(Exception):
    """A query the sandbox refuses or that failed; the message is one line for the agent."""


def check_limits(sql: object, max_rows: object, timeout_s: object) -> tuple[int, float]:
    """(max_rows, timeout_s) checked, or SandboxError with one line saying what is wrong."""
    if not isinstance(sql, str):
        raise SandboxError(f"the query must be text (str), got {type(sql).__name__}")
    if len(sql) > MAX_SQL_CHARS:
        raise SandboxError(f"refused: the query is {len(sql):,} characters; the sandbox takes at most {MAX_SQL_CHARS:,}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real):
        raise SandboxError(f"timeout_s must be a number of seconds, got {timeout_s!r}")
    t = float(timeout_s)
    if not (math.isfinite(t) and 0 < t <= MAX_TIMEOUT_S):
        raise SandboxError(f"timeout_s must be more than 0 and at most {MAX_TIMEOUT_S:g} seconds, got {timeout_s!r}")
    if isinstance(max_rows, bool) or not isinstance(max_rows, numbers.Real) or not math.isfinite(float(max_rows)):
        raise SandboxError(f"max_rows must be a whole number, got {max_rows!r}")
    return max(0, int(max_rows)), t


def check_memory_limit(memory_limit_mb: object) -> int:
    """The sandbox's memory limit (MB) checked, or SandboxError with one line saying what is wrong."""
    if isinstance(memory_limit_mb, bool) or not isinstance(memory_limit_mb, numbers.Integral):
        raise SandboxError(f"memory_limit_mb must be a whole number of MB, got {memory_limit_mb!r}")
    if not MIN_MEMORY_LIMIT_MB <= int(memory_limit_mb) <= MAX_MEMORY_LIMIT_MB:
        raise SandboxError(f"memory_limit_mb must be from {MIN_MEMORY_LIMIT_MB} to {MAX_MEMORY_LIMIT_MB} MB, got {memory_limit_mb!r}")
    return int(memory_limit_mb)


_WORKER_MAIN = "import sys; from neuron_explorer.agent._sandbox_worker import main; sys.exit(main(sys.argv[1:]))"


class _Worker:
    """One worker process: the locked-down connection over the run."""

    def __init__(self, path: Path, memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB):
        p2c_r, p2c_w = os.pipe()
        c2p_r, c2p_w = os.pipe()
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])  # importable even when not installed
        env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_MAIN, str(p2c_r), str(c2p_w), str(path), str(memory_limit_mb)],
                pass_fds=(p2c_r, c2p_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env)
        finally:
            os.close(p2c_r)
            os.close(c2p_w)
        self.requests = Connection(p2c_w, readable=False)
        self.replies = Connection(c2p_r, writable=False)
        self._finalizer = weakref.finalize(self, _Worker._stop, self.proc, self.requests, self.replies)
        hello = self._recv(START_TIMEOUT_S)
        if hello is None or not hello.get("ok"):
            self.close()
            why = (hello or {}).get("error") or "the sandbox process did not start"
            raise InputError(path, why)
        self.manifest = hello["manifest"]

    def _recv(self, timeout: float) -> dict | None:
        try:
            if self.replies.poll(timeout):
                return self.replies.recv()
        except (EOFError, OSError):
            pass
        return None

    def ask(self, request: dict, seconds_left) -> dict | None:
        """The worker's reply, or None when it did not answer within `seconds_left()` (asked once the
        request is sent: sending counts) or died (it is then stopped)."""
        try:
            self.requests.send(request)
        except OSError:
            return None
        return self._recv(max(0.0, seconds_left()))

    @staticmethod
    def _stop(proc: subprocess.Popen, *conns: Connection) -> None:
        for c in conns:
            c.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    def close(self) -> None:
        self._finalizer()


class Sandbox:
    """A locked-down, read-only DuckDB connection over one run, in a worker process that is killed
    when a query outlasts its time limit. Thread-safe (queries run one at a time)."""

    def __init__(self, run_dir: Path | str, *, memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB):
        try:
            self.memory_limit_mb = check_memory_limit(memory_limit_mb)
        except SandboxError as e:
            raise InputError(run_dir, str(e)) from None
        self.path = resolve_run(run_dir).resolve()  # a trace is imported into the cache first
        self.manifest = read_manifest(self.path)  # a bad run is a one-line InputError, now
        self._lock = threading.Lock()
        self._closed = False
        self._worker: _Worker | None = _Worker(self.path, self.memory_limit_mb)
        self.manifest = self._worker.manifest

    def query(self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S) -> QueryResult:
        """Run one SELECT; never raises for a bad query (the envelope says what went wrong)."""
        t0 = time.perf_counter()
        try:
            max_rows, timeout_s = check_limits(sql, max_rows, timeout_s)
        except SandboxError as e:
            return QueryResult(ok=False, error=str(e))
        if not self._lock.acquire(timeout=timeout_s):
            return QueryResult(ok=False, error=f"busy: another query on this run held the sandbox for the whole time limit of {timeout_s:g} s",
                               elapsed_s=time.perf_counter() - t0)
        try:
            if self._closed:
                return QueryResult(ok=False, error="the sandbox is closed")
            try:
                if self._worker is None:  # the last one was killed: a fresh one for this query
                    self._worker = _Worker(self.path, self.memory_limit_mb)
                    t0 = time.perf_counter()  # starting it is not the query's time
            except InputError as e:
                return QueryResult(ok=False, error=one_line(e), elapsed_s=time.perf_counter() - t0)
            left = timeout_s - (time.perf_counter() - t0)
            reply = self._worker.ask({"sql": sql, "max_rows": max_rows, "timeout_s": timeout_s, "interrupt_after_s": left},
                                     lambda: timeout_s + KILL_GRACE_S - (time.perf_counter() - t0))
            if reply is None:
                died = self._worker.proc.poll() is not None
                self._worker.close()
                self._worker = None
                error = (f"the query stopped the sandbox process (a crash, or memory past its limit of {self.memory_limit_mb} MB); "
                         "it is started again for the next query" if died else interrupted_message(timeout_s))
                return QueryResult(ok=False, error=error, elapsed_s=time.perf_counter() - t0)
        finally:
            self._lock.release()
        elapsed = time.perf_counter() - t0
        if not reply["ok"]:
            return QueryResult(ok=False, error=reply["error"], elapsed_s=elapsed)
        rows = reply["rows"]
        return QueryResult(ok=True, columns=reply["columns"], types=reply["types"], rows=rows,
                           truncated=reply["truncated"], row_count=len(rows), elapsed_s=elapsed, note=reply.get("note"))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._worker is not None:
                self._worker.close()
                self._worker = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def query(run: Path | str, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S,
          memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB) -> QueryResult:
    """Run one read-only SELECT on a run in the sandbox: the entry point for agent frameworks.

    A bad run directory, or a bad `memory_limit_mb`, raises InputError (the caller's mistake); a
    refused, failing or interrupted query, or a bad `sql`, `max_rows` or `timeout_s`, returns
    `QueryResult(ok=False, error=...)` (the agent's mistake, to retry).
    """
    try:
        check_limits(sql, max_rows, timeout_s)
    except SandboxError as e:  # refused before a worker is started for nothing
        read_manifest(resolve_run(run))  # still a bad run first: that is the caller's error
        return QueryResult(ok=False, error=str(e))
    with Sandbox(run, memory_limit_mb=memory_limit_mb) as box:
        return box.query(sql, max_rows=max_rows, timeout_s=timeout_s)
