"""Issue 35 item 6 in headless Chromium: memory linked to the timeline, on the hand-built run of
tests/test_memory_range.py (four allocations of known size, lines and times). A drag on the
timeline moves the memory chart's x range; a drag on the memory chart moves the timeline's window;
a shift+drag area selection on the timeline moves the chart too; the allocations grid lists the
known allocations and the lines grid's top row is the known line; a click on an allocation opens
its operator in the event drawer. Screenshot: test-artifacts/dashboard-memory.png.
"""

from __future__ import annotations

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import dashboard_server, write_trace
from .test_browser_dashboard import ARTIFACTS, GD, GRID_COLUMN, STATUS, _browser_installed, _mouse_drag, browser, plot_box, wait_for  # noqa: F401
from .test_memory_range import EVENTS

pytestmark = pytest.mark.browser  # tier: drives chromium

MEM_GD = "document.querySelector('#memory-graph .js-plotly-plot')"
MEM_RANGE = f"(() => {{ const gd = {MEM_GD}; return gd && gd._fullLayout && gd._fullLayout.xaxis ? gd._fullLayout.xaxis.range.slice() : null; }})()"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser-memory")
    run = import_traces(write_trace(tmp / "t.json", EVENTS), tmp / "run").run_dir
    with dashboard_server([run]) as served:
        yield served


def _timeline_box(drv) -> dict:
    """plot_box once the timeline is drawn (a figure from the server re-mounts the graph)."""
    wait_for(drv, f"const gd = {GD}; return !!(gd && gd._fullLayout && gd._fullLayout.xaxis)", what="timeline drawn")
    return plot_box(drv)


def _memory_box(drv) -> dict:
    wait_for(drv, f"const gd = {MEM_GD}; return !!(gd && gd._fullLayout && gd._fullLayout.xaxis)", what="memory chart drawn")
    drv.execute_script("document.getElementById('memory-graph').scrollIntoView({block: 'center'})")
    return drv.execute_script(f"""const gd = {MEM_GD}; const r = gd.getBoundingClientRect(); const s = gd._fullLayout._size;
        const xa = gd._fullLayout.xaxis; return {{left: r.left + s.l, top: r.top + s.t, w: s.w, h: s.h, x0: xa.range[0], x1: xa.range[1]}};""")


def _follows(drv, want: tuple[float, float], what: str):
    """Wait until the memory chart's x range is `want` (ms, to 1 ns)."""
    return wait_for(drv, f"const r = {MEM_RANGE}; return r && Math.abs(r[0] - {want[0]}) < 1e-6 && Math.abs(r[1] - {want[1]}) < 1e-6 && r",
                    what=what)


