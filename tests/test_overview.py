"""The dashboard's Overview page and findings on hand-built traces with known answers.

    host pid 1 / tid 1, times in us after BASE (device 0, stream 7 below):
    step 1: 0 ........................................................ 100
             5 ...15 aten::mm (64x64 @ 64x64, fp32)     20 ..................... 95 cudaDeviceSynchronize
              6 10 launch (corr 100)
    device:       10 .............................................. 90 gemm
    step 2: 100 ....................................................... 200
             105 ............................................... 185 aten::add
                                                         180 183 launch (corr 101)
    device:                                                      184 .. 190 add_k

Critical path (analyzers/critical_path.py), walked back from each step's end:
- step 1: untraced 95-100 (host 5), the sync's own time after gemm ended 90-95 (launch 5), gemm
  10-90 (device compute 80), its launch 6-10 (launch 4), aten::mm 5-6 (host 1), untraced 0-5
  (host 5): compute 80, host + launch 20 → "device-bound (80%): device compute".
- step 2: untraced 185-200 (15), aten::add 183-185 (2), launch 180-183 (3), aten::add 105-180
  (75), untraced 100-105 (5): host + launch 100; add_k (184-190) runs beside the host, off the path.
- both steps: device 80 of 200 us, host 120 → "host-bound (60%): CPU operators and Python".
Device busy per step: gemm 80 of step 1's 100 us (80%), add_k 6 of step 2's (6%).
Top on the path over the 200 us of step time: kernel gemm 80 (40%); operators aten::mm 80 + 4 +
1 = 85 (42.5%), aten::add 75 + 2 + 3 = 80 (40%).
FLOPs: aten::mm 2·64·64·64 = 524,288 (bytes (2 + 1)·64·64·4 = 49,152), all in step 1, on an
"NVIDIA H100 80GB HBM3" (H100 SXM: fp32 67 TFLOP/s, 3,350 GB/s): MFU of step 1 =
524,288 / 100 us / 67e12; gemm's intensity 524,288 / 49,152 FLOP/byte at 524,288 / 80 us.
"""

from __future__ import annotations

import pytest

from neuron_explorer.analyzers.model import Evidence, Finding, Location, Report
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import app as dash_app
from neuron_explorer.dashboard import queries
from neuron_explorer.dashboard.runs import RunSet
from neuron_explorer.dashboard.ui import overview as ov
from neuron_explorer.dashboard.ui import panels
from neuron_explorer.dashboard.views import findings as findings_view
from neuron_explorer.dashboard.views import overview as ovd
from neuron_explorer.fmt import duration

from .conftest import TRACES, X, write_trace

BASE = 1_700_000_000_000_000_000
US = 1000


