"""Benchmark: error rates of `neuron-explorer diff` on real recordings (issue 19).

Records pairs of runs of a small training loop with `neuron-explorer record` (a fresh process per
recording, as a CI job does) and counts the step-time verdicts:
- same code: both sides run the same script; every "slower" verdict is a false alarm
  (target: at most 5% of pairs);
- planted regression: the test side runs 1.2 x BLOCKS forward/backward blocks per step instead of
  BLOCKS, +20% of the block work (target: "slower" in at least 95% of pairs).
The two recordings of a pair run side by side: both processes start together, build the model,
say they are ready, and start their loops when both are (one thread each, on the 2-core machine),
so the load other work puts on the shared machine falls on both sides alike; the side that
finishes first keeps computing (after its last optimizer.step(), in the partial step that diff
leaves out) until the other is done, because each side's speed depends on what runs beside it.
Recorded one after the other, two runs of the same code here differ by -30% to +90% in step time
whenever other jobs come and go: a real difference between the runs, which no statistic on them
can call noise.

    python bench/bench_diff_errors.py --pairs 20 [--steps 30] [--runs K] [--alternate] [--out /tmp/diff-errors] [--reuse]

With --runs K each comparison is K recordings per side (run sets, docs/COMPARE.md): K side-by-side
pairs recorded one after another into {group}-{i}-base/1..K and {group}-{i}-test/1..K, judged by
`diff` on the two folders: their recordings were made in pairs, so `diff` pairs them (paired t on
the ratios, docs/COMPARE.md "Recordings made in pairs").

With --alternate the two sides of a pair are recorded one after the other, each alone on the
machine (ABBA order across pairs), as the docs tell a CI job to do: two processes side by side on
2 CPUs interfere, and each one's speed as a whole then varies by 5-40% (measured: same-code pairs
18.1 vs 21.3 ms recorded side by side; 18.5-19.3 ms for 5 recordings made alone one after another).

Prints one line per pair and a summary, and writes summary.json under --out. Not a test: the
rates are measured, never asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

BLOCKS = 10
"""Forward/backward blocks per step in the base; the planted regression adds two (+20% of them)."""

SCRIPT = """\
import sys
import time
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
from pathlib import Path

blocks, steps, barrier = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(128, 256)
(barrier / f"ready-{blocks}-{time.time_ns()}").touch()  # both sides of a pair start their loops together
give_up = time.monotonic() + 300
while not (barrier / "go").exists() and time.monotonic() < give_up:
    time.sleep(0.001)
for _ in range(steps):
    opt.zero_grad()
    for _ in range(blocks):
        loss = model(x).square().mean()
        loss.backward()
    opt.step()
# keep the other side's CPU as busy as it was until it is done too (after the last optimizer.step(),
# so in the partial last step, which diff leaves out)
(barrier / f"done-{blocks}-{time.time_ns()}").touch()
while len(list(barrier.glob("done-*"))) < 2 and time.monotonic() < give_up:
    model(x).square().mean().backward()
