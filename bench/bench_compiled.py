"""Profiling a torch.compile'd model: no profiler, plain torch.profiler, neuron_explorer.profile (issue 39).

The model is bench/compiled_mlp.py's MLP (torch.compile, default Inductor backend, CPU). Each
(profiler, case) runs in a fresh process (what Dynamo and Inductor compiled and cached is
process-wide), in interleaved rounds; medians of the rounds. Two cases:

- `before`: the model is compiled in a warm-up step before the profiler is made (the advice of
  the compile-time finding): the profilers record the compiled graphs as torch made them.
- `wait`: the profiler is started with a schedule that waits one step (wait=1, warmup=0) and the
  model compiles in that step: under nx.profile with its settings (Inductor's kernel ranges and
  provenance on, Inductor's and AOT autograd's caches off, the compile untraced), under
  torch.profiler as torch compiles it. The steps then run graphs compiled with those settings.

Per case and profiler: the first step (the compile; `before`: outside any profiler), the `--steps`
profiled steps (`prof.step()` included), and stop+write: the profiler's stop plus, for torch,
`export_chrome_trace`, for Neuron Explorer the conversion and the Parquet write. CPU time of the
process (`time.process_time`) and wall time; both profilers get CPU activity, with_stack,
record_shapes and profile_memory; torch runs on one intra-op thread.

    python bench/bench_compiled.py [--steps 200] [--rounds 3] [--cases before,wait]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import help_if_asked  # noqa: E402

ONE = """\
import json, sys, time
sys.path.insert(0, {bench!r})
import torch
torch.set_num_threads(1)
from compiled_mlp import make_step

kind, case, steps, out = {kind!r}, {case!r}, {steps}, {out!r}
step = make_step()
options = dict(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True, record_shapes=True, profile_memory=True)
marks = [(time.perf_counter(), time.process_time())]
def mark():
    marks.append((time.perf_counter(), time.process_time()))
prof = None
if case == "before":
    step()  # the compile, before any profiler
if kind != "none":
    sched = dict(schedule=torch.profiler.schedule(wait=1, warmup=0, active=steps + 10)) if case == "wait" else {{}}
    if kind == "torch":
        prof = torch.profiler.profile(**options, **sched)
    else:
        import neuron_explorer as nx
        if case == "wait":
            sched = dict(schedule=nx.schedule(wait=1, warmup=0, active=steps + 10))
        prof = nx.profile(out, overwrite=True, **options, **sched)
    prof.start()
if case == "wait":
    step()  # the compile, in the step the schedule waits through
    if prof is not None:
        prof.step()
mark()
for _ in range(steps):
    step()
    if prof is not None:
        prof.step()
mark()
if prof is not None:
    prof.stop()
    if kind == "torch":
        prof.export_chrome_trace(out)
mark()
names = ("compile", "steps", "stop_write")  # compile: the first step (and the profiler's start)
res = {{n: marks[i + 1][0] - marks[i][0] for i, n in enumerate(names)}}
res.update({{n + "_cpu": marks[i + 1][1] - marks[i][1] for i, n in enumerate(names)}})
if kind == "nx" and prof.recording.cycles:
    res["events"] = sum(c.events.num_rows for c in prof.recording.cycles)
    res["convert"], res["write"] = prof.recording.timings["convert_s"], prof.recording.timings["write_s"]  # wall, in stop_write
print("RESULT " + json.dumps(res))
"""


def run_one(kind: str, case: str, steps: int, workdir: Path) -> dict:
    out = str(workdir / (f"{kind}-{case}.json" if kind == "torch" else f"{kind}-{case}.run"))
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-c", ONE.format(bench=str(REPO / "bench"), kind=kind, case=case, steps=steps, out=out)],
                       capture_output=True, text=True, env=env, cwd=workdir)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if r.returncode != 0 or line is None:
        raise SystemExit(f"{kind}/{case} failed:\n{r.stderr[-3000:]}")
    res = json.loads(line[len("RESULT "):])
    p = Path(out)
    res["size"] = p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0
    return res


def main() -> None:
    help_if_asked(__doc__)
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default="before,wait")
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    kinds = ["none", "torch", "nx"]
    got: dict = {(k, c): [] for k in kinds for c in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            order = kinds if rnd % 2 == 0 else kinds[::-1]
            for case in cases:
                for kind in order:
                    res = run_one(kind, case, args.steps, Path(tmp))
                    got[(kind, case)].append(res)
                    print(f"round {rnd + 1} {case:6} {kind:5} " + " ".join(
                        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in res.items()), flush=True)
    print(f"\nmedians of {args.rounds} rounds, {args.steps} steps, load average {os.getloadavg()[0]:.2f} at the end")
    for case in cases:
        med = {k: {f: statistics.median(r[f] for r in got[(k, case)]) for f in got[(k, case)][0]} for k in kinds}
        print(f"\n{case}: | | no profiler | torch.profiler | nx.profile | nx / torch |")
        for field in ("compile_cpu", "steps_cpu", "stop_write_cpu", "compile", "steps", "stop_write"):
            n, t, x = med["none"][field], med["torch"][field], med["nx"][field]
            ratio = f"{x / t:.2f}" if t else "-"
            print(f"| {field} | {n:.3f} | {t:.3f} ({t / n:.2f}x bare) | {x:.3f} ({x / n:.2f}x bare) | {ratio} |" if n > 0.0005 and
                  field.startswith(("steps", "compile")) else f"| {field} | {n:.3f} | {t:.3f} | {x:.3f} | {ratio} |")
        print(f"| size | | {med['torch']['size'] / 1e6:.2f} MB | {med['nx']['size'] / 1e6:.2f} MB | "
              f"{med['nx']['size'] / med['torch']['size']:.3f} |" + (f" events (nx) {med['nx'].get('events', 0):,.0f}"))
        print(f"nx stop_write (wall): conversion {med['nx'].get('convert', 0):.3f} s, build and Parquet write {med['nx'].get('write', 0):.3f} s, "
              f"the rest torch's stop")


if __name__ == "__main__":
    main()
