"""The timeline view with level of detail decided on the server.

For a window [t0, t1) drawn `width` pixels wide, one pixel is a bucket of b = (t1 - t0) / width ns.
- When at most EXACT_CAP events are visible, every one is sent as an exact slice.
- Otherwise the widest visible events (all wider than MIN_EXACT_PX pixels, at most EXACT_CAP of
  them) are sent exactly, and every other event is folded into per-lane, per-row, per-pixel
  buckets: occupancy (the share of the pixel's time covered by events), the number of events, the
  kind that covers most of it, and the event that covers most of it (what a click opens).
So the browser gets at most EXACT_CAP slices plus (rows x width) buckets, at any trace size.

With `flanks`, the view also holds the window width either side of it, [t0 - w, t0) and [t1, t1 + w)
(w = t1 - t0, only the parts that overlap the run), aggregated only: every event there folded into
buckets of FLANK_PX pixels (no exact slices, no steps, no memory; the wide-window pyramid
when a pixel is wide enough), appended to the window's buckets with offsets from t0 (negative on
the left). The window's buckets and both flanks' are one query per source (`_aggregate_parts`: one
scan of the pyramid for all three, a join to a table of the parts), not one each. The page draws
them outside the plot and moves them into view on a pan (assets/timeline_keys.js) before the
server's answer for the new window comes. `visible_events`, `mode` and the window's own counts are
the window's; `flank` says what was added.

Times are sent as float offsets in microseconds from the window start (float32 in the figure),
never as absolute nanoseconds. The lower time bound of the scan is t0 - short_max_dur so that
row-group statistics prune (rows are sorted by ts_ns); the few longer events are kept in memory.
The timeline of one rank of a run with more than runs.SCOPED_RANKS ranks reads that rank's
partition only (`OpenRun.of_rank`): its longest events, lanes and steps; the default window and
the time origin stay the whole run's. A job of a thousand ranks then opens on one rank without
scanning every rank's events.

Must not: draw anything (figure.py does), or read anything but the run's tables.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (Table.filter)

from .. import store
from . import runs as _runs
from .runs import HIDDEN_LANE_SQL, LANE_SQL, MAX_DEPTH_ROWS, SCOPED_RANKS, OpenRun, QueryError, RunSet, drawn_for, row_sql
from .runs import parse_int as _int

EXACT_CAP = 6000
"""Most exact slices sent for one view."""
MIN_EXACT_PX = 2.0
"""When aggregating, only events at least this many pixels wide are sent as exact slices."""
MAX_WIDTH_PX = 4000
FIRST_WIDTH_PX = 1500
"""The width the page's first timeline is computed for (before the browser says its own)."""
PYRAMID_BUCKETS = 1 << 16
"""Fine time buckets over the whole run in the pre-aggregated pyramid (see _pyramid)."""
PYRAMID_PX_FACTOR = 8
"""A window uses the pyramid when one pixel spans at least this many fine buckets."""
FLANK_PX = 4
"""Pixels per bucket in a view's flanks (a quarter of the buckets of a window's width: they are on
screen only from a pan until the server's answer for the new window, and every bucket the figure
holds costs the page time at each full redraw)."""


TIME_LIMIT_NS = 1 << 62
"""t0 and t1 must lie within ±2^62 ns (±146 years from the epoch): every timestamp a run can hold
fits, and the window's arithmetic (t0 minus the longest event, t1 - t0) stays inside int64."""


def parse_window(r: OpenRun, t0, t1, width) -> tuple[int, int, int]:
    start, end = r.span()
    t0 = _int(t0, "t0", start, -TIME_LIMIT_NS, TIME_LIMIT_NS)
    t1 = _int(t1, "t1", end + 1, -TIME_LIMIT_NS, TIME_LIMIT_NS)  # the window is [t0, t1): + 1 keeps an instant at the very end
    width = _int(width, "width", 1500)
    if not 10 <= width <= MAX_WIDTH_PX:
        raise QueryError(f"width must be between 10 and {MAX_WIDTH_PX} pixels, got {width}")
    if t1 <= t0:
        t1 = t0 + 1
    return t0, t1, width


def parse_flag(v, name: str, default: bool = False) -> bool:
    """A yes/no request parameter: true/false, 1/0, yes/no (any case); anything else is a QueryError."""
    if v is None or v == "":
        return default
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise QueryError(f"{name} must be true or false, got {str(v)[:40]!r}")


