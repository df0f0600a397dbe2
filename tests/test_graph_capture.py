"""Graph replays matched to their capture (issue #39, items 3-4): each replayed kernel takes the
operator and statement it had when its graph was captured (collectors/graph_capture.py), on
hand-built traces whose right answer is known and on the published vLLM and SGLang traces with
their capture traces (tests/data/traces/graph_capture/).

Times in the timelines are microseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_explorer.analyzers import analyze
from neuron_explorer.analyzers.metrics import graph_replays
from neuron_explorer.collectors.chrome_trace import find_traces, import_traces
from neuron_explorer.info import render_info, run_info
from neuron_explorer.store import open_run

from .conftest import TRACES, X, cli, write_trace
from .test_invariants import violations

US = 1000


def _launch(ts, corr, kernel):
    return X("cudaLaunchKernel", "cuda_runtime", ts, 5, correlation=corr, kernel=kernel)


def _k(name, ts, dur, corr):
    return X(name, "kernel", ts, dur, pid=0, tid=7, correlation=corr, stream=7, device=0)


def _capture() -> list[dict]:
    """One graph captured: 3 kernel launches under 2 operators on 2 statements; a warm-up launch
    before the capture and one after are no part of it.

        cudaLaunchKernel warmup [0-5)                        (before: not captured)
        cudaStreamBeginCapture [10-12)
        model.py(12): attention [20-95)  my::attention [25-80)  launch attn_qk [30-35), attn_softmax [50-55)
        model.py(20): mlp [100-190)      aten::mm [110-150)     launch gemm [120-125)
        cudaStreamEndCapture [195-198)
        cudaLaunchKernel after [200-205)                     (after: not captured)
    """
    return [_launch(0, 1, "warmup"), _k("warmup", 6, 2, 1),
            X("cudaStreamBeginCapture", "cuda_runtime", 10, 2, correlation=2),
            X("model.py(12): attention", "python_function", 20, 75), X("my::attention", "cpu_op", 25, 55),
            _launch(30, 3, "attn_qk"), _launch(50, 4, "attn_softmax"),
            X("model.py(20): mlp", "python_function", 100, 90), X("aten::mm", "cpu_op", 110, 40), _launch(120, 5, "gemm"),
            X("cudaStreamEndCapture", "cuda_runtime", 195, 3, correlation=6),
            _launch(200, 7, "after"), _k("after", 206, 2, 7)]


def _replay() -> list[dict]:
    """Two replays of the graph from serve.py(5): step, each under CUDAGraph::replay; the second
    runs an extra kernel the capture does not hold.

        replay 1: cudaGraphLaunch [100-110) -> attn_qk [120-130) attn_softmax [131-135) gemm [136-156)
        replay 2: cudaGraphLaunch [500-510) -> attn_qk [520-530) attn_softmax [531-535) extra_k [536-541) gemm [542-562)
    """
    events = [X("serve.py(5): step", "python_function", 0, 1000)]
    for corr, t, kernels in ((11, 100, [("attn_qk", 10), ("attn_softmax", 4), ("gemm", 20)]),
                             (12, 500, [("attn_qk", 10), ("attn_softmax", 4), ("extra_k", 5), ("gemm", 20)])):
        events += [X("CUDAGraph::replay", "cpu_op", t - 5, 20, **{"External id": corr}),
                   X("cudaGraphLaunch", "cuda_runtime", t, 10, correlation=corr, **{"External id": corr})]
        k0 = t + 20
        for name, dur in kernels:
            events.append(_k(name, k0, dur, corr))
            k0 += dur + 1
    return events


def _by_kernel(run_dir: Path) -> dict:
    with open_run(run_dir) as run:
        rows = run.sql("""SELECT k.name, k.ts_ns, k.graph, k.capture_op, k.capture_top_op, f.file || ':' || f.line, o.name
          FROM events k LEFT JOIN frames f ON f.frame_id = k.source_frame_id LEFT JOIN events o ON o.event_id = k.top_op_id
          WHERE k.kind = 'kernel' ORDER BY k.ts_ns""").fetchall()
    return [r[:1] + r[2:] for r in rows]


def test_replayed_kernels_take_their_capture_operator_and_statement(tmp_path):
    replay = write_trace(tmp_path / "replay.json", _replay())
    capture = write_trace(tmp_path / "cap.json", _capture())
    run_dir = import_traces(replay, tmp_path / "run", captures=[capture]).run_dir
    rows = _by_kernel(run_dir)
    on_capture = [("attn_qk", True, "my::attention", "my::attention", "model.py:12", "CUDAGraph::replay"),
                  ("attn_softmax", True, "my::attention", "my::attention", "model.py:12", "CUDAGraph::replay"),
                  ("gemm", True, "aten::mm", "aten::mm", "model.py:20", "CUDAGraph::replay")]
    # the extra kernel pairs with no captured node: it keeps its launch's operator and statement
    assert rows == on_capture + on_capture[:2] + [("extra_k", True, None, None, "serve.py:5", "CUDAGraph::replay")] + on_capture[2:]
    dq = run_info(run_dir)["ranks"][0]["data_quality"]
    assert (dq["graph_replay_device_events"], dq["graph_replay_capture_linked"], dq["graph_replay_launch_only"]) == (7, 6, 1)
    assert (dq["graph_launches"], dq["graph_launches_matched"], dq["graph_captures"]) == (2, 2, 1)
    g = graph_replays(run_info(run_dir)["ranks"][0])
    assert g["capture_linked_share"] == 6 / 7 and g["operator_share"] == 1.0 and g["not_linked"] == 0
    text = render_info(run_info(run_dir))
    assert "linked to their capture's operator: 6 (85.7%); to their launch only: 1; 2 of 2 launches matched 1 captured graph" in text
    # per statement: model.py:12 holds the attention kernels' 2 x (10 + 4) µs, model.py:20 the GEMMs' 2 x 20 µs
    with open_run(run_dir) as run:
        per_line = dict(run.sql("""SELECT f.file || ':' || f.line, sum(k.dur_ns) FROM events k JOIN frames f ON f.frame_id = k.source_frame_id
          WHERE k.graph GROUP BY 1""").fetchall())
    assert per_line == {"model.py:12": 28 * US, "model.py:20": 40 * US, "serve.py:5": 5 * US}
    report = analyze(run_dir, write=False).to_dict()
    assert not violations(report)
    assert report["summary"]["ranks"][0]["graph_replays"]["capture_linked"] == 6


def test_without_the_capture_replays_keep_their_launch(tmp_path):
    run_dir = import_traces(write_trace(tmp_path / "replay.json", _replay()), tmp_path / "run").run_dir
    rows = _by_kernel(run_dir)
    assert {r[1:] for r in rows} == {(True, None, None, "serve.py:5", "CUDAGraph::replay")} and len(rows) == 7
    dq = run_info(run_dir)["ranks"][0]["data_quality"]
    assert "graph_replay_capture_linked" not in dq and dq["graph_replay_with_operator"] == 7
    assert "linked to their capture" not in render_info(run_info(run_dir))


def test_a_capture_traces_folder_beside_the_trace_is_read(tmp_path):
    """TraceLens's layout: the replay, and capture_traces/ with the capture and its index
    execution_details.json (no trace). The folder's traces are captures, not ranks."""
    replay = write_trace(tmp_path / "job" / "graph_execution.json", _replay())
    write_trace(tmp_path / "job" / "capture_traces" / "graph_capture_rank_0.json", _capture())
    (tmp_path / "job" / "capture_traces" / "execution_details.json").write_text(json.dumps(
        [{"file": "graph_capture_rank_0.json", "batch_size": 32, "mode": "FULL"}]))
    assert find_traces(tmp_path / "job") == [replay]
    for source in (replay, tmp_path / "job"):
        run_dir = import_traces(source, tmp_path / f"run_{source.name}").run_dir
        assert run_info(run_dir)["ranks"][0]["data_quality"]["graph_replay_capture_linked"] == 6


