"""memory: peak memory, allocation churn per step, and the source lines that allocate most.

From the allocator events (recorded with profile_memory=True): per device, the peak of
`total_allocated`; the bytes allocated per steady profiler step (metrics.steady_steps; churn:
many short-lived allocations cost allocator time and fragment memory), or in the analysed window
without steps (then shown, not judged); and the user source lines that allocate the most
bytes, where stacks exist. Severity is high when the peak is above PEAK_CAPACITY_MAX of the
device's memory (from the devices view); else a finding of severity info is made only when the
peak or the churn per step reaches REPORT_MIN_BYTES (memory has no direct time cost: impact 0).
Not applicable when the run has no allocator events.
"""

from __future__ import annotations

import json

from ...vocab import in_steps, line_key_sql, memory_allocation
from ..engine import Context, NotApplicable
from ..model import Location
from ..rank_rows import RankQuery
from ..rank_rows import rows as rank_rows
from ._util import row, rows

RULE_ID = "memory"
TITLE = "Memory: peak, churn and allocating lines"
CATEGORY = "memory"
SCOPE = "rank"
THRESHOLDS = {
    "PEAK_CAPACITY_MAX": 0.90,  # peak allocated / device memory above this is high severity
    "REPORT_MIN_BYTES": 64 * 2**20,  # below capacity, report only when the peak or the churn per step reaches this
}

MEMORY_EVENTS = RankQuery("memory_events", "SELECT count(*) FROM memory WHERE rank = ? HAVING count(*) > 0",
                          "SELECT rank, count(*) FROM memory GROUP BY rank ORDER BY rank")
RANK_QUERIES = (MEMORY_EVENTS,)
"""How many allocator events each rank has (none: the rule does not apply), for a batch of ranks at once."""


def _gib(b) -> str:
    return f"{(b or 0) / 2**30:.2f} GiB" if (b or 0) >= 2**28 else f"{(b or 0) / 2**20:.1f} MiB"


def check(ctx: Context) -> list:
    n = sum(c for c, in rank_rows(ctx.run, MEMORY_EVENTS, ctx.rank))
    if not n:
        raise NotApplicable("no allocator events (record with profile_memory=True)")
    steady = ctx.steady_steps
    steps = len(steady) if steady else 0  # per steady step; 0: over the window
    in_steady = in_steps(steady) if steady is not None else "TRUE"
    out = []
    alloc = memory_allocation()
    for dev in rows(ctx.run, f"SELECT DISTINCT device_type, device FROM memory WHERE rank = {ctx.rank} ORDER BY 1, 2"):
        dt, d = dev["device_type"], dev["device"]
        sql = f"""SELECT max(total_allocated)::BIGINT AS peak_bytes, coalesce(sum(bytes) FILTER (WHERE {alloc}), 0)::BIGINT AS allocated_bytes,
  count(*) FILTER (WHERE {alloc}) AS allocations,
  coalesce(sum(bytes) FILTER (WHERE {alloc} AND {in_steady}), 0)::BIGINT AS allocated_in_steps_bytes
FROM memory WHERE rank = {ctx.rank} AND device_type = {dt} AND device = {d}"""
        v = row(ctx.run, sql)
        lines = rows(ctx.run, f"""SELECT {line_key_sql('f')} AS source, sum(m.bytes)::BIGINT AS bytes
            FROM memory m JOIN frames f ON f.frame_id = m.frame_id
            WHERE m.rank = {ctx.rank} AND m.device_type = {dt} AND m.device = {d} AND {memory_allocation('m')}
            GROUP BY 1 ORDER BY bytes DESC, source LIMIT 3""")  # (ties by line: the same words every run)
        cap = None
        if d is not None and d >= 0:
            p = row(ctx.run, f"SELECT properties FROM devices WHERE rank = {ctx.rank} AND device = {d}")
            cap = json.loads(p["properties"]).get("totalGlobalMem") if p.get("properties") else None
        ratio = (v["peak_bytes"] / cap) if cap else None
        severity = "high" if ratio is not None and ratio > THRESHOLDS["PEAK_CAPACITY_MAX"] else "info"
        where = "CPU" if dt == 0 else f"device {d}"
        churn = v["allocated_in_steps_bytes"] // max(steps, 1)
        if severity == "info" and max(v["peak_bytes"] or 0, churn if steps else 0) < THRESHOLDS["REPORT_MIN_BYTES"]:
            continue
        text = (f"peak {_gib(v['peak_bytes'])}" + (f" ({100 * ratio:.0f}% of {_gib(cap)})" if ratio is not None else "")
                + f", {_gib(churn)} allocated " + ("per step" if steps else "in the analysed window"))
        out.append(ctx.finding(
            title=f"Memory on {where}: {text}", impact_ns=0, saving_bound_ns=0, severity=severity,
            location=Location(device=d if dt != 0 else None, source=lines[0]["source"] if lines else None),
            sql=sql, values=v, uses_source=True,
            recommendation=(("Near capacity: use activation checkpointing, a smaller micro-batch, bf16/fp16, or "
                             "sharding (FSDP/ZeRO). " if ctx.trains() else
                             "Near capacity: a smaller batch, bf16/fp16 or int8 weights, or sharding the model. ")
                            if severity == "high" else "")
            + ("Largest allocating lines: " + ", ".join(f"{x['source']} {_gib(x['bytes'])}" for x in lines) + ". " if lines else "")
            + "Reduce churn by reusing buffers (out=, in-place ops) and keeping shapes stable.",
        ))
    return out
