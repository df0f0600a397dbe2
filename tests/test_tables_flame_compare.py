"""Issue 15 items 9-11 and 13 without a browser: the flame view's aggregation, the table views'
% columns and notes, diff's matching of one file recorded by two paths, the not-same-job
warning, and a live recording made with a relative script path whose source the dashboard reads.

The hand-built run (one profiler step, host pid 1 / tid 1, device 0 stream 7; µs):

    0 ───────────────────────────── ProfilerStep#1 ──────────────────────────── 1000
      10 train.py(10): forward ──────────── 600      700 train.py(20): loss ── 900
        20 aten::linear ─────────── 500                710 aten::relu ── 800
          30 aten::mm ──── 400                           720 launch → relu_k  (device 100 us)
            40 launch → gemm  (device 300 us)
            50 launch → gemm  (device 200 us)
        device: gemm 300 + gemm 200 + relu_k 100 = 600 us; streams 7 and 8 overlap in the step

Known answers (the flame graph of the call stack). Device metric: root 600 us; thread 1 →
ProfilerStep#1 → train.py(10): forward → aten::linear → aten::mm → cudaLaunchKernel → gemm 500 us
(two kernels); → train.py(20): loss → aten::relu → cudaLaunchKernel → relu_k 100 us. CPU metric
(self times of the host slices): root 1000 us, the step's own range; train.py(10): forward 590,
aten::linear 500, aten::mm 400 (its launches 5 + 5), train.py(20): loss 200, aten::relu 90.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_explorer.analyzers import diff as diff_mod
from neuron_explorer.analyzers import job
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import queries
from neuron_explorer.dashboard.runs import QueryError, RunSet
from neuron_explorer.dashboard.ui import flame, panels

from .conftest import cli, write_trace
from .test_dashboard_compare import BASE_STEPS, TEST_STEPS, _steps_trace

pytestmark = pytest.mark.slow  # tier: records real torch runs

BASE_NS = 1_700_000_000_000_000_000


def _flame_trace(path: Path) -> Path:
    ev = []

    def X(name, cat, ts, dur, pid=1, tid=1, **args):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args})

    X("ProfilerStep#1", "user_annotation", 0, 1000)
    X("train.py(10): forward", "python_function", 10, 590)
    X("aten::linear", "cpu_op", 20, 500, **{"External id": 1})
    X("aten::mm", "cpu_op", 30, 400, **{"External id": 2})
    X("cudaLaunchKernel", "cuda_runtime", 40, 5, correlation=1, **{"External id": 2})
    X("cudaLaunchKernel", "cuda_runtime", 50, 5, correlation=2, **{"External id": 2})
    X("gemm", "kernel", 60, 300, pid=0, tid=7, correlation=1, stream=7, device=0)
    X("gemm", "kernel", 100, 200, pid=0, tid=8, correlation=2, stream=8, device=0)
    X("train.py(20): loss", "python_function", 700, 200)
    X("aten::relu", "cpu_op", 710, 90, **{"External id": 3})
    X("cudaLaunchKernel", "cuda_runtime", 720, 5, correlation=3, **{"External id": 3})
    X("relu_k", "kernel", 730, 100, pid=0, tid=7, correlation=3, stream=7, device=0)
    return write_trace(path, ev, baseTimeNanoseconds=BASE_NS, distributedInfo={"rank": 0, "world_size": 1})


@pytest.fixture(scope="module")
def rs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flame")
    rs = RunSet([import_traces(_flame_trace(tmp / "t.json"), tmp / "run").run_dir])
    yield rs
    rs.close()


def _tree(data) -> dict:
    """path of labels (without the root) → (ns, count)."""
    by_id = dict(zip(data["ids"], zip(data["labels"], data["parents"], data["values"], data["counts"])))

    def path(i):
        out = []
        while by_id[i][1]:
            out.append(by_id[i][0])
            i = by_id[i][1]
        return tuple(reversed(out))
    return {path(i): (v, c) for i, (_, _, v, c) in by_id.items()}


def test_flame_of_a_step_adds_up_by_call_stack(rs):
    d = queries.flame(rs, run=0)
    assert (d["metric"], d["step"], d["total_ns"]) == ("device", 1, 600_000)
    t = _tree(d)
    assert t[()] == (600_000, 3)
    fwd = ("thread 1", "ProfilerStep#1", "train.py(10): forward")
    assert t[fwd] == (500_000, 2)
    assert t[(*fwd, "aten::linear", "aten::mm", "cudaLaunchKernel", "gemm")] == (500_000, 2)
    assert t[("thread 1", "ProfilerStep#1", "train.py(20): loss", "aten::relu", "cudaLaunchKernel", "relu_k")] == (100_000, 1)
    assert d["depth"] == 7
    # every box is at least the sum of the boxes above it (plotly's branchvalues "total"); device boxes exactly
    for i, _parent in zip(d["ids"], d["parents"]):
        kids = [v for v, p in zip(d["values"], d["parents"]) if p == i]
        assert not kids or sum(kids) == d["values"][d["ids"].index(i)]
    cpu = _tree(queries.flame(rs, run=0, metric="cpu"))
    assert cpu[()][0] == 1_000_000 and cpu[("thread 1", "ProfilerStep#1")][0] == 1_000_000
    assert cpu[fwd][0] == 590_000 and cpu[(*fwd, "aten::linear")][0] == 500_000 and cpu[(*fwd, "aten::linear", "aten::mm")][0] == 400_000
    assert cpu[(*fwd, "aten::linear", "aten::mm", "cudaLaunchKernel")] == (10_000, 2)
    assert cpu[("thread 1", "ProfilerStep#1", "train.py(20): loss", "aten::relu")][0] == 90_000
    fig = flame.figure(d)
    assert fig["data"][0]["type"] == "icicle" and fig["data"][0]["branchvalues"] == "total"
    for bad in ({"step": 7}, {"metric": "gpu"}, {"t0": 5, "t1": 1}):
        with pytest.raises(QueryError):
            queries.flame(rs, run=0, **bad)
    # a window instead of a step: the first 500 us hold the gemms only
    w = queries.flame(rs, run=0, t0=BASE_NS, t1=BASE_NS + 500_000)
    assert w["total_ns"] == 500_000 and w["step"] is None


def test_tables_say_what_their_shares_are_of_and_when_streams_overlap(rs):
    k = queries.kernels(rs, run=0)
    assert [(r["name"], r["device_total_ns"], r["device_pct"]) for r in k["rows"]] == [("gemm", 500_000, 83.3), ("relu_k", 100_000, 16.7)]
    assert "device time" in k["shares"]["device_pct"]
    by_op = queries.kernels_by_operator(rs, run=0)
    assert [(r["operator"], r["name"], r["calls"], r["device_total_ns"]) for r in by_op["rows"]] == [
        ("aten::mm", "gemm", 2, 500_000), ("aten::relu", "relu_k", 1, 100_000)]
    ops = {r["name"]: r for r in queries.operators(rs, run=0)["rows"]}
    assert ops["aten::linear"]["device_pct"] == 83.3 and ops["aten::relu"]["device_pct"] == 16.7
    assert sum(r["cpu_pct"] for r in ops.values()) == pytest.approx(100, abs=0.05)  # self times add up
    # the Steps tab: 600 us of device work added up over the streams in a 1000 us step, of which the
    # device is busy 400 us (the two gemms overlap 200 us); the share is of busy time (no note: 600 < 1000)
    grid = panels.tables_for(rs, 0, "all", "steps").children[0]
    assert [c["headerName"] for c in grid.columnDefs] == ["rank", "step", "start ms", "duration ms", "device work ms (all streams)",
                                                          "busiest device busy ms", "device busy % of step"]
    assert grid.rowData == [{"rank": 0, "step": 1, "start_ms": 0.0, "dur_ns": 1.0, "device_ns": 0.6, "busy_ns": 0.4, "device_pct": 40.0}]
    assert queries.steps(rs, run=0)["note"] == ""
    names = {c["field"]: c for c in panels.tables_for(rs, 0, "all", "kernels").children[0].columnDefs}
    # a kernel's cell is its short name (fmt.kernel_name), the whole name on hover
    assert names["name"]["tooltipField"] == "name_full" and names["name"]["cellStyle"] == {"textAlign": "left"}
    assert "device time" in names["device_pct"]["headerTooltip"]


def test_steps_note_where_device_time_exceeds_the_step(tmp_path):
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 100, "args": {}}]
    for i, stream in enumerate((7, 8)):  # two 80 us kernels on two streams at once: 160 us of device work, 80 us busy, in a 100 us step
        ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1 + i, "dur": 1,
                "args": {"correlation": 10 + i}},
               {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": stream, "ts": 10, "dur": 80,
                "args": {"correlation": 10 + i, "stream": stream, "device": 0}}]
    rs = RunSet([import_traces(write_trace(tmp_path / "t.json", ev, baseTimeNanoseconds=BASE_NS), tmp_path / "run").run_dir])
    s = queries.steps(rs, run=0)
    assert s["rows"][0]["device_pct"] == 80.0  # busy time, the overlap counted once: never above 100% of the step
    assert s["note"].startswith("device work exceeds the step's time in 1 of 1 steps: work on several streams")
    rs.close()


# ---- diff: one file by two paths, and not the same job --------------------------------------------
def test_match_files_pairs_a_relative_path_with_its_absolute_one():
    base = {"/home/u/proj/sub/train.py", "/home/u/proj/model.py", "/home/u/other/model.py"}
    assert diff_mod.match_files(base, {"sub/train.py", "model.py", "ain.py", "/elsewhere/sub/train.py"}) == {
        "sub/train.py": "/home/u/proj/sub/train.py"}  # model.py: two candidates; two absolute paths: neither is the other's end
    assert diff_mod.source_file("sub/train.py", "/home/u/proj") == "/home/u/proj/sub/train.py"
    assert diff_mod.source_file("<string>", "/home/u/proj") == "<string>"
    assert diff_mod.source_file("/abs/x.py", "/home/u/proj") == "/abs/x.py"


def _steps_run(tmp: Path, name: str, steps_ms, slow_ms=0.0, file="train.py", kernels=True) -> Path:
    trace = _steps_trace(tmp / f"{name}.json", steps_ms, slow_ms=slow_ms)
    doc = json.loads(trace.read_text())
    for e in doc["traceEvents"]:
        if e["cat"] == "python_function":
            e["name"] = e["name"].replace("train.py(", f"{file}(")
    if not kernels:
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] not in ("kernel", "cuda_runtime")]
    trace.write_text(json.dumps(doc))
    return import_traces(trace, tmp / name).run_dir


def test_diff_matches_a_line_recorded_by_a_relative_and_an_absolute_path(tmp_path):
    base = _steps_run(tmp_path, "base", BASE_STEPS, file="train.py")
    test = _steps_run(tmp_path, "test", TEST_STEPS, slow_ms=3.0, file=str(tmp_path / "proj" / "train.py"))
    d = diff_mod.compare(base, test)
    lines = {(x.key, x.metric): x for x in d.deltas if x.type == "source_line"}
    # train.py:10 ran in both runs: one "changed" row (its key the test run's path), no new/gone pair
    fwd = [x for x in lines.values() if x.key.endswith("train.py:10")]
    assert {x.status for x in fwd} <= {"changed"} and not any(x.status in ("new", "gone") for x in fwd)
    assert any(x.key == f"{tmp_path / 'proj' / 'train.py'}:20" and x.status == "new" for x in lines.values())  # truly new
    assert d.step_time.job_differences == [] and d.step_time.verdict == "slower"


def test_diff_warns_when_the_runs_are_not_the_same_job(tmp_path):
    base = _steps_run(tmp_path, "gpu", BASE_STEPS)
    test = _steps_run(tmp_path, "cpu", [x * 14.5 for x in BASE_STEPS], kernels=False)  # +1350%, on the CPU only
    d = diff_mod.compare(base, test)
    assert d.step_time.job_differences == ["device: a device vs the CPU only"]
    assert d.step_time.verdict == "cannot tell" and not d.step_time.significant
    assert "not the same job" in d.step_time.reason
    text = diff_mod.render_text(d)
    assert text.splitlines()[0].startswith("warning: not the same job (device: a device vs the CPU only)")
    assert "SLOWER" not in text
    rs = RunSet([base, test])
    from dash import html  # noqa: F401

    from neuron_explorer.dashboard.ui import compare_view
    panel = compare_view.verdict_panel(rs, 0, 1)
    assert panel.children[0].id == "cmp-job-warning" and "not the same job" in panel.children[0].children
    assert panel.children[1].children[0].children == "NOT THE SAME JOB"
    rs.close()


def test_job_differences_name_script_and_model():
    a = {"script": "train.py", "models": ["TinyNet"], "operators": {"aten::mm"}, "devices": ["H100"], "device_work": True}
    assert job.differences(a, dict(a)) == []
    b = {**a, "script": "bench.py", "models": ["ResNet"], "devices": ["A100"]}
    assert job.differences(a, b) == ["script: train.py vs bench.py", "model: TinyNet vs ResNet", "device: H100 vs A100"]
    c = {**a, "models": [], "operators": {"aten::conv2d", "aten::relu", "aten::add"}}
    d = {**c, "operators": {"aten::mm", "aten::softmax", "aten::add"}}
    assert job.differences(c, d) == ["model: they share 20% of their 5 operator names"]


# ---- a live recording made with a relative script path ----------------------------------------------
SCRIPT = """import torch
def step(x, w):
    y = x @ w
    return torch.relu(y).sum()