def test_the_cli_takes_captures(tmp_path):
    """`import --capture` and `analyze --capture` (the trace imported into the cache with its
    capture; the same trace without it is another cache entry)."""
    replay = write_trace(tmp_path / "replay.json", _replay())
    capture = write_trace(tmp_path / "cap.json", _capture())
    done = cli("import", replay, "-o", tmp_path / "run", "--capture", capture)
    assert done.returncode == 0, done.stderr
    assert "linked to their capture's operator: 6 (85.7%); to their launch only: 1" in done.stdout
    with_capture = cli("analyze", replay, "--capture", capture, "--json")
    without = cli("analyze", replay, "--json")
    assert with_capture.returncode == without.returncode == 0, with_capture.stderr + without.stderr
    got = [json.loads(r.stdout)["summary"]["ranks"][0]["graph_replays"] for r in (with_capture, without)]
    assert [(g["capture_linked"], g["launch_only"], g["captures"]) for g in got] == [(6, 1, 1), (0, 7, None)]
    refused = cli("analyze", tmp_path / "run", "--capture", capture)
    assert refused.returncode == 2 and "--capture is read when a trace is imported" in refused.stderr


def test_a_graph_captured_twice_is_taken_in_turn(tmp_path):
    """The same kernels captured twice from two statements (say two batch sizes): the first replay
    takes the first capture, the second the second. A graph of another size (k, k2) goes to the
    replay of that size."""
    capture = [X("cudaStreamBeginCapture", "cuda_runtime", 200, 2), X("a.py(30): pair", "python_function", 203, 20),
               _launch(205, 1, "k"), _launch(212, 2, "k2"), X("cudaStreamEndCapture", "cuda_runtime", 225, 1),
               X("cudaStreamBeginCapture", "cuda_runtime", 10, 2), X("a.py(1): small", "python_function", 20, 40),
               X("my::op", "cpu_op", 25, 30), _launch(30, 3, "k"), X("cudaStreamEndCapture", "cuda_runtime", 70, 2),
               X("cudaStreamBeginCapture", "cuda_runtime", 110, 2), X("a.py(9): large", "python_function", 120, 40),
               X("my::op", "cpu_op", 125, 30), _launch(130, 4, "k"), X("cudaStreamEndCapture", "cuda_runtime", 170, 2)]
    replay = []
    for corr, t in ((21, 100), (22, 300)):
        replay += [X("cudaGraphLaunch", "cuda_runtime", t, 10, correlation=corr), _k("k", t + 20, 10, corr)]
    replay += [X("cudaGraphLaunch", "cuda_runtime", 500, 10, correlation=23), _k("k", 520, 10, 23), _k("k2", 531, 10, 23)]
    run_dir = import_traces(write_trace(tmp_path / "r.json", replay), tmp_path / "run",
                            captures=[write_trace(tmp_path / "c.json", capture)]).run_dir
    assert [(r[0], r[2], r[4]) for r in _by_kernel(run_dir)] == [("k", "my::op", "a.py:1"), ("k", "my::op", "a.py:9"),
                                                                 ("k", None, "a.py:30"), ("k2", None, "a.py:30")]
    dq = run_info(run_dir)["ranks"][0]["data_quality"]
    # no operator around the pair's launches at capture: their statement is the capture's, their operator none
    assert (dq["graph_captures"], dq["graph_launches_matched"], dq["graph_replay_capture_linked"]) == (3, 3, 2)


