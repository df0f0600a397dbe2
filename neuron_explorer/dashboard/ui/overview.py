"""The Overview tab drawn: the verdict and device busy line, the step and utilisation charts, the
top lists, the roofline and the findings grid, from views/overview.py's data; `register` wires its
callbacks (redraw on run and rank, a click on a finding zooms the timeline).

Must not: query the run, or compute a figure (views/overview.py gives every one).
"""

from __future__ import annotations

import math

from ...fmt import duration, kernel_labels, kernel_name, share
from ..runs import RunSet
from ..views.findings import analysis_state, start_analysis
from ..views.overview import BAR_PARTS, overview

BAR_COLORS = {"compute": "#2E7D32", "communication": "#6A1B9A", "memcpy": "#F9A825", "host + launch": "#1565C0",
              "input": "#00838F", "idle": "#B0BEC5"}


def _fig_layout(fig, height: int, **kw):
    import plotly.graph_objects as go

    fig.update_layout(template=go.layout.Template(), height=height, margin={"l": 60, "r": 20, "t": 34, "b": 110},
                      plot_bgcolor="#FFF", font={"size": 11}, legend={"orientation": "h", "y": -0.36, "yanchor": "top", "x": 0}, **kw)
    return fig


def _step_label(s: dict, many_ranks: bool) -> str:
    return f"r{s['rank']} · {s['step']}" if many_ranks else str(s["step"])


