"""The Overview page, the dashboard's first tab: "where does my step go?" answered on one screen.

At the top, what bounds the steps in words ("device-bound (97%): device compute") with each
device's busy share; then per profiler step a stacked bar of what the step's critical path charges
(compute / communication / memcpy / host + launch / input / idle), device utilisation and MFU per
step, the top kernels, operators and source lines with their share of step time (the denominator
said), the roofline, the data-quality notes and the findings with their confidence.

`overview(rs, run, rank)` returns the page's data as plain JSON-able dicts (served at
/api/overview); ui/overview.py draws it and wires its callbacks.

Every figure comes from the analyzers, each from its one definition: the bound and the per-step
charged ns from analyzers/critical_path.py (`bound`, `path_of`, `path_items`), MFU per step and
the roofline from analyzers/utilisation.py (`rank_work`, `kernel_table`) and peaks.py, device
busy from analyzers/metrics.py (`device_summary` in the report, `step_device_busy` per step), step
statistics and findings from the report the Findings tab shows (views/findings.py). This module
only groups them for display: the bar's "host + launch" is host_compute + launch_overhead, and the
top lists group the path's charged ns by kernel name, top-level operator and statement (docs/
METRICS.md, "Overview").

Must not: draw (no Dash, no plotly), compute a figure an analyzer defines, or query the run other
than through the analyzers and the other views.
"""

from __future__ import annotations

from ...analyzers import metrics
from ...fmt import duration
from ...vocab import line_key
from ..runs import OpenRun, QueryError, RunSet, niced
from ..timeline import parse_rank
from .findings import findings as run_findings
from .findings import report_summary
from .tables import kernels as kernel_rows

BAR_PARTS = {"compute": ("device_compute",), "communication": ("communication",), "memcpy": ("memcpy",),
             "host + launch": ("host_compute", "launch_overhead"), "input": ("input_pipeline",), "idle": ("idle",)}
"""The stacked bar's parts: critical-path categories (critical_path.CATEGORIES), each in exactly one part."""
MAX_RANKS = 8
"""With every rank picked, at most this many ranks are drawn (the rank picker shows the others)."""
TOP = 8
"""Rows in each top list."""
ROOFLINE_KERNELS = 40
"""Kernel names drawn on the roofline (the longest by total time)."""
TOP_FINDINGS = 10
DEVICE_CATEGORIES = ("device_compute", "communication", "memcpy")


