"""host-sync: the host waits for the device.

Finds synchronising calls: cudaDeviceSynchronize / cudaStreamSynchronize / cudaEventSynchronize
(and their hip equivalents) and the operators that imply one — aten::item, aten::_local_scalar_dense
(`.item()`, `float(t)`, `if t:`) and aten::nonzero (data-dependent shape). Each stalls the host
until the device drains, so the device then idles while the host catches up. Grouped by the
user's source line. Impact: union of the intervals of these calls on the host. Saving bound: the
same. Only meaningful with a device: on a CPU-only run it is not applicable.
"""

from __future__ import annotations

from .. import metrics
from ..engine import Context
from ..model import Location
from ._util import ms, q, row, rows

RULE_ID = "host-sync"
TITLE = "Host-device synchronisation"
CATEGORY = "synchronization"
SCOPE = "rank"
SYNC_RUNTIME = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize")
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero")
THRESHOLDS = {
    "SYNC_SHARE_MIN": 0.01,  # union of sync intervals / analysed time
}


def _where(rank: int) -> str:
    names = ", ".join(q(n) for n in SYNC_RUNTIME + SYNC_OPS)
    return f"rank = {rank} AND kind IN ('runtime', 'cpu_op') AND name IN ({names})"


def check(ctx: Context) -> list:
    ctx.require_device()
    where = _where(ctx.rank)
    sql = f"WITH u AS ({metrics.union_sql(where)}) SELECT coalesce(sum(end_ns - start_ns), 0)::BIGINT AS sync_ns, count(*) AS stalls FROM u"
    v = row(ctx.run, sql)
    if not ctx.analysed_ns or v["sync_ns"] / ctx.analysed_ns < THRESHOLDS["SYNC_SHARE_MIN"]:
        return []
    by_line = rows(ctx.run, f"""SELECT source_frame_id AS frame_id, arg_max(name, dur_ns) AS name, count(*) AS calls, sum(dur_ns)::BIGINT AS ns, min(event_id) AS sample_id
        FROM events WHERE {where} AND (kind = 'cpu_op' AND event_id = top_op_id OR kind = 'runtime' AND top_op_id IS NULL)
        GROUP BY source_frame_id ORDER BY ns DESC LIMIT 3""")
    top = by_line[0] if by_line else {"frame_id": None, "name": None, "sample_id": None}
    where_txt = "; ".join(f"{ctx.source_of(b['frame_id']) or 'unknown line'}: {b['name']} x{b['calls']} {ms(b['ns'])}" for b in by_line)
    return [ctx.finding(
        title=f"{v['stalls']} host-device synchronisations cost {ms(v['sync_ns'])}",
        impact_ns=v["sync_ns"], saving_bound_ns=v["sync_ns"],
        location=Location(op=top["name"], source=ctx.source_of(top["frame_id"])),
        sql=sql, values={"sync_ns": v["sync_ns"], "stalls": v["stalls"]},
        sample_event_ids=[b["sample_id"] for b in by_line], uses_source=True,
        recommendation=f"Remove host syncs from the step ({where_txt}). Keep values on the device (no .item(), "
        "float(t), print(t) or data-dependent `if` inside the loop); log metrics every N steps; avoid "
        "torch.nonzero / boolean-mask indexing (use torch.where); drop explicit torch.cuda.synchronize().",
    )]
