"""Zoom and pan drawn in the page, the event drawer and the keyboard's focus, in headless Chromium
at 1600×1000 (issue 35, items 1-3), on the project's sample run and the 68k-event CUDA trace:

  - a W press redraws the timeline in the page with the server's answers blocked (the slices it
    holds, moved by one SVG transform of the data layers: no path recomputed) and asks the server
    once when the keys stop; the page's one real relayout comes when the answer is late;
  - a wheel step, a zoom box, a pan (the x axis dragged, ctrl+drag), a drag of an end of the x
    axis and a double-click are drawn the same way with the server blocked, and wheel steps and
    keys add up;
  - a burst of W and D with the server blocked is drawn frame by frame (nxTimeline.frames and
    draws), with Plotly's paths untouched until the keys stop; the step lines and labels move
    with the slices (on screen at their step's start under the new range);
  - after a pan, slices are painted in the part of the plot the pan uncovered before the server
    answers (the server's view holds buckets one window width either side);
  - the open drawer sits beside the timeline: the last lane is not under it, wherever it is scrolled;
  - D pressed three times quickly moves the window 0.6 of its width, and an answer for an older
    window does not move it back;
  - after a run is chosen in the dropdown, W zooms the timeline and types nothing into it;
  - the event drawer is inside the viewport after a slice click, a table-row click, a finding
    click, a search hit and a flow jump, and a jump leaves the timeline in view.
"""

from __future__ import annotations

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import queries

from .conftest import TRACES, dashboard_server
from .test_browser_dashboard import ARTIFACTS, GD, SAMPLE, STATUS, _browser_installed, _mouse_click, browser, choose_run, plot_box, wait_for  # noqa: F401

pytestmark = pytest.mark.browser  # tier: drives chromium

BLOCK = "*_dash-update-component*"
"""The URL of every server callback: blocked, the page has only what it holds."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("client")
    sample = import_traces(SAMPLE, tmp / "sample").run_dir
    gpu = import_traces(TRACES / "cuda_train_68k_events.json.gz", tmp / "gpu").run_dir
    with dashboard_server([sample, gpu]) as served:
        yield served


@pytest.fixture
def page(server, browser):
    url, rs = server
    browser.set_window_size(1600, 1000)
    inner = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(1600 + 1600 - inner[0], 1000 + 1000 - inner[1])  # a viewport of 1600×1000
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
    browser.get(url)
    wait_for(browser, f"const gd = {GD}; return gd && gd._fullData && gd._fullData.some(t => t.meta === 'spans')", what="timeline")
    wait_for(browser, f"return {STATUS}", what="status")
    wait_for(browser, "return window.nxTimeline", what="timeline_keys.js")
    assert browser.execute_script("return [window.innerWidth, window.innerHeight]") == [1600, 1000]
    yield browser, rs
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})


def _keys(drv, keys: str):
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(drv).send_keys(keys).perform()


def _painted(drv) -> list:
    """The d attribute of every painted slice path."""
    return drv.execute_script(f"return Array.from({GD}.querySelectorAll('.scatterlayer .js-fill')).map(p => p.getAttribute('d'))")


def _moved(drv) -> list:
    """[dx, scale] of each data layer's transform (None where it has none)."""
    return drv.execute_script(f"""return Array.from({GD}.querySelectorAll('.cartesianlayer .scatterlayer')).map(l => {{
        const t = l.getAttribute('transform'); if (!t) return null;
        const m = /translate\\(([-0-9.e]+),0\\) scale\\(([-0-9.e]+),1\\)/.exec(t); return [Number(m[1]), Number(m[2])]; }})""")


def _painted_at(drv, x0: float, x1: float) -> int:
    """How many of 40 points across the axis range [x0, x1], at the middle of every row of the lanes,
    lie inside a painted slice or bucket (the fill of a data path, wherever it is moved)."""
    return drv.execute_script(f"""const gd = {GD}, xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, r = gd.getBoundingClientRect();
        const fills = Array.from(gd.querySelectorAll('.cartesianlayer .subplot.xy .scatterlayer .js-fill'));
        const rows = Math.ceil(Math.max(...ya.range)); let n = 0;
        for (let y = 0; y < rows; y++) for (let i = 0; i < 40; i++) {{
          const sx = r.left + xa._offset + xa.l2p(arguments[0] + (arguments[1] - arguments[0]) * (i + 0.5) / 40), sy = r.top + ya._offset + ya.l2p(y);
          if (fills.some(p => {{ const m = p.getScreenCTM().inverse(), q = new DOMPoint(sx, sy).matrixTransform(m);
                                 return p.isPointInFill(new DOMPoint(q.x, q.y)); }})) {{ n++; }} }}
        return n;""", x0, x1)


def test_a_zoom_redraws_in_the_page_with_the_server_blocked(page):
    drv, rs = page
    _mouse_click(drv, 5, 5)  # the page has the keys; the pointer is off the plot: W zooms at the middle
    box, status, paths = plot_box(drv), drv.execute_script(f"return {STATUS}"), _painted(drv)
    asked = drv.execute_script("return nxTimeline.asked")
    relayouts = drv.execute_script("return nxTimeline.relayouts")
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": [BLOCK]})
    _keys(drv, "w")
    wait_for(drv, "return nxTimeline.frames.length > 0", what="a redrawn frame", timeout=5)
    z = plot_box(drv)
    assert z["x1"] - z["x0"] == pytest.approx(0.6 * (box["x1"] - box["x0"]), rel=1e-6)
    assert (z["x0"] + z["x1"]) / 2 == pytest.approx((box["x0"] + box["x1"]) / 2, rel=1e-6)
    # the frame moved the slices Plotly drew (scale 1/0.6 about the middle), it recomputed no path
    assert _painted(drv) == paths
    assert _moved(drv) == [pytest.approx([box["w"] * -(1 / 0.6 - 1) / 2, 1 / 0.6], rel=1e-6)] * len(_moved(drv)) and _moved(drv)
    # the window went to the server once, after the key: its answer never came (blocked)
    wait_for(drv, f"return nxTimeline.asked === {asked + 1}", what="one request for the new window", timeout=5)
    assert drv.execute_script(f"return {STATUS}") == status
    # the answer is late: the page redraws the window itself, once (paths recomputed, no transform left)
    wait_for(drv, f"return nxTimeline.relayouts === {relayouts + 1}", what="the page's own relayout", timeout=10)
    now = _painted(drv)
    assert len(now) == len(paths) and now != paths and all(now) and not any(_moved(drv))
    assert plot_box(drv)["x0"] == pytest.approx(z["x0"], rel=1e-9) and plot_box(drv)["x1"] == pytest.approx(z["x1"], rel=1e-9)
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
    _keys(drv, "d")  # the server answers this one
    status = wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the server's answer")
    d = plot_box(drv)
    assert d["x0"] == pytest.approx(z["x0"] + 0.2 * (z["x1"] - z["x0"]), rel=1e-6)
    assert float(status.split(" ms from +")[1].split(" ms")[0].replace(",", "")) == pytest.approx(d["x0"], abs=2e-3)


