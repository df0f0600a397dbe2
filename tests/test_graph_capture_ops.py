"""Graph replays count on the operators they were captured under (issue #39, item 3): every
per-operator figure of device time (the dashboard's operator tables, the hotspot finding's
operator, the critical path's operator, the agent's figures, diff's operator deltas) charges a
replayed kernel linked to its capture to its operators at capture (vocab.charged_op,
charged_top_op), not to the replay step's graph-launch operator.

Times in the timelines are microseconds.
"""

from __future__ import annotations

import pytest

from neuron_explorer.analyzers import analyze
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import open_run

from .conftest import TRACES, X, write_trace

US = 1000


def _capture() -> list[dict]:
    """One graph captured: a kernel launched under my::attention, a GEMM under aten::mm.

        cudaStreamBeginCapture [10-12)
        model.py(12): attention [20-95)  my::attention [25-80)  launch attn [30-35)
        model.py(20): mlp [100-190)      aten::mm [110-150)     launch gemm [120-125)
        cudaStreamEndCapture [195-198)
    """
    return [X("cudaStreamBeginCapture", "cuda_runtime", 10, 2, correlation=1),
            X("model.py(12): attention", "python_function", 20, 75), X("my::attention", "cpu_op", 25, 55),
            X("cudaLaunchKernel", "cuda_runtime", 30, 5, correlation=2, kernel="attn"),
            X("model.py(20): mlp", "python_function", 100, 90), X("aten::mm", "cpu_op", 110, 40),
            X("cudaLaunchKernel", "cuda_runtime", 120, 5, correlation=3, kernel="gemm"),
            X("cudaStreamEndCapture", "cuda_runtime", 195, 3, correlation=4)]


