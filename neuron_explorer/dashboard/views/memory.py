"""The memory of a time range, as the dashboard's Memory tab and `/api/memory_range` show it: the
allocated bytes over the range per device, the allocations of the range and the lines and
operators that allocated most (analyzers/memory_range.py, the one definition of those figures).

Times are ns on the run clock (`*_ns`) or ms from the run's first event (`*_ms`, the timeline's
axis), so that a range of the timeline and of the memory chart are the same numbers.

Must not: draw (ui/memory.py does) or define a figure of its own (analyzers/memory_range.py does).
"""

from __future__ import annotations

from ...analyzers.memory_range import RANGE_ROWS, memory_range_of
from ..chain import ms_from_start
from ..runs import RunSet, parse_int
from ..timeline import MAX_WIDTH_PX, memory_track, parse_rank, parse_window

NO_MEMORY = "no memory events in this run: record with profile_memory=True (torch.profiler) to see allocations over time"
"""What the Memory tab says, in one line, for a run without allocator events."""


def has_memory(rs: RunSet, run=0) -> bool:
    """Whether the run has any allocator event (a row of `memory`)."""
    r = rs.get(run)
    return r.cached("has_memory", lambda: bool(r.query("SELECT count(*) FROM (SELECT 1 FROM memory LIMIT 1)")[1][0][0]))


def where(device_type, device) -> str:
    """A device's name in the tables: "CPU" or "device N"."""
    return "CPU" if device_type == 0 else f"device {device}"


def memory_range(rs: RunSet, run=0, t0=None, t1=None, rank=None, width=None, limit=None) -> dict:
    """The memory of the range `[t0, t1)` (ns; the whole run by default) of `rank` (every rank by
    default): analyzers.memory_range's figures (`totals`, `devices`, `allocations`, `by_line`,
    `by_operator`, `allocator_calls`, `has_addresses`, `sql`) with ms from the run's first event
    beside each time, and `series`: allocated bytes over the range per (rank, device) at `width`
    pixels (the highest value in each, the value in force at t0 first and the last one again at t1),
    x in ms from the run's first event. `empty` is NO_MEMORY for a run without allocator events."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    t0, t1, width = parse_window(r, t0, t1, width if width not in (None, "") else 1000)
    width = min(width, MAX_WIDTH_PX)
    limit = parse_int(limit, "limit", RANGE_ROWS, 1, 10_000)
    ms = lambda ts: ms_from_start(r, ts)  # noqa: E731
    if not has_memory(rs, r.index):
        return {"t0": t0, "t1": t1, "t0_ms": ms(t0), "t1_ms": ms(t1), "rank": rank, "empty": NO_MEMORY, "series": [], "totals": None,
                "devices": [], "allocations": [], "by_line": [], "by_operator": [], "allocator_calls": None, "has_addresses": False,
                "truncated": False, "sql": None}
    out = memory_range_of(r.records, t0, t1, rank, limit)
    for d in out["devices"]:
        d["where"] = where(d["device_type"], d["device"])
        d["peak_ms"] = ms(d["peak_ts_ns"])
    for a in out["allocations"]:
        a["where"] = where(a["device_type"], a["device"])
        a["ms"], a["freed_ms"] = ms(a["ts_ns"]), ms(a["freed_ts_ns"])
    series = memory_track(r, rank, t0, t1, width)
    for s in series:
        xs = [ms(t0 + round(x * 1000)) for x in s.pop("x")]
        if s["bytes"]:
            xs.append(ms(t1))
            s["bytes"] = [*s["bytes"], s["bytes"][-1]]  # the last value holds to the range's end
        s["x_ms"] = xs
    return {**out, "t0_ms": ms(t0), "t1_ms": ms(t1), "empty": None, "series": series}
