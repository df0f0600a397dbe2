"""The dashboard's view of many ranks (dashboard/ranks_view.py): a rank x step heatmap of step
time for runs with more than 8 ranks, and the view a click on a cell opens.

A hand-built 12-rank run: every rank runs 3 profiler steps of 100 us from t = 0, 100, 200 us,
except rank 7, whose step 2 takes 400 us (its step 3 starts at 500 us). A 2-rank run gets no
heatmap.
"""

from __future__ import annotations

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import ranks_view
from neuron_explorer.dashboard.runs import RunSet
from neuron_explorer.dashboard.ui.panels import CallbackInputError

from .conftest import X, write_trace

BASE = 1_700_000_000_000_000_000
SLOW_RANK, SLOW_STEP = 7, 2


def rank_events(rank: int) -> list[dict]:
    ev, t = [], 0
    for s in (1, 2, 3):
        dur = 400 if (rank, s) == (SLOW_RANK, SLOW_STEP) else 100
        ev += [X(f"ProfilerStep#{s}", "user_annotation", t, dur), X(f"work_r{rank}", "cpu_op", t + 10, dur - 20)]
        t += dur
    return ev


def write_ranks(dir_, n: int):
    for r in range(n):
        write_trace(dir_ / f"rank{r}.json", rank_events(r), baseTimeNanoseconds=BASE, distributedInfo={"rank": r, "world_size": n})
    return dir_


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ranks_view")
    twelve = import_traces(write_ranks(tmp / "t12", 12), tmp / "r12").run_dir
    two = import_traces(write_ranks(tmp / "t2", 2), tmp / "r2").run_dir
    rs = RunSet([twelve, two])
    yield rs
    rs.close()


def test_step_grid_is_step_time_per_rank_and_step(runs):
    g = ranks_view.step_grid(runs, 0)
    assert g["ranks"] == list(range(12)) and g["steps"] == [1, 2, 3]
    want = [[0.1, 0.4 if r == SLOW_RANK else 0.1, 0.1] for r in range(12)]
    assert g["ms"] == want
    assert g["cells"][(SLOW_RANK, 3)] == (BASE + 500_000, 100_000)


def test_heatmap_only_for_more_than_eight_ranks(runs):
    fig = ranks_view.heatmap_figure(runs, 0)
    (hm,) = fig["data"]
    assert hm["type"] == "heatmap" and list(hm["y"]) == list(range(12)) and list(hm["x"]) == [1, 2, 3]
    # the hottest cell is rank 7's step 2
    flat = [(v, r, s) for r, row in zip(hm["y"], hm["z"]) for s, v in zip(hm["x"], row)]
    assert max(flat) == (0.4, SLOW_RANK, SLOW_STEP)
    assert ranks_view.heatmap_figure(runs, 1) is None
    card = ranks_view.layout(runs, 1)
    assert card.style == {"display": "none"}
    assert "rank-heatmap'" not in str(card)  # no hidden graph for the browser to draw before the timeline
    # the many-rank page keeps the heatmap's space and caption; the graph comes once the timeline is painted
    card = ranks_view.layout(runs, 0)
    assert card.style is None and "click a cell" in str(card) and "rank-heatmap'" not in str(card)
    assert f"'height': '{fig['layout']['height']}px'" in str(card)
    # the timeline of a many-rank run opens on its first rank; of a few ranks, on all of them
    assert ranks_view.first_rank(runs, 0) == 0 and ranks_view.first_rank(runs, 1) == "all"


def test_a_click_on_a_cell_opens_that_rank_at_that_step(runs):
    click = {"points": [{"x": SLOW_STEP, "y": SLOW_RANK, "z": 0.4}]}
    view = ranks_view.cell_view(runs, 0, click)
    assert view["rank"] == SLOW_RANK and (view["t0"], view["t1"]) == (BASE + 100_000, BASE + 500_000)
    # the timeline of that view holds that rank's lanes only
    from neuron_explorer.dashboard.app import timeline_figure

    fig, status = timeline_figure(runs, view, 1200, None)
    ticks = list(fig["layout"]["yaxis"]["ticktext"])
    assert ticks and all(t.startswith(f"r{SLOW_RANK} ") for t in ticks), ticks
    assert status.startswith("0.400 ms")
    with pytest.raises(CallbackInputError, match="rank 3 has no step 9"):
        ranks_view.cell_view(runs, 0, {"points": [{"x": 9, "y": 3}]})
    with pytest.raises(CallbackInputError, match="no cell"):
        ranks_view.cell_view(runs, 0, {"points": []})


