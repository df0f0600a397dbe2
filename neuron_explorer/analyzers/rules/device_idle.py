"""device-idle: the device waits for the host.

Finds devices that sit idle for a large share of their window (first to last kernel, memcpy or
memset on that device): the gaps between busy intervals, where nothing ran on any stream. For the
largest gaps it names what the host was doing meanwhile (the top-level operators that overlap
the gap), which tells whether the job is host-bound (Python, data loading, launches) or waits on
something else. Impact: idle time inside the device window. Saving bound: the same.
"""

from __future__ import annotations

from ...vocab import DEVICE_WORK_SQL, top_host_call
from .. import metrics
from ..engine import Context
from ..model import Location
from ..rank_rows import RankQuery
from ..rank_rows import arrays as rank_arrays
from ..rank_rows import rows as rank_rows
from ._util import graph_tip, ms, pct

RULE_ID = "device-idle"
TITLE = "Device idle between kernels (host-bound gaps)"
CATEGORY = "device_idle"
SCOPE = "rank"
THRESHOLDS = {
    "IDLE_SHARE_MIN": 0.10,  # idle time / device window
    "GAPS_SHOWN": 3,  # largest gaps whose host activity is named
}


def _gaps_sql(rank_where: str) -> str:
    """Each device's largest gaps between busy intervals: rows (rank, device, i, gap_start, gap_end),
    i = 0 the longest (ties: the earlier)."""
    union = metrics.union_sql(f"{rank_where} AND device IS NOT NULL AND kind IN {DEVICE_WORK_SQL}", ("rank", "device"))
    return f"""WITH u AS ({union}),
gp AS (SELECT rank, device, lag(end_ns) OVER (PARTITION BY rank, device ORDER BY start_ns) AS gap_start, start_ns AS gap_end FROM u
       QUALIFY gap_start IS NOT NULL)
SELECT rank, device, (row_number() OVER (PARTITION BY rank, device ORDER BY gap_end - gap_start DESC, gap_end) - 1)::INTEGER AS i,
  gap_start, gap_end FROM gp QUALIFY i < {THRESHOLDS['GAPS_SHOWN']}"""


def _host_sql(rank_where: str) -> str:
    """What the host ran in each gap of `_gaps_sql`, the 3 heaviest top-level names per gap: rows
    (rank, device, i, name, event_id, frame_id, overlap_ns)."""
    return _host_in(_gaps_sql(rank_where))


def _host_in(gaps: str) -> str:
    """`_host_sql` over the gaps of the query `gaps` (rows rank, device, i, gap_start, gap_end)."""
    return f"""WITH g AS ({gaps})
SELECT g.rank, g.device, g.i, e.name, min(e.event_id) AS event_id, any_value(e.source_frame_id) AS frame_id,
  sum(least(e.ts_ns + e.dur_ns, g.gap_end) - greatest(e.ts_ns, g.gap_start))::BIGINT AS overlap_ns
FROM events e JOIN g ON e.rank = g.rank AND e.ts_ns < g.gap_end AND e.ts_ns + e.dur_ns > g.gap_start
WHERE {top_host_call('e')}
GROUP BY g.rank, g.device, g.i, e.name QUALIFY row_number() OVER (PARTITION BY g.rank, g.device, g.i ORDER BY overlap_ns DESC, e.name) <= 3"""


def _one_rank(sql: str) -> str:
    return f"SELECT * EXCLUDE (rank) FROM ({sql}) ORDER BY ALL"


def _read_gaps(run, ranks) -> dict[int, list[tuple]]:
    """GAPS' rows of each rank from its devices' busy unions (metrics.DEVICE_BUSY, which the summary
    reads for every rank: prepared for a batch), as `_gaps_sql` computes them from the same union:
    per device, the gaps between consecutive busy intervals, the GAPS_SHOWN longest (ties: the
    earlier end) numbered from 0. No query of its own: the union is not computed again."""
    import numpy as np

    out = {}
    for r in ranks:
        busy = rank_arrays(run, metrics.DEVICE_BUSY, r)
        dev = np.asarray(busy["device"], dtype=np.int64)
        start, end = np.asarray(busy["start_ns"], dtype=np.int64), np.asarray(busy["end_ns"], dtype=np.int64)
        m = np.flatnonzero(dev[1:] == dev[:-1]) + 1  # each interval after the first of its device: the gap before it
        d, a, b = dev[m], end[m - 1], start[m]
        order = np.lexsort((b, a - b, d))  # per device, the longest first (ties: the earlier end)
        d, a, b = d[order], a[order], b[order]
        first = np.searchsorted(d, d, side="left")  # position of the device's first gap
        i = np.arange(len(d)) - first
        keep = i < THRESHOLDS["GAPS_SHOWN"]
        out[int(r)] = list(zip(d[keep].tolist(), i[keep].tolist(), a[keep].tolist(), b[keep].tolist()))
    return out


