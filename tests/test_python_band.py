"""The timeline folds each thread's Python frames onto one band (issue 15): a run recorded with
stacks has a Python frame around every operator, dozens deep, and the operators are what a person
reads. With the band the outermost frames are drawn on one row and the operators keep only their
nesting among themselves; "Python frames nested" shows every frame on its own row again."""

from __future__ import annotations

from pathlib import Path

import duckdb

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard.app import timeline_figure
from neuron_explorer.dashboard.chain import event as event_chain
from neuron_explorer.dashboard.runs import RunSet
from neuron_explorer.dashboard.timeline import timeline_arrays

from .conftest import X, write_trace

#   thread 1:  <module> ............................................. (python, depth 0)
#                step ............................................  (python, depth 1)
#                  aten::linear ......        relu (python) .....    (depth 2)
#                    aten::addmm ...            aten::relu ...       (depth 3)
#   thread 2:  aten::copy_ (no Python frames: no band)
EVENTS = [
    X("train.py(12): <module>", "python_function", 0, 1000),
    X("train.py(5): step", "python_function", 10, 900),
    X("aten::linear", "cpu_op", 20, 280),
    X("aten::addmm", "cpu_op", 30, 170),
    X("torch/nn/functional.py(1500): relu", "python_function", 400, 400),
    X("aten::relu", "cpu_op", 410, 90),
    X("aten::copy_", "cpu_op", 100, 50, tid=2),
]


def _run(tmp: Path) -> Path:
    return import_traces(write_trace(tmp / "t.json", EVENTS), tmp / "run").run_dir


def test_python_ancestors_count_the_python_frames_around_each_slice(tmp_path: Path):
    run = _run(tmp_path)
    got = dict(duckdb.sql(f"SELECT name, python_ancestors FROM '{run}/rank=0/events.parquet'").fetchall())
    assert got == {"train.py(12): <module>": 0, "train.py(5): step": 1, "aten::linear": 2, "aten::addmm": 2,
                   "torch/nn/functional.py(1500): relu": 2, "aten::relu": 3, "aten::copy_": 0}


def _rows(tl: dict) -> dict[str, int]:
    """Each slice's row within its lane."""
    lanes = sorted(tl["lanes"], key=lambda ln: ln["y0"])
    out = {}
    for name, y in zip(tl["slices"]["name"], tl["slices"]["y"]):
        lane = max((ln for ln in lanes if ln["y0"] <= y), key=lambda ln: ln["y0"])
        out[name] = int(y) - lane["y0"]
    return out


def test_python_frames_fold_onto_one_band_and_unfold(tmp_path: Path):
    rs = RunSet([_run(tmp_path)])
    tl = timeline_arrays(rs, run=0, width=800)
    assert [(ln["b"], ln["rows"], ln["python_band"]) for ln in tl["lanes"]] == [(1, 3, True), (2, 1, False)]
    # the band holds the outermost frame only: the frames inside it would lie over it on the same row
    assert _rows(tl) == {"train.py(12): <module>": 0, "aten::linear": 1, "aten::addmm": 2, "aten::relu": 1, "aten::copy_": 0}

    rs.get(0).python_band = False  # "Python frames nested"
    tl = timeline_arrays(rs, run=0, width=800)
    assert [(ln["b"], ln["rows"], ln["python_band"]) for ln in tl["lanes"]] == [(1, 4, False), (2, 1, False)]
    assert _rows(tl) == {"train.py(12): <module>": 0, "train.py(5): step": 1, "torch/nn/functional.py(1500): relu": 2,
                         "aten::linear": 2, "aten::addmm": 3, "aten::relu": 3, "aten::copy_": 0}