def test_a_single_key_asks_for_its_window_without_waiting_for_the_burst_to_end(page):
    """Issue 35: the first step of a burst of keys goes to the server as soon as its frame is drawn: a single W
    does not wait SETTLE_MS (here made endless) for its detail; the burst's later steps are asked when it ends."""
    drv, rs = page
    _mouse_click(drv, 5, 5)
    status = drv.execute_script(f"return {STATUS}")
    asked = drv.execute_script("nxTimeline.settleMs = 1e9; return nxTimeline.asked")
    _keys(drv, "w")
    status = wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the server's answer for the key", timeout=30)
    assert drv.execute_script("return nxTimeline.asked") == asked + 1
    z = plot_box(drv)
    # the answer is for the key's window (the status line says where it starts, ms from the run's start)
    assert float(status.split(" ms from +")[1].split(" ms")[0].replace(",", "")) == pytest.approx(z["x0"], abs=2e-3)
    drv.execute_script("nxTimeline.settleMs = 100")


def test_a_burst_of_keys_with_the_server_blocked_is_drawn_frame_by_frame(page):
    drv, rs = page
    _mouse_click(drv, 5, 5)
    box, paths = plot_box(drv), _painted(drv)
    frames, relayouts = drv.execute_script("return [nxTimeline.frames.length, nxTimeline.relayouts]")
    drv.execute_script("nxTimeline.redrawMs = 1e9")  # no late-answer redraw: what is on screen is the frames' work alone
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": [BLOCK]})
    for k in "wdwd":  # one key per frame or so, as a person holding keys
        _keys(drv, k)
    w = box["x1"] - box["x0"]
    a, b = box["x0"], box["x1"]
    for k in "wdwd":  # each key from the last one's window
        if k == "w":
            c = (a + b) / 2
            a, b = c - (c - a) * 0.6, c + (b - c) * 0.6
        else:
            a, b = a + (b - a) * 0.2, b + (b - a) * 0.2
    wait_for(drv, f"const r = {GD}._fullLayout.xaxis.range; return Math.abs(r[0] - {a}) < 1e-9 * {w} && Math.abs(r[1] - {b}) < 1e-9 * {w}",
             what="the burst's window drawn", timeout=5)
    wait_for(drv, "return nxTimeline.frames.length === nxTimeline.draws.length", what="the last frame", timeout=5)
    got = drv.execute_script("return [nxTimeline.frames.slice(arguments[0]), nxTimeline.draws.slice(arguments[0]), nxTimeline.relayouts]", frames)
    assert got[0] and len(got[0]) == len(got[1]) <= 4 and all(f > 0 for f in got[0]), got  # input → frame, ms, of each drawn step
    assert got[2] == relayouts and _painted(drv) == paths  # no Plotly redraw while keys come: the slices were moved
    assert _moved(drv)[0] == [pytest.approx((box["x0"] - a) / (b - a) * box["w"], rel=1e-6), pytest.approx(w / (b - a), rel=1e-6)]
    # the tick labels are the page's own while the slices are moved, and name the window's values
    ticks = drv.execute_script(f"return Array.from({GD}.querySelectorAll('.nx-ticks text')).map(t => t.textContent)")
    assert ticks and all(t.endswith(" ms") for t in ticks)
    values = [float(t[:-3].replace(",", "")) for t in ticks]
    assert a <= min(values) and max(values) <= b and len(values) >= 3