def parse_rank(r: OpenRun, rank) -> int | None:
    if rank is None or rank == "" or rank == "all":
        return None
    rk = _int(rank, "rank")
    if rk not in r.run.ranks:
        raise QueryError(f"rank {rk} is not in this run (ranks {r.run.ranks})")
    return rk


def _lanes_table(r: OpenRun, rank: int | None, all_lanes: bool = True) -> str:
    """Name of a table of the run's connection mapping lane identity to its first y row (made
    once; from SQL values, store.rows_table: no pyarrow array, whose first one imports pandas).
    Without `all_lanes` it holds only the lanes shown by default: the join drops the others."""
    band, tool_hidden = r.layout
    name = f"_nx_lanes_{'all' if rank is None else rank}{'' if all_lanes else '_shown'}{'_band' if band else ''}{'_mine' if tool_hidden else ''}"

    def compute():
        rows = [(ln.rank, ln.is_device, ln.a, ln.b, ln.text, ln.y0, ln.rows, ln.skip) for ln in r.lanes(rank, all_lanes)]
        with r.lock:
            store.rows_table(r.run.con, name, ["l_rank INTEGER", "l_dev BOOLEAN", "l_a BIGINT", "l_b BIGINT", "l_text VARCHAR",
                                               "l_y0 BIGINT", "l_rows BIGINT", "l_skip BIGINT"], rows)
        return name
    return r.cached(("lanes_tbl", rank, bool(all_lanes), band, tool_hidden), compute)


def _long_table(r: OpenRun) -> tuple[int, str]:
    threshold, tbl = r.long_events()

    def compute():
        with r.lock:
            r.run.con.register("_nx_long", tbl)
        return "_nx_long"
    return threshold, r.cached("long_tbl", compute)


def _window_sql(r: OpenRun, rank: int | None, t0: int, t1: int) -> tuple[str, list]:
    """A CTE `win` of the visible events (lane columns, no y yet), and its parameters."""
    threshold, _ = _long_table(r)
    rank_where = "" if rank is None else f" AND rank = {int(rank)}"
    cols = f"event_id, kind, name, ts_ns, dur_ns, {row_sql(r.python_band)} AS depth, {LANE_SQL}"
    parts, params = [], []
    if threshold >= 0:
        parts.append(f"SELECT {cols} FROM events WHERE ts_ns >= ? AND ts_ns < ? AND ts_ns + dur_ns >= ? AND dur_ns <= ?{rank_where} "
                     f"AND {drawn_for(r)}")
        params += [t0 - threshold, t1, t0, threshold]
    lw, lp = _long_window(r, rank, t0, t1)
    parts.append(lw)
    params += lp
    body = " UNION ALL ".join(parts)
    return f"WITH win AS ({body}) ", params


def _long_window(r: OpenRun, rank: int | None, t0: int, t1: int) -> tuple[str, list]:
    """The in-memory long events that overlap the window."""
    _, long_name = _long_table(r)
    rank_where = "" if rank is None else f" AND rank = {int(rank)}"
    return (f"SELECT event_id, kind, name, ts_ns, dur_ns, {row_sql(r.python_band)} AS depth, rank, is_device, lane_a, lane_b, lane_text "
            f"FROM {long_name} WHERE ts_ns < ? AND ts_ns + dur_ns >= ?{rank_where} AND {drawn_for(r)}", [t1, t0])


def _shown_sql(r: OpenRun, rank: int | None, all_lanes: bool) -> str:
    """A condition on LANE_SQL columns that keeps the events of the lanes shown ("true" for all):
    applied before a LIMIT, so that the widest events are picked among those drawn."""
    if all_lanes or len(r.lanes(rank, False)) == len(r.lanes(rank, True)):
        return "true"
    return f"NOT {HIDDEN_LANE_SQL}"


_NUMPY_TYPES = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64, pa.uint8(): np.uint8,
                pa.uint16(): np.uint16, pa.uint32(): np.uint32, pa.uint64(): np.uint64, pa.float32(): np.float32, pa.float64(): np.float64}


