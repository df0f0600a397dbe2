"""Issue 15 items 10 and 12 in headless Chromium: the Compare view draws names left to right
(`aten::add_` is not drawn as `_aten::add`), no graph offers a "share / upload chart" button, and
the first load of the page makes no request that leaves the machine — every resource in the
page's performance entries comes from the dashboard at 127.0.0.1. The page weight (bytes
transferred for the first load) is written to test-artifacts/page-weight.json and quoted in
bench/README.md.

The two runs are test_dashboard_compare's hand-built ones, with the test run's added operator
named `aten::add_` (a trailing underscore: what a right-to-left cell moves to the front).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import dashboard_server
from .test_browser_dashboard import ARTIFACTS, _browser_installed, browser, wait_for  # noqa: F401  (shared browser fixtures)
from .test_dashboard_compare import BASE_STEPS, SOURCE, TEST_STEPS, _steps_trace

pytestmark = pytest.mark.browser  # tier: drives chromium


def _runs(tmp: Path) -> list[Path]:
    (tmp / "train.py").write_text(SOURCE)
    base = import_traces(_steps_trace(tmp / "base.json", BASE_STEPS), tmp / "base").run_dir
    t = _steps_trace(tmp / "test.json", TEST_STEPS, slow_ms=3.0)
    t.write_text(t.read_text().replace("aten::slow", "aten::add_"))
    return [base, import_traces(t, tmp / "test").run_dir]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with dashboard_server(_runs(tmp_path_factory.mktemp("cmp-rtl"))) as (url, _rs):
        yield url


TIMELINE = "document.querySelector('#timeline .js-plotly-plot')"


def test_first_load_stays_on_the_machine_and_offers_no_upload(server, browser):  # noqa: F811
    drv = browser
    drv.get(server)
    wait_for(drv, f"const gd = {TIMELINE}; return gd && gd.data && gd.data.length", what="the timeline")
    wait_for(drv, "return document.readyState === 'complete'", what="the page loaded")
    entries = drv.execute_script("""
        const nav = performance.getEntriesByType('navigation').map(e => ({name: e.name, bytes: e.transferSize, body: e.decodedBodySize}));
        const res = performance.getEntriesByType('resource').map(e => ({name: e.name, bytes: e.transferSize, body: e.decodedBodySize}));
        return nav.concat(res);""")
    assert len(entries) > 3
    outside = [e["name"] for e in entries if not e["name"].startswith(server.rstrip("/") + "/")]
    assert outside == []  # every request went to the dashboard at 127.0.0.1
    assert all(e["name"].startswith("http://127.0.0.1:") for e in entries)
    total = sum(e["bytes"] for e in entries)
    biggest = sorted(entries, key=lambda e: -e["bytes"])[:5]
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "page-weight.json").write_text(json.dumps(
        {"requests": len(entries), "transferred_bytes": total, "largest": [{"path": e["name"].split("/", 3)[-1].split("?")[0],
                                                                            "bytes": e["bytes"]} for e in biggest]}, indent=1))
    assert total > 0
    # no graph offers to send the chart anywhere: no "share / upload / edit in Chart Studio" button, no plotly link
    drv.execute_script(f"const gd = {TIMELINE}; gd.dispatchEvent(new MouseEvent('mousemove', {{bubbles: true}}));")
    titles = drv.execute_script("return Array.from(document.querySelectorAll('.modebar-btn')).map(b => b.getAttribute('data-title'))")
    assert titles and not [t for t in titles if t and ("Cloud" in t or "Chart Studio" in t or "plotly" in t.lower())]
    assert not drv.execute_script("return document.querySelectorAll("
                                  "'a[href*=\"plot.ly\"], a[href*=\"plotly.com\"], a[href*=\"chart-studio\"]').length")


def test_compare_tables_draw_names_left_to_right(server, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    drv = browser
    drv.get(server)
    wait_for(drv, f"const gd = {TIMELINE}; return gd && gd.data", what="the explore timeline")
    drv.find_element(By.ID, "mode-compare").click()
    wait_for(drv, "const e = document.getElementById('cmp-verdict-badge'); return e && e.innerText", what="verdict")
    tab = next(t for t in drv.find_elements(By.CSS_SELECTOR, "#cmp-tabs .tab") if t.text == "Operators")
    tab.click()
    cell = ("""const c = Array.from(document.querySelectorAll('#cmp-table-operator .ag-cell[col-id="key"]'))"""
            ".find(c => c.innerText.trim() === 'aten::add_');")
    got = wait_for(drv, cell + """ if (!c) return null;
        const walk = document.createTreeWalker(c, NodeFilter.SHOW_TEXT); let n, node = null;
        while ((n = walk.nextNode())) { if (n.textContent.includes('aten::add_')) { node = n; break; } }
        const at = i => { const r = document.createRange(); const s = node.textContent.indexOf('aten::add_') + i;
                          r.setStart(node, s); r.setEnd(node, s + 1); return r.getBoundingClientRect().left; };
        return {direction: getComputedStyle(c).direction, inner: getComputedStyle(node.parentElement).direction,
                xs: Array.from('aten::add_').map((_, i) => at(i))};""", what="the aten::add_ row")
    assert got["direction"] == "ltr" and got["inner"] == "ltr"
    xs = got["xs"]
    assert xs == sorted(xs) and xs[0] < xs[-1]  # 'a' is drawn first, '_' last: left to right as written
    drv.save_screenshot(str(ARTIFACTS / "dashboard-compare-ltr.png"))
