"""Many ranks: a rank x step heatmap of step time, shown above the timeline when a run has more
than MANY_RANKS ranks; the timeline then opens on the first rank (`first_rank`). Clicking a cell
opens that rank's timeline (the rank picker set to it) at that step.

`step_grid` is the one query (the `steps` view: per rank and profiler step, the step's span, as
docs/METRICS.md defines it; its rows are read from the manifest where it lists them,
store.manifest_steps, so that the first page scans no rank's events for it); `heatmap_figure`
draws it; `cell_view` is the click's callback body (plain functions, tested without a browser);
`register` wires them into the app.

The heatmap is drawn once the first timeline is painted (the "painted" store, set by
assets/timeline_keys.js, as the Overview waits for it): the page's layout holds the card, its
caption and a space of the heatmap's height, and the graph comes after. Drawn from the layout, a
256-rank heatmap took the browser's frames before the timeline's, and the server computed it
before it could send the first page.

The click sets the view (that rank, that step's window) and the rank picker, and keeps the
target in the `rank-jump` store; the picker's own callback (app.py) asks `keeps_view` and keeps
that view instead of resetting to the whole run.

Must not: query the run except through `step_grid`, or draw the timeline (timeline.py does).
"""

from __future__ import annotations

from ..store import manifest_steps
from .runs import RunSet

MANY_RANKS = 8
"""A run with more ranks than this opens with the rank x step heatmap."""


def step_grid(rs: RunSet, run) -> dict:
    """Step time per rank and step: {"ranks", "steps", "ms" (rows: ranks, columns: steps; None
    where a rank has no such step), "cells" {(rank, step): (ts_ns, dur_ns)}}. Cached per run."""
    r = rs.get(run)

    def compute() -> dict:
        listed = manifest_steps(r.run)  # no scan of every rank's events before the first page
        if listed is not None:
            rows = [row[:4] for row in listed]
        else:
            _, rows = r.query("SELECT rank, step, ts_ns, dur_ns FROM steps ORDER BY rank, step")
        ranks = sorted({int(x[0]) for x in rows})
        steps = sorted({int(x[1]) for x in rows})
        ri, si = {k: i for i, k in enumerate(ranks)}, {k: i for i, k in enumerate(steps)}
        ms = [[None] * len(steps) for _ in ranks]
        cells = {}
        for rank, step, ts, dur in rows:
            ms[ri[int(rank)]][si[int(step)]] = int(dur) / 1e6
            cells[(int(rank), int(step))] = (int(ts), int(dur))
        return {"ranks": ranks, "steps": steps, "ms": ms, "cells": cells}

    return r.cached("rank_step_grid", compute)


def is_many(rs: RunSet, run) -> bool:
    try:
        return len(rs.get(run).run.ranks) > MANY_RANKS
    except Exception:  # noqa: BLE001 - a bad run index: no heatmap (the other panels say what is wrong)
        return False


def first_rank(rs: RunSet, run):
    """The rank picker's first choice: "all" ranks, or for a many-rank run its first rank (the
    heatmap shows them all; a timeline of every rank of a large job is neither readable nor quick)."""
    if not is_many(rs, run):
        return "all"
    return rs.get(run).run.ranks[0]


def heatmap_figure(rs: RunSet, run) -> dict | None:
    """The heatmap (ranks on y, steps on x, colour: step time in ms) as a plain figure dict, or None
    for a run with at most MANY_RANKS ranks. A dict, as the timeline's (figure.py): plotly's
    figure classes load and check their property validators at the first figure (0.3-0.6 s of CPU),
    which the first page of a many-rank run would wait for."""
    if not is_many(rs, run):
        return None
    g = step_grid(rs, run)
    heat = {"type": "heatmap", "z": g["ms"], "x": g["steps"], "y": g["ranks"], "colorscale": "Viridis",
            "colorbar": {"title": {"text": "ms"}}, "hovertemplate": "rank %{y} · step %{x}<br>%{z:,.2f} ms<extra></extra>",
            "xgap": 1 if len(g["steps"]) < 200 else 0}
    layout = {"height": heatmap_height(len(g["ranks"])), "margin": {"l": 60, "r": 20, "t": 10, "b": 40},
              "xaxis": {"title": {"text": "step"}, "type": "category" if len(g["steps"]) <= 60 else "linear"},
              "yaxis": {"title": {"text": "rank"}, "autorange": "reversed"}, "plot_bgcolor": "#FFF"}
    return {"data": [heat], "layout": layout}


