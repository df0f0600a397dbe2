"""The cost of statement lines (collectors/statements.py), side by side in one process.

Two measures, each as `nx.profile(statement_lines=True)` against `statement_lines=False`, with
the same options otherwise (with_stack, record_shapes, profile_memory, with_flops), in interleaved
rounds so that load from other jobs hits both alike; medians of the rounds are reported:

- step: the profiled step time of a small transformer training loop (bench_collect's job), as
  CPU time of the process (torch set to one thread). Target: at most 1.05x.
- tiny op: the cost per torch call on a loop of tiny operators written as Python syntax
  (`y = y * c + d` on 16 elements), where the mode's Python call weighs most: ns added per call.

Usage: python bench/bench_statement_lines.py [--steps 10] [--rounds 7] [--tiny 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import neuron_explorer as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collect import OPTIONS, make_job  # noqa: E402  (the same small transformer)


def profiled_step_s(step, steps: int, statement_lines: bool, out: Path) -> float:
    """Median CPU time of this process for one step inside the profiler (CPU time, not wall
    time: other jobs on a shared machine slow the wall clock of both sides unevenly)."""
    times = []
    with nx.profile(out, overwrite=True, statement_lines=statement_lines, **OPTIONS) as prof:
        for _ in range(steps):
            t0 = time.process_time()
            step()
            times.append(time.process_time() - t0)
            prof.step()
    return statistics.median(times[1:])


def tiny_op_ns(calls: int, statement_lines: bool, out: Path) -> float:
    """Wall time per torch call of a Python loop of tiny syntax operators, inside the profiler."""
    y, c, d = torch.ones(16), torch.full((16,), 0.999), torch.zeros(16)
    with nx.profile(out, overwrite=True, statement_lines=statement_lines, **OPTIONS):
        t0 = time.process_time()
        for _ in range(calls // 2):
            y = y * c + d
        elapsed = time.process_time() - t0
    return elapsed / calls * 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tiny", type=int, default=2000, help="torch calls in the tiny-op loop")
    a = ap.parse_args()
    torch.set_num_threads(1)  # CPU time of one thread is the step's cost, whatever else runs on the machine
    step = make_job()
    for _ in range(3):
        step()  # warm up outside the profiler
    on_s, off_s, on_tiny, off_tiny = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        for r in range(a.rounds):
            for sl in ((True, False) if r % 2 == 0 else (False, True)):
                (on_s if sl else off_s).append(profiled_step_s(step, a.steps, sl, out))
                (on_tiny if sl else off_tiny).append(tiny_op_ns(a.tiny, sl, out))
    on, off = statistics.median(on_s), statistics.median(off_s)
    t_on, t_off = statistics.median(on_tiny), statistics.median(off_tiny)
    print(f"profiled step: statement lines {on * 1e3:.2f} ms, without {off * 1e3:.2f} ms, ratio {on / off:.3f} (target <= 1.05)")
    print(f"tiny op: {t_on:.0f} ns per call with, {t_off:.0f} ns without, +{t_on - t_off:.0f} ns per call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