def test_step_lines_and_labels_move_with_the_slices_while_keys_come(page):
    """During a held burst of keys (the server's answers blocked), the step boundary lines and the
    step labels are on screen at the x of their step's start under the new range, not hidden."""
    drv, rs = page
    _mouse_click(drv, 5, 5)
    steps = drv.execute_script(f"return {GD}._fullLayout.shapes.filter(s => s.xref === 'x' && s.x0 === s.x1).map(s => s.x0)")
    assert len(steps) >= 2, steps  # the sample run's steps
    box = plot_box(drv)
    drv.execute_script("nxTimeline.redrawMs = 1e9")  # what is on screen is the frames' work alone
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": [BLOCK]})
    _keys(drv, "wd")
    a, b = box["x0"], box["x1"]
    c = (a + b) / 2
    a, b = c - (c - a) * 0.6, c + (b - c) * 0.6
    a, b = a + (b - a) * 0.2, b + (b - a) * 0.2
    w = box["x1"] - box["x0"]
    wait_for(drv, f"const r = {GD}._fullLayout.xaxis.range; return Math.abs(r[0] - {a}) < 1e-9 * {w} && Math.abs(r[1] - {b}) < 1e-9 * {w}",
             what="the burst's window drawn", timeout=5)
    wait_for(drv, "return nxTimeline.frames.length === nxTimeline.draws.length", what="the last frame", timeout=5)
    assert drv.execute_script(f"return {GD}.classList.contains('nx-moving')")  # still moved: no Plotly redraw came
    got = drv.execute_script(f"""const gd = {GD}, xa = gd._fullLayout.xaxis, r = gd.getBoundingClientRect();
        const at = v => r.left + xa._offset + (v - arguments[0]) / (arguments[1] - arguments[0]) * xa._length;
        const lines = Array.from(gd.querySelectorAll('.shapelayer path[data-index]')).map(p => {{
          const sh = gd._fullLayout.shapes[+p.getAttribute('data-index')], q = p.getBoundingClientRect();
          return [sh.x0, q.left + q.width / 2, getComputedStyle(p).visibility, at(sh.x0)]; }});
        const labels = Array.from(gd.querySelectorAll('.infolayer g.annotation[data-index]')).map(g => {{
          const an = gd._fullLayout.annotations[+g.getAttribute('data-index')], q = g.querySelector('text').getBoundingClientRect();
          return [an.text, q.left, getComputedStyle(g).visibility, at(an.x)]; }}).filter(x => String(x[0]).startsWith('step '));
        return [lines, labels, r.left + xa._offset, r.left + xa._offset + xa._length];""", a, b)
    lines, labels, left, right = got
    shown = [x for x in lines if x[2] == "visible"]
    assert shown, lines
    for x0, screen_x, vis, want in lines:
        if left <= want <= right:
            assert vis == "visible" and screen_x == pytest.approx(want, abs=1.0), (x0, screen_x, want)
        else:
            assert vis == "hidden", (x0, want, left, right)
    assert [x for x in labels if x[2] == "visible"], labels
    for text, screen_x, vis, want in labels:
        if vis == "visible":
            assert want - 1 <= screen_x <= want + 6, (text, screen_x, want)  # the label starts at its step's line (xanchor left)
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})


def _wheel_seen(drv):
    """Records the wheel events the page gets (before its own handlers: a listener on the window)."""
    drv.execute_script("window.__wheels = []; if (!window.__wheelSpy) { window.__wheelSpy = true; "
                       "window.addEventListener('wheel', e => window.__wheels.push([e.deltaY, e.deltaMode, e.clientX]), true); }")


def _wheel(drv, x: float, y: float, dy: int):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin

    ActionChains(drv).scroll_from_origin(ScrollOrigin.from_viewport(int(x), int(y)), 0, dy).perform()


def _wheel_step(a: float, b: float, frac: float, delta_y: float) -> tuple[float, float]:
    """The window after one wheel step at `frac` of the axis: Plotly's own step, exp(deltaY / 200)
    with deltaY clamped to ±20 (10% a notch)."""
    import math

    f = math.exp(max(-20.0, min(20.0, delta_y)) / 200)
    c = a + frac * (b - a)
    return c - (c - a) * f, c + (b - c) * f


def _range(drv) -> list:
    return drv.execute_script(f"return {GD}._fullLayout.xaxis.range.slice()")


def test_a_wheel_step_redraws_at_the_pointer_with_the_server_blocked(page):
    """Issue 35: a wheel step over the plot is drawn by the page in the next frame (the slices Plotly
    drew, moved: no path recomputed, no Plotly relayout), zoomed at the pointer; a second step and a
    W key add up with it; the burst's last window goes to the server once they stop."""
    drv, rs = page
    _mouse_click(drv, 5, 5)
    box, paths = plot_box(drv), _painted(drv)
    relayouts, asked, frames = drv.execute_script("return [nxTimeline.relayouts, nxTimeline.asked, nxTimeline.frames.length]")
    drv.execute_script("nxTimeline.redrawMs = 1e9")  # what is on screen is the frames' work alone
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": [BLOCK]})
    _wheel_seen(drv)
    x = box["left"] + box["w"] / 4
    _wheel(drv, x, box["top"] + 30, -100)
    _wheel(drv, x, box["top"] + 30, -100)
    wheels = wait_for(drv, "return window.__wheels.length === 2 && window.__wheels", what="two wheel events", timeout=5)
    frac = (wheels[0][2] - box["left"]) / box["w"]
    a, b = box["x0"], box["x1"]
    for dy, mode, _ in wheels:
        assert mode == 0
        a, b = _wheel_step(a, b, frac, dy)
    assert b - a < 0.95 * (box["x1"] - box["x0"])  # zoomed in
    w = box["x1"] - box["x0"]
    wait_for(drv, f"const r = {GD}._fullLayout.xaxis.range; return Math.abs(r[0] - {a}) < 1e-9 * {w} && Math.abs(r[1] - {b}) < 1e-9 * {w}",
             what="the wheel's window drawn", timeout=5)
    # the value under the pointer stayed under it
    assert a + frac * (b - a) == pytest.approx(box["x0"] + frac * w, rel=1e-9)
    assert drv.execute_script("return nxTimeline.frames.length") > frames
    assert _painted(drv) == paths and _moved(drv) and drv.execute_script("return nxTimeline.relayouts") == relayouts
    assert _moved(drv)[0] == [pytest.approx((box["x0"] - a) / (b - a) * box["w"], rel=1e-6), pytest.approx(w / (b - a), rel=1e-6)]
    # a W key with the pointer there (at the pointer) goes on from the wheel's window
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    ab = ActionBuilder(drv)
    ab.pointer_action.move_to_location(int(wheels[0][2]), int(box["top"] + 30))
    ab.perform()
    _keys(drv, "w")
    c = a + frac * (b - a)
    a, b = c - (c - a) * 0.6, c + (b - c) * 0.6
    wait_for(drv, f"const r = {GD}._fullLayout.xaxis.range; return Math.abs(r[0] - {a}) < 1e-9 * {w} && Math.abs(r[1] - {b}) < 1e-9 * {w}",
             what="the W after the wheel", timeout=5)
    wait_for(drv, f"const r = nxTimeline.lastAsked(); return r && Math.abs(r[0] - {a}) < 1e-9 * {w} && Math.abs(r[1] - {b}) < 1e-9 * {w}",
             what="the burst's last window asked", timeout=5)
    assert drv.execute_script("return nxTimeline.asked") > asked
    assert drv.execute_script("return nxTimeline.relayouts") == relayouts and _painted(drv) == paths
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})


