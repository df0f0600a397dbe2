"""The SQL tab drawn: the schema browser, the query box, the results grid and "show on timeline".

Queries run in the sandbox of views/sql.py, the one `neuron-explorer query` and the MCP server
use; an error shows under the box, in the tab. A result with an `event_id` column makes its rows
clickable: the row clicked is the one "show on timeline" opens (the timeline's window around the
event, the event selected).

Must not: query the run (views/sql.py does).
"""

from __future__ import annotations

from ..runs import RunSet
from ..views.sql import EVENT_ID, query, schema_tables
from .grid import column, grid

EXAMPLE = ("SELECT event_id, name, dur_ns / 1e6 AS ms\nFROM events\nWHERE kind = 'kernel'\nORDER BY dur_ns DESC\nLIMIT 20")
ROW_KEY = "__row"
"""The grid's row id field: the row's position in the result, whatever the sort and filter."""


def schema_browser():
    """Every table and view with its columns (type, unit, what it holds), folded per table."""
    from dash import html

    items = []
    for t in schema_tables():
        rows = [html.Tr([html.Td(c["name"], className="nx-sql-col"), html.Td(c["type"]), html.Td(c["unit"] or ""),
                         html.Td(c["doc"], className="nx-sql-doc")]) for c in t["columns"]]
        items.append(html.Details([html.Summary([html.B(t["name"]), html.Span(f"  {len(t['columns'])} columns", className="nx-muted")]),
                                   html.Div(t["doc"], className="nx-muted"), html.Table(rows, className="nx-sql-table")],
                                  id=f"sql-schema-{t['name']}"))
    return html.Div([html.Div("tables and views", className="nx-ov-cap"), *items], className="nx-sql-schema", id="sql-schema")


STYLE = """
.nx-sql { display: grid; grid-template-columns: 300px minmax(0, 1fr); gap: 12px; }
.nx-sql-schema { font-size: 12px; max-height: 620px; overflow: auto; border-right: 1px solid #ECEFF1; padding-right: 8px; }
.nx-sql-schema summary { cursor: pointer; padding: 2px 0; }
.nx-sql-table { border-collapse: collapse; font-size: 11px; margin: 2px 0 6px 0; }
.nx-sql-table td { padding: 1px 4px; vertical-align: top; color: #37474F; }
.nx-sql-col { font-family: Menlo, Consolas, monospace; white-space: nowrap; }
.nx-sql-doc { color: #546E7A; }
.nx-sql-box { width: 100%; height: 130px; font-family: Menlo, Consolas, monospace; font-size: 12px; box-sizing: border-box; }
.nx-sql-error { color: #B71C1C; font-size: 12px; white-space: pre-wrap; margin: 4px 0; }
"""


def layout():
    """The SQL tab: schema on the left, query, messages and results on the right."""
    from dash import dcc, html

    return html.Div([
        schema_browser(),
        html.Div([
            dcc.Textarea(id="sql-text", value=EXAMPLE, className="nx-sql-box", spellCheck=False),
            html.Div([html.Button("run query", id="sql-run", className="nx-btn"),
                      html.Button("show on timeline", id="sql-show", className="nx-btn", disabled=True),
                      html.Span(id="sql-note", className="nx-muted")], style={"display": "flex", "gap": "10px", "alignItems": "center"}),
            html.Div(id="sql-error", className="nx-sql-error"),
            html.Div(id="sql-result"),
            dcc.Store(id="sql-ids"), dcc.Store(id="sql-pick"),
        ]),
    ], className="nx-sql", id="sql-tab")


def result(rs: RunSet, run, sql) -> tuple:
    """The callback body of a query: (grid or None, note, error, the rows' event ids or None)."""
    res = query(rs, run, sql)
    if not res["ok"]:
        return None, "", res["error"], None
    cols = [column(f"c{i}", name, numeric=t.split("(")[0] in ("BIGINT", "INTEGER", "DOUBLE", "FLOAT", "HUGEINT", "SMALLINT", "DECIMAL",
                                                                  "TINYINT", "UBIGINT", "UINTEGER"), tooltipField=f"c{i}")
            for i, (name, t) in enumerate(zip(res["columns"], res["types"]))]
    rows = [{ROW_KEY: str(k), **{f"c{i}": v for i, v in enumerate(row)}} for k, row in enumerate(res["rows"])]
    k = res["event_id_column"]
    ids = [row[k] for row in res["rows"]] if k is not None else None
    note = (f"{res['row_count']:,} rows{' (cut: more exist)' if res['truncated'] else ''} in {res['elapsed_s']:.2f} s"
            + (f" · click a row, then 'show on timeline' ({EVENT_ID} column)" if ids is not None else ""))
    return grid("sql-grid", cols, rows, row_id_field=ROW_KEY, click_selects_row=True, height_rows=min(max(len(rows), 1), 14)), note, "", ids


def picked_event(click, ids) -> int | None:
    """The event id of the result row clicked (None when the result has no event ids, or the cell is empty)."""
    if not isinstance(click, dict) or not isinstance(ids, list):
        return None
    try:
        k = int(str(click.get("rowId")))
    except ValueError:
        return None
    v = ids[k] if 0 <= k < len(ids) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def register(app, rs: RunSet, search_view) -> None:
    """Wire the SQL tab (`search_view` is the app's window around one event)."""
    from dash import Input, Output, State

    from .guard import guard

    @app.callback(Output("sql-result", "children"), Output("sql-note", "children"), Output("sql-error", "children"), Output("sql-ids", "data"),
                  Output("sql-pick", "data", allow_duplicate=True), Output("error", "children", allow_duplicate=True),
                  Input("sql-run", "n_clicks"), Input("run-select", "value"), State("sql-text", "value"), prevent_initial_call=True)
    @guard(5)
    def _run(_n, run, sql):
        return (*result(rs, run, sql), None)

    @app.callback(Output("sql-pick", "data"), Output("sql-show", "disabled"), Output("sql-show", "children"),
                  Input("sql-grid", "cellClicked", allow_optional=True), Input("sql-pick", "data"), State("sql-ids", "data"),
                  prevent_initial_call=True)
    def _pick(click, current, ids):
        from dash import ctx

        eid = picked_event(click, ids) if ctx.triggered_id == "sql-grid" else current
        return eid, eid is None, ("show on timeline" if eid is None else f"show event {eid} on timeline")

    @app.callback(Output("view", "data", allow_duplicate=True), Output("selected", "data", allow_duplicate=True),
                  Output("error", "children", allow_duplicate=True),
                  Input("sql-show", "n_clicks"), State("sql-pick", "data"), State("run-select", "value"), State("rank-select", "value"),
                  prevent_initial_call=True)
    @guard(2)
    def _show(_n, eid, run, rank):
        from dash import no_update

        if eid is None:
            return no_update, no_update
        return search_view(rs, run, rank, eid), eid
