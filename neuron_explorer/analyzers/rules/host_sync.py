"""host-sync: the host waits for the device.

Finds synchronising calls: runtime calls that wait for the device (cudaDeviceSynchronize,
cudaStreamSynchronize, cudaEventSynchronize, their hip and driver equivalents: vocab.sync_call) and
the operators that imply one (vocab.SYNC_OPS) — aten::item, aten::_local_scalar_dense (`.item()`,
`float(t)`), aten::is_nonzero (`if t:`) and aten::nonzero (data-dependent shape). Each stalls the host
until the device drains, so the device then idles while the host catches up. Grouped by the
user's source line. Impact, with profiler steps: the device idle the syncs inside steps cause —
per sync, from its return to the next device work of the rank, at most to its step's end (while
it waits the device is busy, so its own duration is not the cost); syncs outside every step are
counted apart and never in the impact. Without steps: the union of the calls' intervals. Saving
bound: the same. Only meaningful with a device: on a CPU-only run it is not applicable.
"""

from __future__ import annotations

from ...vocab import DEVICE_WORK_SQL, sync_call, sync_op, top_host_call
from .. import metrics
from ..engine import Context
from ..model import Location
from ._util import ms, no_device, row, rows, share_at_least

RULE_ID = "host-sync"
TITLE = "Host-device synchronisation"
CATEGORY = "synchronization"
SCOPE = "rank"
THRESHOLDS = {
    "SYNC_SHARE_MIN": 0.01,  # union of sync intervals / analysed time
}


def _syncs(alias: str = "") -> str:
    """An event is a synchronising call: a runtime sync or a sync operator (vocab)."""
    return f"({sync_call(alias)} OR {sync_op(alias)})"


def _where(rank: int, alias: str = "") -> str:
    a = f"{alias}." if alias else ""
    return f"{a}rank = {rank} AND {_syncs(alias)}"


def _idle_sql(rank: int, where: str) -> str:
    """Per sync inside a step: the device idle it leaves after it returns (from its end to the
    next device work of the rank, at most to the step's end); plain DuckDB over `events`."""
    dev = DEVICE_WORK_SQL
    return f"""WITH st AS (SELECT step, min(ts_ns) AS s_ts, max(ts_ns + dur_ns) AS s_end FROM events
            WHERE rank = {rank} AND kind = 'step' GROUP BY step),
s AS (SELECT e.event_id, e.ts_ns + e.dur_ns AS end_ns, e.dur_ns, st.s_end FROM events e
      LEFT JOIN st ON e.ts_ns >= st.s_ts AND e.ts_ns < st.s_end WHERE {where}
        AND {top_host_call('e')}),
d AS (SELECT ts_ns FROM events WHERE rank = {rank} AND kind IN {dev})
SELECT count(*) FILTER (WHERE s.s_end IS NOT NULL) AS stalls,
  coalesce(sum(s.dur_ns) FILTER (WHERE s.s_end IS NOT NULL), 0)::BIGINT AS wait_ns,
  coalesce(sum(greatest(0, least(coalesce(d.ts_ns, s.s_end), s.s_end) - s.end_ns)) FILTER (WHERE s.s_end IS NOT NULL), 0)::BIGINT
    AS idle_after_ns,
  count(*) FILTER (WHERE s.s_end IS NULL) AS outside_steps,
  coalesce(sum(s.dur_ns) FILTER (WHERE s.s_end IS NULL), 0)::BIGINT AS outside_wait_ns
FROM s ASOF LEFT JOIN d ON s.end_ns <= d.ts_ns"""


