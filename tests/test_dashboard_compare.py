"""The dashboard's Compare view: query functions, JSON API, callbacks, and the view in Chromium.

Two hand-built runs of five profiler steps each (host pid 1 / tid 1, device 0 stream 7):

    step i:  ProfilerStep#i ........................................................ step_ms[i]
               train.py(10): forward (1 ms)          train.py(20): extra (test only, 3 ms)
                 aten::mm 998 us                       aten::slow
                   launch -> gemm (500 us on device)     launch -> slow_k (1 ms on device)
                                                                 aten::relu (the rest of the step)

Base steps: 10.0 10.3 9.8 10.1 10.0 ms; test steps: 13.1 12.9 13.2 13.0 12.9 ms (3 ms of
aten::slow at train.py:20 added). Known answers: the test run is SLOWER by 3.0 ms per step
(significant); the first source-line delta is train.py:20 (+3 ms CPU, new, significant); the
middle common step is 2, which lasts 9.8 ms in base and 13.2 ms in test, so both aligned windows
are 13.2 ms × 1.04 long and start at that step's start (base +20.32 ms, test +26.02 ms).
"""

from __future__ import annotations

import json
import statistics
import threading
from pathlib import Path

import pytest

from neuron_explorer.analyzers import diff as diff_mod
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import app as dash_app
from neuron_explorer.dashboard import queries
from neuron_explorer.dashboard.runs import QueryError, RunSet
from neuron_explorer.dashboard.ui import compare_view
from neuron_explorer.errors import NeuronExplorerError
from neuron_explorer.fmt import duration

from .conftest import REPO, dashboard_server, write_trace
from .test_browser_dashboard import GRID_COLUMN, _browser_installed, browser, choose, wait_for  # noqa: F401  (shared browser fixtures)

pytestmark = pytest.mark.browser  # tier: one test drives chromium; its recordings import torch

BASE_STEPS = [10.0, 10.3, 9.8, 10.1, 10.0]
TEST_STEPS = [13.1, 12.9, 13.2, 13.0, 12.9]
GAP_US = 20
SOURCE = "import torch\n" + "\n" * 8 + "def forward():\n" + "    y = model(x)\n" * 9 + "def extra():\n    return slow(y)\n"


def _steps_trace(path: Path, step_ms: list[float], slow_ms: float = 0.0) -> Path:
    ev, t, corr = [], 0.0, 100

    def X(name, cat, ts, dur, pid=1, tid=1, **args):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args})

    for i, ms in enumerate(step_ms):
        us = ms * 1000
        X(f"ProfilerStep#{i}", "user_annotation", t, us)
        X("train.py(10): forward", "python_function", t + 1, 1000)
        X("aten::mm", "cpu_op", t + 2, 998, **{"External id": 10 * i + 1})
        X("cudaLaunchKernel", "cuda_runtime", t + 10, 5, correlation=corr, **{"External id": 10 * i + 1})
        X("gemm", "kernel", t + 20, 500, pid=0, tid=7, correlation=corr, stream=7, device=0)
        corr += 1
        rest = t + 1005
        if slow_ms:
            X("train.py(20): extra", "python_function", rest, slow_ms * 1000)
            X("aten::slow", "cpu_op", rest + 1, slow_ms * 1000 - 2, **{"External id": 10 * i + 2})
            X("cudaLaunchKernel", "cuda_runtime", rest + 5, 5, correlation=corr, **{"External id": 10 * i + 2})
            X("slow_k", "kernel", rest + 20, 1000, pid=0, tid=7, correlation=corr, stream=7, device=0)
            corr += 1
            rest += slow_ms * 1000
        X("aten::relu", "cpu_op", rest + 5, t + us - rest - 10, **{"External id": 10 * i + 3})
        t += us + GAP_US
    return write_trace(path, ev, baseTimeNanoseconds=1_700_000_000_000_000_000, distributedInfo={"rank": 0, "world_size": 1})


def _make_runs(tmp: Path) -> list[Path]:
    (tmp / "train.py").write_text(SOURCE)
    base = import_traces(_steps_trace(tmp / "base.json", BASE_STEPS), tmp / "base").run_dir
    test = import_traces(_steps_trace(tmp / "test.json", TEST_STEPS, slow_ms=3.0), tmp / "test").run_dir
    return [base, test]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return _make_runs(tmp_path_factory.mktemp("cmp"))


@pytest.fixture(scope="module")
def rs(paths):
    rs = RunSet(paths)
    yield rs
    rs.close()


