"""The panels below the timeline: the event panel, the tables tabs and the findings rows.

Plain functions of the RunSet and callback inputs, returning Dash components or rows; app.py wires
them to callbacks. Must not: query the run itself (queries.py does).
"""

from __future__ import annotations

import json

from ...fmt import duration
from .. import queries
from ..runs import RunSet
from ..views.overview import share_denominator, summary_by_rank
from ..views.tables import TABLE_VIEWS
from .grid import column, grid, text_color_when
from .guard import CallbackInputError


def drawer_class(event_id) -> str:
    """The event drawer's CSS classes: open (fixed at the foot of the window) only while an event is
    selected. Closed, it covers nothing: the tabs' grids and the flame graph under it can be clicked
    (ui/theme.py: `.nx-detail`, `.nx-open`); its close button clears the selection."""
    return "nx-card nx-detail" + ("" if event_id is None else " nx-open")


def detail_panel(rs: RunSet, run, event_id):
    """The event panel: name, times, shapes, module, the chain source → operator → launch → kernel,
    and the user's source code."""
    from dash import html

    if event_id is None:
        return html.Div([html.H3("Nothing selected"),
                         html.Div("Click a slice on the timeline to see its chain from your source "
                                  "line down to the kernel.", className="nx-muted")])
    d = queries.event(rs, run=run, event_id=event_id)
    where = (f"rank {d['rank']} · device {d['device']} · stream {d['stream']}" if d["device"] is not None
             else f"rank {d['rank']} · pid {d['pid']} · tid {d['tid']}")
    kv = [("kind", f"{d['kind']} ({d['category']})"), ("start", f"+{d['start_ms']:,.6f} ms"), ("duration", duration(d["dur_ns"])),
          ("where", where), ("step", d["step"] if d["step"] is not None else "—"), ("module", d["module_path"] or "—")]
    shapes = {k: v for k, v in d["args"].items() if k in ("Input Dims", "Input type", "Input Strides", "grid", "block")}
    items = []
    for c in d["chain"]:
        label = c["name"] if c["role"] == "source" else f"{c['name']}  ({duration(c['dur_ns'])})"
        items.append(html.Li([html.B(c["role"]), html.Span(label)]))
    children = [
        html.H3(d["name"], id="detail-name"),
        html.Div([x for k, v in kv for x in (html.Div(k), html.Div(str(v)))], className="nx-kv"),
        html.Div("chain", className="nx-muted", style={"marginTop": "8px"}),
        html.Ul(items, className="nx-chain", id="detail-chain"),
    ]
    src = d["source"]
    if src is not None:
        head = f"{src['file']}:{src['line']}  {src['function']}" + (
            "  (def line: imported traces only hold these)" if src["line_kind"] == "def" else "")
        children.append(html.Div(head, className="nx-muted", id="detail-source-line"))
        if src["readable"]:
            children.append(html.Div(f"read from {src['path']}", className="nx-muted", id="detail-source-path"))
            children.append(html.Div([html.Div([html.Span(str(x["line"]), className="ln"), x["text"]], className="cur" if x["current"] else None)
                                      for x in src["lines"]], className="nx-src", id="detail-source"))
        else:
            children.append(html.Div(src.get("reason", "source not readable"), className="nx-muted", id="detail-source"))
    else:
        children.append(html.Div("no source line recorded for this event (record with with_stack=True)", className="nx-muted",
                                 id="detail-source-line"))
    if shapes:
        children += [html.Div("shapes", className="nx-muted"), html.Pre(json.dumps(shapes), className="nx-args")]
    if d["args"]:
        children += [html.Details([html.Summary("all args", className="nx-muted"), html.Pre(json.dumps(d["args"], indent=1), className="nx-args")])]
    return html.Div(children)


TABLE_ROWS = 100_000
"""Most rows a table tab sends to the browser: the grid draws only the rows in view (measured: a
100,000-row grid keeps 26 rows in the page and sorts in under a second in headless Chromium)."""
TABS = (*TABLE_VIEWS, "memory")
"""The table tabs (the registry's, in its order), then Memory (Flame and SQL keep their components in the page: ui/flame.py, ui/sql.py)."""
TAB_LABELS = {**{k: v.label for k, v in TABLE_VIEWS.items()}, "memory": "Memory"}


