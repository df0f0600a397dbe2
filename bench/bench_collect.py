"""Live collection, side by side in one process: no profiler, plain torch.profiler, neuron_explorer.profile.

A small transformer training loop (2-layer `TransformerEncoder`) runs under each of the three, in
interleaved rounds (so that load from other jobs hits all three alike); the median of the rounds is
reported. Each profiler's time is cut where a user waits for it:

- start: from making the profiler to the first step (`torch.profiler.profile(...)` + `start()`;
  `nx.profile(...)` + `start()`, which checks the run directory and loads the C++ converter); the
  first start is also timed in fresh processes, with `import neuron_explorer` apart, both with
  torch's own Inductor import (its start's `hasattr(torch, "_inductor")`) and with it done before,
  modules loaded from their bytecode cache (as an installed package's are).
- steps: wall time of the training steps inside the profiler (`prof.step()` included).
- stop+write: from the last step to having the file(s) on disk: the profiler's own stop (Kineto's
  post-processing) plus `export_chrome_trace` for torch, plus the conversion and the Parquet write
  for Neuron Explorer; and, for context, export_chrome_trace followed by `neuron-explorer import`
  of that JSON (the other way to get the same run).
- size: the JSON trace vs the run directory.

Both profilers get the same options: CPU activity (and PrivateUse1 with `--device neuron`),
with_stack, record_shapes, profile_memory (with_flops with `--flops`); `nx.profile` also links
statements (its default `statement_lines=True`). torch runs on `--threads` intra-op threads (1 by
default, as in issue 38's measurement).

    python bench/bench_collect.py [--steps 25] [--rounds 5] [--threads 1]
    python bench/bench_collect.py --device neuron   # the PrivateUse1 test backend (tests/neuron_backend.py)

`--device neuron` builds (first time: 1-2 minutes) and registers the test backend of
tests/native_fixture/neuron_backend.cpp and runs a smaller model on it: every operator a CPU
fallback that the backend's Kineto session reports as a device kernel plus a runtime call.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]


def make_job(device: str = "cpu", seed: int = 0):
    torch.manual_seed(seed)
    if device == "cpu":
        layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True, dropout=0.0)
        model = nn.Sequential(nn.Embedding(1000, 128), nn.TransformerEncoder(layer, num_layers=2), nn.Linear(128, 1000))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        tokens = torch.randint(0, 1000, (8, 64))

        def step():
            logits = model(tokens)
            loss = nn.functional.cross_entropy(logits.reshape(-1, 1000), tokens.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step
    # the test backend runs every operator as a CPU fallback: a small MLP with plain operators
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    x = torch.randn(32, 64).to(device)
    y = torch.randn(32, 10).to(device)

    def step():
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


class Clock:
    """Wall and CPU time (`time.process_time`, all threads of the process) of each phase; on a shared
    machine the CPU time is the steadier figure (the job runs on one thread)."""

    def __init__(self):
        self.marks = [(time.perf_counter(), time.process_time())]

    def mark(self) -> None:
        self.marks.append((time.perf_counter(), time.process_time()))

    def phases(self, *names: str) -> dict:
        out = {}
        for i, name in enumerate(names):
            if name:
                (w0, c0), (w1, c1) = self.marks[i], self.marks[i + 1]
                out[name], out[name + "_cpu"] = w1 - w0, c1 - c0
        return out


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_plain(step, steps: int, out: Path, options: dict, import_json: bool) -> dict:
    clock = Clock()
    prof = torch.profiler.profile(**options)
    prof.start()
    clock.mark()
    for _ in range(steps):
        step()
        prof.step()
    clock.mark()
    prof.stop()
    clock.mark()
    prof.export_chrome_trace(str(out))
    clock.mark()
    res = {**clock.phases("start", "loop", "stop", "write"), "size": size_of(out)}
    res["after"], res["after_cpu"] = res["stop"] + res["write"], res["stop_cpu"] + res["write_cpu"]
    if import_json:  # what it takes to get the same queryable run from the JSON: `neuron-explorer import`
        from neuron_explorer.collectors.chrome_trace import import_traces

        import_traces(out, out.with_suffix(".run"), force=True)
        clock.mark()
        res["export_import"] = clock.marks[-1][0] - clock.marks[3][0]
    return res


def run_nx(step, steps: int, out: Path, options: dict) -> dict:
    import neuron_explorer as nx

    clock = Clock()
    prof = nx.profile(out, overwrite=True, **options)
    prof.start()
    clock.mark()
    for _ in range(steps):
        step()
        prof.step()
    clock.mark()
    prof.stop()
    clock.mark()
    timings = prof.recording.timings
    converter = "native" if prof.recording.native is not None else "python"
    res = {**clock.phases("start", "loop", "after"), "convert": timings["convert_s"], "build_write": timings["write_s"],
           "convert_cpu": timings["convert_cpu_s"], "build_write_cpu": timings["write_cpu_s"], "size": size_of(out),
           "events": prof.recording.cycles[0].events.num_rows if prof.recording.cycles else 0, "converter": converter}
    res["stop"] = res["after"] - res["convert"] - res["build_write"]  # torch.profiler's own stop (Kineto), the rest
    res["stop_cpu"] = res["after_cpu"] - res["convert_cpu"] - res["build_write_cpu"]
    return res


def run_none(step, steps: int) -> dict:
    clock = Clock()
    for _ in range(steps):
        step()
    clock.mark()
    return clock.phases("loop")


FIRST_START = """\
import sys, time, tempfile
import torch
if {inductor_apart}:
    import torch._inductor.config  # what torch.profiler's start imports (Dynamo too): timed apart
