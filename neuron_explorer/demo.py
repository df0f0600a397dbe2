"""`neuron-explorer demo`: record a small built-in training loop live, analyse it, show the report.

The loop is an ordinary CPU training script, written next to the run (`demo_train.py`) so that
its lines are user code the report and the dashboard's source view can point at, and so that it
doubles as a template. It takes the same path a user's job takes (nx.profile → run directory →
analyze), so the demo is also a smoke test of an installation.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

DEMO_SCRIPT = '''\
"""A small CPU training loop profiled with Neuron Explorer (written by `neuron-explorer demo`)."""
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import neuron_explorer as nx


class Samples(Dataset):
    """Per-sample Python work in __getitem__, as many real datasets do."""

    def __init__(self, n=1024):
        self.x, self.y = torch.randn(n, 256), torch.randint(0, 10, (n,))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return (self.x[i] - self.x[i].mean()) / (self.x[i].std() + 1e-6), self.y[i]


def main(run_dir):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Samples(), batch_size=64, shuffle=True)
    with nx.profile(run_dir, overwrite=True, schedule=nx.schedule(wait=1, warmup=1, active=6, repeat=1)) as prof:
        for step, (x, y) in enumerate(loader):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            print(f"step {step}: loss {loss.item():.3f}", file=sys.stderr)
            prof.step()
            if step == 7:
                break


if __name__ == "__main__":
    main(sys.argv[1])
'''


def train_demo(run_dir: Path | str) -> Path:
    """Write demo_train.py beside run_dir and run it; the run is replaced if it exists."""
    from .collectors.record import quiet_torch_logs

    quiet_torch_logs()  # the demo's output is the loop's and the report's, not torch's log lines
    run_dir = Path(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    script = run_dir.parent / "demo_train.py"
    if not script.exists() or script.read_text() != DEMO_SCRIPT:
        script.write_text(DEMO_SCRIPT)
    saved = sys.argv[:]
    sys.argv = [str(script), str(run_dir)]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = saved
    return run_dir
