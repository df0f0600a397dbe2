"""The timeline's navigation in headless Chromium, driven with real keys and mouse, on the
project's sample run (a CPU training step recorded with stacks): W/S zoom and A/D pan on an axis
that keeps counting ms from the run's start, a short drag zooms, a click 15% into a slice selects
it, shift+drag aggregates an area per name, a table row jumps to its heaviest instance, and the
critical-path toggle outlines the step's path. Screenshots go to test-artifacts/timeline-*.png.
"""

from __future__ import annotations

import re

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import app as dash_app
from neuron_explorer.dashboard.views import navigate

from .conftest import dashboard_server
from .test_browser_dashboard import ARTIFACTS, GD, SAMPLE, STATUS, _browser_installed, _mouse_click, _mouse_drag, browser, plot_box, wait_for  # noqa: F401

pytestmark = pytest.mark.browser  # tier: drives chromium


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with dashboard_server([import_traces(SAMPLE, tmp_path_factory.mktemp("tl") / "sample").run_dir]) as served:
        yield served


@pytest.fixture
def page(server, browser):
    """A fresh page with the timeline drawn; (driver, RunSet, plot box)."""
    url, rs = server
    browser.get(url)
    wait_for(browser, f"const gd = {GD}; return gd && gd._fullData && gd._fullData.some(t => t.meta === 'spans')", what="timeline")
    wait_for(browser, f"return {STATUS}", what="status")
    return browser, rs, plot_box(browser)


def _changed(drv, before: str, what: str) -> str:
    return wait_for(drv, f"const s = {STATUS}; return s !== {before!r} && s", what=what)


def _window_of(status: str) -> tuple[float, float]:
    """(start, length) in ms from the status line: '12.345 ms from +1.234 ms · ...'."""
    m = re.match(r"([\d,.]+) ms from \+([\d,.]+) ms", status)
    return float(m.group(2).replace(",", "")), float(m.group(1).replace(",", ""))


def test_keys_zoom_and_pan_on_an_absolute_axis(page):
    from selenium.webdriver.common.action_chains import ActionChains

    drv, rs, box = page
    _mouse_click(drv, 5, 5)  # focus the page, pointer away from the plot: W zooms at the middle
    status = drv.execute_script(f"return {STATUS}")
    ActionChains(drv).send_keys("w").perform()
    status = _changed(drv, status, "zoom in by W")
    w1 = plot_box(drv)
    mid0, mid1 = (box["x0"] + box["x1"]) / 2, (w1["x0"] + w1["x1"]) / 2
    assert w1["x1"] - w1["x0"] == pytest.approx(0.6 * (box["x1"] - box["x0"]), rel=1e-3) and mid1 == pytest.approx(mid0, rel=1e-3)
    ActionChains(drv).send_keys("d").perform()
    status = _changed(drv, status, "pan right by D")
    w2 = plot_box(drv)
    assert w2["x0"] == pytest.approx(w1["x0"] + 0.2 * (w1["x1"] - w1["x0"]), rel=1e-3)
    # the axis counts ms from the run's first event: the window's start, not 0
    start, length = _window_of(status)
    assert w2["x0"] > 1 and w2["x0"] == pytest.approx(start, abs=2e-3) and w2["x1"] - w2["x0"] == pytest.approx(length, rel=1e-3)
    ActionChains(drv).send_keys("a").perform()
    status = _changed(drv, status, "pan left by A")
    assert plot_box(drv)["x0"] == pytest.approx(w1["x0"], rel=1e-3)
    ActionChains(drv).send_keys("s").perform()
    _changed(drv, status, "zoom out by S")
    back = plot_box(drv)
    assert (back["x0"], back["x1"]) == (pytest.approx(box["x0"], abs=1e-3), pytest.approx(box["x1"], rel=1e-3))
    drv.save_screenshot(str(ARTIFACTS / "timeline-keys.png"))


def test_the_wheel_zooms_at_the_pointer(page):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin

    drv, rs, box = page
    status = drv.execute_script(f"return {STATUS}")
    px = box["left"] + box["w"] * 0.25  # a quarter in: the time under the pointer stays under it
    at = box["x0"] + 0.25 * (box["x1"] - box["x0"])
    ActionChains(drv).scroll_from_origin(ScrollOrigin.from_viewport(int(px), int(box["top"] + 30)), 0, -300).perform()
    _changed(drv, status, "zoom by the wheel")
    z = plot_box(drv)
    assert z["x1"] - z["x0"] < 0.95 * (box["x1"] - box["x0"])  # one wheel notch: about 10%
    assert z["x0"] + (int(px) - box["left"]) / z["w"] * (z["x1"] - z["x0"]) == pytest.approx(at, abs=0.01 * (box["x1"] - box["x0"]))


