"""copies: slow or blocking memory copies.

Finds host-to-device copies from pageable (not pinned) host memory, which the driver stages
through a bounce buffer and which cannot overlap compute, and device-to-host copies inside a
profiler step, which usually mean the host waits for a result (logging, `.cpu()`, `.tolist()`).
Copies are told by their names (vocab.PAGEABLE_TO_DEVICE_COPY_PATTERN, vocab.TO_HOST_COPY_PATTERN): Kineto's
'Memcpy HtoD (Pageable -> Device)', 'Memcpy DtoH (Device -> Pageable)', ROCm's 'CopyDeviceToHost'.
Impact: device time of these copies. Saving bound: the same.
"""

from __future__ import annotations

from ...vocab import charged_top_op, pageable_to_device_copy, to_host_copy
from ..engine import Context
from ..model import Location
from ._util import ms, no_device, row, share_at_least

RULE_ID = "copies"
TITLE = "Pageable host-to-device and in-step device-to-host copies"
CATEGORY = "copies"
SCOPE = "rank"
THRESHOLDS = {
    "COPY_SHARE_MIN": 0.01,  # copy time / analysed time
}
PAGEABLE_H2D = f"({pageable_to_device_copy()})"
D2H_IN_STEP = f"({to_host_copy()} AND step IS NOT NULL)"


def screen(run, summaries: dict) -> set[int]:
    """Ranks without a device (not applicable) and those whose copy time passes the check's share."""
    ns = dict(run.sql(f"SELECT rank, sum(dur_ns) FROM events WHERE kind = 'memcpy' AND ({PAGEABLE_H2D} OR {D2H_IN_STEP}) "
                      "GROUP BY rank").fetchall())
    return no_device(summaries) | share_at_least(summaries, ns, THRESHOLDS["COPY_SHARE_MIN"])


def check(ctx: Context) -> list:
    ctx.require_device()
    sql = f"""SELECT coalesce(sum(dur_ns) FILTER (WHERE {PAGEABLE_H2D}), 0)::BIGINT AS pageable_h2d_ns,
  count(*) FILTER (WHERE {PAGEABLE_H2D}) AS pageable_h2d,
  coalesce(sum(dur_ns) FILTER (WHERE {D2H_IN_STEP}), 0)::BIGINT AS d2h_in_step_ns,
  count(*) FILTER (WHERE {D2H_IN_STEP}) AS d2h_in_step,
  coalesce(sum(dur_ns), 0)::BIGINT AS copy_ns
FROM events WHERE rank = {ctx.rank} AND kind = 'memcpy' AND ({PAGEABLE_H2D} OR {D2H_IN_STEP})"""
    v = row(ctx.run, sql)
    if not ctx.analysed_ns or v["copy_ns"] / ctx.analysed_ns < THRESHOLDS["COPY_SHARE_MIN"]:
        return []
    top = row(ctx.run, f"""SELECT source_frame_id AS frame_id, arg_max(name, dur_ns) AS name, min(event_id) AS sample_id, sum(dur_ns) AS ns
        FROM events WHERE rank = {ctx.rank} AND kind = 'memcpy' AND ({PAGEABLE_H2D} OR {D2H_IN_STEP})
        GROUP BY source_frame_id ORDER BY ns DESC, source_frame_id LIMIT 1""")
    op = row(ctx.run, f"""SELECT {charged_top_op('k', 'o')} AS name FROM events k LEFT JOIN events o ON o.event_id = k.top_op_id
        WHERE k.rank = {ctx.rank} AND k.kind = 'memcpy' AND ({pageable_to_device_copy('k')} OR {to_host_copy('k')} AND k.step IS NOT NULL)
        AND {charged_top_op('k', 'o')} IS NOT NULL GROUP BY 1 ORDER BY sum(k.dur_ns) DESC, 1 LIMIT 1""")
    parts = []
    if v["pageable_h2d"]:
        parts.append(f"{v['pageable_h2d']} pageable H2D copies ({ms(v['pageable_h2d_ns'])})")
    if v["d2h_in_step"]:
        parts.append(f"{v['d2h_in_step']} D2H copies inside steps ({ms(v['d2h_in_step_ns'])})")
    return [ctx.finding(
        title="Copies: " + ", ".join(parts),
        impact_ns=v["copy_ns"], saving_bound_ns=v["copy_ns"],
        location=Location(op=op.get("name"), source=ctx.source_of(top["frame_id"])),
        sql=sql, values=v, sample_event_ids=[top["sample_id"]] if top["sample_id"] else [], uses_source=True,
        recommendation="Pin host memory (" + ("DataLoader(pin_memory=True), " if ctx.trains() else "") + "tensor.pin_memory()) and copy with "
        "non_blocking=True so copies overlap compute; keep results on the device inside the step and move "
        "them to the host every N steps.",
    )]
