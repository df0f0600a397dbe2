"""The Overview page, the dashboard's first tab: "where does my step go?" answered on one screen.

At the top, what bounds the steps in words ("device-bound (97%): device compute") with each
device's busy share; then per profiler step a stacked bar of what the step's critical path charges
(compute / communication / memcpy / host + launch / input / idle), device utilisation and MFU per
step, the top kernels, operators and source lines with their share of step time (the denominator
said), the roofline, the data-quality notes and the findings with their confidence.

`overview(rs, run, rank)` returns the page's data as plain JSON-able dicts (served at
/api/overview); `figures` and `layout` draw it; `register` wires the callbacks.

Every figure comes from the analyzers, each from its one definition: the bound and the per-step
charged ns from analyzers/critical_path.py (`bound`, `rank_path`, `path_items`), MFU per step and
the roofline from analyzers/utilisation.py (`rank_work`, `kernel_table`) and peaks.py, device
busy from analyzers/metrics.py (`device_summary` in the report, `step_device_busy` per step), step
statistics and findings from the report the Findings tab shows (queries.findings). This module
only groups them for display: the bar's "host + launch" is host_compute + launch_overhead, and the
top lists group the path's charged ns by kernel name, top-level operator and statement (docs/
METRICS.md, "Overview").

Must not: compute a figure an analyzer defines, or query the run other than through the
analyzers and queries.py.
"""

from __future__ import annotations

import math

from ..analyzers import critical_path as cp
from ..analyzers import metrics
from ..analyzers import utilisation as util
from ..analyzers.engine import quality_notes
from ..fmt import duration, share
from . import queries
from .runs import OpenRun, QueryError, RunSet

BAR_PARTS = {"compute": ("device_compute",), "communication": ("communication",), "memcpy": ("memcpy",),
             "host + launch": ("host_compute", "launch_overhead"), "input": ("input_pipeline",), "idle": ("idle",)}
"""The stacked bar's parts: critical-path categories (critical_path.CATEGORIES), each in exactly one part."""
BAR_COLORS = {"compute": "#2E7D32", "communication": "#6A1B9A", "memcpy": "#F9A825", "host + launch": "#1565C0",
              "input": "#00838F", "idle": "#B0BEC5"}
MAX_RANKS = 8
"""With every rank picked, at most this many ranks are drawn (the rank picker shows the others)."""
TOP = 8
"""Rows in each top list."""
ROOFLINE_KERNELS = 40
"""Kernel names drawn on the roofline (the longest by total time)."""
TOP_FINDINGS = 10
DEVICE_CATEGORIES = ("device_compute", "communication", "memcpy")


# ---- data ------------------------------------------------------------------------------------
def overview(rs: RunSet, run=0, rank=None) -> dict:
    """The Overview page's data for a run (every rank, or one `rank`): per rank the verdict, the
    per-step breakdown with device busy and MFU, the devices; over the ranks shown, the top
    kernels, operators and lines with their share and its denominator, the roofline, the
    data-quality notes and the findings (with the report's confidence). See the module docstring."""
    r = rs.get(run)
    rank = queries.parse_rank(r, rank)
    summary = summary_by_rank(rs, r.index)
    ranks = [rank] if rank is not None else sorted(summary)
    if rank is not None and rank not in summary:
        raise QueryError(f"rank {rank} has no events in run {r.index}")
    shown = ranks[:MAX_RANKS]
    with r.lock:  # the analyzers read through the run's one connection (queries.py takes the lock itself)
        quality = quality_notes(r.run)
        per_rank = [_rank_part(r, summary[k], quality.get(k, [])) for k in shown]
        roof = _roofline(r, shown)
    top = _top(rs, r, [summary[k] for k in shown])
    found = queries.findings(rs, run=r.index, rank=rank)
    findings = [_finding_row(f, summary) for f in found["rows"][:TOP_FINDINGS]]
    return {"run": r.index, "rank": rank, "ranks": per_rank, "ranks_not_shown": ranks[MAX_RANKS:],
            "verdict": _verdict_words(per_rank), "steps": [s for p in per_rank for s in p["steps"]],
            "top": top, "roofline": roof, "warnings": list(found.get("warnings") or []),
            "findings": findings, "findings_total": len(found["rows"]), "bar_parts": list(BAR_PARTS),
            "truncated": len(ranks) > MAX_RANKS}


