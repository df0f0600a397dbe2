"""torch.compile on its lines (issue 39): the compiler's Python calls left out, each generated
kernel's time on the user statements it came from (split evenly), forward and backward."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from neuron_explorer.analyzers import lines
from neuron_explorer.collectors import compiled
from neuron_explorer.collectors.raw import RAW_EVENTS
from neuron_explorer.vocab import top_op

from .conftest import TRACES as TRACES_DIR

# ---- the per-line figures over a hand-built run ----------------------------------------------
#
#  frames: 1 train.py:10 `loss = model(x)` (calls the compiled function)
#          2 model.py:5  `h = relu(l1(x))`       3 model.py:6 `h = h.sin().exp()`
#
#  forward:  Torch-Compiled Region (top op, frame 1) |......................100 ns..|
#              graph_0_cpp_fused_relu_0        30 ns   from frame 2
#              graph_0_cpp_fused_exp_sin_1     20 ns   from frames 2 and 3 (10 ns each)
#  backward: evaluate_function: CompiledFunctionBackward (top op, frame 1) |..50 ns..|
#              graph_1_cpp_fused_cos_mul_0     40 ns   from frame 3
#  device:   triton_poi_fused_relu_0 kernel    60 ns   launched from frame 1, from frame 2
#
#  right answer, cpu_ns:  frame 1 = 100 - 30 - 20 + 50 - 40 = 60; frame 2 = 30 + 10 = 40;
#                         frame 3 = 10 + 40 = 50 (total 150, the two top operators' time)
#  device_ns: frame 1 = 0, frame 2 = 60


def _charged(*shares):
    return json.dumps({"compiled_from": [{"frame_id": f, "share": s} for f, s in shares]})


EVENTS = [  # event_id, kind, name, dur_ns, pass, top_op_id, source_frame_id, args
    (10, "cpu_op", "Torch-Compiled Region: 0/0", 100, "forward", 10, 1, None),
    (11, "cpu_op", "graph_0_cpp_fused_relu_0", 30, "forward", 10, 1, _charged((2, 1.0))),
    (12, "cpu_op", "graph_0_cpp_fused_exp_sin_1", 20, "forward", 10, 1, _charged((2, 0.5), (3, 0.5))),
    (20, "cpu_op", "autograd::engine::evaluate_function: CompiledFunctionBackward", 50, "backward", 20, 1, None),
    (21, "cpu_op", "graph_1_cpp_fused_cos_mul_0", 40, "backward", 20, 1, _charged((3, 1.0))),
    (30, "kernel", "triton_poi_fused_relu_0", 60, "forward", 10, 1, _charged((2, 1.0))),
]


def _con(events=EVENTS) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("""CREATE TABLE events (event_id BIGINT, rank INT, kind VARCHAR, name VARCHAR, ts_ns BIGINT, dur_ns BIGINT,
      pass VARCHAR, top_op_id BIGINT, source_frame_id BIGINT, args VARCHAR, op_id BIGINT, self_ns BIGINT, step BIGINT)""")
    for eid, kind, name, dur, pass_, top, frame, args in events:
        con.execute("INSERT INTO events VALUES (?, 0, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, NULL)",
                    [eid, kind, name, dur, pass_, top, frame, args, top if kind == "cpu_op" else None, dur])
    con.execute("CREATE TABLE frames (frame_id BIGINT, rank INT, file VARCHAR, line INT, function VARCHAR, code VARCHAR, "
                "is_user BOOLEAN, line_kind VARCHAR, parent_frame_id BIGINT)")
    con.execute("""INSERT INTO frames VALUES (1, 0, 'train.py', 10, '<module>', NULL, TRUE, 'call', NULL),
      (2, 0, 'model.py', 5, 'forward', NULL, TRUE, 'call', 1), (3, 0, 'model.py', 6, 'forward', NULL, TRUE, 'call', 1)""")
    return con


def _figures(con, steps=None) -> dict[int, tuple]:
    rows = con.execute(lines.frame_times_sql(0, steps)).fetchall()
    return {r[0]: r[1:] for r in rows}


def test_compiled_kernels_move_to_their_statements_split_evenly():
    got = _figures(_con())
    fields = list(lines.LINE_FIELDS)
    cpu, cpu_bwd, dev = fields.index("cpu_ns"), fields.index("cpu_backward_ns"), fields.index("device_ns")
    assert {f: v[cpu] for f, v in got.items()} == {1: 60, 2: 40, 3: 50}
    assert {f: v[cpu_bwd] for f, v in got.items()} == {1: 10, 2: 0, 3: 40}
    assert {f: v[dev] for f, v in got.items()} == {1: 0, 2: 60, 3: 0}
    assert sum(v[cpu] for v in got.values()) == 150  # the two top operators: nothing made up, nothing lost
    assert {f: v[fields.index("calls")] for f, v in got.items()} == {1: 2, 2: 0, 3: 0}  # calls stay with the caller


def test_without_compiled_kernels_the_figures_are_the_operators():
    plain = [(e[0], e[1], e[2], e[3], e[4], e[5], e[6], None) for e in EVENTS]
    got = _figures(_con(plain))
    assert {f: v[2] for f, v in got.items()} == {1: 150}
    assert _figures(_con(plain), steps=[])[1][-1] == 0  # calls_in_steps column kept


def test_line_times_name_the_statement_inside_the_compiled_function():
    rows = _con().execute(f"SELECT source, cpu_ns FROM ({lines.line_times_sql(0)}) ORDER BY cpu_ns DESC").fetchall()
    assert rows == [("train.py:10", 60), ("model.py:6", 50), ("model.py:5", 40)]


class _Run:
    def __init__(self, con):
        self.sql = con.sql


def test_rules_screen_ranks_with_the_same_line_figures():
    # line_times_by_rank (the hotspot rule's screen) reads the figures line_times gives: the
    # compiled kernels' time on their statements, not all on the line that called the function
    got = sorted(lines.line_times_by_rank(_Run(_con()))[0])
    assert got == [(0, 40, 60), (0, 50, 0), (2, 60, 0)]
    same = _con().execute(f"SELECT calls, cpu_ns, device_ns FROM ({lines.line_times_sql(0)})").fetchall()
    assert got == sorted(same)


# ---- the collector's raw-table steps (pure) -----------------------------------------------------


def _raw(rows) -> pa.Table:
    """Raw events from (category, name, ts, dur, tid[, frame_index, args]) rows."""
    n = len(rows)
    text = pa.dictionary(pa.int32(), pa.string())
    cols = {
        "category": pa.array([r[0] for r in rows]).dictionary_encode().cast(text),
        "name": pa.array([r[1] for r in rows]).dictionary_encode().cast(text),
        "phase": pa.array(["X"] * n).dictionary_encode().cast(text),
        "ts_ns": pa.array([r[2] for r in rows], pa.int64()), "dur_ns": pa.array([r[3] for r in rows], pa.int64()),
        "pid": pa.array([1] * n, pa.int64()), "tid": pa.array([r[4] for r in rows], pa.int64()),
        "pid_text": pa.nulls(n, pa.string()), "tid_text": pa.nulls(n, pa.string()),
    }
    for name in ("correlation", "external_id", "stream"):
        cols[name] = pa.nulls(n, pa.int64())
    cols["args"] = pa.array([r[6] if len(r) > 6 else None for r in rows], pa.string())
    cols["frame_index"] = pa.array([r[5] if len(r) > 5 else -1 for r in rows], pa.int64())
    cols["module_path"] = pa.nulls(n, pa.string())
    return pa.table(cols, schema=RAW_EVENTS)


def test_python_calls_inside_compile_ranges_are_left_out():
    #  tid 1: [compile_fx_inner (dynamo_timed) 100..500]  python a (150..200) inside, python b (600..700) after
    #         [_compile.compile_inner (dynamo_timed) 90..520] around it; python c (500..530) crosses its end: kept
    #  tid 2: python d (150..200): another thread, kept
    raw = _raw([
        ("cpu_op", "_compile.compile_inner (dynamo_timed)", 90, 430, 1),
        ("cpu_op", "compile_fx_inner (dynamo_timed)", 100, 400, 1),
        ("python_function", "a", 150, 50, 1), ("python_function", "b", 600, 100, 1),
        ("python_function", "c", 500, 30, 1), ("python_function", "d", 150, 50, 2),
        ("cpu_op", "aten::empty", 160, 5, 1),
    ])
    kept, dropped = compiled.drop_compile_python(raw)
    assert dropped == 1
    assert kept["name"].to_pylist() == ["_compile.compile_inner (dynamo_timed)", "compile_fx_inner (dynamo_timed)", "b", "c", "d",
                                        "aten::empty"]
    assert compiled.drop_compile_python(_raw([("python_function", "a", 0, 5, 1)]))[1] == 0
    assert "1 Python calls" in compiled.compile_warning(1) and compiled.compile_warning(0) is None


def test_kernels_are_charged_to_the_statements_of_their_graph():
    stack5 = 'File "/src/model.py", line 5, in forward\n    h = relu(l1(x))\n'
    stack6 = 'File "/src/model.py", line 6, in forward\n    h = h.sin().exp()\n'
    lib = 'File "/site-packages/torch/nn/modules/linear.py", line 125, in forward\n    return F.linear(x)\n'
    provenance = {"KEYA": {"cpp_fused_relu_0": [stack5 + lib], "cpp_fused_exp_sin_1": [stack5, stack6, stack6]},
                  "KEYB": {"cpp_fused_relu_0": [stack6]}}
    raw = _raw([
        ("user_annotation", "## Call CompiledFxGraph KEYA ##", 100, 100, 1, 7),
        ("cpu_op", "graph_0_cpp_fused_relu_0", 110, 10, 1, 7),
        ("cpu_op", "graph_0_cpp_fused_exp_sin_1", 130, 10, 1, 7, '{"flops": 3}'),
        ("user_annotation", "## Call CompiledFxGraph KEYB ##", 300, 100, 1, 7),
        ("cpu_op", "graph_0_cpp_fused_relu_0", 310, 10, 1, 7),
        ("cpu_op", "graph_0_cpp_fused_gone_9", 320, 10, 1, 7),
    ])
    interned: dict[tuple, int] = {}

    def intern(file, line, function, parent):
        return interned.setdefault((file, line, parent), 100 + len(interned))

    count = compiled.ChargeCount()
    out = compiled.charge_kernels(raw, provenance, intern, lambda i: 1000 + i, lambda f: "site-packages" not in f, count)
    args = [json.loads(a) if a else None for a in out["args"].to_pylist()]
    f5, f6 = 1000 + interned[("/src/model.py", 5, 7)], 1000 + interned[("/src/model.py", 6, 7)]
    assert args[1] == {"compiled_from": [{"frame_id": f5, "share": 1.0}]}
    assert args[2] == {"flops": 3, "compiled_from": [{"frame_id": f5, "share": 0.5}, {"frame_id": f6, "share": 0.5}]}
    assert args[4] == {"compiled_from": [{"frame_id": f6, "share": 1.0}]}  # the same kernel name, in the other graph
    assert args[5] is None and (count.kernels, count.charged, count.unmatched) == (4, 3, {"cpp_fused_gone_9"})


def test_aten_calls_of_the_generated_code_are_charged_by_their_place_in_the_graph():
    #  graph A (cache off: its call range says None): cpp_fused_relu_0 (line 5), addmm #0 (line 5, through
    #  torch's linear.py), addmm #1 (line 6); graph B: mm #0 (line 6), mm #1 (line 5), cpp_fused_sum_0 (line 6)
    stack5 = 'File "/src/model.py", line 5, in forward\n    h = relu(l1(x))\n'
    stack6 = 'File "/src/model.py", line 6, in forward\n    return l2(h)\n'
    lib = 'File "/site-packages/torch/nn/modules/linear.py", line 125, in forward\n    return F.linear(x)\n'
    graph_a = compiled.graph_kernels({"cpp_fused_relu_0:1": [stack5], "extern_kernels.addmm:2": [stack5 + lib],
                                      "extern_kernels.addmm:3": [stack6]})
    graph_b = compiled.graph_kernels({"extern_kernels.mm:7": [stack6], "torch.ops.aten.mm.default:8": [stack5],
                                      "cpp_fused_sum_0:9": [stack6]})
    assert list(graph_a) == ["cpp_fused_relu_0", "aten::addmm#0", "aten::addmm#1"]
    assert list(graph_b) == ["aten::mm#0", "aten::mm#1", "cpp_fused_sum_0"]
    raw = _raw([
        ("cpu_op", "aten::addmm", 10, 5, 1, 7),  # eager, outside every graph call: not a kernel of the code
        ("user_annotation", "## Call CompiledFxGraph None ##", 100, 100, 1, 7),
        ("cpu_op", "graph_0_cpp_fused_relu_0", 110, 10, 1, 7),
        ("cpu_op", "aten::addmm", 130, 20, 1, 7),
        ("cpu_op", "aten::addmm", 135, 5, 1, 7),  # inside the one above: not a call of the code
        ("cpu_op", "aten::addmm", 160, 20, 1, 7),
        ("user_annotation", "## Call CompiledFxGraph None ##", 300, 100, 1, 7),
        ("cpu_op", "aten::mm", 310, 10, 1, 7), ("cpu_op", "aten::mm", 330, 10, 1, 7),
        ("cpu_op", "graph_1_cpp_fused_sum_0", 350, 10, 1, 7),
        ("user_annotation", "## Call CompiledFxGraph None ##", 500, 100, 1, 7),
        ("cpu_op", "aten::mm", 510, 10, 1, 7), ("cpu_op", "aten::mm", 530, 10, 1, 7), ("cpu_op", "aten::mm", 550, 10, 1, 7),
    ])
    interned: dict[tuple, int] = {}
    count = compiled.ChargeCount()
    out = compiled.charge_kernels(raw, {"#1": graph_a, "#2": graph_b}, lambda f, n, fn, p: interned.setdefault(n, len(interned)),
                                  lambda i: 1000 + i, lambda f: "site-packages" not in f, count)
    line_of = {1000 + i: n for n, i in interned.items()}
    charged = [[line_of[c["frame_id"]] for c in json.loads(a)["compiled_from"]] if a else None for a in out["args"].to_pylist()]
    assert charged == [None, None, [5], [5], None, [6], None, [6], [5], [6], None, [6], [5], None], charged
    # the third mm of a call to a graph with two is counted, not charged
    assert (count.kernels, count.charged, count.unmatched) == (9, 8, {"aten::mm#2"})


# ---- a real torch.compile'd model, recorded on the CPU --------------------------------------------

MODEL = '''
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(256, 256)
        self.l2 = torch.nn.Linear(256, 8)

    def forward(self, x):
        h = self.l1(x)
        for _ in range(12):
            h = torch.sin(h) * torch.cos(h) + torch.tanh(h)  # PLANTED heavy statement
        return self.l2(h).sum()
'''

SCRIPT = '''
import sys, torch
sys.path.insert(0, {here!r})
import torch._inductor.config as config
import neuron_explorer as nx
from block import Block

torch.manual_seed(0)
model = Block()
compiled = torch.compile(model)
x = torch.randn(512, 256)
before = (config.cpp.enable_kernel_profile, config.trace.provenance_tracking_level, config.fx_graph_cache)
# compiled in the schedule's wait step (no events recorded), with the collector's Inductor settings on
with nx.profile({run!r}, schedule=nx.schedule(wait=1, warmup=1, active=2)) as prof:
    for _ in range(4):
        loss = compiled(x)
        loss.backward()
        prof.step()
print("SETTINGS", before, (config.cpp.enable_kernel_profile, config.trace.provenance_tracking_level, config.fx_graph_cache))
'''


@pytest.mark.slow
def test_a_recorded_compiled_model_names_the_statement_inside_it(tmp_path: Path):
    from neuron_explorer.analyzers import analyze
    from neuron_explorer.store import open_run

    (tmp_path / "block.py").write_text(MODEL)
    run_dir = tmp_path / "run"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT.format(here=str(tmp_path), run=str(run_dir))))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=2400, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SETTINGS (False, 0, True) (False, 0, True)" in done.stdout  # the user's Inductor settings, untouched after profiling
    run = open_run(run_dir)
    # the generated kernel of the planted statement's sin/cos/tanh is charged to it, whole; the one
    # of the l2 output's sum to its statement; the backward's fused kernel to both forward statements
    # (ordered by the tag itself: `ORDER BY 1` inside an aggregate orders by the constant 1, in any order)
    charged_to = dict(run.sql("""SELECT name, string_agg(DISTINCT tag, ' ' ORDER BY tag) FROM (
      SELECT k.name, f.line::VARCHAR || '@' || k.c.share::VARCHAR AS tag
      FROM (SELECT name, unnest(from_json(json_extract(args, '$.compiled_from'), '[{"frame_id": "BIGINT", "share": "DOUBLE"}]')) AS c
            FROM events) k JOIN frames f ON f.frame_id = k.c.frame_id) GROUP BY 1""").fetchall())
    assert charged_to["graph_0_cpp_fused_add_cos_mul_sin_tanh_0"] == "14@1.0", charged_to
    assert charged_to["graph_0_cpp_fused_sum_1"] == "15@1.0", charged_to
    assert any(v == "14@0.5 15@0.5" for k, v in charged_to.items() if "backward" in k), str(charged_to)
    # the generated code's calls of aten::addmm (l1, l2) and of aten::mm in the backward, each on its Linear's statement
    assert charged_to["aten::addmm"] == "12@1.0 15@1.0" and charged_to["aten::mm"] == "12@1.0 15@1.0", charged_to
    figures = {r["source"].rsplit("/", 1)[-1]: r for r in lines.line_times(run, 0)}
    assert figures["block.py:14"]["cpu_ns"] > figures["block.py:14"]["cpu_backward_ns"] > 0, figures  # forward and backward
    kernels, charged = run.sql("SELECT count(*), count(*) FILTER (WHERE args LIKE '%compiled_from%') FROM events "
                               "WHERE name LIKE 'graph_%cpp_fused%'").fetchone()
    assert kernels > 0 and charged / kernels >= 0.9
    # info says how many kernel calls were charged: the calls that carry their statements in the run
    from neuron_explorer.info import render_info, run_info
    info = run_info(run_dir)
    all_charged = run.sql("SELECT count(*) FROM events WHERE args LIKE '%compiled_from%'").fetchone()[0]
    assert info["ranks"][0]["data_quality"]["compiled_kernels_charged"] == all_charged
    assert f"compiled kernels: {all_charged} of " in render_info(info)
    moved = run.sql(f"SELECT sum(cpu_ns) FROM ({lines.frame_times_sql(0)})").fetchone()[0]
    operators = run.sql(f"SELECT sum(dur_ns) FROM events e WHERE {top_op('e')} AND source_frame_id IS NOT NULL").fetchone()[0]
    assert abs(moved - operators) <= kernels  # time moved between lines, none made up (rounding: under 1 ns a kernel)
    compile_python = run.sql("SELECT count(*) FROM events WHERE kind = 'python' AND name LIKE '%torch/_inductor/%'").fetchone()[0]
    assert compile_python < 1000, compile_python
    # the dashboard's event panel lists the statements a generated kernel came from, with their shares
    from neuron_explorer.dashboard import queries
    from neuron_explorer.dashboard.runs import RunSet
    from neuron_explorer.dashboard.ui.panels import detail_panel
    eid = run.sql("SELECT event_id FROM events WHERE name = 'graph_0_cpp_fused_add_cos_mul_sin_tanh_0' LIMIT 1").fetchone()[0]
    rs = RunSet([run_dir])
    came = queries.event(rs, run=0, event_id=eid)["compiled_from"]
    assert [(c["file"].rsplit("/", 1)[-1], c["line"], c["share"]) for c in came] == [("block.py", 14, 1.0)]
    text = _text(detail_panel(rs, 0, eid))
    assert "generated by torch.compile from100%" + came[0]["file"] + ":14" in text, text
    report = analyze(run_dir, write=False).to_dict()
    assert any("block.py:14" in (f.get("title") or "") + json.dumps(f.get("evidence") or {}) for f in report["findings"]) or \
        any("block.py:14" in json.dumps(r.get("source_lines") or {}) for r in report["summary"]["ranks"]), "the report names the statement"


def _text(component) -> str:
    """The text a Dash component shows (its children, depth first)."""
    children = getattr(component, "children", component)
    if isinstance(children, (list, tuple)):
        return "".join(_text(c) for c in children)
    if children is None or isinstance(children, (int, float)):
        return "" if children is None else str(children)
    return children if isinstance(children, str) else _text(children)


# ---- graph replays on the published vLLM traces ---------------------------------------------------


@pytest.mark.parametrize("name, device_events, launches", [("mi300x_vllm_hipgraph_full_decode", 421, 1),
                                                           ("mi300x_vllm_hipgraph_piecewise", 361, 25)])
def test_graph_replays_are_on_their_launch_statement(tmp_path: Path, name, device_events, launches):
    from neuron_explorer.collectors.chrome_trace import import_traces
    from neuron_explorer.info import render_info, run_info
    from neuron_explorer.store import open_run

    from .test_device_traces import DEVICE_CATS, Raw

    raw = Raw(name)
    graph_calls = {r["args"]["correlation"] for r in raw.spans if "GraphLaunch" in r["name"] and "correlation" in r.get("args", {})}
    replayed = [e for e in raw.of(DEVICE_CATS) if e.get("args", {}).get("correlation") in graph_calls]
    used = {e["args"]["correlation"] for e in replayed}
    assert (len(replayed), len(used)) == (device_events, launches)  # counted from the raw JSON
    run_dir = import_traces(TRACES_DIR / f"{name}.json.gz", tmp_path / "run").run_dir
    dq = run_info(run_dir)["ranks"][0]["data_quality"]
    assert (dq["graph_replay_device_events"], dq["graph_launches"]) == (device_events, launches)
    assert dq["graph_replay_on_a_line"] / dq["graph_replay_device_events"] >= 0.95
    run = open_run(run_dir)
    same, user = run.sql("""SELECT count(*) FILTER (WHERE k.source_frame_id = l.source_frame_id), count(*) FILTER (WHERE f.is_user)
      FROM events k JOIN events l ON l.event_id = k.launch_id LEFT JOIN frames f ON f.frame_id = k.source_frame_id
      WHERE l.name LIKE '%GraphLaunch'""").fetchone()
    assert same == user == device_events  # each replayed kernel on its launch's user statement
    assert f"graph replays: {device_events} device events from {launches} graph launch" in render_info(run_info(run_dir))


def test_graphs_without_a_cache_key_are_found_by_kernel_name():
    stack = 'File "/src/model.py", line 5, in forward\n    h = relu(l1(x))\n'
    raw = _raw([("user_annotation", "## Call CompiledFxGraph None ##", 100, 100, 1, 7),
                ("cpu_op", "graph_0_cpp_fused_relu_0", 110, 10, 1, 7)])
    count = compiled.ChargeCount()
    out = compiled.charge_kernels(raw, {"#1": {"cpp_fused_relu_0": [stack]}, "#2": {"cpp_fused_sum_1": [stack]}},
                                  lambda *a: 3, lambda i: i, lambda f: True, count)
    assert json.loads(out["args"][1].as_py()) == {"compiled_from": [{"frame_id": 3, "share": 1.0}]} and count.charged == 1


# ---- compiling kept out of the Python tracer ------------------------------------------------------


def _leaf(i):
    return i


def _many(n):
    return sum(_leaf(i) for i in range(n))


def _outer(untraced, n_inside, n_after):
    untraced._untraced("demo", _many, (n_inside,), {})
    return _many(n_after)


def test_the_python_tracer_is_paused_inside_and_resumed_nested(tmp_path: Path):
    import torch
    import torch.profiler as tp

    untraced = compiled.CompilerUntraced()
    with tp.profile(activities=[tp.ProfilerActivity.CPU], with_stack=True) as prof:
        untraced.start()
        _outer(untraced, 500, 7)
        untraced.stop()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    events = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e.get("ph") == "X"]
    calls = [e for e in events if e["name"].endswith(": _leaf")]
    assert len(calls) == 7  # the 500 calls made while paused are not recorded, the 7 after are
    (outer,) = [e for e in events if e["name"].endswith(": _outer")]
    (demo,) = [e for e in events if e["name"] == compiled.COMPILE_NAME_PREFIX + "demo"]
    assert outer["ts"] <= demo["ts"] and demo["ts"] + demo["dur"] <= outer["ts"] + outer["dur"]  # the range, inside its caller
    nested = [e for e in events if e.get("cat") == "python_function" and outer["ts"] <= e["ts"] <= outer["ts"] + outer["dur"]]
    # every call recorded inside _outer also ends inside it: the pause leaves no call open
    assert nested and all(e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] + 1 for e in nested), nested
    assert torch.compile.__module__ == "torch" and not getattr(torch.compile, "_neuron_explorer", False)


COMPILING = '''
import sys, torch
import neuron_explorer as nx


def step_fn(x):
    return (torch.sin(x) * torch.cos(x)).sum()


original = torch.compile
x = torch.randn(64, requires_grad=True)
with nx.profile({run!r}) as prof:
    f = torch.compile(step_fn)  # SETUP
    for _ in range(3):
        loss = f(x)  # FORWARD
        loss.backward()
        prof.step()
print("RESTORED", torch.compile is original)
'''


@pytest.mark.slow
def test_compiling_in_the_recording_is_one_range_per_compile_on_its_line(tmp_path: Path):
    from neuron_explorer.info import run_info
    from neuron_explorer.store import open_run

    script = tmp_path / "train.py"
    source = textwrap.dedent(COMPILING.format(run=str(tmp_path / "run")))
    script.write_text(source)
    line = {tag: n for n, text in enumerate(source.splitlines(), 1) for tag in ("SETUP", "FORWARD") if f"# {tag}" in text}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESTORED True" in done.stdout
    run = open_run(tmp_path / "run")
    ranges = run.sql(f"""SELECT e.name, f.line, e.pass FROM events e JOIN frames f ON f.frame_id = e.source_frame_id
      WHERE e.name LIKE '{compiled.COMPILE_NAME_PREFIX}%' ORDER BY e.ts_ns""").fetchall()
    fn = "step_fn (train.py:6)"
    # the backward's compile, like all backward work, on the forward statement that built it
    assert ranges == [("torch.compile: setup", line["SETUP"], "forward"), (f"torch.compile: {fn}", line["FORWARD"], "forward"),
                      (f"torch.compile: backward of {fn}", line["FORWARD"], "backward")], ranges
    compiler = ("torch/_(inductor/(compile_fx|graph|scheduler|lowering|codegen/)|functorch/_aot_autograd/graph_compile"
                "|dynamo/(symbolic_convert|output_graph))")
    compiler_python = run.sql(f"SELECT count(*) FROM events WHERE kind = 'python' AND regexp_matches(name, '{compiler}')").fetchone()[0]
    assert compiler_python == 0, compiler_python  # nothing of the compiler's own Python (a traced compile: >100,000 calls)
    info = run_info(tmp_path / "run")
    assert not any("Python calls of torch.compile" in w for w in info["warnings"])  # nothing left for drop_compile_python
    dq = info["ranks"][0]["data_quality"]
    assert dq["backward_linked_ns"] / dq["backward_ns"] >= 0.99  # the tree around the paused compile stays nested
