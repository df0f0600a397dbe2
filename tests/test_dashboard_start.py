"""The dashboard serves from the moment it starts (issue 42): `/` answers before the first
timeline is computed, the page with its drawn timeline before the analysis is done, and the
findings panel and the overview say "computing…" until it is, then show the findings.

The analysis (and, in one test, the first timeline) is made artificially slow: it waits on a gate
the test opens.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import app as dash_app
from neuron_explorer.dashboard.runs import RunSet
from neuron_explorer.dashboard.ui import overview
from neuron_explorer.dashboard.views import findings as findings_view

from .conftest import TRACES, X, write_trace

TRACE = TRACES / "cuda_alexnet_train.json.gz"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return import_traces(TRACE, tmp_path_factory.mktemp("start") / "run").run_dir


@pytest.fixture
def slow_analysis(monkeypatch):
    """The analyzer waits for the returned gate to open before it analyses."""
    from neuron_explorer.analyzers import analyze

    gate = threading.Event()

    def slow(*a, **k):
        assert gate.wait(120), "the test never opened the gate"
        return analyze(*a, **k)

    monkeypatch.setattr(findings_view, "_load_analyze", lambda: slow)
    return gate


@pytest.fixture
def served(run_dir, slow_analysis):
    """The server as `serve` runs it: the background start (page, then analysis), then serving."""
    from werkzeug.serving import make_server

    rs = RunSet([run_dir])
    worker = dash_app.start(rs)
    srv = make_server("127.0.0.1", 0, dash_app.create_app(rs).server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/", rs, worker
    finally:
        slow_analysis.set()
        srv.shutdown()
        rs.close()


def _get(url: str, timeout: float = 30.0) -> tuple[int, bytes, float]:
    import urllib.request

    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, resp.read(), time.perf_counter() - t


def _wait(cond, timeout: float = 120.0):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_page_and_timeline_before_the_analysis_then_the_findings(slow_analysis, served, run_dir):
    url, rs, worker = served
    status, body, _ = _get(url)
    assert status == 200 and b"react-entry-point" in body
    status, body, _ = _get(url + "_dash-layout")
    layout = json.loads(body)
    text = json.dumps(layout)
    assert status == 200 and findings_view.analysis_state(rs, 0) == "computing"  # the gate is shut: no analysis yet
    graph = _component(layout, "timeline")
    spans = [t for t in graph["props"]["figure"]["data"] if t.get("meta") == "spans"]
    assert spans and all(t["x"] for t in spans), "the page holds the drawn timeline"
    assert _component(layout, "analysis")["props"]["data"] == {"run": 0, "state": "computing"}
    assert _component(layout, "analysis-poll")["props"]["disabled"] is False and '"nx-starting"' not in text
    rows, note = dash_app.findings_panel(rs, 0, None)
    assert rows == [] and note == dash_app.COMPUTING
    shown = overview.content_or_computing(rs, 0, None)
    assert [c.id for c in shown] == ["overview-computing"] and "computing" in shown[0].children
    assert dash_app.analysis_poll(rs, 0) == {"run": 0, "state": "computing"}

    slow_analysis.set()
    worker.join(120)
    assert findings_view.analysis_state(rs, 0) == "ready" and dash_app.analysis_poll(rs, 0) == {"run": 0, "state": "ready"}
    from neuron_explorer.analyzers import analyze

    expected = analyze(run_dir, write=False).findings
    rows, note = dash_app.findings_panel(rs, 0, None)
    assert [r["title"] for r in rows] == [f.title for f in expected] and note.startswith(f"{len(expected)} findings")
    assert "overview-header" in [getattr(c, "id", None) for c in overview.content_or_computing(rs, 0, None)]
    layout = json.loads(_get(url + "_dash-layout")[1])  # a later page: the analysis is done, no polling
    assert _component(layout, "analysis")["props"]["data"]["state"] == "ready" and _component(layout, "analysis-poll")["props"]["disabled"]


def test_server_answers_before_the_first_timeline_is_computed(slow_analysis, run_dir, monkeypatch):
    """`/` (the first request, which Dash uses to validate the layout) does not wait for the page."""
    from werkzeug.serving import make_server

    gate = threading.Event()
    real = dash_app.first_view
    monkeypatch.setattr(dash_app, "first_view", lambda rs: (gate.wait(120), real(rs))[1])
    rs = RunSet([run_dir])
    dash_app.start(rs)
    srv = make_server("127.0.0.1", 0, dash_app.create_app(rs).server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_port}/"
    try:
        status, _, _ = _get(url, timeout=20)
        assert status == 200 and not dash_app.page_ready(rs)
        gate.set()
        status, body, _ = _get(url + "_dash-layout")
        assert status == 200 and _component(json.loads(body), "timeline") and dash_app.page_ready(rs)
    finally:
        gate.set()
        slow_analysis.set()
        srv.shutdown()
        rs.close()


def test_the_analysis_waits_for_the_page_to_be_drawn_or_a_while(run_dir, monkeypatch, tmp_path):
    """After the page is built, the analysis starts when the page's first callback asks for the
    findings (the browser has drawn the page by then), not while the browser draws it; with no
    browser, after ANALYSIS_WAIT_S."""
    import shutil

    from neuron_explorer.analyzers import analyze

    mine = shutil.copytree(run_dir, tmp_path / "run")  # the other tests' servers may still analyse run_dir in the background
    began = []
    monkeypatch.setattr(findings_view, "_load_analyze", lambda: lambda path, **k: (
        began.append(time.monotonic()) if Path(path) == mine else None, analyze(path, **k))[1])
    run_dir = mine
    rs = RunSet([run_dir])
    try:
        worker = dash_app.start(rs, wait_s=60)
        _wait(lambda: dash_app.page_ready(rs))
        time.sleep(1.0)
        assert began == [] and worker.is_alive()  # built, not yet asked for by a drawn page: no analysis
        asked = time.monotonic()
        assert dash_app.findings_panel(rs, 0, None) == ([], dash_app.COMPUTING)  # the page's first callback
        worker.join(120)
        assert len(began) == 1 and began[0] - asked < 5 and findings_view.analysis_state(rs, 0) == "ready"
    finally:
        rs.close()
    rs = RunSet([run_dir])
    try:
        t = time.monotonic()
        dash_app.start(rs, wait_s=0.5).join(120)  # nobody opens the page
        assert len(began) == 2 and began[1] - t >= 0.5 and findings_view.analysis_state(rs, 0) == "ready"
    finally:
        rs.close()


FIRST_INDEX = """
import json, sys
from neuron_explorer.dashboard import app as dash_app
from neuron_explorer.dashboard.runs import RunSet