def _grid_columns(view, shares: dict) -> list[dict]:
    """AG Grid columns of a registered table view: names left-aligned with the full text on hover,
    numbers right-aligned, each % column's header saying (on hover) what it is a share of."""
    cols = []
    for c in view.columns:
        extra = {"tooltipField": c.field, "cellStyle": {"textAlign": "left"}} if c.kind == "text" else {}
        if c.kind == "pct" and shares.get(c.field):
            extra["headerTooltip"] = shares[c.field]
        cols.append(column(c.field, c.header, numeric=c.kind != "text", wide=c.wide, **extra))
    return cols


def _grid_rows(view, rows: list[dict]) -> list[dict]:
    """The shown fields of each row, ns (kind 'ms') as ms numbers, so they sort and filter as numbers."""
    conv = {c.field: c.kind for c in view.columns}
    return [{f: (round(r[f] / 1e6, 4) if kind == "ms" and isinstance(r.get(f), (int, float)) else r.get(f)) for f, kind in conv.items()}
            for r in rows]


def share_note(view, shares: dict):
    """The line under a table that says what each % column is of."""
    parts = [f"{c.header}: {shares[c.field]}" for c in view.columns if c.kind == "pct" and shares.get(c.field)]
    return "; ".join(parts)


def tables_for(rs: RunSet, run, rank, tab: str):
    from dash import html

    if tab == "memory":
        return memory_panel(rs, run, rank)
    view = TABLE_VIEWS.get(tab) if isinstance(tab, str) else None
    if view is None:
        raise CallbackInputError(f"unknown tab {tab!r}")
    data = queries.table(rs, tab, run=run, rank=rank, limit=TABLE_ROWS)
    if not data["rows"]:
        return html.Div(view.empty, className="nx-muted")
    rows = _grid_rows(view, data["rows"])
    notes = [x for x in (f"first {len(rows)} of {data.get('total_rows')} rows" if data.get("truncated") else "",
                         data.get("note", ""), share_note(view, data.get("shares") or {})) if x]
    return html.Div([grid(f"table-{tab}", _grid_columns(view, data.get("shares") or {}), rows),
                     html.Div([html.Div(n) for n in notes], className="nx-muted", id=f"table-{tab}-notes")])


MIB = 2**20


def memory_panel(rs: RunSet, run, rank):
    """The whole run's memory tables (under the Memory tab's range, ui/memory.py): the peak per
    device (with reserved against allocated), and the allocations per source line and per operator."""
    from dash import html

    summ = queries.memory_summary(rs, run=run, rank=rank)
    if not summ["devices"]:
        return html.Div("no memory events in this run (record with profile_memory=True)", className="nx-muted")
    mib = lambda b: None if b is None else round(b / MIB, 3)  # noqa: E731
    dev_cols = [column("rank", "rank", numeric=True), column("where", "device"), column("peak_allocated", "peak allocated MiB", numeric=True),
                column("peak_ms", "at ms", numeric=True), column("peak_reserved", "peak reserved MiB", numeric=True),
                column("reserved_unused", "reserved − allocated MiB", numeric=True,
                       headerTooltip="held by the caching allocator but not allocated (peak reserved minus peak allocated)"),
                column("allocations", "allocations", numeric=True)]
    dev_rows = [{"rank": d["rank"], "where": d["where"], "peak_allocated": mib(d["peak_allocated_bytes"]),
                 "peak_ms": None if d["peak_ms"] is None else round(d["peak_ms"], 3),  # µs, as the other ms columns
                 "peak_reserved": mib(d["peak_reserved_bytes"]), "reserved_unused": mib(d["reserved_unused_bytes"]),
                 "allocations": d["allocations"]} for d in summ["devices"]]

    def alloc_grid(gid, key, header, rows):
        cols = [column(key, header, wide=True, tooltipField=key, cellStyle={"textAlign": "left"}), column("allocations", "allocations", numeric=True),
                column("allocated", "allocated MiB", numeric=True), column("freed", "freed MiB", numeric=True)]
        return grid(gid, cols, [{key: x[key], "allocations": x["allocations"], "allocated": mib(x["allocated_bytes"]),
                                 "freed": mib(x["freed_bytes"])} for x in rows], height_rows=min(max(len(rows), 1), 10))

    return html.Div([
        html.Div("peak per device (reserved: what the caching allocator holds)", className="nx-muted"),
        grid("memory-devices", dev_cols, dev_rows, height_rows=max(len(dev_rows), 1)),
        html.Div("allocations per source line", className="nx-muted"),
        alloc_grid("memory-lines", "source", "source line", summ["by_line"]) if summ["by_line"] else
        html.Div("no allocation has a source line (record with with_stack=True)", className="nx-muted"),
        html.Div("allocations per operator", className="nx-muted"),
        alloc_grid("memory-operators", "operator", "operator", summ["by_operator"]),
    ])


