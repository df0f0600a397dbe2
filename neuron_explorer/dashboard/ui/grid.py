"""The dashboard's one table widget: an AG Grid (dash-ag-grid) with our defaults.

Every table in the app is sortable (click a header) and filterable (the row under the headers:
text columns match text, number columns compare numbers). The grid draws only the rows in view
(virtual rows), so a table of 100,000 rows costs the browser what a table of 20 does; the height
follows the rows up to `MAX_HEIGHT_PX`, then the grid scrolls.

Styling rules are AG Grid expressions over `params` (`params.data.<field>`, `params.value`),
which dash-ag-grid evaluates with its own safe parser: no JavaScript from us runs in the page.

Must not: compute the rows (the views and ui/panels.py do) or hold callbacks.
"""

from __future__ import annotations

ROW_HEIGHT_PX = 26
HEADER_HEIGHT_PX = 30
MAX_HEIGHT_PX = 460


BUNDLE = "dash_ag_grid.min.js"
"""dash-ag-grid's one script (1.3 MB): not a script of the page, assets/grid_lazy.js loads it (`load`)."""


def load() -> None:
    """Import dash-ag-grid, which registers its scripts with Dash, and take its bundle off the page's
    scripts: Dash still serves it (a dynamic resource, at `bundle_path`), and assets/grid_lazy.js
    stands in for the grid's namespace until it has fetched it, after the timeline is drawn or when a
    grid is shown first. No grid is on screen at load, and the bundle's evaluation would delay the
    first draw by a few hundred ms. Called before the app serves anything: `/` answers before the
    layout (which makes the grids) is built."""
    import dash_ag_grid

    for res in dash_ag_grid._js_dist:
        if res.get("relative_package_path") == BUNDLE:
            res["dynamic"] = True


def bundle_path() -> str:
    """Where Dash serves the grid's bundle, under the app's path prefix."""
    return f"/_dash-component-suites/dash_ag_grid/{BUNDLE}"


KERNEL_CHARS = 120
"""A kernel's name in a grid's wide cell at most this long (fmt.kernel_name; the whole name on hover):
the table tabs' and the compare view's."""


def column(field: str, header: str, *, numeric: bool = False, wide: bool = False, **col_def) -> dict:
    """One column: sorted and filtered as a number or as text; a `wide` one (names, source lines)
    takes three shares of the width, the others one. `col_def` adds AG Grid options (cellStyle,
    tooltipField, ...)."""
    return {"field": field, "headerName": header, "filter": "agNumberColumnFilter" if numeric else "agTextColumnFilter",
            "flex": 3 if wide else 1, "minWidth": 200 if wide else 70, **({"type": "numericColumn"} if numeric else {}), **col_def}


def text_color_when(*rules: tuple[str, str]) -> dict:
    """A cellStyle that colours the text where a condition holds: (condition, css colour) pairs."""
    return {"styleConditions": [{"condition": cond, "style": {"color": colour, "fontWeight": 600}} for cond, colour in rules]}


def grid(grid_id: str, columns: list[dict], rows: list[dict], *, row_id_field: str | None = None,
         row_style: dict | None = None, click_selects_row: bool = False, height_rows: int | None = None):
    """The AG Grid component for `rows` (plain dicts) under `columns` (from `column`).

    `row_id_field` names a string field that identifies a row, so a click reports it (as
    `cellClicked.rowId`) whatever the sort and filter; `row_style` is an AG Grid getRowStyle
    (styleConditions); `click_selects_row` keeps the clicked row highlighted; `height_rows` sizes
    a grid whose rows a callback fills later.
    """
    import dash_ag_grid as dag

    height = HEADER_HEIGHT_PX * 2 + ROW_HEIGHT_PX * max(height_rows or len(rows), 1) + 4  # headers, the filter row, the rows
    options = {"rowHeight": ROW_HEIGHT_PX, "headerHeight": HEADER_HEIGHT_PX, "floatingFiltersHeight": HEADER_HEIGHT_PX,
               "tooltipShowDelay": 300, "enableCellTextSelection": True, "suppressCellFocus": not click_selects_row,
               "theme": "themeBalham"}
    if click_selects_row:
        options["rowSelection"] = {"mode": "singleRow", "checkboxes": False, "enableClickSelection": True}
    extra = {"getRowId": f"params.data.{row_id_field}"} if row_id_field else {}
    if row_style:
        extra["getRowStyle"] = row_style
    return dag.AgGrid(id=grid_id, columnDefs=columns, rowData=rows, className="nx-table",
                      defaultColDef={"sortable": True, "filter": True, "floatingFilter": True, "resizable": True,
                                     "suppressHeaderMenuButton": True},
                      dashGridOptions=options,
                      style={"height": min(height, MAX_HEIGHT_PX), "width": "100%"}, **extra)