rs = RunSet([sys.argv[1]])
app = dash_app.create_app(rs)
index = app.server.test_client().get("/").get_data(as_text=True)  # before the layout is built, as a browser opened at once
ready = dash_app.page_ready(rs)
spaces = {getattr(c, "_namespace", None) for c in dash_app.page_layout(rs)._traverse()} - {None}
print(json.dumps({"index": index, "ready_at_index": ready, "namespaces": sorted(spaces)}))
rs.close()
"""


def test_the_first_page_served_lists_the_scripts_of_every_component_the_layout_uses(run_dir):
    """In a fresh process (no component library imported yet), `/` answered before the layout is
    built still lists the scripts of every component library in that layout: a page without
    dash-ag-grid's fails to render ("dash_ag_grid was not found") and stays blank — bench_page.py
    waited for ever on mem48 for that."""
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", FIRST_INDEX, str(run_dir)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["ready_at_index"] is False
    assert "dash_ag_grid" in got["namespaces"] and len(got["namespaces"]) >= 3
    missing = [ns for ns in got["namespaces"] if f"/{ns}" not in got["index"]]
    assert not missing, f"served page lacks the scripts of {missing}"


def test_a_failed_analysis_is_shown_not_computing_for_ever(run_dir, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("analysis broke")

    monkeypatch.setattr(findings_view, "_load_analyze", lambda: broken)
    rs = RunSet([run_dir])
    try:
        assert dash_app.findings_panel(rs, 0, None) == ([], dash_app.COMPUTING)  # starts it
        _wait(lambda: findings_view.analysis_state(rs, 0) != "computing")
        assert findings_view.analysis_state(rs, 0) == "failed"
        with pytest.raises(RuntimeError, match="analysis broke"):
            dash_app.findings_panel(rs, 0, None)
    finally:
        rs.close()


def _component(layout: dict, cid: str):
    """The component with id `cid` in a layout's JSON."""
    stack = [layout]
    while stack:
        c = stack.pop()
        if isinstance(c, dict):
            if c.get("props", {}).get("id") == cid:
                return c
            stack.extend(c.values())
        elif isinstance(c, list):
            stack.extend(c)
    return None


