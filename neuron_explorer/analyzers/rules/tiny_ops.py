"""tiny-ops: Python and dispatch overhead from many tiny operators.

Counts top-level CPU operators shorter than TINY_OP_NS. When there are many per steady step
(metrics.steady_steps; without steps, in the analysed window), the time
goes to Python, the dispatcher and per-op bookkeeping rather than to arithmetic: a loop over
elements or small tensors that should be one vectorised operation, or a chain that a compiler
would fuse. Their host time (`overhead_ns`): total time of the tiny operators plus the host gaps
between consecutive ones on the same thread that are shorter than TINY_GAP_NS (the Python in
between). Impact: on a rank with a device and profiler steps, the part of that time in which the
steps' critical path runs on the host (`on_path_ns`, critical_path.host_union): while the device
works through the host's calls, making them cheaper saves nothing (h100 Qwen1.5 chat, device-bound:
1,161 tiny operators of 14.80 ms of host time, 1.06 ms of it on the path); else their host time.
The share test (TINY_SHARE_MIN) is of the impact. Saving bound: the same.
"""

from __future__ import annotations

from ...vocab import in_steps, top_op
from .. import critical_path as cp
from ..engine import Context
from ..metrics import per_step_words
from ..model import Location
from ._util import ms, row

RULE_ID = "tiny-ops"
TITLE = "Many tiny operators (Python / dispatch overhead)"
CATEGORY = "python_overhead"
SCOPE = "rank"
THRESHOLDS = {
    "TINY_OP_NS": 20_000,  # a top-level operator shorter than this is 'tiny'
    "TINY_GAP_NS": 50_000,  # gaps between consecutive tiny ops up to this long count as their overhead
    "TINY_OPS_PER_STEP_MIN": 200,  # at least this many per step (or in total without steps)
    "TINY_SHARE_MIN": 0.10,  # and their impact / analysed time at least this
}


def screen(run, summaries: dict) -> set[int]:
    """Ranks with at least TINY_OPS_PER_STEP_MIN tiny operators per step (the check's first test)."""
    t = THRESHOLDS
    n = dict(run.sql(f"SELECT rank, count(*) FROM events WHERE {top_op()} "
                     f"AND dur_ns < {t['TINY_OP_NS']} GROUP BY rank").fetchall())
    return {r for r, s in summaries.items() if (n.get(r) or 0) / max(s["steps"]["count"], 1) >= t["TINY_OPS_PER_STEP_MIN"]}


def _ops_sql(rank: int) -> str:
    """The rank's tiny operators, each with the gap before it on its thread (`gap_ns`, null for a
    thread's first): the figures' query and the time on the path read them alike."""
    return f"""SELECT tid, ts_ns, dur_ns, event_id, frame_id, name,
    ts_ns - lag(ts_ns + dur_ns) OVER (PARTITION BY pid, tid ORDER BY ts_ns) AS gap_ns
  FROM events WHERE rank = {rank} AND {top_op()} AND dur_ns < {THRESHOLDS['TINY_OP_NS']}"""


def check(ctx: Context) -> list:
    t = THRESHOLDS
    sql = f"""WITH ops AS ({_ops_sql(ctx.rank)})
SELECT count(*) AS tiny_ops, coalesce(sum(dur_ns), 0)::BIGINT AS tiny_op_ns,
  coalesce(sum(gap_ns) FILTER (WHERE gap_ns >= 0 AND gap_ns < {t['TINY_GAP_NS']}), 0)::BIGINT AS gap_ns,
  (coalesce(sum(dur_ns), 0) + coalesce(sum(gap_ns) FILTER (WHERE gap_ns >= 0 AND gap_ns < {t['TINY_GAP_NS']}), 0))::BIGINT AS overhead_ns
FROM ops"""
    v = row(ctx.run, sql)
    steady = ctx.steady_steps
    steps = len(steady) if steady is not None else 0  # per steady step; 0: over the window
    counted = v["tiny_ops"] if steady is None else row(ctx.run, f"SELECT count(*) AS n FROM events WHERE rank = {ctx.rank} AND {top_op()} "
                                                           f"AND dur_ns < {t['TINY_OP_NS']} AND {in_steps(steady)}")["n"]
    if not counted or counted / max(steps, 1) < t["TINY_OPS_PER_STEP_MIN"] \
            or not ctx.analysed_ns or v["overhead_ns"] / ctx.analysed_ns < t["TINY_SHARE_MIN"]:
        return []
    on_path = _on_path_ns(ctx) if ctx.has_device() and ctx.summary["steps"]["count"] else None  # (None: no path)
    impact = v["overhead_ns"] if on_path is None else on_path
    if impact / ctx.analysed_ns < t["TINY_SHARE_MIN"]:
        return []
    top = row(ctx.run, f"""SELECT source_frame_id AS frame_id, mode(name) AS op, count(*) AS n, min(event_id) AS sample_id FROM events
        WHERE rank = {ctx.rank} AND {top_op()} AND dur_ns < {t['TINY_OP_NS']}
        GROUP BY source_frame_id ORDER BY n DESC, source_frame_id LIMIT 1""")
    return [ctx.finding(
        title=f"{v['tiny_ops']} tiny operators ({per_step_words(counted, steps)}) cost {ms(v['overhead_ns'])}"
              + (f", {ms(on_path)} of it on the critical path" if on_path is not None else ""),
        impact_ns=impact, saving_bound_ns=impact,
        location=Location(op=top["op"], source=ctx.source_of(top["frame_id"])),
        sql=sql, values={**v, "tiny_ops_per_step": counted / steps if steps else None, "on_path_ns": on_path},
        sample_event_ids=[top["sample_id"]], uses_source=True,
        recommendation=f"Most calls are under {t['TINY_OP_NS'] // 1000} us, so Python and dispatch dominate"
        + (f" ({top['n']} of them from one line, mostly {top['op']})" if top["op"] and top["frame_id"] is not None
           else f" (mostly {top['op']})" if top["op"] else "") + ". Vectorise the Python loop into whole-tensor "
        "operations, use foreach/fused variants, or wrap the function in torch.compile to fuse it.",
    )]


def _on_path_ns(ctx: Context) -> int | None:
    """The part of the tiny operators' host time (each call, and the gaps under TINY_GAP_NS before it
    on its thread) in which the steps' critical path runs on the host (critical_path.host_union)."""
    return cp.on_host_path_ns(ctx.run, ctx.rank, f"""SELECT ts_ns - CASE WHEN gap_ns >= 0 AND gap_ns < {THRESHOLDS['TINY_GAP_NS']}
        THEN gap_ns ELSE 0 END AS start_ns, ts_ns + dur_ns AS end_ns FROM ({_ops_sql(ctx.rank)})""")  # (a call and the Python just before it)
