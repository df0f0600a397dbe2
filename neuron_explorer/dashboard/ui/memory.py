"""The Memory tab drawn, linked to the timeline: allocated bytes over the timeline's range, the
allocations of that range and the lines (or operators) that allocated most in it.

One range for both (the `memory-range` store, ns on the run clock): the timeline's window after a
zoom, pan or jump, or its shift+drag area selection, moves the memory chart's x range; a drag
(zoom) on the memory chart, or a double-click (the whole run), moves the timeline there (through
the same "zoom-req" store as the timeline's own zoom). A click on an allocation selects the
operator that made it (the event drawer shows it). The tab's components are in the page from the
start (`layout`), so that no callback names a component that is not there; they are filled only
while the tab is open. A run without allocator events gets one line that says why, no chart.

Must not: query the run (views/memory.py does) or define a figure (analyzers/memory_range.py does).
"""

from __future__ import annotations

from ...errors import NeuronExplorerError
from ...fmt import duration, size
from .. import queries
from ..runs import RunSet
from ..views.memory import memory_range
from .grid import column, grid
from .guard import CallbackInputError
from .theme import GRAPH_CONFIG

MIB = 2**20
MEMORY_COLORS = ("#1565C0", "#E65100", "#2E7D32", "#6A1B9A", "#00838F", "#AD1457", "#5D4037", "#F9A825")
"""One colour per memory line (rank, device), in order."""
TABLE_ROWS = 10
"""Rows each range grid shows before it scrolls."""


def _mib(b):
    return None if b is None else round(b / MIB, 4)


ALLOC_COLUMNS = [
    column("ms", "at ms", numeric=True), column("where", "device"), column("size", "size MiB", numeric=True),
    column("addr", "address"), column("state", "in the range", tooltipField="state"),
    column("peak", "at the peak MiB", numeric=True, headerTooltip="bytes of this block alive when its device's allocated bytes peaked in the range"),
    column("operator", "operator", wide=True, tooltipField="operator"), column("top_operator", "top-level operator", tooltipField="top_operator"),
    column("source", "source line", wide=True, tooltipField="source")]

GROUP_COLUMNS = [
    column("key", "source line", wide=True, tooltipField="key", cellStyle={"textAlign": "left"}),
    column("allocated", "allocated MiB", numeric=True), column("allocations", "allocations", numeric=True),
    column("peak", "at the peak MiB", numeric=True, headerTooltip="bytes of the row's allocations in the range alive at their device's peak"),
    column("freed", "freed in range MiB", numeric=True)]


def figure(data: dict) -> dict:
    """The memory chart of a range: one step line per (rank, device), x in ms from the run's first
    event (the timeline's axis) over exactly the range; y fixed, so a drag zooms in time only."""
    traces = [{"type": "scatter", "x": s["x_ms"], "y": [b / MIB for b in s["bytes"]], "name": s["label"], "mode": "lines",
               "line": {"shape": "hv", "color": MEMORY_COLORS[i % len(MEMORY_COLORS)]},
               "hovertemplate": "%{y:.3f} MiB at %{x:.3f} ms<extra>" + s["label"] + "</extra>"}
              for i, s in enumerate(data["series"])]
    layout = {"height": 260, "margin": {"l": 60, "r": 20, "t": 10, "b": 40}, "plot_bgcolor": "#FFFFFF", "paper_bgcolor": "#FFFFFF",
              "dragmode": "zoom", "showlegend": True, "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
              "xaxis": {"range": [data["t0_ms"], data["t1_ms"]], "title": {"text": "ms from run start"}, "gridcolor": "#EEF1F4", "zeroline": False},
              "yaxis": {"title": {"text": "allocated MiB"}, "gridcolor": "#EEF1F4", "fixedrange": True, "rangemode": "tozero"},
              "uirevision": f"{data['t0']}-{data['t1']}"}
    return {"data": traces, "layout": layout}