def steps_figure(data: dict):
    """Step time per step, stacked by what the critical path charges (ms)."""
    import plotly.graph_objects as go

    steps = data["steps"]
    many = len(data["ranks"]) > 1
    x = [_step_label(s, many) for s in steps]
    traces = []
    for part in BAR_PARTS:
        ys = [s["parts_ns"][part] / 1e6 for s in steps]
        shares = [(s["parts_ns"][part] / s["dur_ns"]) if s["dur_ns"] else 0 for s in steps]
        traces.append(go.Bar(x=x, y=ys, name=part, marker={"color": BAR_COLORS[part]}, customdata=shares,
                             hovertemplate=f"step %{{x}}<br>{part}: %{{y:,.2f}} ms (%{{customdata:.1%}} of the step)<extra></extra>"))
    fig = go.Figure(traces)
    _fig_layout(fig, 340, barmode="stack", title={"text": "Step time per step, by what bounds it (critical path)", "font": {"size": 13}},
                xaxis={"title": "profiler step", "type": "category"}, yaxis={"title": "ms", "gridcolor": "#EEF1F4"})
    if not steps:
        fig.add_annotation(text="no profiler steps in this run", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def utilisation_figure(data: dict):
    """Device busy % and MFU % per step; MFU that is unknown is not drawn and the reason is said."""
    import plotly.graph_objects as go

    steps = data["steps"]
    many = len(data["ranks"]) > 1
    x = [_step_label(s, many) for s in steps]
    traces = []
    devices = sorted({d["device"] for s in steps for d in s["devices"]})
    for dev in devices:
        ys = [next((100 * d["busy_share"] for d in s["devices"] if d["device"] == dev and d["busy_share"] is not None), None) for s in steps]
        traces.append(go.Bar(x=x, y=ys, name=f"device {dev} busy %", marker={"color": "#2E7D32" if dev == devices[0] else "#81C784"},
                             hovertemplate="step %{x}: device busy %{y:.1f}% of the step<extra></extra>"))
    mfu = [100 * s["mfu"] if s["mfu"] is not None else None for s in steps]
    if any(v is not None for v in mfu):
        traces.append(go.Scatter(x=x, y=mfu, name="MFU %", mode="lines+markers", line={"color": "#E65100"},
                                 hovertemplate="step %{x}: MFU %{y:.2f}%<extra></extra>"))
    fig = go.Figure(traces)
    _fig_layout(fig, 340, title={"text": "Device utilisation and MFU per step", "font": {"size": 13}},
                xaxis={"title": "profiler step", "type": "category"}, yaxis={"title": "% of the step", "range": [0, 105], "gridcolor": "#EEF1F4"})
    notes = [p["mfu_note"] for p in data["ranks"] if p["mfu_note"]]
    if notes:  # above the plot area, under the title: over the bars it hid the tallest ones
        fig.update_layout(margin={"t": 64}, title={"y": 0.98, "yref": "container", "yanchor": "top"})
        fig.add_annotation(text=notes[0], showarrow=False, xref="paper", yref="paper", x=0, y=1.02, xanchor="left", yanchor="bottom",
                           font={"color": "#6D4C41", "size": 11}, name="mfu-note")
    if not steps:
        fig.add_annotation(text="no profiler steps in this run", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def roofline_figure(data: dict):
    """Arithmetic intensity (FLOP/byte) against achieved TFLOP/s, a point per kernel name sized
    by its time, under the device's ceilings: the peak per dtype and the memory bandwidth."""
    import plotly.graph_objects as go

    roof = data["roofline"]
    pts = roof["points"]
    traces = []
    if pts:
        biggest = max(p["dur_ns"] for p in pts) or 1
        traces.append(go.Scatter(
            x=[p["intensity"] for p in pts], y=[p["tflops_per_s"] for p in pts], mode="markers", name="kernels",
            marker={"size": [8 + 30 * math.sqrt(p["dur_ns"] / biggest) for p in pts], "color": "#1565C0", "opacity": 0.6,
                    "line": {"color": "#0D47A1", "width": 1}},
            text=[f"{kernel_name(p['kernel'], 80)}<br>{p['op'] or ''} · {p['dtype'] or '?'} · {p['calls']} calls, {duration(p['dur_ns'])}"
                  + (f"<br>{share(p['efficiency'])} of its roofline bound" if p["efficiency"] is not None else "") for p in pts],
            hovertemplate="%{text}<br>%{x:.3g} FLOP/byte, %{y:.3g} TFLOP/s<extra></extra>"))
    peak = roof["peak"]
    xs = [p["intensity"] for p in pts]
    if peak:
        dtypes = sorted({p["dtype"] for p in pts if p["dtype"] in peak["tflops"]}) or sorted(peak["tflops"])
        ridge = [peak["tflops"][d] * 1e3 / peak["gbps"] for d in dtypes] if peak.get("gbps") else []
        lo = min(xs + ridge + [1.0]) / 4
        hi = max(xs + ridge + [1.0]) * 4
        for d in dtypes:
            top = peak["tflops"][d]
            if peak.get("gbps"):
                knee = top * 1e3 / peak["gbps"]
                cx, cy = [lo, max(knee, lo), hi], [min(lo * peak["gbps"] / 1e3, top), top, top]
            else:
                cx, cy = [lo, hi], [top, top]
            traces.append(go.Scatter(x=cx, y=cy, mode="lines", name=f"ceiling {d} {top:g} TFLOP/s", line={"width": 1.5, "dash": "dot"},
                                     hovertemplate=f"{peak['name']}: {d} peak {top:g} TFLOP/s"
                                                   + (f", {peak['gbps']:g} GB/s" if peak.get("gbps") else "") + "<extra></extra>"))
    fig = go.Figure(traces)
    title = "Roofline: achieved TFLOP/s per kernel name" + (f" under {peak['name']}'s ceilings" if peak else "")
    _fig_layout(fig, 420, title={"text": title, "font": {"size": 13}},
                xaxis={"title": "arithmetic intensity (FLOP / byte)", "type": "log", "gridcolor": "#EEF1F4"},
                yaxis={"title": "TFLOP/s", "type": "log", "gridcolor": "#EEF1F4"})
    for i, n in enumerate(roof["notes"][:3]):
        fig.add_annotation(text=n, showarrow=False, xref="paper", yref="paper", x=0.01, y=0.97 - 0.08 * i, xanchor="left",
                           font={"color": "#8D6E63", "size": 11}, bgcolor="rgba(255,255,255,.8)")
    return fig


def _top_table(title: str, rows: list[dict], table_id: str, label=lambda name: name if len(name) <= 48 else name[:47] + "…",
               share_of: str = "% of step time"):
    """`label`: a row's name as the table shows it (the whole name is its tooltip); `share_of`: the
    share column's heading (the denominator line above the tables says what it is of)."""
    from dash import html

    body = [html.Tr([html.Td(label(r["name"]), title=r["name"], className="nx-ov-name"),
                     html.Td(duration(r["ns"]), className="nx-ov-num"), html.Td(share(r["share"]), className="nx-ov-num")]) for r in rows]
    if not body:
        body = [html.Tr(html.Td("none", className="nx-muted"))]
    return html.Div([html.Div(title, className="nx-ov-cap"),
                     html.Table([html.Tr([html.Th("name"), html.Th("time"), html.Th(share_of)]), *body], className="nx-ov-table",
                                id=table_id)], className="nx-ov-top")



def findings_grid():
    """The overview's findings (a click zooms the timeline to the finding's whole evidence)."""
    from .grid import column, grid, text_color_when

    cols = [column("severity", "severity", cellStyle=text_color_when(("params.value == 'high'", "#B71C1C"),
                                                                     ("params.value == 'medium'", "#E65100"))),
            column("title", "title", wide=True, tooltipField="title"),
            column("share %", "% of step time", numeric=True, tooltipField="share of"),
            column("confidence", "confidence", numeric=True, tooltipField="notes"),
            column("notes", "confidence notes", wide=True, tooltipField="notes")]
    return grid("overview-findings", cols, [], row_id_field="id", click_selects_row=True, height_rows=6)


def finding_rows(data: dict) -> list[dict]:
    return [{"id": f["id"], "severity": f["severity"], "title": f["title"], "share %": round(100 * f["share"], 1),
             "share of": f"share {f['share_of']}", "confidence": f["confidence"],
             "notes": "; ".join(f["confidence_notes"]) or "—"} for f in data["findings"]]


def header(data: dict):
    """The verdict in words, each device's busy share, and the data-quality notes."""
    from dash import html

    busy = [f"rank {p['rank']} device {d['device']}: busy {share(d['busy_share'])} of the analysed time "
            f"({duration(d['busy_ns'])} of {duration(d['window_ns'])})" for p in data["ranks"] for d in p["devices"]]
    mfu = [f"rank {p['rank']}: median MFU {share(p['mfu_median'])}" if p["mfu_median"] is not None else p["mfu_note"]
           for p in data["ranks"] if p["mfu_note"] or p["mfu_median"] is not None]
    notes = [f"rank {p['rank']}: {n}" if len(data["ranks"]) > 1 else n for p in data["ranks"] for n in p["quality"]] + data["warnings"]
    if data["ranks_not_shown"]:
        notes.append(f"{len(data['ranks_not_shown'])} more ranks not drawn: pick one in the rank menu")
    verdict_cls = "nx-ov-verdict " + ("nx-ov-device" if data["verdict"].startswith("device-bound") else "")
    return html.Div([
        html.Div(data["verdict"], id="overview-verdict", className=verdict_cls),
        html.Div(" · ".join(busy + mfu) or "no device work in this run", id="overview-busy", className="nx-ov-line"),
        html.Details([html.Summary(f"data quality and confidence ({len(notes)} note{'s' if len(notes) != 1 else ''})"),
                      html.Ul([html.Li(n) for n in notes] or [html.Li("nothing to report")])],
                     id="overview-quality", className="nx-ov-quality", open=bool(notes)),
    ])


def tops(data: dict):
    from dash import html

    t = data["top"]
    labels = kernel_labels((r["name"] for r in t["kernels"]), 48)
    share_of = "% of step time" if t.get("basis") == "critical_path" else "% of span"  # (no profiler steps: of the profiled span)
    return html.Div([html.Div(t["denominator"], className="nx-muted", id="overview-denominator"),
                     html.Div([_top_table("Kernels", t["kernels"], "overview-top-kernels", labels.get, share_of=share_of),
                               _top_table("Operators", t["operators"], "overview-top-operators", share_of=share_of),
                               _top_table("Source lines", t["lines"], "overview-top-lines", share_of=share_of)], className="nx-ov-tops")])


STYLE = """
.nx-ov-verdict { font-size: 18px; font-weight: 700; margin: 4px 0 2px 0; color: #1F2A36; }
.nx-ov-verdict.nx-ov-device { color: #1B5E20; }
.nx-ov-line { font-size: 12.5px; color: #37474F; margin: 2px 0 4px 0; }
.nx-ov-quality { font-size: 12px; color: #6D4C41; margin: 2px 0 6px 0; }
.nx-ov-quality ul { margin: 2px 0 0 0; padding-left: 18px; }
.nx-ov-charts { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 6px; }
.nx-ov-tops { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 10px; margin: 4px 0 8px 0; }
.nx-ov-cap { font-size: 12px; font-weight: 600; margin: 2px 0; }
.nx-ov-table { border-collapse: collapse; font-size: 11.5px; width: 100%; }
.nx-ov-table th { color: #78909C; font-weight: 500; text-align: left; }
.nx-ov-table td, .nx-ov-table th { padding: 2px 6px 2px 0; }
.nx-ov-name { text-align: left; word-break: break-all; }
.nx-ov-num { text-align: right; white-space: nowrap; }
.nx-ov-hidden { padding: 24px 12px; }
"""


def layout():
    """The Overview tab, empty until `register`'s callback fills it (`content`) on run and rank, once
    the first timeline is painted: its charts and grid are made and drawn then, so the first page
    draws the timeline without waiting for them."""
    from dash import html

    return html.Div(id="overview")


def content(rs: RunSet, run, rank) -> list:
    """The Overview tab's components for a run and rank: header, step and utilisation charts, top
    lists, roofline and the findings grid."""
    from dash import dcc, html

    data = overview(rs, run=run, rank=rank)
    head, steps, util, tops_, roofline, rows = figures(rs, run, rank, data)
    cfg = {"displaylogo": False, "displayModeBar": False}
    found = findings_grid()
    found.rowData = rows
    device = has_device_work(data)
    no_device = "no device work in this run: device utilisation, MFU and the roofline need kernels (a CPU-only run)"
    return [
        html.Div(head, id="overview-header"),
        html.Div([dcc.Graph(id="overview-steps", figure=steps, config=cfg),
                  dcc.Graph(id="overview-util", figure=util, config=cfg) if device else
                  html.Div(no_device, className="nx-muted nx-ov-hidden", id="overview-util-hidden")],
                 className="nx-ov-charts"),
        html.Div(tops_, id="overview-tops"),
        dcc.Graph(id="overview-roofline", figure=roofline, config=cfg) if device else
        html.Div(no_device, className="nx-muted nx-ov-hidden", id="overview-roofline-hidden"),
        html.Div("Findings — click one to zoom the timeline to all of its evidence", className="nx-ov-cap"),
        found,
    ]


def has_device_work(data: dict) -> bool:
    """Whether any rank shown ran device work (else the utilisation and roofline charts are not drawn)."""
    return any(p["devices"] for p in data["ranks"]) or bool(data["roofline"]["points"])


def content_or_computing(rs: RunSet, run, rank) -> list:
    """`content` once the run's analysis is done (the overview is drawn from its report); until
    then a "computing…" line, at once (the analysis is started if it is not running; the page's
    `analysis` store redraws the tab when it is done)."""
    from dash import html

    i = rs.get(run).index
    if analysis_state(rs, i) == "computing":
        start_analysis(rs, i)
        return [html.Div("computing the overview… (the analysis runs in the background)", id="overview-computing", className="nx-muted")]
    return content(rs, run, rank)


def figures(rs: RunSet, run, rank, data: dict | None = None) -> tuple:
    """The callback body: (header, steps figure, utilisation figure, top lists, roofline figure, finding rows)."""
    data = data if data is not None else overview(rs, run=run, rank=rank)
    return header(data), steps_figure(data), utilisation_figure(data), tops(data), roofline_figure(data), finding_rows(data)


def register(app, rs: RunSet, view_for) -> None:
    """Wire the Overview tab: redraw on run or rank; a click on a finding zooms the timeline to it
    (`view_for` is the app's window function)."""
    from dash import Input, Output, State, no_update

    from .guard import guard
    from .panels import finding_clicked

    # drawn once the timeline is painted ("painted", set by assets/timeline_keys.js), not at load: its
    # charts and grid would be drawn in the same moments as the first timeline, and delay it
    @app.callback(Output("overview", "children"), Output("error", "children", allow_duplicate=True),
                  Input("run-select", "value"), Input("rank-select", "value"), Input("analysis", "data"), Input("painted", "data"),
                  prevent_initial_call=True)
    @guard(1, background=("analysis", "painted"))
    def _overview(run, rank, _analysis, _painted):
        return (content_or_computing(rs, run, rank),)

    @app.callback(Output("view", "data", allow_duplicate=True), Output("error", "children", allow_duplicate=True),
                  Input("overview-findings", "cellClicked", allow_optional=True), State("run-select", "value"), State("rank-select", "value"),
                  State("view", "data"), prevent_initial_call=True)
    @guard(1)
    def _finding(click, run, rank, current):
        if click is None:  # the grid was drawn (the overview filled in), not clicked
            return (no_update,)
        return (view_for(rs, "findings", run, rank, None, finding_clicked(click), current),)
