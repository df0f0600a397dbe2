"""torch.compile's graph breaks, recompiles and compile time as findings (issue 39, item 2).

Hand-built Kineto trace, three steps of 1000 µs (T = 1000 x (k - 1)), one thread:

    ProfilerStep#k [T ............................................................ T+1000]
    step 1: torch.compile: loss_fn (train.py:8) [T+10 .. T+90]       (80, a top-level compile)
              graph break (train.py:11, "Unsupported Tensor.item() call")  at T+80
    every:  Torch-Compiled Region: 0/0 [T+100 ................................ T+600]
              CompiledFunction [T+110 .. T+310]    graph 1: 200
              aten::item       [T+320 .. T+370]    eager, between the graphs
              Torch-Compiled Region: 1/0 [T+400 ........ T+590]
                CompiledFunction [T+420 .. T+560]  graph 2: 140
    step 2: evaluate_function: CompiledFunctionBackward [T+650 ........ T+950]  (300, top-level)
              torch.compile: backward of loss_fn (train.py:8) [T+660 .. T+860]  (200, inside it)
    step 3: torch.compile: shaped (train.py:30) [T+700 .. T+900]     (200, a recompile)
              recompile (guard "tensor 'x' size mismatch at index 0. expected 4, actual 5") at T+850

Right answers: outside the compiled graphs, per step, 500 (the region) - 200 - 140 = 160 µs
(the compile ranges lie outside the regions): 480 µs over the 3 steps, 16% of 3000 µs.
Compile time: loss_fn 80 + 200 = 280 µs (a compile and its backward's), shaped 200 µs; the
recompile cost 200 µs. The lines' CPU time: the regions 3 x 500 + the backward 300 - its compile 200.
The summary's top-level operators: the regions 1500 µs, the backward node 100 µs (its 200 of
compiling apart); no compile range among them; compiling 80 + 200 + 200 = 480 µs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from neuron_explorer.analyzers import analyze, lines, render, summary
from neuron_explorer.analyzers.rules import compile_time, graph_break
from neuron_explorer.collectors import compiled
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import open_run
from neuron_explorer.vocab import GRAPH_BREAK_EVENT, RECOMPILE_EVENT

from .conftest import X, workload_env, write_trace

US = 1000
REASON = "Unsupported Tensor.item() call with capture_scalar_outputs=False"
GUARD = "tensor 'x' size mismatch at index 0. expected 4, actual 5"


def _trace(breaks: bool = True) -> list[dict]:
    ev = [X("train.py(20): <module>", "python_function", 0, 3000)]
    for k in (1, 2, 3):
        t = 1000 * (k - 1)
        ev += [X(f"ProfilerStep#{k}", "user_annotation", t, 1000),
               X("Torch-Compiled Region: 0/0", "cpu_op", t + 100, 500), X("CompiledFunction", "cpu_op", t + 110, 200),
               X("aten::item", "cpu_op", t + 320, 50), X("Torch-Compiled Region: 1/0", "cpu_op", t + 400, 190),
               X("CompiledFunction", "cpu_op", t + 420, 140)]
    ev += [X("torch.compile: loss_fn (train.py:8)", "cpu_op", 10, 80)]
    if breaks:
        ev += [X("train.py(11): loss_fn", "python_function", 79, 3),
               X(GRAPH_BREAK_EVENT, "cpu_op", 80, 1, reason=REASON, hint="Set capture_scalar_outputs", function="loss_fn (train.py:8)",
                 compile_id="0/0")]
    ev += [X("autograd::engine::evaluate_function: CompiledFunctionBackward", "cpu_op", 1650, 300),
           X("torch.compile: backward of loss_fn (train.py:8)", "cpu_op", 1660, 200),
           X("torch.compile: shaped (train.py:30)", "cpu_op", 2700, 200), X("train.py(30): shaped", "python_function", 2849, 3),
           X(RECOMPILE_EVENT, "cpu_op", 2850, 1, guard=GUARD, function="shaped (train.py:30)", compile_id="2/1")]
    return ev


def _run(tmp_path: Path, **kw):
    return import_traces(write_trace(tmp_path / "t.json", _trace(**kw)), tmp_path / "run").run_dir


def _findings(report, rule_id):
    return [f for f in report.findings if f.rule_id == rule_id]


def test_the_figures_of_a_hand_built_run(tmp_path):
    run_dir = _run(tmp_path)
    run = open_run(run_dir)
    per_step = run.sql(graph_break.outside_graphs_sql(0)).fetchall()
    assert per_step == [(1, 500 * US, 340 * US, 160 * US), (2, 500 * US, 340 * US, 160 * US), (3, 500 * US, 340 * US, 160 * US)]
    report = analyze(run_dir, write=False)
    assert not [w for w in report.warnings if "failed" in w], report.warnings
    (brk,) = _findings(report, "graph-break")
    v = brk.evidence.values
    assert v["breaks"] == [{"source": "train.py:11", "reason": REASON, "hint": "Set capture_scalar_outputs",
                            "function": "loss_fn (train.py:8)", "count": 1}]
    assert v["outside_graphs_ns"] == brk.impact_ns == 480 * US and v["outside_graphs_per_step_ns"] == 160 * US
    assert brk.impact_share == pytest.approx(0.16) and brk.location.source == "train.py:11" and brk.category == "compilation"
    assert "train.py:11" in brk.title and REASON in brk.title and "0.16 ms per steady step" in brk.recommendation
    (rec,) = _findings(report, "recompile")
    assert rec.evidence.values == {"function": "shaped (train.py:30)", "recompiles": 1, "guards": [GUARD], "compile_ns": 200 * US,
                                   "in_steps_ns": 200 * US}
    assert rec.location.source == "train.py:30" and rec.impact_ns == 200 * US and "dynamic=True" in rec.recommendation
    times = {f.evidence.values["function"]: f for f in _findings(report, "compile-time")}
    assert {k: (f.evidence.values["compile_ns"], f.evidence.values["compiles"], f.evidence.values["backward_compiles"])
            for k, f in times.items()} == {"loss_fn (train.py:8)": (280 * US, 1, 1), "shaped (train.py:30)": (200 * US, 1, 0)}
    assert times["loss_fn (train.py:8)"].evidence.values["span_share"] == pytest.approx(280 / 3000, abs=1e-6)
    assert times["loss_fn (train.py:8)"].impact_ns == 280 * US  # all of it inside the steps: warm-up advice
    assert "before profiling" in times["loss_fn (train.py:8)"].recommendation
    assert "recompile finding" in times["shaped (train.py:30)"].recommendation
    # compile time is compile-time's alone: out of the lines' CPU time, top-level or inside an operator
    inside = run.sql(f"SELECT e.name, c.compile_ns FROM ({lines.compile_inside_sql(0)}) c JOIN events e ON e.event_id = c.top_op_id").fetchall()
    assert inside == [("autograd::engine::evaluate_function: CompiledFunctionBackward", 200 * US)]
    total = run.sql(f"SELECT sum(cpu_ns) FROM ({lines.frame_times_sql(0)})").fetchone()[0]
    assert total == (3 * 500 + 300 - 200) * US
    # the hotspot operator: the regions' 1500 µs (50%), the backward node's 300 less its 200 of compiling
    hot = {f.location.op: f.evidence.values["cpu_ns"] for f in _findings(report, "hotspot") if f.location.op}
    assert hot == {"Torch-Compiled Region: 0/0": 1500 * US}, hot
    # the summary's top-level operators: the backward node without its compile, no compile range as an
    # operator; the compiling apart: loss_fn 80 + its backward 200 + shaped 200
    (rank,) = report.summary["ranks"]
    assert [(o["name"], o["calls"], o["cpu_ns"], o["compile_ns"]) for o in rank["top_level_ops"]] == [
        ("Torch-Compiled Region: 0/0", 3, 1500 * US, 0),
        ("autograd::engine::evaluate_function: CompiledFunctionBackward", 1, 100 * US, 200 * US)]
    assert rank["compile_ns"] == 480 * US
    text = render.text(report, width=200)
    assert ("CPU only; top operators: Torch-Compiled Region: 0/0 1.50 ms, "
            "autograd::engine::evaluate_function: CompiledFunctionBackward 100.00 µs") in text, text
    assert "torch.compile: 480.00 µs compiling, left out of the operators' and lines' time" in text, text
    # the same figures when the summary is made for many ranks at once
    (many,) = summary.rank_summaries(run, [0]).values()
    assert many["top_level_ops"] == rank["top_level_ops"] and many["compile_ns"] == rank["compile_ns"]


def test_no_break_no_graph_break_finding(tmp_path):
    report = analyze(_run(tmp_path, breaks=False), write=False)
    assert _findings(report, "graph-break") == []
    assert _findings(report, "recompile")  # the others stand on their own records


def test_compile_records_become_events_on_their_statements():
    import pyarrow as pa

    from neuron_explorer.collectors.raw import RAW_EVENTS

    names = ["torch.compile: f (a.py:3)", compiled.RECORD_MARK + "1", compiled.RECORD_MARK + "0", "aten::add"]
    events = pa.table({"category": ["cpu_op"] * 4, "name": names, "phase": ["X"] * 4, "ts_ns": [0, 5, 6, 8], "dur_ns": [10, 1, 1, 1],
                       "pid": [1] * 4, "tid": [1] * 4, "pid_text": [None] * 4, "tid_text": [None] * 4, "correlation": [None] * 4,
                       "external_id": [None] * 4, "stream": [None] * 4,
                       "args": [None, None, None, '{"x": 1}'], "frame_index": [7, 7, 7, 7], "module_path": [None] * 4},
                      schema=RAW_EVENTS)
    records = [{"event": GRAPH_BREAK_EVENT, "reason": "r", "hint": None, "function": "f (a.py:3)", "compile_id": "0/0",
                "stack": [("/lib/torch/x.py", 1, "t"), ("a.py", 4, "f"), ("a.py", 5, "g")]},
               {"event": RECOMPILE_EVENT, "guard": "g", "function": "f (a.py:3)", "compile_id": "0/1", "stack": [("a.py", 3, "f")]}]
    interned = []

    def intern(file, line, function, parent):
        interned.append((file, line, function, parent))
        return 100 + len(interned) - 1

    out, named = compiled.name_compile_records(events, records, intern, lambda f: not f.startswith("/lib/"))
    assert named == 2
    assert out["name"].to_pylist() == ["torch.compile: f (a.py:3)", RECOMPILE_EVENT, GRAPH_BREAK_EVENT, "aten::add"]
    assert [json.loads(a) if a else None for a in out["args"].to_pylist()] == [
        None, {"guard": "g", "function": "f (a.py:3)", "compile_id": "0/1"},
        {"reason": "r", "function": "f (a.py:3)", "compile_id": "0/0"}, {"x": 1}]
    # the user frames, outermost first, under the line the range was recorded on (7); torch's frame left out
    assert interned == [("a.py", 3, "f", 7), ("a.py", 4, "f", 7), ("a.py", 5, "g", 101)]
    assert out["frame_index"].to_pylist() == [7, 100, 102, 7]
    assert out.schema == events.schema


def test_breaks_made_before_profiling_become_records_once_each():
    import traceback
    from types import SimpleNamespace as NS

    import neuron_explorer

    at = [traceback.FrameSummary("/w/train.py", 11, "loss_fn")]
    reason = "Unsupported Tensor.item() call with capture_scalar_outputs=False\n  Explanation: ...\n  Hint: Set capture_scalar_outputs"
    own = [traceback.FrameSummary(neuron_explorer.__file__, 5, "hook")]
    reasons = [NS(reason=reason, user_stack=at), NS(reason=reason, user_stack=at),  # noted twice (Dynamo restarted its analysis)
               NS(reason="Failed to trace builtin operator", user_stack=at), NS(reason="x", user_stack=own)]
    utils = NS(get_compilation_metrics=lambda: [NS(co_name="loss_fn", co_filename="/w/train.py", co_firstlineno=8)])
    assert compiled.earlier_breaks(reasons, utils) == [
        {"event": GRAPH_BREAK_EVENT, "reason": REASON, "hint": "Set capture_scalar_outputs", "function": "loss_fn (train.py:8)",
         "compile_id": None, "stack": [("/w/train.py", 11, "loss_fn")]},
        {"event": GRAPH_BREAK_EVENT, "reason": "Failed to trace builtin operator", "hint": None, "function": "loss_fn (train.py:8)",
         "compile_id": None, "stack": [("/w/train.py", 11, "loss_fn")]}]


def test_guard_text_is_the_failed_guard_alone():
    assert compiled._guard_text("2/0: ___stack0 == 1.37       # if loss.item() > 1e6:  # train.py:11 in f\nUser stack") == \
        "___stack0 == 1.37"
    assert compiled._guard_text("0/0: tensor 'x' size mismatch at index 0. expected 4, actual 5") == GUARD


# ---- recorded: torch.compile'd code as users write it ------------------------------------------------

SCRIPT = '''
import torch
import torch._dynamo.config as dynamo_config
import neuron_explorer as nx

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def loss_fn(x, y):
    loss = ((model(x) - y) ** 2).mean()
    print("loss", loss.item())  # BREAK
    return loss


def whole(x):
    return (x.sin() * x.cos()).sum()


def shaped(x):
    return x.relu() + 1


before = (dynamo_config.capture_scalar_outputs, dynamo_config.recompile_limit)
step, whole_c, shaped_c = (torch.compile(f, backend="aot_eager") for f in (loss_fn, whole, shaped))
x, y = torch.randn(8, 16), torch.randn(8, 1)
with nx.profile({run!r}) as prof:
    for i in range(3):
        if {breaks}:
            step(x, y).backward()  # CALL
        whole_c(x)
        if {breaks}:
            shaped_c(torch.randn(4 + i))  # SHAPED
        prof.step()
print("SETTINGS", before == (dynamo_config.capture_scalar_outputs, dynamo_config.recompile_limit),
      torch._dynamo.convert_frame._compile.__name__)
'''


def _record(tmp_path: Path, breaks: bool):
    source = textwrap.dedent(SCRIPT.format(run=str(tmp_path / "run"), breaks=breaks))
    (tmp_path / "train.py").write_text(source)
    line = {tag: n for n, text in enumerate(source.splitlines(), 1) for tag in ("BREAK", "CALL", "SHAPED") if f"# {tag}" in text}
    done = subprocess.run([sys.executable, str(tmp_path / "train.py")], capture_output=True, text=True, timeout=1200, cwd=tmp_path,
                          env=workload_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SETTINGS True _compile" in done.stdout  # the user's Dynamo settings as they were; Dynamo's compile unwrapped
    return tmp_path / "run", line


@pytest.mark.slow
def test_a_recorded_graph_break_and_recompile_are_found_on_their_lines(tmp_path: Path):
    run_dir, line = _record(tmp_path, breaks=True)
    report = analyze(run_dir, write=False)
    assert not [w for w in report.warnings if "failed" in w], report.warnings
    (brk,) = _findings(report, "graph-break")
    assert brk.location.source.endswith(f"train.py:{line['BREAK']}"), brk.location
    assert "Tensor.item()" in brk.title and brk.evidence.values["outside_graphs_per_step_ns"] > 0
    assert brk.impact_ns <= report.summary["ranks"][0]["analysed_ns"]
    recompiled = {f.evidence.values["function"]: f for f in _findings(report, "recompile")}
    (shaped,) = [f for k, f in recompiled.items() if k.startswith("shaped (train.py:")]
    assert any("size mismatch" in g for g in shaped.evidence.values["guards"]), shaped.evidence.values
    assert shaped.evidence.values["compile_ns"] > 0 and "dynamic=True" in shaped.recommendation
    timed = {f.evidence.values["function"].split(" (")[0] for f in _findings(report, "compile-time")}
    assert {"loss_fn", "whole"} <= timed and "__torch_function__" not in timed, timed  # never Neuron Explorer's statement hook
    # nothing of the compile reported as a hot line or operator
    assert all("torch.compile" not in f.title and "Compiled Region" not in f.title for f in _findings(report, "hotspot"))
    # the summary: no compile among the top-level operators (before: `torch.compile: loss_fn (train.py:10)` first,
    # 16.8 s), the compiles inside the first calls taken out of them, and compiling given apart, all of it
    rank = report.summary["ranks"][0]
    assert not [o["name"] for o in rank["top_level_ops"] if o["name"].startswith("torch.compile")]
    assert any(o["compile_ns"] > 0 for o in rank["top_level_ops"])  # the resume functions' compiles inside the region
    with open_run(run_dir) as run:
        per_function = run.sql(f"SELECT sum(compile_ns) FROM ({compile_time.compile_time_sql(0)})").fetchone()[0]
    assert rank["compile_ns"] == per_function > 0


@pytest.mark.slow
def test_a_model_that_compiles_whole_has_no_graph_break_finding(tmp_path: Path):
    run_dir, _ = _record(tmp_path, breaks=False)
    report = analyze(run_dir, write=False)
    assert _findings(report, "graph-break") == [] and _findings(report, "recompile") == []
    assert [f.evidence.values["function"].split(" (")[0] for f in _findings(report, "compile-time")] == ["whole"]


WARMED_UP = '''
import torch
import neuron_explorer as nx

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


@torch.compile(backend="aot_eager")
def loss_fn(x, y):
    loss = ((model(x) - y) ** 2).mean()
    seen = loss.item()  # BREAK
    return loss * (seen > -1)


x, y = torch.randn(8, 16), torch.randn(8, 1)
loss_fn(x, y).backward()  # warm-up: compiled here, before profiling
with nx.profile({run!r}) as prof:
    for i in range(3):
        loss_fn(x, y).backward()
        prof.step()
'''


@pytest.mark.slow
def test_a_graph_break_of_a_model_compiled_before_profiling_is_found_on_its_line(tmp_path: Path):
    """Before: a model compiled in a warm-up call had no graph-break finding (no compile while profiling)."""
    source = textwrap.dedent(WARMED_UP.format(run=str(tmp_path / "run")))
    (tmp_path / "train.py").write_text(source)
    (line,) = [n for n, text in enumerate(source.splitlines(), 1) if "# BREAK" in text]
    (first,) = [n for n, text in enumerate(source.splitlines(), 1) if text.startswith("@torch.compile")]  # (co_firstlineno)
    done = subprocess.run([sys.executable, str(tmp_path / "train.py")], capture_output=True, text=True, timeout=1200, cwd=tmp_path,
                          env=workload_env())
    assert done.returncode == 0, done.stderr[-3000:]
    report = analyze(tmp_path / "run", write=False)
    (brk,) = _findings(report, "graph-break")
    assert brk.location.source.endswith(f"train.py:{line}"), brk.location
    assert f"train.py:{line}" in brk.title and "Tensor.item()" in brk.title, brk.title
    assert [b["function"] for b in brk.evidence.values["breaks"]] == [f"loss_fn (train.py:{first})"]
    assert brk.evidence.values["outside_graphs_per_step_ns"] > 0
    assert _findings(report, "compile-time") == []  # nothing compiled while profiling
    assert report.summary["ranks"][0]["compile_ns"] == 0


def _steps_with_a_recompile() -> list[dict]:
    """Eight steps of one thread; every step calls a compiled function from train.py:19 (its
    `Torch-Compiled Region`, 660 µs) and train.py:25 runs an aten::copy_ (50 µs). In step 5 the
    function recompiles inside its region (3,000 µs) and the copy takes 150 µs.

    Right answer: step 5 is the slow step (4,000 µs against a 1,000 µs median); per slow step
    compiling grew 3,000 µs and train.py:25 100 µs; train.py:19's own time did not grow."""
    ev, t = [], 0
    for k in range(1, 9):
        d = 4000 if k == 5 else 1000
        ev += [X(f"ProfilerStep#{k}", "user_annotation", t, d),
               X("train.py(19): <module>", "python_function", t + 10, d - 300),
               X("Torch-Compiled Region: 0/0", "cpu_op", t + 20, d - 340),
               X("train.py(25): <module>", "python_function", t + d - 280, 200),
               X("aten::copy_", "cpu_op", t + d - 270, 150 if k == 5 else 50)]
        if k == 5:
            ev += [X("torch.compile: fn (train.py:30)", "cpu_op", t + 100, 3000)]
        t += d
    return ev