def _replay() -> list[dict]:
    """One step replaying the graph once, the host waiting for it.

        ProfilerStep#1 [0-1000)   serve.py(5): step [1-999)
          CUDAGraph::replay [95-115)  cudaGraphLaunch [100-110) ─┐
          cudaDeviceSynchronize [116-925)                        │
        device:                       attn [120-320) gemm [321-921)
    """
    return [X("ProfilerStep#1", "user_annotation", 0, 1000), X("serve.py(5): step", "python_function", 1, 998),
            X("CUDAGraph::replay", "cpu_op", 95, 20, **{"External id": 11}),
            X("cudaGraphLaunch", "cuda_runtime", 100, 10, correlation=11, **{"External id": 11}),
            X("cudaDeviceSynchronize", "cuda_runtime", 116, 809, correlation=12),
            X("attn", "kernel", 120, 200, pid=0, tid=7, correlation=11, stream=7, device=0),
            X("gemm", "kernel", 321, 600, pid=0, tid=7, correlation=11, stream=7, device=0)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The replay imported with its capture, and without it."""
    tmp = tmp_path_factory.mktemp("capgroup")
    replay = write_trace(tmp / "replay.json", _replay())
    capture = write_trace(tmp / "cap.json", _capture())
    return (import_traces(replay, tmp / "with", captures=[capture]).run_dir,
            import_traces(replay, tmp / "without").run_dir)


def test_the_operator_tables_name_the_capture_operators(runs):
    from neuron_explorer.dashboard.runs import RunSet
    from neuron_explorer.dashboard.views import tables

    with_capture, without = runs
    rs = RunSet([with_capture, without])
    ops = {o["name"]: o for o in tables.operators(rs, run=0)["rows"]}
    got = {n: (o["calls"], o["device_self_ns"], o["device_total_ns"]) for n, o in ops.items()}
    # the capture's operators hold the replayed time; the graph launch's operator holds none; neither ran on this host
    assert got == {"aten::mm": (0, 600 * US, 600 * US), "my::attention": (0, 200 * US, 200 * US), "CUDAGraph::replay": (1, 0, 0)}
    assert [o["name"] for o in tables.operators(rs, run=0)["rows"]][0] == "aten::mm"
    assert ops["aten::mm"]["device_pct"] == 75.0 and ops["my::attention"]["device_pct"] == 25.0
    by_op = {(x["operator"], x["name"]): x["device_total_ns"] for x in tables.kernels_by_operator(rs, run=0)["rows"]}
    assert by_op == {("aten::mm", "gemm"): 600 * US, ("my::attention", "attn"): 200 * US}
    # a click on the row goes to its heaviest instance: the GEMM it was charged at capture
    from neuron_explorer.dashboard.views import navigate

    with open_run(with_capture) as run:
        gemm_id, = run.sql("SELECT event_id FROM events WHERE name = 'gemm'").fetchone()
    j = navigate.jump(rs, run=0, table="operators", name="aten::mm")
    assert (j["count"], j["event_id"], j["dur_ns"]) == (1, gemm_id, 600 * US)
    assert navigate.jump(rs, run=0, table="operators", name="CUDAGraph::replay")["dur_ns"] == 20 * US
    # without the capture the launch's operator keeps it all, as before
    assert {o["name"]: o["device_total_ns"] for o in tables.operators(rs, run=1)["rows"]} == {"CUDAGraph::replay": 800 * US}
    # no operator's device time exceeds the device time it is a share of
    total = tables.totals(rs.get(0), None)["device_ns"]
    assert total == 800 * US and all(o["device_total_ns"] <= total and (o["device_pct"] or 0) <= 100 for o in ops.values())


def test_the_hotspot_and_critical_path_name_the_capture_operator(runs):
    with_capture, without = runs
    found = analyze(with_capture, write=False).to_dict()["findings"]
    # the GEMM is the whole of its class on the path: one finding for it, the class's (the kernel's hotspot leaves to it)
    (kernel,) = [f for f in found if f["location"].get("kernel") == "gemm"]
    assert kernel["rule_id"] == "critical-path" and kernel["title"].startswith("GEMM/convolution kernels (1 name): 0.60 ms")
    assert kernel["location"]["op"] == "aten::mm" and kernel["impact_ns"] == 600 * US
    # what is inside it: the replayed GEMM charged to aten::mm at capture, listed as its device work; no
    # aten::mm ran on this host, so it has no call (the GEMM is none)
    roots, children = kernel["contents"]["roots"], kernel["contents"]["children"]
    assert (roots["count"], roots["total_ns"], roots["groups"], roots["captured"]) == (0, 0, [], {"count": 1, "total_ns": 600 * US})
    assert [(c["kind"], c["name"], c["count"], c["total_ns"]) for c in children] == [("kernel", "gemm", 1, 600 * US)]
    before = analyze(without, write=False).to_dict()["findings"]
    (before_kernel,) = [f for f in before if f["location"].get("kernel") == "gemm"]
    assert before_kernel["location"]["op"] == "CUDAGraph::replay"

    from neuron_explorer.agent.tools import AgentRuns

    agent = AgentRuns([with_capture])
    items = {i["item"]: (i["op"], i["charged_ns"]) for i in agent.critical_path(k=20)["ranks"][0]["items"] if i["category"] == "device_compute"}
    assert items == {"gemm": ("aten::mm", 600 * US), "attn": ("my::attention", 200 * US)}
    with open_run(with_capture) as run:
        gemm_id, = run.sql("SELECT event_id FROM events WHERE name = 'gemm'").fetchone()
    ctx = agent.event_context(event_id=gemm_id)
    assert ctx["chain"]["charged_to"] == {"top_op": "aten::mm", "op": "aten::mm"}
    assert ctx["chain"]["top_op"]["name"] == "CUDAGraph::replay"  # the launch's chain is still the replay's


def test_the_hotspot_statement_is_the_capturing_one_and_says_so(runs):
    """With the capture, model.py:20 (aten::mm's statement at capture) holds the GEMM's 600 us: its
    advice names the operator it captured and shows the kernel, and does not send the user to
    `--capture` again; without it the replay's statement serve.py:5 keeps the replay's advice."""
    from neuron_explorer.analyzers.render import inside_lines

    with_capture, without = runs
    (line,) = [f for f in analyze(with_capture, write=False).findings if f.rule_id == "hotspot" and "source" in f.evidence.values]
    assert (line.location.source, line.impact_ns) == ("model.py:20", 600 * US)
    values = line.evidence.values
    assert (values["graph_replay_ns"], values["graph_replay_captured_ns"]) == (600 * US, 600 * US)
    assert values["graph_replay_capture_ops"] == [{"op": "aten::mm", "top_op": "aten::mm", "device_ns": 600 * US}]
    assert "launched when the graph was captured, inside aten::mm 0.60 ms" in line.recommendation
    assert "--capture" not in line.recommendation and "is the replay" not in line.recommendation
    assert inside_lines(line) == ["inside the top-level operators of model.py:20: none in this trace; replayed by a graph, "
                                  "launched at capture: 1 device event, 600.00 µs", "  kernel gemm ×1 600.00 µs"]
    (replay,) = [f for f in analyze(without, write=False).findings if f.rule_id == "hotspot" and "source" in f.evidence.values]
    assert replay.location.source == "serve.py:5" and replay.evidence.values["graph_replay_captured_ns"] == 0
    assert "the statement is the replay, not the work" in replay.recommendation and "--capture CAPTURE" in replay.recommendation


def test_diff_moves_the_device_time_to_the_capture_operators(runs):
    from neuron_explorer.analyzers.diff import compare

    with_capture, without = runs
    deltas = compare(without, with_capture).to_dict()["deltas"]
    ops = {d["key"]: (d["base_ns_per_step"], d["test_ns_per_step"]) for d in deltas if d["type"] == "operator" and d["metric"] == "device"}
    assert ops == {"CUDAGraph::replay": (800 * US, 0), "aten::mm": (0, 600 * US), "my::attention": (0, 200 * US)}


CAPTURES = TRACES / "graph_capture"


@pytest.mark.parametrize("name, first, first_ms, top_op, top_op_ms", [
    # vLLM: the MoE holds 7.666 of 10.718 ms of device time (7.172 in its own kernels)
    ("mi300x_vllm_hipgraph_full_decode", "vllm::moe_forward", 7.666, "vllm::moe_forward", 7.666),
    # SGLang: aten::mm (inside aiter's GEMM and others) 5.782 of 9.779 ms, aiter::gemm_a16w16 5.385 ms
    ("mi300x_sglang_qwen3_decode", "aten::mm", 5.782, "aiter::gemm_a16w16", 5.385)])
def test_published_replays_group_by_their_capture_operators(tmp_path, name, first, first_ms, top_op, top_op_ms):
    """vLLM and SGLang decode traces with their captures: the operators table's first row is the
    model's operator (MoE, GEMM). Their graph launches have no operator around them: without the
    captures the replayed time is on no operator, and the first row holds under 3% of the time."""
    from neuron_explorer.dashboard.runs import RunSet
    from neuron_explorer.dashboard.views import tables

    captured = import_traces(TRACES / f"{name}.json.gz", tmp_path / "with", captures=[CAPTURES / name / "capture_traces"]).run_dir
    bare = import_traces(TRACES / f"{name}.json.gz", tmp_path / "without").run_dir
    rs = RunSet([captured, bare])
    rows = {o["name"]: o for o in tables.operators(rs, run=0, limit=1000)["rows"]}
    total = tables.totals(rs.get(0), None)["device_ns"]
    assert all(o["device_total_ns"] <= total and o["device_self_ns"] <= o["device_total_ns"] for o in rows.values())
    assert sum(o["device_self_ns"] for o in rows.values()) <= total  # self time: each kernel on one operator
    (name0, row0), = list(rows.items())[:1]
    assert (name0, round(row0["device_total_ns"] / 1e6, 3)) == (first, first_ms)
    assert round(rows[top_op]["device_total_ns"] / 1e6, 3) == top_op_ms
    before = tables.operators(rs, run=1, limit=1)["rows"][0]
    assert before["device_pct"] < 3.0