def heatmap_height(ranks: int) -> int:
    """The heatmap's height in pixels for `ranks` rows (the space the first page keeps for it)."""
    return min(560, 180 + 2 * ranks)


def cell_view(rs: RunSet, run, click) -> dict:
    """The view after a click on a heatmap cell: that rank only, the window of that step."""
    from .ui.guard import CallbackInputError

    try:
        p = click["points"][0]
        rank, step = int(p["y"]), int(p["x"])
    except (TypeError, KeyError, IndexError, ValueError):
        raise CallbackInputError("heatmap click has no cell") from None
    g = step_grid(rs, run)
    if (rank, step) not in g["cells"]:
        raise CallbackInputError(f"rank {rank} has no step {step}")
    ts, dur = g["cells"][(rank, step)]
    return {"run": rs.get(run).index, "rank": rank, "t0": ts, "t1": ts + max(dur, 1), "finding": None, "step": step}


def layout(rs: RunSet, run=0):
    """The heatmap card of the first page: for a many-rank run its caption and a space of the
    heatmap's height (the graph is drawn after the timeline: `register`); hidden otherwise."""
    from dash import dcc, html

    many = is_many(rs, run)
    body = _heatmap_caption() + [html.Div(style={"height": f"{heatmap_height(len(rs.get(run).run.ranks))}px"})] if many else []
    return html.Div([html.Div(body, id="rank-heatmap-body"), dcc.Store(id="rank-jump")],
                    id="rank-heatmap-card", className="nx-card", style=None if many else {"display": "none"})


def _heatmap_caption() -> list:
    from dash import html

    return [html.Div("step time per rank: click a cell to open that rank's timeline at that step", className="nx-muted")]


def _heatmap_body(fig) -> list:
    """The heatmap card's caption and graph; nothing for a run with few ranks (no hidden graph for the
    browser to draw)."""
    from dash import dcc

    from .ui.theme import GRAPH_CONFIG

    if fig is None:
        return []
    return _heatmap_caption() + [dcc.Graph(id="rank-heatmap", figure=fig, config=GRAPH_CONFIG)]


def register(app, rs: RunSet) -> None:
    from dash import Input, Output, State, no_update

    from ..errors import NeuronExplorerError

    # drawn once the first timeline is painted ("painted"), and again for another run
    @app.callback(Output("rank-heatmap-body", "children"), Output("rank-heatmap-card", "style"), Input("run-select", "value"),
                  Input("painted", "data"), prevent_initial_call=True)
    def _heatmap(run, _painted):
        fig = heatmap_figure(rs, run)
        return _heatmap_body(fig), (None if fig is not None else {"display": "none"})

    @app.callback(Output("rank-select", "value", allow_duplicate=True), Output("view", "data", allow_duplicate=True),
                  Output("rank-jump", "data"), Output("error", "children", allow_duplicate=True),
                  Input("rank-heatmap", "clickData", allow_optional=True), State("rank-select", "value"), State("run-select", "value"),
                  prevent_initial_call=True)
    def _jump(click, rank, run):
        if click is None:  # the heatmap was drawn (another run opened), not clicked
            return no_update, no_update, no_update, no_update
        try:
            target = cell_view(rs, run, click)
        except NeuronExplorerError as e:
            return no_update, no_update, no_update, f"⚠ {e}"
        return (no_update if rank == target["rank"] else target["rank"]), target, target, ""


def keeps_view(current, jump, rank) -> bool:
    """Whether the rank picker's change is the one a heatmap click made (the view is already
    that click's step window on that rank): then the app keeps the view instead of resetting it
    to the whole run."""
    return isinstance(current, dict) and isinstance(jump, dict) and current == jump and jump.get("rank") == rank
