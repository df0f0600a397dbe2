"""The Compare view of the Dash app (shown when the dashboard serves two or more runs): pick a
base and a test run, read the step-time verdict, see one step of each run on the same time
scale one above the other, and browse the delta tables.

Callback bodies are plain functions (`verdict_panel`, `aligned_figures`, `delta_table`,
`mode_styles`) so tests call them without a browser; `layout` and `register` wire them into the
app. Every callback answers malformed input with a message in #error, never an exception.

Must not: query the runs itself (views/compare.py does) or accept a path from the browser.
"""

from __future__ import annotations

from ...errors import NeuronExplorerError
from ...fmt import duration, kernel_labels, short_path
from ..figure import HIGHLIGHT, build_figure, time_unit
from ..runs import RunSet
from ..views import compare as cmp
from .grid import KERNEL_CHARS, column, grid, text_color_when
from .guard import CallbackInputError, guard
from .theme import GRAPH_CONFIG

TAB_LABELS = {"source_line": "Source lines", "module": "Modules", "operator": "Operators", "kernel": "Kernels"}
VERDICT_COLORS = {"not the same job": "#6D4C41", "slower": "#B71C1C", "faster": "#1B5E20", "no significant change": "#455A64",
                  "cannot tell": "#8D6E63"}

STYLE = """
.nx-mode { display: flex; gap: 4px; }
.nx-btn.nx-on { background: #FFB300; color: #1F2A36; border-color: #FFB300; font-weight: 600; }
.nx-cmp-bar { display: flex; align-items: center; gap: 12px; font-size: 12px; color: #546E7A; flex-wrap: wrap; }
.nx-verdict { display: flex; align-items: center; gap: 14px; flex-wrap: wrap; font-size: 13px; }
.nx-badge { color: #FFF; font-weight: 700; letter-spacing: .4px; padding: 4px 12px; border-radius: 4px; font-size: 14px; }
.nx-cmp-table { border-collapse: collapse; font-size: 12px; margin: 8px 0 4px 0; }
.nx-cmp-table th, .nx-cmp-table td { padding: 3px 14px 3px 0; text-align: left; }
.nx-cmp-table th { color: #78909C; font-weight: 500; }
.nx-cmp-cap { font-size: 12px; font-weight: 600; margin: 2px 0 0 4px; }
.nx-cmp-cap span { font-weight: 400; color: #78909C; }
.nx-cmp-cap span.nx-role { color: #FFF; font-weight: 700; font-size: 11px; padding: 1px 6px; border-radius: 3px; margin-right: 8px; }
.nx-role-base { background: #546E7A; }
.nx-cmp-warning { background: #FFF3E0; border-left: 4px solid #E65100; color: #BF360C; padding: 6px 10px; margin-bottom: 8px;
                   font-size: 13px; font-weight: 600; }
.nx-role-test { background: #EF6C00; }
"""


def _pair(base, test) -> tuple[int, int]:
    try:
        return int(base), int(test)
    except (TypeError, ValueError):
        raise CallbackInputError(f"pick a base and a test run (got {base!r}, {test!r})") from None


# ---- callback bodies (plain functions) -------------------------------------------------------
def mode_styles(mode) -> tuple[dict, dict, dict, dict, str, str]:
    """(explore view, compare view, explore-only controls, explore status line) display styles and
    the (Explore, Compare) button classes for the mode."""
    on, off, btn = {}, {"display": "none"}, "nx-btn"
    if mode == "compare":
        return off, on, off, off, btn, btn + " nx-on"
    return on, off, {"display": "flex", "alignItems": "center", "gap": "14px"}, on, btn + " nx-on", btn


def mode_switch():
    """The Explore | Compare buttons for the top bar (buttons, not a radio list: the page's
    dropdown options are found by role=option, and a radio list would add more of them)."""
    from dash import dcc, html

    return html.Div([html.Button("Explore", id="mode-explore", className="nx-btn nx-on"),
                     html.Button("Compare", id="mode-compare", className="nx-btn"),
                     dcc.Store(id="mode", data="explore")], className="nx-mode")