# ---- query functions -------------------------------------------------------------------------
def test_compare_gives_the_verdict_and_the_slow_line_first(rs, paths):
    d = queries.compare(rs, base=0, test=1)
    s = d["step_time"]
    assert s["verdict"] == "slower" and s["significant"] and s["p_value"] < 0.001
    assert s["delta_ns"] == pytest.approx((statistics.median(TEST_STEPS) - statistics.median(BASE_STEPS)) * 1e6)
    assert s["base"]["n"] == 5 and s["base"]["mean"] == pytest.approx(sum(BASE_STEPS) / 5 * 1e6)
    assert s["base"]["median"] == pytest.approx(statistics.median(BASE_STEPS) * 1e6) and s["test_name"] == "welch-t"
    assert s["steps"]["base"] == s["steps"]["test"] == {"steps": 5, "used": [0, 1, 2, 3, 4], "left_out": []}
    assert s["base"]["ci_low"] < s["base"]["mean"] < s["base"]["ci_high"] < s["test"]["ci_low"]
    assert (d["base"], d["test"]) == ({"run": 0, "name": "base"}, {"run": 1, "name": "test"})
    lines = d["deltas"]["source_line"]
    first = lines["rows"][0]
    assert first["key"].endswith("train.py:20") and first["significant"] and first["status"] == "new"
    # the line's outermost operator (lines.py), its 5 µs launch included
    assert first["metric"] == "cpu" and first["delta_ns_per_step"] == pytest.approx(3e6 - 2e3, rel=1e-3)
    assert lines["significant"] >= 1 and lines["total_rows"] == len(lines["rows"])
    ops = {(x["key"], x["metric"]): x for x in d["deltas"]["operator"]["rows"]}
    assert ops[("aten::slow", "cpu")]["status"] == "new" and ops[("aten::slow", "cpu")]["significant"]
    kernels = {x["key"]: x for x in d["deltas"]["kernel"]["rows"]}
    assert kernels["slow_k"]["delta_ns_per_step"] == pytest.approx(1e6) and "gemm" not in kernels  # gemm did not change
    # the same rows as the analyzer's comparison (reused, not recomputed), and no path in the answer
    want = [x for x in diff_mod.compare(*paths).to_dict()["deltas"] if x["type"] == "operator"]
    assert d["deltas"]["operator"]["rows"] == want and want
    assert str(paths[0].parent) not in json.dumps(d)


def test_compare_is_cached_per_pair(paths, monkeypatch):
    calls = []
    real = diff_mod.compare
    monkeypatch.setattr(diff_mod, "compare", lambda a, b: calls.append((Path(a).name, Path(b).name)) or real(a, b))
    rs = RunSet(paths)
    queries.compare(rs, base=0, test=1)
    queries.compare(rs, base="0", test="1", limit=3)
    assert calls == [("base", "test")]
    back = queries.compare(rs, base=1, test=0)
    assert calls == [("base", "test"), ("test", "base")] and back["step_time"]["verdict"] == "faster"
    rs.close()


def test_limit_cuts_each_delta_list_and_says_so(rs):
    d = queries.compare(rs, base=0, test=1, limit=1)
    assert all(len(v["rows"]) <= 1 for v in d["deltas"].values())
    assert d["truncated"] == any(v["total_rows"] > 1 for v in d["deltas"].values()) is True


@pytest.mark.parametrize("kw", [{"base": 0, "test": 0}, {"base": 0, "test": 2}, {"base": -1, "test": 0}, {"base": "x", "test": 1},
                                {"base": 0, "test": 1, "limit": 0}])
def test_bad_pairs_are_query_errors(rs, kw):
    with pytest.raises(QueryError):
        queries.compare(rs, **kw)
    with pytest.raises(QueryError):
        queries.compare_timeline(rs, **{k: v for k, v in kw.items() if k != "limit"}, **({"step": "nope"} if "limit" in kw else {}))