def screen(run, summaries: dict) -> set[int]:
    """Ranks without a device (not applicable), ranks with steps whose syncs leave the device
    idle at least the check's share (the check's figure, grouped by rank), and ranks without
    steps that have any synchronising call."""
    dev = DEVICE_WORK_SQL
    idle = dict(run.sql(f"""WITH st AS (SELECT rank, step, min(ts_ns) AS s_ts, max(ts_ns + dur_ns) AS s_end FROM events
            WHERE kind = 'step' GROUP BY rank, step),
s AS (SELECT e.rank, e.ts_ns + e.dur_ns AS end_ns, st.s_end FROM events e JOIN st ON st.rank = e.rank AND e.ts_ns >= st.s_ts AND e.ts_ns < st.s_end
      WHERE {_syncs('e')}
        AND {top_host_call('e')}),
d AS (SELECT rank, ts_ns FROM events WHERE kind IN {dev})
SELECT s.rank, sum(greatest(0, least(coalesce(d.ts_ns, s.s_end), s.s_end) - s.end_ns)) FROM s ASOF LEFT JOIN d ON s.rank = d.rank AND s.end_ns <= d.ts_ns
GROUP BY s.rank""").fetchall())
    found = {r for (r,) in run.sql(f"SELECT DISTINCT rank FROM events WHERE {_syncs()}").fetchall()}
    stepless = {r for r, s in summaries.items() if not s["steps"]["count"]}
    with_steps = share_at_least({r: s for r, s in summaries.items() if s["steps"]["count"]}, idle, THRESHOLDS["SYNC_SHARE_MIN"])
    return no_device(summaries) | (found & stepless) | with_steps


def check(ctx: Context) -> list:
    ctx.require_device()
    where = _where(ctx.rank)
    steps = ctx.summary["steps"]["count"]
    if steps:
        # a sync costs the device idle it causes inside the steps, not its own duration: the host
        # waits while the device works, then the device waits for the next launch
        sql = _idle_sql(ctx.rank, _where(ctx.rank, alias="e"))
        v = row(ctx.run, sql)
        impact = v["idle_after_ns"]
    else:
        sql = f"WITH u AS ({metrics.union_sql(where)}) SELECT coalesce(sum(end_ns - start_ns), 0)::BIGINT AS sync_ns, count(*) AS stalls FROM u"
        v = row(ctx.run, sql)
        impact = v["sync_ns"]
    if not ctx.analysed_ns or not v["stalls"] or impact / ctx.analysed_ns < THRESHOLDS["SYNC_SHARE_MIN"]:
        return []
    by_line = rows(ctx.run, f"""SELECT source_frame_id AS frame_id, arg_max(name, dur_ns) AS name, count(*) AS calls, sum(dur_ns)::BIGINT AS ns, min(event_id) AS sample_id
        FROM events WHERE {where} AND {top_host_call()}
        {"AND step IS NOT NULL" if steps else ""} GROUP BY source_frame_id ORDER BY ns DESC LIMIT 3""")
    top = by_line[0] if by_line else {"frame_id": None, "name": None, "sample_id": None}
    where_txt = "; ".join(f"{ctx.source_of(b['frame_id']) or 'unknown line'}: {b['name']} x{b['calls']} {ms(b['ns'])}" for b in by_line)
    title = (f"{v['stalls']} host-device synchronisations leave the device idle {ms(impact)} (they wait {ms(v['wait_ns'])})"
             if steps else f"{v['stalls']} host-device synchronisations cost {ms(impact)}")
    outside = (f" {v['outside_steps']} more outside every step ({ms(v['outside_wait_ns'])}) are not counted."
               if steps and v.get("outside_steps") else "")
    return [ctx.finding(
        title=title, impact_ns=impact, saving_bound_ns=impact,
        location=Location(op=top["name"], source=ctx.source_of(top["frame_id"])),
        sql=sql, values=dict(v), sample_event_ids=[b["sample_id"] for b in by_line], uses_source=True,
        recommendation=f"Remove host syncs from the step ({where_txt}). Keep values on the device (no .item(), "
        "float(t), print(t) or data-dependent `if` inside the loop); log metrics every N steps; avoid "
        "torch.nonzero / boolean-mask indexing (use torch.where); drop explicit torch.cuda.synchronize()." + outside,
    )]
