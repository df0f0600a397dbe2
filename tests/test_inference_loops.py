"""Issue #33, items 9, 10 and 11: step-less (inference) runs, python-loop counting runs of a
statement in one call of its function, and runs whose trace lost its device events.

Hand-built runs with statement frames ('call' lines, as the live collector writes them) are built
from raw tables through build.py, the path every collector takes. Times are microseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from neuron_explorer import store
from neuron_explorer.analyzers import analyze
from neuron_explorer.analyzers.render import text as render
from neuron_explorer.collectors.build import build_rank
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.collectors.rank_entry import rank_entry
from neuron_explorer.collectors.raw import RAW_COUNTERS, RAW_EVENTS, RAW_FLOWS, RAW_FRAMES, RAW_MEMORY, RawRank
from neuron_explorer.info import render_info, run_info
from neuron_explorer.notebook import report_html

from .conftest import X, write_trace
from .test_import_old_torch import _lost_kernels
from .test_invariants import violations

US = 1000
TRACES = Path(__file__).parent / "data" / "traces"


def _ev(name, cat, ts, dur, frame=None):
    return {"category": cat, "name": name, "phase": "X", "ts_ns": ts * US, "dur_ns": dur * US, "pid": 1, "tid": 1,
            "pid_text": None, "tid_text": None, "correlation": None, "external_id": None, "stream": None,
            "args": None, "frame_index": frame}


def _live_run(tmp_path: Path, events: list[dict], frames: list[tuple]) -> Path:
    """A run of one rank from raw events and statement frames (file, line, function, parent index)."""
    ev = pa.Table.from_pylist(events, schema=pa.schema([f for f in RAW_EVENTS if f.name != "module_path"]))
    fr = pa.Table.from_pylist([{"file": f, "line": ln, "function": fn, "is_user": True, "line_kind": "call", "parent_index": p}
                               for f, ln, fn, p in frames], schema=RAW_FRAMES)
    built = build_rank(RawRank(0, ev, RAW_FLOWS.empty_table(), RAW_MEMORY.empty_table(), RAW_COUNTERS.empty_table(), frames=fr))
    manifest = store.base_manifest("live", ranks=[rank_entry(built, {})], warnings=[])
    return store.write_run(tmp_path / "run", {0: built.tables}, manifest)


def _text(report) -> str:
    return render(report, width=10_000)  # one line per line: what a person reads, unwrapped


def _report(run_dir):
    report = analyze(run_dir, write=False)
    assert not violations(report.to_dict())  # no figure larger than the time it is a share of
    return report


# ---- item 11: python-loop -------------------------------------------------------------------------

FRAMES = [("train.py", 30, "<module>", -1),  # 0: `y = step(x)`
          ("model.py", 12, "step", 0)]  # 1: `acc = acc * x[i]` inside `for i in range(50)` in step()


def _loop_events(runs_in_partial: int = 3) -> list[dict]:
    """Five 1000 µs steps, each one call of step() whose loop statement runs 50 times (aten::mul,
    10 µs each, 15 µs apart), and a trailing partial step of 100 µs with 3 runs:

        ProfilerStep#k [1000k ........................................ 1000k+1000)
          model.py(10): step [+10 ................................ +990)   (called from train.py:30)
            aten::mul x50   [+20, +30) [+35, +45) ... [+755, +765)          (model.py:12)
        ProfilerStep#6 [5000 .. 5100)  step() [5005 .. 5095)  aten::mul x3
    """
    out = []
    for k in range(5):
        s = 1000 * k
        out += [_ev(f"ProfilerStep#{k + 1}", "user_annotation", s, 1000),
                _ev("model.py(10): step", "python_function", s + 10, 980, frame=0)]
        out += [_ev("aten::mul", "cpu_op", s + 20 + 15 * i, 10, frame=1) for i in range(50)]
    out += [_ev("ProfilerStep#6", "user_annotation", 5000, 100), _ev("model.py(10): step", "python_function", 5005, 90, frame=0)]
    out += [_ev("aten::mul", "cpu_op", 5010 + 15 * i, 10, frame=1) for i in range(runs_in_partial)]
    return out


def test_a_loop_of_50_runs_per_step_in_one_call_fires_with_50_calls_per_step(tmp_path):
    run_dir = _live_run(tmp_path, _loop_events(), FRAMES)
    report = _report(run_dir)
    steps = report.summary["ranks"][0]["steps"]
    assert steps["count"] == 6 and steps["steady_steps"] == [1, 2, 3, 4, 5]  # step 6 is partial
    (f,) = [f for f in report.findings if f.rule_id == "python-loop"]
    v = f.evidence.values
    # 250 runs in the 5 steady steps (the partial step's 3 stay out): not 253 / 6 = 42.2
    assert (v["runs"], v["runs_per_call"], v["calls_per_step"], v["steps"]) == (250, 50, 50.0, 5)
    # its time: 253 operators of 10 µs, none overlapping, all inside steps: 2.53 ms of the 5.1 ms analysed
    assert v["time_ns"] == 253 * 10 * US and f.impact_ns == 2_530_000
    assert f.title.startswith("model.py:12 runs 50 times per step from a Python loop (50 in one call of step): 2.53 ms (49.6%)")
    assert f.saving_bound_ns == int(2_530_000 * (1 - 1 / 50))
    # the statement is python-loop's: hotspot does not report the same line again
    assert not [g for g in report.findings if g.title.startswith("Hotspot source line")]


def test_one_statement_run_once_by_ten_module_instances_is_no_loop(tmp_path):
    """Per step, `x = layer(x)` (train.py:40) calls ten instances' forward (model.py:20); the
    statement model.py:22 in forward runs 14 different operators once per call: 140 outermost
    operators per step, the old rule's 'runs 140 operators per step from a Python loop'.

        ProfilerStep#k [1000k ...................................................... +1000)
          model.py(20): forward [+10 +95) [+105 +190) ... ten calls (from train.py:40)
            aten::op0 .. aten::op13, 5 µs each, once per call (model.py:22)
    """
    frames = [("train.py", 40, "<module>", -1), ("model.py", 22, "forward", 0)]
    events = []
    for k in range(5):
        s = 1000 * k
        events.append(_ev(f"ProfilerStep#{k + 1}", "user_annotation", s, 1000))
        for m in range(10):
            c = s + 10 + 95 * m
            events.append(_ev("model.py(20): forward", "python_function", c, 85, frame=0))
            events += [_ev(f"aten::op{i}", "cpu_op", c + 2 + 6 * i, 5, frame=1) for i in range(14)]
    report = _report(_live_run(tmp_path, events, frames))
    assert not [f for f in report.findings if f.rule_id == "python-loop"]
    assert not [n for n in report.not_applicable if n["rule_id"] == "python-loop"]


def test_python_loop_does_not_apply_to_def_lines_and_keeps_under_the_rank_on_mi300x(tmp_path):
    """The mi300x trace (imported: def lines) got 'resnet.py:89 runs 200 operators per step from a
    Python loop: 70.47 ms (144.9%)' of a 48.64 ms rank: resnet.py:89 is `def forward`."""
    run = import_traces(TRACES / "mi300x_ddp_resnet_act_checkpoint.json.gz", tmp_path / "run").run_dir
    report = analyze(run, write=False)
    assert not [f for f in report.findings if f.rule_id == "python-loop"]
    (na,) = [n for n in report.not_applicable if n["rule_id"] == "python-loop"]
    assert na["reason"].startswith("the trace names def lines only")


