"""The Flame tab drawn: the flame graph of views/flame.py's call paths, its headline and controls
(step or steady steps, device or CPU time, search, the tool's own frames).

The tab's components are in the page from the start (`layout`), so that its callback never names
a component that is not there; the graph is filled when the tab is opened, on a run or rank
change and on every control. A click on a box zooms into it (plotly's own, in the browser) and
the headline says where the view is.

Must not: query the run (views/flame.py does).
"""

from __future__ import annotations

from ...fmt import duration, share
from ..runs import RunSet
from ..views.flame import METRICS, STEADY, flame
from .theme import GRAPH_CONFIG

KIND_COLORS = {"root": "#CFD8DC", "thread": "#CFD8DC", "step": "#B0BEC5", "python": "#BBDEFB", "user_annotation": "#D1C4E9",
               "cpu_op": "#C8E6C9", "runtime": "#FFE0B2", "kernel": "#FFCDD2", "memcpy": "#FFF59D", "memset": "#FFF59D"}
"""Box colours by event kind: light, under dark text (contrast over 10:1)."""
OTHER_COLOR = "#E0E0E0"
MATCH_COLOR = "#FFB300"
DIMMED_COLOR = "#F5F5F5"
TEXT_COLOR = "#1F2A36"
MAX_DEPTH = 14
"""Levels drawn at once; the deeper ones appear as a box is clicked."""
PATH_WORDS = "thread → profiler step → Python frames and modules → operators → runtime calls → kernels"


def figure(data: dict) -> dict:
    """A plotly icicle, root at the bottom (a flame graph): boxes sized by time; hover with the time,
    the pieces of work and the share of the root; boxes matching the search highlighted."""
    total = data["total_ns"] or 1
    searching = any(data["matched"])
    colors = [MATCH_COLOR if m else (DIMMED_COLOR if searching else KIND_COLORS.get(k, OTHER_COLOR))
              for k, m in zip(data["kinds"], data["matched"])]
    custom = [[duration(v), c, share(v / total), k] for v, c, k in zip(data["values"], data["counts"], data["kinds"])]
    trace = {"type": "icicle", "ids": data["ids"], "labels": data["labels"], "parents": data["parents"], "values": data["values"],
             "branchvalues": "total", "customdata": custom, "tiling": {"orientation": "v", "flip": "y"}, "sort": True,
             "maxdepth": MAX_DEPTH, "marker": {"colors": colors, "line": {"color": "#FFFFFF", "width": 1}},
             "insidetextfont": {"color": TEXT_COLOR}, "pathbar": {"visible": True, "side": "top", "textfont": {"color": TEXT_COLOR}},
             "hovertemplate": "<b>%{label}</b><br>%{customdata[3]}: %{customdata[0]} · %{customdata[1]:,} pieces of work · "
                              "%{customdata[2]} of the root<extra></extra>",
             "texttemplate": "%{label}<br>%{customdata[0]}"}
    return {"data": [trace], "layout": {"margin": {"l": 4, "r": 4, "t": 24, "b": 4}, "height": 560, "uirevision": None}}


def headline(data: dict) -> str:
    """What the Flame tab says above the graph: what was picked, its time, how it is cut, the search."""
    what = "device time (kernels, copies, sets) on the stack that launched it" if data["metric"] == "device" else \
        "CPU time (self time of every host slice) on its call stack"
    if data["step"] == STEADY:
        where = f"steady steps {', '.join(map(str, data['picked_steps']))}"
    elif data["step"] is not None:
        where = f"step {data['step']}"
    elif data.get("t0") is None:
        where = "the whole run (no profiler steps)"
    else:
        where = "the window"
    out = (f"{where}: {duration(data['total_ns'])} of {what} ({PATH_WORDS}; {len(data['ids']) - 1:,} boxes, "
           f"{data['depth']} levels deep). Click a box to zoom into it, the bar at the top to zoom out.")
    if data["boxes_cut"]:
        out += " Only the heaviest boxes are drawn."
    if data["text"]:
        out += (f" '{data['text']}': {data['matched_boxes']:,} boxes, {duration(data['matched_ns'])} "
                f"({share(data['matched_ns'] / data['total_ns']) if data['total_ns'] else '-'} of the root).")
    return out


def zoomed_to(entry: str | None, click) -> str | None:
    """The box the graph shows at its bottom after a click: the box clicked, or, for a click on the
    box already at the bottom, its parent (plotly zooms out); None for the root."""
    try:
        node = click["points"][0]["id"]
    except (TypeError, KeyError, IndexError):
        return entry
    if not isinstance(node, str):
        return entry
    if node == entry:
        node = node.rpartition("\x1f")[0]
    return node if "\x1f" in node else None


