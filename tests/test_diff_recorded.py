"""Comparing two runs recorded live on the CPU: a slow operation added at a known line is found,
a planted regression fails the CI gate, and two recordings of the same code pass it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neuron_explorer.analyzers.diff import compare

from .conftest import cli

pytestmark = pytest.mark.slow  # tier: records real torch runs

SCRIPT = """\
import sys
import torch
import neuron_explorer as nx
{edit}
torch.set_num_threads(1)  # two intra-op threads on a loaded 2-core machine make every operator's time erratic
x = torch.randn(192, 192)
big = torch.randn(640, 640)


def step():
    y = torch.relu(torch.matmul(x, x))
{slow}
    return y.sum()


with nx.profile(sys.argv[1], overwrite=True, schedule=nx.schedule(wait=0, warmup=2, active=8, repeat=1)) as prof:
    for _ in range(10):
        step()
        prof.step()
"""
SLOW = "    z = torch.matmul(big, big)  # SLOW"


def _record(tmp: Path, name: str, slow: bool, edit: str) -> Path:
    script = tmp / "train.py"
    script.write_text(SCRIPT.format(edit=edit, slow=SLOW if slow else ""))
    run = tmp / name
    done = subprocess.run([sys.executable, str(script), str(run)], capture_output=True, text=True, timeout=300, cwd=tmp)
    assert done.returncode == 0, done.stderr[-2000:]
    return run


def test_added_slow_line_is_first_and_significant(tmp_path: Path):
    base = _record(tmp_path, "base", slow=False, edit="")
    test = _record(tmp_path, "test", slow=True, edit="# an edit above\n# moves every line down\n")
    slow_line = next(i for i, t in enumerate((tmp_path / "train.py").read_text().splitlines(), 1) if "# SLOW" in t)
    d = compare(base, test)
    assert d.step_time.verdict == "slower", d.step_time
    # the largest increase (on a loaded machine an unchanged line can move a lot by noise, either way)
    first = max((x for x in d.deltas if x.type == "source_line"), key=lambda x: x.delta_ns_per_step)
    assert first.key == f"{tmp_path / 'train.py'}:{slow_line}", [(x.type, x.key, x.delta_ns_per_step) for x in d.deltas[:5]]
    assert first.significant and first.status == "new"
    # the unchanged matmul line moved by two lines and is matched, not reported as new
    moved = [x for x in d.deltas if x.type == "source_line" and x.base_key]
    assert all(x.status == "changed" for x in moved)


def test_two_runs_of_the_same_code_match_line_for_line(tmp_path: Path):
    """Two recordings of the same script: every source line, module, operator and kernel of one
    is found in the other (nothing reported new or gone). Whether one was slower is left to
    the hand-built tests of test_diff.py: on a shared machine two real runs do differ in time."""
    base = _record(tmp_path, "base", slow=False, edit="")
    test = _record(tmp_path, "test", slow=False, edit="")
    res = cli("diff", base, test, "--json")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    data = json.loads(res.stdout)
    steps = data["step_time"]["steps"]
    assert steps["base"]["steps"] == steps["test"]["steps"] == 8  # the schedule's active steps, all whole
    assert data["step_time"]["base"]["n"] == len(steps["base"]["used"]) >= 6
    deltas = data["deltas"]
    assert {d["type"] for d in deltas} >= {"source_line", "operator"}
    assert [d for d in deltas if d["status"] != "changed"] == []


# ---- the CI gate on `neuron-explorer record` runs (issue 19) ----------------------------------------
# A training loop recorded with `neuron-explorer record`: each optimizer.step() ends a step, so the
# run's first step holds the script's start-up and its last one only what ran after the last
# optimizer.step(). The test side adds one torch.linalg.qr per step (about 2.8x the step here).
TRAIN = """\
import sys
import time
from pathlib import Path

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(256, 256), torch.randn(256, 1)
m = torch.randn(384, 384)
barrier, me, planted = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "qr"
(barrier / f"ready-{me}").touch()
give_up = time.monotonic() + 120
while not (barrier / "go").exists() and time.monotonic() < give_up:  # both recordings start their loops together
    time.sleep(0.001)