def test_memory_and_timeline_follow_each_other(server, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, rs = server
    drv = browser
    drv.get(url)
    wait_for(drv, f"return {STATUS}", what="status")
    box = _timeline_box(drv)
    drv.find_element(By.XPATH, "//div[@id='tabs']//*[text()='Memory']").click()
    # the whole run: the chart over the timeline's window, the known allocations, the known top line
    _follows(drv, (box["x0"], box["x1"]), "the chart over the timeline's window")
    sizes = wait_for(drv, f"return {GRID_COLUMN}('memory-allocs', 'size')", what="allocation rows")
    assert [float(s) for s in sizes] == [0.0039, 0.002, 0.001, 0.0005]  # 4096, 2048, 1024, 512 bytes in MiB
    assert wait_for(drv, f"return {GRID_COLUMN}('memory-allocs', 'source')", what="lines") == \
        ["train.py:10", "train.py:20", "train.py:10", "train.py:20"]
    assert wait_for(drv, f"return {GRID_COLUMN}('memory-range-lines', 'key')", what="top lines")[0] == "train.py:10"
    assert "4 allocations, 7.5 KiB allocated" in drv.find_element(By.ID, "memory-head").text

    # a drag on the timeline (20% → 60% of it) moves the memory chart there
    drv.execute_script("window.scrollTo(0, 0)")
    box = _timeline_box(drv)
    status = drv.execute_script(f"return {STATUS}")
    y = box["top"] + 20
    _mouse_drag(drv, box["left"] + box["w"] * 0.2, y, box["left"] + box["w"] * 0.6, y)
    wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the timeline zoomed")
    z = _timeline_box(drv)
    assert z["x1"] - z["x0"] == pytest.approx(0.4 * (box["x1"] - box["x0"]), rel=0.05)
    _follows(drv, (z["x0"], z["x1"]), "the chart follows the timeline's zoom")

    # a drag on the memory chart (10% → 50% of it) moves the timeline there
    m = _memory_box(drv)
    status = drv.execute_script(f"return {STATUS}")
    want = (m["x0"] + 0.1 * (m["x1"] - m["x0"]), m["x0"] + 0.5 * (m["x1"] - m["x0"]))
    _mouse_drag(drv, m["left"] + m["w"] * 0.1, m["top"] + m["h"] / 2, m["left"] + m["w"] * 0.5, m["top"] + m["h"] / 2)
    wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the timeline follows the chart")
    tol = 0.01 * (want[1] - want[0])  # the drag's ends, to a pixel or so
    t = wait_for(drv, f"const gd = {GD}, r = gd && gd._fullLayout && gd._fullLayout.xaxis.range; "
                      f"return r && Math.abs(r[0] - {want[0]}) < {tol} && Math.abs(r[1] - {want[1]}) < {tol} && r.slice()",
                 what="the timeline's window is the chart's drag")
    _follows(drv, tuple(t), "the chart keeps the timeline's new window")

    # a shift+drag area selection on the timeline (no zoom) moves the chart to the selected time
    drv.execute_script("window.scrollTo(0, 0)")
    box = _timeline_box(drv)
    x0, x1, yy = box["left"] + box["w"] * 0.25, box["left"] + box["w"] * 0.75, box["top"] + 10
    ac = ActionChains(drv)
    ac.key_down(Keys.SHIFT)
    pointer, keys = ac.w3c_actions.pointer_action, ac.w3c_actions.key_action
    pointer.move_to_location(int(x0), int(yy))
    keys.pause(0)
    pointer.pointer_down()
    keys.pause(0)
    for i in range(1, 6):
        pointer.move_to_location(int(x0 + (x1 - x0) * i / 5), int(yy + 10 * i))
        keys.pause(0)
    pointer.pointer_up()
    keys.pause(0)
    ac.key_up(Keys.SHIFT).perform()
    wait_for(drv, "const b = document.getElementById('nx-area-box'); return b && b.dataset.x1", what="area selected")
    sel = drv.execute_script("const d = document.getElementById('nx-area-box').dataset; return [+d.x0, +d.x1]")
    got = wait_for(drv, f"const r = {MEM_RANGE}; return r && Math.abs(r[0] - {sel[0]}) < 1e-5 && r", what="the chart follows the area")
    assert got[1] == pytest.approx(sel[1], abs=1e-5)
    assert _timeline_box(drv)["x0"] == box["x0"]  # the timeline did not zoom

    # the whole run again (double-click on the chart), then a click on the largest allocation opens its operator
    _memory_box(drv)
    ActionChains(drv).move_to_element(drv.find_element(By.CSS_SELECTOR, "#memory-graph .nsewdrag")).double_click().perform()
    wait_for(drv, f"return {GRID_COLUMN}('memory-allocs', 'size').length === 4", what="the whole run's allocations")
    cell = drv.find_element(By.CSS_SELECTOR, "#memory-allocs .ag-center-cols-container .ag-row[row-index='0'] [col-id='operator']")
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    cell.click()
    assert wait_for(drv, "const e = document.getElementById('detail-name'); return e && e.innerText", what="event drawer") == "aten::empty"
    ARTIFACTS.mkdir(exist_ok=True)
    drv.save_screenshot(str(ARTIFACTS / "dashboard-memory.png"))