def _read_host(run, ranks) -> dict[int, list[tuple]]:
    """HOST's rows of each rank: `_host_sql` over the gaps `_read_gaps` gives (GAPS' rows), in one
    query for all `ranks`, so that the busy union is not computed again for it."""
    gaps = [(int(r), *g) for r in ranks for g in rank_rows(run, GAPS, r)]
    out: dict[int, list[tuple]] = {int(r): [] for r in ranks}
    if not gaps:
        return out
    values = ", ".join(f"({r}, {d}, {i}, {a}, {b})" for r, d, i, a, b in gaps)
    listed = ("SELECT col0::INTEGER AS rank, col1::BIGINT AS device, col2::INTEGER AS i, col3::BIGINT AS gap_start, "
              f"col4::BIGINT AS gap_end FROM (VALUES {values})")
    for row in run.sql(f"SELECT * FROM ({_host_in(listed)}) ORDER BY rank, device, i, overlap_ns DESC, name").fetchall():
        out[int(row[0])].append(tuple(row[1:]))
    return out


GAPS = RankQuery("device_idle_gaps", _one_rank(_gaps_sql("rank = ?")), f"SELECT * FROM ({_gaps_sql('TRUE')}) ORDER BY rank, device, i",
                 read=_read_gaps)
HOST = RankQuery("device_idle_host", f"SELECT * EXCLUDE (rank) FROM ({_host_sql('rank = ?')}) ORDER BY device, i, overlap_ns DESC, name",
                 f"SELECT * FROM ({_host_sql('TRUE')}) ORDER BY rank, device, i, overlap_ns DESC, name", read=_read_host)
RANK_QUERIES = (GAPS, HOST)
"""The largest gaps of every device and what the host ran in them, for all ranks of a batch at once.
Read (`read`) from the devices' busy unions the summary reads anyway; `one` and `many` are the same
rows in SQL alone (tests/test_rank_batching.py holds them equal)."""


def screen(run, summaries: dict) -> set[int]:
    """Ranks without a device (not applicable) and those with a device idle beyond the check's
    share of its window (the summary's figures: no query)."""
    return {r for r, s in summaries.items() if not s["devices"] or any(
        d["window_ns"] and d["idle_ns"] / d["window_ns"] >= THRESHOLDS["IDLE_SHARE_MIN"] for d in s["devices"])}


def check(ctx: Context) -> list:
    ctx.require_device()
    out, found = [], None
    for dev in ctx.summary["devices"]:
        d = dev["device"]
        sql = metrics.busy_sql(ctx.rank, d)
        v = {k: dev[k] for k in ("busy_ns", "window_ns", "idle_ns")}  # computed by the summary with this same SQL
        if not v["window_ns"] or v["idle_ns"] / v["window_ns"] < THRESHOLDS["IDLE_SHARE_MIN"]:
            continue
        if found is None:  # every device's gaps and host activity, once
            found = (rank_rows(ctx.run, GAPS, ctx.rank), rank_rows(ctx.run, HOST, ctx.rank))
        gaps = [{"gap_start": gs, "gap_end": ge} for dev_, _, gs, ge in found[0] if dev_ == d]
        host, samples, frame = [], [], None
        by_gap: dict[int, list] = {i: [] for i in range(len(gaps))}
        for dev_, i, name, event_id, frame_id, overlap_ns in found[1]:
            if dev_ == d:
                by_gap[i].append({"name": name, "event_id": event_id, "frame_id": frame_id, "overlap_ns": overlap_ns})
        for i, g in enumerate(gaps):
            busy = by_gap[i]
            what = ", ".join(f"{b['name']} {ms(b['overlap_ns'])}" for b in busy) or "no recorded host activity"
            host.append(f"gap of {ms(g['gap_end'] - g['gap_start'])}: host ran {what}")
            samples += [b["event_id"] for b in busy[:1]]
            if frame is None and busy and busy[0]["frame_id"] is not None:
                frame = busy[0]["frame_id"]
        share = v["idle_ns"] / v["window_ns"]
        out.append(ctx.finding(
            title=f"Device {d} idle {pct(share)} of its window ({ms(v['idle_ns'])})",
            impact_ns=v["idle_ns"], saving_bound_ns=v["idle_ns"],
            location=Location(device=d, source=ctx.source_of(frame)),
            sql=sql, values={"busy_ns": v["busy_ns"], "window_ns": v["window_ns"], "idle_ns": v["idle_ns"]},
            sample_event_ids=samples, uses_source=True,
            recommendation="Keep the device fed: largest gaps — " + "; ".join(host) + ". "
            + ("Move host work out of the step (DataLoader workers, pin_memory), avoid" if ctx.trains() else
               "Prepare inputs ahead of the device (pinned memory, non_blocking copies), avoid")
            + " synchronising calls, batch small ops or use " + graph_tip(ctx) + " to cut launch gaps.",
        ))
    return out
