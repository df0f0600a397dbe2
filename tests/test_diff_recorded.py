"""Comparing two runs recorded live on the CPU: a slow operation added at a known line is found."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from neuron_explorer.analyzers.diff import compare

from .conftest import cli

SCRIPT = """\
import sys
import torch
import neuron_explorer as nx
{edit}
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
    first = d.deltas[0]
    assert first.type == "source_line" and first.key == f"{tmp_path / 'train.py'}:{slow_line}", [(x.type, x.key) for x in d.deltas[:5]]
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
    assert data["step_time"]["base"]["n"] == data["step_time"]["test"]["n"] == 8
    deltas = data["deltas"]
    assert {d["type"] for d in deltas} >= {"source_line", "operator"}
    assert [d for d in deltas if d["status"] != "changed"] == []
