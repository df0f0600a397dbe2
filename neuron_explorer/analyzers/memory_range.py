"""Memory in a time range: the allocator events of `[t0, t1)`, which of them were freed in it, the
peak of allocated bytes in it per device, and the source lines and operators that allocated most.

The one definition of these figures (docs/METRICS.md, "Memory in a time range"): the dashboard's
Memory tab (linked to the timeline), `/api/memory_range` and anyone with DuckDB run the same SQL
(`range_sql`, returned with every answer as `sql`). Allocations and frees are rows of the `memory`
table (vocab.memory_allocation / memory_free); runtime calls that went to the driver are
vocab.allocator_call; the operator and the source line are the run's links (`op_id`, the operator's
`top_op_id`, `frame_id`).

Must not: import the summary, rules or dashboard, draw, or decide what is a problem.
"""

from __future__ import annotations

from collections.abc import Callable

from ..store import Run
from ..vocab import allocator_call, allocator_free, line_key_sql, memory_allocation, memory_free

RANGE_ROWS = 200
"""Most allocations (the largest first) and lines or operators listed; the answer says when it cut."""


def _rank_where(rank: int | None, alias: str = "") -> str:
    return "" if rank is None else f" AND {alias + '.' if alias else ''}rank = {int(rank)}"


def range_sql(t0: int, t1: int, rank: int | None = None) -> str:
    """The common table expressions of every memory-range figure, self-contained SQL over the run's
    views (`memory`, `events`, `frames`), for the half-open range `[t0, t1)` in ns:

    - `m`: the memory rows in the range;
    - `paired`: each with `freed_ts_ns`, for an allocation the time of the free of its block in the
      range: the next row at the same (rank, device_type, device, addr) if that row is a free
      (rows at one instant: allocations before frees); NULL when the block is alive at `t1`, or
      when the trace records no address (then `has_addr` is false and nothing is known);
    - `peak`: per (rank, device_type, device) the most bytes allocated at any instant of the range
      (`total_allocated` after each row, and the value in force at `t0`), `peak_ts_ns` the first
      instant it was reached, `start_bytes` the value in force at `t0`;
    - `allocs`: the allocations with `peak_contribution_bytes`: their bytes when the block was
      allocated in the range at or before its device's peak and not freed by then, else 0 (NULL
      without an address). On each device these add up to at most the peak;
    - `ops`: per operator id of the range's memory rows (`op_id`) its name (`operator`) and its
      top-level operator's (`top_operator`, by `top_op_id`), read from `events` for those ids only
      (a semi-join on `m`: a plain join of the allocations to `events` hashed every event, ~1 s on 2M)."""
    t0, t1 = int(t0), int(t1)
    rw = _rank_where(rank)
    return f"""WITH m AS (
  SELECT rank, ts_ns, device_type, device, addr, bytes, total_allocated, op_id, frame_id FROM memory
  WHERE ts_ns >= {t0} AND ts_ns < {t1}{rw}),
paired AS (
  SELECT *, addr IS NOT NULL AS has_addr,
    CASE WHEN addr IS NULL OR NOT ({memory_allocation()}) THEN NULL
         ELSE lead(CASE WHEN {memory_free()} THEN ts_ns END)
              OVER (PARTITION BY rank, device_type, device, addr ORDER BY ts_ns, {memory_free()}) END AS freed_ts_ns
  FROM m),
at_start AS (
  SELECT rank, device_type, device, arg_max(total_allocated, ts_ns) AS start_bytes FROM memory
  WHERE ts_ns < {t0} AND total_allocated IS NOT NULL{rw} GROUP BY ALL),
levels AS (
  SELECT rank, device_type, device, {t0}::BIGINT AS ts_ns, start_bytes AS v FROM at_start
  UNION ALL SELECT rank, device_type, device, ts_ns, total_allocated FROM m WHERE total_allocated IS NOT NULL),
peak AS (
  SELECT l.rank, l.device_type, l.device, l.v AS peak_bytes, l.ts_ns AS peak_ts_ns, s.start_bytes
  FROM levels l LEFT JOIN at_start s USING (rank, device_type, device)
  QUALIFY row_number() OVER (PARTITION BY l.rank, l.device_type, l.device ORDER BY l.v DESC, l.ts_ns) = 1),
allocs AS (
  SELECT p.*, CASE WHEN NOT p.has_addr THEN NULL
                   WHEN p.ts_ns <= k.peak_ts_ns AND (p.freed_ts_ns IS NULL OR p.freed_ts_ns > k.peak_ts_ns) THEN p.bytes
                   ELSE 0 END AS peak_contribution_bytes
  FROM paired p LEFT JOIN peak k USING (rank, device_type, device) WHERE {memory_allocation('p')}),
op_rows AS (SELECT event_id, name, top_op_id FROM events WHERE event_id IN (SELECT op_id FROM m)),
ops AS (
  SELECT o.event_id AS op_id, o.name AS operator, t.name AS top_operator FROM op_rows o
  LEFT JOIN (SELECT event_id, name FROM events WHERE event_id IN (SELECT top_op_id FROM op_rows)) t ON t.event_id = o.top_op_id)
"""