def _verdict_words(per_rank: list[dict]) -> str:
    words = [(p["rank"], p["verdict"]) for p in per_rank if p["verdict"]]
    if not words:
        return "no profiler steps: what bounds a step needs ProfilerStep ranges (call prof.step() once per step)"
    if len({w for _, w in words}) == 1 and len(per_rank) == len(words):
        return words[0][1] + (f" (every rank shown: {', '.join(str(k) for k, _ in words)})" if len(words) > 1 else "")
    return "; ".join(f"rank {k}: {w}" for k, w in words)


def _rank_part(r: OpenRun, s: dict, quality: list[str]) -> dict:
    k = s["rank"]
    b, u = s.get("bound") or {}, s.get("utilisation") or {}
    mfu = {x["step"]: x for x in u.get("steps") or []}
    busy: dict[int, list[dict]] = {}
    for x in metrics.step_device_busy(r.run, k):
        busy.setdefault(x["step"], []).append({"device": x["device"], "busy_ns": x["busy_ns"], "busy_share": x["busy_share"]})
    steps = []
    for st in b.get("steps") or []:
        m = mfu.get(st["step"], {})
        steps.append({"rank": k, "step": st["step"], "dur_ns": st["dur_ns"], "words": st["words"],
                      "parts_ns": {p: sum(st["ns"].get(c, 0) for c in cats) for p, cats in BAR_PARTS.items()},
                      "devices": busy.get(st["step"], []), "mfu": m.get("mfu"), "tflops_per_s": m.get("tflops_per_s")})
    overall = b.get("overall")
    devices = [{"device": d["device"], "busy_ns": d["busy_ns"], "window_ns": d["window_ns"],
                "busy_share": (d["busy_ns"] / d["window_ns"]) if d["window_ns"] else None} for d in s.get("devices") or []]
    notes = list(quality)
    st = s.get("steps") or {}
    if not st.get("count"):
        notes.append("no profiler steps: no per-step breakdown, shares are of the profiled span")
    elif st["count"] == 1:
        notes.append("one profiler step only: nothing confirms it is typical")
    for x in st.get("left_out") or []:
        notes.append(f"step {x['step']} left out of the step statistics: {x['reason']}")
    if b.get("error"):
        notes.append(f"the critical path could not be read: {b['error']}")
    if not (s.get("source_lines") or {}).get("has_frames"):
        notes.append("no user source lines recorded (imported traces without with_stack=True have none)")
    if u.get("ops_estimated"):
        notes.append(f"FLOPs of {u['ops_estimated']} of {u['ops_counted']} operators estimated from their shapes")
    return {"rank": k, "verdict": overall["words"] if overall else None, "bound": overall, "steps": steps, "devices": devices,
            "analysed_ns": s.get("analysed_ns"), "step_count": st.get("count", 0), "mfu_note": _mfu_note(u),
            "mfu_median": u.get("mfu_median"), "device_name": u.get("device_name"), "quality": notes}


def _mfu_note(u: dict) -> str | None:
    """Why MFU is null (never shown as 0)."""
    if u.get("mfu_median") is not None:
        return None
    if not u.get("device_name"):
        return "MFU unknown: no device in this rank (CPU only)"
    if not u.get("peak"):
        return f"MFU unknown: unknown device peak for {u['device_name']!r} (analyze --peak-tflops gives one)"
    if not u.get("dtype"):
        return "MFU unknown: no FLOPs counted (no operator shapes recorded: record_shapes=True)"
    return f"MFU unknown: {u['peak']['name']} has no published peak for {u['dtype']}"


