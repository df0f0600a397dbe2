"""A process that exits while the analysis still runs in a background thread exits cleanly.

The dashboard analyses in the background (its findings) and a request may still be running when
the server stops; a thread left inside DuckDB when Python finalises aborts the process with
"terminate called ... exception not rethrown" (exit 134) instead of the exit the user asked for.
store's exit hook interrupts the queries and waits for the analysis threads (store._stop_at_exit).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "traces"

SCRIPT = textwrap.dedent("""
    import sys, threading, time
    from neuron_explorer.analyzers import analyze

    run = sys.argv[1]
    started = threading.Event()
    def work():
        started.set()
        analyze(run, write=False)
    threading.Thread(target=work, name="nx-findings", daemon=True).start()
    started.wait()
    time.sleep(float(sys.argv[2]))
    print("exiting", flush=True)
    sys.exit(3)  # the exit the user asked for, while the analysis runs
""")


@pytest.mark.slow  # tier: eight Python processes
def test_exit_during_background_analysis_keeps_the_exit_code(tmp_path):
    from neuron_explorer.collectors.chrome_trace import import_traces

    run = import_traces(DATA / "cuda_train_68k_events.json.gz", tmp_path / "run").run_dir
    # the analysis of this run takes about 2 s: exits from its first queries to its last rules
    # (before the exit hook, 5 of these 8 ended in an abort)
    for delay in ("0.05", "0.2", "0.5", "0.8", "1.2", "1.6", "2.0", "2.5"):
        p = subprocess.run([sys.executable, "-c", SCRIPT, str(run), delay], capture_output=True, text=True, timeout=300)
        assert "exiting" in p.stdout, p.stderr[-2000:]
        assert p.returncode == 3, (p.returncode, p.stderr[-2000:])
        assert "terminate called" not in p.stderr and "Fatal Python error" not in p.stderr, p.stderr[-2000:]


def test_the_exit_hook_interrupts_a_query_on_a_cursor():
    """Readers of Arrow results query on a cursor of the run's connection (store.cursor): the exit
    hook must stop those queries too, or a thread left in one aborts the process at exit (CI once
    ended 'FATAL: exception not rethrown' when the exit came while the analysis read on a cursor)."""
    import threading

    import duckdb

    from neuron_explorer import store

    cur = store.cursor(store.new_connection())
    got: list = []

    def long_query():
        try:
            cur.sql("SELECT count(*) FROM range(1000000000000) t(i) WHERE i % 7 = 3").fetchall()
            got.append("finished")
        except duckdb.InterruptException as e:
            got.append(e)

    worker = threading.Thread(target=long_query, daemon=True)
    worker.start()
    for _ in range(3000):  # as the exit hook does: interrupt until the thread is back in Python (at most 60 s)
        store._interrupt_all()
        worker.join(0.02)
        if not worker.is_alive():
            break
    assert not worker.is_alive() and len(got) == 1 and isinstance(got[0], duckdb.InterruptException), got


def test_every_cursor_comes_from_store_cursor():
    """A cursor made with `con.cursor()` is out of the exit hook's reach (see above)."""
    package = Path(__file__).parent.parent / "neuron_explorer"
    direct = [f"{p.relative_to(package)}:{i}" for p in package.rglob("*.py") if p.name != "store.py"
              for i, line in enumerate(p.read_text().splitlines(), 1) if ".cursor()" in line and not line.lstrip().startswith("#")]
    assert direct == [], direct


def test_no_new_query_starts_once_the_interpreter_is_exiting(tmp_path, monkeypatch):
    """The exit hook interrupts the queries in flight; an analysis thread must not start another one
    before it gets back to Python and stops (a thread left inside DuckDB as the process ends can crash
    it). Once exiting, a run's queries are refused with InterruptedError, which the analysis stops on."""
    import threading

    from neuron_explorer import open_run, store
    from neuron_explorer.collectors.chrome_trace import import_traces

    run_dir = import_traces(DATA / "cuda_simple_add.json.gz", tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        assert run.sql("SELECT count(*) FROM events").fetchone()[0] > 0
        stopping = threading.Event()
        stopping.set()
        monkeypatch.setattr(store, "_STOPPING", stopping)
        with pytest.raises(InterruptedError):
            run.sql("SELECT count(*) FROM events")
        with pytest.raises(InterruptedError):
            run.query_cursor("SELECT count(*) FROM events")