def overview(rs: RunSet, run=0, rank=None) -> dict:
    """The Overview page's data for a run (every rank, or one `rank`): per rank the verdict, the
    per-step breakdown with device busy and MFU, the devices; over the ranks shown, the top
    kernels, operators and lines with their share and its denominator, the roofline, the
    data-quality notes and the findings (with the report's confidence). See the module docstring.
    Computed once per run and rank (every page load draws the Overview), on the run's second
    connection (OpenRun.background): the timeline's requests do not wait for it."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    def compute():
        with niced():  # seconds of work on a big run: the page's requests come first (runs.BACKGROUND_NICE)
            return _overview(rs, r, rank)
    return r.cached(("overview", rank), compute)


def _overview(rs: RunSet, r: OpenRun, rank: int | None) -> dict:
    summary = summary_by_rank(rs, r.index)
    ranks = [rank] if rank is not None else sorted(summary)
    if rank is not None and rank not in summary:
        raise QueryError(f"rank {rank} has no events in run {r.index}")
    shown = ranks[:MAX_RANKS]
    parts = r._facts.get("overview_parts")  # computed with the analysis, in its child process (views/findings._in_child)
    if not (isinstance(parts, dict) and parts.get("shown") == shown):
        bg = r.background()  # the analyzers read through a connection of their own: the timeline's requests do not wait for them
        with bg.lock:
            parts = analysed_parts(bg.run, summary, shown)
    per_rank, roof = parts["per_rank"], parts["roofline"]
    top = parts["top"] or _top_span(rs, r, [summary[k] for k in shown])
    found = run_findings(rs, run=r.index, rank=rank)
    findings = [_finding_row(f, summary) for f in found["rows"][:TOP_FINDINGS]]
    # a count the ranks' notes give already (engine.QUALITY_NOTES) is not said again as the import's warning
    from ...analyzers.engine import QUALITY_NOTES
    from ...collectors.rank_entry import first_work_wait_warnings, quality_warnings

    restated = {w for e in r.run.manifest.get("ranks", []) if e.get("data_quality")
                for w in quality_warnings(e, set(QUALITY_NOTES)) + first_work_wait_warnings(e)}
    return {"run": r.index, "rank": rank, "ranks": per_rank, "ranks_not_shown": ranks[MAX_RANKS:],
            "verdict": _verdict_words(per_rank), "steps": [s for p in per_rank for s in p["steps"]],
            "top": top, "roofline": roof, "warnings": [w for w in found.get("warnings") or [] if w not in restated],
            "findings": findings, "findings_total": len(found["rows"]), "bar_parts": list(BAR_PARTS),
            "truncated": len(ranks) > MAX_RANKS}


def analysed_parts(run, summary: dict, shown: list[int]) -> dict:
    """What the Overview of the ranks `shown` reads of the run itself (a store Run; `summary`: the
    report's summary by rank): per rank its part (verdict, steps, devices, notes), the roofline and
    the top lists by critical path (None: no steps). Seconds of work on a big rank, so the
    dashboard's analysis child computes it for the whole run's Overview beside the report."""
    from ...analyzers.engine import quality_notes  # the engine and its rules: imported when the Overview is first drawn

    quality = quality_notes(run)
    return {"shown": list(shown), "per_rank": [_rank_part(run, summary[k], quality.get(k, [])) for k in shown],
            "roofline": _roofline(run, shown), "top": _top_path(run, [summary[k] for k in shown])}


def _verdict_words(per_rank: list[dict]) -> str:
    words = [(p["rank"], p["verdict"]) for p in per_rank if p["verdict"]]
    if not words:
        return "no profiler steps: what bounds a step needs ProfilerStep ranges (call prof.step() once per step)"
    if len({w for _, w in words}) == 1 and len(per_rank) == len(words):
        return words[0][1] + (f" (every rank shown: {', '.join(str(k) for k, _ in words)})" if len(words) > 1 else "")
    return "; ".join(f"rank {k}: {w}" for k, w in words)


def _rank_part(run, s: dict, quality: list[str]) -> dict:
    k = s["rank"]
    b, u = s.get("bound") or {}, s.get("utilisation") or {}
    mfu = {x["step"]: x for x in u.get("steps") or []}
    busy: dict[int, list[dict]] = {}
    for x in metrics.step_device_busy(run, k):
        busy.setdefault(x["step"], []).append({"device": x["device"], "busy_ns": x["busy_ns"], "busy_share": x["busy_share"]})
    steps = []
    for st in b.get("steps") or []:
        m = mfu.get(st["step"], {})
        steps.append({"rank": k, "step": st["step"], "dur_ns": st["dur_ns"], "words": st["words"],
                      "parts_ns": {p: sum(st["ns"].get(c, 0) for c in cats) for p, cats in BAR_PARTS.items()},
                      "devices": busy.get(st["step"], []), "mfu": m.get("mfu"), "tflops_per_s": m.get("tflops_per_s")})
    overall = b.get("overall")
    # busy in the analysed time (the device time breakdown's, which the verdict and the step bars are
    # of), not in the device's own window: an H100 step that is 59% host read "busy 99.0%"
    devices = [{"device": d["device"], "busy_ns": d["window_ns"] - d["idle_ns"], "window_ns": d["window_ns"],
                "busy_share": (1 - d["idle_ns"] / d["window_ns"]) if d["window_ns"] else None} for d in s.get("device_time") or []]
    notes = list(quality)
    lost = metrics.device_events_lost(metrics.rank_entry(run, k))
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
    verdict = overall["words"] + (" over the profiled span" if overall.get("over") == "window" else "") if overall else None
    return {"rank": k, "verdict": verdict, "bound": overall, "steps": steps, "devices": devices,
            "analysed_ns": s.get("analysed_ns"), "step_count": st.get("count", 0), "mfu_note": _mfu_note(u, lost, has_devices=bool(devices)),
            "mfu_median": u.get("mfu_median"), "device_name": u.get("device_name"), "quality": notes, "device_events_lost": lost}


def _mfu_note(u: dict, lost: dict | None = None, has_devices: bool = False) -> str | None:
    """Why MFU is null (never shown as 0); `lost`: metrics.device_events_lost of the rank;
    `has_devices`: the rank ran device work (a device the trace does not name is still a device)."""
    if u.get("mfu_median") is not None:
        return None
    if not u.get("device_name") and has_devices:
        return "MFU unknown: the trace does not name the device, so its peak is unknown (analyze --peak-tflops gives one)"
    if not u.get("device_name"):
        return f"MFU unknown: no device in this rank ({metrics.no_device_words(lost)})"
    if not u.get("peak"):
        return f"MFU unknown: unknown device peak for {u['device_name']!r} (analyze --peak-tflops gives one)"
    if not u.get("dtype"):
        return "MFU unknown: no FLOPs counted (no operator shapes recorded: record_shapes=True)"
    return f"MFU unknown: {u['peak']['name']} has no published peak for {u['dtype']}"


def _top_path(run, summaries: list[dict]) -> dict | None:
    """Top kernels, operators and lines over the ranks shown, by their share of step time: the ns
    the critical path charges them over every step, over the steps' total (None without steps:
    `_top_span`)."""
    from ...analyzers import critical_path as cp  # imported when the Overview is first drawn, not with the page

    items, total, steps = [], 0, 0
    for s in summaries:
        path = cp.path_of(run, s["rank"])  # columns: a dict per segment costs seconds on a 1M-event rank
        if len(path):
            total += int(path.ns.sum())
            steps += s["steps"]["count"]
            items += cp.path_items(run, path)
    if not total:
        return None
    ranks = ", ".join(str(s["rank"]) for s in summaries)
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
    where = _frame_lines(run, list(lines))
    by_line: dict = {}  # several frames (ranks, functions on one line) share a line: their figures add up
    for fid, (ns, events) in lines.items():
        _add(by_line, where.get(fid, f"frame {fid}"), {"charged_ns": ns, "events": events})
    lines = by_line
    return {"basis": "critical_path", "denominator_ns": total,
            "denominator": (f"% of step time: ns charged on the critical path over the {steps} profiler steps' total of "
                            f"{duration(total)} (rank{'s' if len(summaries) > 1 else ''} {ranks}); each list adds up to at most 100%"),
            "kernels": _ranked(kernels, total), "operators": _ranked(ops, total), "lines": _ranked(lines, total)}


def _top_span(rs: RunSet, r: OpenRun, summaries: list[dict]) -> dict:
    """Without profiler steps, the top lists by time over the profiled span (device time of
    overlapping streams adds up there)."""
    ranks = ", ".join(str(s["rank"]) for s in summaries)
    denom = sum(s.get("analysed_ns") or 0 for s in summaries)
    kernels, ops, lines = {}, {}, {}
    for s in summaries:
        for row in kernel_rows(rs, run=r.index, rank=s["rank"], limit=TOP)["rows"]:
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


def _frame_lines(run, ids: list[int]) -> dict[int, str]:
    """frame id -> its line's key (`line_key`); many frame ids can map to one line."""
    if not ids:
        return {}
    rows = run.sql("SELECT frame_id, file, line FROM frames WHERE frame_id IN (SELECT unnest(?::BIGINT[]))", [ids]).fetchall()
    return {fid: line_key(f, ln) for fid, f, ln in rows}


def _roofline(run, ranks: list[int]) -> dict:
    """Per kernel name (the longest ROOFLINE_KERNELS per rank): arithmetic intensity and achieved
    TFLOP/s from utilisation.kernel_table, and the device's ceilings (peak TFLOP/s per dtype and
    bandwidth) from its peak; an unknown device has no ceilings, only a note."""
    from ...analyzers import utilisation as util  # imported when the Overview is first drawn, not with the page

    points, peaks, notes = [], {}, []
    for k in ranks:
        work = util.rank_work(run, k)
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
            notes.append(f"rank {k}: no device ({metrics.no_device_words(metrics.device_events_lost(metrics.rank_entry(run, k)))}): no ceilings")
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
    return {s["rank"]: s for s in report_summary(rs, run=run).get("ranks", [])}


def _finding_row(f: dict, summary: dict) -> dict:
    rk = f["location"].get("rank")
    return {"id": str(f["index"]), "index": f["index"], "severity": f["severity"], "title": f["title"], "rank": rk,
            "impact_ms": round(f["impact_ms"], 3), "share": f["impact_share"], "share_of": share_denominator(rk, summary),
            "confidence": f["confidence"], "confidence_notes": f.get("confidence_notes") or [], "rule": f["rule_id"]}
