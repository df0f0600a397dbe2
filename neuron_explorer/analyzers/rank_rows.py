"""Rows of many ranks from one query: the per-rank queries that the engine runs once for a batch of
ranks (grouped by rank) instead of once for each rank.

A figure module or a rule declares a `RankQuery`: the SQL over one rank (`rank = ?`, the rank its
one parameter) and the same rows for many ranks (`rank` its first column, ordered by rank and then
as the one-rank query orders them). `rows(run, query, rank)` (or `arrays`) returns one rank's rows:
the slice of the grouped query when the engine prepared it on `run` for the rank's batch
(`prepare`, kept in `run.prepared`), else the one-rank query's. The two must give the same rows
(tests/test_rank_batching.py holds them equal), so a rank costs the same figures either way, and a
job of many small ranks pays each query's fixed cost once per batch. A query may bring its own
reader (`read`: e.g. the critical path's index, Arrow batches split by rank, or the paths walked
from it, which read the rows prepared before them) and say when a batch needs it at all (`when`).

Must not: compute a figure (the modules that declare the queries do) or decide anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..store import Run


@dataclass(frozen=True)
class RankQuery:
    """A query a rank's figures need. `one`: over one rank, with `?` the rank; `many`: over every
    rank of the views, `rank` first, ordered by rank then as `one`. `arrays`: read as NumPy columns
    (`arrays(...)`: many rows, no Python object per row) instead of tuples (`rows(...)`). `arrow`:
    read as an Arrow table (`rows(...)` gives it): columns of text, nulls kept, no copy per rank."""

    name: str
    one: str
    many: str
    arrays: bool = False
    arrow: bool = False
    when: Callable | None = None
    """`when(run, ranks)`: whether any rank of a batch can need the rows (else the batch does not run
    the query, and a rank that asks runs `one`); it may read the rows of the queries prepared before."""
    read: Callable | None = None
    """Rows read another way than as `many`'s tuples or arrays: `read(run, ranks)` returns
    {rank: its rows} (e.g. Arrow batches split by rank), by `one` for one rank, by `many` for more."""


def prepare(run: Run, queries, ranks) -> dict[str, dict]:
    """Run each query's `many` once over `run`'s views; per query name, each rank of `ranks` with
    its rows (every rank present, with none where the query found nothing; a query with its own
    `read` has the ranks it gave rows for). Rows already prepared on `run` for every rank of
    `ranks` (e.g. the devices' busy unions, which the summary merges) are kept, not read again."""
    want = [int(r) for r in ranks]
    saved = run.prepared
    out: dict[str, dict] = {name: got for name, got in (saved or {}).items() if all(r in got for r in want)}
    run.prepared = out  # a query's own `read` reads the rows of those before it
    try:
        _prepare(run, queries, want, out)
    finally:
        run.prepared = saved
    return out


def _prepare(run: Run, queries, want: list[int], out: dict) -> None:
    import numpy as np

    for q in queries:
        if q.name in out:
            continue
        if q.when is not None and not q.when(run, want):
            continue
        if q.read is not None:
            got = q.read(run, want)
            out[q.name] = {r: got[r] for r in want if got.get(r) is not None}
            continue
        if q.arrow:
            table = arrow_of(run, q.many, [])
            rank_col = table.column(0).to_numpy()
            table = table.drop_columns([table.column_names[0]])
            out[q.name] = {r: table.slice(lo, hi - lo) for r, lo, hi in
                           zip(want, np.searchsorted(rank_col, want, "left").tolist(), np.searchsorted(rank_col, want, "right").tolist())}
            continue
        rel = run.sql(q.many)
        if q.arrays:
            cols = rel.fetchnumpy()
            names = list(cols)
            rank_col = np.asarray(cols[names[0]], dtype=np.int64)
            got = {}
            for r in want:
                lo, hi = np.searchsorted(rank_col, r, "left"), np.searchsorted(rank_col, r, "right")
                got[r] = {n: np.asarray(cols[n])[lo:hi] for n in names[1:]}
            out[q.name] = got
        else:
            got = {r: [] for r in want}
            for row in rel.fetchall():
                rows_ = got.get(int(row[0]))
                if rows_ is not None:
                    rows_.append(tuple(row[1:]))
            out[q.name] = got


def prepared_rows(run: Run, q: RankQuery, rank: int):
    """One rank's rows of `q` when the engine prepared them on `run` (as `rows` or `arrays` gives
    them), else None: for a figure whose one-rank way is not `q.one`."""
    got = (getattr(run, "prepared", None) or {}).get(q.name)
    return None if got is None else got.get(int(rank))


def take(run: Run, q: RankQuery, rank: int):
    """One rank's rows of `q` (as `rows` gives them), dropped from what the engine prepared: for
    rows read once and large (the batch's arrays are freed as their ranks are done)."""
    got = (getattr(run, "prepared", None) or {}).get(q.name)
    rows_ = None if got is None else got.pop(int(rank), None)
    return rows(run, q, rank) if rows_ is None else rows_


def rows(run: Run, q: RankQuery, rank: int) -> list[tuple]:
    """One rank's rows of `q` (tuples, in `q.one`'s order; an Arrow table for an `arrow` query; for a
    query with its own `read`, what `read` gives one rank). Tuples read by `q.one` are kept on the
    run's `prepared` rows, where it has them, for the rank's next ask."""
    got = prepared_rows(run, q, rank)
    if got is not None:
        return got
    if q.read is not None:
        return q.read(run, [int(rank)])[int(rank)]
    if q.arrow:
        return arrow_of(run, q.one, [int(rank)])
    got = [tuple(r) for r in run.sql(q.one, [int(rank)]).fetchall()]
    kept = getattr(run, "prepared", None)
    if kept is not None:  # kept for the rank's other asks (the serving engine: three rules of a rank ask)
        kept.setdefault(q.name, {})[int(rank)] = got
    return got


def arrow_of(run: Run, query: str, params: list, tables: dict | None = None):
    """A query's rows as an Arrow table, read on a cursor of the run's connection (`Run.query_cursor`:
    no extra copy of the rows, and no clash with a result another reader left open on it); `tables`:
    Arrow tables the query reads, by name (registered on that cursor only)."""
    cur = run.query_cursor(query)
    try:
        for name, table in (tables or {}).items():
            cur.register(name, table)
        return cur.sql(query, params=params).to_arrow_table()
    finally:
        cur.close()


def arrays(run: Run, q: RankQuery, rank: int) -> dict:
    """One rank's rows of `q` as NumPy columns (name -> array, in `q.one`'s order)."""
    import numpy as np

    got = prepared_rows(run, q, rank)
    if got is not None:
        return got
    return {n: np.asarray(v) for n, v in run.sql(q.one, [int(rank)]).fetchnumpy().items()}
