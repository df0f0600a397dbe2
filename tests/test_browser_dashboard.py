"""End to end in headless Chromium: the dashboard on a real recorded run, driven like a user.

Loads the project's sample run (a torch.profiler trace recorded with stacks, the only real trace
with source lines) next to a real GPU trace from tests/data/traces, sees the timeline drawn, zooms
with a mouse drag, clicks an operator and reads its source line, opens a finding, switches to the
GPU run and clicks a kernel to see its launch chain and flow arrow, and saves
screenshots to test-artifacts/ (dashboard-source.png, dashboard.png).

Needs Debian's chromium and chromium-driver (.ci/run installs them).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import queries
from neuron_explorer.fmt import kernel_name

from .conftest import REPO, TRACES, dashboard_server

pytestmark = pytest.mark.browser  # tier: drives chromium

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = REPO / "test-artifacts"
SAMPLE = REPO / "sample_traces" / "cpu_train_step.json.gz"



@pytest.fixture(scope="module", autouse=True)
def _browser_installed():
    """A real test, not an optional extra: without the browser it fails and says how to get it."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("Debian chromium + chromium-driver are missing: apt-get install chromium chromium-driver (.ci/run does)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    sample = import_traces(SAMPLE, tmp / "sample").run_dir
    gpu = import_traces(TRACES / "cuda_train_68k_events.json.gz", tmp / "gpu").run_dir
    with dashboard_server([sample, gpu]) as served:
        yield served


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-unsafe-swiftshader",
              "--window-size=1600,1250", f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()


def wait_for(drv, js: str, timeout: float = 60.0, what: str = ""):
    """Poll a JS expression until it is truthy; return its value."""
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            last = drv.execute_script(js)
        except Exception as e:  # noqa: BLE001  (the page may still be loading)
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.25)
    shown = drv.execute_script("""const e = document.getElementById('error'), r = document.getElementById('run-select');
        return [e && e.innerText, r && r.innerText]""")
    raise AssertionError(f"timed out waiting for {what or js}: last={last!r}; dashboard error line: {shown[0]!r}; run menu: {shown[1]!r}")


GD = "document.querySelector('#timeline .js-plotly-plot')"
GRID_COLUMN = """((grid, col) => { const cells = Array.from(document.querySelectorAll(`#${grid} .ag-center-cols-container .ag-row`))
    .sort((a, b) => a.getAttribute('row-index') - b.getAttribute('row-index')).map(r => r.querySelector(`[col-id="${col}"]`));
    return cells.length && cells.every(c => c && c.innerText) ? cells.map(c => c.innerText) : null; })"""
"""A JS function: the text of one column in the rows a grid shows, top to bottom; null until
every row shows a non-empty value there (the grid draws the cells just after the rows)."""
STATUS = "document.getElementById('status').innerText"


def plot_box(drv) -> dict:
    """The plot area in page pixels and the axis scale (offsets in µs → pixels)."""
    return drv.execute_script(f"""const gd = {GD}; const r = gd.getBoundingClientRect(); const s = gd._fullLayout._size;
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        return {{left: r.left + s.l, top: r.top + s.t, w: s.w, h: s.h, x0: xa.range[0], x1: xa.range[1],
                 y0: ya.range[0], y1: ya.range[1], ylen: ya._length, yoff: ya._offset}};""")


def choose(drv, menu: str, label: str, *, prefix: bool = False, tries: int = 3):
    """Choose the entry `label` (with `prefix`, the one whose text begins with it) in the dropdown whose
    id is `menu`, as a person does: open the menu, click the entry, see it in the menu's box. Dash's
    dropdown does not always take a click made while its list is still opening on a loaded machine (seen
    in CI: the run menu stayed on the first run; and in the Compare view's menus): the click is made
    again, as a person would make it; `tries` misses fail, naming what the box shows."""
    from selenium.webdriver.common.by import By

    test = f"o.innerText.startsWith({label!r})" if prefix else f"o.innerText === {label!r}"
    option = f"return Array.from(document.querySelectorAll('[role=option]')).find(o => {test})"
    shown = None
    for _ in range(tries):
        wait_for(drv, f"return document.getElementById({menu!r})", what=f"{menu} drawn")
        if not drv.execute_script(option):  # the menu is not open
            drv.find_element(By.ID, menu).click()
        wait_for(drv, option, what=f"{label!r} in {menu}").click()
        end = time.time() + 5
        while time.time() < end:
            shown = drv.execute_script(f"return document.getElementById({menu!r}).innerText")
            if (shown.startswith(label) if prefix else label in shown):
                return
            time.sleep(0.1)
    raise AssertionError(f"{label!r} not chosen in {menu} after {tries} clicks: it shows {shown!r}")


