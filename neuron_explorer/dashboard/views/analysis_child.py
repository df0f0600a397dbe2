"""The dashboard's analysis child process (views/findings._in_child starts it): the run's analysis,
and the whole run's Overview parts from the paths it walked, pickled to the server on stdout.

    python -m neuron_explorer.dashboard.views.analysis_child RUN NICE

Must not: be imported by the server (it is a process of its own: findings and overview both are
what it runs).
"""

from __future__ import annotations

from ..runs import QueryError
from .findings import report_payload


def main(path: str, nice: int) -> None:
    """Lower this process's priority before anything starts a thread (DuckDB's threads inherit it),
    analyse, add the Overview's parts (overview.analysed_parts) and the critical paths walked
    (critical_path.computed_paths), write ("ok", payload) or ("error", exception) pickled to stdout."""
    import os
    import pickle
    import sys
    import threading

    try:
        os.nice(nice)
    except OSError:
        pass

    def orphaned():  # the server is gone when its end of our stdin closes
        sys.stdin.buffer.read()
        os._exit(3)
    threading.Thread(target=orphaned, daemon=True).start()
    try:
        from ...analyzers import analyze
        from ...analyzers import critical_path as cp
        from ...store import open_run
        from .overview import MAX_RANKS, analysed_parts

        payload = report_payload(analyze(path, write=False))
        with open_run(path) as run:  # the whole run's Overview, from the paths the analysis walked (`_in_child`)
            summary = {s["rank"]: s for s in payload["summary"].get("ranks", [])}
            payload["overview_parts"] = analysed_parts(run, summary, sorted(summary)[:MAX_RANKS])
            payload["critical_paths"] = cp.computed_paths(run)
        result = ("ok", payload)
    except Exception as e:  # noqa: BLE001  (passed back to the server, which shows it in the panel)
        try:
            pickle.dumps(e)
            result = ("error", e)
        except Exception:  # noqa: BLE001
            result = ("error", QueryError(f"{type(e).__name__}: {e}"))
    sys.stdout.buffer.write(pickle.dumps(result))
    sys.stdout.buffer.flush()
    os._exit(0)  # no interpreter teardown (DuckDB's threads): the answer is written


if __name__ == "__main__":
    import sys as _sys

    main(_sys.argv[1], int(_sys.argv[2]))