def events(device_name: str) -> list[dict]:
    return [
        X("ProfilerStep#1", "user_annotation", 0, 100),
        X("aten::mm", "cpu_op", 5, 10, **{"External id": 1, "Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}),
        X("cudaLaunchKernel", "cuda_runtime", 6, 4, correlation=100, **{"External id": 1}),
        X("cudaDeviceSynchronize", "cuda_runtime", 20, 75),
        X("gemm", "kernel", 10, 80, pid=0, tid=7, correlation=100, stream=7, device=0),
        X("ProfilerStep#2", "user_annotation", 100, 100),
        X("aten::add", "cpu_op", 105, 80, **{"External id": 2}),
        X("cudaLaunchKernel", "cuda_runtime", 180, 3, correlation=101, **{"External id": 2}),
        X("add_k", "kernel", 184, 6, pid=0, tid=7, correlation=101, stream=7, device=0),
    ]


def _run(tmp, name: str, device_name: str) -> RunSet:
    trace = write_trace(tmp / f"{name}.json", events(device_name), baseTimeNanoseconds=BASE,
                        distributedInfo={"rank": 0, "world_size": 1},
                        deviceProperties=[{"id": 0, "name": device_name, "totalGlobalMem": 85 << 30, "computeMajor": 9}])
    return RunSet([import_traces(trace, tmp / name).run_dir])


@pytest.fixture(scope="module")
def h100(tmp_path_factory):
    rs = _run(tmp_path_factory.mktemp("ov"), "h100", "NVIDIA H100 80GB HBM3")
    yield rs
    rs.close()


def test_overview_says_what_bounds_each_step_with_exact_shares(h100):
    d = ovd.overview(h100, run=0)
    assert d["verdict"] == "host-bound (60%): CPU operators and Python"
    s1, s2 = d["steps"]
    assert (s1["step"], s1["dur_ns"], s1["words"]) == (1, 100 * US, "device-bound (80%): device compute")
    assert s1["parts_ns"] == {"compute": 80 * US, "communication": 0, "memcpy": 0, "host + launch": 20 * US, "input": 0, "idle": 0}
    assert (s2["dur_ns"], s2["words"]) == (100 * US, "host-bound (100%): CPU operators and Python")
    assert s2["parts_ns"] == {"compute": 0, "communication": 0, "memcpy": 0, "host + launch": 100 * US, "input": 0, "idle": 0}
    # device utilisation per step: the busy union inside the step's range
    assert s1["devices"] == [{"device": 0, "busy_ns": 80 * US, "busy_share": 0.8}]
    assert s2["devices"] == [{"device": 0, "busy_ns": 6 * US, "busy_share": 0.06}]
    # the stacked bar draws exactly these parts, in ms
    fig = ov.steps_figure(d)
    bars = {t.name: list(t.y) for t in fig.data}
    assert list(bars) == ["compute", "communication", "memcpy", "host + launch", "input", "idle"]
    assert bars["compute"] == [0.08, 0.0] and bars["host + launch"] == [0.02, 0.1] and fig.layout.barmode == "stack"


def test_overview_top_lists_are_shares_of_step_time_on_the_critical_path(h100):
    top = ovd.overview(h100, run=0)["top"]
    assert top["basis"] == "critical_path" and top["denominator_ns"] == 200 * US
    assert "% of step time" in top["denominator"] and f"2 profiler steps' total of {duration(200 * US)}" in top["denominator"]
    assert [(k["name"], k["ns"], k["share"]) for k in top["kernels"]] == [("gemm", 80 * US, 0.4)]
    assert [(o["name"], o["ns"], o["share"]) for o in top["operators"]] == [("aten::mm", 85 * US, 0.425), ("aten::add", 80 * US, 0.4)]
    assert top["lines"] == []  # an imported trace without stacks has no user lines...
    assert any("no user source lines" in n for n in ovd.overview(h100, run=0)["ranks"][0]["quality"])  # ...and says so


def test_overview_sums_a_line_over_every_frame_on_it(tmp_path):
    """Two frames on one file:line (a `<lambda>` on the line of `forward`, called in step 2): the
    Overview's line is the sum of what the critical path charges both, the key analyzers/lines.py
    groups by (file, line), not the last frame's figure."""
    from neuron_explorer.analyzers import critical_path as cp

    py = [X("train.py(5): step_a", "python_function", 1, 98), X("model.py(10): forward", "python_function", 4, 20),
          X("train.py(7): step_b", "python_function", 101, 98), X("model.py(10): <lambda>", "python_function", 104, 82)]
    trace = write_trace(tmp_path / "t.json", events("NVIDIA H100 80GB HBM3") + py, baseTimeNanoseconds=BASE,
                        distributedInfo={"rank": 0, "world_size": 1})
    rs = RunSet([import_traces(trace, tmp_path / "run").run_dir])
    r = rs.get(0)
    frames = r.run.sql("SELECT frame_id FROM frames WHERE file = 'model.py' AND line = 10").fetchall()
    assert len(frames) == 2  # the case: two frame ids, one line
    per_frame = {f: 0 for (f,) in frames}
    for it in cp.path_items(r.run, cp.rank_path(r.run, 0)):
        if it["frame_id"] in per_frame and it["category"] != "idle":
            per_frame[it["frame_id"]] += it["charged_ns"]
    assert all(ns > 0 for ns in per_frame.values())  # both frames are charged: the last one alone is too little
    top = ovd.overview(rs, run=0)["top"]
    line = {x["name"]: x for x in top["lines"]}["model.py:10"]
    assert line["ns"] == sum(per_frame.values()) and line["ns"] > max(per_frame.values())
    assert line["share"] == line["ns"] / top["denominator_ns"]
    assert len([x for x in top["lines"] if x["name"] == "model.py:10"]) == 1
    rs.close()


def test_overview_mfu_per_step_and_roofline_with_the_device_ceilings(h100):
    d = ovd.overview(h100, run=0)
    flops, nbytes = 2 * 64 ** 3, 3 * 64 * 64 * 4
    s1, s2 = d["steps"]
    assert s1["mfu"] == pytest.approx(flops / (100 * US / 1e9) / 67e12, rel=1e-12)
    assert s2["mfu"] == 0.0  # a step with no counted FLOPs on a known device: 0, and the peak is known
    assert d["ranks"][0]["mfu_note"] is None
    (pt,) = d["roofline"]["points"]
    assert (pt["kernel"], pt["dtype"]) == ("gemm", "fp32")
    assert pt["intensity"] == pytest.approx(flops / nbytes, rel=1e-12)
    assert pt["tflops_per_s"] == pytest.approx(flops / (80 * US / 1e9) / 1e12, rel=1e-12)
    assert d["roofline"]["peak"]["name"] == "NVIDIA H100 SXM" and d["roofline"]["notes"] == []
    fig = ov.roofline_figure(d)
    names = [t.name for t in fig.data]
    assert names == ["kernels", "ceiling fp32 67 TFLOP/s"]
    ceiling = fig.data[1]
    knee = 67 * 1e3 / 3350  # FLOP/byte where 3,350 GB/s reaches 67 TFLOP/s
    assert ceiling.x[1] == pytest.approx(knee) and list(ceiling.y[1:]) == [67, 67]
    assert ceiling.y[0] == pytest.approx(ceiling.x[0] * 3350 / 1e3)  # the bandwidth slope below the knee
    util = ov.utilisation_figure(d)
    assert [t.name for t in util.data] == ["device 0 busy %", "MFU %"] and list(util.data[0].y) == [80.0, 6.0]


def test_unknown_device_says_so_and_draws_no_ceiling(tmp_path):
    rs = _run(tmp_path, "odd", "Mystery Accelerator 9000")
    d = ovd.overview(rs, run=0)
    assert [s["mfu"] for s in d["steps"]] == [None, None]
    assert d["ranks"][0]["mfu_note"] == "MFU unknown: unknown device peak for 'Mystery Accelerator 9000' (analyze --peak-tflops gives one)"
    assert d["roofline"]["peak"] is None and len(d["roofline"]["points"]) == 1
    assert any("unknown device peak" in n and "none is guessed" in n for n in d["roofline"]["notes"])
    fig = ov.roofline_figure(d)
    assert [t.name for t in fig.data] == ["kernels"]  # no made-up ceiling
    util = ov.utilisation_figure(d)
    assert "MFU %" not in [t.name for t in util.data]  # not drawn as 0
    assert any("unknown device peak" in a.text.replace("<br>", " ") for a in util.layout.annotations)
    rs.close()


def test_overview_is_served_as_json_and_drawn_by_the_callback(h100):
    client = dash_app.create_app(h100).server.test_client()
    body = client.get("/api/overview?run=0&rank=0").get_json()
    assert body["ok"] and body["data"]["verdict"] == "host-bound (60%): CPU operators and Python"
    assert client.get("/api/overview?run=0&rank=5").status_code == 400
    header, steps, util, tops, roof, rows = ov.figures(h100, 0, "all")
    assert "host-bound (60%)" in str(header) and "busy 80.0%" not in str(header)  # the window share, not a step's
    assert "overview-top-kernels" in str(tops)
    # the page opens with the tab empty (its charts and grid come with the callback, after the timeline)
    assert ov.layout().children is None
    page = str(ov.content(h100, 0, "all"))
    assert all(f"id='{i}'" in page for i in ("overview-steps", "overview-util", "overview-roofline", "overview-findings"))


# ---- findings: the rank picker, confidence, the whole evidence, denominators -----------------
def _report(rs: RunSet) -> Report:
    r = rs.get(0)
    gemm = r.query("SELECT event_id FROM events WHERE name = 'gemm'")[1][0][0]
    add_k = r.query("SELECT event_id FROM events WHERE name = 'add_k'")[1][0][0]
    summary = {"ranks": [{"rank": 0, "analysed_ns": 200 * US, "steps": {"count": 2}}]}
    return Report(run="x", summary=summary, findings=[
        Finding("critical-path", "gemm bounds step 1", "hotspot", "high", 80 * US, 0.4, 80 * US, Location(rank=0, steps=[1, 2], kernel="gemm"),
                Evidence("SELECT 1", [gemm]), "bf16", 0.75, ["no user source frames recorded"]),
        Finding("copies", "two kernels", "copies", "low", 10 * US, 0.05, 10 * US, Location(rank=0), Evidence("SELECT 2", [gemm, add_k]), "x", 1.0),
        Finding("rank-skew", "ranks differ", "step_variance", "low", 1 * US, 0.005, 1 * US, Location(rank=None), Evidence("SELECT 3", []),
                "y", 0.9)])


def test_findings_zoom_to_their_whole_evidence_and_follow_the_rank(h100, monkeypatch):
    r = h100.get(0)
    for k in ("findings", "report_summary"):
        monkeypatch.delitem(r._facts, k, raising=False)
    monkeypatch.setattr(findings_view, "_load_analyze", lambda: lambda path, write: _report(h100))
    rows = queries.findings(h100, run=0)["rows"]
    # all its steps (0-200 us) and its sample, not the one 80 us sample: padded by a tenth
    assert (rows[0]["t0"], rows[0]["t1"]) == (BASE - 20 * US, BASE + 220 * US)
    assert (rows[1]["t0"], rows[1]["t1"]) == (BASE + 10 * US - 18 * US, BASE + 190 * US + 18 * US)  # both samples
    assert (rows[2]["t0"], rows[2]["t1"]) == (None, None)
    view = dash_app.view_for(h100, "findings", 0, "all", None, 0, None)
    assert (view["t0"], view["t1"], view["finding"]) == (BASE - 20 * US, BASE + 220 * US, 0)
    # the rank picker: rank 0's findings and the run-wide one
    assert [f["index"] for f in queries.findings(h100, run=0, rank=0)["rows"]] == [0, 1, 2]
    got = panels.findings_for(h100, 0, 0)
    assert got[0]["share %"] == 40.0 and got[0]["share of"] == f"share of rank 0's step time ({duration(200 * US)}, 2 steps)"
    assert got[0]["confidence"] == 0.75 and got[0]["notes"] == "no user source frames recorded"
    assert got[2]["share of"] == "share of the longest rank's analysed time"
    note = panels.findings_note(h100, 0, 0, got)
    assert "need not add up to 100%" in note and f"rank 0's step time ({duration(200 * US)}, 2 steps)" in note
    for k in ("findings", "report_summary"):
        monkeypatch.delitem(r._facts, k)


def test_findings_of_a_two_rank_run_follow_the_rank_picker(tmp_path, monkeypatch):
    d = tmp_path / "traces"
    for rank in (0, 1):
        write_trace(d / f"rank-{rank}.json", [X("ProfilerStep#1", "user_annotation", 0, 50, pid=10 + rank, tid=10 + rank),
                                              X(f"op{rank}", "cpu_op", 0, 10, pid=10 + rank, tid=10 + rank)],
                    baseTimeNanoseconds=BASE, distributedInfo={"rank": rank, "world_size": 2})
    rs = RunSet([import_traces(d, tmp_path / "run").run_dir])
    rep = Report(run="x", summary={"ranks": [{"rank": k, "analysed_ns": 50 * US, "steps": {"count": 1}} for k in (0, 1)]}, findings=[
        Finding("hotspot", f"op{k}", "hotspot", "high", 10 * US, 0.2, 10 * US, Location(rank=k, steps=[1]), Evidence("SELECT 1", []), "z", 0.8)
        for k in (1, 0)])
    monkeypatch.setattr(findings_view, "_load_analyze", lambda: lambda path, write: rep)
    assert [f["title"] for f in panels.findings_for(rs, 0, 1)] == ["op1"]
    assert [f["title"] for f in panels.findings_for(rs, 0, "all")] == ["op1", "op0"]
    only0 = panels.findings_for(rs, 0, 0)
    assert [(f["id"], f["title"], f["share of"]) for f in only0] == [("1", "op0", f"share of rank 0's step time ({duration(50 * US)}, 1 step)")]
    rs.close()


# ---- a real GPU training trace: the device is busy, and the page says so ---------------------
def test_real_gpu_training_trace_is_shown_device_bound(tmp_path):
    rs = RunSet([import_traces(TRACES / "cuda_train_68k_events.json.gz", tmp_path / "gpu").run_dir])
    d = ovd.overview(rs, run=0)
    assert d["verdict"].startswith("device-bound (9") and d["verdict"].endswith("device compute")
    (dev,) = d["ranks"][0]["devices"]
    assert dev["busy_share"] > 0.95  # the union of its device work over the analysed time (the steps)
    from neuron_explorer.analyzers import analyze

    summary = next(r for r in analyze(rs.runs[0].path, write=False).summary["ranks"] if r["rank"] == 0)
    (breakdown,) = summary["device_time"]  # the report's device time breakdown, the same figure
    assert dev["busy_ns"] == breakdown["compute_ns"] + breakdown["communication_ns"] + breakdown["memory_ns"]
    for s in d["steps"]:
        assert sum(s["parts_ns"].values()) == s["dur_ns"]  # the bar's parts add up to the step, to the ns
    assert [s["step"] for s in d["steps"]] == [101, 102, 103, 104, 105]
    assert d["top"]["kernels"] and all(k["share"] < 1 for k in d["top"]["kernels"])
    assert d["ranks"][0]["mfu_note"].startswith("MFU unknown: no FLOPs counted")  # no shapes in this trace: said, not 0
    assert not any("Synchronize" in f["title"] or "Hotspot operator" in f["title"] for f in d["findings"][:3])
    rs.close()


def test_an_inference_trace_without_steps_is_shown_what_bounds_its_span(tmp_path):
    """vLLM's piecewise graphs, no profiler steps: the verdict is the critical path's over the span
    (the device busy 96.7% of it), said to be over the span; no step bars."""
    rs = RunSet([import_traces(TRACES / "mi300x_vllm_hipgraph_piecewise.json.gz", tmp_path / "vllm").run_dir])
    d = ovd.overview(rs, run=0)
    assert d["verdict"] == "device-bound (96%): device compute over the profiled span"
    assert d["steps"] == [] and any(n.startswith("no profiler steps") for n in d["ranks"][0]["quality"])
    rs.close()


def test_a_counted_data_quality_problem_is_noted_once(tmp_path):
    """Two operators that overlap on one thread: the rank's notes say it once (with what it may
    mean), not again as the import's warning (mi300x_vllm_hipgraph_piecewise listed '2 overlapping
    slices on one thread (events dropped or clocks skewed)' and 'rank 0: 2 slices that overlap
    another on the same thread'); a warning about something else stays."""
    from neuron_explorer.dashboard.views import overview as ovd

    events = [X("ProfilerStep#1", "user_annotation", 0, 1000), X("aten::mm", "cpu_op", 100, 300), X("aten::add", "cpu_op", 300, 300)]
    rs = RunSet([import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir])
    try:
        d = ovd.overview(rs, run=0)
        warned = rs.runs[0].run.manifest["warnings"]
    finally:
        rs.close()
    assert "1 overlapping slices on one thread (events dropped or clocks skewed)" in d["ranks"][0]["quality"]
    assert "rank 0: 1 slices that overlap another on the same thread" in warned
    assert not any("overlap" in w for w in d["warnings"])
    assert [w for w in warned if "overlap" not in w] == d["warnings"]
