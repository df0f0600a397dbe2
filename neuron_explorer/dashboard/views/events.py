"""Events by id, as the timeline's callbacks need them: where one event lies (a search hit to show)
and the brief of many (a finding's evidence, the critical path's events to outline). Data only.

Must not: draw (no Dash, no plotly).
"""

from __future__ import annotations

from ..chain import brief
from ..runs import RunSet, parse_int, placed_cols


def event_span(rs: RunSet, run, event_id) -> tuple[int, int] | None:
    """(ts_ns, dur_ns) of one event of the run, None when it has no such event."""
    r = rs.get(run)
    _, rows = r.query("SELECT ts_ns, dur_ns FROM events WHERE event_id = ?", [parse_int(event_id, "event_id")])
    return (int(rows[0][0]), int(rows[0][1])) if rows else None


def briefs(rs: RunSet, run, ids: list[int], role: str = "evidence") -> list[dict]:
    """The brief (chain.brief: name, kind, times, lane row) of each of the events `ids`."""
    r = rs.get(run)
    if not ids:
        return []
    recs = r.records(f"SELECT event_id, name, kind, ts_ns, dur_ns, {placed_cols(r)} FROM events "
                     f"WHERE event_id IN ({', '.join(str(int(i)) for i in ids)})")
    return [brief(r, e, role) for e in recs]