# ---- item 9: a run without steps (inference) ------------------------------------------------------

def test_b200_vllm_inference_says_in_the_window_and_gives_no_training_advice(tmp_path):
    run = import_traces(TRACES / "b200_vllm_eager_rank0_of_8.json.gz", tmp_path / "run").run_dir
    report = _report(run)
    text = _text(report)
    assert "/step" not in text and "per step" not in text
    for word in ("DataLoader", "optimizer", "GradScaler", "activation checkpointing"):
        assert word not in text, word
    (launch,) = [f for f in report.findings if f.rule_id == "launch-overhead"]
    assert launch.title == "585 short kernels on device 0 in the analysed window (87.41 ms), 4.44 ms launching them"
    (idle,) = [f for f in report.findings if f.rule_id == "device-idle"]
    assert "Move host work out of the step" not in idle.recommendation


def _stepless_training_free(events_per_kernel=150):
    """No ProfilerStep, no backward or optimizer: 150 short kernels (2 µs) launched 10 µs apart."""
    out = []
    for i in range(events_per_kernel):
        t = 10 * i
        out += [X("aten::add", "cpu_op", t, 6, **{"External id": i + 1}),
                X("cudaLaunchKernel", "cuda_runtime", t + 1, 4, correlation=1000 + i, **{"External id": i + 1}),
                X("add_kernel", "kernel", t + 6, 2, pid=0, tid=7, correlation=1000 + i, stream=7, device=0)]
    return out