def _top(rs: RunSet, r: OpenRun, summaries: list[dict]) -> dict:
    """Top kernels, operators and lines over the ranks shown, by their share of step time: the ns
    the critical path charges them over every step, over the steps' total. Without steps, by their
    time over the profiled span (device time of overlapping streams adds up there)."""
    items, total, steps = [], 0, 0
    with r.lock:
        for s in summaries:
            path = cp.rank_path(r.run, s["rank"])
            if path:
                total += sum(x["charged_ns"] for x in path)
                steps += s["steps"]["count"]
                items += cp.path_items(r.run, path)
    ranks = ", ".join(str(s["rank"]) for s in summaries)
    if total:
        kernels, ops, lines = {}, {}, {}
        for it in items:
            if it["category"] == "idle":
                continue
            if it["category"] in DEVICE_CATEGORIES:
                _add(kernels, it["item"], it)
            if it["op"] is not None:
                _add(ops, it["op"], it)
            if it["frame_id"] is not None:
                _add(lines, it["frame_id"], it)
        with r.lock:
            where = _frame_lines(r, list(lines))
        by_line: dict = {}  # several frames (ranks, functions on one line) share a line: their figures add up
        for fid, (ns, events) in lines.items():
            _add(by_line, where.get(fid, f"frame {fid}"), {"charged_ns": ns, "events": events})
        lines = by_line
        return {"basis": "critical_path", "denominator_ns": total,
                "denominator": (f"% of step time: ns charged on the critical path over the {steps} profiler steps' total of "
                                f"{duration(total)} (rank{'s' if len(summaries) > 1 else ''} {ranks}); each list adds up to at most 100%"),
                "kernels": _ranked(kernels, total), "operators": _ranked(ops, total), "lines": _ranked(lines, total)}
    denom = sum(s.get("analysed_ns") or 0 for s in summaries)
    kernels, ops, lines = {}, {}, {}
    for s in summaries:
        for row in queries.kernels(rs, run=r.index, rank=s["rank"], limit=TOP)["rows"]:
            _add(kernels, row["name"], {"charged_ns": row["device_total_ns"], "events": row["calls"]})
        for row in s.get("top_level_ops") or []:
            _add(ops, row["name"], {"charged_ns": row["cpu_ns"], "events": row["calls"]})
        sl = s.get("source_lines") or {}
        for row in sl.get("device") or sl.get("cpu") or []:
            _add(lines, row["source"], {"charged_ns": row["self_ns"], "events": row["calls"]})
    return {"basis": "span", "denominator_ns": denom,
            "denominator": (f"% of the profiled span ({duration(denom)}, rank{'s' if len(summaries) > 1 else ''} {ranks}; no profiler "
                            "steps): kernels by device time, operators by CPU time of top-level operators, lines by device time "
                            "(else CPU time); overlapping streams and threads add up, so shares can pass 100%"),
            "kernels": _ranked(kernels, denom), "operators": _ranked(ops, denom), "lines": _ranked(lines, denom)}


def _add(acc: dict, key, it: dict) -> None:
    a = acc.setdefault(key, [0, 0])
    a[0] += it["charged_ns"]
    a[1] += it["events"]


def _ranked(acc: dict, denom: int) -> list[dict]:
    rows = sorted(acc.items(), key=lambda kv: (-kv[1][0], str(kv[0])))[:TOP]
    return [{"name": str(k), "ns": int(v[0]), "share": (v[0] / denom) if denom else None, "events": int(v[1])} for k, v in rows]


def line_key(file: str, line: int) -> str:
    """A source line's one key, `file:line`: what analyzers/lines.py calls `source` and sums
    figures by (its SQL groups by file and line and writes `f.file || ':' || f.line`)."""
    # TODO(lines): lines.py should expose this key (a `line_key`/`source_of`) beside its SQL; until then it lives here
    return f"{file}:{line}"


