"""Every nanosecond on the statement that caused it: workloads written the way users write them.

Each script is recorded with `neuron-explorer record` (a separate process, as a user runs it) and
the test asserts the line a person would fix: the statement inside the function, syntax included
(`a @ b`, `x[i]`, `y * c + d`), with backward work on the forward statement that built it, never
`loss.backward()`.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import duckdb
import pytest

from neuron_explorer.agent.tools import AgentRuns as AgentTools
from neuron_explorer.analyzers import analyze
from neuron_explorer.analyzers.lines import line_times
from neuron_explorer.dashboard import queries as dash_queries
from neuron_explorer.dashboard.runs import RunSet as DashRuns
from neuron_explorer.store import open_run
from neuron_explorer.vocab import COMPILE_NAME_PREFIX, compile_range

from .conftest import cli

pytestmark = pytest.mark.slow  # tier: records real torch runs (neuron-explorer record)


def _record(tmp_path: Path, source: str, *extra: str) -> tuple[Path, Path, list[str]]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    run = tmp_path / "run"
    r = cli("record", "-o", run, *extra, script)
    assert r.returncode == 0, r.stderr
    return run, script, script.read_text().splitlines()


def _line_of(lines: list[str], marker: str) -> int:
    hits = [i for i, text in enumerate(lines, 1) if marker in text]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


def _per_line(run: Path, script: Path, where: str = "TRUE") -> dict[int, dict]:
    """CPU time of outermost operators per line of the script, split by pass (plain DuckDB)."""
    q = f"""SELECT f.line, sum(e.dur_ns) AS ns, sum(e.dur_ns) FILTER (WHERE e.pass = 'backward') AS bwd
            FROM '{run}/rank=*/events.parquet' e JOIN '{run}/rank=*/frames.parquet' f ON f.frame_id = e.source_frame_id
            WHERE e.kind = 'cpu_op' AND e.event_id = e.top_op_id AND f.file = '{script}' AND {where} GROUP BY 1"""
    return {line: {"ns": ns, "backward_ns": bwd or 0} for line, ns, bwd in duckdb.sql(q).fetchall()}


ATTENTION = """\
    import torch
    from torch import nn


    class Attention(nn.Module):
        def __init__(self, d=64, heads=8):
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d)
            self.heads, self.d = heads, d

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            hd = self.d // self.heads
            outs = []
            for j in range(x.shape[0]):
                heads = []
                for h in range(self.heads):
                    sl = slice(h * hd, (h + 1) * hd)
                    att = q[j, :, sl] @ k[j, :, sl].T / hd ** 0.5  # scores
                    heads.append(torch.softmax(att, dim=-1) @ v[j, :, sl])  # mix
                outs.append(torch.cat(heads, dim=-1))
            return torch.stack(outs)


    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(Attention(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 16, 64)
    for step in range(5):
        loss = model(x).pow(2).mean()
        loss.backward()  # backward call
        opt.step()
        opt.zero_grad()
"""


def test_attention_loop_lands_on_its_statements_not_on_backward(tmp_path):
    run, script, lines = _record(tmp_path, ATTENTION)
    scores, mix, backward_call = (_line_of(lines, m) for m in ("# scores", "# mix", "# backward call"))
    per_line = _per_line(run, script)
    total = sum(v["ns"] for v in per_line.values())
    loop = per_line[scores]["ns"] + per_line[mix]["ns"]
    assert loop > 0.5 * total, per_line  # the two statements of the per-head loop are most of the job
    assert per_line.get(backward_call, {"ns": 0})["ns"] < 0.05 * total, per_line
    assert per_line[scores]["backward_ns"] > 0 and per_line[mix]["backward_ns"] > 0  # both passes, one statement
    report = analyze(run)
    top = report.findings[0]
    # a Python loop of small operators (tiny-ops counts its dispatch gaps, python-loop its operators, and on a
    # loaded machine the backward of its indexing, SelectBackward0, can weigh most): whichever leads, the loop's line
    assert top.rule_id in ("python-loop", "tiny-ops", "hotspot") and top.location.source in (f"{script}:{scores}", f"{script}:{mix}"), top
    assert not any(f.location.source == f"{script}:{backward_call}" for f in report.findings if f.rule_id == "hotspot")
    loop_finding = next(f for f in report.findings if f.rule_id == "python-loop")
    assert loop_finding.location.source in (f"{script}:{scores}", f"{script}:{mix}")
    # 16 samples x 8 heads: one call of forward runs each statement of the inner loop 128 times
    assert loop_finding.evidence.values["runs_per_call"] == 128 and loop_finding.evidence.values["calls_per_step"] >= 128
    if loop_finding.location.source.endswith(f":{mix}"):  # softmax and matmul per head: the fused kernel is the fix
        assert "scaled_dot_product_attention" in loop_finding.recommendation
    # an agent gets the line, its code and the backward split in one call
    agent = AgentTools([run])
    try:
        found = agent.findings(k=5)["findings"]
        hot = agent.hot_source_lines(k=1)["lines"][0]
    finally:
        agent.close()
    first = found[0]
    assert first["source"] == top.location.source and first["code"] == lines[int(first["source"].rsplit(":", 1)[1]) - 1].strip()
    assert next(f for f in found if f["rule_id"] == "python-loop")["values"]["cpu_backward_ns"] > 0
    assert hot["source"] in (f"{script}:{scores}", f"{script}:{mix}") and hot["code"] and hot["cpu_backward_ns"] > 0
    # one definition of time per line: the report, the dashboard's table and the agent tool agree
    with open_run(run) as r:
        defined = {x["source"]: x for x in line_times(r, 0)}
    table = {x["source"]: x for x in dash_queries.source_lines(DashRuns([run]), run=0)["rows"]}
    summary = {x["source"]: x for x in report.summary["ranks"][0]["source_lines"]["cpu"]}
    for src in (f"{script}:{scores}", f"{script}:{mix}"):
        assert defined[src]["cpu_ns"] == table[src]["cpu_self_ns"] == summary[src]["self_ns"] > 0
        assert defined[src]["cpu_backward_ns"] + defined[src]["device_backward_ns"] == table[src]["backward_self_ns"] > 0
    assert hot["cpu_ns"] == defined[hot["source"]]["cpu_ns"]
    # `info` says how much backward time reached a forward statement
    info = json.loads(cli("info", run, "--json").stdout)
    dq = info["ranks"][0]["data_quality"]
    assert dq["backward_linked_ns"] >= 0.95 * dq["backward_ns"] > 0


SYNTAX_HELPER = """\
    import torch
    from torch import nn


    def scale_shift(y, c, d):
        for _ in range(200):
            y = y * c + d  # planted
        return y


    torch.set_num_threads(1)
    model = nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    c, d = torch.full((64, 1, 32), 0.99), torch.zeros(32)  # 64 variants of each sample
    x = torch.randn(16, 32)
    for step in range(4):
        out = scale_shift(model(x), c, d)  # caller
        out.sum().backward()
        opt.step()
        opt.zero_grad()
"""


def test_syntax_operators_in_a_helper_land_on_their_statement(tmp_path):
    run, script, lines = _record(tmp_path, SYNTAX_HELPER)
    planted, caller = _line_of(lines, "# planted"), _line_of(lines, "# caller")
    per_line = _per_line(run, script)
    assert per_line[planted]["ns"] > 2 * per_line.get(caller, {"ns": 1})["ns"], per_line
    assert per_line[planted]["backward_ns"] > 0
    top = analyze(run).findings[0]
    assert top.location.source == f"{script}:{planted}", top


def test_without_statement_lines_syntax_falls_back_to_the_caller(tmp_path):
    run, script, lines = _record(tmp_path, SYNTAX_HELPER, "--no-statement-lines")
    planted, caller = _line_of(lines, "# planted"), _line_of(lines, "# caller")
    per_line = _per_line(run, script)
    assert planted not in per_line and per_line[caller]["ns"] > 0, per_line
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["profiler"]["statement_lines"] is False


MATMUL_IN_FUNCTION = """\
    import torch


    def project(a, b):
        h = a.relu()
        return h @ b  # planted


    torch.set_num_threads(1)
    # large enough that the matmul's time stays far above any other op's, even when a loaded
    # machine stalls one of them for tens of ms (op times are wall-clock: at 512x512 the matmul's
    # 42 ms in all lost once to the caller's tanh, stalled in a full test run)
    a = torch.randn(1024, 1024, requires_grad=True)
    b = torch.randn(1024, 1024, requires_grad=True)
    for step in range(4):
        y = project(a, b).tanh()  # caller
        y.sum().backward()
"""


def test_matmul_written_with_at_in_a_function(tmp_path):
    run, script, lines = _record(tmp_path, MATMUL_IN_FUNCTION)
    planted = _line_of(lines, "# planted")
    per_line = _per_line(run, script)
    assert max(per_line, key=lambda k: per_line[k]["ns"]) == planted, per_line
    assert per_line[planted]["backward_ns"] > 0  # MmBackward0 came back to `h @ b`


CUSTOM_FUNCTION = """\
    import torch


    class Smooth(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.tanh()

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            for _ in range(40):  # an expensive backward, written in Python
                grad = grad * (1 - x.tanh() ** 2)
            return grad


    torch.set_num_threads(1)
    w = torch.randn(128, 128, requires_grad=True)
    x = torch.randn(64, 128)
    for step in range(4):
        h = x @ w
        h.register_hook(lambda g: g * 0.5)
        y = Smooth.apply(h)  # planted
        y.sum().backward()  # backward call
"""


def test_custom_function_backward_and_hooks_land_on_the_forward_statement(tmp_path):
    run, script, lines = _record(tmp_path, CUSTOM_FUNCTION)
    planted, backward_call = _line_of(lines, "# planted"), _line_of(lines, "# backward call")
    per_line = _per_line(run, script)
    assert per_line[planted]["backward_ns"] > 3 * per_line.get(backward_call, {"ns": 0})["ns"], per_line
    top = analyze(run).findings[0]
    assert top.location.source == f"{script}:{planted}", top


def test_names_carry_no_memory_addresses(tmp_path):
    run, _, _ = _record(tmp_path, MATMUL_IN_FUNCTION)
    names = [n for (n,) in duckdb.sql(f"SELECT DISTINCT name FROM '{run}/rank=*/events.parquet'").fetchall()]
    assert any("run_backward" in n for n in names)
    assert not [n for n in names if " at 0x" in n]


@pytest.fixture(params=["callback", "mode"])
def statement_kind(request, monkeypatch):
    """Each way of linking statements (statements.StatementHook): the C++ converter's line callback
    (where it is built and supported) and the TorchFunctionMode (forced)."""
    from neuron_explorer.collectors import native, statements

    if request.param == "mode":
        monkeypatch.setattr(statements, "uses_native", lambda module: False)
    elif not statements.uses_native(native.load()):
        pytest.skip("the C++ converter's statement lines are not available here")
    return request.param


def test_profiling_leaves_no_torch_function_mode_behind(tmp_path, statement_kind):
    import torch

    import neuron_explorer as nx
    from neuron_explorer.collectors import statements

    before = torch._C._len_torch_function_stack()
    with pytest.raises(RuntimeError):
        with nx.profile(tmp_path / "run"):
            torch.ones(2) @ torch.ones(2)
            raise RuntimeError("boom")
    assert torch._C._len_torch_function_stack() == before and not statements._NATIVE_IN_USE
    with nx.profile(tmp_path / "run2") as prof:
        assert prof._statements.kind == statement_kind
        # the mode is on this thread's stack; the callback is no mode at all
        assert torch._C._len_torch_function_stack() == before + (statement_kind == "mode")
        assert len(statements._NATIVE_IN_USE) == (statement_kind == "callback")
    assert torch._C._len_torch_function_stack() == before and not statements._NATIVE_IN_USE


def test_statement_lines_cause_no_graph_break_under_compile(tmp_path):
    import torch
    import torch._dynamo.utils as dynamo_utils

    import neuron_explorer as nx

    @torch.compile(backend="eager")
    def f(x):
        return (x @ x.T + 1).softmax(-1)[0] * 2

    torch._dynamo.reset()
    dynamo_utils.counters.clear()
    x = torch.randn(8, 8)
    with nx.profile(tmp_path / "run"):
        got = f(x)
    assert torch.allclose(got, (x @ x.T + 1).softmax(-1)[0] * 2)
    assert not dynamo_utils.counters["graph_break"], dict(dynamo_utils.counters["graph_break"])
    assert dynamo_utils.counters["stats"]["unique_graphs"] == 1


SLOW_GETITEM = """\
    import time

    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset


    class Samples(Dataset):
        def __len__(self):
            return 256

        def __getitem__(self, i):
            x = torch.randn(32)
            time.sleep(0.002)  # planted: a slow decode
            return x, i % 4


    torch.set_num_threads(1)
    model = nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(DataLoader(Samples(), batch_size=8)):  # the loop
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step == 5:
            break
"""


def test_slow_getitem_names_the_line_inside_it_not_the_loop(tmp_path):
    run, script, lines = _record(tmp_path, SLOW_GETITEM)
    planted = _line_of(lines, "# planted")
    report = analyze(run)
    top = report.findings[0]
    assert top.rule_id == "input-pipeline" and top.location.source == f"{script}:{planted}", top
    # its Python-level time (time.sleep) is the line's: 8 samples x 2 ms per fetch at least
    with open_run(run) as r:
        hot = {row["source"]: row for row in line_times(r, 0)}
    assert hot[f"{script}:{planted}"]["python_ns"] >= 6 * 8 * 2_000_000


COMPILED = """\
    import torch


    @torch.compile(backend="eager")
    def block(x, w):
        h = x @ w
        for _ in range(20):
            h = torch.nn.functional.gelu(h) * 0.5 + h
        return h


    torch.set_num_threads(1)
    w = torch.randn(128, 128, requires_grad=True)
    x = torch.randn(64, 128)
    for step in range(4):
        y = block(x, w)  # planted
        y.sum().backward()  # backward call
"""


def test_compiled_region_lands_on_the_line_that_called_it(tmp_path):
    run, script, lines = _record(tmp_path, COMPILED)
    planted, _backward_call = _line_of(lines, "# planted"), _line_of(lines, "# backward call")
    decorator = _line_of(lines, "@torch.compile")
    # the compiled region's running time (compiling is one range of its own per compile, below)
    per_line = _per_line(run, script, f"NOT {compile_range('e')}")
    assert per_line[planted]["backward_ns"] > 0, per_line  # CompiledFunctionBackward on the calling statement
    assert max(per_line, key=lambda k: per_line[k]["ns"]) == planted, per_line
    assert decorator not in per_line, per_line  # not the compiled code's entry line
    # compiling: `torch.compile(...)` on the decorator that calls it, the function's compile on the call that triggered it
    compiling = _per_line(run, script, compile_range("e"))
    assert set(compiling) == {decorator, planted}, compiling
    # and the report names no compile as an operator or a statement to make cheaper (before: "Hotspot source line:
    # train.py:4 `@torch.compile(backend="eager")` takes 49.4%", advising shapes and dtype for an import of Dynamo):
    # compile time is the compile-time rule's alone, per compiled function
    findings = analyze(run).findings
    others = [f for f in findings if f.rule_id != "compile-time"]
    assert not any((f.location.op or "").startswith(COMPILE_NAME_PREFIX) for f in others), [f.title for f in findings]
    assert not any(f.location.source == f"{script}:{decorator}" for f in others), [f.title for f in findings]
    compile_time = {f.evidence.values["function"].split(" (")[0]: f.location.source for f in findings if f.rule_id == "compile-time"}
    assert compile_time == {"setup": f"{script}:{decorator}", "block": f"{script}:{planted}"}, compile_time


def test_dataloader_workers_forked_while_profiling_drop_the_mode(tmp_path, statement_kind):
    import torch
    from torch.utils.data import DataLoader, Dataset

    import neuron_explorer as nx
    from neuron_explorer.collectors import statements

    class ModeDepth(Dataset):  # the mode's depth and whether the line callback is on, in the worker
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.tensor([torch._C._len_torch_function_stack(), len(statements._NATIVE_IN_USE)])

    before = torch._C._len_torch_function_stack()
    with nx.profile(tmp_path / "run"):
        in_workers = [x.flatten().tolist() for x in DataLoader(ModeDepth(), batch_size=1, num_workers=2, multiprocessing_context="fork")]
        in_main = [torch._C._len_torch_function_stack(), len(statements._NATIVE_IN_USE)]
    mode = statement_kind == "mode"
    assert in_main == [before + mode, 1 - mode] and in_workers == [[before, 0]] * 4
