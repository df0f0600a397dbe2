"""End to end in headless Chromium: the Overview tab on real GPU training traces, as a user sees it.

Opens the dashboard on two real traces from tests/data/traces: a device-bound GPU training job
(cuda_train_68k_events, a V100 busy 97% of the analysed time) and a ResNet-50 job with operator shapes
(v100_resnet50_torch19_memory, so kernels have FLOPs). The Overview is the tab shown first; it
says in words that the job is device-bound, draws the stacked bar per step, says why MFU is
unknown instead of drawing 0, and a click on a finding zooms the timeline to all of its evidence.
On the second run the roofline has a point per kernel name under the V100's ceilings. Screenshots
go to test-artifacts/ (dashboard-overview.png, dashboard-roofline.png).

Needs Debian's chromium and chromium-driver (.ci/run installs them).
"""

from __future__ import annotations

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import queries
from neuron_explorer.dashboard.views import overview as ov

from .conftest import TRACES, dashboard_server
from .test_browser_dashboard import ARTIFACTS, CHROMEDRIVER, CHROMIUM, STATUS, _browser_installed, browser, choose_run, wait_for  # noqa: F401

pytestmark = pytest.mark.browser  # tier: drives chromium

PLOT = "document.querySelector('#{} .js-plotly-plot')"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser-overview")
    gpu = import_traces(TRACES / "cuda_train_68k_events.json.gz", tmp / "gpu").run_dir
    resnet = import_traces(TRACES / "v100_resnet50_torch19_memory.json.gz", tmp / "resnet").run_dir
    with dashboard_server([gpu, resnet]) as served:
        yield served


def _traces(drv, graph: str):
    return drv.execute_script(f"const gd = {PLOT.format(graph)}; return gd && gd.data && gd.data.map(t => "
                              "({name: t.name, type: t.type, n: (t.x || []).length, y: t.y}))")