def _frame_lines(r: OpenRun, ids: list[int]) -> dict[int, str]:
    """frame id -> its line's key (`line_key`); many frame ids can map to one line."""
    if not ids:
        return {}
    rows = r.run.sql("SELECT frame_id, file, line FROM frames WHERE frame_id IN (SELECT unnest(?::BIGINT[]))", [ids]).fetchall()
    return {fid: line_key(f, ln) for fid, f, ln in rows}


def _roofline(r: OpenRun, ranks: list[int]) -> dict:
    """Per kernel name (the longest ROOFLINE_KERNELS per rank): arithmetic intensity and achieved
    TFLOP/s from utilisation.kernel_table, and the device's ceilings (peak TFLOP/s per dtype and
    bandwidth) from its peak; an unknown device has no ceilings, only a note."""
    points, peaks, notes = [], {}, []
    for k in ranks:
        work = util.rank_work(r.run, k)
        for row in util.kernel_table(work, limit=ROOFLINE_KERNELS):
            ok = row["intensity_flops_per_byte"] and row["tflops_per_s"] and row["flops"] > 0
            if ok:
                points.append({"rank": k, "kernel": row["kernel"], "op": row["op"], "dtype": row["dtype"],
                               "intensity": row["intensity_flops_per_byte"], "tflops_per_s": row["tflops_per_s"],
                               "dur_ns": row["dur_ns"], "calls": row["calls"], "efficiency": row["efficiency"],
                               "bound_tflops_per_s": row["bound_tflops_per_s"]})
        if work.peak is not None:
            peaks[work.peak.name] = work.peak.to_dict()
        elif work.device_name:
            notes.append(f"rank {k}: unknown device peak for {work.device_name!r}: no ceilings drawn (none is guessed)")
        else:
            notes.append(f"rank {k}: no device (CPU only): no ceilings")
    if not points:
        notes.append("no kernel has FLOPs: the trace records no operator shapes (record_shapes=True), or its operators are "
                     "not ones whose FLOPs are known (GEMMs, convolutions, attention, norms, elementwise)")
    peak = next(iter(peaks.values())) if len(peaks) == 1 else None
    if len(peaks) > 1:
        notes.append(f"ranks ran on different devices ({', '.join(peaks)}): no one set of ceilings drawn")
    return {"points": points, "peak": peak, "notes": notes}


def share_denominator(rank: int | None, summary: dict) -> str:
    """What a finding's share is of (engine.Context.finding: impact / the rank's analysed_ns), in words."""
    s = summary.get(rank) if rank is not None else None
    if s is None:
        return "of the longest rank's analysed time"
    if s["steps"]["count"]:
        n = s["steps"]["count"]
        return f"of rank {rank}'s step time ({duration(s['analysed_ns'])}, {n} step{'s' if n != 1 else ''})"
    return f"of rank {rank}'s profiled span ({duration(s['analysed_ns'])}, no steps)"


def summary_by_rank(rs: RunSet, run) -> dict:
    return {s["rank"]: s for s in queries.report_summary(rs, run=run).get("ranks", [])}


def _finding_row(f: dict, summary: dict) -> dict:
    rk = f["location"].get("rank")
    return {"id": str(f["index"]), "index": f["index"], "severity": f["severity"], "title": f["title"], "rank": rk,
            "impact_ms": round(f["impact_ms"], 3), "share": f["impact_share"], "share_of": share_denominator(rk, summary),
            "confidence": f["confidence"], "confidence_notes": f.get("confidence_notes") or [], "rule": f["rule_id"]}