# ---- the pyramid stored beside the run (issue 42) --------------------------------------------------
BASE = 1_700_000_000_000_000_000
STEP = [X("ProfilerStep#1", "user_annotation", 0, 100)]  # the longest event: kept in memory (LONG_EVENTS = 1)


def _short(b_dur: int = 5, c_ts: int = 60) -> list[dict]:
    return [X("a", "cpu_op", 10, 10), X("b", "cpu_op", 40, b_dur), X("c", "cpu_op", c_ts, 5)]


@pytest.fixture
def tiny_pyramid(monkeypatch):
    """One event kept in memory, 1001 fine buckets: over the 100 us (+1 ns) run a fine bucket is 100 ns."""
    from neuron_explorer.dashboard import runs as runs_mod
    from neuron_explorer.dashboard import timeline as tl_mod

    monkeypatch.setattr(runs_mod, "LONG_EVENTS", 1)
    monkeypatch.setattr(tl_mod, "PYRAMID_BUCKETS", 1001)
    monkeypatch.setattr(tl_mod, "EXACT_CAP", 1)  # the step alone is exact: the rest is aggregated
    computed = []
    real = tl_mod._pyramid_query
    monkeypatch.setattr(tl_mod, "_pyramid_query", lambda r, band, threshold, *a: (
        computed.append(threshold) if threshold != "{threshold}" else None, real(r, band, threshold, *a))[1])
    return computed


def _import(path, events):
    return import_traces(write_trace(path.with_suffix(".json"), STEP + events, baseTimeNanoseconds=BASE), path).run_dir


def _stored(run_dir):
    import pyarrow.parquet as pq

    files = sorted((run_dir / "derived").glob("timeline_pyramid.*.parquet"))
    assert [f.name for f in files] == ["timeline_pyramid.all-10.parquet"]  # all ranks, Python frames folded, the tool's frames drawn
    t = pq.read_table(files[0])
    return sorted(zip(t["fine_bucket"].to_pylist(), t["busy"].to_pylist(), t["n"].to_pylist(), t["dur"].to_pylist()))


def _view(run_dir, pyramid: bool = True):
    """The whole run's buckets as drawn at 10 px (each pixel 10 us: the pyramid answers), or from a scan of the events."""
    from neuron_explorer.dashboard import timeline as tl_mod

    rs = RunSet([run_dir])
    try:
        if not pyramid:
            factor, tl_mod.PYRAMID_PX_FACTOR = tl_mod.PYRAMID_PX_FACTOR, 10**9
        try:
            tl = tl_mod.timeline(rs, run=0, width=10)
        finally:
            if not pyramid:
                tl_mod.PYRAMID_PX_FACTOR = factor
        assert tl["mode"] == "aggregated"
        b = tl["buckets"]
        return sorted(zip(b["y"], b["x0"], b["x1"], b["occupancy"], b["events"], b["event_id"], b["kind"])), tl["slices"]["name"]
    finally:
        rs.close()


def test_the_pyramid_is_stored_beside_the_run_and_read_at_the_next_open(tmp_path, tiny_pyramid):
    run_dir = _import(tmp_path / "run", _short())
    first = _view(run_dir)
    assert tiny_pyramid == [10_000]  # computed once: the events no longer than the second longest (a, 10 us)
    # a, b, c: one each in the fine buckets of 100 ns where they start (10, 40, 60 us), their busy time and longest event
    assert _stored(run_dir) == [(100, 10_000, 1, 10_000), (400, 5_000, 1, 5_000), (600, 5_000, 1, 5_000)]
    second = _view(run_dir)
    assert tiny_pyramid == [10_000]  # the second open read it: no scan of the events
    assert second == first == _view(run_dir, pyramid=False)  # and draws what the events draw
    assert [x[4] for x in first[0]] == [1, 1, 1] and first[1] == ["ProfilerStep#1"]


