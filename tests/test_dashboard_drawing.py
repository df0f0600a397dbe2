"""What the timeline and the tables print and draw (issue 35, item 7): figures in the report's
formats (fmt.duration, fmt.share), a "device % of step" that cannot exceed the step, and the
highlight and critical-path marks drawn along the foot of a row, where they cover no slice name."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from neuron_explorer import fmt
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import app as dash_app
from neuron_explorer.dashboard import figure
from neuron_explorer.dashboard.runs import RunSet
from neuron_explorer.dashboard.views import navigate, tables
from neuron_explorer.dashboard.views.events import briefs

from .conftest import TRACES, X, write_trace
from .test_dashboard import BASE, US, eid, made, rs  # noqa: F401  (fixtures)

# one step, 100 µs; two kernels on two streams of device 0 overlap:
#   stream 7:      20 ............ 80 k1
#   stream 8:          30 ............ 90 k2
# device work added up: 60 + 60 = 120 µs (120% of the step); busy (their union): 20..90 = 70 µs (70%)
TWO_STREAMS = [
    X("ProfilerStep#1", "user_annotation", 0, 100),
    X("cudaLaunchKernel", "cuda_runtime", 5, 2, correlation=1),
    X("cudaLaunchKernel", "cuda_runtime", 8, 2, correlation=2),
    X("k1", "kernel", 20, 60, pid=0, tid=7, correlation=1, stream=7, device=0),
    X("k2", "kernel", 30, 60, pid=0, tid=8, correlation=2, stream=8, device=0),
]


def test_device_share_of_a_step_counts_overlapping_streams_once(tmp_path: Path):
    run = import_traces(write_trace(tmp_path / "t.json", TWO_STREAMS), tmp_path / "run").run_dir
    got = tables.steps(RunSet([run]), run=0)
    (row,) = got["rows"]
    assert (row["dur_ns"], row["device_ns"], row["busy_ns"], row["device_pct"]) == (100 * US, 120 * US, 70 * US, 70.0)
    assert "exceeds the step's time in 1 of 1 steps" in got["note"]  # the added-up work still says so
    assert "at most 100%" in got["shares"]["device_pct"]


@pytest.mark.skipif(not (TRACES / "mi300x_ddp_resnet_act_checkpoint.json.gz").exists(), reason="trace missing")
def test_device_share_of_a_step_on_a_real_trace(tmp_path: Path):
    """The MI300X DDP run overlaps compute and NCCL streams: device work added up is 136.6% of
    step 15 (22.95 ms in 16.80 ms); the busy union is 14.52 ms, 86.4%."""
    run = import_traces(TRACES / "mi300x_ddp_resnet_act_checkpoint.json.gz", tmp_path / "run").run_dir
    rows = {x["step"]: x for x in tables.steps(RunSet([run]), run=0)["rows"]}
    s15 = rows[15]
    assert (s15["dur_ns"], s15["device_ns"], s15["busy_ns"], s15["device_pct"]) == (16_798_984, 22_949_370, 14_517_139, 86.4)
    assert all(x["busy_ns"] <= x["dur_ns"] and x["device_pct"] <= 100 for x in rows.values())


def test_shares_have_one_decimal_as_the_report_writes_them(rs):  # noqa: F811
    ops = tables.operators(rs, run=0)["rows"]
    # device time: gemm 10 + bias 2 + relu_k 6 = 18 µs; aten::relu 6 µs = 33.3%, as fmt.share writes it
    relu = next(x for x in ops if x["name"] == "aten::relu")
    assert relu["device_pct"] == 33.3 and fmt.share(6 / 18) == "33.3%"


def _hover(fig: dict, event_id: int) -> str:
    for t in fig["data"]:
        if t.get("name") == "hit":
            return next(txt for e, txt in zip(t["customdata"], t["text"]) if e == event_id)
    raise AssertionError("no hit points")


def test_slice_hovers_use_the_reports_duration_format(rs):  # noqa: F811
    fig, _ = dash_app.timeline_figure(rs, {"run": 0, "rank": None, "t0": None, "t1": None}, 1000, None)
    assert _hover(fig, eid(rs, "ProfilerStep#1")).endswith("· 100.00 µs")
    assert _hover(fig, eid(rs, "gemm")).endswith("· 10.00 µs")
    assert _hover(fig, eid(rs, "cudaLaunchKernel", 14)).endswith("· 4.00 µs") and fmt.duration(4 * US) == "4.00 µs"


def _finite_ys(trace: dict) -> list[float]:
    ys = trace["y"]
    if isinstance(ys, dict):  # a typed array
        import base64
        ys = np.frombuffer(base64.b64decode(ys["bdata"]), dtype=np.dtype(ys["dtype"])).tolist()
    return [y for y in ys if y is not None and not math.isnan(y)]


def test_marks_run_along_the_foot_of_the_row_clear_of_slice_names(rs):  # noqa: F811
    """The highlight of a table row's instance and the critical path are drawn UNDERLINE_DY below the
    middle of their slice's row: below the slice's bar (±0.39 rows, where the name is written),
    above the next row's bar, and not as boxes over the slice."""
    half_line = 3 / figure.ROW_PX / 2  # half of the thickest mark line (3 px), in rows
    half_name = 0.8 * figure.LABEL_FONT_PX / figure.ROW_PX / 2  # a name's letters (cap height ~0.8 em) around the row's middle
    assert half_name < figure.UNDERLINE_DY - half_line and figure.UNDERLINE_DY + half_line < 1 - 0.39  # clear of this name and the next bar
    view = dash_app.table_jump(rs, "kernels", {"rowId": "1", "colId": "calls"}, 0, "all")
    fig, _ = dash_app.timeline_figure(rs, view, 1000, None)
    (relu,) = briefs(rs, 0, [eid(rs, "relu_k")])
    marked = next(t for t in fig["data"] if t["name"] == "highlighted")
    assert _finite_ys(marked) and all(y == pytest.approx(relu["y"] + figure.UNDERLINE_DY, abs=1e-5) for y in _finite_ys(marked))

    whole = dash_app.view_for(rs, None, 0, "all", None, None, None)
    fig, _ = dash_app.timeline_figure(rs, whole, 1000, None, critical=True)
    band = next(t for t in fig["data"] if t["name"] == "critical path")
    segs = [s for s in navigate.critical_path(rs, run=0, t0=BASE, t1=BASE + 100 * US)["segments"] if s["event_id"] is not None]
    assert band["x"].count(None) == len(segs) and len(band["x"]) == 3 * len(segs)  # one line per segment: no box
    rows = {y for y in band["y"] if y is not None}
    drawn_rows = {e["y"] for e in briefs(rs, 0, [s["event_id"] for s in segs])}
    assert sorted(rows) == pytest.approx(sorted(y + figure.UNDERLINE_DY for y in drawn_rows))
