"""The dashboard's query functions, JSON API and callbacks on hand-built traces with known answers.

    host pid 1 / tid 1, times in us after BASE:
    0 ...................................................................... 100  ProfilerStep#1
     1 .................................................................... 99   train.py(5): step_fn
          10 ......................... 50 aten::linear                   60 ..... 70 aten::relu
            12 ............ 40 aten::addmm                                  62 64 launch (corr 102)
              14 18 launch (corr 100)    42 45 launch (corr 101)
    device 0 / stream 7:
                  20 ... 30 gemm            46 48 bias                         65 ... 71 relu_k
    memory: +1024 at 15 (total 1024), +512 at 66 (1536), -1024 at 80 (512)

Known answers: aten::linear CPU total 40 us, self 40 - 28 - 3 = 9 us, device self 2 us (bias:
launched directly inside it), device total 12 us (gemm + bias); aten::addmm total 28, self 24,
device 10/10; aten::relu total 10, self 8, device 6/6; step 1 device time 18 us.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from neuron_explorer.analyzers.model import Evidence, Finding, Location, Report
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import app as dash_app
from neuron_explorer.dashboard import figure, queries
from neuron_explorer.dashboard import runs as runs_mod
from neuron_explorer.dashboard import timeline as tl_mod
from neuron_explorer.dashboard.runs import QueryError, RunSet, drawn_sql
from neuron_explorer.dashboard.views import findings as findings_view
from neuron_explorer.errors import NeuronExplorerError

from .conftest import TRACES, X, cli, write_trace

BASE = 1_700_000_000_000_000_000
US = 1000


def MEM(ts, nbytes, total):
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "s": "t",
            "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": nbytes, "Total Allocated": total, "Total Reserved": 4096}}


EVENTS = [
    X("ProfilerStep#1", "user_annotation", 0, 100),
    X("train.py(5): step_fn", "python_function", 1, 98),
    X("aten::linear", "cpu_op", 10, 40, **{"External id": 1}),
    X("aten::addmm", "cpu_op", 12, 28, **{"External id": 2, "Input Dims": [[8, 4], [4, 2]]}),
    X("cudaLaunchKernel", "cuda_runtime", 14, 4, correlation=100, **{"External id": 2}),
    X("cudaLaunchKernel", "cuda_runtime", 42, 3, correlation=101, **{"External id": 1}),
    X("aten::relu", "cpu_op", 60, 10, **{"External id": 3}),
    X("cudaLaunchKernel", "cuda_runtime", 62, 2, correlation=102, **{"External id": 3}),
    X("gemm", "kernel", 20, 10, pid=0, tid=7, correlation=100, stream=7, device=0),
    X("bias", "kernel", 46, 2, pid=0, tid=7, correlation=101, stream=7, device=0),
    X("relu_k", "kernel", 65, 6, pid=0, tid=7, correlation=102, stream=7, device=0),
    MEM(15, 1024, 1024), MEM(66, 512, 1536), MEM(80, -1024, 512),
]
SOURCE = "import torch\n\n\n# the step\ndef step_fn():\n    y = model(x)\n    return y\n"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dash")
    (tmp / "train.py").write_text(SOURCE)  # beside the trace: the run's source root
    trace = write_trace(tmp / "t.json", EVENTS, baseTimeNanoseconds=BASE, distributedInfo={"rank": 0, "world_size": 1})
    run_dir = import_traces(trace, tmp / "run").run_dir
    rs = RunSet([run_dir])
    yield rs, tmp
    rs.close()


@pytest.fixture(scope="module")
def rs(made):
    return made[0]


def eid(rs, name: str, ts_us: float | None = None) -> int:
    sql = "SELECT event_id FROM events WHERE name = ?" + ("" if ts_us is None else f" AND ts_ns = {BASE + int(ts_us * US)}")
    rows = rs.get(0).query(sql, [name])[1]
    assert len(rows) == 1, (name, rows)
    return rows[0][0]


def by_name(rows, name):
    return next(r for r in rows if r["name"] == name)


# ---- query functions -------------------------------------------------------------------------
def test_operators_self_and_total_cpu_and_device(rs):
    rows = queries.operators(rs, run=0)["rows"]
    lin, mm, relu = by_name(rows, "aten::linear"), by_name(rows, "aten::addmm"), by_name(rows, "aten::relu")
    assert (lin["calls"], lin["cpu_total_ns"], lin["cpu_self_ns"], lin["device_self_ns"], lin["device_total_ns"]) == \
        (1, 40 * US, 9 * US, 2 * US, 12 * US)
    assert (mm["cpu_total_ns"], mm["cpu_self_ns"], mm["device_self_ns"], mm["device_total_ns"]) == (28 * US, 24 * US, 10 * US, 10 * US)
    assert (relu["cpu_total_ns"], relu["cpu_self_ns"], relu["device_self_ns"], relu["device_total_ns"]) == (10 * US, 8 * US, 6 * US, 6 * US)
    assert [r["name"] for r in rows] == ["aten::linear", "aten::addmm", "aten::relu"]  # by device total


def test_operators_cpu_total_counts_a_call_inside_one_of_its_name_once(tmp_path):
    """aten::copy_ inside aten::copy_ (a blocking copy calls copy_ again): the Operators grid summed
    both, 926.20 ms in mi300x_sglang_qwen3_decode's 473.83 ms trace. CPU total counts the calls no
    call of the same name holds; calls still counts both, and another name in between changes nothing."""
    events = [X("aten::to", "cpu_op", 0, 200), X("aten::copy_", "cpu_op", 10, 100), X("aten::copy_", "cpu_op", 20, 80),
              X("aten::empty", "cpu_op", 30, 5), X("aten::copy_", "cpu_op", 120, 50), X("aten::contiguous", "cpu_op", 130, 30),
              X("aten::copy_", "cpu_op", 135, 20), X("aten::copy_", "cpu_op", 300, 40)]
    runs = RunSet([import_traces(write_trace(tmp_path / "c.json", events), tmp_path / "run").run_dir])
    try:
        rows = {r["name"]: (r["calls"], r["cpu_total_ns"]) for r in queries.operators(runs, run=0)["rows"]}
    finally:
        runs.close()
    # copy_ at 10 (100 µs, holding the one at 20), at 120 (50 µs, holding one through aten::contiguous), at 300 (40 µs)
    assert rows["aten::copy_"] == (5, (100 + 50 + 40) * US)
    assert rows["aten::to"] == (1, 200 * US) and rows["aten::contiguous"] == (1, 30 * US)


def test_kernels_table(rs):
    rows = queries.kernels(rs, run=0)["rows"]
    assert [(r["name"], r["calls"], r["device_total_ns"], r["launch_cpu_ns"]) for r in rows] == [
        ("gemm", 1, 10 * US, 4 * US), ("relu_k", 1, 6 * US, 2 * US), ("bias", 1, 2 * US, 3 * US)]


def test_kernels_table_shares_a_graph_launch_among_the_kernels_it_replays(tmp_path):
    """One cudaGraphLaunch (30 µs of CPU) replays three kernels; a plain launch (6 µs) one. The
    graph launch's time was the launch CPU of each replayed kernel (90 µs in a column that the 36 µs
    of launches should add up to); now each gets a third of it."""
    events = [X("aten::linear", "cpu_op", 0, 60, **{"External id": 1}),
              X("cudaGraphLaunch", "cuda_runtime", 5, 30, correlation=5, **{"External id": 1}),
              X("cudaLaunchKernel", "cuda_runtime", 40, 6, correlation=6, **{"External id": 1}),
              *[X(k, "kernel", 50 + 10 * i, 8, pid=0, tid=7, correlation=5, stream=7, device=0) for i, k in enumerate(("gemm", "bias", "relu"))],
              X("gemm", "kernel", 90, 8, pid=0, tid=7, correlation=6, stream=7, device=0)]
    runs = RunSet([import_traces(write_trace(tmp_path / "g.json", events), tmp_path / "run").run_dir])
    try:
        rows = {r["name"]: (r["calls"], r["launch_cpu_ns"]) for r in queries.kernels(runs, run=0)["rows"]}
    finally:
        runs.close()
    assert rows == {"gemm": (2, 10 * US + 6 * US), "bias": (1, 10 * US), "relu": (1, 10 * US)}
    assert sum(n for _, n in rows.values()) == 36 * US


def test_steps_and_memory(rs):
    st = queries.steps(rs, run=0)["rows"]
    assert [(s["step"], s["start_ms"], s["dur_ns"], s["device_ns"]) for s in st] == [(1, 0.0, 100 * US, 18 * US)]
    mem = queries.memory(rs, run=0, width=100)["series"]
    assert len(mem) == 1 and mem[0]["bytes"] == [1024, 1536, 512]
    assert mem[0]["x_ms"] == pytest.approx([0.015, 0.066, 0.080])


def test_memory_of_an_old_trace_without_totals(tmp_path):
    """torch <= 1.9 wrote `[memory]` events with `Bytes` only: the allocated total is the running
    sum per device, and the memory view draws it instead of failing."""
    old = [{**MEM(ts, n, 0), "args": {"Device Type": dt, "Device Id": dev, "Bytes": n}}
           for ts, n, dt, dev in [(15, 1024, 1, 0), (20, 64, 0, -1), (66, 512, 1, 0), (70, -64, 0, -1), (80, -1024, 1, 0)]]
    trace = write_trace(tmp_path / "old.json", [X("ProfilerStep#1", "user_annotation", 0, 100), *old])
    import_traces(trace, tmp_path / "run")
    mem = {s["label"]: s for s in queries.memory(RunSet([tmp_path / "run"]), run=0, width=100)["series"]}
    assert mem["r0 device 0 allocated"]["bytes"] == [1024, 1536, 512]
    assert mem["r0 cpu allocated"]["bytes"] == [64, 0]
    assert mem["r0 device 0 allocated"]["x_ms"] == pytest.approx([0.015, 0.066, 0.080])


def test_source_lines_table(rs):
    rows = queries.source_lines(rs, run=0)["rows"]
    # the top-level operators called under train.py:5 (linear 40 + relu 10 us), and their kernels (18 us)
    assert [(r["source"], r["cpu_self_ns"], r["device_self_ns"]) for r in rows] == [("train.py:5", 50 * US, 18 * US)]


def test_timeline_exact_slices_lanes_and_rows(rs):
    tl = tl_mod.timeline(rs, run=0, width=1000)
    assert tl["mode"] == "exact" and tl["visible_events"] == 11
    labels = [ln["label"] for ln in tl["lanes"]]
    assert labels == ["r0 pid 1 tid 1", "r0 GPU 0 · stream 7"]  # no thread names in this trace's metadata
    host, dev = tl["lanes"]
    assert host["rows"] == 5 and dev["y0"] == host["rows"] + 1
    s = tl["slices"]
    rows = {(s["name"][i], round(s["x0"][i], 3)): (s["y"][i], s["x1"][i]) for i in range(len(s["x0"]))}
    assert rows[("aten::addmm", 12.0)] == (3, 40.0)  # depth 3 on the host lane, offsets in us from t0
    assert rows[("gemm", 20.0)] == (dev["y0"], 30.0)
    assert tl["steps"] == [{"rank": 0, "step": 1, "x0": 0.0, "x1": 100.0}]
    json.dumps(tl)  # plain data


def META(what, pid, tid, **args):
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "ts": 0, "args": args}


def test_lanes_named_from_trace_metadata_and_meta_lanes_hidden(tmp_path):
    """Kineto names threads "thread <tid> (<name>)" (a later name wins) and labels device
    processes "GPU 0"; the profiler's own `Spans` lane, a pseudo-thread with a negative tid and an
    event without a thread are meta lanes, hidden unless asked for.

        pid 1 tid 1262  (pt_autograd_0)  0 ....... 40 aten::mm
        pid 1 tid -9                     5 .. 10 fake
        pid Spans tid PyTorch Profiler   0 ............... 100 PyTorch Profiler (0)
        GPU 0 stream 7                        20 .. 30 gemm
    """
    events = [META("thread_name", 1, 1262, name="thread 1262 (pt_main_thread)"), META("thread_name", 1, 1262, name="thread 1262 (pt_autograd_0)"),
              META("process_labels", 0, 0, labels="GPU 0"), META("process_labels", 1, 0, labels="CPU"),
              X("aten::mm", "cpu_op", 0, 40, pid=1, tid=1262), X("fake", "cpu_op", 5, 5, pid=1, tid=-9),
              X("PyTorch Profiler (0)", "Trace", 0, 100, pid="Spans", tid="PyTorch Profiler"),
              X("gemm", "kernel", 20, 10, pid=0, tid=7, stream=7, device=0)]
    rs = RunSet([import_traces(write_trace(tmp_path / "t.json", events, baseTimeNanoseconds=BASE), tmp_path / "run").run_dir])
    shown = tl_mod.timeline(rs, run=0, width=1000)
    assert [ln["label"] for ln in shown["lanes"]] == ["r0 pt_autograd_0 · tid 1262", "r0 GPU 0 · stream 7"]
    assert shown["hidden_lanes"] == 2 and sorted(shown["slices"]["name"]) == ["aten::mm", "gemm"] and shown["visible_events"] == 2
    assert [ln["y0"] for ln in shown["lanes"]] == [0, 2]  # the shown lanes move up
    every = tl_mod.timeline(rs, run=0, width=1000, all_lanes="true")
    assert sorted(ln["label"] for ln in every["lanes"]) == sorted(["r0 Spans", "r0 pid 1 tid -9", "r0 pt_autograd_0 · tid 1262",
                                                                   "r0 GPU 0 · stream 7"])
    assert every["hidden_lanes"] == 0 and every["visible_events"] == 4
    # aggregated too: every shown event is a slice or in a bucket, the hidden ones in neither
    import neuron_explorer.dashboard.timeline as t
    old, t.EXACT_CAP = t.EXACT_CAP, 1
    try:
        agg = tl_mod.timeline(rs, run=0, width=10)
        assert agg["mode"] == "aggregated" and agg["visible_events"] == 2 and agg["slices"]["name"] == ["aten::mm"]
    finally:
        t.EXACT_CAP = old
    # the selected kernel is outlined on its row in the layout without meta lanes
    fig, status = dash_app.timeline_figure(rs, dash_app.view_for(rs, None, 0, "all", None, None, None), 1000,
                                           rs.get(0).query("SELECT event_id FROM events WHERE name = 'gemm'")[1][0][0])
    sel = next(tr for tr in fig["data"] if tr["name"] == "selected")
    assert min(sel["y"]) < 2 < max(sel["y"]) and "2 meta lanes hidden" in status
    with pytest.raises(QueryError):
        tl_mod.timeline(rs, run=0, all_lanes="maybe")
    rs.close()


def test_timeline_aggregates_below_a_pixel(rs, monkeypatch):
    monkeypatch.setattr(tl_mod, "EXACT_CAP", 2)
    tl = tl_mod.timeline(rs, run=0, t0=BASE, t1=BASE + 100 * US, width=10)  # 1 pixel = 10 us
    assert tl["mode"] == "aggregated"
    assert sorted(tl["slices"]["name"]) == ["ProfilerStep#1", "train.py(5): step_fn"]
    b = tl["buckets"]
    dev_y = tl["lanes"][1]["y0"]
    dev = {round(b["x0"][i]): (b["occupancy"][i], b["event_id"][i], b["events"][i]) for i in range(len(b["x0"])) if b["y"][i] == dev_y}
    assert dev == {20: (1.0, eid(rs, "gemm"), 1), 40: (pytest.approx(0.2), eid(rs, "bias"), 1), 60: (pytest.approx(0.6), eid(rs, "relu_k"), 1)}
    assert tl["visible_events"] == 11  # every event is either a slice or counted in a bucket


def test_timeline_flanks_hold_the_window_width_either_side_as_buckets(rs):
    """With `flanks`, [t0 - w, t0) and [t1, t1 + w) are added as buckets of FLANK_PX pixels, every
    event there aggregated, offsets from t0; the window's own figures do not change."""
    t0, t1 = BASE + 40 * US, BASE + 60 * US  # w = 20 us; 20 pixels of 1 us, flank buckets of 4 us
    plain = tl_mod.timeline(rs, run=0, t0=t0, t1=t1, width=20)
    tl = tl_mod.timeline(rs, run=0, t0=t0, t1=t1, width=20, flanks=True)
    assert tl_mod.FLANK_PX == 4 and tl["mode"] == plain["mode"] == "exact" and not plain["buckets"]["x0"] and plain["flank"] is None
    assert tl["slices"] == plain["slices"] and tl["visible_events"] == plain["visible_events"]
    b = tl["buckets"]
    assert tl["flank"] == {"t0": BASE + 20 * US, "t1": BASE + 80 * US, "buckets": len(b["x0"])}
    dev_y = tl["lanes"][1]["y0"]
    dev = sorted((b["x0"][i], b["x1"][i], b["occupancy"][i], b["events"][i], b["event_id"][i]) for i in range(len(b["x0"])) if b["y"][i] == dev_y)
    # gemm (20-30 us) from the left flank's first bucket [-20, -16) to its end; relu_k (65-71) in the right one's second [24, 28)
    assert dev == [(-20.0, -10.0, 1.0, 1, eid(rs, "gemm")), (24.0, 31.0, 1.0, 1, eid(rs, "relu_k"))]
    # every event that overlaps a flank is counted in one of its buckets: step, step_fn, linear, addmm, gemm | step, step_fn, relu, launch, relu_k
    assert sum(b["events"]) == 10 and all(x0 < 0 or x0 >= 20 for x0 in b["x0"])
    # a window at the run's start has no left flank (no time of the run there)
    start = tl_mod.timeline(rs, run=0, t0=BASE, t1=BASE + 30 * US, width=20, flanks=True)
    assert start["flank"]["t0"] == BASE and min(start["buckets"]["x0"]) >= 30