def test_the_stored_pyramid_is_computed_again_when_the_run_changes(tmp_path, tiny_pyramid):
    import shutil

    run_dir = _import(tmp_path / "run", _short())
    _view(run_dir)
    other = _import(tmp_path / "other", _short(b_dur=8, c_ts=70))  # b longer, c later
    shutil.copyfile(other / "rank=0" / "events.parquet", run_dir / "rank=0" / "events.parquet")  # the run's events replaced in place
    changed = _view(run_dir)
    assert tiny_pyramid == [10_000, 10_000]  # the stored file was computed from other events: computed again
    assert _stored(run_dir) == [(100, 10_000, 1, 10_000), (400, 8_000, 1, 8_000), (700, 5_000, 1, 5_000)]
    assert changed == _view(run_dir, pyramid=False)


def test_an_unreadable_stored_pyramid_is_computed_again(tmp_path, tiny_pyramid):
    from neuron_explorer import store

    run_dir = _import(tmp_path / "run", _short())
    (run_dir / "derived").mkdir()
    (run_dir / "derived" / "timeline_pyramid.all-10.parquet").write_bytes(b"PAR1 not a parquet file")
    assert _view(run_dir) == _view(run_dir, pyramid=False)
    assert tiny_pyramid == [10_000] and len(_stored(run_dir)) == 3
    with store.open_run(run_dir) as run:  # the run check and the views do not read the derived folder
        assert run.con.execute("SELECT count(*) FROM events").fetchone()[0] == 4


def test_a_run_that_cannot_be_written_to_is_drawn_the_same(tmp_path, tiny_pyramid, monkeypatch):
    from neuron_explorer import store

    run_dir = _import(tmp_path / "run", _short())
    monkeypatch.setattr(store.Path, "mkdir", lambda *a, **k: (_ for _ in ()).throw(PermissionError(13, "read-only")))
    assert _view(run_dir) == _view(run_dir, pyramid=False)
    assert not (run_dir / "derived").exists() and tiny_pyramid == [10_000, 10_000]  # nothing stored: computed at each open


def test_the_stored_pyramid_gives_the_computed_view_on_a_real_trace(tmp_path):
    """The V100 ResNet-50 trace with memory events (44k events; tiled 48x it is bench/README's mem48): the first
    open computes and stores the pyramid, the second reads it; both draw the same first view: the same slices,
    and buckets at the same places with the same counts and occupancy. A bucket's event (what a click opens) is
    its longest; where several are as long, either may be it, on any two computations: their durations are compared."""
    import numpy as np

    from neuron_explorer.dashboard import timeline as tl_mod

    run_dir = import_traces(TRACES / "v100_resnet50_torch19_memory.json.gz", tmp_path / "run").run_dir
    views, used = [], []
    real = tl_mod._pyramid_sql
    for _ in range(2):
        rs = RunSet([run_dir])
        try:
            tl_mod._pyramid_sql = lambda *a: used.append(a[-1][0]) or real(*a)
            view, _, status = dash_app.first_view(rs)
            tl = tl_mod.timeline_arrays(rs, run=0, t0=view["t0"], t1=view["t1"], width=dash_app.DEFAULT_WIDTH, rank=view["rank"])
            b = tl["buckets"]
            order = np.lexsort((b["x0"], b["y"]))
            ids = [int(x) for x in b["event_id"][order]]
            dur = dict(rs.get(0).query(f"SELECT event_id, dur_ns FROM events WHERE event_id IN ({', '.join(map(str, set(ids)))})")[1])
            views.append({"status": status, "slices": sorted(zip(*(map(str, tl["slices"][c]) for c in sorted(tl["slices"])))),
                          **{c: b[c][order].tolist() for c in ("y", "x0", "x1", "events")},
                          "occupancy": np.round(b["occupancy"][order], 5).tolist(), "longest": [dur[i] for i in ids]})
        finally:
            tl_mod._pyramid_sql = real
            rs.close()
    # both first views, and the same windows again (each with the buckets either side of the window), were drawn from the pyramid
    assert len(used) >= 4 and len(used) % 2 == 0 and set(used) == {"_nx_pyramid_10"}, used
    assert (run_dir / "derived" / "timeline_pyramid.all-10.parquet").is_file()
    assert views[0] == views[1] and len(views[0]["x0"]) > 1000 and "aggregated per pixel" in views[0]["status"]


