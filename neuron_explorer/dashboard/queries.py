"""Every dashboard view as a query function returning plain, JSON-serialisable data.

Each function takes the RunSet and request-style parameters (strings are accepted, so the JSON API
passes its query string straight through) and returns dicts and lists. The Dash layer draws what
these return; `api.py` serves them as JSON; the CLI and agents can call them directly.
Times in the output are ns on the run clock (`*_ns`) or ms from the run's first event (`*_ms`).

Must not: draw, read a file the run's frames do not name, or open a path from a request.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..analyzers.metrics import DEVICE_WORK_KINDS, kinds_sql
from .runs import LANE_SQL, OpenRun, QueryError, RunSet
from .timeline import MAX_WIDTH_PX, _int, memory_track, parse_rank, timeline  # noqa: F401  (timeline is a view too)
from .compare import compare, compare_timeline  # noqa: F401  (the views of two runs)
from .search import search  # noqa: F401  (a view: find events by name)

TABLE_LIMIT = 500
"""Rows a table view returns when the request does not say (the output says when it cut)."""
MAX_TABLE_LIMIT = 1_000_000
"""The largest `limit` a table view accepts; a negative or larger one is answered with HTTP 400."""
KERNELS_PER_EVENT = 50
"""Most kernels listed for one event's chain."""
SOURCE_CONTEXT = 7
"""Lines shown above and below the user's line."""
MAX_SOURCE_BYTES = 2 << 20


def _rank_where(rank: int | None, col: str = "rank") -> str:
    return "" if rank is None else f" AND {col} = {int(rank)}"


def _ms(r: OpenRun, ts_ns) -> float | None:
    return None if ts_ns is None else round((ts_ns - r.span()[0]) / 1e6, 6)


# ---- runs --------------------------------------------------------------------------------------
def runs(rs: RunSet) -> list[dict]:
    """The runs this dashboard serves: index, name, ranks, event count, time span."""
    out = []
    for r in rs.runs:
        start, end = r.span()
        _, rows = r.query("SELECT count(*) FROM events")
        out.append({"run": r.index, "name": r.name, "ranks": r.run.ranks, "events": rows[0][0],
                    "start_ns": start, "end_ns": end, "duration_ms": (end - start) / 1e6,
                    "source": r.run.manifest.get("source")})
    return out


# ---- one event -------------------------------------------------------------------------------
_EVENT_COLS = ("event_id, rank, kind, category, name, ts_ns, dur_ns, pid, tid, device, stream, depth, parent_id, op_id, "
               "top_op_id, launch_id, correlation, external_id, step, module_path, frame_id, args")


def _event_row(r: OpenRun, event_id: int) -> dict | None:
    recs = r.records(f"SELECT {_EVENT_COLS}, {LANE_SQL} FROM events WHERE event_id = ?", [event_id])
    return recs[0] if recs else None


def _brief(r: OpenRun, e: dict | None, role: str) -> dict | None:
    if e is None:
        return None
    return {"role": role, "event_id": e["event_id"], "name": e["name"], "kind": e["kind"], "ts_ns": e["ts_ns"],
            "dur_ns": e["dur_ns"], "start_ms": _ms(r, e["ts_ns"]), "y": _y_of(r, e)}


def _y_of(r: OpenRun, e: dict) -> int | None:
    """The timeline row of an event in the all-ranks view (for drawing flows and highlights)."""
    for ln in r.lanes(None):
        if (ln.rank, ln.is_device, ln.a, ln.b, ln.text) == (e["rank"], e["is_device"], e["lane_a"], e["lane_b"], e["lane_text"]):
            return ln.y0 + min(int(e["depth"] or 0), ln.rows - 1)
    return None