for _ in range(STEPS):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    if planted:
        torch.linalg.qr(m)  # PLANTED
    opt.step()
(barrier / f"done-{me}").touch()
while len(list(barrier.glob("done-*"))) < 2 and time.monotonic() < give_up:  # keep the other side's neighbour busy
    model(x).sum().backward()
"""
STEPS = 30


def _record_side_by_side(tmp: Path, qr_on_test: bool) -> tuple[Path, Path]:
    """Record base and test at once with `neuron-explorer record`, from the same script (the test
    side runs the planted line when asked). Their loops start when both processes are ready, and
    the side done first keeps computing (after its last optimizer.step(): in the partial step diff
    leaves out) until the other is done, so the load on a shared machine falls on both alike:
    recorded one after the other, two runs of the same code here can differ by tens of percent, a
    real difference between the runs that no statistic on them can call noise (bench/README.md)."""
    barrier = tmp / "barrier"
    barrier.mkdir()
    script = tmp / "train.py"
    script.write_text(TRAIN.replace("STEPS", str(STEPS)))
    procs = {}
    # Both on the same core: they then share it alike, where on two cores one of them would also
    # share its core with whatever else runs (measured: same code +12%, p < 1e-5, on the other core).
    core = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    for name, qr in (("base", False), ("test", qr_on_test)):
        cmd = [sys.executable, "-m", "neuron_explorer", "record", "-o", str(tmp / name), str(script), str(barrier), name,
               "qr" if qr else "-"]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp, preexec_fn=pin)
    deadline = time.monotonic() + 300
    while len(list(barrier.glob("ready-*"))) < 2 and time.monotonic() < deadline and all(p.poll() is None for p in procs.values()):
        time.sleep(0.01)
    (barrier / "go").touch()
    for _name, p in procs.items():
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    return tmp / "base", tmp / "test"


def _qr_line(tmp: Path) -> int:
    return next(i for i, t in enumerate((tmp / "train.py").read_text().splitlines(), 1) if "# PLANTED" in t)


def test_a_planted_regression_under_record_fails_the_gate(tmp_path: Path):
    base, test = _record_side_by_side(tmp_path, qr_on_test=True)
    gate = cli("diff", base, test, "--fail-if-slower", "5%")
    assert gate.returncode == 1, gate.stdout[-3000:] + gate.stderr[-2000:]
    assert "\nverdict: SLOWER by about " in gate.stdout and "over the 5% limit" in gate.stderr
    data = json.loads(cli("diff", base, test, "--json").stdout)
    s = data["step_time"]
    # the planted QR adds 50% or more on a quiet machine; with the rest of the suite on both cores it
    # measured +19.9% once: what the gate needs is a change well past its 5%, found significant
    assert s["verdict"] == "slower" and s["delta_pct"] > 10 and s["effect_size"] > 0.5
    for side in ("base", "test"):
        steps = s["steps"][side]
        assert steps["steps"] == STEPS + 1  # the start-up before the first optimizer.step() and the remainder after the last
        left = {x["step"]: x["reason"] for x in steps["left_out"]}
        assert left[0].startswith("before the first step boundary") and left[STEPS].startswith("after the last step boundary")
        assert steps["used"] == [n for n in range(STEPS + 1) if n not in left] and len(steps["used"]) >= STEPS - 1 - STEPS // 4
    first = data["deltas"][0]
    assert first["type"] == "source_line" and first["key"] == f"{tmp_path / 'train.py'}:{_qr_line(tmp_path)}" and first["significant"]


def test_two_recordings_of_the_same_code_pass_the_gate(tmp_path: Path):
    base, test = _record_side_by_side(tmp_path, qr_on_test=False)
    gate = cli("diff", base, test, "--fail-if-slower", "5%")
    assert gate.returncode == 0, gate.stdout[-3000:] + gate.stderr[-2000:]
    data = json.loads(cli("diff", base, test, "--json").stdout)
    s = data["step_time"]
    assert s["verdict"] != "slower", s
    assert [x["step"] for x in s["steps"]["base"]["left_out"]][:1] == [0] and s["steps"]["base"]["left_out"][-1]["step"] == STEPS


def test_record_runs_makes_a_run_set_that_diff_reads(tmp_path: Path):
    """`record --runs 2` records the script twice, one process after the other, into OUT/1 and
    OUT/2; `diff` takes the folder and judges the recordings' values (lower-quartile steps)."""
    script = tmp_path / "loop.py"
    script.write_text("import torch\ntorch.set_num_threads(1)\nmodel = torch.nn.Linear(64, 64)\n"
                      "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx = torch.randn(32, 64)\n"
                      "for _ in range(8):\n    opt.zero_grad()\n    model(x).sum().backward()\n    opt.step()\n")
    res = cli("record", "--runs", "2", "-o", tmp_path / "set", script)
    assert res.returncode == 0, res.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "set").iterdir()) == ["1", "2"]
    data = json.loads(cli("diff", tmp_path / "set", tmp_path / "set", "--json").stdout)
    s = data["step_time"]
    assert s["test_name"] == "t-on-run-values" and [len(s["runs"][r]) for r in ("base", "test")] == [2, 2]
    assert s["delta_ns"] == 0 and s["verdict"] != "slower"
    assert all(len(r["steps"]["used"]) >= 5 for r in s["runs"]["base"])


