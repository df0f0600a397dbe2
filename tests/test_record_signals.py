"""`record` under signals and bad outputs (issue 13, item 11): SIGTERM and SIGINT while the script
runs, or while the profiler starts, still write the run of what was recorded (exit 143 / 130, no
traceback from the tool); an output that cannot be written is refused before the script runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from neuron_explorer import open_run

from .conftest import workload_env

pytestmark = pytest.mark.slow  # tier: records real torch runs and signals them

LOOP = """\
import sys, time
import torch
from torch import nn

model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16)
for step in range(100000):
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if step == 3:
        print("ready", flush=True)
    time.sleep(0.01)
"""


def start_record(tmp_path: Path, script: str, *args: str, python: list[str] | None = None) -> subprocess.Popen:
    (tmp_path / "train.py").write_text(script)
    cmd = python or [sys.executable, "-m", "neuron_explorer"]
    # SIGINT as in a terminal: a test run started in the background by a non-interactive shell (`cmd &`)
    # inherits SIGINT ignored, and Python then never raises KeyboardInterrupt in the child
    return subprocess.Popen([*cmd, "record", "-o", "run", *args, "train.py"], cwd=tmp_path, env=workload_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for(p: subprocess.Popen, line: str) -> None:
    """Read stdout until `line`; a watchdog kills the process if it never comes (no timing assertion)."""
    watchdog = threading.Timer(300, p.kill)
    watchdog.start()
    try:
        for got in p.stdout:
            if got.strip() == line:
                return
        pytest.fail(f"the script ended before printing {line!r}: {p.stderr.read()}")
    finally:
        watchdog.cancel()


def finish(p: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        pytest.fail(f"record did not end: {err}")
    return p.returncode, err


def assert_readable_run(run_dir: Path, warning: str) -> None:
    with open_run(run_dir) as run:
        steps = run.sql("SELECT count(*) FROM steps").fetchone()[0]
        ops = run.sql("SELECT count(*) FROM events WHERE name = 'aten::addmm'").fetchone()[0]
        warnings = run.manifest["warnings"]
    assert steps >= 3 and ops >= 3, (steps, ops)
    assert any(warning in w for w in warnings), warnings
    assert not [p for p in run_dir.parent.iterdir() if p.name.startswith(".run.")]


@pytest.mark.parametrize("sig, code, warning", [(signal.SIGTERM, 143, "Terminated"), (signal.SIGINT, 130, "interrupted")])
def test_a_signal_while_the_script_runs_writes_what_was_recorded(tmp_path, sig, code, warning):
    p = start_record(tmp_path, LOOP)
    wait_for(p, "ready")
    p.send_signal(sig)
    rc, err = finish(p)
    assert rc == code, err
    assert f"wrote {Path('run')}" in err or "wrote run" in err, err
    assert_readable_run(tmp_path / "run", warning)
    if sig == signal.SIGTERM:
        assert "Traceback" not in err, err


# Deterministic "signal during start-up": the profiler's start sends the signal to its own process
# (delivered while start() still runs), through a wrapper that patches it and then runs the CLI.
STARTUP_WRAPPER = textwrap.dedent("""
    import os, signal, sys, time
    from neuron_explorer.collectors import torch_profiler
    start = torch_profiler.profile.start
    def start_and_signal(self):
        os.kill(os.getpid(), getattr(signal, os.environ["NX_TEST_SIGNAL"]))
        time.sleep(0.2)  # the signal arrives here, inside start()
        start(self)
        time.sleep(0.2)
    torch_profiler.profile.start = start_and_signal
    from neuron_explorer.cli import main
    sys.argv = ["neuron-explorer", *sys.argv[1:]]
    main()
""")


@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_while_the_profiler_starts_is_no_traceback(tmp_path, sig, code):
    (tmp_path / "train.py").write_text("open('ran', 'w').write('yes')\n")
    env = {**workload_env(), "NX_TEST_SIGNAL": sig}
    p = subprocess.run([sys.executable, "-c", STARTUP_WRAPPER, "record", "-o", "run", "train.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == code, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "ran").exists()  # the script never started
    with open_run(tmp_path / "run") as run:  # the (empty) run is written and readable
        assert run.sql("SELECT count(*) FROM events").fetchone()[0] >= 0
        assert run.manifest["warnings"]


@pytest.mark.parametrize("out", ["/proc/x", "/proc/x/y"])
def test_an_unwritable_output_is_refused_before_the_script_runs(tmp_path, out):
    (tmp_path / "train.py").write_text("open('ran', 'w').write('yes')\n")
    p = subprocess.run([sys.executable, "-m", "neuron_explorer", "record", "-o", out, "train.py"], cwd=tmp_path,
                       env=workload_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and out.split("/y")[0] in lines[0], p.stderr
    assert not (tmp_path / "ran").exists()


def test_os_exit_keeps_its_code_and_leaves_nothing_half_written(tmp_path):
    # os._exit ends the process without unwinding: no run can be written (README says so).
    (tmp_path / "train.py").write_text("import os, torch\ntorch.ones(2).sum()\nos._exit(4)\n")
    p = subprocess.run([sys.executable, "-m", "neuron_explorer", "record", "-o", "run", "train.py"], cwd=tmp_path,
                       env=workload_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 4, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["train.py"]


FULL_DISK_WRAPPER = textwrap.dedent("""
    import errno, sys
    import pyarrow.parquet as pq
    def full(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")
    pq.write_table = full
    pq.ParquetWriter.write_batch = full
    from neuron_explorer.cli import main
    sys.argv = ["neuron-explorer", *sys.argv[1:]]
    main()
""")


@pytest.mark.parametrize("script_code", [0, 3])
def test_a_full_disk_when_the_run_is_written_is_one_line_and_keeps_the_script_exit_code(tmp_path, script_code):
    (tmp_path / "train.py").write_text(f"import sys, torch\ntorch.ones(2).sum()\nsys.exit({script_code})\n")
    p = subprocess.run([sys.executable, "-c", FULL_DISK_WRAPPER, "record", "-o", "run", "train.py"], cwd=tmp_path,
                       env=workload_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == (script_code or 2), p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "no space left on device" in errors[0], p.stderr
    assert sorted(os.listdir(tmp_path)) == ["train.py"]  # no run, no temporary directory
