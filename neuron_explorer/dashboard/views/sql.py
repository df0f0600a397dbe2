"""The SQL page's data: the run's tables and views with their columns (from schema.py), and one
read-only SELECT run in the same sandbox as `neuron-explorer query` and the MCP server
(agent/sandbox.py: a worker process per run, read-only, time- and row-limited).

Must not: draw (no Dash, no plotly), open a run's DuckDB connection for the query (the sandbox
does), or run anything but the sandbox's one SELECT.
"""

from __future__ import annotations

import threading
import weakref

from ...agent.sandbox import VIEWS, Sandbox
from ...schema import DERIVED_VIEWS, TABLES
from ..runs import RunSet

MAX_ROWS = 5000
"""Rows a query brings to the page (the envelope says when it cut)."""
TIMEOUT_S = 20.0
EVENT_ID = "event_id"
"""A result column of this name makes its rows "show on timeline"."""

_boxes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def schema_tables() -> list[dict]:
    """Every table and view a query can read: name, what it holds, its columns (name, type, unit, doc)."""
    docs = {**{t.name: (t.doc, t.columns) for t in TABLES.values()}, **{v.name: (v.doc, v.columns) for v in DERIVED_VIEWS}}
    return [{"name": name, "doc": docs[name][0],
             "columns": [{"name": c.name, "type": c.type, "unit": c.unit, "doc": c.doc} for c in docs[name][1]]}
            for name in VIEWS if name in docs]


def _sandbox(rs: RunSet, run) -> Sandbox:
    r = rs.get(run)
    with _lock:
        per_run = _boxes.setdefault(rs, {})
        if r.index not in per_run:
            per_run[r.index] = Sandbox(r.path)
        return per_run[r.index]


def query(rs: RunSet, run, sql) -> dict:
    """One SELECT on a run in the sandbox: its envelope (ok, error, columns, types, rows, row_count,
    truncated, elapsed_s) and `event_id_column`, the index of a column named event_id (None when
    there is none). A bad query is an envelope with its error, never an exception."""
    if not isinstance(sql, str) or not sql.strip():
        return {"ok": False, "error": "write a SELECT first", "columns": [], "types": [], "rows": [], "row_count": 0,
                "truncated": False, "elapsed_s": 0.0, "event_id_column": None}
    res = _sandbox(rs, run).query(sql, max_rows=MAX_ROWS, timeout_s=TIMEOUT_S).to_dict()
    cols = [c.lower() for c in res["columns"]]
    return {**res, "event_id_column": cols.index(EVENT_ID) if EVENT_ID in cols else None}


def close(rs: RunSet) -> None:
    """Stop the sandboxes of a RunSet's runs."""
    with _lock:
        boxes = _boxes.pop(rs, {})
    for b in boxes.values():
        b.close()