def test_the_wheel_on_a_moved_plot_zooms_from_the_window_on_screen(page):
    """A wheel step while the keys' transform is on goes on from the window the keys chose, still
    drawn by the page (no relayout)."""
    drv, rs = page
    _mouse_click(drv, 5, 5)
    relayouts = drv.execute_script("return nxTimeline.relayouts")
    drv.execute_script("nxTimeline.redrawMs = 1e9")
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": [BLOCK]})
    _keys(drv, "d")
    wait_for(drv, f"return {GD}.classList.contains('nx-moving')", what="the pan drawn by a transform", timeout=5)
    z = plot_box(drv)
    cx = drv.execute_script(f"""const gd = {GD}, el = gd.querySelector('.nsewdrag'), b = el.getBoundingClientRect();
        const cx = Math.round(b.left + b.width / 2);
        el.dispatchEvent(new WheelEvent('wheel', {{deltaY: -200, clientX: cx, clientY: b.top + 10, bubbles: true, cancelable: true}}));
        return cx;""")
    a, b = _wheel_step(z["x0"], z["x1"], (cx - z["left"]) / z["w"], -200)
    w = wait_for(drv, f"const r = {GD}._fullLayout.xaxis.range; return r[1] - r[0] < {0.99 * (z['x1'] - z['x0'])} && r", what="the wheel's zoom")
    assert w == [pytest.approx(a, rel=1e-9), pytest.approx(b, rel=1e-9)]
    assert z["x0"] < w[0] < w[1] < z["x1"]  # inside the panned window: the wheel zoomed from it
    assert drv.execute_script("return nxTimeline.relayouts") == relayouts and _moved(drv)
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})


def _drag(drv, points: list, ctrl: bool = False):
    """A press at the first point, moves through the others, a release at the last (real input)."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.keys import Keys

    ab = ActionBuilder(drv)
    if ctrl:
        ab.key_action.key_down(Keys.CONTROL)
        ab.pointer_action.pause(0)
    ab.pointer_action.move_to_location(int(points[0][0]), int(points[0][1])).pointer_down()
    for x, y in points[1:]:
        ab.pointer_action.move_to_location(int(x), int(y))
    ab.pointer_action.pointer_up()
    if ctrl:
        ab.key_action.pause(0).key_up(Keys.CONTROL)
    ab.perform()


def test_a_drag_zoom_box_redraws_the_box_window_with_the_server_blocked(page):
    """Issue 35: the end of a zoom box is drawn by the page (the slices Plotly drew, moved; no
    relayout, no click: nothing selected), then the server's detail of that window comes."""
    drv, rs = page
    _mouse_click(drv, 5, 5)
    box, paths, status = plot_box(drv), _painted(drv), drv.execute_script(f"return {STATUS}")
    relayouts = drv.execute_script("return nxTimeline.relayouts")
    drv.execute_script("nxTimeline.redrawMs = 1e9")
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": [BLOCK]})
    y, xa, xb = box["top"] + 20, box["left"] + 0.25 * box["w"], box["left"] + 0.6 * box["w"]
    _drag(drv, [(xa, y), (xa + 30, y + 4), (xb - 40, y + 6), (xb, y + 6)])
    w = box["x1"] - box["x0"]
    a, b = box["x0"] + (int(xa) - box["left"]) / box["w"] * w, box["x0"] + (int(xb) - box["left"]) / box["w"] * w
    wait_for(drv, f"const r = {GD}._fullLayout.xaxis.range; return Math.abs(r[0] - {a}) < 1e-9 * {w} && Math.abs(r[1] - {b}) < 1e-9 * {w}",
             what="the box's window drawn", timeout=5)
    assert _painted(drv) == paths and _moved(drv) and drv.execute_script("return nxTimeline.relayouts") == relayouts
    # no box left on screen, Plotly's or the page's; the drag selected nothing
    assert drv.execute_script(f"return {GD}.querySelectorAll('.zoombox, .zoombox-corners').length + "
                              "document.querySelectorAll('#nx-zoom-box, .dragcover').length") == 0
    assert not drv.execute_script("return document.querySelector('.nx-detail.nx-open')")
    assert drv.execute_script(f"return {STATUS}") == status
    # a click in the moved plot still picks the slice under the pointer (the axis's scale follows)
    spot = drv.execute_script(f"""const gd = {GD}, xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis; let best = null;
        for (const t of gd._fullData) {{ if (t.meta !== 'spans' || t.name !== 'cpu_op') continue;
          for (let i = 0; i < t.x.length; i++) {{ const px = xa.l2p(t.x[i]);
            if (px > 40 && px < xa._length - 40 && (!best || t.y[i] < best.y))
              best = {{x: px, y: t.y[i], name: String(t.text[i]).split('<br>')[0]}}; }} }}
        return best && [best.x, ya.l2p(best.y), best.name];""")
    assert spot, "a cpu_op slice in the box's window"
    drv.execute_script(f"window.__clicked = null; {GD}.on('plotly_click', e => {{ window.__clicked = String(e.points[0].text).split('<br>')[0]; }})")
    _mouse_click(drv, box["left"] + spot[0], box["top"] + spot[1])
    assert wait_for(drv, "return window.__clicked", what="the click's point", timeout=5) == spot[2]
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
    # the server's detail, from the box's window on (its own request was blocked)
    status = drv.execute_script(f"return {STATUS}")
    _keys(drv, "d")
    a, b = a + 0.2 * (b - a), b + 0.2 * (b - a)
    status = wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the server's answer")
    assert float(status.split(" ms from +")[1].split(" ms")[0].replace(",", "")) == pytest.approx(a, abs=2e-3)