def test_a_short_drag_zooms_and_a_click_inside_a_slice_selects_it(page):
    drv, rs, box = page
    status = drv.execute_script(f"return {STATUS}")
    y = box["top"] + 20
    # 12 px at +2.0 ms, inside the training step's operators (the whole-run view spans +0.115 .. +3.312 ms: the shown lanes)
    _mouse_drag(drv, box["left"] + box["w"] * 0.59, y, box["left"] + box["w"] * 0.59 + 12, y)
    _changed(drv, status, "zoom by a short drag")
    z = plot_box(drv)
    assert z["x1"] - z["x0"] == pytest.approx(12 / box["w"] * (box["x1"] - box["x0"]), rel=0.15)
    # the widest operator in view, clicked 15% into it (far from its middle and its ends)
    target = drv.execute_script(f"""const gd = {GD}, b = arguments[0], px = v => (v - b.x0) / (b.x1 - b.x0) * b.w; let best = null;
        for (const t of gd._fullData) {{ if (t.name !== 'cpu_op' || t.meta !== 'spans') continue;
          // its paint trace: slice i is x[4i] .. x[4i + 2]
          const px0 = gd._fullData[t.index - 1].x, p = {{x: Array.from(px0).filter(v => v !== px0[0])}};
          for (let i = 0; i < t.x.length; i++) {{ const a = Math.max(px(p.x[4 * i]), 0), e = Math.min(px(p.x[4 * i + 2]), b.w);
            if (!best || e - a > best.w) best = {{w: e - a, x: a + 0.15 * (e - a), y: t.y[i], id: t.customdata[i],
                                                 name: String(t.text[i]).split('<br>')[0]}}; }} }}
        return best;""", z)
    assert target and target["w"] > 100, target
    yp = drv.execute_script(f"return {GD}._fullLayout.yaxis.l2p(arguments[0])", target["y"])
    _mouse_click(drv, z["left"] + target["x"], z["top"] + yp)
    assert wait_for(drv, "const e = document.getElementById('detail-name'); return e && e.innerText", what="event panel") == target["name"]
    assert wait_for(drv, f"const t = {GD}.data.find(t => t.name === 'selected'); return t && t.customdata[0]", what="outline") == target["id"]


def test_shift_drag_selects_an_area_and_aggregates_it_per_name(page):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    drv, rs, box = page
    x0, x1 = box["left"] + box["w"] * 0.2, box["left"] + box["w"] * 0.6
    y0, y1 = box["top"] + 5, box["top"] + box["h"] - 5
    ac = ActionChains(drv)
    ac.key_down(Keys.SHIFT)  # ActionChains keeps the keyboard and the pointer in step
    pointer, keys = ac.w3c_actions.pointer_action, ac.w3c_actions.key_action
    pointer.move_to_location(int(x0), int(y0))
    keys.pause(0)
    pointer.pointer_down()
    keys.pause(0)
    for i in range(1, 6):
        pointer.move_to_location(int(x0 + (x1 - x0) * i / 5), int(y0 + (y1 - y0) * i / 5))
        keys.pause(0)
    pointer.pointer_up()
    keys.pause(0)
    ac.key_up(Keys.SHIFT).perform()
    head = wait_for(drv, "const e = document.getElementById('area-head'); return e && e.innerText", what="area panel")
    sel = drv.execute_script("return Object.assign({}, document.getElementById('nx-area-box').dataset)")
    area = {k: float(v) for k, v in sel.items()}
    assert area["x1"] - area["x0"] == pytest.approx(0.4 * (box["x1"] - box["x0"]), rel=0.02)  # no zoom: the range selected
    want = dash_app.area_panel(rs, area, 0, "all", False)
    want_rows = want.children[1].rowData
    assert head == want.children[0].children and want_rows and sum(r["count"] for r in want_rows) > 10
    shown = wait_for(drv, "const r = Array.from(document.querySelectorAll('#area-table .ag-center-cols-container .ag-row'))"
                          ".sort((a, b) => a.getAttribute('row-index') - b.getAttribute('row-index'))"
                          ".map(r => [r.querySelector('[col-id=name]').innerText, r.querySelector('[col-id=count]').innerText]);"
                          " return r.length && r", what="area rows")
    assert shown == [[r["name"], str(r["count"])] for r in want_rows][:len(shown)]
    assert plot_box(drv)["x0"] == box["x0"]  # the timeline did not zoom
    drv.save_screenshot(str(ARTIFACTS / "timeline-area.png"))


