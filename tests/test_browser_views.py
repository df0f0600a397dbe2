"""Issue 35 items 4, 5 and 7 in headless Chromium: a page that loads with no console error, the
flame graph (headline, step picker, click-to-zoom), the SQL page (an error shown inline, a result
row shown on the timeline) and a run switch that clears the old run's selection and search.

Runs: the project's CPU sample (source lines) and the 68k-event CUDA trace (kernels).
"""

from __future__ import annotations

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import TRACES, dashboard_server
from .test_browser_dashboard import ARTIFACTS, CHROMEDRIVER, CHROMIUM, SAMPLE, STATUS, _browser_installed, choose, choose_run, wait_for  # noqa: F401

pytestmark = pytest.mark.browser  # tier: drives chromium

DRAWER_SHOWN = "getComputedStyle(document.querySelector('.nx-detail')).display !== 'none'"
"""Whether the event drawer (fixed at the window's foot) is on screen."""
SQL_ROW = "SELECT event_id, name FROM events WHERE kind = 'kernel' ORDER BY dur_ns DESC, event_id LIMIT 5"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser-views")
    sample = import_traces(SAMPLE, tmp / "sample").run_dir
    gpu = import_traces(TRACES / "cuda_train_68k_events.json.gz", tmp / "gpu").run_dir
    with dashboard_server([sample, gpu]) as served:
        yield served


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Chromium that keeps the page's console (goog:loggingPrefs) for the no-console-error check."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-unsafe-swiftshader",
              "--window-size=1600,1000", f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()


def _tab(drv, label: str):
    from selenium.webdriver.common.by import By

    drv.find_element(By.XPATH, f"//div[@id='tabs']//*[text()='{label}']").click()


def test_a_load_logs_no_console_error(server, browser):
    url, _ = server
    browser.get(url)
    wait_for(browser, f"return {STATUS}", what="status")
    wait_for(browser, "return document.querySelector('#overview-verdict')", what="overview drawn")
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE" or "not found in layout" in e["message"]]
    assert errors == [], errors


def test_the_timeline_is_painted_before_the_grids_script_is_fetched(server, browser):
    """Issue 35: what is not needed to draw the timeline comes after it. The grids' script (1.3 MB)
    is asked for only once the timeline is painted (before, it was one of the page's scripts), then
    the Overview's grid shows the findings as before, and so does the Findings tab's."""
    url, _ = server
    browser.get("about:blank")
    browser.get(url)
    wait_for(browser, "return document.querySelector('#overview-findings .ag-row')", what="the overview's findings grid")
    painted, grid_at, first_script = browser.execute_script("""const r = performance.getEntriesByType('resource');
        const grid = r.find(e => e.name.includes('dash_ag_grid')), plotly = r.find(e => e.name.includes('plotly-nx'));
        return [window.nxTimeline.paintedAt, grid && grid.startTime, plotly && plotly.startTime];""")
    assert painted is not None and grid_at is not None and first_script is not None
    assert first_script < painted <= grid_at, (first_script, painted, grid_at)
    _tab(browser, "Findings")
    wait_for(browser, "return document.querySelector('#findings .ag-row')", what="the Findings tab's grid")