# ---- the lanes and the longest events stored beside the run (issue 42) ----------------------------
def _scans(monkeypatch):
    """The SQL of the lanes' and the longest events' scans of the events (OpenRun.lanes, OpenRun.long_events), as run."""
    from neuron_explorer.dashboard import runs as runs_mod

    seen = []
    real_arrow, real_query = runs_mod.OpenRun.arrow, runs_mod.OpenRun.query

    def spy(real):
        def call(self, sql, params=None):
            if "AS max_row" in sql:
                seen.append("lanes")
            elif "short_max_dur_ns" in sql or sql.startswith("SELECT dur_ns FROM events ORDER BY"):
                seen.append("long")
            return real(self, sql, params)
        return call
    monkeypatch.setattr(runs_mod.OpenRun, "arrow", spy(real_arrow))
    monkeypatch.setattr(runs_mod.OpenRun, "query", spy(real_query))
    return seen


def _facts(run_dir):
    """(the lanes of the default layout, all lanes, the longest events and their threshold, the whole run's view) of a fresh open."""
    rs = RunSet([run_dir])
    try:
        r = rs.get(0)
        threshold, long = r.long_events()
        return ([ln.to_dict() for ln in r.lanes(None, False)], [ln.to_dict() for ln in r.lanes(None, True)], threshold,
                sorted(tuple(d.values()) for d in long.to_pylist()), _view(run_dir))
    finally:
        rs.close()


def test_the_lanes_and_longest_events_are_stored_and_read_at_the_next_open(tmp_path, tiny_pyramid, monkeypatch):
    run_dir = _import(tmp_path / "run", _short())
    scans = _scans(monkeypatch)
    first = _facts(run_dir)
    assert sorted(set(scans)) == ["lanes", "long"]  # the first open scanned the events for both
    assert sorted(f.name for f in (run_dir / "derived").glob("timeline_l*.parquet")) == [
        "timeline_lanes.all-all-10.parquet", "timeline_long_events.all-all.parquet"]
    # one lane (the thread of the four slices) of two rows (the step, the slices in it); one event kept in memory (LONG_EVENTS = 1): the step, 100 us;
    # every other event is at most 10 us long (a)
    assert [(ln["label"], ln["rows"]) for ln in first[0]] == [("r0 pid 1 tid 1", 2)] and first[2] == 10_000
    assert [(x[2], x[4]) for x in first[3]] == [("ProfilerStep#1", 100_000)]
    scans.clear()
    second = _facts(run_dir)
    assert scans == []  # read back: no scan of the events
    assert second == first  # the same lanes, longest events and page
    monkeypatch.setattr("neuron_explorer.store.read_derived", lambda *a: None)  # nothing stored: computed
    assert _facts(run_dir) == first and sorted(set(scans)) == ["lanes", "long"]


def test_the_stored_lanes_and_longest_events_are_computed_again_when_the_run_changes(tmp_path, tiny_pyramid, monkeypatch):
    import shutil

    run_dir = _import(tmp_path / "run", _short())
    before = _facts(run_dir)
    other = _import(tmp_path / "other", _short(b_dur=8, c_ts=70) + [X("d", "cpu_op", 80, 15)])  # d nested under the step, 15 us
    shutil.copyfile(other / "rank=0" / "events.parquet", run_dir / "rank=0" / "events.parquet")
    scans = _scans(monkeypatch)
    after = _facts(run_dir)
    assert sorted(set(scans)) == ["lanes", "long"]  # the stored ones were of the old events: computed again
    assert after[2] == 15_000 != before[2]  # the longest short event is now d
    monkeypatch.setattr("neuron_explorer.store.read_derived", lambda *a: None)
    assert _facts(run_dir) == after