def test_timeline_window_finds_long_events_that_start_before_it(made, monkeypatch):
    """With few events kept in memory, the scan's lower bound t0 - short_max_dur must not lose a
    slice that began before the window."""
    monkeypatch.setattr(runs_mod, "LONG_EVENTS", 2)
    rs = RunSet([made[0].runs[0].path])
    tl = tl_mod.timeline(rs, run=0, t0=BASE + 61 * US, t1=BASE + 70 * US, width=500)
    assert rs.get(0).long_events()[0] == 40 * US
    assert sorted(tl["slices"]["name"]) == sorted(["ProfilerStep#1", "train.py(5): step_fn", "aten::relu", "cudaLaunchKernel", "relu_k"])
    rs.close()


def test_wide_window_from_the_pyramid_equals_the_raw_scan(made, monkeypatch):
    """The pre-aggregated pyramid (used for wide windows) gives the buckets a scan of every event gives."""
    monkeypatch.setattr(runs_mod, "LONG_EVENTS", 2)  # only the step and step_fn stay in memory
    monkeypatch.setattr(tl_mod, "EXACT_CAP", 1)
    monkeypatch.setattr(tl_mod, "PYRAMID_BUCKETS", 1001)  # fine buckets of 100 ns: event starts fall on their edges

    def buckets(rs):
        b = tl_mod.timeline(rs, run=0, width=10)
        assert b["mode"] == "aggregated"
        return sorted(zip(b["buckets"]["y"], b["buckets"]["x0"], b["buckets"]["x1"], b["buckets"]["occupancy"],
                          b["buckets"]["events"], b["buckets"]["event_id"], b["buckets"]["kind"])), b["slices"]["name"]

    used = []
    real_sql = tl_mod._pyramid_sql
    monkeypatch.setattr(tl_mod, "_pyramid_sql", lambda *a: used.append(a[-1]) or real_sql(*a))
    rs = RunSet([made[0].runs[0].path])
    from_pyramid = buckets(rs)
    assert used and used[0][1] == 100  # the pyramid answered, with 100 ns fine buckets
    monkeypatch.setattr(tl_mod, "PYRAMID_PX_FACTOR", 10**9)  # never use it
    from_scan = buckets(rs)
    assert from_pyramid == from_scan and len(from_scan[0]) >= 6
    rs.close()


