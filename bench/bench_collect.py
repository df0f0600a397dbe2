"""Live collection, side by side in one process: no profiler, plain torch.profiler, neuron_explorer.profile.

A small transformer training loop on the CPU runs under each of the three, in interleaved rounds
(so that load from other jobs hits all three alike); the median of the rounds is reported.

- loop: wall time of the training loop inside the profiler (from entering it to the last step).
- write: plain torch.profiler's `export_chrome_trace` vs Neuron Explorer turning the in-memory
  results into a run (convert + normalise + write Parquet); and, for context, export_chrome_trace
  followed by `neuron-explorer import` of that JSON (the other way to get the same run).
- after loop: everything between the last step and having the file(s) on disk (the profiler's
  own stop included), for both.
- size: the JSON trace vs the run directory.

Both profilers get the same options: CPU activity, with_stack, record_shapes, profile_memory,
with_flops. Usage: python bench/bench_collect.py [--steps 20] [--rounds 3]
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

import neuron_explorer as nx
from neuron_explorer.collectors.chrome_trace import import_traces

OPTIONS = dict(with_stack=True, record_shapes=True, profile_memory=True, with_flops=True)


def make_job(seed: int = 0):
    torch.manual_seed(seed)
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


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_plain(step, steps: int, out: Path) -> dict:
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], **OPTIONS) as prof:
        for _ in range(steps):
            step()
            prof.step()
        t1 = time.perf_counter()
    t2 = time.perf_counter()
    prof.export_chrome_trace(str(out))
    t3 = time.perf_counter()
    # what it takes to get the same queryable run from the JSON: `neuron-explorer import`
    import_traces(out, out.with_suffix(".run"), force=True)
    t4 = time.perf_counter()
    return {"loop": t1 - t0, "write": t3 - t2, "after": t3 - t1, "size": size_of(out), "export_import": t4 - t2}


def run_nx(step, steps: int, out: Path) -> dict:
    t0 = time.perf_counter()
    with nx.profile(out, activities=[torch.profiler.ProfilerActivity.CPU], overwrite=True, **OPTIONS) as prof:
        for _ in range(steps):
            step()
            prof.step()
        t1 = time.perf_counter()
    t3 = time.perf_counter()
    timings = prof.recording.timings
    converter = "native" if prof.recording.native is not None else "python"
    return {"loop": t1 - t0, "write": timings["convert_s"] + timings["write_s"], "convert": timings["convert_s"],
            "build_write": timings["write_s"], "after": t3 - t1, "size": size_of(out),
            "events": prof.recording.cycles[0].events.num_rows if prof.recording.cycles else 0, "converter": converter}


def run_none(step, steps: int) -> dict:
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return {"loop": time.perf_counter() - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    step = make_job()
    for _ in range(3):  # warm-up: allocator, lazy init, first-call costs
        step()
    tmp = Path(tempfile.mkdtemp(prefix="bench_collect_"))
    results: dict[str, list[dict]] = {"none": [], "torch": [], "nx": []}
    try:
        for r in range(args.rounds):
            # the order changes every round, so that drifting load does not favour one of them
            order = ["none", "torch", "nx"] if r % 2 == 0 else ["nx", "torch", "none"]
            for kind in order:
                if kind == "none":
                    results["none"].append(run_none(step, args.steps))
                elif kind == "torch":
                    results["torch"].append(run_plain(step, args.steps, tmp / f"trace{r}.json"))
                else:
                    results["nx"].append(run_nx(step, args.steps, tmp / f"run{r}"))
                gc.collect()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(kind: str, key: str) -> float:
        return statistics.median(x[key] for x in results[kind])

    events = results["nx"][0]["events"]
    loop_ratio = med("nx", "loop") / med("torch", "loop")
    write_ratio = med("nx", "write") / med("torch", "write")
    size_ratio = med("nx", "size") / med("torch", "size")
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {args.steps} steps x {args.rounds} rounds, "
          f"{events:,} events per recording (medians), {results['nx'][0]['converter']} converter")
    print(f"{'':28}{'no profiler':>14}{'torch.profiler':>16}{'nx.profile':>12}{'nx / torch':>12}  target")
    print(f"{'loop (s)':28}{med('none', 'loop'):>14.3f}{med('torch', 'loop'):>16.3f}{med('nx', 'loop'):>12.3f}{loop_ratio:>12.2f}  <= 1.10")
    print(f"{'write: export / run (s)':28}{'':>14}{med('torch', 'write'):>16.3f}{med('nx', 'write'):>12.3f}{write_ratio:>12.2f}  <= 1.00")
    print(f"{'  of which convert / write':28}{'':>14}{'':>16}{med('nx', 'convert'):>6.3f} / {med('nx', 'build_write'):.3f}")
    print(f"{'write: export+import / run':28}{'':>14}{med('torch', 'export_import'):>16.3f}{med('nx', 'write'):>12.3f}"
          f"{med('nx', 'write') / med('torch', 'export_import'):>12.2f}")
    print(f"{'after loop, total (s)':28}{'':>14}{med('torch', 'after'):>16.3f}{med('nx', 'after'):>12.3f}"
          f"{med('nx', 'after') / med('torch', 'after'):>12.2f}")
    print(f"{'size: JSON / run (MB)':28}{'':>14}{med('torch', 'size') / 1e6:>16.2f}{med('nx', 'size') / 1e6:>12.2f}{size_ratio:>12.3f}  <= 0.20")
    for kind in ("none", "torch", "nx"):
        print(f"rounds, loop (s), {kind}: " + " ".join(f"{x['loop']:.3f}" for x in results[kind]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
