"""input-pipeline: the step waits for the next batch.

Measures the time spent fetching batches: events named like the DataLoader's `__next__`
(torch records `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` as a user annotation,
the live collector as a Python call). The union of their intervals, as a share of the analysed
time (total step time, or the span without steps). Works on CPU-only runs. Impact: that union.
Saving bound: the same (prefetching workers can hide it entirely when the step is long enough).
"""

from __future__ import annotations

from .. import metrics
from ..engine import Context
from ..model import Location
from ._util import ms, pct, row

RULE_ID = "input-pipeline"
TITLE = "Input pipeline: waiting for the DataLoader"
CATEGORY = "input_pipeline"
SCOPE = "rank"
THRESHOLDS = {
    "LOADER_SHARE_MIN": 0.10,  # union of DataLoader __next__ intervals / analysed time
}
LOADER_NAME = r"(?i)dataloader.*__next__|__next__.*dataloader"


def check(ctx: Context) -> list:
    where = f"rank = {ctx.rank} AND kind IN ('user_annotation', 'python', 'cpu_op') AND regexp_matches(name, '{LOADER_NAME}')"
    sql = f"WITH u AS ({metrics.union_sql(where)}) SELECT coalesce(sum(end_ns - start_ns), 0)::BIGINT AS loader_ns, count(*) AS fetches FROM u"
    v = row(ctx.run, sql)
    share = v["loader_ns"] / ctx.analysed_ns if ctx.analysed_ns else 0.0
    if share < THRESHOLDS["LOADER_SHARE_MIN"]:
        return []
    top = row(ctx.run, f"SELECT name, frame_id, event_id, module_path FROM events WHERE {where} ORDER BY dur_ns DESC LIMIT 1")
    return [ctx.finding(
        title=f"DataLoader takes {pct(share)} of step time ({ms(v['loader_ns'])} over {v['fetches']} fetches)",
        impact_ns=v["loader_ns"], saving_bound_ns=v["loader_ns"],
        location=Location(op=top["name"], source=ctx.source_of(top["frame_id"])),
        sql=sql, values=v, sample_event_ids=[top["event_id"]], uses_source=True,
        recommendation="Load data ahead of the step: DataLoader(num_workers>0, persistent_workers=True, "
        "prefetch_factor=2..4, pin_memory=True); move decoding and augmentation out of __getitem__'s hot path "
        "or onto the device; cache preprocessed samples.",
    )]