def test_the_window_and_its_flanks_are_one_query_per_source_with_each_part_s_buckets(made, monkeypatch):
    """_aggregate_parts: the window's buckets and both flanks' from one pyramid scan (or one events
    scan), each part's buckets what that part alone gives (a row that overlaps two parts counts in both)."""
    monkeypatch.setattr(runs_mod, "LONG_EVENTS", 2)  # only the step and step_fn stay in memory: the rest is in the pyramid
    monkeypatch.setattr(tl_mod, "PYRAMID_BUCKETS", 1001)  # fine buckets of 100 ns
    rs = RunSet([made[0].runs[0].path])
    r = rs.get(0)
    shown = tl_mod._shown_sql(r, None, True)

    def rows(tbl):
        cols = ("y", "bucket", "occupancy", "end_offset", "events", "kind", "event_id")
        return sorted(zip(*(tbl[c].to_pylist() for c in cols)))

    tl_mod._aggregate_parts(r, None, [(BASE, BASE + 100 * US, 2 * US, tl_mod.TIME_LIMIT_NS)], shown, True)  # the pyramid built
    for b in (2 * US, 100.0):  # pixels of 20 fine buckets (every part from the pyramid) and of 1 (flanks 4: from the events)
        parts = [(BASE + 40 * US, BASE + 60 * US, b, tl_mod.TIME_LIMIT_NS), (BASE + 20 * US, BASE + 40 * US, b * 4, tl_mod.TIME_LIMIT_NS),
                 (BASE + 60 * US, BASE + 80 * US, b * 4, tl_mod.TIME_LIMIT_NS)]
        asked = []
        real = r.arrow
        monkeypatch.setattr(r, "arrow", lambda sql, params=None, asked=asked, real=real: asked.append(sql) or real(sql, params))
        together = tl_mod._aggregate_parts(r, None, parts, shown, True)
        assert len(asked) == 1 and ("_nx_pyramid" in asked[0]) == (b == 2 * US)
        monkeypatch.setattr(r, "arrow", real)
        alone = [tl_mod._aggregate_parts(r, None, [p], shown, True)[0] for p in parts]
        assert [rows(t) for t in together] == [rows(t) for t in alone]
        assert all(t.num_rows for t in together)
        # ProfilerStep#1 and step_fn span all three parts: counted in each
        assert all(sum(t["events"].to_pylist()) >= 2 for t in together)
    rs.close()


def test_event_chain_from_source_line_to_kernel(rs):
    d = queries.event(rs, run=0, event_id=eid(rs, "aten::addmm"))
    assert d["args"]["Input Dims"] == [[8, 4], [4, 2]]
    assert [(c["role"], c["name"]) for c in d["chain"]] == [
        ("source", "train.py:5 step_fn"), ("top operator", "aten::linear"), ("operator", "aten::addmm"),
        ("launch", "cudaLaunchKernel"), ("kernel", "gemm")]
    assert [(f["from"]["event_id"], f["to"]["event_id"]) for f in d["flows"]] == [(eid(rs, "cudaLaunchKernel", 14), eid(rs, "gemm"))]
    assert d["source"]["readable"] and [x["text"] for x in d["source"]["lines"] if x["current"]] == ["def step_fn():"]

    k = queries.event(rs, run=0, event_id=eid(rs, "bias"))
    assert k["launch"]["event_id"] == eid(rs, "cudaLaunchKernel", 42)
    assert k["operator"]["name"] == "aten::linear" and [x["name"] for x in k["kernels"]] == ["bias"]
    launch = queries.event(rs, run=0, event_id=eid(rs, "cudaLaunchKernel", 62))
    assert [x["name"] for x in launch["kernels"]] == ["relu_k"]
    assert launch["flows"][0]["to"]["y"] == k["y"]  # same device lane row


