"""The Dash app: layout and callbacks. It only draws what the query functions return.

Callback bodies are plain functions (`view_for`, `timeline_figure`, `clicked_event` here;
`detail_panel`, `tables_for`, `findings_for` in ui/panels.py) so that tests call them without a
browser; `create_app` wires them.
Every callback answers malformed input with a message, never an exception.

Must not: query the run itself (the views do: queries.py, views/) or accept a path from the browser.
"""

from __future__ import annotations

import json
import re
import threading

from ..errors import NeuronExplorerError
from . import lane_groups, queries, ranks_view
from .api import register as register_api
from .figure import build_figure
from .runs import RunSet
from .timeline import FIRST_WIDTH_PX, first_timeline, timeline_arrays
from .ui import compare_view, flame, memory, overview, sql
from .ui.guard import CallbackInputError, guard
from .ui.panels import TAB_LABELS, TABS, detail_panel, drawer_class, finding_clicked, findings_for, findings_note, findings_table, tables_for  # noqa: F401  (callback bodies)
from .ui.theme import GRAPH_CONFIG, STYLE
from .views import navigate
from .views import sql as sql_view
from .views.events import briefs, event_span
from .views.findings import analyse, analysis_state, start_analysis

DEFAULT_WIDTH = FIRST_WIDTH_PX
PLOTLY_JS = "plotly-nx.min.js"
"""The page's plotly.js (assets/): the core (scatter), bar, heatmap and icicle, the trace types the
dashboard draws; built by scripts/plotly/build.sh."""
PREFETCH_JS = """(function () {
  var early = {};
  ['_dash-layout', '_dash-dependencies'].forEach(function (p) {
    early[new URL(PREFIX + p, location.href).href] = fetch(PREFIX + p, {credentials: 'same-origin'});
  });
  var fetch0 = window.fetch;
  window.fetch = function (url, opts) {
    var key = typeof url === 'string' && (!opts || !opts.method || opts.method === 'GET') ? new URL(url, location.href).href : null;
    var got = key && early[key];
    if (!got) return fetch0.apply(this, arguments);
    delete early[key];
    return got.catch(function () { return fetch0(url, opts); });
  };
})();"""
"""In the page's head: the layout (the first timeline's figure in it, 1 MB on a large run) and the
callbacks are asked for at once, while the browser is still evaluating the scripts, not after them
(Dash's renderer asks when it starts); its own requests for them get these answers, once each."""
EAGER_DCC_CHUNKS = ("dcc/async-graph.js", "dcc/async-dropdown.js")
"""dcc's lazy chunks the first page draws (the timeline, the run and rank menus): loaded with the page."""
RANGE_KEY = re.compile(r"^xaxis\d*\.range(\[(0|1)\])?$")



