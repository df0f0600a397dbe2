"""The program of a child process that analyses some of a run's rank batches for the engine
(batch_processes.py starts it and says why): its job pickled on stdin, its answer pickled on stdout.

    python -m neuron_explorer.analyzers.batch_child

Must not: be imported by the engine's process.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading


def _watch_parent() -> None:
    """Exit when the parent process does (this process is then orphaned: its parent id changes)."""
    import time

    parent = os.getppid()
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(3)


def main() -> None:
    """A child: its job from stdin, the answer to stdout, then exit without tearing down (DuckDB's threads)."""
    job = pickle.loads(sys.stdin.buffer.read())
    threading.Thread(target=_watch_parent, daemon=True).start()
    try:
        from ..no_pandas import without_pandas
        from ..store import open_run
        from . import engine
        from .utilisation import peaks_in_force

        by_id = {r.RULE_ID: r for r in engine.all_rules()}
        rules = [by_id[i] for i in job["rules"]]
        parts: dict | None = {} if job["parts"] else None
        table, override = job["peaks"]
        ranks = [r for b in job["batches"] for r in b]
        with without_pandas(), peaks_in_force(table, override), open_run(job["run"], ranks=ranks) as run:
            # the parts compressed: 128 ranks of 5k events took 95 MB as tables, 12 MB compressed, and
            # pickling, piping and unpickling the tables cost the analysis about 0.9 s more (bench/README)
            results = engine.analyze_batches(run, job["batches"], rules, job["quality"], job["workers"], parts,
                                             duck_threads=job["duck_threads"], compress_parts=True)
        answer = pickle.dumps(("ok", results, parts or {}), protocol=pickle.HIGHEST_PROTOCOL)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the parent stops too
        os._exit(130)
    except Exception as e:  # noqa: BLE001 - the parent analyses these batches itself, and logs why
        answer = pickle.dumps(("error", f"{type(e).__name__}: {e}"))
    sys.stdout.buffer.write(answer)
    sys.stdout.buffer.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
