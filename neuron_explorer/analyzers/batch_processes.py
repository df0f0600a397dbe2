"""A run's rank batches shared out to processes: this process analyses its share while child
processes (batch_child.py, a program of its own) analyse theirs, each on the cores the others leave.

Threads cannot do this: a batch's work between its queries is Python (the critical paths' tables,
utilisation, the rules' checks), which holds the GIL, so 256 small ranks analysed on two threads
used one core and a bit. The engine shares the batches out (`engine.processes`) when a run has
several of them and enough events to pay a child's start (~0.5 s of CPU).

A child's job is the run's path, its batches, the rules by id, the data-quality notes, the peak
settings in force and whether to keep each rank's output parts; it answers ("ok", results, parts)
or ("error", text) pickled on stdout. A child that fails, for any reason, leaves its batches to
this process, which analyses them as if it were alone (the log says why). A child exits when its
parent does.

Must not: import the engine (it is given `analyze_batches`), decide what is analysed, render or
write files.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType

from ..store import Run

log = logging.getLogger(__name__)

CHILD_MODULE = "neuron_explorer.analyzers.batch_child"
"""The module a child runs (`python -m`)."""
PROCESSES_ENV = "NEURON_EXPLORER_ANALYZE_PROCESSES"
"""The environment variable that caps the processes (1: analyse in this process only)."""

last_share: dict[int, int] = {}
"""The process id that analysed each rank in the last shared analysis of this process (rank ->
pid): which ranks went to a child, for tests and for a bug report."""


def share(batches: list[list[int]], events: dict[int, int], n: int) -> list[list[list[int]]]:
    """`batches` dealt to `n` processes, each batch to the one with the fewest events so far,
    largest batches first (each process's batches then go in the run's order). The first share is
    the calling process's."""
    shares: list[list[list[int]]] = [[] for _ in range(n)]
    load = [0] * n
    for size, batch in sorted(((sum(events.get(r, 0) for r in b), b) for b in batches), key=lambda sb: -sb[0]):
        i = min(range(n), key=lambda j: (load[j], j))
        shares[i].append(batch)
        load[i] += size
    return [sorted(s, key=lambda b: b[0]) for s in shares]


def _child_env() -> dict[str, str]:
    """The environment of a child: this one's, with the package this process runs importable
    (a checkout on no path, a worktree) and no children of its own."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env[PROCESSES_ENV] = "1"
    return env


class _Child:
    """A child process analysing some batches; `result()` waits for its answer."""

    def __init__(self, job: dict):
        self.answer: tuple = ("error", "no answer")
        try:
            self.proc: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, "-m", CHILD_MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=_child_env())
        except (OSError, ValueError) as e:  # no interpreter to start (an embedded one), no processes left
            self.proc, self.thread, self.answer = None, None, ("error", f"could not start: {e}")
            return
        self.thread = threading.Thread(target=self._talk, args=(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL),),
                                       name="nx-batch-child", daemon=True)
        self.thread.start()

    def _talk(self, job: bytes) -> None:
        try:
            out, err = self.proc.communicate(job)
            if self.proc.returncode == 0 and out:
                self.answer = pickle.loads(out)
            elif self.proc.returncode in (130, -2):  # Ctrl-C reached it (the process group): not a failure to make up for
                self.answer = ("interrupted", "Ctrl-C")
            else:
                last = (err or b"").decode(errors="replace").strip().splitlines()
                self.answer = ("error", f"exit status {self.proc.returncode}" + (f": {last[-1]}" if last else ""))
        except Exception as e:  # noqa: BLE001 - the parent analyses these batches itself
            self.answer = ("error", f"{type(e).__name__}: {e}")

    def result(self) -> tuple:
        if self.thread is not None:
            self.thread.join()
        return self.answer

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.thread is not None:
            self.thread.join(timeout=5)


def analyze_shared(run: Run, batches: list[list[int]], rank_rules: list[ModuleType], quality: dict, n_proc: int,
                   n_workers: int, parts: dict | None, events: dict[int, int], analyze_batches,
                   meanwhile=None) -> dict[int, tuple[dict, dict]]:
    """`analyze_batches` (the engine's) of `batches`, shared out to `n_proc` processes (`share`,
    by `events`, each rank's count): this one and `n_proc - 1` children, each with `n_workers`
    threads and its share of DuckDB's. Results (and each rank's output parts, into `parts`) as if
    this process had analysed every batch. `meanwhile`: work of the caller's that this process does
    once its own batches are done, instead of waiting for the children (which start later, and
    send their answer back: 0.3-1 s behind it on the 256-rank job)."""
    from .utilisation import _settings

    cores = os.cpu_count() or 1
    duck = max(1, cores // n_proc)
    dealt = share(batches, events, n_proc)
    settings = _settings()
    children = []
    last_share.clear()
    try:
        for mine in dealt[1:]:
            if mine:
                job = {"run": str(run.path), "batches": mine, "rules": [r.RULE_ID for r in rank_rules], "quality": quality,
                       "workers": n_workers, "duck_threads": duck, "parts": parts is not None,
                       "peaks": (settings.table, settings.override)}
                children.append((mine, _Child(job)))
        out = analyze_batches(run, dealt[0], rank_rules, quality, n_workers, parts, duck_threads=duck)
        last_share.update({r: os.getpid() for r in out})
        if meanwhile is not None and children:
            meanwhile()
        for mine, child in children:
            answer = child.result()
            if answer[0] == "interrupted":
                raise KeyboardInterrupt
            if answer[0] == "ok":
                _, results, kept = answer
                out.update(results)
                if parts is not None:
                    parts.update(kept)
                last_share.update({r: child.proc.pid for r in results})  # (an answer: the child ran)
                continue
            log.warning("a process analysing %d ranks (%s) failed (%s): this process analyses them",
                        sum(len(b) for b in mine), ", ".join(f"{b[0]}-{b[-1]}" if len(b) > 1 else f"{b[0]}" for b in mine), answer[1])
            again = analyze_batches(run, mine, rank_rules, quality, max(1, n_workers * n_proc), parts)
            out.update(again)
            last_share.update({r: os.getpid() for r in again})
        return out
    finally:
        for _, child in children:
            child.stop()
