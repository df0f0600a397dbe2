"""Imported torch.compile traces on their statements (issue 39 item 4): `import TRACE --provenance`
reads Inductor's provenance from the TORCH_TRACE structured log and charges each compiled kernel
to the user statements it was generated from, as the live collector does."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from neuron_explorer import open_run
from neuron_explorer.analyzers import lines
from neuron_explorer.collectors import provenance

from .conftest import TRACES, X, cli, workload_env, write_trace

# ---- a hand-built trace and structured log ------------------------------------------------------
#
#  thread 1:  train.py(10): step                                          |..........200 us..|
#               Torch-Compiled Region: 0/0 (top op)                  |.......150 us..|
#                 ## Call CompiledFxGraph KEYA ##                      |...120 us..|
#                   graph_0_cpp_fused_relu_0      30 us   graph KEYA: model.py:5
#                   graph_0_cpp_fused_exp_sin_1   20 us   graph KEYA: model.py:5 and model.py:6 (10 us each)
#                   aten::addmm                   40 us   graph KEYA's extern_kernels.addmm: model.py:6
#
#  The log holds a second graph (KEYB) with a kernel of the same name, `cpp_fused_relu_0`, from
#  model.py:9: only the cache key after each graph's provenance says which graph the call ran.
#  Right answer (cpu_ns): model.py:5 = 30 + 10 = 40 us; model.py:6 = 10 + 40 = 50 us;
#  train.py:10 (the def line the region is on) = 150 - 30 - 20 - 40 = 60 us; model.py:9 = nothing.


def _stack(model: Path, line: int, code: str) -> str:
    return f'  File "{model}", line {line}, in forward\n    {code}\n'


def _record(meta: dict, payload: str | None = None) -> str:
    line = f"V1203 15:32:48.797000 32348 torch/_inductor/compile_fx.py:1632] {json.dumps(meta)}"
    return line + "".join(f"\n\t{p}" for p in payload.split("\n")) if payload is not None else line


def _graph_records(traces: dict, key: str, compile_id: int) -> list[str]:
    ids = {"frame_id": compile_id, "frame_compile_id": 0, "attempt": 0}
    return [_record({"artifact": {"name": provenance.PROVENANCE_ARTIFACT, "encoding": "json"}, **ids, "has_payload": "x"},
                    json.dumps(traces)),
            _record({"artifact": {"name": "fx_graph_cache_miss", "encoding": "json"}, **ids, "has_payload": "y"},
                    json.dumps({"cache_status_detailed": "full_miss", "key": key, "components": ["gm: GraphModule()\n\ndef forward(...)"]}))]


def _hand_built(tmp_path: Path) -> tuple[Path, Path, Path]:
    model = tmp_path / "model.py"
    model.write_text("\n" * 4 + "h = relu(l1(x))\nh = l2(h.sin().exp())\n\n\nother()\n")
    train = tmp_path / "train.py"
    events = [
        X(f"{train}(10): step", "python_function", 0, 200),
        X("Torch-Compiled Region: 0/0", "cpu_op", 10, 150),
        X("## Call CompiledFxGraph KEYA ##", "cpu_op", 20, 120),
        X("graph_0_cpp_fused_relu_0", "cpu_op", 30, 30),
        X("graph_0_cpp_fused_exp_sin_1", "cpu_op", 70, 20),
        X("aten::addmm", "cpu_op", 95, 40),
    ]
    trace = write_trace(tmp_path / "trace" / "trace.json", events)
    log_dir = tmp_path / "torch_trace"
    log_dir.mkdir()
    graph_a = {"cpp_fused_relu_0:1": [_stack(model, 5, "h = relu(l1(x))")],
               "cpp_fused_exp_sin_1:2": [_stack(model, 5, "h = relu(l1(x))"), _stack(model, 6, "h = l2(h.sin().exp())")],
               "extern_kernels.addmm:3": [_stack(model, 6, "h = l2(h.sin().exp())")]}
    graph_b = {"cpp_fused_relu_0:1": [_stack(model, 9, "other()")]}
    log = log_dir / "dedicated_log_torch_trace_abc123.log"
    log.write_text("\n".join([_record({"str": ["torch/_dynamo/convert_frame.py", 0]}),
                              *_graph_records(graph_b, "KEYB", 1), *_graph_records(graph_a, "KEYA", 0)]) + "\n")
    return trace, log_dir, model


def test_an_imported_compiled_trace_puts_each_kernel_on_its_statements(tmp_path: Path):
    trace, log_dir, model = _hand_built(tmp_path)
    done = cli("import", trace, "-o", tmp_path / "run", "--provenance", log_dir)
    assert done.returncode == 0, done.stderr
    assert "compiled kernels: 3 of 3 charged to their statements (100.0% of their time)" in done.stdout, done.stdout
    run = open_run(tmp_path / "run")
    shares = dict(run.sql("""SELECT k.name, string_agg(f.line::VARCHAR || '@' || c.share::VARCHAR, ' ' ORDER BY f.line)
      FROM (SELECT name, unnest(from_json(json_extract(args, '$.compiled_from'), '[{"frame_id": "BIGINT", "share": "DOUBLE"}]')) AS c
            FROM events) k JOIN frames f ON f.frame_id = k.c.frame_id GROUP BY 1""").fetchall())
    assert shares == {"graph_0_cpp_fused_relu_0": "5@1.0", "graph_0_cpp_fused_exp_sin_1": "5@0.5 6@0.5", "aten::addmm": "6@1.0"}
    figures = {r["source"]: r["cpu_ns"] for r in lines.line_times(run, 0)}
    assert figures[f"{model}:5"] == 40_000 and figures[f"{model}:6"] == 50_000, figures
    assert figures[f"{tmp_path / 'train.py'}:10"] == 60_000, figures
    assert f"{model}:9" not in figures
    # the statements are frames under the line that called the compiled function, with their code, as in live runs
    rows = run.sql("""SELECT f.line, f.line_kind, f.code, p.file, p.line FROM frames f JOIN frames p ON p.frame_id = f.parent_frame_id
      WHERE f.file = ? ORDER BY 1""", [str(model)]).fetchall()
    assert rows == [(5, "call", "h = relu(l1(x))", str(tmp_path / "train.py"), 10),
                    (6, "call", "h = l2(h.sin().exp())", str(tmp_path / "train.py"), 10)], rows


def test_a_plain_json_of_stack_traces_and_a_log_found_beside_the_trace(tmp_path: Path):
    trace, log_dir, model = _hand_built(tmp_path)
    # a plain {kernel: [stack traces]} file: one graph, its kernels found by name
    plain = tmp_path / "kernels.json"
    plain.write_text(json.dumps({"cpp_fused_relu_0": [_stack(model, 5, "h = relu(l1(x))")]}))
    done = cli("import", trace, "-o", tmp_path / "plain", "--provenance", plain)
    assert done.returncode == 0, done.stderr
    assert "compiled kernels: 1 of 2 charged to their statements (60.0% of their time)" in done.stdout, done.stdout
    assert "1 of 2 torch.compile kernel calls were not traced to a statement" in done.stdout
    # the one structured log beside the trace is read with no --provenance
    log = next(log_dir.iterdir())
    log.rename(trace.parent / log.name)
    done = cli("import", trace, "-o", tmp_path / "beside")
    assert done.returncode == 0, done.stderr
    assert "compiled kernels: 3 of 3 charged" in done.stdout, done.stdout
    assert f"torch.compile kernels' provenance from {trace.parent / log.name}" in done.stdout, done.stdout


def test_a_gpu_trace_puts_the_triton_kernel_and_its_launch_on_the_statement(tmp_path: Path):
    # a real A100 trace of a compiled function: Inductor's launcher range `triton_poi_fused_add_cos_sin_0` (CPU, 95.812 us)
    # and the kernel it launched (1.760 us), both by the kernel's name outside any graph call range
    plain = tmp_path / "kernels.json"
    plain.write_text(json.dumps({"triton_poi_fused_add_cos_sin_0:1": [_stack(Path("/home/u/model.py"), 7, "return x.sin() + y.cos()")]}))
    done = cli("import", TRACES / "cuda_triton.json.gz", "-o", tmp_path / "run", "--provenance", plain)
    assert done.returncode == 0, done.stderr
    assert "compiled kernels: 2 of 2 charged to their statements" in done.stdout, done.stdout
    figures = {r["source"]: r for r in lines.line_times(open_run(tmp_path / "run"), 0)}
    assert (figures["/home/u/model.py:7"]["cpu_ns"], figures["/home/u/model.py:7"]["device_ns"]) == (95_812, 1_760), figures


@pytest.mark.parametrize("given, problem", [
    ("missing.log", "no such provenance file or folder"),
    ("empty_dir", "no dedicated_log_torch_trace_*.log"),
    ("not_provenance.json", "no kernel provenance in it"),
])
def test_a_bad_provenance_path_is_one_line_naming_it(tmp_path: Path, given: str, problem: str):
    trace, _, _ = _hand_built(tmp_path)
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "not_provenance.json").write_text(json.dumps({"traceEvents": [], "schemaVersion": 1}))
    done = cli("import", trace, "-o", tmp_path / "run", "--provenance", tmp_path / given)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {tmp_path / given}: {problem}" or (
        done.stderr.startswith(f"error: {tmp_path / given}: {problem}") and done.stderr.count("\n") == 1), done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


# ---- a compiled model recorded with plain torch.profiler -------------------------------------------

MODEL = '''\
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(256, 2048)
        self.down = torch.nn.Linear(2048, 8)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.up(x)).sin()
        return self.down(h).sum()
'''
HEAVY_LINE, LIGHT_LINE = 11, 12

SCRIPT = '''
import sys
import torch
import torch._inductor.config as config

config.cpp.enable_kernel_profile = True
config.trace.provenance_tracking_level = 1
sys.path.insert(0, {here!r})
from block import Block

torch.manual_seed(0)
model = torch.compile(Block())
x = torch.randn(512, 256)
for _ in range(2):
    model(x).backward()
with torch.profiler.profile(with_stack=True) as prof:
    for _ in range(3):
        model(x).backward()
prof.export_chrome_trace({trace!r})
'''


@pytest.mark.slow
def test_a_compiled_model_recorded_with_torch_profiler_is_imported_onto_its_statements(tmp_path: Path):
    (tmp_path / "block.py").write_text(MODEL)
    script = tmp_path / "train.py"
    trace = tmp_path / "trace.json"
    script.write_text(textwrap.dedent(SCRIPT.format(here=str(tmp_path), trace=str(trace))))
    env = {**workload_env(), "TORCH_TRACE": str(tmp_path / "torch_trace"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "torchinductor_test")}  # (a fresh cache: no graph compiled elsewhere)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=1200, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    done = cli("import", trace, "-o", tmp_path / "run", "--provenance", tmp_path / "torch_trace")
    assert done.returncode == 0, done.stderr
    assert "compiled kernels:" in done.stdout, done.stdout
    run = open_run(tmp_path / "run")
    kernels_ns, charged_ns = run.sql("""SELECT sum(dur_ns), sum(dur_ns) FILTER (WHERE args LIKE '%compiled_from%') FROM events
      WHERE name LIKE '%cpp_fused%'""").fetchone()
    assert kernels_ns > 0 and charged_ns / kernels_ns >= 0.9, (kernels_ns, charged_ns)
    compiled = run.sql("""SELECT f.file, f.line, sum(k.dur_ns * c.share) AS ns FROM
      (SELECT dur_ns, unnest(from_json(json_extract(args, '$.compiled_from'), '[{"frame_id": "BIGINT", "share": "DOUBLE"}]')) AS c
       FROM events) k JOIN frames f ON f.frame_id = k.c.frame_id GROUP BY ALL ORDER BY ns DESC""").fetchall()
    assert [(Path(f).name, line) for f, line, _ in compiled[:2]] == [("block.py", HEAVY_LINE), ("block.py", LIGHT_LINE)], compiled
    figures = {r["source"].rsplit("/", 1)[-1]: r for r in lines.line_times(run, 0)}  # the line figures agree
    heavy, light = figures[f"block.py:{HEAVY_LINE}"], figures[f"block.py:{LIGHT_LINE}"]
    assert heavy["cpu_ns"] > light["cpu_ns"] and heavy["cpu_backward_ns"] > 0, figures