def test_a_replay_unlike_every_capture_keeps_its_launch(tmp_path):
    """Fewer than half of the replay's kernels pair with the capture: no match (kernels of another model)."""
    replay = [X("cudaGraphLaunch", "cuda_runtime", 100, 10, correlation=21)] + [_k(n, 120 + 10 * i, 5, 21)
                                                                                for i, n in enumerate(["gemm", "x", "y", "z"])]
    run_dir = import_traces(write_trace(tmp_path / "r.json", replay), tmp_path / "run",
                            captures=[write_trace(tmp_path / "c.json", _capture())]).run_dir
    dq = run_info(run_dir)["ranks"][0]["data_quality"]
    assert (dq["graph_replay_capture_linked"], dq["graph_replay_launch_only"], dq["graph_launches_matched"]) == (0, 4, 0)


# ---- the published traces: vLLM full-graph decode and SGLang decode with their captures ----------------

CAPTURES = TRACES / "graph_capture"


@pytest.mark.parametrize("name, device_events, top_op, top_ms, top_line", [
    # vLLM's MoE: launched at capture by Triton's launcher (triton/backends/amd/driver.py:634, no user
    # frame) under the vLLM statement that asked for it
    ("mi300x_vllm_hipgraph_full_decode", 421, "vllm::moe_forward", 7.666,
     ("vllm/model_executor/layers/fused_moe/gpt_oss_triton_kernels_moe.py:269", 7.172)),
    ("mi300x_sglang_qwen3_decode", 544, "aiter::gemm_a16w16", 5.385, ("aiter/tuned_gemm.py:395", 5.385))])
