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

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import app as dash_app
from neuron_explorer.dashboard.runs import RunSet
from neuron_explorer.dashboard.ui import overview
from neuron_explorer.dashboard.views import findings as findings_view

from .conftest import TRACES

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