def event(rs: RunSet, run=0, event_id=None) -> dict:
    """One event and its chain: user source line → top operator → operator → launch → kernels.

    For a runtime call the kernels are those it launched (launch_id); for an operator, the kernels
    launched by runtime calls inside it (op_id, else top_op_id). `flows` are the launch → kernel
    links to draw. `source` is the code around the user's line when the file is readable.
    """
    r = rs.get(run)
    eid = _int(event_id, "event_id")
    e = _event_row(r, eid)
    if e is None:
        raise QueryError(f"no event {eid} in run {r.index}")
    try:
        args = json.loads(e["args"]) if e["args"] else {}
    except ValueError:
        args = {"raw": e["args"]}
    get = lambda i: _event_row(r, i) if i is not None else None  # noqa: E731
    op = get(e["op_id"]) if e["op_id"] != eid else e
    top = get(e["top_op_id"]) if e["top_op_id"] != eid else e
    launch = get(e["launch_id"]) if e["launch_id"] is not None else None
    if e["kind"] == "runtime":
        where, params = "launch_id = ?", [eid]
    elif e["kind"] == "cpu_op":
        where, params = ("op_id = ? AND launch_id IS NOT NULL", [eid]) if e["op_id"] == eid else ("false", [])
        if e["top_op_id"] == eid:
            where, params = "top_op_id = ? AND launch_id IS NOT NULL", [eid]
    else:
        where, params = "false", []
    kernels = r.records(f"SELECT {_EVENT_COLS}, {LANE_SQL} FROM events WHERE {where} AND device IS NOT NULL "
                        f"ORDER BY ts_ns LIMIT {KERNELS_PER_EVENT + 1}", params)
    truncated = len(kernels) > KERNELS_PER_EVENT
    kernels = kernels[:KERNELS_PER_EVENT]
    if e["kind"] in ("kernel", "memcpy", "memset", "sync", "gpu_annotation") and e["device"] is not None:
        kernels = [e]
    # launches of the listed kernels (one query), for the chain and the flow arrows
    launch_ids = sorted({k["launch_id"] for k in kernels if k["launch_id"] is not None})
    launches = {x["event_id"]: x for x in r.records(
        f"SELECT {_EVENT_COLS}, {LANE_SQL} FROM events WHERE event_id IN ({', '.join(map(str, launch_ids)) or 'NULL'})")}
    flows = []
    for k in kernels:
        src = launches.get(k["launch_id"])
        if src is not None:
            flows.append({"from": _brief(r, src, "launch"), "to": _brief(r, k, "kernel")})
    frame = source(rs, run=r.index, frame_id=e["frame_id"]) if e["frame_id"] is not None else None
    chain = []
    if frame is not None:
        chain.append({"role": "source", "name": f"{frame['file']}:{frame['line']} {frame['function']}",
                      "frame_id": e["frame_id"]})
    for role, x in (("top operator", top), ("operator", op), ("launch", launch if launch is not None else
                                                              (e if e["kind"] == "runtime" else None))):
        if x is not None and (not chain or chain[-1].get("event_id") != x["event_id"]):
            chain.append(_brief(r, x, role))
    if launch is None and e["kind"] == "cpu_op" and launches:
        chain += [_brief(r, x, "launch") for x in list(launches.values())[:5]]
    chain += [_brief(r, k, "kernel") for k in kernels[:10]]
    return {
        "run": r.index, "event_id": eid, "name": e["name"], "kind": e["kind"], "category": e["category"],
        "rank": e["rank"], "pid": e["pid"], "tid": e["tid"], "device": e["device"], "stream": e["stream"],
        "ts_ns": e["ts_ns"], "dur_ns": e["dur_ns"], "start_ms": _ms(r, e["ts_ns"]), "end_ms": _ms(r, e["ts_ns"] + e["dur_ns"]),
        "step": e["step"], "module_path": e["module_path"], "args": args, "y": _y_of(r, e),
        "operator": _brief(r, op, "operator"), "top_operator": _brief(r, top, "top operator"),
        "launch": _brief(r, launch, "launch"), "kernels": [_brief(r, k, "kernel") for k in kernels],
        "chain": chain, "flows": flows, "source": frame, "truncated": truncated,
    }


