"""Ways to move around the timeline that start elsewhere: a table row, an area of the timeline,
the critical path of a step.

- `jump`: a row of the operators, kernels, source lines or steps table → its instances (the events
  that row sums), the heaviest one, and the window that shows it.
- `instances`: the instances of such a row inside a window (what the timeline highlights).
- `area`: the events of some lanes inside a time range, aggregated per name (Perfetto's area
  selection): count, total and self time.
- `critical_path`: the charged segments of the critical path of the step in view
  (analyzers.critical_path.path_of), placed on their lanes.

Each returns plain data; app.py draws it and api.py serves it (/api/area, /api/critical_path,
/api/jump). Must not: draw, or compute the critical path itself.
"""

from __future__ import annotations

from ...vocab import charged_at_capture_to, device_work, top_op
from ..runs import OpenRun, QueryError, RunSet, placed_cols
from ..timeline import TIME_LIMIT_NS, _int, parse_flag, parse_rank

TABLES = ("operators", "kernels", "lines", "steps")
"""The tables whose rows jump to the timeline."""
MAX_INSTANCES = 2000
"""Most instances of a row highlighted in one window (the heaviest first)."""
JUMP_PAD_NS = 10_000
"""At least this much time is shown on each side of the heaviest instance."""
AREA_NAMES = 200
"""Names listed by an area selection (the heaviest by total; `names` says how many there are)."""


def _rank_where(rank: int | None, col: str = "rank") -> str:
    return "" if rank is None else f" AND {col} = {int(rank)}"


def _where(r: OpenRun, table: str, key: dict) -> tuple[str, list]:
    """The SQL condition (on `events`) that picks the instances of one table row, and its params:
    the operators of that name (and the graph-replayed device work charged to it at capture,
    vocab.charged_at_capture_to); the device work of that name and kind; the top-level operators of
    that source line (the statement that ran them, backward work on its forward line, as the
    lines table counts them); the step's own range."""
    if table == "operators":
        return f"(kind = 'cpu_op' AND name = ? OR {device_work()} AND {charged_at_capture_to(str(key['name']))})", [str(key["name"])]
    if table == "kernels":
        return "device IS NOT NULL AND name = ? AND kind = ?", [str(key["name"]), str(key["kind"])]
    if table == "lines":
        file, _, line = str(key["source"]).rpartition(":")
        return (f"{top_op()} AND source_frame_id IN (SELECT frame_id FROM frames WHERE file = ? AND line = ?)",
                [file, _int(line, "line")])
    if table == "steps":
        return "event_id IN (SELECT event_id FROM steps WHERE rank = ? AND step = ?)", [_int(key["rank"], "rank"), _int(key["step"], "step")]
    raise QueryError(f"table must be one of {', '.join(TABLES)}, got {table!r}")


def row_key(table: str, row: dict) -> dict:
    """What identifies a table row (as queries.operators/kernels/source_lines/steps return it)."""
    fields = {"operators": ("name",), "kernels": ("name", "kind"), "lines": ("source", "rank"), "steps": ("rank", "step")}.get(table)
    if fields is None:
        raise QueryError(f"table must be one of {', '.join(TABLES)}, got {table!r}")
    missing = [f for f in fields if f not in row]
    if missing:
        raise QueryError(f"a {table} row needs {', '.join(missing)}")
    return {f: row[f] for f in fields}


def jump(rs: RunSet, run=0, table=None, name=None, kind=None, source=None, step=None, rank=None) -> dict:
    """The instances of one table row: how many, the heaviest (event id, start, duration) and the
    window that shows it with its own length (at least JUMP_PAD_NS) on each side."""
    r = rs.get(run)
    rk = parse_rank(r, rank)
    key = {"name": name, "kind": kind, "source": source, "step": step, "rank": rk}
    if table == "steps" and rk is None:
        raise QueryError("a step is named by its rank and step")
    cond, params = _where(r, str(table), key)
    if table != "steps":
        cond += _rank_where(rk)
    recs = r.records(f"SELECT event_id, ts_ns, dur_ns, count(*) OVER () AS n FROM events WHERE {cond} "
                     "ORDER BY dur_ns DESC, event_id LIMIT 1", params)
    if not recs:
        raise QueryError(f"no instance of that {table} row in run {r.index}")
    top = recs[0]
    pad = max(int(top["dur_ns"]), JUMP_PAD_NS)
    return {"table": table, "key": key, "count": int(top["n"]), "event_id": int(top["event_id"]), "ts_ns": int(top["ts_ns"]),
            "dur_ns": int(top["dur_ns"]), "t0": int(top["ts_ns"]) - pad, "t1": int(top["ts_ns"]) + int(top["dur_ns"]) + pad}


def instances(rs: RunSet, run, table: str, key: dict, t0: int, t1: int, limit: int = MAX_INSTANCES) -> list[dict]:
    """The instances of a table row that overlap [t0, t1), heaviest first (at most `limit`), as
    event rows with their lane columns (for queries._brief)."""
    r = rs.get(run)
    cond, params = _where(r, table, key)
    if key.get("rank") is not None and table != "steps":
        cond += _rank_where(int(key["rank"]))
    return r.records(f"SELECT event_id, name, kind, ts_ns, dur_ns, {placed_cols(r)} FROM events WHERE {cond} "
                     "AND ts_ns < ? AND ts_ns + dur_ns >= ? ORDER BY dur_ns DESC LIMIT ?", params + [int(t1), int(t0), int(limit)])


