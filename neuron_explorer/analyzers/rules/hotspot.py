"""hotspot: one operator, kernel or source line dominates the time.

Reports, per rank, the single top-level CPU operator (by total CPU time), the single kernel name
(by total device time) and the single user source line (by total CPU time of the top-level
operators it called, self) that take at least HOTSPOT_SHARE_MIN of the analysed time. A hotspot is
where optimisation pays first. Impact: its time. Saving bound: the same (an upper bound — the
work itself cannot vanish, but a better algorithm, dtype or kernel can shrink it).
"""

from __future__ import annotations

from ..engine import Context
from ..model import Location
from ._util import ms, pct, row

RULE_ID = "hotspot"
TITLE = "Hotspot"
CATEGORY = "hotspot"
SCOPE = "rank"
THRESHOLDS = {
    "HOTSPOT_SHARE_MIN": 0.25,  # time of the one op / kernel / line / analysed time
}


def _finding(ctx: Context, what: str, sql: str, loc: Location, key: str, rec: str):
    v = row(ctx.run, sql)
    if v.get(key) is None or not ctx.analysed_ns or v[key] / ctx.analysed_ns < THRESHOLDS["HOTSPOT_SHARE_MIN"]:
        return None
    label = v["name"]
    if what == "source line":
        loc.source = label
    elif what == "kernel":
        loc.kernel, loc.device = label, v.get("device")
        loc.op, loc.source = v.get("op"), ctx.source_of(v.get("frame_id"))
    else:
        loc.op, loc.source = label, ctx.source_of(v.get("frame_id"))
    share = v[key] / ctx.analysed_ns
    return ctx.finding(
        title=f"Hotspot {what}: {label[:80]} takes {pct(share)} ({ms(v[key])} over {v['calls']} calls)",
        impact_ns=v[key], saving_bound_ns=v[key], location=loc, sql=sql,
        values={key: v[key], "calls": v["calls"], "name": v["name"]},
        sample_event_ids=[v["sample_id"]] if v.get("sample_id") is not None else [], uses_source=True, recommendation=rec)


def check(ctx: Context) -> list:
    r = ctx.rank
    out = [
        _finding(ctx, "operator", f"""SELECT name, sum(dur_ns)::BIGINT AS cpu_ns, count(*) AS calls, min(event_id) AS sample_id,
  mode(frame_id) AS frame_id FROM events WHERE rank = {r} AND kind = 'cpu_op' AND event_id = top_op_id
GROUP BY name ORDER BY cpu_ns DESC, name LIMIT 1""", Location(), "cpu_ns",
                 "Make this operator cheaper: check its shapes and dtype (lower precision, channels_last), call it "
                 "less often or on bigger batches, or replace it with a fused / compiled version (torch.compile)."),
    ]
    if ctx.has_device():
        out.append(_finding(ctx, "kernel", f"""SELECT k.name, sum(k.dur_ns)::BIGINT AS device_ns, count(*) AS calls, min(k.event_id) AS sample_id,
  any_value(k.device) AS device, mode(o.name) AS op, mode(k.frame_id) AS frame_id
FROM events k LEFT JOIN events o ON o.event_id = k.top_op_id WHERE k.rank = {r} AND k.kind = 'kernel'
GROUP BY k.name ORDER BY device_ns DESC, k.name LIMIT 1""", Location(), "device_ns",
                            "This kernel dominates device time: check the launching operator's shapes and dtype "
                            "(tensor-core friendly sizes, bf16/fp16), or swap in a faster implementation."))
    if ctx.has_user_frames():
        out.append(_finding(ctx, "source line", f"""SELECT f.file || ':' || f.line AS name, sum(e.dur_ns)::BIGINT AS cpu_ns, count(*) AS calls,
  min(e.event_id) AS sample_id FROM events e JOIN frames f ON f.frame_id = e.frame_id
WHERE e.rank = {r} AND e.kind = 'cpu_op' AND e.event_id = e.top_op_id GROUP BY 1 ORDER BY cpu_ns DESC, 1 LIMIT 1""", Location(), "cpu_ns",
                            "Most operator time comes from this line: optimise the call it makes (shapes, dtype, "
                            "algorithm) or how often it runs."))
    return [f for f in out if f is not None]
