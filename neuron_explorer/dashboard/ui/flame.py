"""The Flame tab drawn: the icicle of views/flame.py's call paths, its headline, the step picker.

Must not: query the run (views/flame.py does).
"""

from __future__ import annotations

from ..runs import RunSet
from ..views.flame import flame
from .theme import GRAPH_CONFIG


def figure(data: dict) -> dict:
    """A plotly icicle of `flame`'s answer: boxes sized by time, hover with ms, calls and share."""
    total = data["total_ns"] or 1
    custom = [[v / 1e6, c, 100.0 * v / total, lvl] for v, c, lvl in zip(data["values"], data["counts"], data["levels"])]
    trace = {"type": "icicle", "ids": data["ids"], "labels": data["labels"], "parents": data["parents"], "values": data["values"],
             "branchvalues": "total", "customdata": custom, "tiling": {"orientation": "v"}, "sort": True,
             "hovertemplate": "<b>%{label}</b><br>%{customdata[3]}: %{customdata[0]:,.3f} ms · %{customdata[1]:,} events · "
                              "%{customdata[2]:.1f}% of the root<extra></extra>",
             "texttemplate": "%{label}<br>%{customdata[0]:,.3f} ms", "root": {"color": "#ECEFF1"}}
    return {"data": [trace], "layout": {"margin": {"l": 4, "r": 4, "t": 4, "b": 4}, "height": 520}}


def register(app, rs: RunSet) -> None:
    """Wire the Flame tab's step picker (the tab's content comes from `panel`)."""
    from dash import Input, Output, State

    from .guard import guard

    @app.callback(Output("flame-graph", "figure"), Output("flame-head", "children"), Output("error", "children", allow_duplicate=True),
                  Input("flame-step", "value", allow_optional=True), State("run-select", "value"), State("rank-select", "value"),
                  prevent_initial_call=True)
    @guard(2)
    def _flame_step(step, run, rank):
        data = flame(rs, run=run, rank=rank, step=step)
        return figure(data), headline(data)


def headline(data: dict) -> str:
    """What the Flame tab says above the icicle."""
    what = "device time (kernels, copies, sets)" if data["metric"] == "device" else "CPU time of the top-level operators"
    where = f"step {data['step']}" if data["step"] is not None else "the window"
    return (f"{where}: {data['total_ns'] / 1e6:,.3f} ms of {what}, by call path ({' → '.join(data['levels'])}); "
            "click a box to zoom into it")


def panel(rs: RunSet, run, rank, step=None):
    """The Flame tab: the icicle of one step's time by call path (views/flame.py), with a step picker."""
    from dash import dcc, html

    data = flame(rs, run=run, rank=rank, step=step)
    head = headline(data)
    return html.Div([
        html.Div([html.Span("step", className="nx-muted"),
                  html.Div(dcc.Dropdown(id="flame-step", options=[{"label": f"step {s}", "value": s} for s in data["steps"]],
                                        value=data["step"], clearable=False), style={"width": 160}),
                  html.Span(head, className="nx-muted", id="flame-head")], style={"display": "flex", "gap": "10px", "alignItems": "center"}),
        dcc.Graph(id="flame-graph", figure=figure(data), config=GRAPH_CONFIG),
    ])