def _numpy(col) -> np.ndarray:
    """An Arrow column as NumPy, what `to_numpy(zero_copy_only=False)` gives, without pandas: pyarrow imports pandas
    at a process's first `to_numpy` of any type (0.5 s of CPU, on the first page's path). Numbers without nulls are
    read from their buffers; the rest (strings, nulls: NaN) from their Python values."""
    dtype = _NUMPY_TYPES.get(col.type)
    parts = []
    for ch in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]):
        if dtype is not None and ch.null_count == 0:
            parts.append(np.frombuffer(ch.buffers()[1], dtype=dtype, count=len(ch), offset=ch.offset * np.dtype(dtype).itemsize))
        elif dtype is not None:
            parts.append(np.array([np.nan if v is None else v for v in ch.to_pylist()], dtype=np.float64))
        else:
            parts.append(np.array(ch.to_pylist(), dtype=object) if len(ch) else np.zeros(0, object))
    if not parts:
        return np.zeros(0, dtype or object)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _mask(keep: np.ndarray) -> pa.Array:
    """A boolean NumPy array as an Arrow one for Table.filter (`pa.array` would import pandas: `_numpy`)."""
    return pa.Array.from_buffers(pa.bool_(), len(keep), [None, pa.py_buffer(np.packbits(keep, bitorder="little"))])


def _y_join(r: OpenRun, rank: int | None, inner: str, all_lanes: bool = True) -> str:
    """`inner` (a query with lane columns and `depth`: the event's row_sql) with each row's y row on the timeline."""
    lanes = _lanes_table(r, rank, all_lanes)
    return (f"SELECT q.*, l_y0 + least(greatest(coalesce(q.depth, 0) - l_skip, 0), l_rows - 1) AS y FROM ({inner}) q JOIN {lanes} "
            "ON q.rank = l_rank AND q.is_device = l_dev AND q.lane_a IS NOT DISTINCT FROM l_a "
            "AND q.lane_b IS NOT DISTINCT FROM l_b AND q.lane_text = l_text")


def timeline_arrays(rs: RunSet, run=0, t0=None, t1=None, width=None, rank=None, all_lanes=None, flanks: bool = False) -> dict:
    """The timeline of one window as numpy arrays (see the module docstring); `timeline` is its JSON form.
    Meta lanes (runs.Lane.hidden) and their events are left out unless `all_lanes`; with `flanks`,
    the window's width either side of it is added as buckets (see the module docstring)."""
    whole = r = rs.get(run)
    rank = parse_rank(r, rank)
    if rank is not None and len(r.run.ranks) > SCOPED_RANKS:
        r = r.of_rank(rank)  # one rank of many: its own partition's facts (the window and origin stay the run's)
    all_lanes = parse_flag(all_lanes, "all_lanes")
    shown = _shown_sql(r, rank, all_lanes)
    t0, t1, width = parse_window(whole, t0, t1, width)
    bucket = max(1.0, (t1 - t0) / width)
    cte, params = _window_sql(r, rank, t0, t1)
    threshold, _ = _long_table(r)
    min_exact = int(MIN_EXACT_PX * bucket) - 1  # an exact slice is wider than this when aggregating
    if 0 <= threshold < min_exact:
        # A wide window: only the in-memory long events can be wide enough to be exact slices, so
        # the raw events are only aggregated, never sorted.
        lw, lp = _long_window(r, rank, t0, t1)
        top = r.arrow(f"WITH win AS ({lw}) " + _y_join(r, rank, f"SELECT * FROM win WHERE {shown} ORDER BY dur_ns DESC LIMIT ?", all_lanes),
                      lp + [EXACT_CAP + 1])
        durs = _numpy(top["dur_ns"])
        cutoff = max(int(durs.min()) if top.num_rows > EXACT_CAP else -1, min_exact)
    else:
        # The widest visible events first: when there are at most EXACT_CAP, that is all of them.
        top = r.arrow(cte + _y_join(r, rank, f"SELECT * FROM win WHERE {shown} ORDER BY dur_ns DESC LIMIT ?", all_lanes), params + [EXACT_CAP + 1])
        if top.num_rows <= EXACT_CAP:
            cutoff = -1
        else:
            cutoff = max(int(_numpy(top["dur_ns"]).min()), min_exact)
    exact = top if cutoff < 0 else top.filter(_mask(_numpy(top["dur_ns"]) > cutoff))
    out = {
        "run": r.index, "rank": rank, "t0": t0, "t1": t1, "width": width, "bucket_ns": bucket,
        "run_start": whole.span()[0], "run_end": whole.span()[1], "visible_events": exact.num_rows,
        "lanes": [ln.to_dict() for ln in r.lanes(rank, all_lanes)], "all_lanes": all_lanes,
        "hidden_lanes": len(r.lanes(rank, True)) - len(r.lanes(rank, all_lanes)),
        "mode": "exact" if cutoff < 0 else "aggregated",
    }
    ts = _numpy(exact["ts_ns"]).astype(np.int64)
    dur = _numpy(exact["dur_ns"]).astype(np.int64)
    start = np.maximum(ts, t0)
    end = np.minimum(ts + dur, t1)
    out["slices"] = {
        "x0": ((start - t0) / 1000.0).astype(np.float32),
        "x1": ((end - t0) / 1000.0).astype(np.float32),
        "y": _numpy(exact["y"]).astype(np.int32),
        "kind": _numpy(exact["kind"]).astype(object),
        "name": _numpy(exact["name"]).astype(object),
        "event_id": _numpy(exact["event_id"]).astype(np.int64),
        "dur_ns": dur,
    }
    parts = [(t0, t1, float(bucket), cutoff)] if cutoff >= 0 else []
    sides = _flank_parts(whole, t0, t1, float(bucket) * FLANK_PX) if flanks else []
    got = _aggregate_parts(r, rank, parts + sides, shown, all_lanes)
    if cutoff >= 0:
        out["visible_events"] += int(_numpy(got[0]["events"]).astype(np.int64).sum())
        out["buckets"] = _bucket_arrays(got[0], float(bucket), 0.0)
    else:
        out["buckets"] = _bucket_arrays(None, float(bucket), 0.0)
    out["flank"] = None
    if flanks:
        out["flank"] = _add_flanks(out, whole, sides, got[len(parts):])
    out["steps"] = steps_in_window(r, rank, t0, t1)
    out["memory"] = memory_track(r, rank, t0, t1, width)
    return out