"""


def _record_cmd(script: Path, out: Path, blocks: int, steps: int, barrier: Path) -> list[str]:
    """`neuron-explorer record` of the training loop into `out`."""
    return [sys.executable, "-m", "neuron_explorer", "record", "-o", str(out), "--force", str(script), str(blocks), str(steps),
            str(barrier)]


def record_pair(script: Path, sides: list[tuple[Path, int]], steps: int) -> None:
    """Record both sides at once with `neuron-explorer record`; their loops start when both are ready."""
    barrier = script.parent / "barrier"
    shutil.rmtree(barrier, ignore_errors=True)
    barrier.mkdir()
    procs = []
    for out, blocks in sides:
        cmd = _record_cmd(script, out, blocks, steps, barrier)
        procs.append((cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=script.parent)))
    while len(list(barrier.glob("ready-*"))) < len(procs):
        if any(p.poll() is not None for _, p in procs):
            break  # one failed before its loop: reported below
        time.sleep(0.005)
    (barrier / "go").touch()
    for cmd, p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"recording failed: {' '.join(cmd)}\n{err[-2000:]}")


def record_alternating(script: Path, sides: list[tuple[Path, int]], steps: int) -> None:
    """Record the sides one after the other, alone on the machine (--alternate): what the docs
    tell a CI job to do (docs/COMPARE.md "Recordings made in pairs")."""
    barrier = script.parent / "barrier"
    for out, blocks in sides:
        shutil.rmtree(barrier, ignore_errors=True)
        barrier.mkdir()
        for name in ("go", "done-a", "done-b"):  # no partner to wait for, before or after the loop
            (barrier / name).touch()
        cmd = _record_cmd(script, out, blocks, steps, barrier)
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=script.parent)
        if p.returncode != 0:
            raise SystemExit(f"recording failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")


def upper_95(k: int, n: int) -> float:
    """One-sided 95% upper bound on a rate seen k times in n (Clopper-Pearson, by bisection)."""
    if k >= n:
        return 1.0

    def tail(p: float) -> float:  # P(X <= k) for X ~ Binomial(n, p)
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))

    lo, hi = k / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail(mid) > 0.05 else (lo, mid)
    return hi


def lower_95(k: int, n: int) -> float:
    return 1.0 - upper_95(n - k, n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=20, help="pairs per group (same code, planted regression)")
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps per recording")
    ap.add_argument("--out", type=Path, default=Path("/tmp/diff-errors"))
    ap.add_argument("--reuse", action="store_true", help="judge the recordings already in --out again, recording nothing")
    ap.add_argument("--runs", type=int, default=1, help="recordings per side of each comparison (run sets)")
    ap.add_argument("--alternate", action="store_true",
                    help="record the two sides of a pair one after the other (ABBA...), each alone, instead of side by side")
    ap.add_argument("--groups", default="same,planted",
                    help="the order of the two groups (planted,same: detection first, when the time may run out)")
    args = ap.parse_args()

    from neuron_explorer.analyzers.diff import compare

    if not args.reuse:
        shutil.rmtree(args.out, ignore_errors=True)
        args.out.mkdir(parents=True)
    script = args.out / "train.py"
    script.write_text(SCRIPT)
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    results: dict[str, list[dict]] = {"same": [], "planted": []}
    blocks_of = {"same": BLOCKS, "planted": BLOCKS * 6 // 5}
    groups = args.groups.split(",")
    if sorted(groups) != ["planted", "same"]:
        ap.error("--groups takes same and planted, in either order")
    for group, test_blocks in ((g, blocks_of[g]) for g in groups):
        for i in range(args.pairs):
            base, test = args.out / f"{group}-{i}-base", args.out / f"{group}-{i}-test"
            for j in range(1, args.runs + 1):
                b, t = (base, test) if args.runs == 1 else (base / str(j), test / str(j))
                sides = [(b, BLOCKS), (t, test_blocks)]
                if not args.reuse:
                    (record_alternating if args.alternate else record_pair)(script, sides if (i + j) % 2 == 1 else sides[::-1], args.steps)
            d = compare(base, test, detect_pct=5)
            s = d.step_time
            row = {"pair": i, "verdict": s.verdict, "reason": d.reason, "delta_pct": s.delta_pct, "p_value": s.p_value, "test": s.test_name,
                   "effect_size": s.effect_size, "base_used": len(s.steps["base"]["used"]), "test_used": len(s.steps["test"]["used"]),
                   "base_left_out": [x["step"] for x in s.steps["base"]["left_out"]],
                   "set_aside": {role: sum(bool(r.get("set_aside")) for r in s.runs.get(role, [])) for role in ("base", "test")},
                   # more operator calls per step (docs/COMPARE.md "The work per step"): a count the host's speed does not move
                   "more_work": bool(s.work and s.work["changed"] and s.work["test_median"] > s.work["base_median"]),
                   # what the verdict stands on (docs/COMPARE.md): the step times, or the work priced at the base's time per call
                   "basis": s.basis, "estimate_pct": s.estimate_pct if math.isfinite(s.estimate_pct) else None,
                   "priced_work_pct": ((s.work or {}).get("cost") or {}).get("delta_pct")}
            results[group].append(row)
            on = f" (on the work: {s.estimate_pct:+.1f}%)" if s.basis == "work" else ""
            print(f"{group:8s} pair {i:2d}: {s.verdict + on:40s} {s.delta_pct:+6.1f}%  p={s.p_value:.2g} {s.test_name:15s} "
                  f"steps used {row['base_used']}/{row['test_used']}, base left out {row['base_left_out']}, recordings set aside "
                  f"{row['set_aside']['base']}/{row['set_aside']['test']}", flush=True)
    elapsed = time.perf_counter() - t0

    summary = {"pairs": args.pairs, "runs_per_side": args.runs, "alternate": args.alternate, "steps_per_recording": args.steps, "blocks": BLOCKS, "seconds": round(elapsed, 1),
               "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "cpus": os.cpu_count()}
    for group, rows in results.items():
        verdicts = Counter(r["verdict"] for r in rows)
        summary[group] = {"verdicts": dict(verdicts), "median_delta_pct": statistics.median(r["delta_pct"] for r in rows),
                          "tests": dict(Counter(r["test"] for r in rows)), "reasons": dict(Counter(r.get("reason") for r in rows)), "more_work": sum(r["more_work"] for r in rows),
                          "slower_on_the_work": sum(r["verdict"] == "slower" and r["basis"] == "work" for r in rows), "rows": rows}
    n = args.pairs
    false_slower = summary["same"]["verdicts"].get("slower", 0)
    detected = summary["planted"]["verdicts"].get("slower", 0)
    summary["false_slower_rate"] = false_slower / n
    summary["false_slower_upper_95"] = upper_95(false_slower, n)
    summary["detection_rate"] = detected / n
    summary["detection_lower_95"] = lower_95(detected, n)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\nsame code:         false 'slower' {false_slower}/{n} = {false_slower / n:.0%} "
          f"(95% upper bound {summary['false_slower_upper_95']:.0%}), verdicts {dict(Counter(r['verdict'] for r in results['same']))}, "
          f"median change {summary['same']['median_delta_pct']:+.1f}%; more operator calls per step in {summary['same']['more_work']}/{n}; "
          f"'slower' on the work in {summary['same']['slower_on_the_work']}")
    print(f"planted regression: 'slower' {detected}/{n} = {detected / n:.0%} "
          f"(95% lower bound {summary['detection_lower_95']:.0%}), verdicts {dict(Counter(r['verdict'] for r in results['planted']))}, "
          f"median change {summary['planted']['median_delta_pct']:+.1f}%; more operator calls per step in {summary['planted']['more_work']}/{n}; "
          f"'slower' on the work in {summary['planted']['slower_on_the_work']}")
    print(f"{2 * 2 * n * args.runs} recordings in {elapsed:.0f} s on {os.cpu_count()} CPUs, load average (1 min) {load_before[0]:.1f} before, "
          f"{summary['loadavg_after'][0]:.1f} after; details in {args.out / 'summary.json'}")


if __name__ == "__main__":
    main()