def test_a_step_slowed_by_a_recompile_names_the_compile_not_the_calling_line(tmp_path):
    """Before: 'In slow steps train.py:19 takes 3.00 ms more per step than in the others' (the
    recompile inside the compiled function's region counted as the calling line's time)."""
    run_dir = import_traces(write_trace(tmp_path / "t.json", _steps_with_a_recompile()), tmp_path / "run").run_dir
    (f,) = _findings(analyze(run_dir, write=False), "step-outliers")
    assert f.evidence.values["compile_grew_ns"] == 3000 * US
    assert f.evidence.values["grew_source"] is None
    assert "torch.compile compiles for 3.00 ms more per step" in f.recommendation, f.recommendation
    assert "train.py:19" not in f.recommendation


def test_compile_rules_check_only_the_ranks_with_compile_records(tmp_path, monkeypatch):
    """A job of three ranks where only rank 0 compiled: the compile rules' screens pass rank 0 alone
    (one query for the batch, not three checks a rank), and rank 0's findings are those it has alone."""
    from neuron_explorer.analyzers.rules import recompile

    plain = [X("train.py(20): <module>", "python_function", 0, 3000)] + [
        e for k in (1, 2, 3) for e in (X(f"ProfilerStep#{k}", "user_annotation", 1000 * (k - 1), 1000),
                                       X("aten::mm", "cpu_op", 1000 * (k - 1) + 100, 500))]
    for r, events in enumerate((_trace(), plain, plain)):
        write_trace(tmp_path / "traces" / f"rank{r}.json", events, distributedInfo={"rank": r, "world_size": 3})
    run_dir = import_traces(tmp_path / "traces", tmp_path / "run").run_dir
    checked = []
    for rule in (compile_time, graph_break, recompile):
        real = rule.check
        monkeypatch.setattr(rule, "check", lambda ctx, real=real: checked.append((ctx.rule.RULE_ID, ctx.rank)) or real(ctx))
    report = analyze(run_dir, write=False, workers=1)
    assert sorted(checked) == [("compile-time", 0), ("graph-break", 0), ("recompile", 0)]
    alone = analyze(_run(tmp_path / "alone"), write=False)
    ids = ("compile-time", "graph-break", "recompile")
    got = [(f.rule_id, f.title, f.impact_ns, f.location.rank) for f in report.findings if f.rule_id in ids]
    assert got == [(f.rule_id, f.title, f.impact_ns, 0) for f in alone.findings if f.rule_id in ids]
    assert {f.rule_id for f in alone.findings} >= set(ids)


