"""Benchmark: a full `analyze` of a large run — wall time and peak memory (DESIGN.md target: a few seconds).

Make the run first (about 2.2 million events):
    python ../shared/tools/tile_trace.py tests/data/traces/cuda_train_68k_events.json.gz /tmp/big.json 32
    neuron-explorer import /tmp/big.json -o /tmp/runs/big --force
then: python bench/bench_analyze.py /tmp/runs/big [--repeat 3]

Each repetition runs in a fresh process (`neuron-explorer analyze RUN --json`, which also writes
RUN/analysis/), so peak RSS is that process's alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def run_once(run_dir: str) -> tuple[float, float]:
    code = ("import resource, sys, time; t = time.perf_counter(); import neuron_explorer as nx; "
            f"r = nx.analyze({run_dir!r}); "
            "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, len(r.findings))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1]) / 1024  # ru_maxrss is KiB on Linux


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", nargs="?", default="/tmp/runs/big")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    manifest = json.load(open(os.path.join(args.run, "manifest.json")))
    events = sum(r.get("events", 0) for r in manifest.get("ranks", []))
    results = [run_once(args.run) for _ in range(args.repeat)]
    best = min(r[0] for r in results)
    peak = max(r[1] for r in results)
    print(f"analyze {args.run}: {events:,} events, best of {args.repeat}: {best:.2f} s wall "
          f"(all: {', '.join(f'{r[0]:.2f}' for r in results)}), peak RSS {peak:.0f} MiB, cpus {os.cpu_count()}")


if __name__ == "__main__":
    main()