def headline(data: dict) -> str:
    """The line above the range's tables: the range, what was allocated and freed in it, the peak."""
    t = data["totals"]
    peaks = "; ".join(f"{d['where']} peak {size(d['peak_bytes'])} at +{d['peak_ms']:,.3f} ms" for d in data["devices"]
                      if d["peak_bytes"] is not None)
    calls = data["allocator_calls"] or {}
    driver = (f" · driver allocator calls: {calls['calls']:,} ({calls['frees']:,} frees, {duration(calls['dur_ns'])})"
              if calls.get("calls") else "")
    no_addr = "" if data["has_addresses"] else " · the trace records no block addresses: which blocks were freed is not known"
    listed = f" · the {len(data['allocations']):,} largest listed" if len(data["allocations"]) < t["allocations"] else ""
    return (f"range {duration(data['t1'] - data['t0'])} from +{data['t0_ms']:,.3f} ms: {t['allocations']:,} allocations, "
            f"{size(t['allocated_bytes'])} allocated; {t['frees']:,} frees, {size(t['freed_bytes'])} freed"
            + (f" · {peaks}" if peaks else "") + driver + no_addr + listed)


def _state(a: dict) -> str:
    if not a["has_addr"]:
        return "not known (no address)"
    return f"freed at +{a['freed_ms']:,.3f} ms" if a["freed_ts_ns"] is not None else "alive at the range's end"


def allocation_rows(data: dict) -> list[dict]:
    """The allocations grid's rows; `id` ("<row>:<operator event id>") is what a click reports."""
    return [{"id": f"{i}:{'' if a['op_id'] is None else a['op_id']}", "ms": round(a["ms"], 3), "where": a["where"], "size": _mib(a["bytes"]),
             "addr": None if a["addr"] is None else hex(a["addr"]), "state": _state(a), "peak": _mib(a["peak_contribution_bytes"]),
             "operator": a["operator"] or "(no operator)", "top_operator": a["top_operator"] or "", "source": a["source"] or ""}
            for i, a in enumerate(data["allocations"])]


def group_rows(data: dict) -> tuple[str, list[dict]]:
    """(header, rows) of the second grid: per source line, or per top-level operator when no
    allocation of the range has a line (a trace recorded without stacks)."""
    by, key, header = (data["by_line"], "source", "source line") if data["by_line"] else (data["by_operator"], "operator", "top-level operator")
    return header, [{"key": x[key] or "(no operator)", "allocated": _mib(x["allocated_bytes"]), "allocations": x["allocations"],
                     "peak": _mib(x["peak_contribution_bytes"]), "freed": _mib(x["freed_in_range_bytes"])} for x in by]


def layout():
    """The tab's components (filled by `register`'s callbacks)."""
    from dash import dcc, html

    return html.Div([
        html.Div(id="memory-note", className="nx-muted"),
        html.Div([
            html.Div("drag on the chart to move the timeline to that time (double-click: the whole run); zoom or shift+drag on the "
                     "timeline to move the chart", className="nx-muted"),
            dcc.Graph(id="memory-graph", figure={"data": [], "layout": {"height": 260}}, config={**GRAPH_CONFIG, "doubleClick": "autosize"}),
            html.Div(id="memory-head", className="nx-muted"),
            html.Div("allocations in the range, the largest first (click one to select its operator on the timeline)", className="nx-muted"),
            grid("memory-allocs", ALLOC_COLUMNS, [], row_id_field="id", click_selects_row=True, height_rows=TABLE_ROWS),
            html.Div(id="memory-group-head", className="nx-muted"),
            grid("memory-range-lines", GROUP_COLUMNS, [], height_rows=6),
            html.Details([html.Summary("the whole run: peak per device, allocations per source line and per operator", className="nx-muted"),
                          html.Div(id="memory-whole")]),
        ], id="memory-body", style={"display": "none"}),
        dcc.Store(id="memory-range"),
    ], id="memory-tab")


def range_of(rs: RunSet, trigger, view, area, run, rank) -> dict | None:
    """The range the tab shows after a timeline action: the window of the view (`view` store), or
    the time of a shift+drag area selection (`area` store: ms from the run's first event)."""
    if trigger == "area":
        if not isinstance(area, dict):
            return None
        r = rs.get(run)
        start = r.span()[0]
        try:
            x0, x1 = sorted((float(area["x0"]), float(area["x1"])))
        except (KeyError, TypeError, ValueError):
            raise CallbackInputError("area selection has no x range") from None
        return {"run": r.index, "rank": rank, "t0": start + round(x0 * 1e6), "t1": max(start + round(x1 * 1e6), start + round(x0 * 1e6) + 1)}
    if not isinstance(view, dict) or view.get("t0") is None:
        return None
    return {"run": view.get("run"), "rank": rank, "t0": view["t0"], "t1": view["t1"]}