def _steps_used(sel: dict) -> str:
    used = sel.get("used", [])
    if len(used) > 3 and used == list(range(used[0], used[-1] + 1)):
        return f"{used[0]}..{used[-1]}"
    return ", ".join(map(str, used)) or "none"


def verdict_panel(rs: RunSet, base, test):
    """The step-time verdict over the steady-state steps: the steps used and those left out (with
    why), medians and means with 95% CIs, the change of the median with its CI, the test used,
    its p-value, the effect size, and why the verdict is what it is."""
    from dash import html

    from ...analyzers.diff import RUN_SET_TESTS, TEST_NAMES, measure_name, verdict_line, work_lines  # with the first comparison, not the page

    d = cmp.compare(rs, *_pair(base, test), limit=1)
    s = d["step_time"]
    verdict = s["verdict"]
    p = s["p_value"]
    change = f"{'+' if (s['delta_ns'] or 0) >= 0 else '−'}{duration(abs(s['delta_ns'] or 0))}"
    pct = "" if s["delta_pct"] is None else f" ({s['delta_pct']:+.1f}%)"
    lo, hi = s.get("delta_ci_low_pct"), s.get("delta_ci_high_pct")  # the ratio's interval: never below -100%
    change_ci = "" if lo is None or hi is None else f", 95% CI {lo:+.1f}% .. {hi:+.1f}%"
    test_name = TEST_NAMES.get(s.get("test_name"), s.get("test_name") or "no test")
    effect = "" if s.get("effect_size") is None else f", Cliff's delta {s['effect_size']:+.2f}"

    def ci(x):
        return "n/a (one step)" if x["ci_low"] is None else f"{duration(x['ci_low'])} – {duration(x['ci_high'])}"

    rows = [html.Tr([html.Th(""), html.Th("run"), html.Th("steps used"), html.Th("median step time"), html.Th("mean step time"),
                     html.Th("95% CI of the mean")])]
    left_out = []
    for role, who, x in (("base", d["base"], s["base"]), ("test", d["test"], s["test"])):
        sel = s.get("steps", {}).get(role, {})
        rows.append(html.Tr([html.Td(html.B(role)), html.Td(f"{who['run']}: {who['name']}"),
                             html.Td(f"{len(sel.get('used', []))} of {sel.get('steps', 0)} ({_steps_used(sel)})", className="nx-steps-used"),
                             html.Td(duration(x.get("median"))), html.Td(duration(x["mean"])), html.Td(ci(x))]))
        left_out += [html.Div(f"{role}: step {lo_['step']} left out ({duration(lo_['dur_ns'])}): {lo_['reason']}", className="nx-muted")
                     for lo_ in sel.get("left_out", [])]
    differ = s.get("job_differences") or []
    if differ:  # a step time compared between two programs says nothing: say so before any figure
        verdict = "not the same job"
    return html.Div([
        *([html.Div(f"⚠ These runs are not the same job — {'; '.join(differ)}. Their step times are not comparable; "
                    "the figures below only describe each run.", className="nx-cmp-warning", id="cmp-job-warning")] if differ else []),
        html.Div([html.Span(verdict.upper(), className="nx-badge", id="cmp-verdict-badge",
                            style={"background": VERDICT_COLORS.get(verdict, "#455A64")}),
                  html.Span([html.B(f"{change}{pct}"), f" {measure_name(s.get('test_name') in RUN_SET_TESTS).removeprefix('the ')} "
                                                          f"(test − base){change_ci}"]),
                  html.Span(f"{test_name} p = {'n/a' if p is None else f'{p:.3g}'}{effect}", className="nx-muted", id="cmp-test-name")],
                 className="nx-verdict"),
        html.Div(verdict_line(s), id="cmp-verdict-line"),
        *([html.Div(f"because {s['reason']}", className="nx-muted", id="cmp-verdict-reason")] if s.get("reason") else []),
        *([html.Div([html.Div(x) for x in work_lines(s["work"]) if x], className="nx-muted", id="cmp-work")] if s.get("work") else []),
        html.Table(rows, className="nx-cmp-table"),
        *left_out,
        html.Div(f"significant = p < {d['alpha']:g} and a change of at least {d['min_share_of_step']:.0%} of the base median step, "
                 f"over the steady-state steps; {test_name} was used: {s.get('test_reason') or 'n/a'} (definitions: docs/COMPARE.md)",
                 className="nx-muted"),
        *[html.Div(f"note: {n}", className="nx-muted") for n in d["notes"]],
    ], id="cmp-verdict-body")