def test_overview_first_on_a_gpu_training_trace(server, browser):
    from selenium.webdriver.common.by import By

    url, rs = server
    drv = browser
    drv.get(url)
    want = ov.overview(rs, run=0)

    # 1. the Overview is the tab shown first, and says at the top that the device bounds the steps
    verdict = wait_for(drv, "const e = document.getElementById('overview-verdict'); return e && e.innerText", what="overview verdict")
    assert verdict == want["verdict"] and verdict.startswith("device-bound (9") and verdict.endswith("device compute"), verdict
    selected = drv.execute_script("return Array.from(document.querySelectorAll('#tabs .tab--selected')).map(t => t.innerText)")
    assert selected == ["Overview"], selected
    busy = drv.find_element(By.ID, "overview-busy").text
    (dev,) = want["ranks"][0]["devices"]  # the device time breakdown of the analysed time, as the verdict's
    assert f"rank 0 device 0: busy {100 * dev['busy_share']:.1f}% of the analysed time (" in busy and dev["busy_share"] > 0.95, busy

    # 2. the stacked bar: one bar per step, compute the tallest part of every step
    bars = wait_for(drv, f"const d = {PLOT.format('overview-steps')}; return d && d.data && d.data.length === 6 && d.data", what="step bars")
    assert [b["name"] for b in bars] == ["compute", "communication", "memcpy", "host + launch", "input", "idle"]
    assert bars[0]["x"] == [str(s["step"]) for s in want["steps"]] == ["101", "102", "103", "104", "105"]
    for i, s in enumerate(want["steps"]):
        compute = bars[0]["y"][i]
        assert compute == pytest.approx(s["parts_ns"]["compute"] / 1e6) and compute > 0.8 * s["dur_ns"] / 1e6
    drawn = drv.execute_script(f"return {PLOT.format('overview-steps')}.querySelectorAll('.barlayer .point path').length")
    assert drawn >= 5 * 2  # compute and at least one more part drawn for every step

    # 3. device busy per step; MFU unknown is said, not drawn as 0
    util = wait_for(drv, f"const d = {PLOT.format('overview-util')}; return d && d.data && d.data.length && d.data", what="utilisation")
    assert [t["name"] for t in util] == ["device 0 busy %"] and min(util[0]["y"]) > 80
    notes = drv.execute_script(f"return ({PLOT.format('overview-util')}.layout.annotations || []).map(a => a.text.replace('<br>', ' '))")
    assert any(n.startswith("MFU unknown: no FLOPs counted") for n in notes), notes

    # 4. the top lists with their denominator, the data-quality notes, the findings with confidence
    assert drv.find_element(By.ID, "overview-denominator").text.startswith("% of step time: ns charged on the critical path")
    top = drv.find_elements(By.CSS_SELECTOR, "#overview-top-kernels tr")
    assert len(top) == 1 + len(want["top"]["kernels"]) and top[1].text.endswith(f"{100 * want['top']['kernels'][0]['share']:.1f}%")
    assert "warm-up" in drv.find_element(By.ID, "overview-quality").text
    conf = wait_for(drv, "const c = Array.from(document.querySelectorAll('#overview-findings .ag-center-cols-container "
                         "[col-id=\"confidence\"]')).map(c => c.innerText); return c.length && c.every(x => x) && c", what="finding rows")
    assert conf[0] == str(want["findings"][0]["confidence"])

    drv.execute_script("window.scrollTo(0, 0)")
    ARTIFACTS.mkdir(exist_ok=True)
    drv.save_screenshot(str(ARTIFACTS / "dashboard-overview.png"))

    # 5. a click on a finding zooms the timeline to all of its evidence (its steps), not one sample
    f = queries.findings(rs, run=0)["rows"][0]
    status = drv.execute_script(f"return {STATUS}")
    cell = drv.find_element(By.CSS_SELECTOR, '#overview-findings .ag-row[row-index="0"] [col-id="title"]')
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    cell.click()
    new = wait_for(drv, f"const s = {STATUS}; return s !== {status!r} && s", what="timeline zoomed to the finding")
    span_ms = float(new.split(" ms")[0].replace(",", ""))
    assert span_ms == pytest.approx((f["t1"] - f["t0"]) / 1e6, rel=0.01)
    steps = [s for s in rs.get(0).steps() if s["step"] in f["location"]["steps"]]
    assert span_ms > (max(s["ts_ns"] + s["dur_ns"] for s in steps) - min(s["ts_ns"] for s in steps)) / 1e6  # every step inside

    # 6. the ResNet run: kernels with FLOPs on the roofline, under the V100's ceilings; MFU per step
    want1 = ov.overview(rs, run=1)
    drv.execute_script("window.scrollTo(0, 0)")
    choose_run(drv, 1)
    wait_for(drv, f"const e = document.getElementById('overview-verdict'); return e && e.innerText === {want1['verdict']!r}",
             timeout=180, what="the ResNet run's verdict")  # its first open computes the run's critical path
    roof = wait_for(drv, f"const d = {PLOT.format('overview-roofline')}; return d && d.data && d.data.length > 1 && d.data", what="roofline")
    names = [t["name"] for t in roof]
    assert names[0] == "kernels" and len(roof[0]["x"]) == len(want1["roofline"]["points"]) >= 5
    assert "ceiling fp32 15.7 TFLOP/s" in names, names  # the V100's fp32 peak, the dtype of these kernels
    assert drv.execute_script(f"return {PLOT.format('overview-roofline')}.layout.xaxis.type") == "log"
    util = wait_for(drv, f"const d = {PLOT.format('overview-util')}; return d && d.data && d.data.some(t => t.name === 'MFU %') && d.data",
                    what="MFU per step")
    mfu = next(t for t in util if t["name"] == "MFU %")
    assert mfu["y"] == pytest.approx([100 * s["mfu"] for s in want1["steps"]])
    drv.execute_script("document.getElementById('overview-roofline').scrollIntoView({block: 'center'})")
    drv.save_screenshot(str(ARTIFACTS / "dashboard-roofline.png"))
    assert (ARTIFACTS / "dashboard-roofline.png").stat().st_size > 20_000
    errors = drv.execute_script("return document.getElementById('error').innerText")
    assert not errors.strip(), errors