def test_published_replays_take_their_capture(tmp_path, name, device_events, top_op, top_ms, top_line):
    from .test_device_traces import DEVICE_CATS, Raw

    raw = Raw(name)
    graph_calls = {r["args"]["correlation"] for r in raw.spans if "GraphLaunch" in r["name"]}
    replayed = [e for e in raw.of(DEVICE_CATS) if e.get("args", {}).get("correlation") in graph_calls]
    assert len(replayed) == device_events  # counted from the raw JSON
    run_dir = import_traces(TRACES / f"{name}.json.gz", tmp_path / "run", captures=[CAPTURES / name / "capture_traces"]).run_dir
    g = graph_replays(run_info(run_dir)["ranks"][0])
    # the bar: >= 95% of the replayed kernels on a launch and an operator; here every one on its capture's
    assert (g["device_events"], g["capture_linked"], g["launch_only"], g["not_linked"]) == (device_events, device_events, 0, 0)
    assert g["operator_share"] == 1.0
    with open_run(run_dir) as run:
        (op, ns), = run.sql("SELECT capture_top_op, sum(dur_ns) FROM events WHERE graph GROUP BY 1 ORDER BY 2 DESC LIMIT 1").fetchall()
        launch_ops = run.sql("""SELECT DISTINCT coalesce(o.name, l.name) FROM events k JOIN events l ON l.event_id = k.launch_id
          LEFT JOIN events o ON o.event_id = k.top_op_id WHERE k.graph""").fetchall()
        (line, line_ns), = run.sql("""SELECT f.file || ':' || f.line, sum(k.dur_ns) FROM events k JOIN frames f
          ON f.frame_id = k.source_frame_id WHERE k.graph GROUP BY 1 ORDER BY 2 DESC LIMIT 1""").fetchall()
    assert (line, round(line_ns / 1e6, 3)) == top_line  # the statement holding most replayed time
    # the dashboard's event panel says a replayed kernel was replayed, and what ran around it at capture
    from neuron_explorer.dashboard import queries
    from neuron_explorer.dashboard.runs import RunSet
    from neuron_explorer.dashboard.ui.panels import detail_panel

    from .test_compiled import _text
    with open_run(run_dir) as run:
        eid, capture_op = run.sql("SELECT event_id, capture_top_op FROM events WHERE graph AND capture_top_op = ? LIMIT 1", [top_op]).fetchone()
    rs = RunSet([run_dir])
    e = queries.event(rs, run=0, event_id=eid)
    assert (e["graph"], e["capture_top_op"]) == (True, top_op)
    assert f"replayed by a graph launch; at capture under {top_op}" in _text(detail_panel(rs, 0, eid))
    # the top operator of the replayed device time is the model's (MoE / GEMM), no longer the launch
    assert (op, round(ns / 1e6, 3)) == (top_op, top_ms) and (op,) not in launch_ops
    assert not violations(analyze(run_dir, write=False).to_dict())


@pytest.mark.parametrize("name, device_events, launches, top_ops", [
    # CUDA: cudaGraphLaunch under torch.compile's CompiledFunction, forward and backward
    ("a100_train_blocking_dtoh", 345, 70, ["CompiledFunction", "autograd::engine::evaluate_function: CompiledFunctionBackward"]),
    ("mi300x_vllm_hipgraph_piecewise", 361, 25, [])])  # HIP: hipGraphLaunch with no operator around it