def first_timeline(rs: RunSet, run, rank: int | None, width: int = FIRST_WIDTH_PX) -> dict:
    """`timeline_arrays` of a run's first view: the whole window of the lanes shown by default
    (OpenRun.shown_span; of `rank` when given), with its flanks, `width` pixels wide. Computed once
    per run, rank, width and layout (OpenRun.cached, single-flight): the warm-up thread the server
    starts before its imports and the page's first view (app.first_view) ask for the same arrays,
    and the second waits for the first instead of computing them again beside it."""
    r = rs.get(run)
    rank = parse_rank(r, rank)

    def compute():
        t0, t1 = r.shown_span(rank)
        return timeline_arrays(rs, run=r.index, t0=t0, t1=t1 + 1, width=width, rank=rank, flanks=True)
    return r.cached(("first_timeline", rank, int(width), r.layout), compute)


BUCKET_FIELDS = ("x0", "x1", "y", "occupancy", "events", "kind", "event_id")


def _aggregate(r: OpenRun, rank: int | None, t0: int, t1: int, b: float, cutoff: int, shown: str, all_lanes: bool):
    """Per-pixel buckets (pixels of b ns from t0) of the events of [t0, t1) no longer than `cutoff` ns, with their y row."""
    return _aggregate_parts(r, rank, [(t0, t1, b, cutoff)], shown, all_lanes)[0]


def _parts_sql(parts: list[tuple[int, int, float, int]]) -> str:
    """The parts as a small table `parts(part, pa, pb, pbk, pcut)`: [pa, pb) in buckets of pbk ns, events up to pcut ns."""
    rows = ", ".join(f"({i}, {int(t0)}::BIGINT, {int(t1)}::BIGINT, {float(b)!r}::DOUBLE, {int(c)}::BIGINT)" for i, (t0, t1, b, c) in enumerate(parts))
    return f"parts(part, pa, pb, pbk, pcut) AS (VALUES {rows})"


