"""Where one `analyze` spends its CPU, by phase: a `time.process_time()` wrapper (the process's CPU,
DuckDB's threads included) around the summary's parts, the screens, the heaviest rules, the
findings' contents and the outputs. One run, in this process; the tree measured is the one on
PYTHONPATH, so two trees compare as

    PYTHONPATH=/tmp/nx-before python bench/bench_analyze_phases.py RUN
    PYTHONPATH=. python bench/bench_analyze_phases.py RUN

The phases nest in the analysis only where named so (the summary's parts are inside nothing else
here), and what is not wrapped (the views, the other rules) is the rest of `analyze`.
"""

from __future__ import annotations

import resource
import time


def main(run_dir: str) -> None:
    t0 = time.process_time()
    import neuron_explorer as nx
    from neuron_explorer.analyzers import engine, outputs, summary
    from neuron_explorer.analyzers.rules import critical_path as cp_rule
    from neuron_explorer.analyzers.rules import device_idle, host_sync

    t_import = time.process_time() - t0
    spent: dict[str, float] = {}

    def wrap(mod, name: str, label: str) -> None:
        f = getattr(mod, name)

        def timed(*a, **k):
            t = time.process_time()
            try:
                return f(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - t
        setattr(mod, name, timed)

    wrap(summary, "rank_summaries", "summary, set-based (rank_summaries)")
    wrap(summary, "_bound", "summary: critical path and bound")
    wrap(summary, "_utilisation", "summary: utilisation")
    wrap(summary, "source_lines", "summary: source lines")
    wrap(engine, "screen", "screens")
    wrap(cp_rule, "check", "rule critical-path")
    wrap(host_sync, "check", "rule host-sync")
    wrap(device_idle, "check", "rule device-idle")
    wrap(engine, "attach_contents", "findings' contents")
    wrap(outputs, "write_outputs", "outputs")
    t = time.process_time()
    nx.analyze(run_dir)
    total = time.process_time() - t
    u = resource.getrusage(resource.RUSAGE_SELF)
    print(f"imports {t_import:.2f} s, analyze {total:.2f} s, process {u.ru_utime + u.ru_stime:.2f} s CPU; "
          f"load average {open('/proc/loadavg').read().split()[0]}")
    for label, s in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"{s:6.2f} s  {label}")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run directory (what `neuron-explorer import` or `record` wrote)")
    main(ap.parse_args().run)