def lanes_in_rows(r: OpenRun, rank: int | None, all_lanes: bool, y0: float, y1: float) -> list:
    """The lanes of the timeline (its layout for `rank`, `all_lanes`) with a row between y0 and y1."""
    lo, hi = min(y0, y1), max(y0, y1)
    return [ln for ln in r.lanes(rank, all_lanes) if ln.y0 - 0.5 <= hi and ln.y0 + ln.rows - 0.5 >= lo]


def area(rs: RunSet, run=0, t0=None, t1=None, y0=None, y1=None, rank=None, all_lanes=None) -> dict:
    """The events of the lanes between rows y0 and y1 that overlap [t0, t1), per name, as
    Perfetto's area selection: `count` (events that overlap), `total_ns` (their time inside the
    range: each duration clipped to it) and `self_ns` (their self time, schema `self_ns`, in the
    same share: self x clipped / duration), heaviest total first (at most AREA_NAMES)."""
    r = rs.get(run)
    rk = parse_rank(r, rank)
    show_all = parse_flag(all_lanes, "all_lanes")
    a = _int(t0, "t0", None, -TIME_LIMIT_NS, TIME_LIMIT_NS)
    b = _int(t1, "t1", None, -TIME_LIMIT_NS, TIME_LIMIT_NS)
    if b <= a:
        raise QueryError("t1 must be after t0")
    lanes = lanes_in_rows(r, rk, show_all, float(_int(y0, "y0", 0)), float(_int(y1, "y1", 1 << 30)))
    out = {"t0": a, "t1": b, "lanes": [ln.label for ln in lanes], "rows": [], "names": 0, "truncated": False}
    if not lanes:
        return out
    keys = " OR ".join(
        f"(rank = {ln.rank} AND (device IS NOT NULL) = {str(ln.is_device).lower()} AND coalesce(device, pid) IS NOT DISTINCT FROM {_lit(ln.a)} "
        f"AND (CASE WHEN device IS NOT NULL THEN coalesce(stream, tid) ELSE tid END) IS NOT DISTINCT FROM {_lit(ln.b)} "
        f"AND coalesce(pid_text, '') = ?)" for ln in lanes)
    params = [ln.text for ln in lanes]
    threshold, _ = r.long_events()
    # rows are sorted by ts_ns: the lower bound (the longest event before t0) lets row groups prune
    lower = a - max(threshold, 0) if threshold >= 0 else None
    time_cond = "ts_ns < ? AND ts_ns + dur_ns > ?" + ("" if lower is None else f" AND (ts_ns >= {lower} OR dur_ns > {threshold})")
    recs = r.records(
        f"""SELECT name, count(*) AS count, sum(least(ts_ns + dur_ns, ?) - greatest(ts_ns, ?))::BIGINT AS total_ns,
              sum(CASE WHEN dur_ns > 0 THEN coalesce(self_ns, dur_ns) * (least(ts_ns + dur_ns, ?) - greatest(ts_ns, ?)) / dur_ns
                       ELSE 0 END)::BIGINT AS self_ns, count(*) OVER () AS names
            FROM events WHERE {time_cond} AND ({keys}) GROUP BY name ORDER BY total_ns DESC, name LIMIT ?""",
        [b, a, b, a, b, a, *params, AREA_NAMES])
    out["rows"] = [{"name": x["name"], "count": int(x["count"]), "total_ns": int(x["total_ns"]), "self_ns": int(x["self_ns"])} for x in recs]
    out["names"] = int(recs[0]["names"]) if recs else 0
    out["truncated"] = out["names"] > len(recs)
    return out


def _lit(v) -> str:
    return "NULL" if v is None else str(int(v))


def step_in_view(r: OpenRun, rank: int, t0: int, t1: int) -> dict | None:
    """The step of `rank` the window shows: the one that holds the window's middle, else the one
    that overlaps the window most."""
    mid = (t0 + t1) // 2
    best, best_overlap = None, 0
    for s in r.steps():
        if s["rank"] != rank:
            continue
        if s["ts_ns"] <= mid < s["ts_ns"] + s["dur_ns"]:
            return s
        ov = min(t1, s["ts_ns"] + s["dur_ns"]) - max(t0, s["ts_ns"])
        if ov > best_overlap:
            best, best_overlap = s, ov
    return best


def critical_path(rs: RunSet, run=0, t0=None, t1=None, rank=None) -> dict:
    """The critical path of the step in view (per rank shown; all ranks: every rank's step at the
    window): its charged segments in time order with the event each is charged to (none for an
    idle gap), category, charged ns and the lane columns of the event."""
    from ...analyzers.critical_path import path_of

    r = rs.get(run)
    rk = parse_rank(r, rank)
    start, end = r.span()
    a = _int(t0, "t0", start, -TIME_LIMIT_NS, TIME_LIMIT_NS)
    b = _int(t1, "t1", end + 1, -TIME_LIMIT_NS, TIME_LIMIT_NS)
    out = {"steps": [], "segments": []}
    for rank_ in ([rk] if rk is not None else r.run.ranks):
        st = step_in_view(r, rank_, a, b)
        if st is None:
            continue
        with r.lock:
            path = path_of(r.run, rank_)
        segs = path.select(path.step == st["step"]).rows()  # the step's segments only: a dict per segment of every step costs seconds
        out["steps"].append({"rank": rank_, "step": st["step"], "ts_ns": st["ts_ns"], "dur_ns": st["dur_ns"],
                             "charged_ns": sum(p["charged_ns"] for p in segs)})
        out["segments"] += [{k: p[k] for k in ("rank", "step", "ts_ns", "charged_ns", "event_id", "category")} for p in segs]
    return out