def test_the_analysis_runs_in_a_child_process_and_the_findings_fill_in(tmp_path, monkeypatch):
    """The real analyzer runs in a child process (views/findings._in_child): the panel says "computing…", then
    shows the findings the analyzer gives in this process. The whole run's Overview parts (critical-path top lists,
    roofline, per-rank parts) come back with it: the server walks no critical path for the Overview, and they are
    what the server would compute itself."""
    import os

    from neuron_explorer.analyzers import analyze
    from neuron_explorer.analyzers import critical_path as cp
    from neuron_explorer.store import open_run

    assert findings_view.IN_CHILD and findings_view._load_analyze is findings_view._LOAD_ANALYZE
    from dash import html  # noqa: F401  (imported here, not in the Overview's first call: that takes longer than the child's analysis)

    from neuron_explorer.dashboard.views import overview as overview_view

    run_dir = import_traces(TRACES / "rocm_mi250_train.json.gz", tmp_path / "run").run_dir  # profiler steps: a critical path
    rs = RunSet([run_dir])
    try:
        assert dash_app.findings_panel(rs, 0, None) == ([], dash_app.COMPUTING)
        assert [getattr(c, "id", None) for c in overview.content_or_computing(rs, 0, None)] == ["overview-computing"]
        _wait(lambda: findings_view.analysis_state(rs, 0) != "computing")
        child = rs.get(0)._facts["analysis_child"]
        assert child.pid != os.getpid() and child.returncode == 0 and findings_view.analysis_state(rs, 0) == "ready"
        expected = findings_view.findings_from_report(rs.get(0), analyze(run_dir, write=False))
        assert findings_view.findings(rs, 0) == expected and len(expected["rows"]) >= 1
        rows, note = dash_app.findings_panel(rs, 0, None)
        assert len(rows) == len(expected["rows"]) and note != dash_app.COMPUTING
        assert findings_view.report_summary(rs, 0)["ranks"][0]["rank"] == 0
        cp._CACHE.clear()  # (this process's analyze above walked the paths too)
        walked = []
        monkeypatch.setattr(cp, "_walked", lambda *a, **k: walked.append(a) or pytest.fail("the Overview walked a critical path"))
        drawn = overview.content_or_computing(rs, 0, None)  # the Overview from the child's report
        assert "overview-computing" not in [getattr(c, "id", None) for c in drawn] and "overview-header" in [getattr(c, "id", None) for c in drawn]
        assert overview_view.overview(rs, 0) is overview_view.overview(rs, 0)  # its data computed once, not at every page load
        data = overview_view.overview(rs, 0)
        assert not walked and data["top"]["basis"] == "critical_path" and data["top"]["kernels"]
        monkeypatch.undo()
        with open_run(run_dir) as run:
            here = overview_view.analysed_parts(run, overview_view.summary_by_rank(rs, 0), [0])
        assert (data["top"], data["roofline"], data["ranks"]) == (here["top"], here["roofline"], here["per_rank"])
    finally:
        rs.close()


