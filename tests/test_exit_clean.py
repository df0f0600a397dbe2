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
