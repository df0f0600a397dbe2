"""Benchmark: a full `analyze` of a large run — wall time, CPU time and peak memory (DESIGN.md
target: a few seconds), optionally side by side with another checkout of the project.

Make the run first (about 2.2 million events):
    python ../shared/tools/tile_trace.py tests/data/traces/cuda_train_68k_events.json.gz /tmp/big.json 32
    neuron-explorer import /tmp/big.json -o /tmp/runs/big --force
then: python bench/bench_analyze.py /tmp/runs/big [--repeat 3] [--against /tmp/nx-before]

Each repetition runs in a fresh process (`neuron_explorer.analyze(RUN)`, which also writes
RUN/analysis/), so peak RSS is that process's alone. CPU time is the process's user + system
time (all its threads): on a shared machine it moves less with the load than wall time does.
`--against DIR` also runs the analysis of the checkout at DIR (e.g. `git worktree add
/tmp/nx-before 154aefc^`, the tree before the critical path and utilisation analyses),
alternating with this one, and prints the ratios; the load average is printed before and after.

`--trace JSON` (the trace the run was imported from) also imports it, in a fresh process each
repetition, alternating with the analyses: analyze's wall time against the import's, side by side
(issue 38's target: analyze <= import). The import is the CLI's: `neuron-explorer import` tunes the
allocator and freezes the objects made before it (`tune_allocator=True`); the library's default
leaves the process's allocator alone, and peaks 1.5x as high on a 1.5 GB trace. `--path` also
times the critical path alone (every rank's `critical_path.path_of`, fresh process) with the C++
walk and with the Python walk (the reference, NEURON_EXPLORER_NATIVE=0).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import _cli

HERE = Path(__file__).resolve().parents[1]


def _figures(stdout: str) -> list[str]:
    """The fields of the last line of numbers a child printed (before it: what the analysis printed;
    an older tree's DuckDB progress bar, drawn with carriage returns, may come after)."""
    for line in reversed(stdout.replace("\r", "\n").splitlines()):
        fields = line.split()
        try:
            [float(f) for f in fields]
        except ValueError:
            continue
        if fields:
            return fields
    raise ValueError(f"no figures in the child's output: {stdout[-300:]!r}")


def run_once(run_dir: str, tree: Path) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of one analysis by the checkout at `tree`, in a fresh process."""
    code = ("import resource, time; t = time.perf_counter(); import neuron_explorer as nx; "
            f"r = nx.analyze({run_dir!r}); u = resource.getrusage(resource.RUSAGE_SELF); "
            "print(time.perf_counter() - t, u.ru_utime + u.ru_stime, u.ru_maxrss, len(r.findings))")
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = _figures(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=tree).stdout)
    return float(out[0]), float(out[1]), float(out[2]) / 1024  # ru_maxrss is KiB on Linux


def import_once(trace: str, tree: Path, out_dir: str) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of one import of `trace` into `out_dir` by the checkout at `tree`, in a fresh
    process, as `neuron-explorer import` runs it."""
    code = ("import resource, time; t = time.perf_counter(); from neuron_explorer.collectors.chrome_trace import import_traces; "
            f"import_traces({trace!r}, {out_dir!r}, force=True, tune_allocator=True); u = resource.getrusage(resource.RUSAGE_SELF); "
            "print(time.perf_counter() - t, u.ru_utime + u.ru_stime, u.ru_maxrss)")
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = _figures(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=tree).stdout)
    return float(out[0]), float(out[1]), float(out[2]) / 1024


def path_once(run_dir: str, tree: Path, native: bool) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of every rank's critical path (after opening the run), in a fresh process."""
    code = ("import resource, time; from neuron_explorer.store import open_run; from neuron_explorer.analyzers import critical_path as cp; "
            f"run = open_run({run_dir!r}); c0 = resource.getrusage(resource.RUSAGE_SELF); c0 = c0.ru_utime + c0.ru_stime; "
            "t = time.perf_counter(); [cp.path_of(run, r) for (r,) in run.sql('SELECT DISTINCT rank FROM events').fetchall()]; "
            "u = resource.getrusage(resource.RUSAGE_SELF); print(time.perf_counter() - t, u.ru_utime + u.ru_stime - c0, u.ru_maxrss)")
    env = dict(os.environ, PYTHONPATH=str(tree), NEURON_EXPLORER_NATIVE="auto" if native else "0")
    out = _figures(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=tree).stdout)
    return float(out[0]), float(out[1]), float(out[2]) / 1024


def _median(results: list[tuple[float, float, float]], i: int) -> float:
    return statistics.median(r[i] for r in results)


def _line(label: str, results: list[tuple[float, float, float]]) -> str:
    best_wall, best_cpu, peak = min(r[0] for r in results), min(r[1] for r in results), max(r[2] for r in results)
    return (f"{label}: best of {len(results)}: {best_wall:.2f} s wall ({', '.join(f'{r[0]:.2f}' for r in results)}), "
            f"{best_cpu:.2f} s CPU ({', '.join(f'{r[1]:.2f}' for r in results)}), peak RSS {peak:.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", nargs="?", default="/tmp/runs/big")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--against", type=Path, default=None, help="another checkout of the project, run side by side")
    ap.add_argument("--trace", default=None, help="the trace the run was imported from: import it too, side by side")
    ap.add_argument("--path", action="store_true", help="also time the critical path alone, C++ walk and Python walk")
    args = ap.parse_args()
    _cli.run_dir(args.run)
    manifest = json.load(open(os.path.join(args.run, "manifest.json")))
    events = sum(r.get("events", 0) for r in manifest.get("ranks", []))
    print(f"analyze {args.run}: {events:,} events, cpus {os.cpu_count()}, load average before {os.getloadavg()[0]:.2f}")
    trees = [HERE] + ([args.against.resolve()] if args.against else [])
    results: dict[Path, list] = {t: [] for t in trees}
    extra: dict[str, list] = {}
    for _ in range(args.repeat):
        for t in trees:  # alternating, so that both see the same load
            results[t].append(run_once(args.run, t))
        if args.trace:
            extra.setdefault("import (this tree)", []).append(import_once(args.trace, HERE, args.run.rstrip("/") + "-bench-import"))
        if args.path:
            extra.setdefault("critical path, C++ walk (this tree)", []).append(path_once(args.run, HERE, True))
            extra.setdefault("critical path, Python walk (this tree)", []).append(path_once(args.run, HERE, False))
    for t in trees:
        print(_line("this tree" if t == HERE else str(t), results[t]))
    for label, res in extra.items():
        print(_line(label, res))
    if args.trace:
        a, b = results[HERE], extra["import (this tree)"]
        print(f"analyze / import: wall {min(r[0] for r in a) / min(r[0] for r in b):.2f}x, CPU {min(r[1] for r in a) / min(r[1] for r in b):.2f}x "
              f"(best of each); medians: wall {_median(a, 0) / _median(b, 0):.2f}x, CPU {_median(a, 1) / _median(b, 1):.2f}x")
    if args.against:
        a, b = results[HERE], results[trees[1]]
        print(f"ratio this / {trees[1]}: wall {min(r[0] for r in a) / min(r[0] for r in b):.2f}x, "
              f"CPU {min(r[1] for r in a) / min(r[1] for r in b):.2f}x, peak RSS {max(r[2] for r in a) / max(r[2] for r in b):.2f}x")
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