def test_a_zoom_made_while_the_overview_is_computed_does_not_wait_for_it(run_dir, monkeypatch):
    """The Overview's analyses (the critical path's top lists, the roofline: seconds on a big rank) read the run
    through a second connection of its own (OpenRun.background), under its own lock: a zoom made meanwhile is drawn
    at once. (They used to hold the run's one lock: on a 2.1M-event run the first zoom after the page waited 25 s.)"""
    from neuron_explorer.analyzers import analyze
    from neuron_explorer.dashboard.views import overview as overview_view

    monkeypatch.setattr(findings_view, "_load_analyze", lambda: analyze)  # the analysis in this process: no parts from a child
    inside, release = threading.Event(), threading.Event()
    real = overview_view.analysed_parts

    def slow(run, summary, shown):
        inside.set()
        assert release.wait(120), "the test never let the Overview finish"
        return real(run, summary, shown)
    monkeypatch.setattr(overview_view, "analysed_parts", slow)
    rs = RunSet([run_dir])
    try:
        findings_view.analyse(rs, 0)
        r = rs.get(0)
        assert r.background() is r.background() and r.background().run.con is not r.run.con
        computing = threading.Thread(target=overview_view.overview, args=(rs, 0), daemon=True)
        computing.start()
        assert inside.wait(60)
        view, _, _ = dash_app.first_view(rs)
        zoom = {**view, "t0": view["t0"] + (view["t1"] - view["t0"]) // 3, "t1": view["t0"] + (view["t1"] - view["t0"]) // 3 * 2, "zoom": True}
        drawn = []
        zooming = threading.Thread(target=lambda: drawn.append(dash_app.timeline_figure(rs, zoom, 1200, None)), daemon=True)
        zooming.start()
        zooming.join(60)
        assert drawn and computing.is_alive()  # drawn while the Overview is still being computed
        assert drawn[0][1].startswith(f"{(zoom['t1'] - zoom['t0']) / 1e6:,.3f} ms")
        release.set()
        computing.join(60)
        assert not computing.is_alive() and overview_view.overview(rs, 0)["top"]["kernels"] is not None
    finally:
        release.set()
        rs.close()


def test_an_error_in_the_analysis_child_is_shown(tmp_path):
    from types import SimpleNamespace

    from neuron_explorer.errors import NeuronExplorerError

    gone = SimpleNamespace(run=SimpleNamespace(path=tmp_path / "no_such_run"), _facts={})
    with pytest.raises(NeuronExplorerError, match="no_such_run"):
        findings_view._in_child(gone)
    assert gone._facts["analysis_child"].returncode == 0  # it answered with the error


def test_the_page_loads_our_plotly_bundle_which_has_every_trace_type_the_dashboard_draws(run_dir):
    """The page's one plotly.js is assets/plotly-nx.min.js (scripts/plotly/build.sh: 1.3 MB, not dash's 4.8 MB full
    bundle), and that bundle registers every trace type the dashboard's figures use (a figure of another type would
    draw nothing)."""
    import re

    from neuron_explorer.dashboard import app as app_mod

    rs = RunSet([run_dir])
    try:
        client = dash_app.create_app(rs).server.test_client()
        index = client.get("/").get_data(as_text=True)
        scripts = re.findall(r'<script src="([^"]+)"', index)
        assert [s for s in scripts if "plotly" in s] == [f"/assets/{app_mod.PLOTLY_JS}"], scripts  # ours, once; not dash's
        bundle = client.get(f"/assets/{app_mod.PLOTLY_JS}")
        assert bundle.status_code == 200 and len(bundle.data) < 2_000_000
        registered = set(re.findall(rb'moduleType:"trace",name:"([a-z0-9]+)"', bundle.data))
    finally:
        rs.close()
    src = "".join(p.read_text() for p in (Path(app_mod.__file__).parent).rglob("*.py"))
    used = set(re.findall(r'"type": "([a-z0-9]+)", "(?:mode|ids|x|y|z|orientation)"', src)) | {
        m.lower() for m in re.findall(r"go\.(Bar|Heatmap|Scatter|Icicle|Pie|Box)\(", src)}
    assert used >= {"scatter", "bar", "heatmap", "icicle"}, used
    assert {u.encode() for u in used} <= registered, (used, registered)


def test_the_first_timeline_is_computed_once_by_both_warm_ups_and_gives_the_same_page(run_dir, monkeypatch):
    """`serve` starts a warm-up of the first timeline before its imports (dashboard._first_timelines), and the page's
    build (app.warm → first_view) asks for the same window: the second waits for the first's arrays instead of
    computing them again beside it on the same cores. The page is the one timeline_figure draws on its own."""
    from neuron_explorer.dashboard import _first_timelines, timeline

    calls = []
    real = timeline.timeline_arrays

    def counted(*a, **k):
        calls.append(k)
        return real(*a, **k)

    monkeypatch.setattr(timeline, "timeline_arrays", counted)
    monkeypatch.setattr(dash_app, "timeline_arrays", counted)
    rs = RunSet([run_dir])
    try:
        early = threading.Thread(target=_first_timelines, args=(rs,))
        early.start()
        dash_app.warm(rs)
        early.join()
        view, fig, status = dash_app.first_view(rs)
        assert len(calls) == 1 and calls[0]["flanks"]  # one computation of the first view's window, with its flanks
        again = dash_app.timeline_figure(rs, view, dash_app.DEFAULT_WIDTH, None)  # computed on its own
        assert json.dumps(again, sort_keys=True, default=str) == json.dumps((fig, status), sort_keys=True, default=str)
    finally:
        rs.close()


def test_opening_a_run_lists_its_partitions_once_and_keeps_its_stored_tables(tmp_path, monkeypatch):
    """The check of the partitions, the views and the stored tables' keys each listed the run's folders (40-60 ms
    apiece on 256 ranks, before the first page): now once per open. The stored tables' keys are the same as from a
    listing of their own, so the lanes stored at a first open are read at the next one, and not when the run changed."""
    from neuron_explorer import run_check, store

    run_dir = import_traces(TRACE, tmp_path / "run").run_dir
    listings = []
    real = run_check.rank_files
    monkeypatch.setattr(run_check, "rank_files", lambda d: listings.append(d) or real(d))
    rs = RunSet([run_dir])
    try:
        dash_app.first_view(rs)
        run = rs.get(0).run
        assert len(listings) == 1
        key = store.derived_key(run, "some computation")
        assert key == store.derived_key(store.Run(run.path, run.manifest, run.con), "some computation")  # listed again
    finally:
        rs.close()
    assert rs.get(0).timeline_stored(None)
    (run_dir / "rank=0" / "events.parquet").touch()
    with store.open_run(run_dir) as again:
        assert store.derived_key(again, "some computation") != key


def test_opening_a_run_imports_no_pandas_and_its_ranks_and_devices_read_from_a_cursor(run_dir):
    """pyarrow imports pandas at its first array (0.45 s of CPU), which a dashboard paid before it answered its first
    request: the run's `ranks` and `devices` views are made from SQL values instead, as tables that the connection's
    cursors read too (a registered Arrow table is seen by its own connection only)."""
    import subprocess
    import sys

    code = ("import sys; from neuron_explorer import store; r = store.open_run(sys.argv[1]); "
            "print('pandas' in sys.modules); cur = store.cursor(r.con); "
            "print(cur.execute('SELECT rank, events FROM ranks').fetchall(), cur.execute('SELECT count(*), min(name) FROM devices').fetchall())")
    out = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True, timeout=120, check=True).stdout.split("\n")
    assert out[0] == "False"
    from neuron_explorer.store import open_run

    with open_run(run_dir) as r:
        events = r.con.execute("SELECT count(*) FROM events").fetchone()[0]
        devices = r.con.execute("SELECT count(*), min(name) FROM devices").fetchall()
    assert out[1] == f"[(0, {events})] {devices}" and devices[0][0] >= 1