def test_every_vendors_graph_launches_are_linked(tmp_path, name, device_events, launches, top_ops):
    """Item 4: the graph launches of each vendor's traces in tests/data (no MTIA trace replays a
    graph) link their replayed work, marked `graph`, to the launch and its operator."""
    from .test_device_traces import DEVICE_CATS, Raw

    raw = Raw(name)
    graph_calls = {r["args"]["correlation"] for r in raw.spans if "GraphLaunch" in r["name"]}
    replayed = [e for e in raw.of(DEVICE_CATS) if e.get("args", {}).get("correlation") in graph_calls]
    assert (len(replayed), len({e["args"]["correlation"] for e in replayed})) == (device_events, launches)  # from the raw JSON
    run_dir = import_traces(TRACES / f"{name}.json.gz", tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        rows = run.sql("""SELECT count(*), count(DISTINCT k.launch_id), count(*) FILTER (WHERE l.name LIKE '%GraphLaunch'),
          list(DISTINCT o.name) FILTER (WHERE o.name IS NOT NULL)
          FROM events k JOIN events l ON l.event_id = k.launch_id LEFT JOIN events o ON o.event_id = k.top_op_id
          WHERE k.graph""").fetchone()
    assert rows[:3] == (device_events, launches, device_events)
    assert sorted(rows[3] or []) == top_ops
    g = graph_replays(run_info(run_dir)["ranks"][0])
    assert g["operator_share"] == (1.0 if top_ops else 0.0) and g["captures"] is None


# ---- what the report says of a replay imported with its capture ------------------------------------

MOE_LINE = "vllm/model_executor/layers/fused_moe/gpt_oss_triton_kernels_moe.py:269"


def _captured_kernels(run_dir: Path, where: str, params: list) -> list[tuple]:
    """(name, count, ns) of the graph-replayed kernels paired with their capture (`capture_top_op`) that `where` keeps, heaviest first."""
    with open_run(run_dir) as run:
        return [tuple(r) for r in run.sql(f"""SELECT k.name, count(*), sum(k.dur_ns) FROM events k JOIN frames f ON f.frame_id = k.source_frame_id
          WHERE k.graph AND k.kind = 'kernel' AND k.capture_top_op IS NOT NULL AND {where} GROUP BY 1 ORDER BY 3 DESC, 1""", params).fetchall()]


def test_the_statement_that_captured_the_replay_is_named_as_the_work(tmp_path):
    """vLLM's full-graph decode imported with its capture: the hotspot statement is the MoE call
    (gpt_oss_triton_kernels_moe.py:269), whose 7.17 ms are kernels it launched at capture under
    vllm::moe_forward. Its advice names that operator and lists its kernels; before, it said 'the
    statement is the replay', told the user to import with `--capture` (done already), and listed
    nothing below."""
    from neuron_explorer.analyzers.render import inside_lines

    name = "mi300x_vllm_hipgraph_full_decode"
    run_dir = import_traces(TRACES / f"{name}.json.gz", tmp_path / "run", captures=[CAPTURES / name / "capture_traces"]).run_dir
    kernels = _captured_kernels(run_dir, "f.file || ':' || f.line = ? AND k.capture_op = 'vllm::moe_forward'", [MOE_LINE])
    assert [(n, c) for n, c, _ in kernels] == [("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1", 24),
                                              ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", 24),
                                              ("_finalize_matmul_scatter_bf16", 24)]
    moe_ns = sum(ns for *_, ns in kernels)
    (f,) = [f for f in analyze(run_dir, write=False).findings if f.rule_id == "hotspot" and "source" in f.evidence.values]
    values = f.evidence.values
    assert (f.location.source, values["device_ns"], values["graph_replay_captured_ns"]) == (MOE_LINE, moe_ns, moe_ns)
    assert moe_ns == 7_171_530
    assert values["graph_replay_capture_ops"] == [{"op": "vllm::moe_forward", "top_op": "vllm::moe_forward", "device_ns": moe_ns}]
    assert "this statement launched when the graph was captured, inside vllm::moe_forward 7.17 ms" in f.recommendation
    assert "--capture" not in f.recommendation and "the statement is the replay" not in f.recommendation
    lines = inside_lines(f)
    assert lines[0] == (f"inside the top-level operators of {MOE_LINE}: none in this trace; replayed by a graph, launched at capture: "
                        "72 device events, 7.17 ms")
    assert [x.split(" ×")[0].strip() for x in lines[1:]] == [f"kernel {n}" for n, _, _ in kernels]


@pytest.mark.parametrize("name", ["mi300x_vllm_hipgraph_full_decode", "mi300x_vllm_hipgraph_piecewise"])
def test_without_the_capture_the_replay_statement_keeps_its_advice(tmp_path, name):
    """Without the capture the replay call (cuda_graph.py:208) is the statement, and its advice still
    points at `--capture`, with the graph's kernels below it."""
    from neuron_explorer.analyzers.render import inside_lines

    run_dir = import_traces(TRACES / f"{name}.json.gz", tmp_path / "run").run_dir
    (f,) = [f for f in analyze(run_dir, write=False).findings if f.rule_id == "hotspot" and "source" in f.evidence.values]
    assert f.location.source == "vllm/compilation/cuda_graph.py:208"
    assert f.evidence.values["graph_replay_captured_ns"] == 0 and f.evidence.values["graph_replay_capture_ops"] == []
    assert "the statement is the replay, not the work" in f.recommendation and "--capture CAPTURE" in f.recommendation
    lines = inside_lines(f)
    assert "replayed by a graph" not in lines[0] and sum(x.startswith("  kernel ") for x in lines) == 5


def test_an_operators_replayed_kernels_are_no_calls_of_it(tmp_path):
    """SGLang's decode with its capture: the host-sync finding on aten::copy_ has 5 calls of it (the
    outermost copies on the host), not 78 with the 73 kernels copies launched at capture, which are
    listed with the device work under their short names (fmt.kernel_name), not as calls with their whole
    demangled names (876 characters) on the calls' line."""
    from neuron_explorer.analyzers.render import inside_lines
    from neuron_explorer.fmt import kernel_name

    name = "mi300x_sglang_qwen3_decode"
    run_dir = import_traces(TRACES / f"{name}.json.gz", tmp_path / "run", captures=[CAPTURES / name / "capture_traces"]).run_dir
    with open_run(run_dir) as run:
        calls, calls_ns = run.sql("""SELECT count(*), sum(c.dur_ns) FROM events c WHERE c.kind = 'cpu_op' AND c.name = 'aten::copy_'
          AND NOT EXISTS (SELECT 1 FROM events p WHERE p.kind = 'cpu_op' AND p.name = 'aten::copy_' AND p.tid = c.tid AND p.depth < c.depth
                          AND p.ts_ns <= c.ts_ns AND p.ts_ns + p.dur_ns >= c.ts_ns + c.dur_ns)""").fetchone()
    kernels = _captured_kernels(run_dir, "'aten::copy_' IN (k.capture_op, k.capture_top_op)", [])
    assert (calls, sum(c for _, c, _ in kernels)) == (5, 73) and max(len(n) for n, _, _ in kernels) == 876
    (f,) = [f for f in analyze(run_dir, write=False).findings if f.location.op == "aten::copy_"]
    roots = f.contents["roots"]
    assert (roots["count"], roots["total_ns"], roots["captured"]) == (calls, calls_ns, {"count": 73, "total_ns": sum(ns for *_, ns in kernels)})
    lines = inside_lines(f)
    assert lines[0] == ("inside every 'aten::copy_' on rank 0: 5 calls, 463.13 ms; inputs [32], [32] int/long int; "
                        "replayed by a graph, launched at capture: 73 device events, 355.10 µs")
    heaviest, count, ns = kernels[0]
    assert f"  kernel {kernel_name(heaviest, 70)} ×{count} 346.65 µs" in lines and ns == 346_648
    assert max(len(x) for x in lines[1:]) < 100 and not any("of them:" in x for x in lines)