def _as_float(v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        raise CallbackInputError(f"zoom range must be numbers, got {v!r}") from None
    if x != x or x in (float("inf"), float("-inf")):
        raise CallbackInputError(f"zoom range must be finite, got {v!r}")
    return x


def _as_int(v, what: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v  # exact: ns timestamps need all 64 bits
    try:
        return int(float(v))
    except (TypeError, ValueError, OverflowError):
        raise CallbackInputError(f"{what} must be a number, got {v!r}") from None


# ---- callback bodies (plain functions) -------------------------------------------------------
def view_for(rs: RunSet, trigger: str | None, run, rank, relayout, finding_index, current: dict | None, all_lanes: bool = False) -> dict:
    """The window to show after a user action: run/rank change or reset → the whole run (of the
    lanes shown: the meta lanes only with `all_lanes`); a zoom
    or pan (relayout x range: ms from the run's first event, the timeline's absolute axis) → that
    range, keeping the highlighted table row (`mark`), marked `zoom` (the page may have moved on
    from it: assets/timeline_keys.js draws its figure in the page's own window); a finding → the
    window around its evidence."""
    r = rs.get(run)
    rank = queries.parse_rank(r, rank)
    start, end = r.span()
    whole = whole_view(rs, run, rank, all_lanes)
    if trigger == "timeline" and isinstance(relayout, dict) and current and current.get("run") == r.index:
        if relayout.get("xaxis.autorange"):  # double-click: the whole run
            return whole
        x0 = x1 = None
        for k, v in relayout.items():
            if not RANGE_KEY.match(str(k)):
                continue
            if k.endswith("range") and isinstance(v, (list, tuple)) and len(v) == 2:
                x0, x1 = v
            elif k.endswith("[0]"):
                x0 = v
            elif k.endswith("[1]"):
                x1 = v
        if x0 is None or x1 is None:
            raise CallbackInputError("zoom/pan data has no x range")
        a = start + round(_as_float(x0) * 1e6)
        b = start + round(_as_float(x1) * 1e6)
        if not (b > a):
            raise CallbackInputError("empty zoom range")
        pad = (end - start) // 20
        a, b = max(a, start - pad), min(b, end + pad)
        return {**whole, "t0": a, "t1": max(b, a + 1), "mark": current.get("mark"), "zoom": True}
    if trigger == "findings" and finding_index is not None:
        rows = queries.findings(rs, run=r.index)["rows"]
        i = _as_int(finding_index, "finding")
        if not 0 <= i < len(rows):
            raise CallbackInputError(f"no finding {i}")
        f = rows[i]
        if f["t0"] is not None:
            return {**whole, "t0": f["t0"], "t1": f["t1"], "finding": i}
        return {**whole, "finding": i}
    return whole


def whole_view(rs: RunSet, run, rank, all_lanes: bool = False) -> dict:
    """The view of the whole run (of the lanes shown: the meta lanes only with `all_lanes`), [t0, t1) ns."""
    r = rs.get(run)
    rank = queries.parse_rank(r, rank)
    shown0, shown1 = r.span() if all_lanes else r.shown_span(rank)
    return {"run": r.index, "rank": rank, "t0": shown0, "t1": shown1 + 1, "finding": None}


def timeline_figure(rs: RunSet, view: dict, width, selected_event: int | None, color_by: str = "name", all_lanes: bool = False,
                    critical: bool = False, collapsed=None, python_band: bool = True, tool_frames: bool = False, arrays: dict | None = None):
    """(figure, status text) for a window (and its flanks' buckets, timeline.timeline_arrays), with the selected event outlined, its flows drawn and
    the current finding's events (or the instances of the table row the view jumped to)
    highlighted; slices coloured by "name" or "kind"; meta lanes shown only with `all_lanes`;
    with `critical`, the critical path of the step in view outlined; the lanes of the `collapsed`
    groups (lane_groups.group_key) drawn on one row each; with `python_band`, each thread's Python
    frames folded onto one band (runs.BAND_ROW_SQL), else nested by depth, the tool's own frames
    (CLI, runpy: vocab.TOOL_FRAME_PATTERN) left out unless `tool_frames`. `arrays`: the window's
    timeline_arrays already computed (the first view's, timeline.first_timeline)."""
    if not isinstance(view, dict):
        raise CallbackInputError("no view")
    r_ = rs.get(view.get("run"))
    r_.python_band, r_.show_tool_frames = bool(python_band), bool(tool_frames)  # the run's layout: what every later lookup of a row uses
    px = max(200, min(_as_int(width or DEFAULT_WIDTH, "width"), 4000))
    tl = arrays if arrays is not None else timeline_arrays(
        rs, run=view.get("run"), t0=view.get("t0"), t1=view.get("t1"), width=px, rank=view.get("rank"), all_lanes=bool(all_lanes),
        flanks=True)  # a pan shows the flanks' buckets at once (assets/timeline_keys.js)
    highlight, flows, selected = [], [], None
    if view.get("finding") is not None:
        f = queries.findings(rs, run=tl["run"])["rows"][int(view["finding"])]
        highlight = briefs(rs, tl["run"], f["event_ids"][:100])
    mark = view.get("mark")
    if isinstance(mark, dict) and mark.get("table") in navigate.TABLES and isinstance(mark.get("key"), dict):
        r = rs.get(tl["run"])
        highlight = [queries.brief(r, e, "instance") for e in navigate.instances(rs, tl["run"], mark["table"], mark["key"], tl["t0"], tl["t1"])]
    path = []
    if critical:
        cp = navigate.critical_path(rs, run=tl["run"], t0=tl["t0"], t1=tl["t1"], rank=tl["rank"])
        where = {b["event_id"]: b for b in briefs(rs, tl["run"], sorted({s["event_id"] for s in cp["segments"]
                                                                                 if s["event_id"] is not None}))}
        path = [{**where[s["event_id"]], "ts_ns": s["ts_ns"], "dur_ns": s["charged_ns"], "category": s["category"]}
                for s in cp["segments"] if s["event_id"] in where]
    if selected_event is not None:
        try:
            d = queries.event(rs, run=tl["run"], event_id=selected_event)
        except NeuronExplorerError:
            d = None
        if d is not None:
            selected = {"event_id": d["event_id"], "name": d["name"], "ts_ns": d["ts_ns"], "dur_ns": d["dur_ns"], "y": d["y"]}
            flows = d["flows"]
    if view.get("rank") is not None or not tl["all_lanes"]:  # y rows of the all-lanes layout do not apply
        flows, highlight = _relane(rs, tl, flows, highlight)
        path = _relane(rs, tl, [], path)[1]
        selected = (_relane(rs, tl, [], [selected])[1] or [None])[0] if selected else None
    tl, move = lane_groups.collapse(tl, collapsed)
    if collapsed:
        highlight, path = [{**e, "y": move(e.get("y"))} for e in highlight], [{**e, "y": move(e.get("y"))} for e in path]
        flows = [{"from": {**f["from"], "y": move(f["from"].get("y"))}, "to": {**f["to"], "y": move(f["to"].get("y"))}} for f in flows]
        selected = {**selected, "y": move(selected.get("y"))} if selected else None
    fig = build_figure(tl, highlight=highlight, flows=flows, selected=selected, color_by="kind" if color_by == "kind" else "name",
                       origin_ns=tl["run_start"], outline=path)
    whole = whole_view(rs, tl["run"], view.get("rank"), all_lanes)
    # the whole run on the figure's axis: where a double-click goes in the page (assets/timeline_keys.js)
    fig["layout"]["meta"] = {"whole": [(whole["t0"] - tl["run_start"]) / 1e6, (whole["t1"] - tl["run_start"]) / 1e6]}
    span_ms = (tl["t1"] - tl["t0"]) / 1e6
    status = (f"{span_ms:,.3f} ms from +{max(tl['t0'] - tl['run_start'], 0) / 1e6:,.3f} ms · {tl['visible_events']:,} events · "
              f"{'exact slices' if tl['mode'] == 'exact' else 'aggregated per pixel'} · {len(tl['slices']['x0']):,} slices, "
              f"{len(tl['buckets']['x0']) - (tl['flank'] or {}).get('buckets', 0):,} buckets"  # the window's (not its flanks')
              + (f" · {tl['hidden_lanes']} meta lanes hidden" if tl["hidden_lanes"] else ""))
    return fig, status


COMPUTING = "computing the findings… (the analysis runs in the background; the timeline and the tables do not wait for it)"
"""What the findings panel and the overview say while the run's analysis is running."""


def findings_panel(rs: RunSet, run, rank) -> tuple[list, str]:
    """(rows, note) of the findings panel: the findings of the picked rank once the run's analysis
    is done; until then no rows and COMPUTING (the analysis is started if it is not running: the
    panel never waits for it; `analysis_poll` redraws the panel when it is done)."""
    r = rs.get(run)
    if analysis_state(rs, r.index) == "computing":
        start_analysis(rs, r.index)
        return [], COMPUTING
    rows = findings_for(rs, run, rank)  # "failed": raises the analysis's error again, which the panel shows
    return rows, findings_note(rs, run, rank, rows)


def analysis_poll(rs: RunSet, run) -> dict:
    """The `analysis` store's data: the run and where its analysis stands (views/findings.analysis_state);
    a change redraws the findings panel and the overview."""
    r = rs.get(run)
    return {"run": r.index, "state": analysis_state(rs, r.index)}


SEARCH_UI_LIMIT = 1000
"""Hits the search box steps through (its count says how many match in all)."""
SEARCH_PAD_NS = 10_000
"""At least this much time is shown on each side of a search hit."""


def search_step(rs: RunSet, trigger: str | None, text, run, rank, state: dict | None) -> dict:
    """The search box's state after a user action: a new query (Enter in the box) runs the search
    and goes to its first hit; "next"/"previous" step through the hits, wrapping around. The
    state holds the query, the hits' event ids, the full count and the current hit's index."""
    fresh = not isinstance(state, dict) or trigger == "search" or state.get("text") != text or state.get("run") != run \
        or state.get("rank") != rank or not isinstance(state.get("ids"), list)
    if fresh:
        if not isinstance(text, str) or not text.strip():
            return {"text": text, "run": run, "rank": rank, "ids": [], "count": 0, "i": None}
        res = queries.search(rs, run=run, text=text, limit=SEARCH_UI_LIMIT, rank=rank)
        return {"text": text, "run": run, "rank": rank, "ids": [h["event_id"] for h in res["hits"]], "count": res["count"],
                "i": 0 if res["hits"] else None}
    ids = state["ids"]
    if not ids:
        return state
    i = _as_int(state.get("i") or 0, "search hit")
    i = (i + (-1 if trigger == "search-prev" else 1)) % len(ids)
    return {**state, "i": i}


def search_view(rs: RunSet, run, rank, event_id) -> dict:
    """The window that shows one search hit: the event with its own length (at least
    SEARCH_PAD_NS) on each side, so that it is a third of the view and wide enough for its name."""
    found = event_span(rs, run, _as_int(event_id, "event id"))
    if found is None:
        raise CallbackInputError(f"no event {event_id} in run {rs.get(run).index}")
    ts, dur = found
    pad = max(dur, SEARCH_PAD_NS)
    return {**view_for(rs, None, run, rank, None, None, None), "t0": ts - pad, "t1": ts + dur + pad}


def search_status(state: dict | None) -> str:
    """What the box says: "3 / 17" (the current hit and how many match), or "no match"."""
    if not isinstance(state, dict) or not state.get("text"):
        return ""
    if not state.get("ids"):
        return "no match"
    more = f" (first {len(state['ids']):,} shown)" if state["count"] > len(state["ids"]) else ""
    return f"{state['i'] + 1:,} / {state['count']:,}{more}"


def _relane(rs: RunSet, tl: dict, flows: list, events: list) -> tuple[list, list]:
    """Map y rows from the all-ranks, all-lanes layout to this view's layout (same lanes, fewer of
    them); an event on a lane this view does not show is dropped."""
    if not flows and not events:
        return [], []  # nothing to move: no need for the whole run's lanes (a scan of every rank)
    r = rs.get(tl["run"])
    all_l = r.lanes(None)
    mine = {(ln["rank"], ln["is_device"], ln["a"], ln["b"], ln["text"]): ln for ln in tl["lanes"]}

    def move(e):
        if not e or e.get("y") is None:
            return None
        for ln in all_l:
            if ln.y0 <= e["y"] < ln.y0 + ln.rows:
                m = mine.get((ln.rank, ln.is_device, ln.a, ln.b, ln.text))
                return {**e, "y": m["y0"] + (e["y"] - ln.y0)} if m else None
        return None

    fl = [{"from": move(f["from"]), "to": move(f["to"])} for f in flows]
    return [f for f in fl if f["from"] and f["to"]], [x for x in map(move, events) if x]


def clicked_jump(click) -> bool:
    """Whether a click on the timeline was on an off-screen flow marker (go to its event)."""
    try:
        cd = click["points"][0].get("customdata")
    except (TypeError, KeyError, IndexError, AttributeError):
        return False
    return isinstance(cd, list) and len(cd) == 2 and cd[1] == "jump"


def table_jump(rs: RunSet, table: str, click, run, rank) -> dict:
    """The view after a click on a row of a table tab: the window around the row's heaviest
    instance, with every instance in view highlighted (`mark`), and that instance selected. The
    grid reports the row's position in the rows it was given (AG Grid's default row id), so the
    same query finds it whatever the sort and filter."""
    from .ui.panels import TABLE_ROWS

    if not isinstance(click, dict) or click.get("rowId") is None:
        raise CallbackInputError("no table row clicked")
    i = _as_int(click["rowId"], "row")
    if table not in navigate.TABLES:
        raise CallbackInputError(f"unknown table {table!r}")
    rows = queries.table(rs, table, run=run, rank=rank, limit=min(i + 1, TABLE_ROWS))["rows"]
    if not 0 <= i < len(rows):
        raise CallbackInputError(f"no row {i} in the {table} table")
    key = navigate.row_key(table, rows[i])
    j = navigate.jump(rs, run=run, table=table, **{k: v for k, v in key.items() if k != "rank"},
                      rank=key.get("rank", None) if key.get("rank") is not None else rank)
    view = view_for(rs, None, run, rank, None, None, None)
    return {**view, "t0": j["t0"], "t1": j["t1"], "mark": {"table": table, "key": j["key"]}, "jump": j}


def area_panel(rs: RunSet, area, run, rank, all_lanes: bool, collapsed=None):
    """The aggregate of an area selection (x in ms from the run's first event, y in rows of the
    timeline as drawn, with the `collapsed` lane groups), per name."""
    from dash import html

    from .ui.grid import column, grid

    if not isinstance(area, dict):
        return None
    r = rs.get(run)
    start = r.span()[0]
    t0 = start + round(_as_float(area.get("x0")) * 1e6)
    t1 = start + round(_as_float(area.get("x1")) * 1e6)
    y0, y1 = _as_float(area.get("y0")), _as_float(area.get("y1"))
    if collapsed:
        lanes = [ln.to_dict() for ln in r.lanes(queries.parse_rank(r, rank), bool(all_lanes))]
        rows = lane_groups.original_rows(lanes, collapsed, min(y0, y1) - 0.5, max(y0, y1) + 0.5)
        y0, y1 = rows if rows else (-10.0, -10.0)
    a = navigate.area(rs, run=run, t0=t0, t1=max(t1, t0 + 1), y0=int(min(y0, y1) - 0.5), y1=int(max(y0, y1) + 0.5), rank=rank,
                      all_lanes=all_lanes)
    head = (f"selection: {(a['t1'] - a['t0']) / 1e6:,.3f} ms from +{(a['t0'] - start) / 1e6:,.3f} ms on {len(a['lanes'])} lane(s) · "
            f"{a['names']:,} names" + (f" (the {len(a['rows'])} heaviest shown)" if a["truncated"] else ""))
    cols = [column("name", "name", wide=True, tooltipField="name"), column("count", "count", numeric=True),
            column("total ms", "total (ms)", numeric=True), column("self ms", "self (ms)", numeric=True)]
    rows = [{"name": x["name"], "count": x["count"], "total ms": round(x["total_ns"] / 1e6, 4), "self ms": round(x["self_ns"] / 1e6, 4)}
            for x in a["rows"]]
    return html.Div([html.Div(head, className="nx-muted", id="area-head"), grid("area-table", cols, rows, height_rows=min(len(rows), 8))])


def run_switch_reset() -> tuple:
    """What a run switch clears, as the callback's outputs: the selected event (the event panel
    then says nothing is selected), the search box, its count and hits, the area selection's panel.
    Nothing of one run is shown beside another."""
    return None, "", "", None, None


def clicked_event(click) -> int | None:
    """The event id of a click on the timeline (None for a click on nothing)."""
    if not isinstance(click, dict):
        return None
    pts = click.get("points")
    if not isinstance(pts, list) or not pts or not isinstance(pts[0], dict):
        raise CallbackInputError("click data has no point")
    cd = pts[0].get("customdata")
    if isinstance(cd, list):
        cd = cd[0] if cd else None
    if cd is None:
        return None
    return _as_int(cd, "event id")


# ---- the app ---------------------------------------------------------------------------------
def create_app(rs: RunSet):
    import dash
    from dash import Input, Output, State, ctx, dcc, html, no_update

    from .ui import grid

    grid.load()  # `/` is served before the layout is built: the grids' scripts are registered already

    # suppress_callback_exceptions: the layout is a function (`page`, computed on the first page's
    # request, not here); Dash would otherwise call it now to validate the callbacks' ids
    app = dash.Dash(__name__, title="Neuron Explorer", update_title=None, serve_locally=True, suppress_callback_exceptions=True,
                    on_error=_callback_failed, assets_ignore=re.escape(PLOTLY_JS))
    register_api(app.server, rs)
    app.server.register_error_handler(Exception, _update_failed)
    app.index_string = app.index_string.replace("{%css%}", "{%css%}<style>" + STYLE + compare_view.STYLE + overview.STYLE + sql.STYLE + "</style>"
                                                + "<script>" + PREFETCH_JS.replace("PREFIX", json.dumps(app.config.requests_pathname_prefix))
                                                + "</script>")
    # plotly.js as the first script of the page, not fetched by the graph once the layout has
    # arrived: it downloads beside the other scripts, and the timeline in the layout draws as soon
    # as the renderer mounts it (dcc.Graph uses window.Plotly when it is there). Ours (PLOTLY_JS),
    # not the full bundle dash lists (4.8 MB, every trace type; taken off dcc's scripts here).
    dcc._js_dist[:] = [d for d in dcc._js_dist if d.get("namespace") != "plotly"]
    # the graph's and the dropdown's code (dcc's lazy chunks, 40 kB) as scripts of the page: the
    # timeline in the layout is drawn at the renderer's first pass, not after two more requests, one
    # after the other (each chunk is asked for only when its first component is met)
    for d in dcc._js_dist:
        if d.get("relative_package_path") in EAGER_DCC_CHUNKS:
            d.pop("async", None)
    plotly_js = app.get_asset_url(PLOTLY_JS)
    app.index_string = app.index_string.replace(
        "{%scripts%}", f'<script src="{plotly_js}"></script>'
        f'<script>window.nxGridSrc = {json.dumps(app.get_relative_path(grid.bundle_path()))};</script>{{%scripts%}}')
    comparing = len(rs.runs) >= 2  # the Compare view needs two runs

    def page():
        """The page's layout: built once (`page_layout`), on the first request for it or by `warm`.
        Dash also calls this on the first request of any kind (to validate it): that one gets a
        stand-in unless the page is ready, so the server answers `/` and the scripts at once."""
        from flask import has_request_context, request

        if not page_ready(rs) and has_request_context() and not request.path.endswith("_dash-layout"):
            return html.Div(id="nx-starting")
        state = analysis_state(rs, 0)  # per request: the page is built once, the analysis moves on
        return html.Div([page_layout(rs), dcc.Store(id="analysis", data={"run": 0, "state": state}),
                         dcc.Interval(id="analysis-poll", interval=ANALYSIS_POLL_MS, disabled=state != "computing")])

    app.layout = page

    app.clientside_callback("function(r) { return Math.max(400, Math.min(4000, Math.round(window.innerWidth - 260))); }",
                            Output("px", "data"), Input("run-select", "value"))
    # Zoom and pan are drawn in the page (assets/timeline_keys.js): the relayouts it makes itself
    # while keys come are not sent; it sends the window once they stop ("zoom-req"). A drag, the
    # wheel or a double-click goes straight on. A relayout with no x axis in it (the autosize Plotly
    # sends when the page's width changes: a scroll bar that comes or goes as a panel fills in) is
    # not a window: it must not overwrite the window the keys have just asked for ("zoom-req" is set
    # by both, and the server is asked once with whichever came last)
    app.clientside_callback("""function(rl) { const nx = window.nxTimeline;
        if (!rl || (nx && nx.ours(rl)) || !Object.keys(rl).some(function (k) { return k.indexOf('xaxis') === 0; }))
            return window.dash_clientside.no_update;
        if (nx) nx.moved(rl);
        return rl; }""", Output("zoom-req", "data"), Input("timeline", "relayoutData"), prevent_initial_call=True)
    # the server's figure, drawn in the page's window when the page has moved on since it asked
    app.clientside_callback("function(f) { return f && window.nxTimeline ? window.nxTimeline.accept(f) : (f || window.dash_clientside.no_update); }",
                            Output("timeline", "figure"), Input("timeline-fig", "data"), prevent_initial_call=True)
    # after a run or rank is chosen the dropdown lets go of the focus: the next W zooms, it types nothing
    app.clientside_callback("function(a, b) { if (window.nxTimeline) window.nxTimeline.blur(); return window.dash_clientside.no_update; }",
                            Output("focus-sink", "data"), Input("run-select", "value"), Input("rank-select", "value"), prevent_initial_call=True)
    # a jump (a table row, a finding, a search hit, a flow, a heatmap cell) brings the timeline back into view
    app.clientside_callback("""function(v) { const el = document.getElementById('timeline');
        if (v && !v.zoom && el) { const r = el.getBoundingClientRect();
          if (r.top < 0 || r.top > window.innerHeight * 0.5) window.scrollBy(0, r.top - 70); }
        return window.dash_clientside.no_update; }""", Output("focus-sink", "data", allow_duplicate=True), Input("view", "data"),
                            prevent_initial_call=True)

    @app.callback(Output("rank-select", "options"), Output("rank-select", "value"), Output("collapse", "options"), Output("collapse", "value"),
                  Input("run-select", "value"), prevent_initial_call=True)
    def _ranks(run):
        return rank_options(rs, run), ranks_view.first_rank(rs, run), group_options(rs, run), []

    @app.callback(Output("selected", "data", allow_duplicate=True), Output("search", "value"),
                  Output("search-count", "children", allow_duplicate=True), Output("search-state", "data", allow_duplicate=True),
                  Output("area-panel", "children", allow_duplicate=True), Input("run-select", "value"), prevent_initial_call=True)
    def _run_switch(_run):
        return run_switch_reset()

    @app.callback(Output("view", "data"), Output("error", "children", allow_duplicate=True),
                  Input("run-select", "value"), Input("rank-select", "value"), Input("reset", "n_clicks"),
                  Input("zoom-req", "data"), Input("findings", "cellClicked"), State("view", "data"),
                  State("rank-jump", "data"), State("all-lanes", "value"), prevent_initial_call=True)
    @guard(1)
    def _view(run, rank, _reset, relayout, click, current, jump=None, lanes_shown=None):
        trig = ctx.triggered_id
        if trig == "rank-select" and ranks_view.keeps_view(current, jump, rank):
            return (no_update,)  # a heatmap click chose this rank and its step: keep that window
        trigger = {"zoom-req": "timeline", "findings": "findings"}.get(trig)
        finding_index = finding_clicked(click) if trigger == "findings" else None
        if trigger == "timeline" and isinstance(relayout, dict) and not any(RANGE_KEY.match(str(k)) or k == "xaxis.autorange"
                                                                              for k in relayout):
            return (no_update,)  # a relayout that is not a zoom (autosize on a page resize, a legend click)
        return (view_for(rs, trigger, run, rank, relayout, finding_index, current,
                         all_lanes=isinstance(lanes_shown, list) and "all" in lanes_shown),)

    @app.callback(Output("timeline-fig", "data"), Output("status", "children"), Output("error", "children", allow_duplicate=True),
                  Input("view", "data"), Input("selected", "data"), Input("color-by", "value"), Input("all-lanes", "value"),
                  Input("critical", "value"), Input("collapse", "value"), State("px", "data"), prevent_initial_call=True)
    @guard(2)
    def _figure(view, selected, color_by, all_lanes, critical, collapsed, px):
        shown = all_lanes if isinstance(all_lanes, list) else []
        fig, status = timeline_figure(rs, view, px, selected, color_by, "all" in shown, isinstance(critical, list) and "on" in critical,
                                      collapsed if isinstance(collapsed, list) else None, python_band="python" not in shown,
                                      tool_frames="tool" in shown)
        fig["layout"]["meta"]["zoom"] = bool(isinstance(view, dict) and view.get("zoom"))  # for timeline_keys.js's accept
        return fig, status

    @app.callback(Output("view", "data", allow_duplicate=True), Output("selected", "data", allow_duplicate=True),
                  Output("error", "children", allow_duplicate=True),
                  *[Input(f"table-{t}", "cellClicked", allow_optional=True) for t in navigate.TABLES],
                  State("run-select", "value"), State("rank-select", "value"), prevent_initial_call=True)
    @guard(2)
    def _table_jump(*args):
        clicks, (run, rank) = args[:len(navigate.TABLES)], args[len(navigate.TABLES):]
        trig = ctx.triggered_id
        if not isinstance(trig, str) or not trig.startswith("table-"):
            return no_update, no_update
        table = trig[len("table-"):]
        click = clicks[navigate.TABLES.index(table)] if table in navigate.TABLES else None
        if click is None:  # the grid was drawn (a tab opened), not clicked
            return no_update, no_update
        view = table_jump(rs, table, click, run, rank)
        return view, view["jump"]["event_id"]

    @app.callback(Output("area-panel", "children"), Output("error", "children", allow_duplicate=True),
                  Input("area", "data"), State("run-select", "value"), State("rank-select", "value"), State("all-lanes", "value"),
                  State("collapse", "value"),
                  prevent_initial_call=True)
    @guard(1)
    def _area(area, run, rank, all_lanes, collapsed):
        return (area_panel(rs, area, run, rank, isinstance(all_lanes, list) and "all" in all_lanes,
                           collapsed if isinstance(collapsed, list) else None),)

    @app.callback(Output("view", "data", allow_duplicate=True), Output("selected", "data", allow_duplicate=True),
                  Output("search-count", "children"), Output("search-state", "data"), Output("error", "children", allow_duplicate=True),
                  Input("search", "value"), Input("search-prev", "n_clicks"), Input("search-next", "n_clicks"),
                  State("search-state", "data"), State("run-select", "value"), State("rank-select", "value"), prevent_initial_call=True)
    @guard(4)
    def _search(text, _prev, _next, state, run, rank):
        state = search_step(rs, ctx.triggered_id, text, run, rank, state)
        if state.get("i") is None:
            return no_update, no_update, search_status(state), state
        eid = state["ids"][state["i"]]
        return search_view(rs, run, rank, eid), eid, search_status(state), state

    @app.callback(Output("selected", "data"), Output("view", "data", allow_duplicate=True), Output("error", "children", allow_duplicate=True),
                  Input("timeline", "clickData"), State("run-select", "value"), State("rank-select", "value"), prevent_initial_call=True)
    @guard(2)
    def _click(click, run, rank):
        eid = clicked_event(click)
        if eid is None:
            return no_update, no_update
        # an off-screen flow marker: go to the event it points at
        return eid, (search_view(rs, run, rank, eid) if clicked_jump(click) else no_update)

    @app.callback(Output("detail", "children"), Output("detail-drawer", "className"), Output("error", "children", allow_duplicate=True),
                  Input("selected", "data"), State("run-select", "value"), prevent_initial_call=True)  # the layout has the first one
    @guard(2)
    def _detail(eid, run):
        return detail_panel(rs, run, eid), drawer_class(eid)

    @app.callback(Output("selected", "data", allow_duplicate=True), Input("detail-close", "n_clicks"), prevent_initial_call=True)
    def _detail_close(_n):
        return None  # the drawer closes with the selection (and the timeline's outline of it)

    @app.callback(Output("tab-content", "children"), Output("error", "children", allow_duplicate=True),
                  Input("tabs", "value"), Input("run-select", "value"), Input("rank-select", "value"),
                  prevent_initial_call=True)  # the first tab (the Overview) has no table
    @guard(1)
    def _tabs(tab, run, rank):
        if tab in ("findings", "overview", "flame", "sql", "memory"):
            return (None,)
        return (tables_for(rs, run, rank, tab),)

    # first asked once the timeline is painted ("painted": no callback runs at load, so the renderer's
    # work before the first draw is the layout's alone); this starts the run's analysis (`start`)
    @app.callback(Output("findings", "rowData"), Output("findings-note", "children"), Output("error", "children", allow_duplicate=True),
                  Input("run-select", "value"), Input("rank-select", "value"), Input("analysis", "data"), Input("painted", "data"),
                  prevent_initial_call=True)
    @guard(2, background=("analysis", "painted"))
    def _findings(run, rank, _analysis, _painted):
        return findings_panel(rs, run, rank)

    @app.callback(Output("analysis", "data"), Output("analysis-poll", "disabled"), Input("analysis-poll", "n_intervals"),
                  Input("run-select", "value"), State("analysis", "data"), prevent_initial_call=True)
    def _analysis_poll(_n, run, current):
        data = analysis_poll(rs, run)
        return (no_update if data == current else data), data["state"] != "computing"

    @app.callback(Output("finding-detail", "children"), Output("selected", "data", allow_duplicate=True),
                  Output("error", "children", allow_duplicate=True),
                  Input("view", "data"), State("run-select", "value"), prevent_initial_call=True)
    @guard(2)
    def _finding_detail(view, run):
        if not isinstance(view, dict) or view.get("finding") is None:
            return None, no_update
        f = queries.findings(rs, run=run)["rows"][int(view["finding"])]
        body = [html.B(f["title"]), html.Div(f["recommendation"]),
                html.Details([html.Summary("evidence (SQL on the run's views)"), html.Pre(f["evidence_sql"], className="nx-args")])]
        return html.Div(body, id="finding-text"), (f["event_ids"][0] if f["event_ids"] else no_update)

    if comparing:
        compare_view.register(app, rs)
    overview.register(app, rs, view_for)
    ranks_view.register(app, rs)
    flame.register(app, rs)
    memory.register(app, rs)
    sql.register(app, rs, search_view)
    return app


ANALYSIS_POLL_MS = 1000
"""How often the page asks whether the analysis is done while it shows "computing…"."""


def first_view(rs: RunSet) -> tuple[dict, object, str]:
    """(view, figure, status) of the page's first timeline: the first run's, whole, at the default
    width. Computed once (by `warm`, or by the first page's request: whichever asks first, the
    other waits for it)."""
    def compute():
        view = view_for(rs, None, 0, ranks_view.first_rank(rs, 0), None, None, None)
        tl = first_timeline(rs, 0, view["rank"], DEFAULT_WIDTH)  # what the warm-up thread computed (or is computing) at start
        same = (tl["run"], tl["rank"], tl["t0"], tl["t1"], tl["all_lanes"]) == (view["run"], view["rank"], view["t0"], view["t1"], False)
        return (view, *timeline_figure(rs, view, DEFAULT_WIDTH, None, arrays=tl if same else None))
    return rs.runs[0].cached(("first_view", DEFAULT_WIDTH), compute)


def page_ready(rs: RunSet) -> bool:
    """Whether the page's layout is built (a request for it returns at once)."""
    return "page" in rs.runs[0]._facts


def page_layout(rs: RunSet):
    """The page: controls, the first timeline in the page itself (it draws as soon as the scripts
    are loaded, with no callback round trip; the tables and findings fill in after it), tabs,
    the detail panel. Built once per RunSet; never waits for the analysis (the findings and the
    overview say "computing…" until it is done: `analysis` store, `analysis-poll`)."""
    return rs.runs[0].cached("page", lambda: _page_layout(rs))


def _page_layout(rs: RunSet):
    view0, fig0, status0 = first_view(rs)
    from dash import dcc, html

    run_opts = [{"label": f"{r.index}: {r.name}", "value": r.index} for r in rs.runs]
    comparing = len(rs.runs) >= 2
    return html.Div([
        html.Div([
            html.H1("Neuron Explorer"),
            *([compare_view.mode_switch()] if comparing else []),
            html.Div([
                html.Label("run"), html.Div(dcc.Dropdown(id="run-select", options=run_opts, value=0, clearable=False), className="nx-dd",
                                       style={"width": 260, "color": "#263238"}),
                html.Label("rank"), html.Div(dcc.Dropdown(id="rank-select", options=rank_options(rs, 0), value=ranks_view.first_rank(rs, 0),
                                                          clearable=False), className="nx-dd",
                                        style={"width": 130, "color": "#263238"}),
                html.Button("whole run", id="reset", className="nx-btn"),
                html.Label("colour"), dcc.RadioItems(id="color-by", options=[{"label": "name", "value": "name"}, {"label": "kind", "value": "kind"}],
                                                      value="name", inline=True, className="nx-radio"),
                dcc.Checklist(id="all-lanes", options=[{"label": "meta lanes", "value": "all"}, {"label": "Python frames nested", "value": "python"},
                                                       {"label": "tool's frames", "value": "tool"}],
                              value=[], inline=True, className="nx-radio"),
                dcc.Checklist(id="critical", options=[{"label": "critical path", "value": "on"}], value=[], inline=True, className="nx-radio"),
            ], id="explore-controls", style={"display": "flex", "alignItems": "center", "gap": "14px"}),
            html.Div(status0, id="status", className="nx-status"),
        ], className="nx-top"),
        html.Div(id="error", className="nx-error"),
        html.Div([ranks_view.layout(rs), html.Div([html.Div([
            dcc.Input(id="search", type="text", debounce=True, placeholder="find by name, or /regex/ (Enter)", className="nx-search-box"),
            html.Button("‹ prev", id="search-prev", className="nx-btn nx-btn-light"),
            html.Button("next ›", id="search-next", className="nx-btn nx-btn-light"),
            html.Span(id="search-count", className="nx-muted"),
            html.Label("collapse", className="nx-muted", style={"marginLeft": "18px"}),
            dcc.Checklist(id="collapse", options=group_options(rs, 0), value=[], inline=True, className="nx-radio nx-collapse")],
            className="nx-search"),
            html.Span("W/S zoom · A/D pan · wheel zooms at the pointer · drag zooms · shift+drag selects an area · "
                      "click a slice for its chain from your source line to the kernel", className="nx-muted"),
            dcc.Loading(dcc.Graph(id="timeline", figure=fig0, config={**GRAPH_CONFIG, "scrollZoom": True, "doubleClick": "autosize"},
                                  style={"width": "100%"}), type="dot", delay_show=400),
            html.Div(id="area-panel")], className="nx-card"),
        html.Div([
            html.Div([dcc.Tabs(id="tabs", value="overview", children=[
                dcc.Tab(label="Overview", value="overview", children=[overview.layout()]),
                dcc.Tab(label="Findings", value="findings", children=[
                    html.Div(id="findings-note", className="nx-muted"),
                    findings_table(),
                    html.Div(id="finding-detail", className="nx-muted", style={"marginTop": 6})]),
                *[dcc.Tab(label=TAB_LABELS[t], value=t, children=[memory.layout()] if t == "memory" else None)
                  for t in TABS],  # the table views' registry, then Memory (its components in the page: ui/memory.py)
                dcc.Tab(label="Flame", value="flame", children=[flame.layout()]),
                dcc.Tab(label="SQL", value="sql", children=[sql.layout()]),
            ]), html.Div(id="tab-content")], className="nx-card"),
            html.Div([html.Button("×", id="detail-close", title="close (clears the selection)", className="nx-detail-close"),
                      html.Div(detail_panel(rs, 0, None), id="detail")], id="detail-drawer", className=drawer_class(None)),
        ], className="nx-grid")], id="explore-view"),
        *([compare_view.layout(rs)] if comparing else []),
        dcc.Store(id="view", data=view0), dcc.Store(id="area"), dcc.Store(id="selected"), dcc.Store(id="search-state"),
        dcc.Store(id="px", data=DEFAULT_WIDTH), dcc.Store(id="zoom-req"), dcc.Store(id="timeline-fig"), dcc.Store(id="focus-sink"),
        dcc.Store(id="painted"),  # true once the first timeline is painted (assets/timeline_keys.js): what waits for it (ui/overview.py)
    ])


MAX_GROUP_OPTIONS = 24
"""Lane groups offered for collapsing (the first ones, in lane order)."""


def group_options(rs: RunSet, run) -> list[dict]:
    """The lane groups (per rank and process) of a run's default layout, to collapse: of every
    rank, or of the first rank where the timeline opens on it (a run of many ranks, whose lanes
    are then read from that rank's partition alone)."""
    try:
        r = rs.get(run)
    except NeuronExplorerError:
        return []
    first = ranks_view.first_rank(rs, run)
    lanes = r.lanes(None, False) if first == "all" else r.of_rank(first).lanes(first, False)
    gs = lane_groups.groups([ln.to_dict() for ln in lanes])[:MAX_GROUP_OPTIONS]
    return [{"label": f"{g['key']} ({g['lanes']})", "value": g["key"]} for g in gs]


def rank_options(rs: RunSet, run) -> list[dict]:
    """The rank picker's choices for a run."""
    try:
        r = rs.get(run)
    except NeuronExplorerError:
        return []
    return [{"label": "all ranks", "value": "all"}] + [{"label": f"rank {k}", "value": k} for k in r.run.ranks]


def _callback_failed(err: Exception) -> None:
    """Dash's handler for an exception a callback raises: one line in the server's log and nothing
    updated on the page (HTTP 200), never an HTTP 500 with a traceback. The callbacks check what
    they can (CallbackInputError gives the page a message); this is for input no check foresaw —
    a value of another type or size sent by a hand-made request."""
    import logging

    logging.getLogger("neuron_explorer.dashboard").warning(
        "a callback could not use its input (%s: %s); nothing was updated", type(err).__name__, " ".join(str(err).split())[:200])


def _update_failed(err: Exception):
    """A request Dash cannot dispatch (a callback that does not exist on the server, a body of the
    wrong shape): HTTP 400 with one line, not a 500 with a traceback in the log."""
    from flask import request
    from werkzeug.exceptions import HTTPException, InternalServerError

    if isinstance(err, HTTPException):
        return err
    if request.path.endswith("_dash-update-component"):
        return {"error": f"malformed callback request ({type(err).__name__}: {' '.join(str(err).split())[:200]})"}, 400
    return InternalServerError(original_exception=err)


def warm(rs: RunSet) -> None:
    """Compute the page (the first run's first view: its lanes, long events, pyramid) and the
    other runs' first views (their per-run caches), so that the page and a change of run are quick."""
    page_layout(rs)  # its first view's queries run before it imports Dash (serve imports it meanwhile)
    for r in rs.runs[1:]:
        first_timeline(rs, r.index, ranks_view.first_rank(rs, r.index), DEFAULT_WIDTH)


ANALYSIS_WAIT_S = 10.0
"""After the page is built, the analysis waits at most this long for the page to be drawn in a
browser (`start`)."""


def start(rs: RunSet, wait_s: float | None = None) -> threading.Thread:
    """In a background thread ('nx-warm'): `warm`, then each run's analysis (views/findings.analyse:
    in a child process at a lower priority, which this thread waits for), one after the other, so
    that the analysis does not slow the first page down on a small machine.
    Built is not drawn: the browser still evaluates the scripts and draws the timeline (about 2 s of
    CPU), which the analysis's queries on every core would slow down. So the first run's analysis
    starts when the page asks for the findings, which it does once the first timeline is painted
    (the "painted" store: `findings_panel` starts it), or ANALYSIS_WAIT_S after the page is built
    when no browser came.
    Nothing waits for it: a request for the page builds what it needs itself (or waits for the
    part under way), and the findings and the overview say "computing…" until the analysis is done."""
    wait_s = ANALYSIS_WAIT_S if wait_s is None else wait_s

    def work():
        import time

        _quiet(warm, rs)
        end = time.monotonic() + wait_s
        while "analysis_started" not in rs.runs[0]._facts and time.monotonic() < end:
            time.sleep(0.05)
        for r in rs.runs:
            analyse(rs, r.index)
    t = threading.Thread(target=work, daemon=True, name="nx-warm")
    t.start()
    return t


def serve(paths, host: str = "127.0.0.1", port: int = 8050, *, echo=print, debug: bool = False, warm_first: bool = True) -> None:
    """Open the runs (a bad path raises InputError before any server starts; or take an open
    RunSet), print the URL, serve at once: the page and the analysis are computed in the
    background (`start`): started before the app is made (`warm_first`: the first view's queries
    run while Dash is imported), or just before it serves (the first view is read from what the
    run stores: dashboard.serve)."""
    rs = paths if isinstance(paths, RunSet) else RunSet(paths)
    if warm_first:
        start(rs)
    app = create_app(rs)
    if not warm_first:
        start(rs)
    echo(f"Neuron Explorer dashboard: http://{host}:{port}/  (serving {len(rs.runs)} run(s); Ctrl+C to stop)")
    try:
        app.run(host=host, port=port, debug=debug, use_reloader=False)
    finally:
        sql_view.close(rs)  # the SQL page's sandbox processes
        rs.close()  # interrupts and waits for a request still querying: no abort on Ctrl+C


def _quiet(fn, *a):
    try:
        fn(*a)
    except Exception:  # noqa: BLE001  (a background warm-up; the page shows the error when asked)
        pass