x = torch.randn(32, 32); w = torch.randn(32, 32)
for _ in range(4):
    step(x, w)
"""


def test_live_frames_recorded_relative_to_the_cwd_are_read_from_it(tmp_path):
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    (proj / "sub" / "plain.py").write_text(SCRIPT)
    out = cli("record", "-o", tmp_path / "runs" / "rel", "sub/plain.py", cwd=proj)
    assert out.returncode == 0, out.stderr
    run_dir = tmp_path / "runs" / "rel"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["cwd"] == str(proj)
    rs = RunSet([run_dir])
    r = rs.get(0)
    fid, file = r.query("SELECT frame_id, file FROM frames WHERE file LIKE '%plain.py' AND line = 3")[1][0]
    assert file == "sub/plain.py"  # as the profiler recorded it: relative to the cwd
    src = queries.source(rs, run=0, frame_id=fid)
    assert src["readable"] and src["path"] == str(proj / "sub" / "plain.py")
    assert [x["text"] for x in src["lines"] if x["current"]] == ["    y = x @ w"]
    assert src["looked_in"][0] == str(proj / "sub" / "plain.py")
    # the file gone: the answer says where it looked
    (proj / "sub" / "plain.py").rename(proj / "sub" / "moved.py")
    gone = queries.source(rs, run=0, frame_id=fid)
    assert not gone["readable"] and gone["reason"].startswith(f"source file not found; looked at {proj / 'sub' / 'plain.py'}")
    rs.close()
