"""`neuron-explorer record`: unmodified scripts and modules, run as `python` would run them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_explorer import open_run

from .conftest import cli

pytestmark = pytest.mark.slow  # tier: records real torch runs

SCRIPT = """\
import json, os, sys
import torch
from torch import nn

with open(os.environ["REPORT"], "w") as f:
    json.dump({"argv": sys.argv, "name": __name__, "path0": sys.path[0]}, f)
model = nn.Linear(8, 2)
x = torch.randn(4, 8)
for step in range(4):
    y = model(x)  # line 10
if "--raise" in sys.argv:
    raise ValueError("bad batch")
if "--interrupt" in sys.argv:
    raise KeyboardInterrupt
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""
MODEL_LINE = 10


def write_script(tmp_path: Path, name: str = "train.py") -> Path:
    p = tmp_path / name
    p.write_text(SCRIPT)
    return p


def record(tmp_path: Path, *args: str, env_extra: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "REPORT": str(tmp_path / "report.json"), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "neuron_explorer", "record", *args], capture_output=True, text=True,
                          env=env, cwd=cwd or tmp_path, timeout=600)


def test_runs_the_script_as_python_would(tmp_path):
    script = write_script(tmp_path)
    r = record(tmp_path, "-o", "run", "train.py", "--epochs", "1", "-o", "mine")
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report == {"argv": ["train.py", "--epochs", "1", "-o", "mine"], "name": "__main__", "path0": str(tmp_path)}
    with open_run(tmp_path / "run") as run:
        rows = run.sql("SELECT DISTINCT f.file, f.line FROM events e JOIN frames f USING (frame_id) WHERE e.name = 'aten::addmm'").fetchall()
        m = run.manifest
    assert rows == [(str(script), MODEL_LINE)]
    assert m["source"] == "live" and m["command"][1:] == ["record", "-o", "run", "train.py", "--epochs", "1", "-o", "mine"]
    assert m["git"] is None  # a temporary directory is not a repository
    assert m["warnings"] == []


def test_keeps_the_exit_code_and_warns(tmp_path):
    write_script(tmp_path)
    r = record(tmp_path, "-o", "run", "train.py", env_extra={"EXIT_CODE": "3"})
    assert r.returncode == 3
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT count(*) FROM events WHERE name = 'aten::addmm'").fetchone()[0] == 4
        assert run.manifest["warnings"] == ["the profiled code exited with code 3; the run holds what was recorded until then"]


def test_a_script_that_raises_still_leaves_a_complete_run(tmp_path):
    write_script(tmp_path)
    r = record(tmp_path, "-o", "run", "train.py", "--raise")
    assert r.returncode == 1
    assert "ValueError: bad batch" in r.stderr
    assert 'File "train.py", line 12' in r.stderr and "runpy" not in r.stderr  # the script's traceback only
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT count(*) FROM events WHERE name = 'aten::addmm'").fetchone()[0] == 4
        assert "raised ValueError: bad batch" in run.manifest["warnings"][0]


def test_an_interrupted_script_still_leaves_a_complete_run(tmp_path):
    write_script(tmp_path)
    r = record(tmp_path, "-o", "run", "train.py", "--interrupt")
    assert r.returncode == 130
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT count(*) FROM events WHERE name = 'aten::addmm'").fetchone()[0] == 4
        assert "interrupted (KeyboardInterrupt)" in run.manifest["warnings"][0]


