"""Distributed recording: each rank writes its own partition of one run, concurrently.

The end-to-end test runs what a user runs: `torchrun --nproc-per-node 2 -m neuron_explorer
record -o RUN train_ddp.py`, two CPU processes with the gloo backend doing all_reduce in a
training loop.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_explorer import open_run
from neuron_explorer.collectors import _live_write
from neuron_explorer.errors import RunExistsError

pytestmark = pytest.mark.slow  # tier: spawns torch.distributed processes

TRAIN_DDP = """\
import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 8)
for step in range(3):
    loss = model(x).pow(2).mean()  # @forward
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)  # @all_reduce
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
"""
LINES = {line.split("# @")[1].strip(): i for i, line in enumerate(TRAIN_DDP.splitlines(), 1) if "# @" in line}


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    script = tmp / "train_ddp.py"
    script.write_text(TRAIN_DDP)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "-m", "neuron_explorer", "record", "-o", "runs/ddp", "train_ddp.py"],
                       capture_output=True, text=True, cwd=tmp, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp / "runs" / "ddp", script


def test_both_ranks_have_a_partition_and_the_manifest_lists_them(ddp_run):
    run_dir, _ = ddp_run
    assert sorted(p.name for p in run_dir.glob("rank=*")) == ["rank=0", "rank=1"]
    assert not [p for p in run_dir.iterdir() if ".tmp-" in p.name]  # no half-written partition left
    m = json.loads((run_dir / "manifest.json").read_text())
    assert [e["rank"] for e in m["ranks"]] == [0, 1]
    assert [e["world_size"] for e in m["ranks"]] == [2, 2]
    assert m["process_group"]["backend"] == "gloo" and m["process_group"]["world_size"] == 2
    assert [e["distributed_info"]["backend"] for e in m["ranks"]] == ["gloo", "gloo"]
    # each rank's steps end inside optimizer.step(): no overlap, no warning (issue #37 item 4)
    assert [e["data_quality"]["overlapping_slices"] for e in m["ranks"]] == [0, 0]
    assert not [w for w in m["warnings"] if "overlap" in w]
    info = subprocess.run([sys.executable, "-m", "neuron_explorer", "info", str(run_dir), "--json"], capture_output=True, text=True)
    assert info.returncode == 0, info.stderr
    assert [(r["rank"], r["world_size"]) for r in json.loads(info.stdout)["ranks"]] == [(0, 2), (1, 2)]


def test_every_rank_links_operators_to_lines_and_steps(ddp_run):
    run_dir, script = ddp_run
    with open_run(run_dir) as run:
        allreduce = run.sql(
            "SELECT e.rank, count(*), list(DISTINCT f.file), list(DISTINCT f.line), list(DISTINCT e.step ORDER BY e.step) "
            "FROM events e JOIN frames f USING (frame_id) WHERE e.kind = 'cpu_op' AND e.name = 'c10d::allreduce_' "
            "GROUP BY 1 ORDER BY 1").fetchall()
        addmm = run.sql("SELECT e.rank, list(DISTINCT f.line) FROM events e JOIN frames f USING (frame_id) "
                        "WHERE e.name = 'aten::addmm' GROUP BY 1 ORDER BY 1").fetchall()
        ids = run.sql("SELECT count(*), count(DISTINCT event_id) FROM events").fetchone()
        steps = run.sql("SELECT rank, list(step ORDER BY step) FROM steps GROUP BY 1 ORDER BY 1").fetchall()
    # 2 parameters x 3 steps on each rank, on the all_reduce line, one step each
    assert allreduce == [(r, 6, [str(script)], [LINES["all_reduce"]], [0, 1, 2]) for r in (0, 1)]
    assert addmm == [(0, [LINES["forward"]]), (1, [LINES["forward"]])]
    assert ids[0] == ids[1]  # event ids are unique across ranks
    assert [s[:3] for _, s in steps] == [[0, 1, 2], [0, 1, 2]]  # a step per optimizer.step()


# --- the partition writer, without torch ------------------------------------------------------


def _write_rank(run_dir: str, rank: int) -> None:
    entry = {"rank": rank, "world_size": 4, "events": 0, "counts": {}, "devices": [], "steps": [], "data_quality": {}}
    manifest = {"format_version": 1, "source": "live", "command": ["x"], "warnings": [f"rank {rank}: note"]}
    _live_write.write_shared(Path(run_dir), rank, {}, entry, manifest, overwrite=False)


def test_concurrent_ranks_never_clobber_each_other(tmp_path):
    run_dir = tmp_path / "run"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_write_rank, args=(str(run_dir), r)) for r in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    m = json.loads((run_dir / "manifest.json").read_text())
    assert [e["rank"] for e in m["ranks"]] == [0, 1, 2, 3]
    assert sorted(m["warnings"]) == [f"rank {r}: note" for r in range(4)]
    with open_run(run_dir) as run:
        assert run.ranks == [0, 1, 2, 3]
        assert run.sql("SELECT count(*) FROM events").fetchone()[0] == 0


def test_a_rank_that_already_wrote_is_refused_early(tmp_path):
    run_dir = tmp_path / "run"
    _write_rank(str(run_dir), 1)
    with pytest.raises(RunExistsError):
        _live_write.check_target(run_dir, overwrite=False, rank=1, shared=True)
    assert _live_write.check_target(run_dir, overwrite=False, rank=0, shared=True) == run_dir  # other ranks may still write
    assert _live_write.check_target(run_dir, overwrite=True, rank=1, shared=True) == run_dir