def test_a_table_row_jumps_to_its_heaviest_instance(page):
    from selenium.webdriver.common.by import By

    drv, rs, box = page
    drv.find_element(By.XPATH, "//div[@id='tabs']//*[text()='Operators']").click()
    table = "operators"
    cell = wait_for(drv, "return document.querySelector('#table-operators .ag-row[row-index=\"1\"] [col-id=\"name\"]')", what="table rows")
    name = cell.text
    status = drv.execute_script(f"return {STATUS}")
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    cell.click()
    _changed(drv, status, "the timeline at the row's heaviest instance")
    j = navigate.jump(rs, run=0, table=table, name=name)
    assert wait_for(drv, f"const t = {GD}.data.find(t => t.name === 'selected'); return t && t.customdata[0]", what="outline") == j["event_id"]
    ids = wait_for(drv, f"const t = {GD}.data.find(t => t.name === 'highlighted'); return t && Array.from(new Set(t.customdata))",
                   what="instances highlighted")
    assert sorted(ids) == sorted(e["event_id"] for e in navigate.instances(rs, 0, table, j["key"], j["t0"], j["t1"]))
    assert drv.find_element(By.ID, "detail-name").text == name


def test_the_critical_path_toggle_outlines_the_step_in_view(page):
    from selenium.webdriver.common.by import By

    drv, rs, box = page
    drv.execute_script("window.scrollTo(0, 0)")
    drv.find_element(By.CSS_SELECTOR, "#critical input").click()
    rects = wait_for(drv, f"const t = {GD}.data.find(t => t.name === 'critical path'); return t && t.x.filter(v => v === null).length",
                     what="critical path outlined")
    fig, _ = dash_app.timeline_figure(rs, dash_app.view_for(rs, None, 0, "all", None, None, None), 1500, None, critical=True)
    assert rects == next(t for t in fig["data"] if t["name"] == "critical path")["x"].count(None) and rects >= 3
    _mouse_click(drv, 5, 5)
    drv.save_screenshot(str(ARTIFACTS / "timeline-critical.png"))
    drv.find_element(By.CSS_SELECTOR, "#critical input").click()
    wait_for(drv, f"return !{GD}.data.some(t => t.name === 'critical path')", what="outline removed")


def test_the_mode_bar_covers_no_step_label_and_no_slice(page):
    """Issue 35: Plotly's mode bar stood over the step labels at the top of the plot; it now stands
    upright in the right margin (figure.MODEBAR_MARGIN_PX), clear of the labels and the plot area."""
    from selenium.webdriver.common.action_chains import ActionChains

    drv, rs, box = page
    drv.execute_script("window.scrollTo(0, 0)")
    ActionChains(drv).move_to_element(drv.execute_script(f"return {GD}")).perform()  # the mode bar shows on hover
    rects = wait_for(drv, f"""const gd = {GD}; const mb = gd.querySelector('.modebar');
        if (!mb || mb.getBoundingClientRect().width === 0) return null;
        const r = e => {{ const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; }};
        const labels = Array.from(gd.querySelectorAll('.annotation')).filter(a => /^step /.test(a.textContent)).map(r);
        const s = gd._fullLayout._size, g = gd.getBoundingClientRect();
        return {{modebar: r(mb), labels: labels, plot: [g.left + s.l, g.top + s.t, g.left + s.l + s.w, g.top + s.t + s.h],
                 strip: [g.left + s.l, g.top, g.left + s.l + s.w, g.top + s.t]}};""",
                     what="mode bar shown")
    assert rects["labels"], "the sample's steps are labelled"
    # a step's label starts where the step does, anywhere over the plot: the strip above it is theirs
    assert all(lab[0] >= rects["strip"][0] - 1 and lab[3] <= rects["strip"][3] + 1 for lab in rects["labels"]), rects

    def overlap(a, b):
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
    assert not overlap(rects["modebar"], rects["plot"]) and not overlap(rects["modebar"], rects["strip"]), rects
    assert not [lab for lab in rects["labels"] if overlap(rects["modebar"], lab)], rects
    drv.save_screenshot(str(ARTIFACTS / "timeline-modebar.png"))
