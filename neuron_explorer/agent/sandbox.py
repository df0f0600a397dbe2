"""The read-only SQL sandbox that agents (and `neuron-explorer query`) run their SQL in.

A `Sandbox` is one DuckDB connection over one run, in a worker process of its own
(`_sandbox_worker`), with the run's views (events, frames, flows, memory, counters, steps, ranks,
devices, schema_fields) created first and the connection locked down afterwards:

- only one statement per call, and only of type SELECT (checked by DuckDB's own parser via
  `extract_statements`, not by a regex) — this is what keeps COPY/ATTACH/CREATE/SET/PRAGMA/
  INSTALL/LOAD/CALL out, and it matters because `allowed_directories` grants write access too;
- file access only inside the run directory (`allowed_directories`, `enable_external_access=false`),
  no extension autoload/autoinstall, no spilling to a temp directory, no Python replacement scans,
  `memory_limit` 1 GB and 2 threads, and `lock_configuration=true` so a query cannot undo any of it;
- a time limit that holds from the moment the call starts: an interrupt timer in the worker stops
  ordinary long queries, and when the worker has not answered shortly after the limit (DuckDB
  ignores interrupts while it parses, binds and folds constants) it is killed, and started again
  for the next query;
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
from ._sandbox_worker import MAX_CELL_CHARS, MEMORY_LIMIT, THREADS, interrupted_message, one_line  # noqa: F401

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_ROWS = 1000
MAX_TIMEOUT_S = 3600.0
"""The longest time limit accepted (seconds); longer ones are refused, not clamped."""
KILL_GRACE_S = 1.0
"""How long after the time limit a worker that has not answered (its interrupt went unheard) is killed."""
START_TIMEOUT_S = 120.0
"""How long a worker may take to start and open the run."""

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


def check_limits(sql: object, max_rows: object, timeout_s: object) -> tuple[int, float]:
    """(max_rows, timeout_s) checked, or SandboxError with one line saying what is wrong."""
    if not isinstance(sql, str):
        raise SandboxError(f"the query must be text (str), got {type(sql).__name__}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real):
        raise SandboxError(f"timeout_s must be a number of seconds, got {timeout_s!r}")
    t = float(timeout_s)
    if not (math.isfinite(t) and 0 < t <= MAX_TIMEOUT_S):
        raise SandboxError(f"timeout_s must be more than 0 and at most {MAX_TIMEOUT_S:g} seconds, got {timeout_s!r}")
    if isinstance(max_rows, bool) or not isinstance(max_rows, numbers.Real) or not math.isfinite(float(max_rows)):
        raise SandboxError(f"max_rows must be a whole number, got {max_rows!r}")
    return max(0, int(max_rows)), t


_WORKER_MAIN = "import sys; from neuron_explorer.agent._sandbox_worker import main; sys.exit(main(sys.argv[1:]))"


class _Worker:
    """One worker process: the locked-down connection over the run."""

    def __init__(self, path: Path):
        p2c_r, p2c_w = os.pipe()
        c2p_r, c2p_w = os.pipe()
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])  # importable even when not installed
        env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_MAIN, str(p2c_r), str(c2p_w), str(path)],
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

    def ask(self, request: dict, deadline_s: float) -> dict | None:
        """The worker's reply, or None when it did not answer in time or died (it is then stopped)."""
        try:
            self.requests.send(request)
        except OSError:
            return None
        return self._recv(deadline_s)

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

    def __init__(self, run_dir: Path | str):
        self.path = resolve_run(run_dir).resolve()  # a trace is imported into the cache first
        self.manifest = read_manifest(self.path)  # a bad run is a one-line InputError, now
        self._lock = threading.Lock()
        self._closed = False
        self._worker: _Worker | None = _Worker(self.path)
        self.manifest = self._worker.manifest

    def query(self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S) -> QueryResult:
        """Run one SELECT; never raises for a bad query (the envelope says what went wrong)."""
        t0 = time.perf_counter()
        try:
            max_rows, timeout_s = check_limits(sql, max_rows, timeout_s)
        except SandboxError as e:
            return QueryResult(ok=False, error=str(e))
        with self._lock:
            if self._closed:
                return QueryResult(ok=False, error="the sandbox is closed")
            try:
                if self._worker is None:  # the last one was killed: a fresh one for this query
                    self._worker = _Worker(self.path)
                    t0 = time.perf_counter()  # starting it is not the query's time
            except InputError as e:
                return QueryResult(ok=False, error=one_line(e), elapsed_s=time.perf_counter() - t0)
            reply = self._worker.ask({"sql": sql, "max_rows": max_rows, "timeout_s": timeout_s},
                                     timeout_s + KILL_GRACE_S)
            if reply is None:
                died = self._worker.proc.poll() is not None
                self._worker.close()
                self._worker = None
                error = ("the query stopped the sandbox process (out of memory or a crash); it is started again for the next query"
                         if died else interrupted_message(timeout_s))
                return QueryResult(ok=False, error=error, elapsed_s=time.perf_counter() - t0)
        elapsed = time.perf_counter() - t0
        if not reply["ok"]:
            return QueryResult(ok=False, error=reply["error"], elapsed_s=elapsed)
        rows = reply["rows"]
        return QueryResult(ok=True, columns=reply["columns"], types=reply["types"], rows=rows,
                           truncated=reply["truncated"], row_count=len(rows), elapsed_s=elapsed)

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


def query(run: Path | str, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S) -> QueryResult:
    """Run one read-only SELECT on a run in the sandbox: the entry point for agent frameworks.

    A bad run directory raises InputError (the caller's mistake); a refused, failing or
    interrupted query, or a bad `sql`, `max_rows` or `timeout_s`, returns
    `QueryResult(ok=False, error=...)` (the agent's mistake, to retry).
    """
    try:
        check_limits(sql, max_rows, timeout_s)
    except SandboxError as e:  # refused before a worker is started for nothing
        read_manifest(resolve_run(run))  # still a bad run first: that is the caller's error
        return QueryResult(ok=False, error=str(e))
    with Sandbox(run) as box:
        return box.query(sql, max_rows=max_rows, timeout_s=timeout_s)
