"""End to end in headless Chromium: a many-rank run opens with its rank x step heatmap, and a
click on a cell opens that rank's timeline at that step (dashboard/ranks_view.py).

The 12-rank run of test_ranks_view.py: rank 7's step 2 takes 400 us, every other step 100 us.
The timeline opens on rank 0. Saves test-artifacts/dashboard-ranks.png. Needs Debian's chromium and chromium-driver.
"""

from __future__ import annotations

import threading

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces

from .test_browser_dashboard import ARTIFACTS, STATUS, _browser_installed, _mouse_click, browser, wait_for  # noqa: F401  (fixtures)
from .test_ranks_view import BASE, SLOW_RANK, SLOW_STEP, write_ranks

pytestmark = pytest.mark.browser  # tier: drives chromium

HM = "document.querySelector('#rank-heatmap .js-plotly-plot')"
TL = "document.querySelector('#timeline .js-plotly-plot')"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from werkzeug.serving import make_server

    from neuron_explorer.dashboard.app import create_app, warm
    from neuron_explorer.dashboard.runs import RunSet

    tmp = tmp_path_factory.mktemp("browser_ranks")
    rs = RunSet([import_traces(write_ranks(tmp / "traces", 12), tmp / "run").run_dir])
    warm(rs)
    srv = make_server("127.0.0.1", 0, create_app(rs).server, threaded=True)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_port}/"
    srv.shutdown()
    rs.close()


def test_the_timeline_is_painted_before_the_heatmap_is_drawn(server, browser):
    """The first rank's timeline is what the page is opened for: the heatmap waits for its paint."""
    drv = browser
    # from the document's start, the moment the heatmap's plot first has an svg
    added = drv.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """(function seen() {
        if (document.querySelector('#rank-heatmap .main-svg')) { window.nxHeatmapAt = performance.now(); return; }
        requestAnimationFrame(seen); })();"""})
    try:
        drv.get(server)
        heat_at = wait_for(drv, "return window.nxHeatmapAt", what="heatmap drawn")
        painted_at = wait_for(drv, "return window.nxTimeline && window.nxTimeline.paintedAt", what="timeline painted")
    finally:
        drv.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": added["identifier"]})
    assert painted_at < heat_at, (painted_at, heat_at)


def test_a_heatmap_cell_opens_that_ranks_timeline_at_that_step(server, browser):
    drv = browser
    drv.get(server)
    n = wait_for(drv, f"const gd = {HM}; return gd && gd.data && gd.data[0].type === 'heatmap' && gd.data[0].z.length",
                 what="rank x step heatmap")
    assert n == 12
    # before the click the timeline shows the first rank only (the heatmap shows them all)
    ticks = wait_for(drv, f"const gd = {TL}; return gd && Array.from(gd.querySelectorAll('.ytick text')).map(t => t.textContent)",
                     what="timeline lanes")
    assert {t.split()[0] for t in ticks} == {"r0"}, ticks
    assert "rank 0" in drv.execute_script("return document.getElementById('rank-select').innerText")
    # click the middle of rank 7's step 2, the hottest cell
    x, y = drv.execute_script(f"""const gd = {HM}; const r = gd.getBoundingClientRect(); const s = gd._fullLayout._size;
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const xi = xa.type === 'category' ? gd.data[0].x.indexOf(arguments[0]) : arguments[0];  // a category axis counts cells
        return [r.left + s.l + xa.l2p(xi), r.top + s.t + ya.d2p(arguments[1])];""", SLOW_STEP, SLOW_RANK)
    _mouse_click(drv, x, y)
    picked = wait_for(drv, "const e = document.getElementById('rank-select'); return e && e.innerText.includes('rank 7') && e.innerText",
                      what="rank picker set to the clicked rank")
    assert "rank 7" in picked
    status = wait_for(drv, f"const s = {STATUS}; return s.startsWith('0.400 ms') && s", what="the step's window")
    assert status.startswith("0.400 ms from +0.100 ms"), status
    ticks = wait_for(drv, f"""const gd = {TL}; const t = Array.from(gd.querySelectorAll('.ytick text')).map(t => t.textContent);
        return t.length && t.every(x => x.startsWith('r7 ')) && t""", what="only rank 7's lanes")
    assert ticks
    # the window stays on the step once every callback has run (the picker's reset does not win)
    import time

    time.sleep(2)
    assert drv.execute_script(f"return {STATUS}").startswith("0.400 ms from +0.100 ms")
    x0, x1 = drv.execute_script(f"return {TL}._fullLayout.xaxis.range")
    assert x0 == pytest.approx(0.1, abs=0.02) and x1 == pytest.approx(0.5, abs=0.02)
    ARTIFACTS.mkdir(exist_ok=True)
    drv.save_screenshot(str(ARTIFACTS / "dashboard-ranks.png"))
    assert BASE
