"""Planted bottlenecks: real CPU workloads recorded with the live collector, one known bottleneck each.

Each workload marks the line that causes its bottleneck with `# PLANTED`; the top finding of
`analyze` must name the right rule and that line.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import neuron_explorer as nx

from .conftest import workload_env

pytestmark = pytest.mark.slow  # tier: spawns torch.distributed processes

HEADER = "import os, sys, time, torch\nimport neuron_explorer as nx\n"

WORKLOADS = {
    "slow_dataloader": ("input-pipeline", """
        from torch.utils.data import DataLoader, Dataset

        class Slow(Dataset):
            def __len__(self):
                return 64

            def __getitem__(self, i):
                time.sleep(0.004)  # PLANTED (the slow line inside __getitem__, not the for over the loader)
                return torch.randn(32)

        model = torch.nn.Linear(32, 8)
        loader = DataLoader(Slow(), batch_size=4)
        with nx.profile(sys.argv[1], overwrite=True, schedule=nx.schedule(wait=0, warmup=1, active=5, repeat=1)) as prof:
            for i, batch in enumerate(loader):
                model(batch).sum().backward()
                prof.step()
                if i == 8:
                    break
        """),
    "tiny_ops_loop": (("tiny-ops", "python-loop"), """
        def step(x):  # steps of ~7 ms: a stall of a few ms on a busy machine is no 1.5x step-outlier
            acc = torch.zeros(())
            for i in range(1000):
                acc = torch.add(acc, x[i])  # PLANTED
            return acc

        x = torch.randn(1000)
        with nx.profile(sys.argv[1], overwrite=True, schedule=nx.schedule(wait=0, warmup=1, active=3, repeat=1)) as prof:
            for _ in range(6):
                step(x)
                prof.step()
        """),
    "dominant_matmul": ("hotspot", """
        a, b, x = torch.randn(768, 768), torch.randn(768, 768), torch.randn(64, 64)
        with nx.profile(sys.argv[1], overwrite=True, schedule=nx.schedule(wait=0, warmup=1, active=3, repeat=1)) as prof:
            for _ in range(6):
                y = torch.relu(x) + 1
                c = torch.matmul(a, b)  # PLANTED
                prof.step()
        """),
    "every_nth_step_slow": ("step-outliers", """
        def save_checkpoint():
            time.sleep(0.05)  # PLANTED (the work that makes every third step slow)

        x = torch.randn(128, 128)
        with nx.profile(sys.argv[1], overwrite=True, schedule=nx.schedule(wait=0, warmup=1, active=9, repeat=1)) as prof:
            for step in range(12):
                y = torch.relu(x @ x)
                if step % 3 == 2:
                    save_checkpoint()  # CALLER
                prof.step()
        """),
    "late_rank_gloo": ("rank-skew", """
        import torch.distributed as dist
        import torch.multiprocessing as mp

        def late_work():
            time.sleep(0.03)

        def worker(rank, out, port):
            os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            dist.init_process_group("gloo", rank=rank, world_size=2)
            t = torch.ones(1000)
            with nx.profile(out, overwrite=True, schedule=nx.schedule(wait=0, warmup=1, active=4, repeat=1)) as prof:
                for step in range(7):
                    y = torch.matmul(t.view(10, 100), t.view(100, 10))
                    if rank == 1:
                        late_work()  # PLANTED
                    dist.all_reduce(t)
                    prof.step()
            dist.destroy_process_group()

        if __name__ == "__main__":
            import socket
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            mp.spawn(worker, args=(sys.argv[1], port), nprocs=2)
        """),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_top_finding_names_the_planted_rule_and_line(name, tmp_path):
    rule, body = WORKLOADS[name]
    script = tmp_path / f"{name}.py"
    script.write_text(HEADER + textwrap.dedent(body))
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if "# PLANTED" in text)
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, str(script), str(run_dir)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=workload_env())
    assert done.returncode == 0, done.stderr[-2000:]
    report = nx.analyze(run_dir)
    assert report.findings, report.not_applicable
    top = report.findings[0]
    assert top.rule_id in (rule if isinstance(rule, tuple) else (rule,)), [(f.rule_id, f.title) for f in report.findings[:3]]
    assert top.source is not None and Path(top.source.rsplit(":", 1)[0]).name == script.name and top.source.endswith(f":{line}"), top.source
    caller = next((i for i, text in enumerate(script.read_text().splitlines(), 1) if "# CALLER" in text), None)
    if caller:  # the statement that called the planted line is named too
        assert f"{script.name}:{caller}" in top.recommendation, top.recommendation