def test_timelines_are_aligned_on_the_step_and_share_one_scale(rs):
    d = queries.compare_timeline(rs, base=0, test=1, width=1000)
    assert d["step"] == 2 and d["steps"] == [0, 1, 2, 3, 4]  # the middle common step by default
    b, t = d["base"], d["test"]
    assert (b["step_dur_ns"], t["step_dur_ns"]) == (9_800_000, 13_200_000)
    assert d["window_ns"] == 13_200_000 + 528_000 and b["t1"] - b["t0"] == t["t1"] - t["t0"] == d["window_ns"]
    assert b["start_ms"] == pytest.approx(10.0 + 10.3 + 2 * GAP_US / 1000) and t["start_ms"] == pytest.approx(13.1 + 12.9 + 2 * GAP_US / 1000)
    assert d["dur_change_pct"] == pytest.approx((13.2 - 9.8) / 9.8 * 100)
    for side, ms in ((b, 9.8), (t, 13.2)):
        s = side["timeline"]["slices"]
        step = [i for i, n in enumerate(s["name"]) if n == "ProfilerStep#2"]
        assert len(step) == 1 and s["x0"][step[0]] == 0.0 and s["x1"][step[0]] == pytest.approx(ms * 1000)  # µs from the step start
        gemm = [s["x0"][i] for i, n in enumerate(s["name"]) if n == "gemm"]
        assert min(gemm) == pytest.approx(20.0)  # same offset in both runs (the next step's gemm may show too)
        assert side["timeline"]["t0"] == side["t0"] and side["timeline"]["width"] == 1000
    assert "slow_k" in t["timeline"]["slices"]["name"] and "slow_k" not in b["timeline"]["slices"]["name"]
    assert queries.compare_timeline(rs, base=1, test=0, step="0")["step"] == 0
    with pytest.raises(QueryError, match="not in both runs"):
        queries.compare_timeline(rs, base=0, test=1, step=7)


def test_runs_without_steps_are_aligned_at_their_first_events(tmp_path):
    def run(name, dur):
        ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 5, "dur": dur}]
        return import_traces(write_trace(tmp_path / f"{name}.json", ev), tmp_path / name).run_dir

    rs = RunSet([run("a", 100), run("b", 300)])
    d = queries.compare_timeline(rs, base=0, test=1)
    assert d["step"] is None and d["steps"] == [] and d["window_ns"] == 312_000
    assert d["base"]["t0"] == rs.get(0).span()[0] and d["test"]["step_dur_ns"] == 300_000
    with pytest.raises(QueryError, match="share no profiler step"):
        queries.compare_timeline(rs, base=0, test=1, step=1)
    assert queries.compare(rs, base=0, test=1)["step_time"]["verdict"] == "cannot tell"
    rs.close()


# ---- JSON API ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client(rs):
    return dash_app.create_app(rs).server.test_client()


def test_api_serves_both_views(client):
    body = client.get("/api/compare?base=0&test=1").get_json()
    assert body["ok"] and body["data"]["step_time"]["verdict"] == "slower"
    tl = client.get("/api/compare_timeline?base=0&test=1&step=3&width=500").get_json()
    assert tl["ok"] and tl["data"]["step"] == 3 and tl["data"]["test"]["timeline"]["slices"]["x0"][0] >= 0


@pytest.mark.parametrize("url", ["/api/compare?base=0&test=0", "/api/compare?base=0&test=9", "/api/compare?base=../a&test=1",
                                 "/api/compare?base=0&test=1&path=/etc", "/api/compare_timeline?base=0&test=1&step=99",
                                 "/api/compare_timeline?base=1&test=1", "/api/compare_timeline?base=0&test=1&width=5"])
def test_api_bad_requests_get_an_error_envelope(client, url):
    r = client.get(url)
    body = r.get_json()
    assert r.status_code == 400 and body["ok"] is False and body["error"] and body["data"] is None


# ---- callbacks -------------------------------------------------------------------------------------
def _text(component) -> str:
    return json.dumps(component.to_plotly_json() if hasattr(component, "to_plotly_json") else component,
                      default=lambda o: o.to_plotly_json())


def test_verdict_panel_shows_means_cis_and_the_verdict(rs):
    text = _text(compare_view.verdict_panel(rs, 0, 1))
    s = queries.compare(rs, base=0, test=1)["step_time"]
    assert "SLOWER" in text and f"+{duration(s['delta_ns'])} ({s['delta_pct']:+.1f}%)" in text and "Welch's t p" in text
    assert duration(s['base']['ci_low']) in text and duration(s['test']['mean']) in text
    assert duration(s['test']['median']) in text and "5 of 5 (0..4)" in text and "Cliff's delta +1.00" in text
    # the work per step: aten::slow (2.998 ms) added to aten::mm and aten::relu, priced at its own time
    # (the shared calls ran at the same speed); 2.998 ms of the base's mean step of 10.04 ms
    assert json.dumps("work per step: operator calls (median) 2 → 3 (+50.0%)")[1:-1] in text
    assert f"host work priced at the base's time per call: {duration(s['work']['cost']['base_ns_per_step'])}" in text
    assert s["work"]["cost"]["delta_pct"] == pytest.approx(100 * 2.998 / 10.04, rel=1e-3) and "(+29.9% of the base's step)" in text
    with pytest.raises(NeuronExplorerError):
        compare_view.verdict_panel(rs, 0, 0)
    with pytest.raises(NeuronExplorerError):
        compare_view.verdict_panel(rs, None, 1)