def _aggregate_parts(r: OpenRun, rank: int | None, parts: list[tuple[int, int, float, int]], shown: str, all_lanes: bool) -> list:
    """`_aggregate` of several parts (t0, t1, b, cutoff) at once: the window and its flanks in one
    query per source (the pyramid, or the events) instead of one each. Each part's buckets are what
    `_aggregate` of that part alone gives: an event (or a pyramid row) that overlaps two parts is
    counted in both, joined to the small table of parts. Returns one table per part."""
    if not parts:
        return []
    threshold, _ = _long_table(r)
    pyr = _pyramid(r) if threshold >= 0 else None

    def by_pyramid(p):
        return pyr is not None and threshold < p[3] and p[2] >= PYRAMID_PX_FACTOR * pyr[1]
    groups = {}
    for i, p in enumerate(parts):
        groups.setdefault(by_pyramid(p), []).append(i)
    out = [None] * len(parts)
    for pyramid, idx in groups.items():
        sub = [parts[i] for i in idx]
        if pyramid:
            tbl = r.arrow(_pyramid_sql(r, rank, sub, all_lanes, pyr))
        else:
            lo, hi = min(p[0] for p in sub), max(p[1] for p in sub)
            cte, params = _window_sql(r, rank, lo, hi)
            lane = "rank, is_device, lane_a, lane_b, lane_text"
            tbl = r.arrow(
                cte.rstrip() + f", {_parts_sql(sub)} " + _y_join(r, rank, f"""SELECT {lane},
                      least(coalesce(depth, 0), {MAX_DEPTH_ROWS}) AS depth, part, pa, pb, pbk,
                      floor((greatest(ts_ns, pa) - pa) / pbk)::BIGINT AS bucket,
                      sum(least(ts_ns + dur_ns, pb) - greatest(ts_ns, pa)) / any_value(pbk) AS occupancy,
                      max(least(ts_ns + dur_ns, pb)) - any_value(pa) AS end_offset, count(*) AS events,
                      arg_max(kind, dur_ns) AS kind, arg_max(event_id, dur_ns) AS event_id
                      FROM win JOIN parts ON ts_ns < pb AND ts_ns + dur_ns >= pa AND dur_ns <= pcut
                      WHERE {shown} GROUP BY ALL""", all_lanes),
                params)
        k = _numpy(tbl["part"])
        for j, i in enumerate(idx):
            out[i] = tbl.filter(_mask(k == j))
    return out


def _bucket_arrays(agg, b: float, shift_us: float) -> dict:
    """The `buckets` arrays of an _aggregate table (None: none), x offsets in µs moved by `shift_us`."""
    if agg is None or agg.num_rows == 0:
        return {k: np.zeros(0, np.float32) for k in BUCKET_FIELDS}
    bk = _numpy(agg["bucket"]).astype(np.float64)
    return {
        "x0": (bk * b / 1000.0 + shift_us).astype(np.float32),
        "x1": (np.maximum((bk + 1) * b, _numpy(agg["end_offset"])) / 1000.0 + shift_us).astype(np.float32),
        "y": _numpy(agg["y"]).astype(np.int32),
        "occupancy": np.minimum(_numpy(agg["occupancy"]), 1.0).astype(np.float32),
        "events": _numpy(agg["events"]).astype(np.int64),
        "kind": _numpy(agg["kind"]).astype(object),
        "event_id": _numpy(agg["event_id"]).astype(np.int64),
    }


def _flank_parts(whole: OpenRun, t0: int, t1: int, b: float) -> list[tuple[int, int, float, int]]:
    """The parts (t0, t1, b, cutoff) of the window's width either side of it that overlap the run,
    every event aggregated in buckets of b ns."""
    w = t1 - t0
    start, end = whole.span()
    lo, hi = max(t0 - w, start), min(t1 + w, end + 1)
    return ([(lo, t0, b, TIME_LIMIT_NS)] if lo < t0 else []) + ([(t1, hi, b, TIME_LIMIT_NS)] if hi > t1 else [])


def _add_flanks(out: dict, whole: OpenRun, sides: list, tables: list) -> dict:
    """Append to out["buckets"] the buckets of the flanks (`sides`, `_flank_parts`; their aggregates
    `tables`), offsets from the window's t0; returns {t0, t1, buckets}: the span now covered and how
    many buckets were added."""
    t0, t1 = out["t0"], out["t1"]
    arrays = [_bucket_arrays(tbl, b, (a - t0) / 1000.0) for (a, _, b, _), tbl in zip(sides, tables)]
    n = sum(len(p["x0"]) for p in arrays)
    if n:
        own = out["buckets"]
        out["buckets"] = {k: np.concatenate(([own[k]] if len(own[k]) else []) + [p[k] for p in arrays if len(p[k])]) for k in BUCKET_FIELDS}
    return {"t0": min([t0] + [a for a, _, _, _ in sides]), "t1": max([t1] + [b for _, b, _, _ in sides]), "buckets": n}