_ALLOCATIONS_ORDER = "a.bytes DESC, a.ts_ns, a.rank, a.device"
_BY_ORDER = "allocated_bytes DESC, key NULLS LAST"
_PEAKS_ORDER = "k.rank, k.device_type, k.device"
_OPERATOR_JOIN = "LEFT JOIN ops ON ops.op_id = a.op_id"
_LINE_JOIN = "LEFT JOIN frames f ON f.frame_id = a.frame_id"


def _allocations_body() -> str:
    return f"""SELECT a.rank, a.ts_ns, a.device_type, a.device, a.addr, a.bytes, a.freed_ts_ns, a.has_addr,
  a.peak_contribution_bytes, a.op_id, ops.operator, ops.top_operator, a.frame_id, {line_key_sql('f')} AS source
FROM allocs a {_OPERATOR_JOIN}
  {_LINE_JOIN}"""


def _by_body(key: str, join: str) -> str:
    return f"""SELECT {key} AS key, count(*) AS allocations, sum(a.bytes)::BIGINT AS allocated_bytes,
  CASE WHEN bool_and(a.has_addr) THEN coalesce(sum(a.bytes) FILTER (WHERE a.freed_ts_ns IS NOT NULL), 0) END::BIGINT AS freed_in_range_bytes,
  sum(a.peak_contribution_bytes)::BIGINT AS peak_contribution_bytes, bool_and(a.has_addr) AS has_addr
FROM allocs a {join}
GROUP BY 1"""


def _totals_body() -> str:
    return f"""SELECT count(*) FILTER (WHERE {memory_allocation()}) AS allocations,
  coalesce(sum(bytes) FILTER (WHERE {memory_allocation()}), 0)::BIGINT AS allocated_bytes,
  count(*) FILTER (WHERE {memory_free()}) AS frees, coalesce(-sum(bytes) FILTER (WHERE {memory_free()}), 0)::BIGINT AS freed_bytes,
  count(*) FILTER (WHERE addr IS NULL) AS rows_without_addr
FROM paired"""


def _peaks_body() -> str:
    return """SELECT k.*, (SELECT sum(a.peak_contribution_bytes) FROM allocs a
    WHERE a.rank = k.rank AND a.device_type = k.device_type AND a.device = k.device)::BIGINT AS peak_contribution_bytes
FROM peak k"""


def _calls_body(t0: int, t1: int, rank: int | None) -> str:
    return f"""SELECT count(*) AS calls, count(*) FILTER (WHERE {allocator_free()}) AS frees, coalesce(sum(dur_ns), 0)::BIGINT AS dur_ns
FROM events WHERE ts_ns >= {int(t0)} AND ts_ns < {int(t1)}{_rank_where(rank)} AND {allocator_call()}"""


def allocations_sql(t0: int, t1: int, rank: int | None = None, limit: int = RANGE_ROWS) -> str:
    """The allocations of the range, the largest first: where (rank, device), when, size, address,
    when freed in the range, peak contribution, the innermost operator around it and its top-level
    operator (`op_id`, `top_op_id`) and its user source line (`frame_id`: `file:line`)."""
    return range_sql(t0, t1, rank) + _allocations_body() + f"\nORDER BY {_ALLOCATIONS_ORDER} LIMIT {int(limit)}"


def lines_sql(t0: int, t1: int, rank: int | None = None, limit: int = RANGE_ROWS) -> str:
    """Per user source line (`file:line` of the allocation's `frame_id`; NULL: no line): allocations,
    bytes allocated, bytes of them freed in the range, peak contribution."""
    return range_sql(t0, t1, rank) + _by_body(line_key_sql("f"), _LINE_JOIN) + f" ORDER BY {_BY_ORDER} LIMIT {int(limit)}"


def operators_sql(t0: int, t1: int, rank: int | None = None, limit: int = RANGE_ROWS) -> str:
    """Per top-level operator (the `top_op_id` of the operator around the allocation; NULL: none)."""
    return range_sql(t0, t1, rank) + _by_body("ops.top_operator", _OPERATOR_JOIN) + f" ORDER BY {_BY_ORDER} LIMIT {int(limit)}"