def test_runs_a_module_with_dash_m(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(SCRIPT)
    r = record(tmp_path, "-o", "run", "-m", "mypkg.train", "--lr", "3")
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["argv"][1:] == ["--lr", "3"] and report["argv"][0].endswith("mypkg/train.py")
    assert report["name"] == "__main__" and report["path0"] == str(tmp_path)
    with open_run(tmp_path / "run") as run:
        rows = run.sql("SELECT DISTINCT f.file, f.line FROM events e JOIN frames f USING (frame_id) WHERE e.name = 'aten::addmm'").fetchall()
    assert rows == [(str(pkg / "train.py"), MODEL_LINE)]


CONSOLE_SCRIPT = ("import sys; sys.path[0] = sys.argv.pop(1); sys.argv[0] = 'neuron-explorer'; "
                  "from neuron_explorer.cli import main; main()")
"""What the installed `neuron-explorer` script runs: sys.path[0] is its bin directory, not the current one."""


def test_dash_m_from_the_console_script_finds_a_module_of_the_current_directory(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(SCRIPT)
    import os

    env = {**os.environ, "REPORT": str(tmp_path / "report.json")}
    bin_dir = str(Path(sys.executable).parent)
    r = subprocess.run([sys.executable, "-c", CONSOLE_SCRIPT, bin_dir, "record", "-o", "run", "-m", "mypkg.train", "--lr", "3"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["argv"][1:] == ["--lr", "3"] and report["path0"] == str(tmp_path)  # as `python -m mypkg.train --lr 3` sees it
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT count(*) FROM events WHERE name = 'aten::addmm'").fetchone()[0] == 4


def test_profile_options_are_cli_options(tmp_path):
    (tmp_path / "loop.py").write_text(
        "import torch\nx = torch.ones(4, 4)\nprof = torch.profiler.profile\n"
        "with torch.profiler.record_function('noop'):\n    pass\n"
        "for i in range(6):\n    x.mm(x)\n")
    r = record(tmp_path, "-o", "run", "--no-stack", "--no-memory", "--no-shapes", "--activities", "cpu", "loop.py")
    assert r.returncode == 0, r.stderr
    with open_run(tmp_path / "run") as run:
        mm = run.sql("SELECT count(*), count(frame_id), count(*) FILTER (WHERE args LIKE '%Input Dims%') "
                     "FROM events WHERE name = 'aten::mm'").fetchone()
        mem = run.sql("SELECT count(*) FROM memory").fetchone()[0]
        opts = run.manifest["profiler"]
    assert mm == (6, 0, 0)
    assert mem == 0
    assert opts["activities"] == ["CPU"] and opts["with_stack"] is False and opts["profile_memory"] is False


def test_steps_are_optimizer_steps(tmp_path):
    (tmp_path / "steps.py").write_text(SCHEDULED)
    r = record(tmp_path, "-o", "run", "steps.py")
    assert r.returncode == 0, r.stderr
    with open_run(tmp_path / "run") as run:
        steps = [s for (s,) in run.sql("SELECT step FROM steps ORDER BY step").fetchall()]
        per_step = run.sql("SELECT step, count(*) FROM events WHERE name = 'aten::addmm' GROUP BY 1 ORDER BY 1").fetchall()
    assert steps[:6] == [0, 1, 2, 3, 4, 5]
    assert per_step == [(i, 1) for i in range(6)]


def test_schedule_options(tmp_path):
    (tmp_path / "steps.py").write_text(SCHEDULED)
    r = record(tmp_path, "-o", "run", "--wait", "1", "--warmup", "1", "--active", "2", "--repeat", "1", "steps.py")
    assert r.returncode == 0, r.stderr
    with open_run(tmp_path / "run") as run:
        assert [s for (s,) in run.sql("SELECT step FROM steps ORDER BY step").fetchall()] == [2, 3]


# An unmodified training loop: `record` counts a step at each optimizer.step().
SCHEDULED = """\
import torch
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(6):
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
"""


def test_bad_use_is_refused_before_the_script_runs(tmp_path):
    write_script(tmp_path)
    assert record(tmp_path, "-o", "run", "train.py").returncode == 0
    (tmp_path / "report.json").unlink()
    r = record(tmp_path, "-o", "run", "train.py")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: run: already exists")
    assert not (tmp_path / "report.json").exists()  # the script never started
    r = record(tmp_path, "-o", "run2", "--activities", "tpu", "train.py")
    assert r.returncode == 2 and "unknown activity 'tpu'" in r.stderr
    r = record(tmp_path, "-o", "run3", "--warmup", "1", "train.py")
    assert r.returncode == 2 and "need --active" in r.stderr
    r = record(tmp_path, "-o", "run4", "-m", "no_such_module_here")
    assert r.returncode == 2 and "no_such_module_here: no such module" in r.stderr
    assert not (tmp_path / "report.json").exists()


def test_a_privateuse1_activity_with_no_backend_says_so(tmp_path):
    """torch records the CPU only, silently, when PrivateUse1 is asked for and no backend is registered."""
    write_script(tmp_path)
    for asked in ("cpu,privateuse1", "cpu,neuron"):
        r = record(tmp_path, "-o", f"run-{asked[4:]}", "--activities", asked, "train.py")
        assert r.returncode == 0, r.stderr
        line = f"activity '{asked[4:]}': no PrivateUse1 backend was registered (torch.utils.rename_privateuse1_backend), so only the CPU was recorded"
        assert f"neuron-explorer: warning: {line}" in r.stderr
        with open_run(tmp_path / f"run-{asked[4:]}") as run:
            assert line in run.manifest["warnings"]


def test_git_commit_and_dirty_flag(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    script = write_script(repo)
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "train.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert record(tmp_path, "-o", "clean", str(script)).returncode == 0
    script.write_text(SCRIPT + "\n# edited\n")
    assert record(tmp_path, "-o", "dirty", str(script)).returncode == 0
    clean = json.loads((tmp_path / "clean" / "manifest.json").read_text())["git"]
    dirty = json.loads((tmp_path / "dirty" / "manifest.json").read_text())["git"]
    assert (clean["commit"], clean["dirty"]) == (head, False)
    assert (dirty["commit"], dirty["dirty"]) == (head, True)


def test_missing_script_is_one_line_exit_2(tmp_path):
    r = cli("record", "-o", tmp_path / "run", tmp_path / "missing.py")
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: {tmp_path / 'missing.py'}: no such script"
