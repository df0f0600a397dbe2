"""Issue 35 items 4, 5 and 7 without a browser: the flame graph of the call stack (any depth, device
or CPU time, one step or the steady steps, the tool's own frames hidden, search), the SQL page's
sandboxed query, and the Overview's device naming and CPU-run charts.

The hand-built run (µs; host pid 1 / tid 1; device 0 stream 7), recorded the way
`neuron-explorer record train.py` runs a script (runpy → typer → record.py → the script):

    0 ──────────────── /usr/lib/python3.11/runpy.py(86): _run_code ──────────────────── 4000
     5 ───────────── /venv/site-packages/typer/main.py(300): __call__ ──────────────── 3995
      10 ──────────── /w/neuron_explorer/collectors/record.py(50): run_script ──────── 3990
       20 ──────────────────────── train.py(3): <module> ───────────────────────────── 3980
         100 ProfilerStep#1 1100 ProfilerStep#2 2100 ProfilerStep#3 3100     (each step s:)
           s+10 train.py(10): step ─ s+810
             s+20 aten::mm ── s+420
               s+30 cudaLaunchKernel (5)  →  gemm on the device, 300 µs

Known answers. Device, step 2: root 300 µs, one path thread 1 → train.py(3): <module> →
ProfilerStep#2 → train.py(10): step → aten::mm → cudaLaunchKernel → gemm (the tool's frames left
out); with them: runpy → typer → record.py → train.py(3) → ... CPU, step 2: root 1000 µs (the
step's range and what it holds; the frames around the steps began before it). Steady steps (3 of
them: too few to leave warm-up out): 900 µs of gemm under ProfilerStep#*. Search 'aten::mm': one
box, 300 µs; '/^train/': two nested boxes, 300 µs (not 600).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import queries
from neuron_explorer.dashboard.runs import QueryError, RunSet
from neuron_explorer.dashboard.ui import flame as flame_ui
from neuron_explorer.dashboard.ui import overview as overview_ui
from neuron_explorer.dashboard.ui import sql as sql_ui
from neuron_explorer.dashboard.views import overview as overview_view
from neuron_explorer.dashboard.views import sql as sql_view

from .conftest import TRACES, write_trace

BASE_NS = 1_700_000_000_000_000_000
TOOL = ("/usr/lib/python3.11/runpy.py(86): _run_code", "/venv/site-packages/typer/main.py(300): __call__",
        "/w/neuron_explorer/collectors/record.py(50): run_script")


def _trace(path: Path) -> Path:
    ev = []

    def X(name, cat, ts, dur, pid=1, tid=1, **args):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args})

    X(TOOL[0], "python_function", 0, 4000)
    X(TOOL[1], "python_function", 5, 3990)
    X(TOOL[2], "python_function", 10, 3980)
    X("train.py(3): <module>", "python_function", 20, 3960)
    for k, s in enumerate((100, 1100, 2100), start=1):
        X(f"ProfilerStep#{k}", "user_annotation", s, 1000)
        X("train.py(10): step", "python_function", s + 10, 800)
        X("aten::mm", "cpu_op", s + 20, 400, **{"External id": k})
        X("cudaLaunchKernel", "cuda_runtime", s + 30, 5, correlation=k, **{"External id": k})
        X("gemm", "kernel", s + 100, 300, pid=0, tid=7, correlation=k, stream=7, device=0)
    return write_trace(path, ev, baseTimeNanoseconds=BASE_NS, distributedInfo={"rank": 0, "world_size": 1})


@pytest.fixture(scope="module")
def rs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("views")
    rs = RunSet([import_traces(_trace(tmp / "t.json"), tmp / "run").run_dir])
    yield rs
    sql_view.close(rs)
    rs.close()


def _paths(d) -> dict:
    """path of labels (without the root) → (ns, count)."""
    by_id = dict(zip(d["ids"], zip(d["labels"], d["parents"], d["values"], d["counts"])))

    def path(i):
        out = []
        while by_id[i][1]:
            out.append(by_id[i][0])
            i = by_id[i][1]
        return tuple(reversed(out))
    return {path(i): (v, c) for i, (_, _, v, c) in by_id.items()}


STACK = ("thread 1", "train.py(3): <module>", "ProfilerStep#2", "train.py(10): step", "aten::mm", "cudaLaunchKernel", "gemm")


def test_flame_is_the_call_stack_without_the_tools_frames(rs):
    d = queries.flame(rs, run=0, step=2)
    assert (d["metric"], d["total_ns"], d["depth"]) == ("device", 300_000, 7)
    t = _paths(d)
    assert t[STACK] == (300_000, 1)
    assert [p for p in t if len(p) == 7] == [STACK]  # the one path, the tool's frames left out
    shown = _paths(queries.flame(rs, run=0, step=2, tool_frames=True))
    assert shown[("thread 1", *TOOL, *STACK[1:])] == (300_000, 1)
    cpu = queries.flame(rs, run=0, step=2, metric="cpu")
    c = _paths(cpu)
    assert cpu["total_ns"] == 1_000_000 and c[STACK[:3]] == (1_000_000, 4)  # the step and the 3 slices inside it
    assert c[STACK[:4]][0] == 800_000 and c[STACK[:5]][0] == 400_000 and c[STACK[:6]] == (5_000, 1)
    for k, i in enumerate(cpu["ids"]):  # a box holds its own time and the boxes above it
        kids = sum(v for v, p in zip(cpu["values"], cpu["parents"]) if p == i)
        assert cpu["values"][k] >= kids


def test_flame_of_the_steady_steps_merges_the_steps(rs):
    d = queries.flame(rs, run=0, step="steady")
    assert d["picked_steps"] == [1, 2, 3] and d["total_ns"] == 900_000
    t = _paths(d)
    assert t[(STACK[0], STACK[1], "ProfilerStep#*", *STACK[3:])] == (900_000, 3)
    assert "steady steps 1, 2, 3: 900.00 µs of device time" in flame_ui.headline(d)


def test_flame_of_a_run_without_steps_is_the_whole_run(tmp_path):
    """An inference server's trace has no profiler steps: the Flame tab said 'no profiler steps in
    this run: pick a time range instead' over an empty chart. It now draws the whole run."""
    ev = [{"ph": "X", "cat": c, "name": n, "pid": p, "tid": t, "ts": ts, "dur": d, "args": a} for c, n, p, t, ts, d, a in (
        ("python_function", "serve.py(7): handle", 1, 1, 0, 900, {}),
        ("cpu_op", "aten::mm", 1, 1, 10, 400, {"External id": 1}),
        ("cuda_runtime", "cudaLaunchKernel", 1, 1, 20, 5, {"correlation": 1, "External id": 1}),
        ("kernel", "gemm", 0, 7, 100, 300, {"correlation": 1, "stream": 7, "device": 0}),
        ("cpu_op", "aten::mm", 1, 1, 500, 300, {"External id": 2}),
        ("cuda_runtime", "cudaLaunchKernel", 1, 1, 510, 5, {"correlation": 2, "External id": 2}),
        ("kernel", "gemm", 0, 7, 600, 200, {"correlation": 2, "stream": 7, "device": 0}))]
    runs = RunSet([import_traces(write_trace(tmp_path / "t.json", ev), tmp_path / "run").run_dir])
    try:
        d = queries.flame(runs, run=0)
        assert d["steps"] == [] and d["step"] is None and d["total_ns"] == 500_000  # both gemms
        assert _paths(d)[("thread 1", "serve.py(7): handle", "aten::mm", "cudaLaunchKernel", "gemm")] == (500_000, 2)
        assert flame_ui.headline(d).startswith("the whole run (no profiler steps): 500.00 µs of device time")
        with pytest.raises(QueryError):
            queries.flame(runs, run=0, step=1)  # a step it does not have is still an error
    finally:
        runs.close()