def zoom_words(data: dict, node: str | None) -> str:
    """Where the graph is zoomed to: the box's path, time and share of the root ('' for the root)."""
    if not node or node not in data["ids"]:
        return ""
    k = data["ids"].index(node)
    path = node.split("\x1f")
    return (f"zoomed to {' → '.join(path[-3:])}{' (and ' + str(len(path) - 3) + ' levels below the root)' if len(path) > 3 else ''}: "
            f"{duration(data['values'][k])}, {share(data['values'][k] / data['total_ns']) if data['total_ns'] else '-'} of the root")


def step_options(rs: RunSet, run, rank) -> tuple[list[dict], object]:
    """The step picker's choices (the steady steps, then each step) and its default (the middle step)."""
    from ..timeline import parse_rank

    r = rs.get(run)
    rk = parse_rank(r, rank)
    steps = sorted({s["step"] for s in r.steps() if rk is None or s["rank"] == rk})
    if not steps:
        return [{"label": "whole run", "value": ""}], ""
    return [{"label": "steady steps", "value": STEADY}] + [{"label": f"step {s}", "value": s} for s in steps], steps[(len(steps) - 1) // 2]


def layout():
    """The Flame tab's components (empty until the tab is opened)."""
    from dash import dcc, html

    return html.Div([
        html.Div([html.Span("steps", className="nx-muted"),
                  html.Div(dcc.Dropdown(id="flame-step", options=[], value=None, clearable=False), style={"width": 170, "flex": "0 0 auto"}),
                  dcc.RadioItems(id="flame-metric", options=[{"label": m, "value": m} for m in ("auto", *METRICS)], value="auto", inline=True,
                                 className="nx-radio nx-radio-light"),
                  dcc.Input(id="flame-search", type="text", debounce=True, placeholder="highlight by name, or /regex/ (Enter)",
                            className="nx-search-box", style={"width": 240}),
                  dcc.Checklist(id="flame-tool-frames", options=[{"label": "the tool's own frames", "value": "show"}], value=[], inline=True,
                                className="nx-radio nx-radio-light")],
                 style={"display": "flex", "gap": "10px", "alignItems": "center", "flexWrap": "wrap"}),
        html.Div(id="flame-head", className="nx-muted", style={"margin": "4px 0"}),
        html.Div(id="flame-zoom", className="nx-muted"),
        dcc.Graph(id="flame-graph", figure={"data": [], "layout": {"height": 80}}, config=GRAPH_CONFIG),
        dcc.Store(id="flame-data"), dcc.Store(id="flame-entry"),
    ], id="flame-tab")


def _flame(rs: RunSet, run, rank, step, metric, tool_frames, text) -> dict:
    return flame(rs, run=run, rank=rank, step=step if step not in (None, "") else None,
                 metric=None if metric in (None, "auto") else metric,
                 tool_frames=isinstance(tool_frames, list) and "show" in tool_frames, text=text)


def register(app, rs: RunSet) -> None:
    """Wire the Flame tab: fill it when it is opened and on every control; reset the step picker on a
    run or rank change; say where a click zoomed to."""
    from dash import Input, Output, State, ctx, no_update

    from .guard import guard

    @app.callback(Output("flame-step", "options"), Output("flame-step", "value"), Output("flame-graph", "figure"),
                  Output("flame-head", "children"), Output("flame-zoom", "children"), Output("flame-data", "data"),
                  Output("flame-entry", "data"), Output("error", "children", allow_duplicate=True),
                  Input("tabs", "value"), Input("run-select", "value"), Input("rank-select", "value"), Input("flame-step", "value"),
                  Input("flame-metric", "value"), Input("flame-tool-frames", "value"), Input("flame-search", "value"),
                  State("flame-data", "data"), prevent_initial_call=True)
    @guard(7)
    def _flame_tab(tab, run, rank, step, metric, tool_frames, text, shown):
        if tab != "flame":
            return (no_update,) * 7
        opts, default = step_options(rs, run, rank)
        fresh = ctx.triggered_id in ("run-select", "rank-select") or not isinstance(shown, dict) \
            or shown.get("run") != run or shown.get("rank") != rank
        if fresh or step not in [o["value"] for o in opts]:
            step = default
        data = _flame(rs, run, rank, step, metric, tool_frames, text)
        keep = {k: data[k] for k in ("ids", "values", "total_ns")}
        return opts, step, figure(data), headline(data), "", {**keep, "run": run, "rank": rank}, None

    @app.callback(Output("flame-zoom", "children", allow_duplicate=True), Output("flame-entry", "data", allow_duplicate=True),
                  Input("flame-graph", "clickData"), State("flame-data", "data"), State("flame-entry", "data"), prevent_initial_call=True)
    def _zoom(click, shown, entry):
        node = zoomed_to(entry, click)
        return (zoom_words(shown, node) if isinstance(shown, dict) else ""), node