LOOP = """\
import torch
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(64, 128)
big = torch.randn(384, 384)
for _ in range(12):
    opt.zero_grad()
    model(x).square().mean().backward()
{extra}    opt.step()
"""


def test_base_and_test_recorded_in_pairs_are_paired_and_the_regression_fails_the_gate(tmp_path: Path):
    """What COMPARE.md tells a CI job to do: record base and test one after the other, three times
    (runs/base/1, runs/test/1, runs/base/2, ...); diff pairs them, and the added matmul (about +120%
    of the step) is slower and fails the gate. On a loaded machine a burst of load can slow one
    recording of a pair as a whole, and three pairs then cannot rule out that it is load (df = 2);
    the added work still shows, and decides."""
    (tmp_path / "base.py").write_text(LOOP.format(extra=""))
    (tmp_path / "train.py").write_text(LOOP.format(extra="    torch.matmul(big, big)  # the regression\n"))
    for i in (1, 2, 3):
        for side, script in (("base", "base.py"), ("test", "train.py")):
            res = cli("record", "-o", tmp_path / "runs" / side / str(i), tmp_path / script, cwd=tmp_path)
            assert res.returncode == 0, res.stderr[-2000:]
    res = cli("diff", tmp_path / "runs" / "base", tmp_path / "runs" / "test", "--json", "--fail-if-slower", "5%")
    s = json.loads(res.stdout)["step_time"]
    assert [len(s["runs"][r]) for r in ("base", "test")] == [3, 3]
    # paired; unless a recording was slowed as a whole without its partner (set aside: docs/COMPARE.md),
    # which does not cancel in their ratio, and diff says so
    aside = [r["set_aside"] for role in ("base", "test") for r in s["runs"][role]]
    assert s["test_name"] == ("t-on-run-values" if any(aside) else "paired-t-on-run-ratios"), (aside, s["test_reason"])
    if any(aside):
        assert "one recording of a pair slowed without its partner" in s["test_reason"]
    # +120% on a quiet machine; +60-80% measured while another benchmark kept one core busy. Where load
    # leaves the step times unsure, the added work (a 384x384 matmul per step, priced at its own time
    # per call) decides: the verdict is "slower" either way
    assert s["delta_pct"] > 20 and s["verdict"] == "slower", (s["verdict"], s["reason"])
    assert res.returncode == 1 and "over the 5% limit" in res.stderr
    assert s["work"]["cost"]["significant"] and s["work"]["cost"]["delta_pct"] > 20, s["work"]