def test_source_reads_only_python_files_named_by_frames(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("password")
    events = [X(f"{secret}(1): f", "python_function", 0, 10), X("elsewhere.py(2): g", "python_function", 20, 5),
              X("aten::add", "cpu_op", 1, 2), X("aten::add", "cpu_op", 21, 2)]
    run_dir = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    rs = RunSet([run_dir])
    frames = rs.get(0).records("SELECT frame_id, file FROM frames ORDER BY file")
    for f in frames:
        src = queries.source(rs, run=0, frame_id=f["frame_id"])
        assert not src["readable"] and src["lines"] == [] and "password" not in json.dumps(src)
    with pytest.raises(QueryError):
        queries.source(rs, run=0, frame_id=123456789)
    rs.close()


def test_findings_zoom_targets_from_a_hand_made_report(rs, monkeypatch):
    addmm = eid(rs, "aten::addmm")
    report = Report(run="x", summary={}, findings=[
        Finding("hotspot", "addmm is hot", "hotspot", "high", 28 * US, 0.28, 28 * US, Location(rank=0, steps=[1], op="aten::addmm"),
                Evidence("SELECT 1", [addmm]), "fuse it", 0.9),
        Finding("step-outliers", "step 1 is slow", "step_variance", "low", 5 * US, 0.05, 5 * US, Location(rank=0, steps=[1]),
                Evidence("SELECT 2", []), "look", 0.5)])
    r = rs.get(0)
    monkeypatch.delitem(r._facts, "findings", raising=False)
    monkeypatch.setattr(findings_view, "_load_analyze", lambda: lambda path, write: report)
    rows = queries.findings(rs, run=0)["rows"]
    pad = 100 * US // 10  # its whole evidence: its sample and its step (0-100 us), padded by a tenth
    assert (rows[0]["t0"], rows[0]["t1"]) == (BASE - pad, BASE + 100 * US + pad)
    assert rows[0]["event_ids"] == [addmm]
    pad2 = 100 * US // 10
    assert (rows[1]["t0"], rows[1]["t1"]) == (BASE - pad2, BASE + 100 * US + pad2)  # no events: its steps
    view = dash_app.view_for(rs, "findings", 0, "all", None, 0, None)
    assert (view["t0"], view["t1"], view["finding"]) == (rows[0]["t0"], rows[0]["t1"], 0)
    fig, _ = dash_app.timeline_figure(rs, view, 800, None)
    sel = [t for t in fig["data"] if t["name"] == "highlighted"]
    assert sel and addmm in sel[0]["customdata"]
    monkeypatch.delitem(r._facts, "findings")


def test_findings_from_the_real_analyzer_are_ranked(tmp_path):
    run_dir = import_traces(TRACES / "cuda_alexnet_train.json.gz", tmp_path / "run").run_dir
    rs = RunSet([run_dir])
    rows = queries.findings(rs, run=0)["rows"]
    assert rows, "the analyzer found nothing on a real training trace"
    assert not (Path(run_dir) / "analysis").exists()  # the dashboard only reads the run
    rs.close()


def test_search_by_substring_and_regex_in_time_order(rs):
    """Any case, a part of the name; /…/ is a regular expression. Hits are in time order with the
    lane they are on; `count` is all matches even when `limit` cuts the hits."""
    found = queries.search(rs, run=0, text="LAUNCH")
    assert found["count"] == 3 and not found["regex"] and not found["truncated"]
    assert [(h["name"], h["ts_ns"] - BASE, h["dur_ns"], h["lane"]) for h in found["hits"]] == [
        ("cudaLaunchKernel", 14 * US, 4 * US, "r0 pid 1 tid 1"), ("cudaLaunchKernel", 42 * US, 3 * US, "r0 pid 1 tid 1"),
        ("cudaLaunchKernel", 62 * US, 2 * US, "r0 pid 1 tid 1")]
    assert [h["event_id"] for h in found["hits"]] == [eid(rs, "cudaLaunchKernel", t) for t in (14, 42, 62)]
    rx = queries.search(rs, run=0, text="/^(gemm|bias)$/")
    assert rx["regex"] and [(h["name"], h["lane"], h["start_ms"]) for h in rx["hits"]] == [
        ("gemm", "r0 GPU 0 · stream 7", 0.02), ("bias", "r0 GPU 0 · stream 7", 0.046)]
    assert queries.search(rs, run=0, text="/^gemm/")["count"] == 1 and queries.search(rs, run=0, text="gemm$")["count"] == 0  # $ is literal
    cut = queries.search(rs, run=0, text="aten::", limit=1)
    assert cut["count"] == 3 and [h["name"] for h in cut["hits"]] == ["aten::linear"] and cut["truncated"]
    assert queries.search(rs, run=0, text="aten::", limit=0)["count"] == 3
    assert queries.search(rs, run=0, text="no such kernel") == {"text": "no such kernel", "regex": False, "count": 0, "hits": [], "truncated": False}
    for bad in ("", "   ", None, "/(/", "x" * 501):
        with pytest.raises(QueryError):
            queries.search(rs, run=0, text=bad)


def test_search_box_steps_through_hits_and_zooms_to_each(rs):
    st = dash_app.search_step(rs, "search", "launch", 0, "all", None)
    assert st["ids"] == [eid(rs, "cudaLaunchKernel", t) for t in (14, 42, 62)] and st["i"] == 0
    assert dash_app.search_status(st) == "1 / 3"
    st = dash_app.search_step(rs, "search-next", "launch", 0, "all", st)
    assert st["i"] == 1 and dash_app.search_status(st) == "2 / 3"
    st = dash_app.search_step(rs, "search-prev", "launch", 0, "all", st)
    st = dash_app.search_step(rs, "search-prev", "launch", 0, "all", st)
    assert st["i"] == 2  # wraps around
    # the view around a hit: the event with its own length on each side (at least 10 us)
    v = dash_app.search_view(rs, 0, "all", eid(rs, "gemm"))
    assert (v["t0"], v["t1"]) == (BASE + 10 * US, BASE + 40 * US)
    fig, _ = dash_app.timeline_figure(rs, v, 900, eid(rs, "gemm"))
    assert "gemm" in next(t for t in fig["data"] if t["name"] == "labels")["text"]
    none = dash_app.search_step(rs, "search", "zzz", 0, "all", st)
    assert none["ids"] == [] and none["i"] is None and dash_app.search_status(none) == "no match"
    assert dash_app.search_status(dash_app.search_step(rs, "search", "", 0, "all", None)) == ""
    with pytest.raises(NeuronExplorerError):
        dash_app.search_step(rs, "search", "/[/", 0, "all", None)


# ---- callbacks ---------------------------------------------------------------------------------
def test_zoom_relayout_maps_the_absolute_axis_back_to_ns(rs):
    whole = dash_app.view_for(rs, None, 0, "all", None, None, None)
    assert (whole["t0"], whole["t1"]) == (BASE, BASE + 100 * US + 1)
    z = dash_app.view_for(rs, "timeline", 0, "all", {"xaxis.range[0]": 0.010, "xaxis.range[1]": 0.0305}, None, whole)
    assert (z["t0"], z["t1"]) == (BASE + 10 * US, BASE + 30 * US + 500)
    # the axis is ms from the run's first event in every window: it does not restart at 0 on a zoom
    fig, _ = dash_app.timeline_figure(rs, z, 1000, None)
    assert fig["layout"]["xaxis"]["range"] == pytest.approx([0.010, 0.0305]) and fig["layout"]["xaxis"]["ticksuffix"] == " ms"
    # where a double-click goes in the page: the whole run (0 to 100 µs, its [t0, t1) end 1 ns on), on the same axis
    assert fig["layout"]["meta"]["whole"] == pytest.approx([0.0, 0.100001])
    z2 = dash_app.view_for(rs, "timeline", 0, "all", {"xaxis.range": [0.015, 0.016]}, None, z)
    assert (z2["t0"], z2["t1"]) == (BASE + 15 * US, BASE + 16 * US)
    assert dash_app.view_for(rs, "timeline", 0, "all", {"xaxis.autorange": True}, None, z2)["t0"] == BASE
    with pytest.raises(NeuronExplorerError):  # a page resize (autosize) is not a zoom: the app ignores it
        dash_app.view_for(rs, "timeline", 0, "all", {"autosize": True}, None, z2)


@pytest.mark.parametrize("relayout", [{"xaxis.range[0]": "abc", "xaxis.range[1]": 3}, {"xaxis.range[0]": 5},
                                      {"xaxis.range": [3, 1]}, {"xaxis.range[0]": float("nan"), "xaxis.range[1]": 2}])
def test_malformed_zoom_is_an_error_not_a_crash(rs, relayout):
    whole = dash_app.view_for(rs, None, 0, "all", None, None, None)
    with pytest.raises(NeuronExplorerError):
        dash_app.view_for(rs, "timeline", 0, "all", relayout, None, whole)


@pytest.mark.parametrize("run,rank", [(7, "all"), ("x", "all"), (0, 9), (0, "zero")])
def test_bad_run_or_rank_is_an_error(rs, run, rank):
    with pytest.raises(NeuronExplorerError):
        dash_app.view_for(rs, None, run, rank, None, None, None)


def test_click_to_event_and_panel(rs):
    addmm = eid(rs, "aten::addmm")
    assert dash_app.clicked_event({"points": [{"customdata": addmm, "x": 1, "y": 3}]}) == addmm
    assert dash_app.clicked_event(None) is None
    for bad in ({"points": []}, {"points": "x"}, {"points": [{"customdata": "drop table"}]}):
        with pytest.raises(NeuronExplorerError):
            dash_app.clicked_event(bad)
    panel = json.dumps(dash_app.detail_panel(rs, 0, addmm).to_plotly_json(), default=lambda o: o.to_plotly_json())
    assert "aten::addmm" in panel and "def step_fn():" in panel and "train.py:5" in panel and "gemm" in panel
    with pytest.raises(NeuronExplorerError):
        dash_app.detail_panel(rs, 0, 999999)
    # the drawer is open (fixed over the page's foot) only while an event is selected: closed, it covers nothing
    assert "nx-open" not in dash_app.drawer_class(None).split() and "nx-detail" in dash_app.drawer_class(None).split()
    assert "nx-open" in dash_app.drawer_class(addmm).split() and "nx-open" in dash_app.drawer_class(0).split()


def test_figure_draws_span_segments_flows_and_memory(rs):
    view = dash_app.view_for(rs, None, 0, "all", None, None, None)
    fig, status = dash_app.timeline_figure(rs, view, 1000, eid(rs, "gemm"))
    gl = [t for t in fig["data"] if t.get("meta") == "spans"]  # the hover traces: one point per slice, its middle
    assert {t["name"] for t in gl} == {"step", "python", "cpu_op", "runtime", "kernel"}
    assert sum(len(t["customdata"]) for t in gl) == 11 and sum(len(t["text"]) for t in gl) == 11
    # painted without WebGL: per colour ONE filled SVG path right before its hover trace, no gaps in
    # it (a NaN gap costs the browser an SVG element), a rectangle per slice, 0.78 rows high
    assert {t["type"] for t in fig["data"]} == {"scatter"}
    starts, middles = {}, {}
    for t in gl:
        paint = fig["data"][fig["data"].index(t) - 1]
        assert paint["meta"] == "paint" and paint["fill"] == "toself"
        assert not np.isnan(_decode(paint["x"])).any() and not np.isnan(_decode(paint["y"])).any()
        x0, x1, lo, hi = _rectangles(paint)
        assert len(x0) == len(t["customdata"]) and (hi - lo).tolist() == pytest.approx([0.78] * len(x0))
        starts.update(zip(t["customdata"], x0.tolist()))
        middles.update(zip(t["customdata"], _decode(t["x"]).tolist()))
    # ms from the run's first event: the kernels start at 20, 46 and 65 us; gemm (20..30 us) is hovered at its middle
    assert [starts[eid(rs, k)] for k in ("gemm", "bias", "relu_k")] == pytest.approx([0.020, 0.046, 0.065])
    assert middles[eid(rs, "gemm")] == pytest.approx(0.025) and middles[eid(rs, "aten::linear")] == pytest.approx(0.030)
    arrows = [a for a in fig["layout"]["annotations"] if a.get("axref") == "x"]  # launch → kernel arrow
    assert [(a["ax"], a["x"]) for a in arrows] == [(pytest.approx(0.014), pytest.approx(0.020))]
    assert any(t["name"] == "r0 device 0 allocated" for t in fig["data"])
    assert "11 events" in status


def _rectangles(paint: dict) -> tuple[np.ndarray, ...]:
    """(x0, x1, bottom, top) of each slice a paint trace draws, in the order of its hover trace: its
    points but those at its first x (left of the view, where the path changes rows), 4 per slice
    (top left, bottom left, bottom right, top right)."""
    px, py = _decode(paint["x"]), _decode(paint["y"])
    keep = px != px[0]
    px, py = px[keep], py[keep]
    assert (px[0::4] == px[1::4]).all() and (px[2::4] == px[3::4]).all() and (py[0::4] == py[3::4]).all() and (py[1::4] == py[2::4]).all()
    return px[0::4], px[2::4], py[1::4], py[0::4]


def _decode(arr) -> np.ndarray:
    return np.frombuffer(base64.b64decode(arr["bdata"]), {"f4": np.float32, "f8": np.float64}.get(arr["dtype"], np.int32))


def test_names_inside_slices_wide_enough_shortened_to_fit(rs):
    """At 1000 px for 100 us (10 px per us): the step (1000 px), gemm (100 px) and aten::linear
    (400 px) carry their names; a 2 us launch (20 px) carries none."""
    view = dash_app.view_for(rs, None, 0, "all", None, None, None)
    fig, _ = dash_app.timeline_figure(rs, view, 1000, None)
    lab = next(t for t in fig["data"] if t["name"] == "labels")
    at = dict(zip(lab["text"], zip(_decode(lab["x"]).tolist(), _decode(lab["y"]).tolist())))
    assert {"ProfilerStep#1", "gemm", "aten::linear", "aten::addmm", "relu_k"} <= set(at)
    assert "cudaLaunchKernel" not in at and "bias" not in at  # 30 px and 20 px: too narrow
    dev_y = [ln for ln in tl_mod.timeline(rs, run=0, width=1000)["lanes"] if ln["is_device"]][0]["y0"]
    assert at["gemm"] == (pytest.approx(0.025), dev_y)  # the middle of the slice (20..30 us), on its row
    assert lab["hoverinfo"] == "skip"  # labels never take a click from the slice under them
    assert figure.fit_label("void at::native::vectorized_elementwise_kernel", 60) == "void at::…"
    assert figure.fit_label("gemm", 60) == "gemm" and figure.fit_label("gemm", 15) is None
    # a kernel's label is its name as every view shortens it, to the characters that fit
    softmax = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16>(c10::BFloat16*, int)"
    assert figure.fit_label(softmax, 300, kernel=True) == "at::native::cunn_SoftMaxForward<8, BFloat16>"
    assert figure.fit_label(softmax, 200, kernel=True) == "cunn_SoftMaxForward<8, BFloat16>"


def test_a_click_anywhere_inside_any_slice_finds_it(rs):
    """At 10 px per us, a click at any pixel of any slice (the step 1000 px wide, gemm 100 px, bias
    20 px, ...) is within HIT_STEP_PX / 2 of a point that carries that slice's id: its middle (the
    hover trace) or an invisible hit point spread along it. Plotly picks the nearest point within
    hoverdistance, and the points on other rows are a row (14 px) away."""
    view = dash_app.view_for(rs, None, 0, "all", None, None, None)
    fig, _ = dash_app.timeline_figure(rs, view, 1000, None)
    px_per_ms = 1000 / 0.1
    hit = next(t for t in fig["data"] if t["name"] == "hit")
    assert hit["mode"] == "none" and hit["marker"]["color"] == "rgba(0,0,0,0)"  # invisible: only there to be found
    picks = [t for t in fig["data"] if t.get("meta") == "spans" or t is hit]
    px, row = (np.concatenate([_decode(t[a]).astype(np.float64) for t in picks]) for a in ("x", "y"))
    ids = np.concatenate([t["customdata"] for t in picks])
    px *= px_per_ms
    clicked = {}
    for i, t in enumerate(fig["data"]):
        if t.get("meta") != "spans":
            continue
        x0s, x1s = (a.astype(np.float64) * px_per_ms for a in _rectangles(fig["data"][i - 1])[:2])
        for x0, x1, y, event in zip(x0s, x1s, _decode(t["y"]), t["customdata"]):
            on_row = row == y
            for p in np.arange(x0 + 0.5, x1, 1.0):  # every pixel of the slice
                d = np.abs(px[on_row] - p)
                nearest = int(np.argmin(d))
                assert ids[on_row][nearest] == event and d[nearest] <= figure.HIT_STEP_PX / 2 + 1e-3, (event, x0, x1, p)
                clicked[event] = clicked.get(event, 0) + 1
    assert len(clicked) == 11 and clicked[eid(rs, "gemm")] == 100 and clicked[eid(rs, "bias")] == 20
    assert sum(np.asarray(hit["customdata"]) == eid(rs, "gemm")) == 7  # 100 px: 7 points 14.3 px apart


def _kernels_tl(t0: int, t1: int, width: int, spans: list[tuple[int, int, int]]) -> dict:
    """A timeline window (timeline.timeline_arrays' shape) of exact kernel slices (start ns, end ns, row)."""
    start, end, rows = (np.array(c, np.int64) for c in zip(*spans))
    none = np.zeros(0, np.float32)
    return {"run": 0, "rank": None, "t0": t0, "t1": t1, "width": width, "steps": [], "memory": [],
            "lanes": [{"y0": 0, "rows": int(rows.max()) + 1, "label": "GPU 0"}],
            "slices": {"x0": ((start - t0) / 1000).astype(np.float32), "x1": ((end - t0) / 1000).astype(np.float32),
                       "y": rows.astype(np.int32), "kind": np.array(["kernel"] * len(spans), object),
                       "name": np.array([f"k{i}" for i in range(len(spans))], object), "event_id": np.arange(len(spans), dtype=np.int64),
                       "dur_ns": end - start},
            "buckets": {"x0": none, "x1": none, "y": none.astype(np.int32), "occupancy": none, "events": none.astype(np.int64),
                        "kind": np.array([], object), "event_id": none.astype(np.int64)}}


def _winding(px: np.ndarray, py: np.ndarray, qx: np.ndarray, qy: np.ndarray) -> np.ndarray:
    """The winding number of the closed polygon (px, py) around each point (qx, qy): non-zero is filled (SVG's nonzero rule)."""
    w = np.zeros(len(qx), np.int64)
    for xa, ya, xb, yb in zip(px, py, np.roll(px, -1), np.roll(py, -1)):
        side = (xb - xa) * (qy - ya) - (qx - xa) * (yb - ya)
        w += ((ya <= qy) & (yb > qy) & (side > 0)).astype(np.int64) - ((ya > qy) & (yb <= qy) & (side < 0)).astype(np.int64)
    return w


def test_one_path_without_gaps_paints_exactly_the_slices():
    """300 kernels on 4 rows (some touching) in one colour are one polygon without NaN gaps; it
    fills every slice's rectangle and nothing between them (the steps between rectangles and rows
    are walked both ways or along a row's bottom edge, so they add no area)."""
    rng = np.random.default_rng(7)
    spans = []
    for row in range(4):
        t = 0
        for _ in range(75):
            t += int(rng.choice([0, rng.integers(1, 500_000)]))  # some start where the last one ended
            d = int(rng.integers(200_000, 2_000_000))  # at least 2 px: drawn as long as they are
            spans.append((t, t + d, row))
            t += d
    t1 = max(e for _, e, _ in spans)
    fig = figure.build_figure(_kernels_tl(0, t1, 1000, spans), color_by="kind")
    paint = [t for t in fig["data"] if t.get("meta") == "paint"]
    assert len(paint) == 1 and paint[0]["fill"] == "toself"
    px, py = (_decode(paint[0][a]).astype(np.float64) for a in ("x", "y"))
    assert not np.isnan(px).any() and len(px) == 4 * 300 + 2 * 4  # 4 points a slice, 2 a row (where it starts and ends)
    # x is ms from the window's start
    qx, qy = rng.uniform(-0.5, t1 / 1e6 + 0.5, 40_000), rng.uniform(-0.6, 3.6, 40_000)
    h = figure.ROW_PX * 0.78 / figure.ROW_PX / 2
    inside = np.zeros(len(qx), bool)
    for a, b, row in spans:
        inside |= (qx > a / 1e6) & (qx < b / 1e6) & (np.abs(qy - row) < h)
    near_edge = np.zeros(len(qx), bool)
    for a, b, row in spans:  # float32 corners: leave out points within their rounding of an edge
        near_edge |= (np.minimum(np.abs(qx - a / 1e6), np.abs(qx - b / 1e6)) < 1e-4) & (np.abs(qy - row) < h + 1e-6)
        near_edge |= (np.abs(np.abs(qy - row) - h) < 1e-6) & (qx > a / 1e6 - 1e-4) & (qx < b / 1e6 + 1e-4)
    filled = _winding(px, py, qx, qy) != 0
    assert (filled == inside)[~near_edge].all() and inside.sum() > 5_000 and (~inside).sum() > 5_000


def test_the_buckets_of_a_busy_stretch_are_painted_as_one_rectangle_and_hovered_one_by_one():
    """The aggregated view's buckets (a pixel wide, side by side where a lane is busy) that touch or overlap in a row
    are painted as one rectangle (figure._merged): the paint covers exactly the buckets' area with far fewer points,
    and the hover trace still has a point, an event and a text per bucket."""
    rng = np.random.default_rng(11)
    x0, x1, y = [], [], []
    for row in range(3):
        t = 0.0
        for _ in range(150):
            t += float(rng.choice([0.0, 0.0, 0.0, rng.uniform(0.5, 4.0)]))  # most touch the one before: a busy stretch
            w = 1.0 + (float(rng.uniform(0.2, 2.0)) if rng.random() < 0.1 else 0.0)  # a few reach over the next one
            x0.append(t), x1.append(t + w), y.append(row)
            t += 1.0
    n = len(x0)
    none = np.zeros(0, np.float32)
    tl = {**_kernels_tl(0, int((max(x1) + 1) * 1000), 1000, [(0, 1, 0)]), "lanes": [{"y0": 0, "rows": 3, "label": "GPU 0"}],
          "slices": {"x0": none, "x1": none, "y": none.astype(np.int32), "kind": np.array([], object), "name": np.array([], object),
                     "event_id": none.astype(np.int64), "dur_ns": none.astype(np.int64)},
          "buckets": {"x0": np.array(x0, np.float32), "x1": np.array(x1, np.float32), "y": np.array(y, np.int32),
                      "occupancy": np.ones(n, np.float32), "events": np.full(n, 3, np.int64), "kind": np.array(["kernel"] * n, object),
                      "event_id": np.arange(n, dtype=np.int64)}}
    fig = figure.build_figure(tl, color_by="kind")
    paint, hover = (next(t for t in fig["data"] if t.get("meta") == m) for m in ("paint", "spans"))
    assert sorted(hover["customdata"]) == list(range(n)) and len(hover["text"]) == n  # every bucket hovered
    px, py = (_decode(paint[a]).astype(np.float64) for a in ("x", "y"))
    assert len(px) < 4 * n / 2  # the stretches, not the buckets
    qx, qy = rng.uniform(-1, max(x1) + 1, 30_000), rng.uniform(-0.6, 2.6, 30_000)
    h = figure.ROW_PX * 0.78 / figure.ROW_PX / 2
    inside, near_edge = np.zeros(len(qx), bool), np.zeros(len(qx), bool)
    for a, b, row in zip(x0, x1, y):
        inside |= (qx > a) & (qx < b) & (np.abs(qy - row) < h)
        near_edge |= (np.minimum(np.abs(qx - a), np.abs(qx - b)) < 1e-4) & (np.abs(qy - row) < h + 1e-6)
        near_edge |= (np.abs(np.abs(qy - row) - h) < 1e-6) & (qx > a - 1e-4) & (qx < b + 1e-4)
    filled = _winding(px, py, qx, qy) != 0
    assert (filled == inside)[~near_edge].all() and inside.sum() > 3_000 and (~inside).sum() > 3_000


def test_times_keep_ns_digits_at_deep_zoom_and_float32_is_used_only_where_exact_enough():
    """x is ms from the run's start. 2 us wide at 10 s into the run (2 ps a pixel), a kernel from
    10.000000623 s to 10.000001623 s keeps every ns digit (float64); over the whole 20 s run (20 ms
    a pixel) float32 is within X_ERROR_PX of a pixel, and is what is sent (half the bytes)."""
    t0 = 10_000_000_123
    deep = figure.build_figure(_kernels_tl(t0, t0 + 2_000, 1000, [(t0 + 500, t0 + 1_500, 0)]), origin_ns=0, color_by="kind")
    paint, hover = (next(t for t in deep["data"] if t.get("meta") == m) for m in ("paint", "spans"))
    assert paint["x"]["dtype"] == hover["x"]["dtype"] == "f8"
    assert _rectangles(paint)[0].tolist() == [10_000.000623] and _rectangles(paint)[1].tolist() == [10_000.001623]
    assert _decode(hover["x"]).tolist() == [10_000.001123]
    assert deep["layout"]["xaxis"]["range"] == [10_000.000123, 10_000.002123]
    spans = [(12_345_678_901, 12_400_000_000, 0), (19_900_000_000, 20_000_000_000, 1)]
    whole = figure.build_figure(_kernels_tl(0, 20_000_000_000, 1000, spans), origin_ns=0, color_by="kind")
    paint = next(t for t in whole["data"] if t.get("meta") == "paint")
    assert paint["x"]["dtype"] == "f4"
    x0, x1 = (a.astype(np.float64) for a in _rectangles(paint)[:2])
    exact = np.array([12_345.678901, 19_900.0, 12_400.0, 20_000.0])
    assert np.abs(np.r_[x0, x1] - exact).max() / 20.0 < figure.X_ERROR_PX  # 20 ms a pixel


def test_slices_coloured_by_name_or_kind_and_the_selected_one_outlined(rs):
    view = dash_app.view_for(rs, None, 0, "all", None, None, None)

    def colour_of(fig, event_id):
        return next(t["line"]["color"] for t in fig["data"] if t.get("meta") == "spans" and event_id in (t.get("customdata") or []))

    by_name, _ = dash_app.timeline_figure(rs, view, 1000, eid(rs, "gemm"))
    gemm, relu = colour_of(by_name, eid(rs, "gemm")), colour_of(by_name, eid(rs, "relu_k"))
    assert gemm == figure.NAME_PALETTE[figure.name_color_index("gemm")] and relu == figure.NAME_PALETTE[figure.name_color_index("relu_k")]
    assert gemm != relu  # two kernels, two colours (these two names hash apart)
    # the same name has the same colour in another window (and any run: the hash is of the name only)
    zoom = dash_app.view_for(rs, "timeline", 0, "all", {"xaxis.range": [0.015, 0.035]}, None, view)
    assert colour_of(dash_app.timeline_figure(rs, zoom, 700, None)[0], eid(rs, "gemm")) == gemm
    by_kind, _ = dash_app.timeline_figure(rs, view, 1000, None, "kind")
    assert colour_of(by_kind, eid(rs, "gemm")) == colour_of(by_kind, eid(rs, "relu_k")) == figure.KIND_COLORS["kernel"]
    # the selected slice (gemm, 20..30 us on the device lane) has a red outline around it
    sel = next(t for t in by_name["data"] if t["name"] == "selected")
    dev_y = [ln for ln in tl_mod.timeline(rs, run=0, width=1000)["lanes"] if ln["is_device"]][0]["y0"]
    assert sel["x"] == pytest.approx([0.020, 0.030, 0.030, 0.020, 0.020]) and min(sel["y"]) < dev_y < max(sel["y"])
    assert sel["line"]["color"] == figure.HIGHLIGHT and not any(t["name"] == "selected" for t in by_kind["data"])


def _grid(component):
    """The grid inside a tab's content."""
    import dash_ag_grid as dag

    return next(c for c in component.children if isinstance(c, dag.AgGrid))


def test_tables_tabs_render(rs):
    ops = _grid(dash_app.tables_for(rs, 0, "all", "operators"))
    assert ops.id == "table-operators"
    assert [(r["name"], r["calls"], r["cpu_total_ns"], r["cpu_self_ns"]) for r in ops.rowData] == [
        ("aten::linear", 1, 0.04, 0.009), ("aten::addmm", 1, 0.028, 0.024), ("aten::relu", 1, 0.01, 0.008)]  # ms
    cols = {c["field"]: c for c in ops.columnDefs}
    assert cols["cpu_self_ns"]["headerName"] == "CPU self ms" and cols["cpu_self_ns"]["filter"] == "agNumberColumnFilter"
    assert cols["name"]["filter"] == "agTextColumnFilter" and ops.defaultColDef["sortable"] and ops.defaultColDef["floatingFilter"]
    assert [r["name"] for r in _grid(dash_app.tables_for(rs, 0, "all", "kernels")).rowData] == ["gemm", "relu_k", "bias"]
    assert [r["source"] for r in _grid(dash_app.tables_for(rs, 0, "all", "lines")).rowData] == ["train.py:5"]
    assert [r["step"] for r in _grid(dash_app.tables_for(rs, 0, "all", "steps")).rowData] == [1]
    assert dash_app.tables_for(rs, 0, "all", "memory").children[1].id == "memory-devices"  # the whole run's (ui/memory.py has the chart)
    with pytest.raises(NeuronExplorerError):
        dash_app.tables_for(rs, 0, "all", "../../etc")


def test_the_source_lines_grid_shows_a_long_paths_end(tmp_path):
    """sglang's source lines are `/sgl-workspace/sglang/python/sglang/srt/model_executor/...`: the
    grid's column showed the start of each path, the same for every row, and cut the file and line.
    A row now shows the path's last folder, file and line (fmt.short_path), the whole path on hover."""
    deep = tmp_path / "workspace" / "project" / "python" / "project" / "srt" / "model_executor"
    deep.mkdir(parents=True)
    (deep / "runner.py").write_text(SOURCE)
    events = [{**e, "name": f"{deep / 'runner.py'}(5): step_fn"} if e["name"] == "train.py(5): step_fn" else e for e in EVENTS]
    trace = write_trace(tmp_path / "t.json", events, baseTimeNanoseconds=BASE, distributedInfo={"rank": 0, "world_size": 1})
    runs = RunSet([import_traces(trace, tmp_path / "run").run_dir])
    try:
        g = _grid(dash_app.tables_for(runs, 0, "all", "lines"))
        (row,) = g.rowData
        assert row["source"] == "…/model_executor/runner.py:5" and row["source_full"] == f"{deep / 'runner.py'}:5"
        (col,) = [c for c in g.columnDefs if c["field"] == "source"]
        assert col["tooltipField"] == "source_full" and col["filter"] == "agTextColumnFilter"
    finally:
        runs.close()


def test_findings_row_click_names_the_finding_whatever_the_sort():
    """The findings grid identifies rows by the finding's index, so a click after sorting or
    filtering still opens the finding that was clicked."""
    assert dash_app.finding_clicked({"value": "x", "colId": "title", "rowIndex": 0, "rowId": "3"}) == 3
    for bad in (None, {}, {"rowId": None}, {"rowId": "drop table"}):
        with pytest.raises(NeuronExplorerError):
            dash_app.finding_clicked(bad)
    assert dash_app.findings_table().getRowId == "params.data.id"


def test_the_app_uses_no_deprecated_component(rs):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dash_app.create_app(rs)
        dash_app.tables_for(rs, 0, "all", "operators")
    assert not [w for w in caught if issubclass(w.category, DeprecationWarning)], [str(w.message) for w in caught]


# ---- JSON API and the server ------------------------------------------------------------------
@pytest.fixture(scope="module")
def client(rs):
    return dash_app.create_app(rs).server.test_client()


def test_api_envelope_for_every_view(client, rs):
    params = {"event": f"&event_id={eid(rs, 'gemm')}", "source": "&frame_id=0", "search": "&text=gemm",
              "area": f"&t0={BASE}&t1={BASE + 50 * US}", "jump": "&table=operators&name=aten::linear"}
    for view in queries.VIEWS:
        if view == "findings":
            continue  # runs the analyzer: covered above
        r = client.get(f"/api/{view}?run=0{params.get(view, '')}" if view != "runs" else "/api/runs")
        body = r.get_json()
        assert r.status_code == 200 and set(body) == {"ok", "error", "data", "truncated"} and body["ok"], (view, body)


@pytest.mark.parametrize("url,status", [
    ("/api/timeline?run=3", 400), ("/api/timeline?run=../../etc", 400), ("/api/source?run=0&path=/etc/passwd", 400),
    ("/api/timeline?run=0&t0=zzz", 400), ("/api/timeline?run=0&width=99999999", 400), ("/api/event?run=0&event_id=1e400", 400),
    ("/api/event?run=0", 400), ("/api/timeline?run=0&all_lanes=maybe", 400), ("/api/search?run=0", 400),
    ("/api/search?run=0&text=%2F(%2F", 400), ("/api/search?run=0&text=a&limit=-1", 400), ("/api/nope", 404)])
def test_api_bad_requests_get_an_error_envelope(client, url, status):
    r = client.get(url)
    body = r.get_json()
    assert r.status_code == status and body["ok"] is False and body["error"] and body["data"] is None


def test_malformed_dash_callback_request_does_not_take_the_server_down(client):
    for payload in (b"not json", json.dumps({"output": "timeline.figure", "inputs": [{"id": "view", "property": "data", "value": "x"}]}).encode(),
                    json.dumps({"output": "view.data", "inputs": "nonsense"}).encode()):
        r = client.post("/_dash-update-component", data=payload, content_type="application/json")
        assert r.status_code >= 400 or "error" in r.get_data(as_text=True).lower()
    assert client.get("/api/runs").get_json()["ok"]


def test_multi_rank_run_has_a_rank_selector(tmp_path):
    d = tmp_path / "traces"
    for rank in (0, 1):
        write_trace(d / f"rank-{rank}.json", [X(f"op{rank}", "cpu_op", 0, 10, pid=10 + rank, tid=10 + rank)],
                    baseTimeNanoseconds=BASE, distributedInfo={"rank": rank, "world_size": 2})
    rs = RunSet([import_traces(d, tmp_path / "run").run_dir])
    both = tl_mod.timeline(rs, run=0)
    assert [ln["label"] for ln in both["lanes"]] == ["r0 pid 10 tid 10", "r1 pid 11 tid 11"]
    one = tl_mod.timeline(rs, run=0, rank=1)
    assert [ln["label"] for ln in one["lanes"]] == ["r1 pid 11 tid 11"] and one["slices"]["name"] == ["op1"]
    with pytest.raises(QueryError):
        tl_mod.timeline(rs, run=0, rank=2)
    rs.close()


def test_cli_bad_run_path_is_one_line_before_serving(tmp_path):
    p = cli("dashboard", tmp_path / "missing", "--port", "1")
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "missing" in p.stderr and "Traceback" not in p.stderr


def test_server_binds_loopback_by_default(monkeypatch, made):
    seen = {}

    class FakeApp:
        def run(self, host, port, **kw):
            seen.update(host=host, port=port)

    monkeypatch.setattr(dash_app, "create_app", lambda rs: FakeApp())
    lines = []
    dash_app.serve([made[0].runs[0].path], port=8123, echo=lines.append)
    assert seen == {"host": "127.0.0.1", "port": 8123}
    assert lines == ["Neuron Explorer dashboard: http://127.0.0.1:8123/  (serving 1 run(s); Ctrl+C to stop)"]


# ---- the real traces -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    from .conftest import real_traces

    tmp = tmp_path_factory.mktemp("real")
    paths = [import_traces(p, tmp / p.name.split(".")[0]).run_dir for p in real_traces()]
    paths.append(import_traces(TRACES / "multirank_128", tmp / "multirank").run_dir)
    rs = RunSet(paths)
    yield rs
    rs.close()


def test_every_view_on_every_real_trace(real_runs):
    rs = real_runs
    for r in rs.runs:
        # Python frames nested: every event is drawn once, as an exact slice or inside a pixel bucket
        view = dash_app.view_for(rs, None, r.index, "all", None, None, None, all_lanes=True)  # the whole run of every lane
        dash_app.timeline_figure(rs, view, 1200, None, all_lanes=True, python_band=False)
        every = tl_mod.timeline(rs, run=r.index, width=1200, all_lanes=True)
        assert every["visible_events"] == r.query("SELECT count(*) FROM events")[1][0][0], r.name
        # folded (the default): every event but the Python frames inside other Python frames
        total = r.query(f"SELECT count(*) FROM events WHERE {drawn_sql(True)}")[1][0][0]
        fig, status = dash_app.timeline_figure(rs, view, 1200, None, all_lanes=True)
        tl = tl_mod.timeline(rs, run=r.index, width=1200, all_lanes=True)
        assert tl["visible_events"] == total, r.name
        rows = max(ln["y0"] + ln["rows"] for ln in tl["lanes"])
        assert all(0 <= y < rows for y in tl["slices"]["y"] + tl["buckets"]["y"]), r.name
        assert fig["data"] and f"{total:,} events" in status
        # zoom into the middle tenth: only events overlapping it
        s, e = r.span()
        a, b = s + (e - s) * 9 // 20, s + (e - s) * 11 // 20
        z = tl_mod.timeline(rs, run=r.index, t0=a, t1=b, width=1200, all_lanes=1)
        want = r.query(f"SELECT count(*) FROM events WHERE ts_ns < {b} AND ts_ns + dur_ns >= {a} AND {drawn_sql(True)}")[1][0][0]
        assert z["visible_events"] == want, r.name
        # by default the meta lanes' events are left out, and only they
        shown = tl_mod.timeline(rs, run=r.index, t0=a, t1=b, width=1200)
        want = r.query(f"SELECT count(*) FROM events WHERE ts_ns < {b} AND ts_ns + dur_ns >= {a} AND {drawn_sql(True)} AND NOT "
                       f"(SELECT {tl_mod.HIDDEN_LANE_SQL} FROM (SELECT {queries.LANE_SQL}))")[1][0][0]
        assert shown["visible_events"] == (want if shown["hidden_lanes"] else z["visible_events"]), r.name
        for view_fn in (queries.operators, queries.kernels, queries.source_lines, queries.steps, queries.memory):
            json.dumps(view_fn(rs, run=r.index))
        for (event_id,) in r.query("SELECT event_id FROM events USING SAMPLE 5 ROWS")[1]:
            d = queries.event(rs, run=r.index, event_id=event_id)
            assert d["event_id"] == event_id and json.dumps(d)


def test_kernel_chain_on_a_real_gpu_trace(real_runs):
    rs = real_runs
    r = next(x for x in rs.runs if x.name == "cuda_alexnet_train")
    (kid, launch_id), = r.query("SELECT event_id, launch_id FROM events WHERE kind = 'kernel' AND launch_id IS NOT NULL "
                                "AND top_op_id IS NOT NULL ORDER BY ts_ns LIMIT 1")[1]
    d = queries.event(rs, run=r.index, event_id=kid)
    roles = [c["role"] for c in d["chain"]]
    assert roles[-2:] == ["launch", "kernel"] and "top operator" in roles
    assert d["flows"][0]["from"]["event_id"] == launch_id and d["flows"][0]["to"]["event_id"] == kid
    launch = queries.event(rs, run=r.index, event_id=launch_id)
    assert kid in [k["event_id"] for k in launch["kernels"]]


def test_rank_selector_on_the_real_multirank_run(real_runs):
    rs = real_runs
    r = next(x for x in rs.runs if x.name == "multirank")
    assert r.run.ranks == [0, 1]
    one = tl_mod.timeline(rs, run=r.index, rank=1, width=800, all_lanes=True)
    assert {ln["rank"] for ln in one["lanes"]} == {1}
    assert one["visible_events"] == r.query("SELECT count(*) FROM events WHERE rank = 1")[1][0][0]


def _callback(app, output_prefix: str) -> tuple[str, dict]:
    """The key and spec of the server callback whose outputs start with `output_prefix`."""
    matches = [(k, v) for k, v in app.callback_map.items() if k.startswith(output_prefix)]
    assert len(matches) == 1, [k for k, _ in matches]
    return matches[0]


def test_the_analysis_finishing_does_not_clear_the_message_of_a_persons_last_action(rs):
    """The findings and the overview fill in by themselves when the analysis is done; that refresh
    must leave the error line alone (it once wiped 'base and test are the same run' a second after
    the person chose the same run twice). Their own inputs (a run or rank chosen) still clear it."""
    app = dash_app.create_app(rs)
    client = app.server.test_client()
    for prefix in ("..findings.rowData", "..overview.children"):
        key, spec = _callback(app, prefix)
        outputs = [{"id": o.split(".")[0], "property": o.split(".")[1].split("@")[0]} for o in key.strip(".").split("...")]
        inputs = [{"id": i["id"], "property": i["property"], "value": {"run-select": 0, "rank-select": "all"}.get(i["id"], {"state": "done"})}
                  for i in spec["inputs"]]
        for changed, clears in (("analysis.data", False), ("run-select.value", True)):
            body = {"output": key, "outputs": outputs, "inputs": inputs, "state": [], "changedPropIds": [changed]}
            r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
            assert r.status_code == 200, r.get_data(as_text=True)[:300]
            response = r.get_json()["response"]
            assert ("error" in response) == clears, (prefix, changed, response.get("error"))
            if clears:
                assert response["error"]["children"] == ""


def test_the_kernels_grid_tells_two_kernels_of_one_template_apart(tmp_path):
    """A multiply and ReLU's backward (the RTX 2080 Ti trace's names) both shorten to
    `at::native::vectorized_elementwise_kernel<4, BinaryFunctor<…>, Array<…> >`: the Kernels grid
    showed two rows alike. Each row's name now ends in what sets it apart (fmt.kernel_labels), and
    its whole name is still on hover."""
    from .test_kernel_labels import MUL, RELU_BACKWARD

    events = [X("aten::mul", "cpu_op", 0, 40, **{"External id": 1}),
              X("cudaLaunchKernel", "cuda_runtime", 5, 5, correlation=9, **{"External id": 1}),
              X(MUL, "kernel", 20, 10, pid=0, tid=7, correlation=9, stream=7, device=0),
              X("aten::threshold_backward", "cpu_op", 50, 40, **{"External id": 2}),
              X("cudaLaunchKernel", "cuda_runtime", 55, 5, correlation=10, **{"External id": 2}),
              X(RELU_BACKWARD, "kernel", 70, 15, pid=0, tid=7, correlation=10, stream=7, device=0)]
    runs = RunSet([import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir])
    try:
        rows = _grid(dash_app.tables_for(runs, 0, "all", "kernels")).rowData
        names = {r["name_full"]: r["name"] for r in rows}
        assert names == {MUL: "at::native::vectorized_elementwise_kernel<4, BinaryFunctor<…>, Array<…> > [MulFunctor]",
                         RELU_BACKWARD: "at::native::vectorized_elementwise_kernel<4, BinaryFunctor<…>, Array<…> > [threshold_kernel_impl]"}
    finally:
        runs.close()


def test_the_kernels_tabs_name_kernels_as_every_view_does(tmp_path):
    """The Kernels and Kernels-by-operator grids show a kernel's name as the report does
    (fmt.kernel_name), the whole name on hover: a cell of `void at::native::(anonymous
    namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, ...>(...)` showed 'void at::native::(anon'
    at its width. A click still finds the row by the query's own rows (app.table_jump)."""
    softmax = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, "
               "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)")
    events = [X("aten::softmax", "cpu_op", 0, 50, **{"External id": 1}),
              X("cudaLaunchKernel", "cuda_runtime", 5, 5, correlation=9, **{"External id": 1}),
              X(softmax, "kernel", 20, 30, pid=0, tid=7, correlation=9, stream=7, device=0)]
    runs = RunSet([import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir])
    try:
        for table in ("kernels", "kernels_by_operator"):
            g = _grid(dash_app.tables_for(runs, 0, "all", table))
            (row,) = g.rowData
            assert row["name"] == "at::native::cunn_SoftMaxForward<8, BFloat16, float, BFloat16, SoftMaxForwardEpilogue>"
            assert row["name_full"] == softmax
            (col,) = [c for c in g.columnDefs if c["field"] == "name"]
            assert col["tooltipField"] == "name_full" and col["filter"] == "agTextColumnFilter"
        jumped = dash_app.table_jump(runs, "kernels", {"rowId": "0"}, 0, None)
        assert jumped["mark"]["key"]["name"] == softmax
    finally:
        runs.close()


def test_the_findings_grids_inside_cell_is_the_heaviest_child_not_the_roots_names():
    """The text report lists a finding's roots by name (`of them:`) before its children; the grid's
    `inside` cell stays the heaviest child, the roots line where there is none."""
    from neuron_explorer.dashboard.ui.panels import _heaviest_child

    inside = ["inside the top-level operators of train.py:34: 360 calls, 800.63 ms",
              "  of them: aten::mul_ ×72 184.11 ms, aten::sqrt ×36 138.16 ms", "  op aten::to double ×144 3.06 ms",
              "advice: AdamW runs its for-loop implementation here"]
    assert _heaviest_child(inside) == "op aten::to double ×144 3.06 ms"
    assert _heaviest_child([inside[0], inside[1], inside[3]]) == inside[0]
    assert _heaviest_child([]) == "—"