def tab_contents(rs: RunSet, rng: dict | None, run, rank, width) -> tuple:
    """(note, body style, figure, headline, allocation rows, group header, group columns, group rows)."""
    hidden = {"display": "none"}
    rng = rng if isinstance(rng, dict) and rng.get("run") == rs.get(run).index else {}
    data = memory_range(rs, run=run, t0=rng.get("t0"), t1=rng.get("t1"), rank=rank, width=max(200, min(int(width or 1200), 4000)))
    if data["empty"]:
        return data["empty"], hidden, {"data": [], "layout": {}}, "", [], "", GROUP_COLUMNS, []
    header, rows = group_rows(data)
    cols = [{**GROUP_COLUMNS[0], "headerName": header}, *GROUP_COLUMNS[1:]]
    group_head = (f"{'lines' if header == 'source line' else 'top-level operators (no allocation in the range has a source line)'} "
                  "that allocated most in the range")
    return "", {"display": "block"}, figure(data), headline(data), allocation_rows(data), group_head, cols, rows


def clicked_operator(click) -> int:
    """The operator event id of a click on the allocations grid (its row id "<row>:<event id>")."""
    if not isinstance(click, dict) or click.get("rowId") is None:
        raise CallbackInputError("no allocation clicked")
    _, _, op = str(click["rowId"]).partition(":")
    if not op:
        raise CallbackInputError("this allocation was made outside any operator: nothing to select")
    try:
        return int(op)
    except ValueError:
        raise CallbackInputError(f"no allocation {click['rowId']!r}") from None


def register(app, rs: RunSet) -> None:
    """Wire the tab: the range follows the timeline; the chart's zoom moves the timeline; a click on
    an allocation selects its operator."""
    from dash import Input, Output, State, ctx, no_update

    from .guard import guard
    from .panels import memory_panel

    @app.callback(Output("memory-range", "data"), Output("error", "children", allow_duplicate=True),
                  Input("view", "data"), Input("area", "data"), State("run-select", "value"), State("rank-select", "value"),
                  prevent_initial_call=True)
    @guard(1)
    def _range(view, area, run, rank):
        rng = range_of(rs, ctx.triggered_id, view, area, run, rank)
        return (no_update if rng is None else rng,)

    @app.callback(Output("memory-note", "children"), Output("memory-body", "style"), Output("memory-graph", "figure"),
                  Output("memory-head", "children"), Output("memory-allocs", "rowData"), Output("memory-group-head", "children"),
                  Output("memory-range-lines", "columnDefs"), Output("memory-range-lines", "rowData"),
                  Output("error", "children", allow_duplicate=True),
                  Input("tabs", "value"), Input("memory-range", "data"), Input("rank-select", "value"), State("run-select", "value"),
                  State("view", "data"), State("px", "data"), prevent_initial_call=True)
    @guard(8)
    def _fill(tab, rng, rank, run, view, px):
        if tab != "memory":
            return (no_update,) * 8
        if not isinstance(rng, dict) or rng.get("run") != rs.get(run).index:
            rng = range_of(rs, "view", view, None, run, rank)
        return tab_contents(rs, rng, run, rank, px)

    @app.callback(Output("memory-whole", "children"), Output("error", "children", allow_duplicate=True),
                  Input("tabs", "value"), Input("run-select", "value"), Input("rank-select", "value"), prevent_initial_call=True)
    @guard(1)
    def _whole(tab, run, rank):
        if tab != "memory":
            return (no_update,)
        return (memory_panel(rs, run, rank),)

    # the chart's own zoom (a drag) or double-click (the whole run) moves the timeline: the same
    # request as the timeline's zoom; an autosize (no x axis in it) moves nothing
    app.clientside_callback("""function(rl) {
        if (!rl || !Object.keys(rl).some(function (k) { return k.indexOf('xaxis.range') === 0 || k === 'xaxis.autorange'; }))
            return window.dash_clientside.no_update;
        if (window.nxTimeline) window.nxTimeline.moved(rl);
        return Object.assign({source: 'memory'}, rl); }""", Output("zoom-req", "data", allow_duplicate=True),
                            Input("memory-graph", "relayoutData"), prevent_initial_call=True)

    @app.callback(Output("selected", "data", allow_duplicate=True), Output("error", "children", allow_duplicate=True),
                  Input("memory-allocs", "cellClicked"), State("run-select", "value"), prevent_initial_call=True)
    @guard(1)
    def _pick(click, run):
        eid = clicked_operator(click)
        try:
            queries.event(rs, run=run, event_id=eid)
        except NeuronExplorerError:
            raise CallbackInputError(f"no operator {eid} in this run") from None
        return (eid,)
