"""Every dashboard view as a query function returning plain, JSON-serialisable data.

Each function takes the RunSet and request-style parameters (strings are accepted, so the JSON API
passes its query string straight through) and returns dicts and lists. The Dash layer draws what
these return; `api.py` serves them as JSON; the CLI and agents can call them directly.
Times in the output are ns on the run clock (`*_ns`) or ms from the run's first event (`*_ms`).

Must not: draw, read a file the run's frames do not name, or open a path from a request.
"""

from __future__ import annotations

from .chain import EVENT_COLS, brief, event, ms_from_start  # noqa: F401  (the event view and the brief that views share)
from .runs import LANE_SQL, OpenRun, QueryError, RunSet  # noqa: F401
from .timeline import parse_rank, timeline  # noqa: F401  (timeline is a view too)
from .views.compare import compare, compare_timeline  # noqa: F401  (the views of two runs)
from .views.findings import findings, report_summary  # noqa: F401  (the findings view; the report's summary for the Overview)
from .views.flame import flame
from .views.memory import memory_range
from .views.navigate import area, critical_path, jump  # noqa: F401  (views: an area selection, the path of the step in view, a table row's instances)
from .views.overview import overview
from .views.search import search  # noqa: F401  (a view: find events by name)
from .views.source import source  # noqa: F401  (the source view)
from .views.tables import (  # noqa: F401
    MAX_TABLE_LIMIT,
    TABLE_LIMIT,
    TABLE_VIEWS,
    kernels,
    kernels_by_operator,
    memory,
    memory_summary,
    operators,
    source_lines,
    steps,
    table,
)


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


VIEWS = {
    "runs": runs,
    "timeline": timeline,
    "event": event,
    "source": source,
    "operators": operators,
    "kernels": kernels,
    "kernels_by_operator": kernels_by_operator,
    "lines": source_lines,
    "steps": steps,
    "memory": memory,
    "memory_summary": memory_summary,
    "memory_range": memory_range,
    "flame": flame,
    "findings": findings,
    "search": search,
    "overview": overview,
    "area": area,
    "critical_path": critical_path,
    "jump": jump,
}
"""The views served at /api/<name>; each is documented by its docstring."""

PAIR_VIEWS = {
    "compare": compare,
    "compare_timeline": compare_timeline,
}
"""The views of two runs (`base`, `test` run indexes instead of `run`), also served at /api/<name>."""