def step_options(rs: RunSet, base, test) -> tuple[list[dict], int | None]:
    """The step menu: the steps both runs have, and the default one."""
    w = cmp.aligned_windows(rs, *_pair(base, test))
    if w["step"] is None:
        return [{"label": "whole runs (no common step)", "value": "none"}], "none"
    return [{"label": f"step {s}", "value": s} for s in w["steps"]], w["step"]


def aligned_figures(rs: RunSet, base, test, step, width) -> tuple[dict, dict, list, list]:
    """(base figure, test figure, base caption, test caption): the chosen step of each run, both
    starting at x = 0 and drawn over the same time range. A step the pair does not share (the
    menu lags a run change) falls back to the default step."""
    b, t = _pair(base, test)
    try:
        px = max(200, min(int(width or 1500), 4000))
    except (TypeError, ValueError):
        raise CallbackInputError(f"width must be a number, got {width!r}") from None
    st = None if step in (None, "", "none") else step
    try:
        w = cmp.compare_timeline_arrays(rs, b, t, step=st, width=px)
    except NeuronExplorerError:
        if st is None:
            raise
        w = cmp.compare_timeline_arrays(rs, b, t, step=None, width=px)
    figs, caps = [], []
    for role in ("base", "test"):
        x = w[role]
        fig = build_figure(x["timeline"])
        _mark_step_end(fig, x, w)
        fig["layout"]["uirevision"] = f"cmp-{role}-{b}-{t}-{w['step']}"
        figs.append(fig)
        what = f"step {w['step']}" if w["step"] is not None else "whole run"
        extra = ""
        if role == "test" and w["dur_change_pct"] is not None:
            extra = f" ({w['dur_change_pct']:+.1f}% vs base)"
        from dash import html

        caps.append([html.Span(role.upper(), className=f"nx-role nx-role-{role}"),
                     f"run {x['run']}: {x['name']} · {what} · {duration(x['step_dur_ns'])}{extra}",
                     html.Span(f"   starts at +{x['start_ms']:,.3f} ms in its run")])
    figs[0]["layout"]["showlegend"] = False  # one legend (under the test run) is enough
    return figs[0], figs[1], caps[0], caps[1]


def _mark_step_end(fig: dict, x: dict, w: dict) -> None:
    """A solid line where this run's step ends, labelled with its duration."""
    unit_ns, _ = time_unit(w["window_ns"])
    end = x["step_dur_ns"] / unit_ns
    lay = fig["layout"]
    lay["shapes"] = [*lay.get("shapes", []), {"type": "line", "xref": "x", "x0": end, "x1": end, "yref": "paper", "y0": 0, "y1": 1,
                                              "line": {"color": HIGHLIGHT, "width": 2}}]
    lay["annotations"] = [*lay.get("annotations", []), {"x": end, "y": 1, "xref": "x", "yref": "paper", "showarrow": False,
                                                        "xanchor": "right", "yanchor": "bottom", "text": f"end {duration(x['step_dur_ns'])}",
                                                        "font": {"size": 11, "color": HIGHLIGHT}}]