def test_the_first_page_imports_no_pandas_and_draws_what_arrow_gives(run_dir):
    """The first timeline's Arrow -> NumPy conversions imported pandas (0.5 s of CPU before the first page, pyarrow's
    to_numpy of any type): they read the arrays' buffers or values instead, and give what to_numpy gives."""
    import subprocess
    import sys

    import numpy as np
    import pyarrow as pa

    from neuron_explorer.dashboard import timeline

    code = ("import sys; from neuron_explorer.dashboard import app, runs; rs = runs.RunSet([sys.argv[1]]); "
            "view, fig, status = app.first_view(rs); print('pandas' in sys.modules, len(fig['data']) > 0)")
    out = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True, timeout=300, check=True).stdout
    assert out.split("\n")[0] == "False True"
    cols = [pa.chunked_array([[5, 6, 7], [8]], pa.int64()).slice(1), pa.chunked_array([[1, None, 3]], pa.int32()),
            pa.chunked_array([["kernel", None], ["cpu_op"]]), pa.chunked_array([[0.5, 1.5]]), pa.chunked_array([], pa.int64())]
    for col in cols:
        got, want = timeline._numpy(col), col.to_numpy()
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=got.dtype.kind == "f"), (col, got, want)
    tbl = pa.table({"part": [0, 1, 0, 2, 1] * 3})
    assert tbl.filter(timeline._mask(np.array([0, 1, 0, 2, 1] * 3) == 1))["part"].to_pylist() == [1] * 6


def test_a_run_opened_before_serves_the_same_page_built_after_the_server_answers(tmp_path):
    """At the first open the first timeline is computed while the server imports Dash; a run opened before has its
    lanes and longest events stored (first_timelines_stored), so `neuron-explorer dashboard` builds the page once it
    answers (app.serve(warm_first=False)): the page it serves is the one the first open served."""
    import socket
    import subprocess
    import sys
    import urllib.request

    from neuron_explorer.dashboard import first_timelines_stored

    run = import_traces(TRACE, tmp_path / "run").run_dir
    rs = RunSet([run])
    try:
        assert not first_timelines_stored(rs)  # nothing stored yet: the first open computes them early
        first = dash_app.create_app(rs).server.test_client().get("/_dash-layout").get_data()  # computed, and stored beside the run
    finally:
        rs.close()
    rs = RunSet([run])
    try:
        assert first_timelines_stored(rs)
    finally:
        rs.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "neuron_explorer", "dashboard", str(run), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: proc.poll() is None and _answers(f"http://127.0.0.1:{port}/"), timeout=120)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_dash-layout", timeout=120) as resp:
            again = resp.read()
    finally:
        proc.terminate()
        proc.wait(30)
    assert b'"timeline"' in first and again == first


def _answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False