# ---- source ----------------------------------------------------------------------------------
def _resolve(r: OpenRun, file: str) -> Path | None:
    """The readable .py file a frame names: absolute as recorded, else under one of the run's
    source roots. Only Python sources are read, whatever a (possibly hostile) run says: the check
    is made on the real path, symlinks resolved (`evil.py -> /etc/passwd` is not a .py file)."""
    if not file or not file.endswith(".py") or "\x00" in file:
        return None
    p = Path(file)
    candidates = [p] if p.is_absolute() else [root / p for root in r.source_roots()]
    for c in candidates:
        try:
            real = c.resolve(strict=True)
            if real.suffix == ".py" and real.is_file() and real.stat().st_size <= MAX_SOURCE_BYTES:
                return real
        except (OSError, RuntimeError):  # missing, unreadable, or a symlink loop
            continue
    return None


def source(rs: RunSet, run=0, frame_id=None, context=None) -> dict:
    """The code around a frame's line. The file is the one the run's frame names — a request can
    only name a frame id, never a path."""
    r = rs.get(run)
    fid = _int(frame_id, "frame_id")
    ctx = _int(context, "context", SOURCE_CONTEXT, 0, 50)
    recs = r.records("SELECT frame_id, file, line, function, is_user, line_kind, parent_frame_id FROM frames WHERE frame_id = ?", [fid])
    if not recs:
        raise QueryError(f"no frame {fid} in run {r.index}")
    f = recs[0]
    out = {"frame_id": fid, "file": f["file"], "line": f["line"], "function": f["function"], "is_user": f["is_user"],
           "line_kind": f["line_kind"], "readable": False, "lines": [], "callers": []}
    # the callers (live runs record parent frames): the user's own code path to this line
    seen, cur = {fid}, f["parent_frame_id"]
    while cur is not None and cur not in seen and len(out["callers"]) < 20:
        seen.add(cur)
        up = r.records("SELECT frame_id, file, line, function, parent_frame_id FROM frames WHERE frame_id = ?", [cur])
        if not up:
            break
        out["callers"].append({k: up[0][k] for k in ("frame_id", "file", "line", "function")})
        cur = up[0]["parent_frame_id"]
    path = _resolve(r, f["file"])
    if path is None:
        out["reason"] = "source file not found (looked where the run's traces were imported from)"
        return out
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as e:
        out["reason"] = f"cannot read the source file ({e.strerror})"
        return out
    line = int(f["line"] or 0)
    lo, hi = max(1, line - ctx), min(len(text), line + ctx)
    out["readable"] = True
    out["lines"] = [{"line": n, "text": text[n - 1], "current": n == line} for n in range(lo, hi + 1)]
    return out


# ---- tables ----------------------------------------------------------------------------------
def _table(rows: list[dict], limit: int) -> dict:
    return {"rows": rows[:limit], "truncated": len(rows) > limit, "total_rows": len(rows)}


