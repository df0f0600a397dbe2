"""In headless Chromium (issue 42): a dashboard whose analysis is still running draws the page and
its timeline, and its findings panel and overview say "computing…"; when the analysis is done
they fill in by themselves (the page polls), with the findings the analyzer reports.

The analysis is made artificially slow: it waits on a gate the test opens.
"""

from __future__ import annotations

import threading

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import app as dash_app
from neuron_explorer.dashboard.runs import RunSet
from neuron_explorer.dashboard.views import findings as findings_view

from .conftest import TRACES
from .test_browser_dashboard import GD, GRID_COLUMN, _browser_installed, browser, wait_for  # noqa: F401  (fixtures)

pytestmark = pytest.mark.browser  # tier: drives chromium


def test_page_draws_while_the_analysis_runs_then_the_findings_fill_in(tmp_path, monkeypatch, browser):  # noqa: F811
    from selenium.webdriver.common.by import By
    from werkzeug.serving import make_server

    from neuron_explorer.analyzers import analyze

    run_dir = import_traces(TRACES / "cuda_alexnet_train.json.gz", tmp_path / "run").run_dir
    gate = threading.Event()
    monkeypatch.setattr(findings_view, "_load_analyze", lambda: lambda *a, **k: (gate.wait(120), analyze(*a, **k))[1])
    rs = RunSet([run_dir])
    dash_app.start(rs)  # as serve(): the page, then the analysis, in the background
    srv = make_server("127.0.0.1", 0, dash_app.create_app(rs).server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    drv = browser
    try:
        drv.get(f"http://127.0.0.1:{srv.server_port}/")
        assert wait_for(drv, f"const gd = {GD}; return gd && gd.querySelectorAll('.scatterlayer .js-fill').length", what="painted slices")
        assert "computing the overview" in wait_for(drv, "const e = document.getElementById('overview-computing'); return e && e.innerText",
                                                    what="the overview's computing line")
        drv.find_element(By.XPATH, "//div[@id='tabs']//*[contains(text(), 'Findings')]").click()
        assert "computing the findings" in wait_for(drv, "const e = document.getElementById('findings-note'); return e && e.innerText",
                                                    what="the findings' computing line")
        assert findings_view.analysis_state(rs, 0) == "computing"  # all of that with the analysis not yet begun

        gate.set()
        expected = analyze(run_dir, write=False).findings
        note = wait_for(drv, "const e = document.getElementById('findings-note'); const t = e && e.innerText; return t && t.includes('ranked') && t",
                        what="the findings note", timeout=120)
        assert note.startswith(f"{len(expected)} findings")
        titles = wait_for(drv, f"return {GRID_COLUMN}('findings', 'title')", what="the findings grid")
        assert sorted(titles) == sorted(f.title for f in expected)
        drv.find_element(By.XPATH, "//div[@id='tabs']//*[contains(text(), 'Overview')]").click()
        assert wait_for(drv, "return document.getElementById('overview-header') && !document.getElementById('overview-computing')",
                        what="the overview")
    finally:
        gate.set()
        srv.shutdown()
        rs.close()