def _pyramid(r: OpenRun):
    """(table name, fine bucket ns, run start) of the run's pre-aggregated short events, built once
    per run: stored beside the run (schema.TIMELINE_PYRAMID, RUN/derived/) at its first dashboard
    open and read back at every later one, unless the run changed since (store.derived_key).

    Every event not kept in memory (dur_ns <= short_max_dur) is counted in one of PYRAMID_BUCKETS
    fine time buckets per lane row: busy time, count, furthest end, and the longest event with its
    kind. A wide window re-buckets these rows instead of scanning millions of events; it is only
    used when a pixel spans at least PYRAMID_PX_FACTOR fine buckets, so attributing an event to its
    fine bucket's start moves it by at most 1/PYRAMID_PX_FACTOR of a pixel.
    """
    band, tool_hidden = r.layout
    tag = f"{int(band)}{int(tool_hidden)}"

    def compute():
        from .. import schema, store

        start, end = r.span()
        fine = max(1, -(-(end + 1 - start) // PYRAMID_BUCKETS))
        name = f"_nx_pyramid_{tag}"
        variant = f"{r.scope}-{tag}"
        # the query, whatever the threshold: that one follows from the events (LONG_EVENTS of them are longer)
        key = store.derived_key(r.run, f"LONG_EVENTS={_runs.LONG_EVENTS} " + _pyramid_query(r, band, "{threshold}", start, fine))
        tbl = store.read_derived(r.run, schema.TIMELINE_PYRAMID, variant, key)
        if tbl is None:
            threshold, _ = r.long_events()
            if threshold < 0:
                return None
            tbl = r.arrow(_pyramid_query(r, band, threshold, start, fine))
            store.write_derived(r.run, schema.TIMELINE_PYRAMID, variant, key, tbl)
        with r.lock:
            r.run.con.register(name, tbl)
        return (name, fine, start)
    return r.cached(("pyramid", band, tool_hidden), compute)


def _pyramid_query(r: OpenRun, band: bool, threshold, start: int, fine: int) -> str:
    """The pyramid's rows (schema.TIMELINE_PYRAMID's columns) of the events no longer than `threshold`."""
    return f"""SELECT {LANE_SQL}, least({row_sql(band)}, {MAX_DEPTH_ROWS})::INT AS depth,
                (ts_ns - {start}) // {fine} AS fine_bucket, sum(dur_ns)::BIGINT AS busy, count(*)::BIGINT AS n,
                max(ts_ns + dur_ns) AS end_max, arg_max(kind, dur_ns) AS kind, arg_max(event_id, dur_ns) AS event_id, max(dur_ns) AS dur
                FROM events WHERE dur_ns <= {threshold} AND {drawn_for(r)} GROUP BY ALL"""


def _pyramid_sql(r: OpenRun, rank: int | None, parts: list[tuple[int, int, float, int]], all_lanes: bool, pyr) -> str:
    """Per-pixel buckets of wide windows (`parts`: (t0, t1, b, cutoff) each, a column `part` says
    whose): the pyramid's fine buckets re-bucketed, plus the in-memory long events no longer than
    the part's cutoff (those that are not exact slices). One scan of the pyramid for every part."""
    name, fine, start = pyr
    _, long_name = _long_table(r)
    rw = "" if rank is None else f" AND rank = {int(rank)}"
    lane = "rank, is_device, lane_a, lane_b, lane_text"
    inner = f"""WITH {_parts_sql(parts)},
        p AS (
          SELECT {lane}, depth, part, pa, pb, pbk, greatest(floor(({start} + fine_bucket * {fine} - pa) / pbk), 0)::BIGINT AS bucket,
                 busy, n, end_max, kind, event_id, dur
          FROM {name} JOIN parts ON {start} + fine_bucket * {fine} < pb AND end_max >= pa WHERE true{rw}),
        l AS (
          SELECT {lane}, least({row_sql(r.python_band)}, {MAX_DEPTH_ROWS}) AS depth, part, pa, pb, pbk,
                 floor((greatest(ts_ns, pa) - pa) / pbk)::BIGINT AS bucket,
                 least(ts_ns + dur_ns, pb) - greatest(ts_ns, pa) AS busy, 1 AS n, ts_ns + dur_ns AS end_max,
                 kind, event_id, dur_ns AS dur
          FROM {long_name} JOIN parts ON ts_ns < pb AND ts_ns + dur_ns >= pa AND dur_ns <= pcut WHERE true{rw} AND {drawn_for(r)}),
        u AS (SELECT * FROM p UNION ALL SELECT * FROM l)
        SELECT {lane}, depth, part, pa, pb, pbk, bucket, sum(busy) / any_value(pbk) AS occupancy,
               least(max(end_max), any_value(pb)) - any_value(pa) AS end_offset,
               sum(n) AS events, arg_max(kind, dur) AS kind, arg_max(event_id, dur) AS event_id FROM u GROUP BY ALL"""
    return _y_join(r, rank, inner, all_lanes)


def steps_in_window(r: OpenRun, rank: int | None, t0: int, t1: int, limit: int = 400) -> list[dict]:
    """Profiler steps that overlap the window: step number, rank, start and end offsets (us)."""
    recs = [x for x in r.steps() if x["ts_ns"] < t1 and x["ts_ns"] + x["dur_ns"] > t0 and (rank is None or x["rank"] == rank)][:limit]
    return [{"rank": x["rank"], "step": x["step"], "x0": (x["ts_ns"] - t0) / 1000.0,
             "x1": (x["ts_ns"] + x["dur_ns"] - t0) / 1000.0} for x in recs]


def memory_track(r: OpenRun, rank: int | None, t0: int, t1: int, width: int) -> list[dict]:
    """Allocated bytes over the window, per (rank, device): the highest value in each pixel (at the
    time it was reached), plus the value in force at t0 (the last one before the window)."""
    b = max(1.0, (t1 - t0) / width)
    rank_where = "" if rank is None else f" AND rank = {int(rank)}"
    recs = r.records(
        f"""SELECT rank, device_type, device, list(x ORDER BY x) AS xs, list(v ORDER BY x) AS vs FROM (
              SELECT rank, device_type, device, (arg_max(ts_ns, total_allocated) - {t0}) / 1000.0 AS x, max(total_allocated) AS v
              FROM memory WHERE ts_ns >= ? AND ts_ns < ? AND total_allocated IS NOT NULL{rank_where}
              GROUP BY rank, device_type, device, floor((ts_ns - {t0}) / {b})
              UNION ALL
              SELECT rank, device_type, device, 0.0 AS x, arg_max(total_allocated, ts_ns) AS v
              FROM memory WHERE ts_ns < ? AND total_allocated IS NOT NULL{rank_where} GROUP BY ALL)
            GROUP BY ALL ORDER BY ALL""", [t0, t1, t0])
    out = []
    for x in recs:
        where = "cpu" if x["device_type"] == 0 else f"device {x['device']}"
        out.append({"rank": x["rank"], "device_type": x["device_type"], "device": x["device"],
                    "label": f"r{x['rank']} {where} allocated", "x": list(x["xs"]), "bytes": list(x["vs"])})
    return out


def _jsonable(v):
    if isinstance(v, np.ndarray):
        if v.dtype == np.float32:
            return [round(float(x), 3) for x in v]
        return v.tolist()
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def timeline(rs: RunSet, run=0, t0=None, t1=None, width=None, rank=None, all_lanes=None, flanks: bool = False) -> dict:
    """The timeline of one window as plain JSON data: lanes, exact slices, per-pixel buckets,
    steps and the memory counter track. Offsets (x0, x1) are microseconds from `t0`. Meta lanes
    (`Spans`, `Traces`, no thread, negative tids) are left out unless `all_lanes` is true; with
    `flanks`, the window's width either side of it is added as buckets (see the module docstring)."""
    return _jsonable(timeline_arrays(rs, run=run, t0=t0, t1=t1, width=width, rank=rank, all_lanes=all_lanes, flanks=flanks))
