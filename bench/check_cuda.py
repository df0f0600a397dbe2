"""The live collector on a real GPU: one short check of what the CPU-only test suite cannot see.

Profiles a small CUDA training loop with `neuron_explorer.profile` (with each converter: the C++
one and the Python one) and checks, on the written run, with plain DuckDB:
- kernels were recorded, on a CUDA device and stream;
- every kernel links to its launch (`launch_id` -> a cuda_runtime event), an operator (`op_id`)
  and a source line (`frame_id`), and the forward GEMM kernels link to the line `y = model(x)`
  of this file, the loss kernels to `loss = ...`;
- the Python converter's run links every kernel the same way.

Usage (on a machine with a CUDA GPU): python bench/check_cuda.py [--out /tmp/nx_cuda_check]
Prints one JSON object; exit code 0 when every check passes, 1 when one fails, 2 without CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import torch
from torch import nn

import neuron_explorer as nx
from neuron_explorer.collectors import native

HERE = Path(__file__).resolve()


def train(run_dir: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device="cuda")
    with nx.profile(run_dir, overwrite=True, schedule=nx.schedule(wait=1, warmup=1, active=3)) as prof:
        for _ in range(6):
            y = model(x)  # FORWARD
            loss = y.pow(2).mean()  # LOSS
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()
    torch.cuda.synchronize()


def line_of(marker: str) -> int:
    return next(i for i, t in enumerate(HERE.read_text().splitlines(), 1) if t.rstrip().endswith(f"# {marker}"))


def summarise(run_dir: Path) -> dict:
    with nx.open_run(run_dir) as run:
        q = lambda sql: run.sql(sql).fetchall()  # noqa: E731
        (kernels, devices, with_launch, launch_is_runtime, with_op, with_frame), = q("""
            SELECT count(*), count(DISTINCT k.device), count(k.launch_id), count(*) FILTER (WHERE l.kind = 'runtime'),
                   count(k.op_id), count(k.frame_id)
            FROM events k LEFT JOIN events l ON l.event_id = k.launch_id WHERE k.kind = 'kernel'""")
        lines = dict(q(f"""
            SELECT f.line, count(*) FROM events k JOIN frames f ON f.frame_id = k.frame_id
            WHERE k.kind = 'kernel' AND f.file = '{HERE}' GROUP BY f.line"""))
        manifest = json.loads((run_dir / "manifest.json").read_text())
    return {"converter": manifest.get("converter"), "kernels": kernels, "devices": devices, "with_launch": with_launch,
            "launch_is_runtime": launch_is_runtime, "with_op": with_op, "with_frame": with_frame,
            "kernels_per_line": {str(k): v for k, v in sorted(lines.items())}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/nx_cuda_check"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "no CUDA device visible to torch"}))
        return 2
    results = {}
    for converter in ("require", "0"):
        os.environ["NEURON_EXPLORER_NATIVE"] = converter
        native._state.clear()  # noqa: SLF001 (choose the converter again)
        run_dir = args.out / f"native={converter}"
        shutil.rmtree(run_dir, ignore_errors=True)
        train(run_dir)
        results[converter] = summarise(run_dir)
    fwd, loss = str(line_of("FORWARD")), str(line_of("LOSS"))
    checks = {"native converter used": results["require"]["converter"] == "native",
              "python converter used": results["0"]["converter"] == "python"}
    for converter, s in (("native", results["require"]), ("python", results["0"])):
        checks.update({
            f"{converter}: kernels recorded": s["kernels"] > 0 and s["devices"] >= 1,
            f"{converter}: every kernel has its launch": s["with_launch"] == s["kernels"] == s["launch_is_runtime"],
            f"{converter}: every kernel has an operator": s["with_op"] == s["kernels"],
            f"{converter}: every kernel has a source line": s["with_frame"] == s["kernels"],
            f"{converter}: forward kernels on `y = model(x)`": s["kernels_per_line"].get(fwd, 0) > 0,
            f"{converter}: loss kernels on `loss = ...`": s["kernels_per_line"].get(loss, 0) > 0,
        })
    ok = all(checks.values())
    print(json.dumps({"ok": ok, "checks": checks, "runs": results, "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(0)}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