FINDING_COLUMNS = [
    column("severity", "severity", cellStyle=text_color_when(("params.value == 'high'", "#B71C1C"), ("params.value == 'medium'", "#E65100"))),
    column("title", "title", wide=True, tooltipField="title"), column("impact ms", "impact ms", numeric=True),
    column("share %", "% of step time", numeric=True, tooltipField="share of"),
    column("confidence", "confidence", numeric=True, tooltipField="notes"), column("rank", "rank", numeric=True),
    column("where", "where", wide=True, tooltipField="where"), column("inside", "inside", wide=True, tooltipField="inside all"),
    column("notes", "confidence notes", wide=True, tooltipField="notes"),
    column("rule", "rule")]


def findings_for(rs: RunSet, run, rank=None):
    """Rows for the findings table (ranked by impact, as the analyzer ranks them) of the picked
    rank (with the run-wide ones); `id` is the finding's index as text, which a click on the row
    reports. `share of` says the share's denominator; `notes` why the confidence is lowered."""
    data = queries.findings(rs, run=run, rank=rank)
    summary = summary_by_rank(rs, run)
    return [{"id": str(f["index"]), "index": f["index"], "severity": f["severity"], "title": f["title"],
             "impact ms": round(f["impact_ms"], 3), "share %": round(100 * f["impact_share"], 1),
             "share of": "share " + share_denominator(f["location"].get("rank"), summary), "confidence": f["confidence"],
             "rank": f["location"].get("rank"), "notes": "; ".join(f.get("confidence_notes") or []) or "—",
             "where": f["source"] or f["location"].get("op") or f["location"].get("kernel") or "", "rule": f["rule_id"],
             # the heaviest child in the cell, every line of what is inside (and its advice) in the tooltip
             "inside": _heaviest_child(f.get("inside") or []), "inside all": "\n".join(f.get("inside") or []) or "—"}
            for f in data["rows"]]


def _heaviest_child(inside: list[str]) -> str:
    """The cell of the findings grid's `inside` column: the heaviest child, else what the roots are."""
    return (inside[1] if len(inside) > 1 else inside[0]).strip() if inside else "—"


def findings_note(rs: RunSet, run, rank, rows: list[dict]) -> str:
    """The line above the findings table: how many, what a click does, what the shares are of,
    and the report's data-quality warnings."""
    if not rows:
        return "no findings" + (f" for rank {rank}" if rank not in (None, "all") else "")
    dens = sorted({r["share of"] for r in rows})
    warn = queries.findings(rs, run=run)["warnings"]
    return (f"{len(rows)} findings, ranked by impact — click one to zoom the timeline to all of its evidence. "
            f"{'; '.join(dens)}. Findings overlap, so shares need not add up to 100%."
            + (f" Data quality: {'; '.join(warn)}." if warn else ""))


def findings_table():
    """The findings grid (rows come from `findings_for` in a callback); a click selects a finding."""
    return grid("findings", FINDING_COLUMNS, [], row_id_field="id", click_selects_row=True, height_rows=12)


def finding_clicked(click) -> int:
    """The finding index of a click on the findings grid (its `cellClicked`: the row id is the
    finding's index, whatever the sort and filter)."""
    if not isinstance(click, dict) or click.get("rowId") is None:
        raise CallbackInputError("no finding selected")
    try:
        return int(str(click["rowId"]))
    except ValueError:
        raise CallbackInputError(f"no finding {click['rowId']!r}") from None