def test_flame_search_and_headline(rs):
    d = queries.flame(rs, run=0, step=2, text="aten::mm")
    assert (d["matched_boxes"], d["matched_ns"]) == (1, 300_000)
    nested = queries.flame(rs, run=0, step=2, text="/^train/")
    assert (nested["matched_boxes"], nested["matched_ns"]) == (2, 300_000)  # train.py(10) inside train.py(3): counted once
    with pytest.raises(QueryError):
        queries.flame(rs, run=0, step=2, text="/(/")
    head = flame_ui.headline(d)
    assert head.startswith("step 2: 300.00 µs of device time")
    assert "'aten::mm': 1 boxes, 300.00 µs (100.0% of the root)" in head
    assert head.count(flame_ui.PATH_WORDS) == 1 and "kernel → kernel" not in head  # the levels said once, not per box
    fig = flame_ui.figure(d)["data"][0]
    mm = d["labels"].index("aten::mm")
    assert fig["marker"]["colors"][mm] == flame_ui.MATCH_COLOR and fig["marker"]["colors"][0] == flame_ui.DIMMED_COLOR
    # a click zooms to the box; a click on the box at the bottom zooms out to its parent
    node = d["ids"][mm]
    assert flame_ui.zoomed_to(None, {"points": [{"id": node}]}) == node
    assert flame_ui.zoomed_to(node, {"points": [{"id": node}]}) == node.rpartition("\x1f")[0]
    assert flame_ui.zoom_words(d, node).endswith("300.00 µs, 100.0% of the root")
    opts, default = flame_ui.step_options(rs, 0, "all")
    assert [o["value"] for o in opts] == ["steady", 1, 2, 3] and default == 2