def _zoomed_then_blocked(drv, keys: str):
    """`keys` pressed and the server's answer drawn (a window inside the run), then the server's answers blocked and
    the page's own late redraw put off: (the plot's box, its painted paths, the page's relayouts so far)."""
    _mouse_click(drv, 5, 5)
    status = drv.execute_script(f"return {STATUS}")
    _keys(drv, keys)
    wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the server's answer for the zoom")
    wait_for(drv, f"return !{GD}.classList.contains('nx-moving')", what="the answer drawn")
    box, paths = plot_box(drv), _painted(drv)
    relayouts = drv.execute_script("return nxTimeline.relayouts")
    drv.execute_script("nxTimeline.redrawMs = 1e9")
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": [BLOCK]})
    return box, paths, relayouts


def test_a_drag_pan_and_a_double_click_are_drawn_with_the_server_blocked(page):
    """Issue 35: a drag of the x axis's middle and a ctrl+drag on the plot pan the window in the page
    (no relayout), and a double-click shows the whole run, all with the server's answers blocked."""
    drv, rs = page
    box, paths, relayouts = _zoomed_then_blocked(drv, "ww")
    whole = drv.execute_script(f"return {GD}.layout.meta.whole")
    assert whole[0] < box["x0"] < box["x1"] < whole[1]
    w = box["x1"] - box["x0"]
    # the x axis's middle, dragged 150 px left: the window moves 150 px right
    ax_y = box["top"] + box["h"] + 8
    x = box["left"] + box["w"] / 2
    _drag(drv, [(x, ax_y), (x - 50, ax_y), (x - 150, ax_y)])
    a, b = box["x0"] + 150 / box["w"] * w, box["x1"] + 150 / box["w"] * w
    wait_for(drv, f"const r = {GD}._fullLayout.xaxis.range; return Math.abs(r[0] - {a}) < 1e-9 * {w} && Math.abs(r[1] - {b}) < 1e-9 * {w}",
             what="the axis drag's pan drawn", timeout=5)
    # ctrl+drag on the plot, 100 px right: 100 px back
    y = box["top"] + 20
    _drag(drv, [(x, y), (x + 40, y), (x + 100, y)], ctrl=True)
    a, b = a - 100 / box["w"] * w, b - 100 / box["w"] * w
    wait_for(drv, f"const r = {GD}._fullLayout.xaxis.range; return Math.abs(r[0] - {a}) < 1e-9 * {w} && Math.abs(r[1] - {b}) < 1e-9 * {w}",
             what="the ctrl+drag's pan drawn", timeout=5)
    assert _painted(drv) == paths and _moved(drv) and drv.execute_script("return nxTimeline.relayouts") == relayouts
    # a double-click: the whole run (the figure's meta), drawn in the page
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    ab = ActionBuilder(drv)
    ab.pointer_action.move_to_location(int(box["left"] + box["w"] - 10), int(box["top"] + box["h"] - 3))
    ab.perform()
    ActionChains(drv).double_click().perform()
    wait_for(drv, f"const r = {GD}._fullLayout.xaxis.range; return Math.abs(r[0] - {whole[0]}) < 1e-9 * {whole[1] - whole[0]} && "
                  f"Math.abs(r[1] - {whole[1]}) < 1e-9 * {whole[1] - whole[0]}", what="the whole run drawn", timeout=5)
    assert _painted(drv) == paths and drv.execute_script("return nxTimeline.relayouts") == relayouts
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})


def _d_zoom(f: float) -> float:
    """Plotly's law for a dragged axis end (dragbox.js dZoom), the one the page follows."""
    return 1 - (min(f, 0.9) if f >= 0 else 1 / (1 / max(f, -0.3) + 3.222))


def test_a_drag_of_an_end_of_the_x_axis_stretches_the_window_in_the_page(page):
    """Issue 35: an end of the x axis dragged moves that end of the window, the other end staying, by Plotly's own law
    for it, drawn by the page with the server blocked (no relayout, no path recomputed); the server's detail of
    that window comes once the server answers again."""
    drv, rs = page
    box, paths, relayouts = _zoomed_then_blocked(drv, "w")
    w = box["x1"] - box["x0"]
    ends = drv.execute_script(f"""return ['.wdrag', '.edrag'].map(c => {{ const b = {GD}.querySelector(c).getBoundingClientRect();
        return [b.left + b.width / 2, b.top + b.height / 2]; }});""")
    (wx, wy), (ex, ey) = ends
    assert wx < box["left"] + box["w"] / 2 < ex  # Plotly's two end handles of the x axis
    # the right end, grabbed and moved 120 px to the left: what was at the end is 120 px in, so the window's end goes
    # out (a zoom out), its start stays
    _drag(drv, [(ex, ey), (ex - 40, ey), (ex - 120, ey)])
    a, b = box["x0"], box["x0"] + w / _d_zoom(120 / box["w"])
    assert b > box["x1"]
    wait_for(drv, f"const r = {GD}._fullLayout.xaxis.range; return Math.abs(r[0] - {a}) < 1e-9 * {w} && Math.abs(r[1] - {b}) < 1e-9 * {w}",
             what="the right end's stretch drawn", timeout=5)
    # then the left end, moved 60 px further left: what was at the start is now left of the plot, so the start comes
    # in (a zoom in), the end stays
    w2 = b - a
    _drag(drv, [(wx, wy), (wx - 20, wy), (wx - 60, wy)])
    a = b + (a - b) / _d_zoom(-60 / box["w"])
    wait_for(drv, f"const r = {GD}._fullLayout.xaxis.range; return Math.abs(r[0] - {a}) < 1e-9 * {w2} && Math.abs(r[1] - {b}) < 1e-9 * {w2}",
             what="the left end's stretch drawn", timeout=5)
    assert box["x0"] < a < b
    assert _painted(drv) == paths and _moved(drv) and drv.execute_script("return nxTimeline.relayouts") == relayouts
    assert drv.execute_script(f"return {GD}.querySelectorAll('.zoombox, .zoombox-corners').length + "
                              "document.querySelectorAll('.dragcover').length") == 0  # Plotly's drag ended, nothing left over
    status = drv.execute_script(f"return {STATUS}")
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
    _keys(drv, "d")  # its own request was blocked: the next step's window comes from the server, from the stretched one on
    a, b = a + 0.2 * (b - a), b + 0.2 * (b - a)
    status = wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the server's answer")
    assert float(status.split(" ms from +")[1].split(" ms")[0].replace(",", "")) == pytest.approx(a, abs=2e-3)