def delta_rows(rs: RunSet, base, test, tab) -> tuple[list[dict], dict]:
    """Rows of one delta table (times in ms per step, numbers so they sort) and its counts."""
    if tab not in cmp.DELTA_TYPES:
        raise CallbackInputError(f"unknown delta table {tab!r}")
    d = cmp.compare(rs, *_pair(base, test))["deltas"][tab]
    ms = lambda ns: None if ns is None else round(ns / 1e6, 4)  # noqa: E731
    labels = kernel_labels([k for x in d["rows"] for k in (x["key"], x["base_key"]) if k], KERNEL_CHARS) if tab == "kernel" else {}
    short = short_path if tab == "source_line" else (lambda k: labels.get(k, k)) if tab == "kernel" else (lambda k: k)
    rows = [{"significant": "yes" if x["significant"] else "", "key": short(x["key"]), "key_full": x["key"],
             "was": short(x["base_key"] or ""), "was_full": x["base_key"] or "", "metric": x["metric"],
             "status": x["status"], "base": ms(x["base_ns_per_step"]), "test": ms(x["test_ns_per_step"]),
             "delta": ms(x["delta_ns_per_step"]), "delta_pct": None if x["delta_pct"] is None else round(x["delta_pct"], 1),
             "p": None if x["p_value"] is None else float(f"{x['p_value']:.3g}")} for x in d["rows"]]
    return rows, {k: d[k] for k in ("total_rows", "significant", "truncated")}


SIGNIFICANT_ROW = {"styleConditions": [{"condition": "params.data.significant == 'yes'",
                                       "style": {"fontWeight": 600, "backgroundColor": "#FFF8E1"}}]}


def delta_table(rs: RunSet, base, test, tab):
    from dash import html

    rows, counts = delta_rows(rs, base, test, tab)
    label = TAB_LABELS[tab].lower()
    if not rows:
        why = " (record with with_stack=True)" if tab == "source_line" else ""
        return html.Div(f"no {label} differ between the two runs{why}", className="nx-muted")
    note = f"{counts['total_rows']} {label} changed, {counts['significant']} significantly; largest change per step first"
    if counts["truncated"]:
        note += f" (first {len(rows)} shown)"
    num = lambda f, h, **kw: column(f, h, numeric=True, **kw)  # noqa: E731
    red_up_green_down = text_color_when(("params.value > 0", "#B71C1C"), ("params.value < 0", "#1B5E20"))
    cols = [column("significant", "sig.", flex=0, width=70, minWidth=70, cellStyle={"textAlign": "center"}),
            # left to right as written (a right-to-left cell draws `aten::add_` as `_aten::add`); a long path is
            # shortened to its last folders so that file:line stays in view, the full key on hover
            column("key", TAB_LABELS[tab][:-1].lower(), wide=True, tooltipField="key_full", cellStyle={"textAlign": "left"}),
            *([column("was", "was (base)", wide=True, tooltipField="was_full", cellStyle={"textAlign": "left"})] if tab == "source_line" else []),
            column("metric", "metric"),
            column("status", "status", cellStyle=text_color_when(("params.value == 'new'", "#B71C1C"), ("params.value == 'gone'", "#1B5E20"))),
            num("base", "base ms/step"), num("test", "test ms/step"), num("delta", "Δ ms/step", cellStyle=red_up_green_down),
            num("delta_pct", "Δ %"), num("p", "p")]
    return html.Div([html.Div(note, className="nx-muted", id="cmp-table-note"),
                     grid(f"cmp-table-{tab}", cols, rows, row_style=SIGNIFICANT_ROW)])


