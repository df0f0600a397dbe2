"""Statement lines (collectors/statements.py) by the C++ converter's line callback against the
TorchFunctionMode: the same statement for every operator, and no cost for torch calls that run no
operator. The callback reads CPython 3.11's frame layout; elsewhere these tests are skipped (the mode
is then what records, and tests/test_attribution.py covers it)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import neuron_explorer as nx
from neuron_explorer.collectors import native, statements

pytestmark = pytest.mark.slow  # tier: records real torch runs with the native converter


@pytest.fixture(scope="module")
def native_module():
    module = native.load()
    if not statements.uses_native(module):
        pytest.skip("the C++ converter's statement lines need the built converter on CPython 3.11")
    return module


LINES: dict[str, int] = {}


def _mark(tag: str) -> None:  # the line that called this, by tag: the right answer of each statement
    import sys

    LINES[tag] = sys._getframe(1).f_lineno + 1


def _syntax(x, w, layer):
    _mark("matmul")
    y = x @ w
    _mark("getitem")
    z = y[0:2] * 3
    _mark("layer")
    h = layer(z)
    for _ in range(3):
        _mark("loop")
        h = h * 2
    _mark("split")
    t = (x
         + 1)
    return h.sum() + t.shape[0] + x.shape[1] + w.size(0)


def _record(tmp_path, kind: str, monkeypatch):
    torch.manual_seed(0)
    layer = nn.Linear(16, 4)
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    _syntax(x, w, layer)
    with monkeypatch.context() as m:
        if kind == "mode":
            m.setattr(statements, "uses_native", lambda module: False)
        with nx.profile(tmp_path / kind, activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(2):
                _syntax(x, w, layer)
    assert prof._statements.kind == kind
    frames, events = prof.recording.frames, prof.recording.cycles[0].events.to_pydict()
    ops = []
    for cat, name, _ts, f in sorted(zip(events["category"], events["name"], events["ts_ns"], events["frame_index"]), key=lambda r: r[2]):
        if cat != "cpu_op":
            continue
        chain = []  # the op's user statements, innermost first (a line repeated as its own parent counted once)
        while f is not None and f >= 0:
            key = (frames.file[f], frames.line[f])
            if frames.is_user[f] and (not chain or chain[-1] != key):
                chain.append(key)
            f = frames.parent[f]
        ops.append((name, tuple(chain)))
    return ops


def test_the_callback_gives_every_operator_the_statement_the_mode_gives(tmp_path, monkeypatch, native_module):
    by_mode, by_callback = _record(tmp_path, "mode", monkeypatch), _record(tmp_path, "callback", monkeypatch)
    assert len(by_callback) == len(by_mode) > 20
    assert by_callback == by_mode
    here = __file__
    innermost = {}
    for name, chain in by_callback:
        if chain and chain[0][0] == here:
            innermost.setdefault(chain[0][1], set()).add(name)
    # each syntax statement's operators on its own line (the right answers, marked above)
    assert "aten::matmul" in innermost[LINES["matmul"]]
    assert {"aten::slice", "aten::mul"} <= innermost[LINES["getitem"]]
    assert "aten::linear" in innermost[LINES["layer"]]
    assert "aten::mul" in innermost[LINES["loop"]]
    assert "aten::add" in innermost[LINES["split"]] or "aten::add" in innermost[LINES["split"] + 1]
    assert sum(1 for name, chain in by_callback if name == "aten::mul" and chain and chain[0] == (here, LINES["loop"])) == 2 * 3


def test_torch_calls_that_run_no_operator_record_nothing(tmp_path, native_module):
    x = torch.randn(4, 4)
    with nx.profile(tmp_path / "run", activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        before = native_module.pending_lines()
        for _ in range(1000):
            x.shape, x.dtype, x.is_complex(), x.requires_grad  # noqa: B018  (attribute reads, no operator)
        reads = native_module.pending_lines() - before
        x @ x
        one_op = native_module.pending_lines() - before
    assert reads == 0
    # one note per operator the profiler recorded (aten::matmul and those it calls; the tree walk uses the outer one)
    ops = prof.recording.cycles[0].events.to_pydict()
    recorded = sum(1 for c in ops["category"] if c == "cpu_op")
    assert one_op == recorded >= 2