def test_a_pan_shows_slices_at_once_in_the_part_it_uncovers(page):
    drv, rs = page
    _mouse_click(drv, 5, 5)
    status = drv.execute_script(f"return {STATUS}")
    _keys(drv, "ww")  # a window inside the run: there are events either side of it
    status = wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the server's answer for the zoom")
    wait_for(drv, f"return !{GD}.classList.contains('nx-moving')", what="the answer drawn")
    box = plot_box(drv)
    w = box["x1"] - box["x0"]
    # the server sent buckets beyond the window on both sides (one window width each)
    xs = drv.execute_script(f"""return {GD}._fullData.filter(t => t.meta === 'spans').flatMap(t => Array.from(t.x));""")
    assert any(box["x1"] < x < box["x1"] + w for x in xs) and any(box["x0"] - w < x < box["x0"] for x in xs)
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": [BLOCK]})
    for k, lo, hi in (("d", box["x1"], box["x1"] + 0.2 * w), ("aa", box["x0"] - 0.2 * w, box["x0"])):
        _keys(drv, k)
        wait_for(drv, f"return Math.abs({GD}._fullLayout.xaxis.range[0] - {lo if k == 'aa' else box['x0'] + 0.2 * w}) < 1e-9 * {w}",
                 what=f"the pan {k} drawn", timeout=5)
        assert drv.execute_script(f"return {STATUS}") == status  # the server has not answered
        assert _painted_at(drv, lo, hi) > 0, k  # the uncovered part shows slices now


def test_the_open_drawer_covers_no_lane_of_the_timeline(page):
    drv, rs = page
    box = plot_box(drv)
    target = drv.execute_script(f"""const gd = {GD}; const t = gd._fullData.find(t => t.meta === 'spans' && t.x.length);
        return [gd._fullLayout.xaxis.l2p(t.x[0]), gd._fullLayout.yaxis.l2p(t.y[0])];""")
    _mouse_click(drv, box["left"] + target[0], box["top"] + target[1])
    wait_for(drv, "return document.querySelector('.nx-detail.nx-open') && document.getElementById('detail-name')", what="the drawer")
    wait_for(drv, f"""const gd = {GD}; return gd.getBoundingClientRect().left + gd._fullLayout.width
                                     <= document.querySelector('.nx-detail').getBoundingClientRect().left""",
             what="the timeline redrawn narrower, beside the drawer")

    def last_lane():  # the last lane's box (its rows, the plot's width), and the drawer's, in the viewport
        return drv.execute_script(f"""const gd = {GD}, ya = gd._fullLayout.yaxis, s = gd._fullLayout._size, r = gd.getBoundingClientRect();
            const y = Math.ceil(Math.max(...ya.range)) - 1, d = document.querySelector('.nx-detail').getBoundingClientRect();
            return {{lane: [r.left + s.l, r.top + ya._offset + ya.l2p(y) - 7, r.left + s.l + s.w, r.top + ya._offset + ya.l2p(y) + 7],
                     drawer: [d.left, d.top, d.right, d.bottom], w: innerWidth, h: innerHeight}};""")

    def covered(b):
        (l0, t0, r0, b0), (l1, t1, r1, b1) = b["lane"], b["drawer"]
        return l0 < r1 and l1 < r0 and t0 < b1 and t1 < b0

    at = last_lane()
    assert not covered(at), at
    assert 0 <= at["drawer"][0] < at["drawer"][2] <= at["w"] and 0 <= at["drawer"][1] < at["drawer"][3] <= at["h"], at
    # the last lane at the foot of the window (moved there by room above the timeline): still in the open, and the
    # drawer still on screen
    drv.execute_script("document.getElementById('explore-view').style.paddingTop = arguments[0] + 'px'", at["h"] - 4 - at["lane"][3])
    foot = last_lane()
    assert foot["lane"][3] <= foot["h"] and foot["lane"][1] >= foot["h"] - 40, foot
    assert not covered(foot), foot
    assert 0 <= foot["drawer"][1] < foot["drawer"][3] <= foot["h"], foot
    drv.execute_script("document.getElementById('explore-view').style.paddingTop = ''")


def test_three_quick_presses_of_d_move_the_window_by_0_6_of_its_width(page):
    drv, rs = page
    _mouse_click(drv, 5, 5)
    box, status = plot_box(drv), drv.execute_script(f"return {STATUS}")
    w = box["x1"] - box["x0"]
    asked = drv.execute_script("return nxTimeline.asked")
    _keys(drv, "ddd")
    status = wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the server's answer")
    z = plot_box(drv)
    assert z["x0"] == pytest.approx(box["x0"] + 0.6 * w, rel=1e-6) and z["x1"] == pytest.approx(box["x1"] + 0.6 * w, rel=1e-6)
    # the answer is for that window: the status line says where it starts (ms from the run's start)
    start = float(status.split(" ms from +")[1].split(" ms")[0].replace(",", ""))
    assert start == pytest.approx(z["x0"], abs=2e-3)
    assert drv.execute_script("return nxTimeline.asked") - asked <= 3
    # an answer for an older window, arriving after the person moved on, is drawn in their window
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": [BLOCK]})
    _keys(drv, "a")
    wait_for(drv, f"return Math.abs({GD}._fullLayout.xaxis.range[0] - {z['x0'] - 0.2 * w}) < 1e-9", what="pan left drawn", timeout=5)
    wait_for(drv, "return !nxTimeline.settling()", what="the keys' burst over", timeout=5)
    stale = drv.execute_script(f"""const gd = {GD}; const fig = {{data: gd.data, layout: Object.assign({{}}, gd.layout,
        {{meta: {{zoom: true}}, xaxis: Object.assign({{}}, gd.layout.xaxis, {{range: [{z['x0']}, {z['x1']}]}})}})}};
        return [nxTimeline.accept(fig).layout.xaxis.range, nxTimeline.accept(Object.assign({{}}, fig,
                {{layout: Object.assign({{}}, fig.layout, {{meta: {{zoom: false}}}})}})).layout.xaxis.range];""")
    assert stale[0] == [pytest.approx(z["x0"] - 0.2 * w, rel=1e-9), pytest.approx(z["x1"] - 0.2 * w, rel=1e-9)]
    assert stale[1] == [pytest.approx(z["x0"]), pytest.approx(z["x1"])]  # a jump (not a zoom) wins
    # while keys are still coming, an answer for a zoom is not drawn at all (a later window will be asked)
    drv.execute_script("nxTimeline.settleMs = 1e9")
    _keys(drv, "d")
    assert drv.execute_script(f"""const gd = {GD}; return nxTimeline.settling() && nxTimeline.accept({{data: gd.data,
        layout: Object.assign({{}}, gd.layout, {{meta: {{zoom: true}}}})}}) === window.dash_clientside.no_update""")