def test_aligned_figures_share_the_time_axis(rs):
    opts, value = compare_view.step_options(rs, 0, 1)
    assert [o["value"] for o in opts] == [0, 1, 2, 3, 4] and value == 2
    fb, ft, cb, ct = compare_view.aligned_figures(rs, 0, 1, 2, 900)
    assert fb["layout"]["xaxis"]["range"] == ft["layout"]["xaxis"]["range"]
    assert fb["layout"]["xaxis"]["range"][1] == pytest.approx(13_728.0) and fb["layout"]["xaxis"]["ticksuffix"] == " µs"
    ends = [[s["x0"] for s in f["layout"]["shapes"] if s["line"].get("width") == 2] for f in (fb, ft)]
    assert ends == [[9800.0], [13200.0]]  # each run's step end, on the common scale
    assert "step 2" in _text(cb) and "+34.7% vs base" in _text(ct)
    # a step the new pair does not share falls back to the default step; nonsense is an error
    assert "step 2" in _text(compare_view.aligned_figures(rs, 0, 1, 99, 900)[2])
    with pytest.raises(NeuronExplorerError):
        compare_view.aligned_figures(rs, 0, 1, 2, "wide")


def test_delta_tables_mark_significant_rows(rs):
    rows, counts = compare_view.delta_rows(rs, 0, 1, "source_line")
    assert rows[0]["key"].endswith("train.py:20") and rows[0]["significant"] == "yes" and rows[0]["status"] == "new"
    assert rows[0]["delta"] == pytest.approx(2.998, abs=1e-3) and rows[0]["base"] == 0.0  # ms per step: 3 ms less 2 µs (lines.py cpu_ns)
    assert counts["significant"] == sum(r["significant"] == "yes" for r in rows)
    for tab in ("source_line", "operator", "kernel"):
        assert f"cmp-table-{tab}" in _text(compare_view.delta_table(rs, 0, 1, tab))
    assert "no modules differ" in _text(compare_view.delta_table(rs, 0, 1, "module"))  # the traces have no nn.Module ranges
    with pytest.raises(NeuronExplorerError):
        compare_view.delta_table(rs, 0, 1, "../../etc")


def test_compare_view_only_with_two_runs(rs, paths):
    assert compare_view.mode_styles("compare")[1] == {} and compare_view.mode_styles("explore")[1] == {"display": "none"}
    two = _text(dash_app.create_app(rs).layout())
    assert '"compare-view"' in two and '"mode-compare"' in two
    one = RunSet(paths[:1])
    assert '"compare-view"' not in _text(dash_app.create_app(one).layout())
    one.close()


def test_concurrent_requests_compute_once(paths, monkeypatch):
    calls = []
    real = diff_mod.compare
    monkeypatch.setattr(diff_mod, "compare", lambda a, b: calls.append(1) or real(a, b))
    rs = RunSet(paths)
    ths = [threading.Thread(target=queries.compare, args=(rs,), kwargs={"base": 0, "test": 1}) for _ in range(4)]
    [t.start() for t in ths]
    [t.join() for t in ths]
    assert calls == [1]
    rs.close()


# ---- in Chromium ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with dashboard_server(_make_runs(tmp_path_factory.mktemp("cmp-browser"))) as (url, _rs):
        yield url


def _graph(gid: str) -> str:
    return f"document.querySelector('#{gid} .js-plotly-plot')"