def operators(rs: RunSet, run=0, rank=None, limit=None) -> dict:
    """Per CPU operator name: calls; CPU total (sum of durations) and self (minus the slices
    directly inside it on its thread); device self (device work launched from inside the operator
    with no other operator in between: op_id) and device total (device work launched anywhere
    inside it: the operator is on the op_id → parent-operator chain of the kernel's launch)."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    limit = _int(limit, "limit", TABLE_LIMIT, 0, MAX_TABLE_LIMIT)
    key = ("operators", rank)
    if key not in r._facts:
        rw = _rank_where(rank, "o.rank")
        base = r.records(
            f"""SELECT o.name, count(*) AS calls, sum(o.dur_ns)::BIGINT AS cpu_total_ns,
                  (sum(o.dur_ns) - coalesce(sum(c.child_ns), 0))::BIGINT AS cpu_self_ns
                FROM events o LEFT JOIN (SELECT parent_id, sum(dur_ns) AS child_ns FROM events WHERE parent_id IS NOT NULL GROUP BY 1) c
                ON c.parent_id = o.event_id WHERE o.kind = 'cpu_op'{rw} GROUP BY o.name""")
        # parent operator of each operator: the innermost operator around its parent slice
        tbl = r.arrow(f"""SELECT o.event_id, o.name, p.op_id AS parent_op FROM events o LEFT JOIN events p ON p.event_id = o.parent_id
                          WHERE o.kind = 'cpu_op'{rw} ORDER BY o.event_id""")
        ids = tbl["event_id"].to_numpy()
        names = tbl["name"].to_numpy(zero_copy_only=False)
        parent = tbl["parent_op"].to_numpy(zero_copy_only=False)
        parent = np.where(np.isnan(parent.astype(float)), -1, parent).astype(np.int64) if parent.dtype != np.int64 else parent
        dev = r.arrow(f"SELECT op_id, dur_ns FROM events WHERE kind IN {kinds_sql(DEVICE_WORK_KINDS)} AND op_id IS NOT NULL"
                      f"{_rank_where(rank)}")
        k_op = dev["op_id"].to_numpy()
        k_dur = dev["dur_ns"].to_numpy()
        self_dev: dict[str, int] = {}
        total_dev: dict[str, int] = {}
        if len(ids) and len(k_op):
            import pandas as pd

            pos = np.searchsorted(ids, k_op).clip(0, len(ids) - 1)
            ok = ids[pos] == k_op
            pos, dur = pos[ok], k_dur[ok]
            codes, uniq = pd.factorize(names)
            self_dev = pd.Series(dur).groupby(uniq[codes[pos]]).sum().to_dict()
            # walk each kernel's operator chain upwards; a kernel counts once per operator name
            kernel_idx, name_code = [], []
            cur, alive, k_index = pos.copy(), np.ones(len(pos), bool), np.arange(len(pos))
            for _ in range(256):  # operator nesting is far shallower than this
                kernel_idx.append(k_index[alive])
                name_code.append(codes[cur[alive]])
                up = parent[cur]
                upos = np.searchsorted(ids, up).clip(0, len(ids) - 1)
                alive &= (up >= 0) & (ids[upos] == up)
                cur = np.where(alive, upos, cur)
                if not alive.any():
                    break
            pairs = pd.DataFrame({"k": np.concatenate(kernel_idx), "n": np.concatenate(name_code)}).drop_duplicates()
            pairs["dur"] = dur[pairs["k"].to_numpy()]
            total_dev = {uniq[c]: int(v) for c, v in pairs.groupby("n")["dur"].sum().items()}
            self_dev = {k: int(v) for k, v in self_dev.items()}
        for b in base:
            b["device_self_ns"] = self_dev.get(b["name"], 0)
            b["device_total_ns"] = total_dev.get(b["name"], 0)
        base.sort(key=lambda x: (-x["device_total_ns"], -x["cpu_total_ns"], x["name"]))
        r._facts[key] = base
    return _table(r._facts[key], limit)


def kernels(rs: RunSet, run=0, rank=None, limit=None) -> dict:
    """Per device kernel (and copy/set) name: count, device total (= self: device work does not
    nest), mean and max, and the CPU time of the runtime calls that launched them."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    limit = _int(limit, "limit", TABLE_LIMIT, 0, MAX_TABLE_LIMIT)
    rows = r.records(
        f"""SELECT k.name, k.kind, count(*) AS calls, sum(k.dur_ns)::BIGINT AS device_total_ns, sum(k.dur_ns)::BIGINT AS device_self_ns,
              avg(k.dur_ns)::BIGINT AS mean_ns, max(k.dur_ns) AS max_ns, coalesce(sum(l.dur_ns), 0)::BIGINT AS launch_cpu_ns
            FROM events k LEFT JOIN events l ON l.event_id = k.launch_id
            WHERE k.kind IN {kinds_sql(DEVICE_WORK_KINDS)}{_rank_where(rank, 'k.rank')}
            GROUP BY k.name, k.kind ORDER BY device_total_ns DESC, k.name LIMIT ?""", [limit + 1])
    return _table(rows, limit)