def test_one_ranks_timeline_of_a_many_rank_run_reads_that_rank_alone_and_draws_the_same(runs, monkeypatch):
    """The first view of a run of many ranks is one rank's timeline: read from that rank's
    partition (its longest events, lanes, steps), with the whole run's window and time origin,
    the same arrays as when every rank's events are read."""
    from neuron_explorer.dashboard import runs as runs_mod
    from neuron_explorer.dashboard import timeline as tl_mod
    from neuron_explorer.dashboard.timeline import timeline

    got = timeline(runs, 0, rank=SLOW_RANK, width=600)
    scoped = runs.get(0).of_rank(SLOW_RANK)
    assert scoped.run.view_ranks == [SLOW_RANK]
    assert set(scoped.long_events()[1]["rank"].to_pylist()) == {SLOW_RANK}
    # the whole run's window: every rank starts at 0 and rank 7 ends last, at 600 us
    assert (got["run_start"], got["run_end"]) == (BASE, BASE + 600_000) and got["t0"] == BASE
    assert [ln["rank"] for ln in got["lanes"]] == [SLOW_RANK] and got["visible_events"] == 6
    assert [(s["step"], s["x0"], s["x1"]) for s in got["steps"]] == [(1, 0.0, 100.0), (2, 100.0, 500.0), (3, 500.0, 600.0)]
    monkeypatch.setattr(runs_mod, "SCOPED_RANKS", 100)
    monkeypatch.setattr(tl_mod, "SCOPED_RANKS", 100)
    fresh = RunSet([runs.get(0).path])
    try:
        assert timeline(fresh, 0, rank=SLOW_RANK, width=600) == got
    finally:
        fresh.close()


def _no_scan(monkeypatch):
    """Any query of the run's events through the dashboard's runs fails the test."""
    from neuron_explorer.dashboard import runs as runs_mod

    def refuse(self, sql, params=None):
        raise AssertionError(f"scanned the run: {sql[:80]}")
    monkeypatch.setattr(runs_mod.OpenRun, "query", refuse)
    monkeypatch.setattr(runs_mod.OpenRun, "arrow", refuse)


def test_the_heatmap_and_the_runs_span_of_a_second_open_scan_no_events(runs, monkeypatch):
    """What the first page of a many-rank run shows beyond its first rank's timeline: the heatmap's
    step times come from the manifest (store.manifest_steps, the same rows as the `steps` view), and the
    run's span (the time axis's origin) from each rank's span stored beside the run at the first open."""
    from neuron_explorer.store import manifest_steps

    path = runs.get(0).path
    assert runs.get(0).span() == (BASE, BASE + 600_000)  # computed and stored (or read) by the module's RunSet
    want = [tuple(r) for r in runs.get(0).run.sql("SELECT rank, step, ts_ns, dur_ns, event_id FROM steps ORDER BY rank, step").fetchall()]
    assert manifest_steps(runs.get(0).run) == want and len(want) == 36
    fresh = RunSet([path])
    try:
        _no_scan(monkeypatch)
        g = ranks_view.step_grid(fresh, 0)
        assert g["ms"][SLOW_RANK] == [0.1, 0.4, 0.1] and g["cells"][(SLOW_RANK, 3)] == (BASE + 500_000, 100_000)
        assert fresh.get(0).span() == (BASE, BASE + 600_000)
    finally:
        fresh.close()


def test_a_manifest_that_does_not_list_every_step_is_not_used(runs, tmp_path):
    """A rank entry whose steps do not match its count of step events (a manifest another tool wrote or
    edited): the heatmap reads the `steps` view, and shows the same grid."""
    import json
    import shutil

    from neuron_explorer.store import manifest_steps

    copy = tmp_path / "r12"
    shutil.copytree(runs.get(0).path, copy)
    m = json.loads((copy / "manifest.json").read_text())
    m["ranks"][3]["steps"] = m["ranks"][3]["steps"][:1]
    (copy / "manifest.json").write_text(json.dumps(m))
    rs = RunSet([copy])
    try:
        assert manifest_steps(rs.get(0).run) is None
        assert ranks_view.step_grid(rs, 0)["ms"] == ranks_view.step_grid(runs, 0)["ms"]
    finally:
        rs.close()


def test_manifest_steps_equal_the_steps_view_on_a_real_two_rank_trace(tmp_path):
    from pathlib import Path

    from neuron_explorer.store import manifest_steps, open_run

    run_dir = import_traces(Path(__file__).parent / "data" / "traces" / "multirank_128", tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        want = [tuple(r) for r in run.sql("SELECT rank, step, ts_ns, dur_ns, event_id FROM steps ORDER BY rank, step").fetchall()]
        assert manifest_steps(run) == want and len(want) == 4
        one = run.with_ranks([1])
        try:
            assert manifest_steps(one) == [r for r in want if r[0] == 1]
        finally:
            one.close()


def test_manifest_steps_equal_the_steps_view_on_a_live_run(tmp_path):
    """The live collector lists its steps in the manifest the same way (collectors/rank_entry)."""
    from neuron_explorer.demo import train_demo
    from neuron_explorer.store import manifest_steps, open_run

    with open_run(train_demo(tmp_path / "demo")) as run:
        assert run.manifest["source"] == "live"
        want = [tuple(r) for r in run.sql("SELECT rank, step, ts_ns, dur_ns, event_id FROM steps ORDER BY rank, step").fetchall()]
        assert manifest_steps(run) == want and len(want) >= 2