def test_keys_after_a_dropdown_choice_zoom_the_timeline_and_type_nothing(page):

    drv, rs = page
    status = drv.execute_script(f"return {STATUS}")
    choose_run(drv, 1)
    status = wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the GPU run drawn")
    box = plot_box(drv)
    _keys(drv, "w")
    wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="zoom in by W")
    z = plot_box(drv)
    assert z["x1"] - z["x0"] == pytest.approx(0.6 * (box["x1"] - box["x0"]), rel=1e-6)
    typed = drv.execute_script("return Array.from(document.querySelectorAll('#run-select input, #rank-select input')).map(i => i.value)")
    assert all(v == "" for v in typed), typed
    assert not drv.execute_script("return document.querySelector('.dash-dropdown-content')")  # no menu open
    assert drv.execute_script("return document.querySelector('#run-select').innerText").startswith("1: ")
    # over the timeline, the arrows act on it too (elsewhere they scroll the page)
    status = drv.execute_script(f"return {STATUS}")
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.keys import Keys

    ab = ActionBuilder(drv)
    ab.pointer_action.move_to_location(int(z["left"] + z["w"] / 2), int(z["top"] + 10))
    ab.perform()
    _keys(drv, Keys.ARROW_RIGHT)
    wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="pan right by the arrow")
    assert plot_box(drv)["x0"] == pytest.approx(z["x0"] + 0.2 * (z["x1"] - z["x0"]), rel=1e-6)
    assert drv.execute_script("return window.scrollY") == 0


def test_an_autosize_right_after_a_key_does_not_lose_its_window(page):
    """Plotly sends an autosize relayout when the page's width changes (a scroll bar that comes as a
    panel fills in); one that comes just after the keys asked for their window must not replace it:
    the server draws the window the keys chose."""
    drv, rs = page
    _mouse_click(drv, 5, 5)
    box, status = plot_box(drv), drv.execute_script(f"return {STATUS}")
    drv.execute_script(f"""const gd = {GD}, sp = window.dash_clientside.set_props;
        window.dash_clientside.set_props = function (id) {{ const r = sp.apply(this, arguments);
          if (id === 'zoom-req') gd.emit('plotly_relayout', {{autosize: true}}); return r; }};""")
    _keys(drv, "w")
    status = wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the server's answer for the W window")
    z = plot_box(drv)
    assert z["x1"] - z["x0"] == pytest.approx(0.6 * (box["x1"] - box["x0"]), rel=1e-6)
    span = float(status.split(" ms from +")[0].replace(",", ""))
    start = float(status.split(" ms from +")[1].split(" ms")[0].replace(",", ""))
    assert start == pytest.approx(max(z["x0"], 0), abs=2e-3) and span == pytest.approx(z["x1"] - z["x0"], abs=2e-3)


def _drawer_in_view(drv, name: str, what: str):
    """The event drawer names `name`, and it and the timeline's plot are on screen."""
    wait_for(drv, f"const e = document.getElementById('detail-name'); return e && e.innerText === {name!r}", what=what)
    r = drv.execute_script("""const d = document.querySelector('.nx-detail').getBoundingClientRect();
        const t = document.getElementById('timeline').getBoundingClientRect();
        return {d: [d.left, d.top, d.right, d.bottom], t: [t.top, t.bottom, t.right], w: innerWidth, h: innerHeight};""")
    left, top, right, bottom = r["d"]
    assert 0 <= left < right <= r["w"] and 0 <= top < bottom <= r["h"], (what, r)
    assert 0 <= r["t"][0] < r["h"] and r["t"][2] <= left, (what, r)  # the timeline's top is in view, beside the drawer


