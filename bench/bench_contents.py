"""The findings' contents alone (analyzers/contents.py `findings_contents`): the CPU of computing what
is inside every finding of an analysed run, optionally against another checkout's contents.py,
alternating, with the answers checked equal.

    python bench/bench_contents.py RUN [--rounds 5] [--against /tmp/nx-before]

RUN must have been analysed (its analysis/report.json names the findings: their locations and
sample events are what the contents are computed from). The run is opened over every rank, as a
single-rank analysis opens it. `--against DIR` loads DIR's neuron_explorer/analyzers/contents.py
as a module of this tree's package (so only the contents' code differs), and each round runs
both, one after the other. Prints the minimum and median CPU (`time.process_time`: the process's
CPU, DuckDB's threads included) of each and the load average.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--against", help="another checkout: its analyzers/contents.py, timed alternately with this one's")
    a = ap.parse_args(argv)

    from neuron_explorer import open_run
    from neuron_explorer.analyzers import contents

    sides = {"this tree": contents}
    if a.against:
        path = Path(a.against) / "neuron_explorer" / "analyzers" / "contents.py"
        spec = importlib.util.spec_from_file_location("neuron_explorer.analyzers._contents_against", path)
        other = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(other)
        sides = {"against": other, **sides}
    report = Path(a.run) / "analysis" / "report.json"
    if not report.is_file():
        sys.exit(f"bench_contents.py: {report}: no report; analyse the run first (`neuron-explorer analyze {a.run}`)")
    found = json.loads(report.read_text())["findings"]
    spent: dict[str, list[float]] = {name: [] for name in sides}
    load = open("/proc/loadavg").read().split()[0]
    with open_run(a.run) as run:
        for _ in range(a.rounds):
            answers = []
            for name, module in sides.items():
                t = time.process_time()
                answers.append(module.findings_contents(run, found))
                spent[name].append(time.process_time() - t)
            if any(x != answers[0] for x in answers):
                sys.exit("the two trees' contents differ")
    print(f"{len(found)} findings, {a.rounds} rounds; load average {load} -> {open('/proc/loadavg').read().split()[0]}")
    for name, s in spent.items():
        print(f"{name:>10}: min {min(s):.2f} s, median {statistics.median(s):.2f} s CPU")


if __name__ == "__main__":
    main()