# ---- a regression that the step times are too noisy to size (issue 19) ------------------------------
# A training loop fed by a Dataset whose batches each open a record shard first: Python work of a
# length that varies from batch to batch (exponentially: a few batches take tens of milliseconds),
# so the steps scatter far more than the regression adds. It is CPU work, so it scales with the
# machine's load as the model's compute does: their ratio, and the test, hold on a busy machine.
# The regression is a second forward pass each step, to log a metric, as people add one. The shard
# work is seeded by the batch, so both recordings do alike; the step times still cannot size it.
LOADER = """\
import random
import sys

import torch
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
torch.set_num_threads(1)


class Records(Dataset):
    def __len__(self):
        return 30 * 32

    def __getitem__(self, i):
        if i % 32 == 0:  # a batch's first record opens its shard: Python work of a length that varies
            sum(range(int(random.Random(i).expovariate(1 / 1_500_000))))
        return torch.randn(768), torch.randn(1)


model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(768, 768), torch.nn.ReLU()) for _ in range(4)],
                            torch.nn.Linear(768, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
log_metric = sys.argv[1] == "metric"
for x, y in DataLoader(Records(), batch_size=32):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    if log_metric:
        with torch.no_grad():
            model(x)  # THE REGRESSION: a second forward pass, for a metric
    opt.step()
"""


def test_a_regression_under_noisy_data_loading_fails_the_gate_on_its_work(tmp_path: Path):
    (tmp_path / "train.py").write_text(LOADER)
    for name, arg in (("base", "-"), ("test", "metric"), ("same", "-")):
        res = cli("record", "-o", tmp_path / name, tmp_path / "train.py", arg, cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-2000:]
    res = cli("diff", tmp_path / "base", tmp_path / "test", "--json", "--fail-if-slower", "5%")
    data = json.loads(res.stdout)
    s = data["step_time"]
    # the work decides. On a loaded machine the step times can, rarely, decide first (rule 2), in
    # the direction the load moved them: with the suite's other worker beside it, the base's steps
    # once ran 46.8% slower than the test's (p=0.0009), and the gate passed on the step times
    assert s["basis"] == ("step time" if s["significant"] else "work"), s["reason"]
    if s["basis"] == "work":
        assert s["verdict"] == "slower" and res.returncode == 1 and "over the 5% limit" in res.stderr, res.stderr
        assert "more work (priced at the base's time per call" in res.stderr, res.stderr
    else:
        assert s["verdict"] == ("slower" if s["delta_pct"] > 0 else "faster"), s["reason"]
        assert res.returncode == (1 if s["verdict"] == "slower" and s["estimate_pct"] > 5 else 0), res.stderr
    cost = s["work"]["cost"]
    # the extra forward pass is about a quarter of the compute; the shards add as much again on average
    assert cost["metric"] == "cpu" and cost["significant"] and 5 < cost["delta_pct"] < 30, cost
    # the step times alone cannot size it: their interval spans tens of percent
    assert s["delta_ci_high_ns"] - s["delta_ci_low_ns"] > 0.3 * s["base"]["median"]
    # the added line is the one the deltas name: the one new source line, significant (on a loaded
    # machine an unchanged line can move more, either way, by noise)
    line = next(i for i, t in enumerate(LOADER.splitlines(), 1) if "THE REGRESSION" in t)
    new = [r for r in data["deltas"] if r["type"] == "source_line" and r["status"] == "new"]
    assert [r["key"] for r in new] == [f"{tmp_path / 'train.py'}:{line}"] and new[0]["significant"], new
    # the same code: the same work, whatever its step times did, and it passes on it. Rule 2 holds here
    # too: where the machine's load made one recording's steps significantly slower (the full suite's
    # other worker beside it: 324% once), the step times decide first, and the text says so
    same = cli("diff", tmp_path / "base", tmp_path / "same", "--json", "--fail-if-slower", "5%")
    s = json.loads(same.stdout)["step_time"]
    assert s["work"]["cost"]["delta_ns_per_step"] == 0 and s["work"]["cost"]["p_value"] == 1, s["work"]
    if s["significant"] and s["verdict"] == "slower":
        assert s["basis"] == "step time" and same.returncode == 1 and "step time is" in same.stderr, same.stderr
    else:
        assert same.returncode == 0 and s["verdict"] != "slower", same.stdout[-3000:] + same.stderr