def test_a_selected_event_is_outlined_on_its_folded_row(tmp_path: Path):
    """The row given to a clicked event (its outline, its flows, the highlights) is the row its slice
    is drawn on, in both layouts."""
    rs = RunSet([_run(tmp_path)])
    for band in (True, False):
        view = {"run": 0, "rank": None, "t0": None, "t1": None}
        fig, _ = timeline_figure(rs, view, 800, None, python_band=band)
        tl = timeline_arrays(rs, run=0, width=800)
        drawn = dict(zip(tl["slices"]["event_id"].tolist(), tl["slices"]["y"].tolist()))
        assert len(drawn) == (5 if band else 7)
        for eid, y in drawn.items():
            assert event_chain(rs, run=0, event_id=eid)["y"] == y, (band, eid)


#   thread 1:  neuron_explorer/cli.py(40): main ...................... (the tool, depth 0)
#                <frozen runpy>(88): _run_code ......................   (the tool, depth 1)
#                  train.py(12): <module> .........................     (user, depth 2)
#                    aten::linear ....   neuron_explorer/x.py(3): f     (depth 3; a tool frame inside the user's code)
#                      aten::addmm ..                                   (depth 4)
TOOL_EVENTS = [
    X("neuron_explorer/cli.py(40): main", "python_function", 0, 1000),
    X("<frozen runpy>(88): _run_code", "python_function", 5, 990),
    X("train.py(12): <module>", "python_function", 10, 900),
    X("aten::linear", "cpu_op", 20, 280),
    X("aten::addmm", "cpu_op", 30, 170),
    X("neuron_explorer/x.py(3): f", "python_function", 400, 100),
    X("aten::copy_", "cpu_op", 100, 50, tid=2),
]


def test_nested_frames_hide_the_tools_own_frames_and_move_the_users_up(tmp_path: Path):
    """Issue 35: with "Python frames nested" the frames of the CLI and runpy that ran the script are
    not drawn and the user's outermost frame is on row 0; "tool's frames" shows them again."""
    run = import_traces(write_trace(tmp_path / "t.json", TOOL_EVENTS), tmp_path / "run").run_dir
    rs = RunSet([run])
    rs.get(0).python_band = False
    tl = timeline_arrays(rs, run=0, width=800)
    assert [(ln["b"], ln["rows"]) for ln in tl["lanes"]] == [(1, 3), (2, 1)]
    assert _rows(tl) == {"train.py(12): <module>": 0, "aten::linear": 1, "aten::addmm": 2, "aten::copy_": 0}
    for eid, y in zip(tl["slices"]["event_id"].tolist(), tl["slices"]["y"].tolist()):
        assert event_chain(rs, run=0, event_id=eid)["y"] == y  # a click outlines the slice where it is drawn

    rs.get(0).show_tool_frames = True
    tl = timeline_arrays(rs, run=0, width=800)
    assert [(ln["b"], ln["rows"]) for ln in tl["lanes"]] == [(1, 5), (2, 1)]
    assert _rows(tl) == {"neuron_explorer/cli.py(40): main": 0, "<frozen runpy>(88): _run_code": 1, "train.py(12): <module>": 2,
                         "aten::linear": 3, "aten::addmm": 4, "neuron_explorer/x.py(3): f": 3, "aten::copy_": 0}

    rs.get(0).python_band = True  # the band is not changed by the choice: its one row is the outermost frame
    tl = timeline_arrays(rs, run=0, width=800)
    assert _rows(tl)["neuron_explorer/cli.py(40): main"] == 0


def test_tool_frames_are_hidden_on_the_scan_path_too(tmp_path: Path, monkeypatch):
    """With all but the 2 longest events left to the window scan of the events table (runs.LONG_EVENTS),
    the hidden frames and the rows are the same as when every event is held in memory."""
    import neuron_explorer.dashboard.runs as runs_mod

    monkeypatch.setattr(runs_mod, "LONG_EVENTS", 2)
    run = import_traces(write_trace(tmp_path / "t.json", TOOL_EVENTS), tmp_path / "run").run_dir
    rs = RunSet([run])
    rs.get(0).python_band = False
    assert rs.get(0).long_events()[0] >= 0  # a real threshold: the scan path
    tl = timeline_arrays(rs, run=0, width=800)
    assert _rows(tl) == {"train.py(12): <module>": 0, "aten::linear": 1, "aten::addmm": 2, "aten::copy_": 0}