# ---- layout and wiring -------------------------------------------------------------------------
def layout(rs: RunSet):
    """The Compare view (hidden until the mode switch says compare)."""
    from dash import dcc, html

    opts = [{"label": f"{r.index}: {r.name}", "value": r.index} for r in rs.runs]
    dd = lambda id_, value: html.Div(dcc.Dropdown(id=id_, options=opts, value=value, clearable=False),  # noqa: E731
                                     style={"width": 260})
    graph = lambda id_: dcc.Loading(dcc.Graph(id=id_, config={**GRAPH_CONFIG, "displayModeBar": False, "doubleClick": "autosize"},  # noqa: E731
                                              style={"width": "100%"}), type="dot", delay_show=400)
    return html.Div([
        html.Div([html.Div([html.B("base"), dd("cmp-base", 0), html.B("test"), dd("cmp-test", 1),
                            html.B("step"), html.Div(dcc.Dropdown(id="cmp-step", options=[], clearable=False), style={"width": 200}),
                            html.Span("the same step of both runs, from its start (x = 0), on one time scale", className="nx-muted")],
                           className="nx-cmp-bar"),
                  html.Div(id="cmp-verdict", style={"marginTop": 8})], className="nx-card"),
        html.Div([html.Div(id="cmp-base-caption", className="nx-cmp-cap"), graph("cmp-base-timeline"),
                  html.Div(id="cmp-test-caption", className="nx-cmp-cap"), graph("cmp-test-timeline")], className="nx-card"),
        html.Div([dcc.Tabs(id="cmp-tabs", value="source_line", children=[dcc.Tab(label=v, value=k) for k, v in TAB_LABELS.items()]),
                  html.Div(id="cmp-table")], className="nx-card"),
    ], id="compare-view", style={"display": "none"})


def register(app, rs: RunSet) -> None:
    """Wire the Compare view's callbacks (the app has the `mode` switch and the `px` store)."""
    from dash import Input, Output, State, ctx, no_update

    @app.callback(Output("mode", "data"), Output("explore-view", "style"), Output("compare-view", "style"),
                  Output("explore-controls", "style"), Output("status", "style"), Output("mode-explore", "className"),
                  Output("mode-compare", "className"), Input("mode-explore", "n_clicks"), Input("mode-compare", "n_clicks"),
                  prevent_initial_call=True)
    def _mode(_explore, _compare):
        mode = "compare" if ctx.triggered_id == "mode-compare" else "explore"
        return (mode, *mode_styles(mode))

    @app.callback(Output("cmp-verdict", "children"), Output("cmp-step", "options"), Output("cmp-step", "value"),
                  Output("error", "children", allow_duplicate=True),
                  Input("mode", "data"), Input("cmp-base", "value"), Input("cmp-test", "value"), prevent_initial_call=True)
    @guard(3, only_in_mode="compare")  # nothing is computed until the view is open
    def _verdict(base, test):
        opts, value = step_options(rs, base, test)
        return verdict_panel(rs, base, test), opts, value

    @app.callback(Output("cmp-base-timeline", "figure"), Output("cmp-test-timeline", "figure"),
                  Output("cmp-base-caption", "children"), Output("cmp-test-caption", "children"),
                  Output("error", "children", allow_duplicate=True),
                  Input("mode", "data"), Input("cmp-step", "value"), State("cmp-base", "value"), State("cmp-test", "value"),
                  State("px", "data"), prevent_initial_call=True)
    @guard(4, only_in_mode="compare")  # nothing is computed until the view is open
    def _timelines(step, base, test, px):
        if step is None:
            return no_update, no_update, no_update, no_update  # the step menu is filled first
        return aligned_figures(rs, base, test, step, px)

    @app.callback(Output("cmp-table", "children"), Output("error", "children", allow_duplicate=True),
                  Input("mode", "data"), Input("cmp-tabs", "value"), Input("cmp-base", "value"), Input("cmp-test", "value"),
                  prevent_initial_call=True)
    @guard(1, only_in_mode="compare")  # nothing is computed until the view is open
    def _table(tab, base, test):
        return (delta_table(rs, base, test, tab),)