def test_a_stepless_trace_has_no_per_step_text_and_no_training_advice(tmp_path):
    run = import_traces(write_trace(tmp_path / "t.json", _stepless_training_free()), tmp_path / "run").run_dir
    report = _report(run)
    text = _text(report)
    assert "/step" not in text and "per step" not in text
    assert "DataLoader" not in text and "optimizer" not in text
    (launch,) = [f for f in report.findings if f.rule_id == "launch-overhead"]
    assert launch.title.startswith("150 short kernels on device 0 in the analysed window (1.50 ms)")


def test_short_kernels_a_graph_replays_are_no_launch_overhead(tmp_path):
    """The same 150 short kernels issued by one cudaGraphLaunch: the launches are already one call,
    so neither the finding nor its advice (capture a graph) applies; 100 kernels launched one by one
    beside the replay are the finding's whole count."""
    events = [X("aten::add", "cpu_op", 0, 30, **{"External id": 1}),
              X("cudaGraphLaunch", "cuda_runtime", 1, 25, correlation=999, **{"External id": 1})]
    events += [X("add_kernel", "kernel", 30 + 3 * i, 2, pid=0, tid=7, correlation=999, stream=7, device=0) for i in range(150)]
    run = import_traces(write_trace(tmp_path / "g.json", events), tmp_path / "run").run_dir
    assert not [f for f in _report(run).findings if f.rule_id == "launch-overhead"]
    for i in range(100):  # then 100 launched one by one
        t = 1000 + 10 * i
        events += [X("aten::add", "cpu_op", t, 6, **{"External id": 10 + i}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 1, 4, correlation=2000 + i, **{"External id": 10 + i}),
                   X("add_kernel", "kernel", t + 6, 2, pid=0, tid=7, correlation=2000 + i, stream=7, device=0)]
    run = import_traces(write_trace(tmp_path / "g2.json", events), tmp_path / "run2").run_dir
    (launch,) = [f for f in _report(run).findings if f.rule_id == "launch-overhead"]
    assert launch.title.startswith("100 short kernels on device 0"), launch.title
    assert launch.evidence.values["launch_ns"] == 100 * 4_000


# ---- a serving engine's graphs are its own switches -----------------------------------------------

def test_vllm_eager_is_told_vllms_graph_switches_not_torch_cuda_graph(tmp_path):
    """b200_vllm_eager (vLLM decode, no CUDA graph launched: its operators are vllm::…, its Python calls
    vllm/…): 585 short kernels launched one by one. The advice said to capture them with
    torch.cuda.graph, but vLLM's model runner, not the user's code, captures graphs: it runs eager
    because enforce_eager=True (--enforce-eager) or its compilation_config says so. Both findings that
    advise graphs now name those switches, and torch.compile by vLLM's compilation_config."""
    raw = json.loads(__import__("gzip").open(TRACES / "b200_vllm_eager_rank0_of_8.json.gz").read())
    names = [e.get("name", "") for e in raw["traceEvents"]]
    assert not [n for n in names if "GraphLaunch" in n]  # eager: no graph replayed
    assert sum(n.startswith("vllm::") for n in names) == 146
    run = import_traces(TRACES / "b200_vllm_eager_rank0_of_8.json.gz", tmp_path / "run").run_dir
    report = _report(run)
    (launch,) = [f for f in report.findings if f.rule_id == "launch-overhead"]
    (idle,) = [f for f in report.findings if f.rule_id == "device-idle"]
    assert launch.recommendation.endswith(
        "Fuse them: torch.compile (vLLM's compilation_config), CUDA graphs (which vLLM captures itself unless it runs eager: "
        "enforce_eager=True (--enforce-eager) turns them off, and compilation_config's cudagraph_mode "
        "and cudagraph_capture_sizes choose which batches replay one), larger batches.")
    assert "use CUDA graphs (which vLLM captures itself unless it runs eager: enforce_eager=True (--enforce-eager)" in idle.recommendation
    assert "torch.cuda.graph" not in launch.recommendation + idle.recommendation


