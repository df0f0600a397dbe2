"""A recorded run is clean (issue #37, items 4 and 5): its steps end where the user's step ends
without a false "slices that overlap" warning, and the frames of the tool that ran the script
(runpy, typer, click, Neuron Explorer) reach neither its events nor its frames.

Times in the timelines are microseconds.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from neuron_explorer.analyzers import analyze
from neuron_explorer.collectors import _live_convert as lc
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import open_run

from .conftest import X, write_trace

OVERLAP_WARNING = "slices that overlap another on the same thread"
TOOL_FILES = ("neuron_explorer/", "/typer/", "/click/", "runpy")


def _manifest_rank(tmp_path, events):
    result = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run")
    return result.manifest["ranks"][0], result.manifest["warnings"], result.run_dir


def test_a_step_that_ends_inside_the_optimizer_step_is_no_overlap(tmp_path):
    """prof.step() is called inside optimizer.step(): the step range ends inside its frame.

        ProfilerStep#1 [0 ............ 100)  ProfilerStep#2 [100 ............ 200)
        train.py(9): <module> [0 ................................................ 210)
          aten::mm [10-30)
          optimizer.py(509): wrapper [80 ..... 120)
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 100), X("ProfilerStep#2", "user_annotation", 100, 100),
              X("train.py(9): <module>", "python_function", 0, 210), X("aten::mm", "cpu_op", 10, 20),
              X("torch/optim/optimizer.py(509): wrapper", "python_function", 80, 40)]
    entry, warnings, run_dir = _manifest_rank(tmp_path, events)
    assert entry["data_quality"]["overlapping_slices"] == 0
    assert not [w for w in warnings if OVERLAP_WARNING in w]
    report = analyze(run_dir, write=False)
    assert all(f.confidence == 1.0 for f in report.findings)


def test_a_real_overlap_still_warns(tmp_path):
    """Two operators on one thread where the second starts inside the first and ends after it
    (an end event dropped, or clocks skewed), inside one step.

        ProfilerStep#1 [0 ............................ 100)
          aten::mm [10 ...... 40)
                 aten::add [30 ...... 60)
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 100), X("aten::mm", "cpu_op", 10, 30), X("aten::add", "cpu_op", 30, 30)]
    entry, warnings, _ = _manifest_rank(tmp_path, events)
    assert entry["data_quality"]["overlapping_slices"] == 1
    assert f"rank 0: 1 {OVERLAP_WARNING}" in warnings


@pytest.mark.parametrize("name, kind", [
    ("<frozen runpy>(88): _run_code", lc.NO_EVENT),
    ("typer/main.py(1445): wrapper", lc.NO_EVENT),
    ("click/core.py(1078): main", lc.NO_EVENT),
    ("neuron_explorer/cli.py(355): main", lc.NO_EVENT),
    ("/usr/lib/python3.9/runpy.py(87): _run_code", lc.NO_EVENT),
    ("__editable___neuron_explorer_0_1_0_finder.py(44): _path_hook", lc.NO_EVENT),
    ("neuron_explorer/collectors/statements.py(32): __torch_function__", lc.NO_EVENT),
    ("neuron_explorer/collectors/record.py(262): step", lc.PROFILER_OWN),  # left out with what it calls
    ("torch/optim/optimizer.py(509): wrapper", lc.CALL),
    ("train.py(12): main", lc.CALL),
    ("mytyper/main.py(3): run", lc.CALL),
])
def test_the_launchers_calls_get_no_event(name, kind):
    assert lc.call_kind(name) == kind


def test_the_launchers_files_are_no_frame():
    frames = lc.FrameTable()
    assert frames.intern("<frozen runpy>", 88, "_run_code", -1) == -1
    assert frames.intern("typer/main.py", 1445, "wrapper", -1) == -1
    assert frames.intern("train.py", 12, "main", -1) == 0 and frames.file[0].endswith("train.py")


SCRIPT = """\
import torch
from torch import nn


def train_step(model, opt, x):
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()


model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 8)
for step in range(8):
    train_step(model, opt, x)
"""


@pytest.mark.slow
def test_a_recorded_run_has_no_overlap_warning_and_none_of_the_tools_frames(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    r = subprocess.run([sys.executable, "-m", "neuron_explorer", "record", "-o", "run", "train.py"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["ranks"][0]["data_quality"]["overlapping_slices"] == 0  # 8 before: each step against optimizer.step()
    assert not [w for w in manifest["warnings"] if OVERLAP_WARNING in w]
    with open_run(tmp_path / "run") as run:
        files = [f for (f,) in run.sql("SELECT file FROM frames").fetchall()]
        names = [n for (n,) in run.sql("SELECT DISTINCT name FROM events WHERE kind = 'python'").fetchall()]
        user_lines = {(f.rsplit("/", 1)[-1], line) for f, line in run.sql("SELECT file, line FROM frames WHERE is_user").fetchall()}
    assert files and not [f for f in files if any(t in f for t in TOOL_FILES)]
    assert names and not [n for n in names if any(t in n for t in TOOL_FILES)]
    assert {("train.py", 6), ("train.py", 7), ("train.py", 8), ("train.py", 16)} <= user_lines
    report = analyze(tmp_path / "run", write=False)
    assert all(f.confidence == 1.0 for f in report.findings)