def source_lines(rs: RunSet, run=0, rank=None, limit=None) -> dict:
    """Per user source line, by the one definition (analyzers/lines.py): its code, calls per step,
    CPU time of its top-level operators and device time of their work, self (the line is the
    statement) and total (the line is anywhere in the statement's user-frame ancestry), the
    backward part of self (backward work counts on its forward statement) and Python-level time."""
    from ..analyzers.lines import self_and_total

    r = rs.get(run)
    rank = parse_rank(r, rank)
    limit = _int(limit, "limit", TABLE_LIMIT, 0, MAX_TABLE_LIMIT)
    merged: dict[tuple, dict] = {}
    has_frames = False
    for rk in ([rank] if rank is not None else r.run.ranks):
        with r.lock:
            got = self_and_total(r.run, rk)
        has_frames |= got["has_frames"]
        steps = len([s for s in r.steps() if s["rank"] == rk]) or None
        for source, x in got["lines"].items():
            merged[(rk, source)] = {
                "rank": rk, "source": source, "code": x["code"],
                "calls_per_step": round(x["calls_self"] / steps, 1) if steps else None,
                "cpu_self_ns": x["cpu_ns_self"], "cpu_total_ns": x["cpu_ns_total"],
                "device_self_ns": x["device_ns_self"], "device_total_ns": x["device_ns_total"],
                "backward_self_ns": x["cpu_backward_ns_self"] + x["device_backward_ns_self"],
                "python_self_ns": x["python_ns_self"]}
    rows = sorted(merged.values(), key=lambda x: (-x["device_total_ns"], -x["cpu_total_ns"], x["source"]))
    return {**_table(rows, limit), "has_frames": has_frames}


def steps(rs: RunSet, run=0, rank=None) -> dict:
    """Per profiler step and rank: start (ms from the run's first event), duration, and the device
    time of the work launched in it."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    dev = {(a, b): c for a, b, c in r.query(
        f"SELECT rank, step, sum(dur_ns)::BIGINT FROM events WHERE kind IN {kinds_sql(DEVICE_WORK_KINDS)} AND step IS NOT NULL"
        f"{_rank_where(rank)} GROUP BY ALL")[1]}
    rows = [{"rank": s["rank"], "step": s["step"], "start_ms": _ms(r, s["ts_ns"]), "dur_ms": s["dur_ns"] / 1e6,
             "ts_ns": s["ts_ns"], "dur_ns": s["dur_ns"], "device_ns": dev.get((s["rank"], s["step"]), 0)}
            for s in r.steps() if rank is None or s["rank"] == rank]
    return {"rows": rows, "truncated": False}


def memory(rs: RunSet, run=0, rank=None, width=None) -> dict:
    """Allocated bytes over the whole run per (rank, device): the highest value in each of `width`
    time buckets; x is ms from the run's first event."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    width = _int(width, "width", 1000, 10, MAX_WIDTH_PX)
    start, end = r.span()
    series = memory_track(r, rank, start, end + 1, width)
    for s in series:
        s["x_ms"] = [x / 1000.0 for x in s.pop("x")]
    return {"series": series, "truncated": False}


# ---- findings --------------------------------------------------------------------------------
def _load_analyze():
    try:
        from ..analyzers import analyze
    except ImportError:
        return None
    return analyze


