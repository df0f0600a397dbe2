"""input-pipeline: the step waits for the next batch.

Measures the time spent fetching batches: events named like the DataLoader's `__next__`
(torch records `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` as a user annotation,
the live collector as a Python call). The union of their intervals, as a share of the analysed
time (total step time, or the span without steps). Works on CPU-only runs. Impact: that union.
Saving bound: the same (prefetching workers can hide it entirely when the step is long enough).
Where: the slowest user statement inside the data loading (`__getitem__`, collate, transforms: its
operators and its Python-level time), not the `for` over the DataLoader.
"""

from __future__ import annotations

from ...vocab import line_key_sql
from .. import metrics
from ..engine import Context
from ..lines import own_ns_sql
from ..model import Location
from ._util import ms, pct, row, share_at_least

RULE_ID = "input-pipeline"
TITLE = "Input pipeline: waiting for the DataLoader"
CATEGORY = "input_pipeline"
SCOPE = "rank"
THRESHOLDS = {
    "LOADER_SHARE_MIN": 0.10,  # union of DataLoader __next__ intervals / analysed time
}
LOADER_NAME = r"(?i:dataloader).*__next__|__next__.*(?i:dataloader)"
"""A DataLoader's fetch by its name: `__next__` (a dunder, lower case) and DataLoader in any case."""
LOADER_KINDS = "kind IN ('user_annotation', 'python', 'cpu_op')"


def fetches_sql() -> str:
    """The DataLoader's fetches of every rank of the views: rows (rank, ts_ns, end_ns), the events
    whose union this rule measures (device-idle leaves the device's idle in them to this rule). The
    names hold `__next__` (LOADER_NAME): tested first, it spares the pattern almost every row (41
    against 81 ms over 256 rank files)."""
    return (f"SELECT rank, ts_ns, ts_ns + dur_ns AS end_ns FROM events WHERE {LOADER_KINDS} AND contains(name, '__next__') "
            f"AND regexp_matches(name, '{LOADER_NAME}')")


def _slowest_line_sql(rank: int, loader_where: str) -> str:
    """The user statement inside data loading (`pass = 'data'`) with the most time of its own: its
    outermost operators plus its Python-level time (analyzers/lines.py), leaving out the statement
    that iterates the DataLoader (its own time is the loader's machinery)."""
    return f"""SELECT {line_key_sql('f')} AS source, any_value(f.code) AS code,
  sum({own_ns_sql(device=False)})::BIGINT AS ns
FROM events e JOIN frames f ON f.frame_id = e.source_frame_id
WHERE e.rank = {int(rank)} AND e.pass = 'data' AND f.is_user
  AND f.frame_id NOT IN (SELECT source_frame_id FROM events WHERE {loader_where} AND source_frame_id IS NOT NULL)
GROUP BY f.file, f.line HAVING ns > 0 ORDER BY ns DESC, source LIMIT 1"""


def screen(run, summaries: dict) -> set[int]:
    """Ranks whose DataLoader events add up to the check's share (their union is at most their sum).
    The pattern is matched once per distinct name of a rank, not once per event (MATERIALIZED keeps
    DuckDB from pushing it below the grouping): 95 -> 36 ms on a rank of 1.2M events."""
    ns = dict(run.sql("WITH n AS MATERIALIZED (SELECT rank, name, sum(dur_ns) AS ns FROM events "
                      f"WHERE {LOADER_KINDS} GROUP BY rank, name) "
                      f"SELECT rank, sum(ns) FROM n WHERE regexp_matches(name, '{LOADER_NAME}') GROUP BY rank").fetchall())
    return share_at_least(summaries, ns, THRESHOLDS["LOADER_SHARE_MIN"])


def check(ctx: Context) -> list:
    where = f"rank = {ctx.rank} AND {LOADER_KINDS} AND regexp_matches(name, '{LOADER_NAME}')"
    sql = f"WITH u AS ({metrics.union_sql(where)}) SELECT coalesce(sum(end_ns - start_ns), 0)::BIGINT AS loader_ns, count(*) AS fetches FROM u"
    v = row(ctx.run, sql)
    share = v["loader_ns"] / ctx.analysed_ns if ctx.analysed_ns else 0.0
    if share < THRESHOLDS["LOADER_SHARE_MIN"]:
        return []
    top = row(ctx.run, f"SELECT name, frame_id, event_id, module_path FROM events WHERE {where} ORDER BY dur_ns DESC, event_id LIMIT 1")
    slow = row(ctx.run, _slowest_line_sql(ctx.rank, where))
    source = slow.get("source") or ctx.source_of(top["frame_id"])
    inside = (f"; slowest line inside: {slow['source']}" + (f" `{slow['code'][:60]}`" if slow.get("code") else "")
              + f" ({ms(slow['ns'])})") if slow.get("source") else ""
    return [ctx.finding(
        title=f"DataLoader takes {pct(share)} of step time ({ms(v['loader_ns'])} over {v['fetches']} fetches){inside}",
        impact_ns=v["loader_ns"], saving_bound_ns=v["loader_ns"],
        location=Location(op=top["name"], source=source),
        sql=sql, values={**v, "slowest_line": slow.get("source"), "slowest_line_ns": slow.get("ns")},
        sample_event_ids=[top["event_id"]], uses_source=True,
        recommendation="Load data ahead of the step: DataLoader(num_workers>0, persistent_workers=True, "
        "prefetch_factor=2..4, pin_memory=True); move decoding and augmentation out of __getitem__'s hot path "
        "or onto the device; cache preprocessed samples.",
    )]
