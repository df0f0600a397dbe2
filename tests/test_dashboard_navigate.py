"""Moving around the timeline from elsewhere (dashboard/navigate.py) on the hand-built trace of
test_dashboard.py, whose answers are known:

    host pid 1 / tid 1, us after BASE:
    0 ................................................................. 100  ProfilerStep#1
     1 ............................................................... 99   train.py(5): step_fn
          10 ....................... 50 aten::linear            60 ..... 70 aten::relu
            12 ........... 40 aten::addmm                         62 64 launch
              14 18 launch             42 45 launch
    device 0 / stream 7:
                  20 ... 30 gemm            46 48 bias                65 ... 71 relu_k
"""

from __future__ import annotations

import base64

import numpy as np
import pytest

from neuron_explorer.dashboard import app as dash_app
from neuron_explorer.dashboard.runs import QueryError
from neuron_explorer.dashboard.views import navigate
from neuron_explorer.errors import NeuronExplorerError

from .test_dashboard import BASE, US, eid, made, rs  # noqa: F401  (fixtures)


def test_a_table_row_jumps_to_its_heaviest_instance(rs):
    j = navigate.jump(rs, run=0, table="operators", name="aten::linear")
    # its own length (40 us) on each side of the heaviest (and only) call
    assert (j["count"], j["event_id"], j["t0"], j["t1"]) == (1, eid(rs, "aten::linear"), BASE - 30 * US, BASE + 90 * US)
    assert navigate.jump(rs, run=0, table="kernels", name="gemm", kind="kernel")["event_id"] == eid(rs, "gemm")
    # a source line: the top-level operators of its statement (linear 40 us, relu 10 us)
    line = navigate.jump(rs, run=0, table="lines", source="train.py:5")
    assert (line["count"], line["event_id"]) == (2, eid(rs, "aten::linear"))
    assert [e["name"] for e in navigate.instances(rs, 0, "lines", line["key"], BASE, BASE + 100 * US)] == ["aten::linear", "aten::relu"]
    assert [e["name"] for e in navigate.instances(rs, 0, "lines", line["key"], BASE + 55 * US, BASE + 100 * US)] == ["aten::relu"]
    step = navigate.jump(rs, run=0, table="steps", step=1, rank=0)
    assert (step["event_id"], step["dur_ns"]) == (eid(rs, "ProfilerStep#1"), 100 * US)
    with pytest.raises(QueryError):
        navigate.jump(rs, run=0, table="operators", name="aten::nothing")
    with pytest.raises(QueryError):
        navigate.jump(rs, run=0, table="memory", name="x")


def test_a_row_click_opens_the_window_selects_and_highlights(rs):
    # the grid reports the row's index in the rows it was given; row 1 of the kernels table is relu_k
    view = dash_app.table_jump(rs, "kernels", {"rowId": "1", "colId": "calls"}, 0, "all")
    assert view["jump"]["event_id"] == eid(rs, "relu_k") and (view["t0"], view["t1"]) == (BASE + 55 * US, BASE + 81 * US)
    fig, _ = dash_app.timeline_figure(rs, view, 1000, view["jump"]["event_id"])
    marked = next(t for t in fig["data"] if t["name"] == "highlighted")
    assert set(marked["customdata"]) == {eid(rs, "relu_k")}
    # the mark stays while the user zooms around it
    z = dash_app.view_for(rs, "timeline", 0, "all", {"xaxis.range": [0.060, 0.075]}, None, view)
    assert z["mark"] == view["mark"]
    with pytest.raises(NeuronExplorerError):
        dash_app.table_jump(rs, "kernels", {"rowId": "7"}, 0, "all")


def test_area_selection_aggregates_per_name(rs):
    host, dev = rs.get(0).lanes(None, False)
    # the host lane from 15 to 45 us: each event's time inside the range, and its self time in the
    # same share (step_fn: self 98 - 40 - 10 = 48 us, 30 of its 98 us inside → 14.694 us)
    a = navigate.area(rs, run=0, t0=BASE + 15 * US, t1=BASE + 45 * US, y0=host.y0, y1=host.y0 + host.rows - 1)
    got = {x["name"]: (x["count"], x["total_ns"], x["self_ns"]) for x in a["rows"]}
    assert got == {"ProfilerStep#1": (1, 30 * US, 600), "train.py(5): step_fn": (1, 30 * US, 14694),
                   "aten::linear": (1, 30 * US, 6750), "aten::addmm": (1, 25 * US, 21429), "cudaLaunchKernel": (2, 6 * US, 6 * US)}
    assert a["lanes"] == [host.label] and a["names"] == 5 and not a["truncated"]
    # the device lane from 25 to 66 us: gemm's last 5 us, all of bias, relu_k's first 1 us
    d = navigate.area(rs, run=0, t0=BASE + 25 * US, t1=BASE + 66 * US, y0=dev.y0, y1=dev.y0)
    assert [(x["name"], x["total_ns"], x["self_ns"]) for x in d["rows"]] == [("gemm", 5 * US, 5 * US), ("bias", 2 * US, 2 * US),
                                                                              ("relu_k", 1 * US, 1 * US)]
    both = navigate.area(rs, run=0, t0=BASE + 25 * US, t1=BASE + 66 * US, y0=host.y0, y1=dev.y0)
    assert both["lanes"] == [host.label, dev.label] and {"gemm", "aten::relu"} <= {x["name"] for x in both["rows"]}
    with pytest.raises(QueryError):
        navigate.area(rs, run=0, t0=BASE + 5, t1=BASE + 5, y0=0, y1=3)