def findings(rs: RunSet, run=0, rank=None) -> dict:
    """The analyzer's ranked findings, each with where to look: a time window (ns) covering its
    whole evidence (its sample events and its steps), and the events to highlight. With `rank`,
    the findings of that rank and those of the whole run (no rank); `index` stays the finding's
    place in the run's ranking. The report's summary is kept for the overview (`report_summary`)."""
    r = rs.get(run)
    if "findings" not in r._facts:
        analyze = _load_analyze()
        if analyze is None:
            raise QueryError("the analyzer is not available in this installation")
        report = analyze(r.run.path, write=False)  # the dashboard only reads the run
        r._facts["report_summary"] = report.summary
        r._facts["findings"] = findings_from_report(r, report)
    out = r._facts["findings"]
    rank = parse_rank(r, rank)
    if rank is None:
        return out
    return {**out, "rows": [f for f in out["rows"] if f["location"].get("rank") in (None, rank)]}


def report_summary(rs: RunSet, run=0) -> dict:
    """The `summary` of the report the findings came from (report.json's: per rank the step
    statistics, devices, `bound` and `utilisation`), computed once with the findings."""
    r = rs.get(run)
    findings(rs, run=r.index)
    return r._facts.get("report_summary") or {"ranks": []}


def findings_from_report(r: OpenRun, report) -> dict:
    rows = []
    for i, f in enumerate(report.findings):
        d = f.to_dict()
        rows.append({"index": i, "rule_id": d["rule_id"], "title": d["title"], "severity": d["severity"],
                     "category": d["category"], "impact_ms": d["impact_ns"] / 1e6, "impact_share": d["impact_share"],
                     "saving_bound_ms": d["saving_bound_ns"] / 1e6, "confidence": d["confidence"],
                     "confidence_notes": list(d.get("confidence_notes") or []),
                     "source": d["location"].get("source"), "recommendation": d["recommendation"],
                     "location": d["location"], "evidence_sql": d["evidence"]["sql"],
                     "event_ids": [int(x) for x in d["evidence"].get("sample_event_ids") or []][:200],
                     **_target(r, d)})
    return {"rows": rows, "warnings": list(report.warnings), "truncated": False}


def _overview(rs: RunSet, run=0, rank=None) -> dict:
    """The Overview page's data (dashboard/overview.py, which builds on these views)."""
    from .overview import overview

    return overview(rs, run=run, rank=rank)


def _target(r: OpenRun, d: dict) -> dict:
    """The window to zoom to for a finding: its whole evidence, the time range covering all its
    sample events and all its steps (padded by a tenth of its length), not one sample."""
    ids = [int(x) for x in d["evidence"].get("sample_event_ids") or []][:200]
    spans = []
    if ids:
        _, rows = r.query(f"SELECT min(ts_ns), max(ts_ns + dur_ns) FROM events WHERE event_id IN ({', '.join(map(str, ids))})")
        if rows[0][0] is not None:
            spans.append(rows[0])
    if d["location"].get("steps"):
        wanted = set(d["location"]["steps"])
        rk = d["location"].get("rank")
        spans += [(s["ts_ns"], s["ts_ns"] + s["dur_ns"]) for s in r.steps() if s["step"] in wanted and (rk is None or s["rank"] == rk)]
    if not spans:
        return {"t0": None, "t1": None}
    t0, t1 = min(a for a, _ in spans), max(b for _, b in spans)
    pad = max((t1 - t0) // 10, 1000)
    return {"t0": int(t0 - pad), "t1": int(t1 + pad)}


VIEWS = {
    "runs": runs,
    "timeline": timeline,
    "event": event,
    "source": source,
    "operators": operators,
    "kernels": kernels,
    "lines": source_lines,
    "steps": steps,
    "memory": memory,
    "findings": findings,
    "search": search,
    "overview": _overview,
}
"""The views served at /api/<name>; each is documented by its docstring."""

PAIR_VIEWS = {
    "compare": compare,
    "compare_timeline": compare_timeline,
}
"""The views of two runs (`base`, `test` run indexes instead of `run`), also served at /api/<name>."""

