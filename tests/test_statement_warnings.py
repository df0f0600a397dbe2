"""A warning raised inside a torch call names the user's statement while statement lines are on
(collectors/statements.py), not the StatementLines frame the call went through."""

from __future__ import annotations

import inspect
import warnings

import torch

import neuron_explorer as nx
from neuron_explorer.collectors import statements


def _warn_from_torch(shown: list) -> int:
    x = torch.ones(2)
    line = inspect.currentframe().f_lineno + 1
    torch.tensor(x)  # torch's C++ warns: "To copy construct from a tensor, ..."
    return line


def test_a_torch_warning_names_the_users_line(tmp_path):
    shown: list[tuple[str, int]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: shown.append((filename, lineno))
        with nx.profile(tmp_path / "run"):
            line = _warn_from_torch(shown)
        assert warnings.showwarning.__name__ == "<lambda>"  # the user's hook is back once profiling stops
        without = _warn_from_torch(shown)
    assert shown == [(__file__, line), (__file__, without)]
    assert not any(f == statements.__file__ for f, _ in shown)