def test_critical_path_of_the_step_in_view_is_outlined(rs):
    cp = navigate.critical_path(rs, run=0, t0=BASE + 20 * US, t1=BASE + 40 * US)
    assert [(s["rank"], s["step"], s["charged_ns"]) for s in cp["steps"]] == [(0, 1, 100 * US)]  # the path is the step's length
    segs = cp["segments"]
    assert sum(s["charged_ns"] for s in segs) == 100 * US and [s["ts_ns"] for s in segs] == sorted(s["ts_ns"] for s in segs)
    view = dash_app.view_for(rs, None, 0, "all", None, None, None)
    fig, _ = dash_app.timeline_figure(rs, view, 1000, None, critical=True)
    outline = next(t for t in fig["data"] if t["name"] == "critical path")
    assert outline["x"].count(None) == len([s for s in segs if s["event_id"] is not None])  # one rectangle per charged segment
    assert not any(t["name"] == "critical path" for t in dash_app.timeline_figure(rs, view, 1000, None)[0]["data"])


def test_a_collapsed_process_group_is_one_row(rs):
    view = dash_app.view_for(rs, None, 0, "all", None, None, None)
    host, dev = rs.get(0).lanes(None, False)
    assert [o["value"] for o in dash_app.group_options(rs, 0)] == ["r0 pid 1", "r0 GPU 0"]
    fig, _ = dash_app.timeline_figure(rs, view, 1000, eid(rs, "gemm"), collapsed=["r0 pid 1"])
    ticks = dict(zip(fig["layout"]["yaxis"]["ticktext"], fig["layout"]["yaxis"]["tickvals"]))
    assert ticks == {"▸ r0 pid 1 (collapsed)": 0, dev.label: 2}  # the device lane moves up under the one host row
    ys = {}
    for t in fig["data"]:
        if t.get("meta") == "spans":
            y = np.frombuffer(base64.b64decode(t["y"]["bdata"]), np.float32 if t["y"]["dtype"] == "f4" else np.int32)
            for i, e in zip(y, t["customdata"]):  # one point per slice
                ys[e] = int(i)
    assert ys[eid(rs, "aten::addmm")] == ys[eid(rs, "ProfilerStep#1")] == 0 and ys[eid(rs, "gemm")] == 2
    sel = next(t for t in fig["data"] if t["name"] == "selected")
    assert min(sel["y"]) < 2 < max(sel["y"])  # the selected kernel, outlined on its moved row
    # an area on the collapsed row is an area on every lane of the group
    area = {"x0": 0.015, "x1": 0.045, "y0": 0, "y1": 0}
    got = dash_app.area_panel(rs, area, 0, "all", False, ["r0 pid 1"]).children[1].rowData
    want = dash_app.area_panel(rs, {**area, "y0": host.y0, "y1": host.y0 + host.rows - 1}, 0, "all", False).children[1].rowData
    assert got == want and {r["name"] for r in got} >= {"aten::linear", "aten::addmm"}


def test_a_flow_to_an_event_off_screen_points_there_and_jumps(rs):
    # the launch at 14-18 us is in the window 10-19 us; the kernel it launched (gemm, 20-30 us) is not
    launch = eid(rs, "cudaLaunchKernel", 14)
    view = {**dash_app.view_for(rs, None, 0, "all", None, None, None), "t0": BASE + 10 * US, "t1": BASE + 19 * US}
    fig, _ = dash_app.timeline_figure(rs, view, 1000, launch)
    arrow = next(a for a in fig["layout"]["annotations"] if a.get("axref") == "x")
    assert (arrow["ax"], arrow["x"]) == (pytest.approx(0.014), pytest.approx(0.019))  # pinned to the window's right edge
    mark = next(t for t in fig["data"] if t["name"] == "off-screen")
    assert mark["customdata"] == [[eid(rs, "gemm"), "jump"]] and mark["x"] == [pytest.approx(0.019)]
    click = {"points": [{"customdata": mark["customdata"][0], "x": mark["x"][0], "y": mark["y"][0]}]}
    assert dash_app.clicked_event(click) == eid(rs, "gemm") and dash_app.clicked_jump(click)
    there = dash_app.search_view(rs, 0, "all", eid(rs, "gemm"))
    assert there["t0"] <= BASE + 20 * US and there["t1"] >= BASE + 30 * US
    assert not dash_app.clicked_jump({"points": [{"customdata": launch}]})