w0, c0 = time.perf_counter(), time.process_time()
import neuron_explorer as nx
w1, c1 = time.perf_counter(), time.process_time()
prof = {make}
prof.start()
w2, c2 = time.perf_counter(), time.process_time()
prof.stop()
print(w1 - w0, w2 - w1, c1 - c0, c2 - c1)
"""


def first_start(options: dict, repeat: int, inductor_apart: bool = False) -> dict:
    """In a fresh process, as a script meets it: `import neuron_explorer` and the first profiler's
    start (making it and `start()`), wall and CPU seconds, medians. `inductor_apart`: torch._inductor
    imported before the clock starts, so that what remains is each profiler's own start."""
    import subprocess

    acts = ", ".join(f"torch.profiler.ProfilerActivity.{a.name if a.name == 'CPU' else 'PrivateUse1'}" for a in options["activities"])
    kw = ", ".join(f"{k}={v!r}" for k, v in options.items() if k != "activities") + f", activities=[{acts}]"
    makes = {"torch": f"torch.profiler.profile({kw})",
             "nx": f"nx.profile(tempfile.mkdtemp() + '/run', {kw})"}
    out: dict = {k: [] for k in ("import", "torch", "nx", "import_cpu", "torch_cpu", "nx_cpu")}
    # Modules imported from their bytecode cache, as an installed package's are (torch's are): with
    # PYTHONDONTWRITEBYTECODE set (some environments do), every fresh process would compile Neuron
    # Explorer's sources again (~0.1 s of the start) and none of torch's. The cache goes to a
    # folder of its own (PYTHONPYCACHEPREFIX), filled by one run that is not timed.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(REPO), PYTHONPYCACHEPREFIX=str(Path(tempfile.gettempdir()) / "bench_collect_pycache"))
    for i in range(repeat + 1):
        for kind, make in makes.items():
            r = subprocess.run([sys.executable, "-c", FIRST_START.format(make=make, inductor_apart=inductor_apart)],
                               capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
            if r.returncode != 0:
                raise SystemExit(r.stderr)
            if i == 0:
                continue  # (fills the bytecode cache)
            imp, start, imp_cpu, start_cpu = map(float, r.stdout.split()[-4:])
            out[kind].append(start)
            out[kind + "_cpu"].append(start_cpu)
            out["import"].append(imp)
            out["import_cpu"].append(imp_cpu)
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--device", choices=("cpu", "neuron"), default="cpu")
    ap.add_argument("--flops", action="store_true", help="with_flops on both profilers")
    ap.add_argument("--import-json", action="store_true", help="also time `neuron-explorer import` of torch's JSON")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    acts = [torch.profiler.ProfilerActivity.CPU]
    if args.device == "neuron":
        sys.path.insert(0, str(REPO))
        from tests import neuron_backend

        neuron_backend.load().set_mode("full", False)
        acts.append(torch.profiler.ProfilerActivity.PrivateUse1)
    options = dict(activities=acts, with_stack=True, record_shapes=True, profile_memory=True, with_flops=args.flops)
    step = make_job(args.device)
    for _ in range(3):  # warm-up: allocator, lazy init, first-call costs
        step()
    import neuron_explorer  # noqa: F401  (the package's own import is not the profiler's start)

    tmp = Path(tempfile.mkdtemp(prefix="bench_collect_"))
    results: dict[str, list[dict]] = {"none": [], "torch": [], "nx": []}
    load_before = os.getloadavg()
    try:
        for r in range(args.rounds):
            # the order changes every round, so that drifting load does not favour one of them
            order = ["none", "torch", "nx"] if r % 2 == 0 else ["nx", "torch", "none"]
            for kind in order:
                if kind == "none":
                    results["none"].append(run_none(step, args.steps))
                elif kind == "torch":
                    results["torch"].append(run_plain(step, args.steps, tmp / f"trace{r}.json", options, args.import_json))
                else:
                    results["nx"].append(run_nx(step, args.steps, tmp / f"run{r}", options))
                gc.collect()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    starts = first_start(options, 3) if args.device == "cpu" else None
    own_starts = first_start(options, 5, inductor_apart=True) if args.device == "cpu" else None

    def med(kind: str, key: str) -> float:
        return statistics.median(x[key] for x in results[kind])

    def row(label: str, key: str, target: str = "", none: bool = False) -> None:
        for suffix, what in (("_cpu", "CPU"), ("", "wall")):
            n = f"{med('none', key + suffix):>14.3f}" if none else f"{'':>14}"
            t, x = med("torch", key + suffix), med("nx", key + suffix)
            print(f"{label + ', ' + what:30}{n}{t:>16.3f}{x:>12.3f}{x / t if t else float('nan'):>12.2f}  {target if suffix else ''}")

    events = results["nx"][0]["events"]
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {torch.get_num_threads()} torch thread(s), device {args.device}, "
          f"{args.steps} steps x {args.rounds} rounds, {events:,} events per recording (medians), "
          f"{results['nx'][0]['converter']} converter, load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"{'seconds':30}{'no profiler':>14}{'torch.profiler':>16}{'nx.profile':>12}{'nx / torch':>12}  target")
    if starts:
        for label, st in (("first start, fresh process", starts), ("  the same, Inductor apart", own_starts)):
            for suffix, what in (("_cpu", "CPU"), ("", "wall")):
                t, x, imp = st["torch" + suffix], st["nx" + suffix], st["import" + suffix]
                print(f"{label + ', ' + what:30}{'':>14}{t:>16.3f}{x:>12.3f}{x / t:>12.2f}  nx <= 0.050"
                      f"   (+ import neuron_explorer: {imp:.3f})")
    row("start, in process", "start")
    row("steps", "loop", "<= 1.05", none=True)
    print(f"{'  steps / no profiler, CPU':30}{'':>14}{med('torch', 'loop_cpu') / med('none', 'loop_cpu'):>16.2f}"
          f"{med('nx', 'loop_cpu') / med('none', 'loop_cpu'):>12.2f}")
    row("stop+write", "after", "<= 1.00")
    for suffix, what in (("_cpu", "CPU"), ("", "wall")):
        print(f"{'  torch: stop / export, ' + what:30}{'':>14}{med('torch', 'stop' + suffix):>8.3f} / {med('torch', 'write' + suffix):.3f}")
        print(f"{'  nx: stop / convert / write, ' + what:30}{'':>14}{'':>16}{med('nx', 'stop' + suffix):>6.3f} / "
              f"{med('nx', 'convert' + suffix):.3f} / {med('nx', 'build_write' + suffix):.3f}")
    if args.import_json:
        print(f"{'  export+import (torch JSON)':30}{'':>14}{med('torch', 'export_import'):>16.3f}")
    for suffix, what in (("_cpu", "CPU"), ("", "wall")):
        t_all = sum(med("torch", k + suffix) for k in ("start", "loop", "after"))
        x_all = sum(med("nx", k + suffix) for k in ("start", "loop", "after"))
        print(f"{'in all, ' + what:30}{'':>14}{t_all:>16.3f}{x_all:>12.3f}{x_all / t_all:>12.2f}  {'<= 1.10' if suffix else ''}")
    print(f"{'size: JSON / run (MB)':30}{'':>14}{med('torch', 'size') / 1e6:>16.2f}{med('nx', 'size') / 1e6:>12.2f}"
          f"{med('nx', 'size') / med('torch', 'size'):>12.3f}")
    for kind in ("none", "torch", "nx"):
        print(f"rounds, steps CPU (s), {kind}: " + " ".join(f"{x['loop_cpu']:.3f}" for x in results[kind]))
    for kind in ("torch", "nx"):
        print(f"rounds, stop+write CPU (s), {kind}: " + " ".join(f"{x['after_cpu']:.3f}" for x in results[kind]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