def _sglang_decode(graph: bool):
    """A step-less SGLang decode (its model runner's Python call around everything): 150 short kernels
    launched one by one and, with `graph`, 150 more replayed by one cudaGraphLaunch."""
    events = [X("/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py(2210): forward", "python_function", 0, 3000)]
    events += _stepless_training_free()
    if graph:
        events += [X("aten::add", "cpu_op", 1600, 30, **{"External id": 900}),
                   X("cudaGraphLaunch", "cuda_runtime", 1601, 25, correlation=999, **{"External id": 900})]
        events += [X("add_kernel", "kernel", 1630 + 3 * i, 2, pid=0, tid=7, correlation=999, stream=7, device=0) for i in range(150)]
    return events


def test_an_sglang_rank_is_told_sglangs_switches_and_whether_it_replays_graphs_already(tmp_path):
    """The same 150 short kernels under SGLang's model runner: the advice names SGLang's server
    arguments (--disable-cuda-graph, --cuda-graph-max-bs, --enable-torch-compile), not
    torch.cuda.graph; where the rank replays a graph already, it says so and names what graphs leave
    out. The same kernels with no engine's call around them keep torch.cuda.graph."""
    words = {}
    for name, events in (("plain", _stepless_training_free()), ("eager", _sglang_decode(False)), ("replaying", _sglang_decode(True))):
        run = import_traces(write_trace(tmp_path / f"{name}.json", events), tmp_path / name).run_dir
        (launch,) = [f for f in _report(run).findings if f.rule_id == "launch-overhead"]
        assert launch.title.startswith("150 short kernels on device 0 in the analysed window"), launch.title
        words[name] = launch.recommendation[launch.recommendation.index("Fuse them: "):]
    assert words["plain"] == "Fuse them: torch.compile, CUDA graphs (torch.cuda.graph, or torch.compile(mode='reduce-overhead')), larger batches."
    assert words["eager"] == ("Fuse them: torch.compile (SGLang's --enable-torch-compile), CUDA graphs (which SGLang captures itself for "
                              "decode batches up to --cuda-graph-max-bs unless --disable-cuda-graph turns them off), larger batches.")
    assert words["replaying"] == ("Fuse them: torch.compile (SGLang's --enable-torch-compile), CUDA graphs (which SGLang replays here "
                                  "already for decode: what launches kernels one by one is what its graphs leave out, such as prefill "
                                  "and batches above --cuda-graph-max-bs), larger batches.")


def test_each_rank_of_a_job_is_told_its_own_engine_from_one_query_of_the_batch(tmp_path, monkeypatch):
    """Two ranks of one job, rank 0 under vLLM's custom operators, rank 1 plain PyTorch, each with the
    150 short kernels: each rank's graph advice is its own, and the engine is read once for the batch
    (_util.ENGINE among the rules' per-rank queries), not once per rank."""
    from neuron_explorer import store
    from neuron_explorer.analyzers.rules._util import ENGINE

    for r in (0, 1):
        events = _stepless_training_free()
        if r == 0:
            events.append(X("vllm::unified_attention_with_output", "cpu_op", 0, 1600))
        write_trace(tmp_path / "traces" / f"rank{r}.json", events, distributedInfo={"rank": r, "world_size": 2})
    run = import_traces(tmp_path / "traces", tmp_path / "run").run_dir
    seen = []
    real = store.Run.sql
    monkeypatch.setattr(store.Run, "sql", lambda self, query, params=None: seen.append(query) or real(self, query, params))
    report = _report(run)
    advice = {f.location.rank: f.recommendation for f in report.findings if f.rule_id == "launch-overhead"}
    assert "CUDA graphs (which vLLM captures itself unless it runs eager" in advice[0]
    assert "CUDA graphs (torch.cuda.graph, or torch.compile(mode='reduce-overhead'))" in advice[1]
    assert seen.count(ENGINE.many) == 1 and ENGINE.one not in seen