# ---- drawing ---------------------------------------------------------------------------------
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
                             hovertemplate=f"step %{{x}}<br>{part}: %{{y:,.3f}} ms (%{{customdata:.1%}} of the step)<extra></extra>"))
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
    if notes:
        fig.add_annotation(text=notes[0].replace(": ", ":<br>", 1), showarrow=False, xref="paper", yref="paper", x=0.01, y=0.97, xanchor="left",
                           font={"color": "#8D6E63", "size": 11}, bgcolor="rgba(255,255,255,.8)", name="mfu-note")
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
            text=[f"{p['kernel'][:80]}<br>{p['op'] or ''} · {p['dtype'] or '?'} · {p['calls']} calls, {duration(p['dur_ns'])}"
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


def _top_table(title: str, rows: list[dict], table_id: str):
    from dash import html

    body = [html.Tr([html.Td(r["name"] if len(r["name"]) <= 48 else r["name"][:47] + "…", title=r["name"], className="nx-ov-name"),
                     html.Td(duration(r["ns"]), className="nx-ov-num"), html.Td(share(r["share"]), className="nx-ov-num")]) for r in rows]
    if not body:
        body = [html.Tr(html.Td("none", className="nx-muted"))]
    return html.Div([html.Div(title, className="nx-ov-cap"),
                     html.Table([html.Tr([html.Th("name"), html.Th("time"), html.Th("% of step time")]), *body], className="nx-ov-table",
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

    busy = [f"rank {p['rank']} device {d['device']}: busy {share(d['busy_share'])} of its window ({duration(d['window_ns'])})"
            for p in data["ranks"] for d in p["devices"]]
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
    return html.Div([html.Div(t["denominator"], className="nx-muted", id="overview-denominator"),
                     html.Div([_top_table("Kernels", t["kernels"], "overview-top-kernels"),
                               _top_table("Operators", t["operators"], "overview-top-operators"),
                               _top_table("Source lines", t["lines"], "overview-top-lines")], className="nx-ov-tops")])


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
"""


def layout():
    """The Overview tab, empty until `register`'s callback fills it (`content`) on run and rank: its
    charts and grid are made then, so the first page draws the timeline without waiting for them."""
    from dash import html

    return html.Div(id="overview")


def content(rs: RunSet, run, rank) -> list:
    """The Overview tab's components for a run and rank: header, step and utilisation charts, top
    lists, roofline and the findings grid."""
    from dash import dcc, html

    head, steps, util, tops_, roofline, rows = figures(rs, run, rank)
    cfg = {"displaylogo": False, "displayModeBar": False}
    found = findings_grid()
    found.rowData = rows
    return [
        html.Div(head, id="overview-header"),
        html.Div([dcc.Graph(id="overview-steps", figure=steps, config=cfg), dcc.Graph(id="overview-util", figure=util, config=cfg)],
                 className="nx-ov-charts"),
        html.Div(tops_, id="overview-tops"),
        dcc.Graph(id="overview-roofline", figure=roofline, config=cfg),
        html.Div("Findings — click one to zoom the timeline to all of its evidence", className="nx-ov-cap"),
        found,
    ]


def figures(rs: RunSet, run, rank) -> tuple:
    """The callback body: (header, steps figure, utilisation figure, top lists, roofline figure, finding rows)."""
    data = overview(rs, run=run, rank=rank)
    return header(data), steps_figure(data), utilisation_figure(data), tops(data), roofline_figure(data), finding_rows(data)


def register(app, rs: RunSet, view_for) -> None:
    """Wire the Overview tab: redraw on run or rank; a click on a finding zooms the timeline to it
    (`view_for` is the app's window function)."""
    from dash import Input, Output, State, no_update

    from .panels import finding_clicked, guard

    @app.callback(Output("overview", "children"), Output("error", "children", allow_duplicate=True),
                  Input("run-select", "value"), Input("rank-select", "value"), prevent_initial_call="initial_duplicate")
    @guard(1)
    def _overview(run, rank):
        return (content(rs, run, rank),)

    @app.callback(Output("view", "data", allow_duplicate=True), Output("error", "children", allow_duplicate=True),
                  Input("overview-findings", "cellClicked", allow_optional=True), State("run-select", "value"), State("rank-select", "value"),
                  State("view", "data"), prevent_initial_call=True)
    @guard(1)
    def _finding(click, run, rank, current):
        if click is None:  # the grid was drawn (the overview filled in), not clicked
            return (no_update,)
        return (view_for(rs, "findings", run, rank, None, finding_clicked(click), current),)