def choose_run(drv, index: int):
    """Choose run `index` in the run menu (`choose`: its entries read "index: name")."""
    choose(drv, "run-select", f"{index}: ", prefix=True)

def test_dashboard_in_chromium(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, rs = server
    drv = browser
    drv.get(url)

    # 1. the timeline is drawn: slices painted as filled SVG paths (one per colour), lane labels, a status line
    n = wait_for(drv, f"const gd = {GD}; return gd && gd.data && gd.data.filter(t => t.meta === 'spans').length", what="timeline traces")
    assert n >= 2
    assert wait_for(drv, f"return {GD}.querySelectorAll('.scatterlayer .js-fill').length", what="painted slices") >= n
    ticks = drv.execute_script(f"return Array.from({GD}.querySelectorAll('.ytick text')).map(t => t.textContent)")
    assert "r0 python · tid 3224" in ticks, ticks  # the thread's name from the trace's metadata
    status0 = wait_for(drv, f"return {STATUS}", what="status")
    assert "events" in status0 and "exact slices" in status0, status0
    full = plot_box(drv)
    # names are drawn inside the slices wide enough for them: the widest slice carries its name
    # (shortened with "…" where it does not fit), in its middle, on its row
    label = drv.execute_script(f"""const gd = {GD}; const box = arguments[0];
        const px = v => (v - box.x0) / (box.x1 - box.x0) * box.w; let best = null;
        for (const t of gd._fullData) {{ if (t.meta !== 'spans' || !t.text) continue;
          // its paint trace: slice i is x[4i] .. x[4i + 2]
          const px0 = gd._fullData[t.index - 1].x, p = {{x: Array.from(px0).filter(v => v !== px0[0])}};
          for (let i = 0; i < t.x.length; i++) {{ const w = px(p.x[4 * i + 2]) - px(p.x[4 * i]);
            if (!best || w > best.w) best = {{w, x0: p.x[4 * i], x1: p.x[4 * i + 2], y: t.y[i], name: String(t.text[i]).split('<br>')[0]}}; }} }}
        const lab = gd._fullData.find(t => t.name === 'labels');
        if (!lab || !best) return null;
        const hits = []; for (let i = 0; i < lab.text.length; i++)
          if (lab.y[i] === best.y && lab.x[i] > best.x0 && lab.x[i] < best.x1) hits.push(lab.text[i]);
        return {{best, hits, visible: lab.visible}};""", full)
    assert label and label["best"]["w"] > 40 and label["visible"] is True, label
    assert len(label["hits"]) == 1 and label["best"]["name"].startswith(label["hits"][0].rstrip("…")), label

    # the Python frames are folded onto one band per thread; "Python frames nested" unfolds them
    # (every frame drawn, on its own row: more events, more rows), and folds them again
    rows = f"const r = {GD}._fullLayout.yaxis.range; return Math.abs(r[1] - r[0])"
    folded_rows = drv.execute_script(rows)
    drv.find_elements(By.CSS_SELECTOR, "#all-lanes input")[1].click()
    nested_status = wait_for(drv, f"const s = {STATUS}; return s !== {status0!r} && s", what="Python frames nested")
    assert int(nested_status.split(" events")[0].split("·")[-1].replace(",", "")) > int(status0.split(" events")[0].split("·")[-1].replace(",", ""))
    assert drv.execute_script(rows) > folded_rows + 3
    drv.find_elements(By.CSS_SELECTOR, "#all-lanes input")[1].click()
    wait_for(drv, f"const s = {STATUS}; return s === {status0!r} && s", what="Python frames folded again")

    # 2. zoom: drag a box over the middle of the timeline; the server sends the narrower window
    y = full["top"] + full["h"] * 0.4
    start_x, end_x = full["left"] + full["w"] * 0.30, full["left"] + full["w"] * 0.55
    _mouse_drag(drv, start_x, y, end_x, y)
    status1 = wait_for(drv, f"const s = {STATUS}; return s !== {status0!r} && s", what="re-queried window after zoom")
    zoomed = plot_box(drv)
    # the axis is ms from the run's start: the zoomed window starts 30% in, and is 25% as wide
    span = full["x1"] - full["x0"]
    assert (zoomed["x0"] == pytest.approx(full["x0"] + 0.30 * span, rel=0.02)
            and zoomed["x1"] - zoomed["x0"] == pytest.approx(0.25 * span, rel=0.02)), (full, zoomed)
    assert float(status1.split(" ms")[0].replace(",", "")) < float(status0.split(" ms")[0].replace(",", "")) * 0.3

    # 3. click an operator that has a source line; the panel shows the chain and the user's code
    target = drv.execute_script(f"""const gd = {GD}; const box = arguments[0];
        const px = v => (v - box.x0) / (box.x1 - box.x0) * box.w;
        for (const t of gd._fullData) {{ if (t.name !== 'cpu_op' || t.meta !== 'spans') continue;
          const xs = t.x, ys = t.y, cd = t.customdata, tx = t.text,
            px0 = gd._fullData[t.index - 1].x, p = {{x: Array.from(px0).filter(v => v !== px0[0])}};
          for (let i = 0; i < xs.length; i++) {{
            if (!String(tx[i]).startsWith('aten::linear')) continue;
            if (px(p.x[4 * i + 2]) - px(p.x[4 * i]) < 8 || px(xs[i]) < 5 || px(xs[i]) > box.w - 5) continue;
            return {{x: xs[i], y: ys[i], id: cd[i]}}; }} }}
        return null;""", zoomed)
    assert target is not None, "no clickable aten::linear slice in the zoomed window"
    ya = drv.execute_script(f"return {GD}._fullLayout.yaxis.l2p(arguments[0])", target["y"])
    cx = zoomed["left"] + (target["x"] - zoomed["x0"]) / (zoomed["x1"] - zoomed["x0"]) * zoomed["w"]
    cy = zoomed["top"] + ya
    _mouse_click(drv, cx, cy)
    name = wait_for(drv, "const e = document.getElementById('detail-name'); return e && e.innerText", what="event panel")
    assert name == "aten::linear"
    src_line = wait_for(drv, "const e = document.getElementById('detail-source-line'); return e && e.innerText", what="source line")
    file_line = src_line.split()[0]
    assert file_line.startswith("make_sample.py:"), src_line
    line_no = int(file_line.split(":")[1])
    current = drv.execute_script("const e = document.querySelector('#detail-source .cur'); return e && e.innerText")
    expected = (REPO / "sample_traces" / "make_sample.py").read_text().splitlines()[line_no - 1].strip()
    assert current is not None and expected in current, (current, expected)
    chain = drv.find_element(By.ID, "detail-chain").text
    assert "source" in chain and "aten::linear" in chain
    outline = wait_for(drv, f"const t = {GD}.data.find(t => t.name === 'selected'); return t && t.customdata[0]", what="selected slice outlined")
    assert outline == target["id"]

    # 4. open the second finding by clicking its row: the timeline zooms to its evidence and
    #    highlights its events; the clicked row stays marked (the Overview tab opens first)
    drv.find_element(By.XPATH, "//div[@id='tabs']//*[contains(text(), 'Findings')]").click()
    status2 = drv.execute_script(f"return {STATUS}")
    titles = wait_for(drv, f"return {GRID_COLUMN}('findings', 'title')", what="findings rows")
    assert titles == [f["title"] for f in queries.findings(rs, run=0)["rows"]] and len(titles) >= 2  # ranked by impact
    cell = drv.find_element(By.CSS_SELECTOR, '#findings .ag-row[row-index="1"] [col-id="title"]')
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    time.sleep(0.5)  # let the page settle after the event panel grew, so the click lands on the cell
    drv.find_element(By.CSS_SELECTOR, '#findings .ag-row[row-index="1"] [col-id="title"]').click()
    text = wait_for(drv, "const e = document.getElementById('finding-text'); return e && e.innerText", what="finding detail")
    assert text.startswith(titles[1]) and not text.startswith(titles[0])
    wait_for(drv, f"const s = {STATUS}; return s !== {status2!r} && s", what="timeline zoomed to the finding")
    assert drv.execute_script(f"return {GD}.data.some(t => t.name === 'highlighted')")
    assert drv.execute_script("return document.querySelector('#findings .ag-row[row-index=\"1\"]').classList.contains('ag-row-selected')")

    # 5. the operators table: every row the query gives, sorted by a header click, filtered by typing
    drv.find_element(By.XPATH, "//div[@id='tabs']//*[contains(text(), 'Operators')]").click()
    want = [r["name"] for r in queries.operators(rs, run=0)["rows"]]
    shown = wait_for(drv, f"return {GRID_COLUMN}('table-operators', 'name')", what="operators rows")
    assert shown == want[:len(shown)] and len(shown) >= 10
    assert drv.execute_script("return document.querySelector('#table-operators [role=grid]').getAttribute('aria-rowcount')") == str(len(want) + 2)
    drv.find_element(By.CSS_SELECTOR, '#table-operators .ag-header-cell[col-id="calls"]').click()
    calls = wait_for(drv, "const h = document.querySelector('#table-operators .ag-header-cell[col-id=\"calls\"]'); "
                          f"const c = {GRID_COLUMN}('table-operators', 'calls'); "
                          "return h.getAttribute('aria-sort') === 'ascending' && c && c.map(Number)",
                     what="operators sorted by calls")
    assert calls == sorted(calls) and calls != [r["calls"] for r in queries.operators(rs, run=0)["rows"]][:len(calls)]
    assert calls[0] == min(r["calls"] for r in queries.operators(rs, run=0)["rows"])
    box = drv.find_element(By.CSS_SELECTOR, '#table-operators .ag-floating-filter[col-id="name"] input')
    box.send_keys("aten::linear")
    # the grid filters after a debounce and may be read half-way: wait for the filtered rows themselves
    names = wait_for(drv, f"const n = {GRID_COLUMN}('table-operators', 'name'); "
                          f"return n && n.length < {len(shown)} && n.every(x => x.includes('aten::linear')) && n", what="filtered rows")
    assert names and all("aten::linear" in n for n in names), names
    drv.find_element(By.XPATH, "//div[@id='tabs']//*[contains(text(), 'Findings')]").click()

    ARTIFACTS.mkdir(exist_ok=True)
    _mouse_click(drv, 5, 5)
    drv.execute_script("window.scrollTo(0, 0)")
    drv.save_screenshot(str(ARTIFACTS / "dashboard-source.png"))

    # 6. the real GPU run: device lanes; zoom in, click a kernel: its launch chain and the
    #    launch → kernel arrow on the timeline
    status3 = drv.execute_script(f"return {STATUS}")
    choose_run(drv, 1)
    wait_for(drv, f"const s = {STATUS}; return s !== {status3!r} && s.includes('45,') && s", what="the GPU run drawn")
    ticks = drv.execute_script(f"return Array.from({GD}.querySelectorAll('.ytick text')).map(t => t.textContent)")
    # lanes named from the trace's metadata ("thread 1262 (pt_autograd_0)", "GPU 0"); the meta
    # lanes (Spans, Traces, no thread, negative tids) hidden until asked for
    assert "r0 GPU 0 · stream 7" in ticks and "r0 pt_autograd_0 · tid 1262" in ticks, ticks
    assert not any("Spans" in t or "(no thread)" in t or "tid -" in t for t in ticks), ticks
    status_hidden = drv.execute_script(f"return {STATUS}")
    assert "meta lanes hidden" in status_hidden, status_hidden
    drv.find_element(By.CSS_SELECTOR, "#all-lanes input").click()
    wait_for(drv, f"const s = {STATUS}; return s !== {status_hidden!r} && !s.includes('meta lanes hidden') && s", what="meta lanes shown")
    ticks = drv.execute_script(f"return Array.from({GD}.querySelectorAll('.ytick text')).map(t => t.textContent)")
    assert "r0 Spans" in ticks and "r0 (no thread)" in ticks, ticks
    status_all = drv.execute_script(f"return {STATUS}")
    drv.find_element(By.CSS_SELECTOR, "#all-lanes input").click()
    wait_for(drv, f"const s = {STATUS}; return s !== {status_all!r} && s.includes('meta lanes hidden') && s", what="meta lanes hidden again")
    full = plot_box(drv)
    status4 = drv.execute_script(f"return {STATUS}")
    _mouse_drag(drv, full["left"] + full["w"] * 0.20, full["top"] + 20, full["left"] + full["w"] * 0.215, full["top"] + 20)
    wait_for(drv, f"const s = {STATUS}; return s !== {status4!r} && s", what="zoomed GPU run")
    zoomed = plot_box(drv)
    target = drv.execute_script(f"""const gd = {GD}; const box = arguments[0];
        const px = v => (v - box.x0) / (box.x1 - box.x0) * box.w; let best = null;
        for (const t of gd._fullData) {{ if (t.name !== 'kernel' || t.meta !== 'spans') continue;
          // its paint trace: slice i is x[4i] .. x[4i + 2]
          const px0 = gd._fullData[t.index - 1].x, p = {{x: Array.from(px0).filter(v => v !== px0[0])}};
          for (let i = 0; i < t.x.length; i++) {{ const a = p.x[4 * i], e = p.x[4 * i + 2], w = px(e) - px(a);
            if (px(a) > 5 && px(e) < box.w - 5 && (!best || w > best.w))
              best = {{x: a + 0.15 * (e - a), y: t.y[i], id: t.customdata[i], w, name: String(t.text[i]).split('<br>')[0]}}; }} }}
        return best;""", zoomed)
    # 15% of more than 85 px is more than hoverdistance (12 px) from its ends and its middle
    assert target is not None and target["w"] > 85, f"no kernel wide enough in the zoomed window: {target}"
    # click 15% into the kernel, far from its ends and its middle: it is selected all the same
    ya = drv.execute_script(f"return {GD}._fullLayout.yaxis.l2p(arguments[0])", target["y"])
    _mouse_click(drv, zoomed["left"] + (target["x"] - zoomed["x0"]) / (zoomed["x1"] - zoomed["x0"]) * zoomed["w"], zoomed["top"] + ya)
    wait_for(drv, "const e = document.getElementById('detail-chain'); return e && e.innerText.includes('launch') && e.innerText.includes('kernel')",
             what="kernel chain with its launch")
    assert wait_for(drv, f"const t = {GD}.data.find(t => t.name === 'selected'); return t && t.customdata[0]", what="kernel outlined") == target["id"]
    assert drv.find_element(By.ID, "detail-name").text[:80] == target["name"]  # hover texts keep 80 characters of a name
    assert wait_for(drv, f"return ({GD}.layout.annotations || []).filter(a => a.axref === 'x' && a.showarrow).length",
                    what="launch → kernel arrow")

    # 7. search: type a kernel's name, Enter; the count is every event of that name, and the
    #    timeline goes to the first hit (selected, outlined, named in the panel); "next" to the second
    kernel = queries.kernels(rs, run=1)["rows"][0]["name"]
    text = kernel[5:30].upper()  # a part of the name, in another case
    want = queries.search(rs, run=1, text=text)
    assert want["count"] >= 2 and all(kernel[5:30] in h["name"] for h in want["hits"])
    status5 = drv.execute_script(f"return {STATUS}")
    box = drv.find_element(By.ID, "search")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)
    count = wait_for(drv, "const e = document.getElementById('search-count'); return e && e.innerText", what="search count")
    more = " (first 1,000 shown)" if want["count"] > 1000 else ""  # the box steps through the first 1,000
    assert count == f"1 / {want['count']:,}{more}", count
    wait_for(drv, f"const s = {STATUS}; return s !== {status5!r} && s", what="timeline at the first hit")
    first = want["hits"][0]
    assert wait_for(drv, f"const t = {GD}.data.find(t => t.name === 'selected'); return t && t.customdata[0]",
                    what="hit outlined") == first["event_id"]
    assert wait_for(drv, "const e = document.getElementById('detail-name'); return e && e.innerText", what="hit in the panel") == first["name"]
    drv.find_element(By.ID, "search-next").click()
    wait_for(drv, f"return document.getElementById('search-count').innerText === '2 / {want['count']:,}{more}'", what="second hit")
    second = want["hits"][1]
    wait_for(drv, f"const t = {GD}.data.find(t => t.name === 'selected'); return t && t.customdata[0] === {second['event_id']}",
             what="second hit outlined")
    lab = wait_for(drv, f"const t = {GD}.data.find(t => t.name === 'labels'); return t && t.text", what="labels at the hit")
    # the hit is wide enough to carry its name, a kernel's as every view shortens it (fmt.kernel_name), to what fits
    assert any(kernel_name(second["name"], len(x)) == x for x in lab), (second["name"], lab)

    _mouse_click(drv, 5, 5)  # away from the plot: no hover label over the picture
    drv.save_screenshot(str(ARTIFACTS / "dashboard.png"))
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 20_000
    errors = drv.execute_script("return document.getElementById('error').innerText")
    assert not errors.strip(), errors


def _mouse_drag(drv, x0, y0, x1, y1):
    """A real mouse drag at page coordinates (the plot's zoom box)."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    ab = ActionBuilder(drv)
    ab.pointer_action.move_to_location(int(x0), int(y0)).pointer_down()
    for i in range(1, 6):
        ab.pointer_action.move_to_location(int(x0 + (x1 - x0) * i / 5), int(y0 + (y1 - y0) * i / 5))
    ab.pointer_action.pointer_up()
    ab.perform()


def _mouse_click(drv, x, y):
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    ab = ActionBuilder(drv)
    ab.pointer_action.move_to_location(int(x) - 3, int(y)).move_to_location(int(x), int(y)).pause(0.3).click()
    ab.perform()