def test_flame_graph_headline_and_click_to_zoom(server, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    url, _ = server
    drv = browser
    drv.get(url)
    wait_for(drv, f"return {STATUS}", what="status")
    choose_run(drv, 1)
    wait_for(drv, f"return {STATUS}.includes('45,')", what="the GPU run drawn")
    _tab(drv, "Flame")
    head = wait_for(drv, "const e = document.getElementById('flame-head'); return e && e.innerText", what="flame headline")
    assert head.startswith("step 103: ") and "device time" in head and "kernel → kernel" not in head, head
    picker = drv.execute_script("return document.getElementById('flame-step').getBoundingClientRect().width")
    assert picker >= 150, picker  # the headline no longer squeezes the step picker
    n = wait_for(drv, "return document.querySelectorAll('#flame-graph g.slice').length", what="flame boxes")
    assert n > 10
    # a click on the thread box (the widest box above the root) zooms into it
    box = drv.execute_script("""
        const s = Array.from(document.querySelectorAll('#flame-graph g.slice'));
        const t = s.find(g => (g.textContent || '').startsWith('thread 1262'));
        return t;""")
    assert box is not None
    ActionChains(drv).move_to_element(box).click().perform()
    zoom = wait_for(drv, "const e = document.getElementById('flame-zoom'); return e && e.innerText", what="zoom words")
    assert zoom.startswith("zoomed to step 103 → thread 1262"), zoom
    # the steady steps, then a search
    choose(drv, "flame-step", "steady steps")
    wait_for(drv, "return document.getElementById('flame-head').innerText.startsWith('steady steps ')", what="steady headline")
    box = drv.find_element(By.ID, "flame-search")
    box.send_keys("cudaLaunchKernel\n")
    wait_for(drv, "return document.getElementById('flame-head').innerText.includes(\"'cudaLaunchKernel': \")", what="search in headline")
    ARTIFACTS.mkdir(exist_ok=True)
    drv.save_screenshot(str(ARTIFACTS / "dashboard-flame.png"))


def test_sql_page_error_inline_and_show_on_timeline(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, rs = server
    drv = browser
    drv.get(url)
    wait_for(drv, f"return {STATUS}", what="status")
    choose_run(drv, 1)
    wait_for(drv, f"return {STATUS}.includes('45,')", what="the GPU run drawn")
    _tab(drv, "SQL")
    assert drv.execute_script("return document.getElementById('sql-schema-events') !== null")
    text = drv.find_element(By.ID, "sql-text")
    text.send_keys(Keys.CONTROL, "a")  # clear() leaves a React-held value in place
    text.send_keys(Keys.DELETE, "SELECT nope FROM events")
    drv.find_element(By.ID, "sql-run").click()
    err = wait_for(drv, "return document.getElementById('sql-error').innerText", what="inline error")
    assert "nope" in err and "Binder Error" in err, err
    assert drv.execute_script("return document.getElementById('error').innerText") == ""  # in the tab, not the page's error line
    text.send_keys(Keys.CONTROL, "a")
    text.send_keys(Keys.DELETE, SQL_ROW)
    drv.find_element(By.ID, "sql-run").click()
    wait_for(drv, "return document.querySelectorAll('#sql-grid .ag-row').length >= 5", what="result rows")
    assert drv.execute_script("return document.getElementById('sql-error').innerText") == ""
    want = rs.get(1).records(SQL_ROW)
    status = drv.execute_script(f"return {STATUS}")
    drv.find_element(By.CSS_SELECTOR, '#sql-grid .ag-row[row-id="0"] .ag-cell[col-id="c1"]').click()
    wait_for(drv, f"return document.getElementById('sql-show').innerText === 'show event {want[0]['event_id']} on timeline'",
             what="show button armed")
    drv.find_element(By.ID, "sql-show").click()
    wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="timeline at the row's event")
    name = wait_for(drv, "const e = document.getElementById('detail-name'); return e && e.innerText", what="event panel")
    assert name == want[0]["name"]
    # the drawer's close button: the selection is cleared and the drawer no longer covers the page's foot
    assert drv.execute_script(f"return {DRAWER_SHOWN}")
    drv.find_element(By.ID, "detail-close").click()
    wait_for(drv, f"return document.getElementById('detail-name') === null && !({DRAWER_SHOWN})", what="drawer closed")


def test_a_run_switch_clears_the_selection_and_the_search(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, _ = server
    drv = browser
    drv.get(url)
    wait_for(drv, f"return {STATUS}", what="status")
    box = drv.find_element(By.ID, "search")
    box.send_keys("aten::addmm")
    box.send_keys(Keys.ENTER)
    count = wait_for(drv, "const e = document.getElementById('search-count'); return e && e.innerText", what="search count")
    assert count.startswith("1 / "), count
    wait_for(drv, "const e = document.getElementById('detail-name'); return e && e.innerText === 'aten::addmm'", what="hit selected")
    assert drv.execute_script(f"return {DRAWER_SHOWN}")
    choose_run(drv, 1)
    wait_for(drv, f"return {STATUS}.includes('45,')", what="the GPU run drawn")
    wait_for(drv, "return document.getElementById('detail-name') === null && document.querySelector('.nx-detail h3').innerText === "
                  "'Nothing selected'", what="event panel cleared")
    assert drv.execute_script("return document.getElementById('search').value") == ""
    assert not drv.execute_script(f"return {DRAWER_SHOWN}")  # nothing selected: no drawer over the page
    assert drv.execute_script("return document.getElementById('search-count').innerText") == ""