def test_the_screens_conditions_answered_in_one_scan_are_each_screens_own(tmp_path):
    """The rules' SCREEN_WHERES asked together (ranks_with_many: one scan of the batch) give each
    condition the ranks its own query gives: rank 0 compiled, ranks 1 and 2 did not, no rank has
    an allocator call, every rank has Python frames."""
    from neuron_explorer.analyzers.rules import _util, allocator_churn, recompile
    from neuron_explorer.store import Run

    plain = [X("train.py(20): <module>", "python_function", 0, 3000), X("ProfilerStep#1", "user_annotation", 0, 1000)]
    for r, events in enumerate((_trace(), plain, plain)):
        write_trace(tmp_path / "traces" / f"rank{r}.json", events, distributedInfo={"rank": r, "world_size": 3})
    run_dir = import_traces(tmp_path / "traces", tmp_path / "run").run_dir
    wheres = [*compile_time.SCREEN_WHERES, *graph_break.SCREEN_WHERES, *recompile.SCREEN_WHERES,
              *allocator_churn.SCREEN_WHERES, "kind = 'python'", "dur_ns > NULL"]
    summaries = {0: {}, 1: {}, 2: {}}
    with open_run(run_dir) as run:
        alone = {w: _util.ranks_with(run, w, summaries) for w in wheres}
        together = Run(run.path, run.manifest, run.con)
        _util.ranks_with_many(together, wheres)
        assert {w: _util.ranks_with(together, w, summaries) for w in wheres} == alone
    assert alone[compile_time.SCREEN_WHERES[0]] == {0} and alone["kind = 'python'"] == {0, 1, 2}
    assert alone[allocator_churn.SCREEN_WHERES[0]] == set() and alone["dur_ns > NULL"] == set()
