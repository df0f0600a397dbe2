"""device-idle: the device waits for the host.

Finds devices that sit idle for a large share of their window (first to last kernel, memcpy or
memset on that device): the gaps between busy intervals, where nothing ran on any stream. For the
largest gaps it names what the host was doing meanwhile (the top-level operators that overlap
the gap), which tells whether the job is host-bound (Python, data loading, launches) or waits on
something else. Impact: idle time inside the device window. Saving bound: the same.
"""

from __future__ import annotations

from ...vocab import top_host_call
from .. import metrics
from ..engine import Context
from ..model import Location
from ._util import graph_tip, ms, pct, rows

RULE_ID = "device-idle"
TITLE = "Device idle between kernels (host-bound gaps)"
CATEGORY = "device_idle"
SCOPE = "rank"
THRESHOLDS = {
    "IDLE_SHARE_MIN": 0.10,  # idle time / device window
    "GAPS_SHOWN": 3,  # largest gaps whose host activity is named
}


def screen(run, summaries: dict) -> set[int]:
    """Ranks without a device (not applicable) and those with a device idle beyond the check's
    share of its window (the summary's figures: no query)."""
    return {r for r, s in summaries.items() if not s["devices"] or any(
        d["window_ns"] and d["idle_ns"] / d["window_ns"] >= THRESHOLDS["IDLE_SHARE_MIN"] for d in s["devices"])}


def check(ctx: Context) -> list:
    ctx.require_device()
    out = []
    for dev in ctx.summary["devices"]:
        d = dev["device"]
        sql = metrics.busy_sql(ctx.rank, d)
        v = {k: dev[k] for k in ("busy_ns", "window_ns", "idle_ns")}  # computed by the summary with this same SQL
        if not v["window_ns"] or v["idle_ns"] / v["window_ns"] < THRESHOLDS["IDLE_SHARE_MIN"]:
            continue
        gaps = rows(ctx.run, f"WITH u AS ({metrics.union_sql(metrics.device_where(ctx.rank, d))}) "
                    "SELECT lag(end_ns) OVER (ORDER BY start_ns) AS gap_start, start_ns AS gap_end FROM u "
                    f"QUALIFY gap_start IS NOT NULL ORDER BY gap_end - gap_start DESC LIMIT {THRESHOLDS['GAPS_SHOWN']}")
        host, samples, frame = [], [], None
        by_gap: dict[int, list] = {i: [] for i in range(len(gaps))}
        if gaps:  # what the host ran in each gap, the 3 heaviest names per gap, in one query
            values = ", ".join(f"({i}, {int(g['gap_start'])}, {int(g['gap_end'])})" for i, g in enumerate(gaps))
            for b in rows(ctx.run, f"""WITH g(i, gs, ge) AS (VALUES {values})
                SELECT g.i, e.name, min(e.event_id) AS event_id, any_value(e.source_frame_id) AS frame_id,
                sum(least(e.ts_ns + e.dur_ns, g.ge) - greatest(e.ts_ns, g.gs))::BIGINT AS overlap_ns
                FROM events e JOIN g ON e.ts_ns < g.ge AND e.ts_ns + e.dur_ns > g.gs
                WHERE e.rank = {ctx.rank} AND {top_host_call('e')}
                GROUP BY g.i, e.name QUALIFY row_number() OVER (PARTITION BY g.i ORDER BY overlap_ns DESC, e.name) <= 3
                ORDER BY g.i, overlap_ns DESC, e.name"""):
                by_gap[b["i"]].append(b)
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