def totals_sql(t0: int, t1: int, rank: int | None = None) -> str:
    """One row: allocations and bytes allocated, frees and bytes freed in the range."""
    return range_sql(t0, t1, rank) + _totals_body()


def peaks_sql(t0: int, t1: int, rank: int | None = None) -> str:
    """Per (rank, device_type, device) with allocator events by `t1`: peak_bytes, peak_ts_ns, start_bytes,
    and the bytes alive at the peak that the range's allocations account for."""
    return range_sql(t0, t1, rank) + _peaks_body() + f" ORDER BY {_PEAKS_ORDER}"


def allocator_calls_sql(t0: int, t1: int, rank: int | None = None) -> str:
    """One row: runtime calls to the driver's allocator (vocab.allocator_call: cudaMalloc, cudaFree,
    hipMalloc, ...) that start in the range, how many of them free, and their summed time."""
    return _calls_body(t0, t1, rank)


def _listed(body: str, order: str, limit: int | None) -> str:
    """A part's rows as one list of structs, in `order`, at most `limit` (the top rows picked first,
    then listed in that order: a list keeps no order of its subquery's ORDER BY)."""
    cut = "" if limit is None else f" LIMIT {int(limit)}"
    return f"(SELECT list(x ORDER BY {order}) FROM ({body} ORDER BY {order}{cut}) x)"


def one_pass_sql(t0: int, t1: int, rank: int | None = None, limit: int = RANGE_ROWS) -> str:
    """Every figure of `memory_range_of` in one statement and one row: the range's CTEs (`range_sql`)
    built once, then each part (totals_sql, peaks_sql, allocations_sql, lines_sql, operators_sql,
    allocator_calls_sql: the same bodies and order) as a column holding a list of row structs
    (`limit` rows at most)."""
    return range_sql(t0, t1, rank) + f"""SELECT
  (SELECT list(x) FROM ({_totals_body()}) x) AS totals,
  {_listed(_peaks_body(), "rank, device_type, device", None)} AS devices,
  {_listed(_allocations_body(), "bytes DESC, ts_ns, rank, device", limit)} AS allocations,
  {_listed(_by_body(line_key_sql("f"), _LINE_JOIN) + " HAVING key IS NOT NULL", _BY_ORDER, limit)} AS by_line,
  {_listed(_by_body("ops.top_operator", _OPERATOR_JOIN), _BY_ORDER, limit)} AS by_operator,
  (SELECT list(x) FROM ({_calls_body(t0, t1, rank)}) x) AS allocator_calls"""


def memory_range_of(records: Callable[[str], list[dict]], t0: int, t1: int, rank: int | None = None, limit: int = RANGE_ROWS) -> dict:
    """The figures of the range `[t0, t1)` (ns on the run clock), of `rank` or every rank, read with
    `records(sql) -> list of row dicts` (a dashboard run's serialised connection, or `memory_range`'s)
    in one query (`one_pass_sql`: the range's common table expressions built once):

    `totals` (allocations, allocated_bytes, frees, freed_bytes, rows_without_addr), `devices` (peaks_sql),
    `allocations` (allocations_sql), `by_line` (lines_sql: rows with a line), `by_operator`
    (operators_sql), `allocator_calls` (allocator_calls_sql), `has_addresses` (whether frees can be
    matched: every row in the range has an address), `truncated`, and `sql` (the allocations query)."""
    t0, t1 = int(t0), int(t1)
    (row,) = records(one_pass_sql(t0, t1, rank, limit + 1))
    parts = {k: row[k] or [] for k in row}
    totals, devices, allocs = parts["totals"][0], parts["devices"], parts["allocations"]
    lines, ops, calls = parts["by_line"], parts["by_operator"], parts["allocator_calls"][0]
    for rows in (lines, ops):
        for x in rows:
            x["source" if rows is lines else "operator"] = x.pop("key")
    return {"t0": t0, "t1": t1, "rank": rank, "totals": totals, "devices": devices, "allocations": allocs[:limit],
            "by_line": lines[:limit], "by_operator": ops[:limit], "allocator_calls": calls,
            "has_addresses": totals["rows_without_addr"] == 0,
            "truncated": len(allocs) > limit or len(lines) > limit or len(ops) > limit, "sql": allocations_sql(t0, t1, rank, limit)}


def memory_range(run: Run, t0: int, t1: int, rank: int | None = None, limit: int = RANGE_ROWS) -> dict:
    """`memory_range_of` on an open run (store.Run)."""
    def records(sql: str) -> list[dict]:
        cur = run.sql(sql)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]
    return memory_range_of(records, t0, t1, rank, limit)
