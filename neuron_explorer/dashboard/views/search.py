"""Find events by name: the query behind the timeline's search box and /api/search.

A query is a case-insensitive substring, or a regular expression when it is wrapped in slashes
(`/^aten::(add|mul)_?$/`, RE2 syntax as DuckDB runs it: linear time, so a hostile pattern cannot
hang the server). Hits come in time order with what the timeline needs to go to each one: the
event's start and duration (ns on the run clock) and its lane.

Must not: draw, or change which lanes the timeline shows.
"""

from __future__ import annotations

import duckdb

from ..runs import LANE_SQL, QueryError, RunSet
from ..timeline import _int, parse_rank

SEARCH_LIMIT = 1000
"""Hits returned when the request does not say (`count` is always the full number)."""
MAX_SEARCH_LIMIT = 100_000
MAX_QUERY_CHARS = 500


def parse_query(text) -> tuple[str, bool]:
    """(pattern, is_regex) of a search box's text; empty or overlong text is a QueryError."""
    if not isinstance(text, str) or not text.strip():
        raise QueryError("text is required: a part of an event name, or /a regular expression/")
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(f"text is longer than {MAX_QUERY_CHARS} characters")
    t = text.strip()
    if len(t) >= 2 and t.startswith("/") and t.endswith("/"):
        return t[1:-1], True
    return t, False


def search(rs: RunSet, run=0, text=None, limit=None, rank=None) -> dict:
    """Events whose name matches `text` (a substring, any case; /…/ for a regular expression), in
    time order: `count` of all matches, and the first `limit` hits, each with event_id, name,
    kind, ts_ns, dur_ns, start_ms (from the run's first event), rank, its lane's label and whether
    that lane is a meta lane the timeline hides by default."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    limit = _int(limit, "limit", SEARCH_LIMIT, 0, MAX_SEARCH_LIMIT)
    pattern, is_regex = parse_query(text)
    cond = "regexp_matches(name, ?)" if is_regex else "contains(lower(name), lower(?))"
    rank_where = "" if rank is None else f" AND rank = {int(rank)}"
    try:
        recs = r.records(f"""SELECT event_id, name, kind, ts_ns, dur_ns, {LANE_SQL}, count(*) OVER () AS total
                             FROM events WHERE name IN (SELECT DISTINCT name FROM events WHERE {cond}){rank_where}
                             ORDER BY ts_ns, event_id LIMIT ?""", [pattern, limit])
    except duckdb.InvalidInputException as e:  # a pattern RE2 does not accept
        raise QueryError(f"not a regular expression: {' '.join(str(e).split())[:160]}") from None
    lanes = {(ln.rank, ln.is_device, ln.a, ln.b, ln.text): ln for ln in r.lanes(None)}
    start = r.span()[0]
    hits = []
    for e in recs:
        ln = lanes.get((e["rank"], e["is_device"], e["lane_a"], e["lane_b"], e["lane_text"]))
        hits.append({"event_id": e["event_id"], "name": e["name"], "kind": e["kind"], "ts_ns": e["ts_ns"], "dur_ns": e["dur_ns"],
                     "start_ms": round((e["ts_ns"] - start) / 1e6, 6), "rank": e["rank"],
                     "lane": ln.label if ln else None, "hidden_lane": ln.hidden if ln else False})
    if recs:
        count = recs[0]["total"]
    elif limit == 0:  # count(*) OVER () came back with no row to carry it
        count = r.query(f"SELECT count(*) FROM events WHERE name IN (SELECT DISTINCT name FROM events WHERE {cond}){rank_where}",
                        [pattern])[1][0][0]
    else:
        count = 0
    return {"text": text, "regex": is_regex, "count": int(count), "hits": hits, "truncated": int(count) > len(hits)}
