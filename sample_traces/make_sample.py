"""Regenerate sample_traces/cpu_train_step.json.gz: a small CPU training loop under torch.profiler.

Recorded with stacks, modules, shapes and memory so that the sample exercises every table of the
run format. Run: python sample_traces/make_sample.py
"""

import gzip
import json
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.encoder(x))


def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def main() -> None:
    torch.manual_seed(0)
    model = TinyNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    out = Path(__file__).with_name("cpu_train_step.json.gz")
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
            record_shapes=True, profile_memory=True, with_stack=True, with_modules=True,
            on_trace_ready=lambda p: p.export_chrome_trace(str(trace)),
        ) as prof:
            for _ in range(5):
                train_step(model, opt, x, y)
                prof.step()
        doc = json.loads(trace.read_text())
        doc["distributedInfo"] = {"rank": 0, "world_size": 1}
        with gzip.open(out, "wt") as f:
            json.dump(doc, f)
    print(f"wrote {out} ({out.stat().st_size} bytes, {len(doc['traceEvents'])} events)")


if __name__ == "__main__":
    main()