def test_an_engine_on_an_amd_device_is_told_hip_graphs_and_no_engine_on_trainium():
    from neuron_explorer.analyzers import peaks as P

    amd = P.arch_named("AMD Instinct MI300X")
    assert P.graph_advice(None, arch=amd, engine="vLLM").startswith("HIP graphs (which vLLM captures itself unless it runs eager")
    assert P.graph_advice(None, arch=amd, engine="vLLM", replays=True).startswith("HIP graphs (which vLLM replays here already")
    assert P.graph_advice(None, arch=amd) == ("HIP graphs (torch.cuda.graph, which ROCm runs as HIP graphs, or "
                                              "torch.compile(mode='reduce-overhead'))")
    assert P.graph_advice("Trainium2", engine="vLLM").startswith("torch.compile (the Neuron compiler")  # no graphs there


# ---- item 10: a device run that lost its device events --------------------------------------------

def test_a_trace_with_launches_but_no_kernels_says_device_events_lost_not_cpu_only(tmp_path):
    run = import_traces(write_trace(tmp_path / "lost.json", _lost_kernels()), tmp_path / "run").run_dir
    report = analyze(run, write=False)
    assert report.summary["ranks"][0]["device_events_lost"] == {"launches": 3, "launch_flows": 3}
    text = _text(report)
    assert "CPU only" not in text and "CPU-only" not in text.replace("is not CPU-only", "")
    assert "device events lost (3 launches recorded, no kernels); top operators: aten::mm 30.00 µs" in text
    reasons = {n["rule_id"]: n["reason"] for n in report.not_applicable}
    assert reasons["device-idle"] == ("device events lost (3 launches recorded, no kernels): re-record with the device "
                                      "activity on (ProfilerActivity.CUDA) and a normal profiler stop")
    info = render_info(run_info(run))
    assert "devices: none (device events lost (3 launches recorded, no kernels))" in info and "CPU only" not in info
    html = report_html(json.loads(json.dumps(report.to_dict())))
    assert "device events lost" in html and "CPU only" not in html


def test_a_cpu_only_trace_is_still_called_cpu_only(tmp_path):
    run = import_traces(TRACES / "cpu_only_rank34_of_300.json.gz", tmp_path / "run").run_dir
    report = analyze(run, write=False)
    assert report.summary["ranks"][0]["device_events_lost"] is None
    assert "  CPU only; top operators: " in _text(report)


def test_short_kernels_whose_launches_cost_under_one_percent_are_no_finding(tmp_path):
    """The 150 short kernels of `_stepless_training_free`, with a 2 ms device kernel after each: the
    launches (150 x 4 µs = 0.60 ms) are under 1% (LAUNCH_SHARE_MIN) of a window of about 300 ms,
    nothing to gain by fusing them (MTIA's 890 short kernels: 0.87 ms of 459.67 ms). The short
    kernels are still most of the kernels, so only the launches' share decides."""
    events = []
    for i in range(150):
        t = 2_000 * i
        events += [X("aten::add", "cpu_op", t, 6, **{"External id": i + 1}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 1, 4, correlation=1000 + i, **{"External id": i + 1}),
                   X("add_kernel", "kernel", t + 6, 2, pid=0, tid=7, correlation=1000 + i, stream=7, device=0)]
        if i % 2:
            events += [X("aten::mm", "cpu_op", t + 10, 6, **{"External id": 5000 + i}),
                       X("cudaLaunchKernel", "cuda_runtime", t + 11, 4, correlation=9000 + i, **{"External id": 5000 + i}),
                       X("gemm_kernel", "kernel", t + 20, 1_900, pid=0, tid=7, correlation=9000 + i, stream=7, device=0)]
    run = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    report = _report(run)
    assert not [f for f in report.findings if f.rule_id == "launch-overhead"]
    with store.open_run(run) as r:
        short, kernels = r.sql("SELECT count(*) FILTER (WHERE dur_ns < 10000), count(*) FROM events WHERE kind = 'kernel'").fetchone()
    assert short == 150 and kernels == 225 and report.summary["ranks"][0]["analysed_ns"] > 100 * 150 * 4_000