def test_compare_view_in_chromium(server, browser):  # noqa: F811  (the shared fixture)
    from selenium.webdriver.common.by import By

    drv = browser
    drv.get(server)
    wait_for(drv, f"return {_graph('timeline')} && {_graph('timeline')}.data", what="the explore timeline")
    drv.find_element(By.ID, "mode-compare").click()
    badge = wait_for(drv, "const e = document.getElementById('cmp-verdict-badge'); return e && e.innerText", what="verdict")
    assert badge == "SLOWER"
    assert drv.find_element(By.CSS_SELECTOR, "td.nx-steps-used").text == "5 of 5 (0..4)"
    assert drv.find_element(By.ID, "cmp-test-name").text.startswith("Welch's t p = ")
    assert not drv.execute_script("return document.getElementById('compare-view').offsetParent === null")
    assert drv.execute_script("return document.getElementById('explore-view').offsetParent === null")  # explore is hidden
    for gid in ("cmp-base-timeline", "cmp-test-timeline"):
        wait_for(drv, f"const gd = {_graph(gid)}; return gd && gd.data && gd.data.filter(t => t.meta === 'spans').length >= 3",
                 what=f"{gid} drawn")
    ranges = drv.execute_script(f"return [{_graph('cmp-base-timeline')}._fullLayout.xaxis.range, "
                                f"{_graph('cmp-test-timeline')}._fullLayout.xaxis.range]")
    assert ranges[0] == ranges[1] and ranges[0][1] == pytest.approx(13_728.0, rel=1e-3)
    caption = drv.find_element(By.ID, "cmp-test-caption").text
    assert "step 2" in caption and duration(13_200_000) in caption
    keys = wait_for(drv, f"return {GRID_COLUMN}('cmp-table-source_line', 'key')", what="source-line delta table")
    assert keys == ["train.py:20", "train.py:20"]
    assert wait_for(drv, f"return {GRID_COLUMN}('cmp-table-source_line', 'significant')", what="sig. column") == ["yes", "yes"]

    # another step: both timelines follow, still on one scale
    choose(drv, "cmp-step", "step 0")
    wait_for(drv, "const e = document.getElementById('cmp-test-caption'); return e && e.innerText.includes('step 0')", what="step 0")
    wait_for(drv, f"const r = {_graph('cmp-base-timeline')}._fullLayout.xaxis.range; return Math.abs(r[1] - 13624) < 1",
             what="the step-0 window (13.1 ms x 1.04)")

    # the operator deltas: significant rows highlighted, the others plain; a header click sorts
    drv.find_element(By.XPATH, "//div[@id='cmp-tabs']//*[contains(text(), 'Operators')]").click()
    ops = wait_for(drv, f"const k = {GRID_COLUMN}('cmp-table-operator', 'key'); return k && k.length === 3 && k", what="operator deltas")
    assert ops == ["aten::slow", "aten::slow", "aten::relu"]  # largest change per step first
    backgrounds = drv.execute_script("return Array.from(document.querySelectorAll('#cmp-table-operator .ag-center-cols-container .ag-row'))"
                                     ".sort((a, b) => a.getAttribute('row-index') - b.getAttribute('row-index'))"
                                     ".map(r => [r.innerText.includes('aten::slow'), getComputedStyle(r).backgroundColor, "
                                     "getComputedStyle(r).fontWeight])")
    for is_slow, bg, weight in backgrounds:
        assert (bg == "rgb(255, 248, 225)" and weight == "600") == is_slow, backgrounds  # aten::relu did not change significantly
    drv.find_element(By.CSS_SELECTOR, '#cmp-table-operator .ag-header-cell[col-id="delta"]').click()
    deltas = wait_for(drv, f"const d = {GRID_COLUMN}('cmp-table-operator', 'delta'); return d && Number(d[0]) < 0 && d.map(Number)",
                      what="sorted by Δ")
    assert deltas == sorted(deltas) and drv.execute_script(f"return {GRID_COLUMN}('cmp-table-operator', 'key')")[0] == "aten::relu"
    drv.find_element(By.XPATH, "//div[@id='cmp-tabs']//*[contains(text(), 'Kernels')]").click()
    assert wait_for(drv, f"return {GRID_COLUMN}('cmp-table-kernel', 'key')", what="kernel deltas") == ["slow_k"]
    drv.find_element(By.XPATH, "//div[@id='cmp-tabs']//*[contains(text(), 'Source lines')]").click()
    wait_for(drv, f"return {GRID_COLUMN}('cmp-table-source_line', 'key')", what="source-line deltas")
    choose(drv, "cmp-step", "step 2")
    wait_for(drv, "const e = document.getElementById('cmp-test-caption'); return e && e.innerText.includes('step 2')", what="step 2")
    errors = drv.execute_script("return document.getElementById('error').innerText")
    assert not errors.strip(), errors
    out = REPO / "test-artifacts"
    out.mkdir(exist_ok=True)
    drv.execute_script("window.scrollTo(0, 0)")
    drv.save_screenshot(str(out / "compare.png"))
    assert (out / "compare.png").stat().st_size > 20_000
    assert drv.execute_script("return document.getElementById('status').offsetParent === null")  # explore's status line hidden

    # the same run twice is a message, not a crash; swapping the runs turns the verdict around
    choose(drv, "cmp-test", "0: base")
    wait_for(drv, "return document.getElementById('error').innerText.includes('same run')", what="same-run message")
    choose(drv, "cmp-base", "1: test")
    wait_for(drv, "const e = document.getElementById('cmp-verdict-badge'); return e && e.innerText === 'FASTER'", what="FASTER")
    wait_for(drv, f"const e = document.getElementById('cmp-base-caption'); return e && e.innerText.includes('{duration(13_200_000)}')",
             what="base timeline now run 1")
    assert not drv.execute_script("return document.getElementById('error').innerText").strip()