def test_the_event_drawer_is_in_view_after_each_kind_of_selection(page):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    drv, rs = page
    # a slice click
    box = plot_box(drv)
    target = drv.execute_script(f"""const gd = {GD}, b = arguments[0], px = v => (v - b.x0) / (b.x1 - b.x0) * b.w; let best = null;
        for (const t of gd._fullData) {{ if (t.meta !== 'spans' || t.name !== 'cpu_op') continue;
          for (let i = 0; i < t.x.length; i++) {{ const x = px(t.x[i]);
            if (x > 20 && x < b.w - 20 && (!best || t.y[i] < best.y)) best = {{x, y: t.y[i], name: String(t.text[i]).split('<br>')[0]}}; }} }}
        return best;""", box)
    yp = drv.execute_script(f"return {GD}._fullLayout.yaxis.l2p(arguments[0])", target["y"])
    _mouse_click(drv, box["left"] + target["x"], box["top"] + yp)
    _drawer_in_view(drv, target["name"], "slice click")
    # a table row, far down the page
    drv.find_element(By.XPATH, "//div[@id='tabs']//*[text()='Operators']").click()
    cell = wait_for(drv, "return document.querySelector('#table-operators .ag-row[row-index=\"1\"] [col-id=\"name\"]')", what="table rows")
    name = cell.text
    # the row scrolled to the middle of the window, the timeline out of view (room below the page to scroll so far)
    drv.execute_script("document.body.style.paddingBottom = '2000px'; window.scrollTo(0, 0); arguments[0].scrollIntoView({block: 'start'})", cell)
    assert drv.execute_script("return document.getElementById('timeline').getBoundingClientRect().bottom") < 0 or \
        drv.execute_script("return document.getElementById('timeline').getBoundingClientRect().top") < 0
    cell.click()
    _drawer_in_view(drv, name, "table row")
    # a finding
    drv.find_element(By.XPATH, "//div[@id='tabs']//*[contains(text(), 'Findings')]").click()
    f = next(f for f in queries.findings(rs, run=0)["rows"] if f["event_ids"] and f["t0"] is not None)
    i = queries.findings(rs, run=0)["rows"].index(f)
    cell = wait_for(drv, f"return document.querySelector('#findings .ag-row[row-index=\"{i}\"] [col-id=\"title\"]')", what="findings rows")
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    cell.click()
    _drawer_in_view(drv, queries.event(rs, run=0, event_id=f["event_ids"][0])["name"], "finding")
    # a search hit, on the GPU run
    drv.execute_script("window.scrollTo(0, 0)")
    status = drv.execute_script(f"return {STATUS}")
    choose_run(drv, 1)
    wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the GPU run drawn")
    kernel = queries.kernels(rs, run=1)["rows"][0]["name"]
    hit = queries.search(rs, run=1, text=kernel)["hits"][0]
    search = drv.find_element(By.ID, "search")
    search.send_keys(kernel)
    search.send_keys(Keys.ENTER)
    _drawer_in_view(drv, hit["name"], "search hit")
    # a flow jump: the hit's launch is off screen; its marker at the edge goes there
    launch = next(x["from"] for x in queries.event(rs, run=1, event_id=hit["event_id"])["flows"] if x["to"]["event_id"] == hit["event_id"])
    mark = wait_for(drv, f"""const gd = {GD}; const t = gd._fullData.find(t => t.name === 'off-screen'); if (!t) return null;
        const i = t.customdata.findIndex(c => c[0] === {launch['event_id']}); if (i < 0) return null;
        return [gd._fullLayout.xaxis.l2p(t.x[i]), gd._fullLayout.yaxis.l2p(t.y[i])];""", what="off-screen marker of the launch")
    z = plot_box(drv)
    _mouse_click(drv, z["left"] + mark[0], z["top"] + mark[1])
    _drawer_in_view(drv, launch["name"], "flow jump")
    # the view goes there too (the drawer and the timeline are two answers of the server: wait for the second)
    at_ms = (launch["ts_ns"] - rs.get(1).span()[0]) / 1e6
    wait_for(drv, f"const xa = {GD}._fullLayout.xaxis; return xa.range[0] <= {at_ms} && {at_ms} <= xa.range[1]",
             what=f"the timeline moved to the launch at {at_ms} ms")
    jumped = plot_box(drv)
    assert jumped["x0"] * 1e6 <= launch["ts_ns"] - rs.get(1).span()[0] <= jumped["x1"] * 1e6
    drv.save_screenshot(str(ARTIFACTS / "client-drawer.png"))


def test_a_flow_arrow_keeps_its_head_while_keys_come(page):
    """Issue 35: during a burst of keys (the server's answers blocked) the flow arrow of the selected
    kernel moves with the slices, and its head stays the same size, at the end of its line (it was
    stretched with the window's scale: three W presses made it almost five times as wide)."""
    from neuron_explorer.dashboard import app as dash_app
    from neuron_explorer.dashboard import ranks_view

    drv, rs = page
    r = rs.get(1)
    (kid, k_ts, k_dur, l_ts), = r.query("SELECT k.event_id, k.ts_ns, k.dur_ns, l.ts_ns FROM events k JOIN events l "
                                        "ON l.event_id = k.launch_id WHERE k.kind = 'kernel' ORDER BY k.dur_ns DESC LIMIT 1")[1]
    a, b = min(k_ts, l_ts), max(k_ts + k_dur, l_ts)
    view = {**dash_app.view_for(rs, None, 1, ranks_view.first_rank(rs, 1), None, None, None), "t0": a - (b - a), "t1": b + (b - a)}
    status = drv.execute_script(f"return {STATUS}")
    drv.execute_script("window.dash_clientside.set_props('view', {data: arguments[0]}); "
                       "window.dash_clientside.set_props('selected', {data: arguments[1]});", view, kid)
    wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="the kernel's window drawn")
    head = """const gd = %s, head = gd.querySelector('.infolayer .annotation-arrow-g path + path'); if (!head) return null;
        const line = head.previousElementSibling, q = head.getBoundingClientRect(), d = line.getAttribute('d').match(/-?[\\d.]+/g).map(Number);
        const end = new DOMPoint(d[2], d[3]).matrixTransform(line.getScreenCTM());
        const origin = new DOMPoint(0, 0).matrixTransform(head.getScreenCTM());  // the head's own origin, just behind its tip
        return [q.width, q.height, Math.hypot(end.x - origin.x, end.y - origin.y)];""" % GD
    w0, h0, gap0 = wait_for(drv, "return (() => {" + head + "})()", what="the launch → kernel arrow")
    drv.execute_script("nxTimeline.redrawMs = 1e9")  # what is on screen is the frames' work alone
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": [BLOCK]})
    _mouse_click(drv, 5, 5)
    _keys(drv, "www")
    wait_for(drv, "return nxTimeline.frames.length > 0 && nxTimeline.frames.length === nxTimeline.draws.length", what="the frames", timeout=5)
    assert drv.execute_script(f"return {GD}.classList.contains('nx-moving')")
    w1, h1, gap1 = drv.execute_script(head)
    assert w1 == pytest.approx(w0, rel=0.25) and h1 == pytest.approx(h0, rel=0.25), ((w0, h0), (w1, h1))
    assert gap1 <= gap0 + 3, (gap0, gap1)  # the head at its line's end
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
