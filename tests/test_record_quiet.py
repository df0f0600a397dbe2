"""Under `neuron-explorer record`, the script's output stays its own: torch's profiler backend
does not add its `USDT: … profiler_start/stop` markers (Kineto, KINETO_LOG_LEVEL) nor the
allocator's `CPUAllocator.cpp … Memory block of unknown size` warning (c10 logging,
TORCH_CPP_LOG_LEVEL) to the script's stderr; a level the user set is kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # tier: records a real torch run

# Step 0 (waiting) allocates a tensor that step 2 (recorded, with memory) frees: the allocator
# then warns that it does not know the block. Every profiler start and stop prints a USDT marker.
SCRIPT = """\
import sys
import torch

m = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
kept = []
for step in range(4):
    if step == 0:
        kept.append(torch.randn(256, 256))
    if step == 2:
        kept.clear()
    m(torch.randn(16, 8)).sum().backward()
    opt.step()
    print(f"script step {step}", file=sys.stderr)
"""
NOISE = ("profiler_start", "profiler_stop", "Memory block of unknown size")


def _record(tmp_path: Path, name: str, **env_extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("KINETO_LOG_LEVEL", "TORCH_CPP_LOG_LEVEL")}
    return subprocess.Popen([sys.executable, "-m", "neuron_explorer", "record", "-o", name, "--wait", "1", "--warmup", "1",
                             "--active", "2", "train.py"], cwd=tmp_path, env={**env, **env_extra},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_record_keeps_torch_profiler_noise_out_of_the_scripts_stderr(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    quiet = _record(tmp_path, "quiet")
    loud = _record(tmp_path, "loud", KINETO_LOG_LEVEL="4", TORCH_CPP_LOG_LEVEL="WARNING")  # torch's defaults, set by the user
    (_, quiet_err), (_, loud_err) = quiet.communicate(timeout=600), loud.communicate(timeout=600)
    assert quiet.returncode == 0 and loud.returncode == 0, (quiet_err, loud_err)
    for err in (quiet_err, loud_err):  # the script's own lines and our one line are there either way
        assert [ln for ln in err.splitlines() if ln.startswith("script step")] == [f"script step {i}" for i in range(4)]
        assert "neuron-explorer: wrote" in err
    assert not [ln for ln in quiet_err.splitlines() if any(n in ln for n in NOISE)], quiet_err
    # the same script with the levels the user chose: torch prints them (this is what is silenced above)
    for noise in NOISE:
        assert noise in loud_err, loud_err
    assert (tmp_path / "quiet" / "manifest.json").exists()
