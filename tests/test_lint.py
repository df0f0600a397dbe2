"""The code passes the linter: `ruff check neuron_explorer tests` with the rules in pyproject.toml
([tool.ruff]). Run `ruff check --fix neuron_explorer tests` to fix what ruff can fix itself."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from .conftest import REPO


def _ruff() -> list[str]:
    try:
        import ruff  # noqa: F401  the test extra installs it (pip install -e '.[test]')
    except ImportError:
        exe = shutil.which("ruff")
        if exe is None:
            pytest.fail("ruff is not installed: pip install -e '.[test]'")
        return [exe]
    return [sys.executable, "-m", "ruff"]


def test_ruff_finds_nothing():
    res = subprocess.run([*_ruff(), "check", "--output-format", "concise", "neuron_explorer", "tests"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"ruff check neuron_explorer tests:\n{res.stdout}{res.stderr}"