def test_sql_page_runs_the_sandbox_and_says_errors(rs):
    res = sql_view.query(rs, 0, "SELECT event_id, name, dur_ns FROM events WHERE kind = 'kernel' ORDER BY ts_ns")
    assert res["ok"] and res["row_count"] == 3 and res["event_id_column"] == 0
    assert [r[1:] for r in res["rows"]] == [["gemm", 300_000]] * 3
    grid, note, error, ids = sql_ui.result(rs, 0, "SELECT name, event_id FROM events WHERE kind = 'kernel' ORDER BY ts_ns")
    assert error == "" and note.startswith("3 rows") and ids == [r[0] for r in res["rows"]]
    assert [c["headerName"] for c in grid.columnDefs] == ["name", "event_id"] and grid.rowData[1]["c1"] == ids[1]
    assert sql_ui.picked_event({"rowId": "1"}, ids) == ids[1] and sql_ui.picked_event({"rowId": "9"}, ids) is None
    grid, _, error, ids = sql_ui.result(rs, 0, "SELECT nope FROM events")
    assert grid is None and ids is None and "nope" in error
    assert not sql_view.query(rs, 0, "DELETE FROM events")["ok"]
    assert {t["name"] for t in sql_view.schema_tables()} >= {"events", "frames", "steps", "memory"}
    ev = next(t for t in sql_view.schema_tables() if t["name"] == "events")
    assert {"name": "dur_ns", "type": "int64", "unit": "ns"}.items() <= next(c for c in ev["columns"] if c["name"] == "dur_ns").items()


def test_mfu_note_of_an_unnamed_device_is_not_cpu_only(tmp_path):
    # torch 1.8's ResNet-50 trace: kernels on device 0, no deviceProperties (the device has no name)
    rs = RunSet([import_traces(TRACES / "cuda_resnet50_torch18.json.gz", tmp_path / "run").run_dir])
    try:
        data = overview_view.overview(rs, run=0)
        (rank,) = data["ranks"]
        assert rank["devices"] and rank["device_name"] is None
        assert rank["mfu_note"].startswith("MFU unknown: the trace does not name the device")
        assert overview_ui.has_device_work(data)
    finally:
        rs.close()
    assert "CPU only" in overview_view._mfu_note({}, None)


def test_cpu_run_overview_hides_device_charts_with_a_reason(tmp_path):
    rs = RunSet([import_traces(TRACES / "cpu_only_rank34_of_300.json.gz", tmp_path / "run").run_dir])
    try:
        ids = [getattr(c, "id", None) for c in overview_ui.content(rs, 0, "all")]
        charts = overview_ui.content(rs, 0, "all")[1].children
        assert [getattr(c, "id", None) for c in charts] == ["overview-steps", "overview-util-hidden"]
        assert "overview-roofline-hidden" in ids and "overview-roofline" not in ids
        assert "no device work" in charts[1].children
    finally:
        rs.close()


def test_the_whole_run_view_starts_at_the_first_shown_lane(tmp_path):
    """The 68k-event CUDA trace: the profiler's own 'Spans' range starts 95.341768 ms before the
    first event on a lane the timeline shows (counted here from the raw JSON with exact decimals);
    the whole-run view starts there, not at the meta lane."""
    import gzip
    import json
    from decimal import Decimal

    from neuron_explorer.dashboard import app as dash_app

    trace = TRACES / "cuda_train_68k_events.json.gz"
    with gzip.open(trace) as f:
        raw = [e for e in json.load(f, parse_float=Decimal)["traceEvents"] if e.get("ph") in ("X", "i", "I") and "ts" in e]

    def meta(e):  # Lane.hidden: a pid that is no number, no thread, a negative tid
        return not isinstance(e.get("pid"), int) or e.get("tid") is None or (isinstance(e["tid"], int) and e["tid"] < 0)
    gap_ns = int((min(Decimal(e["ts"]) for e in raw if not meta(e)) - min(Decimal(e["ts"]) for e in raw)) * 1000)
    assert gap_ns == 95_341_768
    rs = RunSet([import_traces(trace, tmp_path / "run").run_dir])
    try:
        r = rs.get(0)
        view = dash_app.view_for(rs, None, 0, "all", None, None, None)
        assert view["t0"] - r.span()[0] == gap_ns
        _, status = dash_app.timeline_figure(rs, view, 1500, None)
        assert status.startswith("483.527 ms from +95.342 ms")
        # double-click (autorange) and the reset give the same window
        assert dash_app.view_for(rs, "timeline", 0, "all", {"xaxis.autorange": True}, None, view)["t0"] == view["t0"]
        assert dash_app.view_for(rs, None, 0, "all", None, None, None, all_lanes=True)["t0"] == r.span()[0]  # meta lanes shown: all
    finally:
        rs.close()
