"""host-sync: the host waits for the device.

A host sync is a host call that waits for a device: a runtime call that synchronises
(cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, their hip and driver
equivalents: vocab.sync_call), a blocking device-to-host copy (a runtime copy call whose own
device-to-host copy ended before the call returned, as in `.item()` on a device tensor), or an
operator with one of those beneath it (a runtime call whose `top_op_id` is the operator: same rank,
same thread, nested in it). An operator that reads a value on the host (vocab.SYNC_OPS: aten::item,
aten::_local_scalar_dense, ...) with no such call beneath reads a CPU tensor: it waits for nothing
and is no sync. A device-side wait (cudaStreamWaitEvent) does not stop the host and is no sync either.
Counted per top-level host call (the operator, or the runtime call made outside every operator),
grouped by the user's source line. Impact, with profiler steps: the device idle the syncs inside
steps cause. The syncs are grouped by the next device work of the rank after they return (at most
their step's end: the gap they are in). Without them the host would have reached that work earlier
by what they waited (the sum of their waits), so the idle they cause is the gap's last part, that
long: from the next work less the waits (not before the group's first return) to the next work.
The rest of the gap is host work, which remains without the syncs: a 20 µs sync followed by 13 s
of Python causes 20 µs of idle, not 13 s (that time is the critical path's host time), and a sync
that waits 45 ms for the device and is followed by a launch 2 ms later causes the 2 ms gap (while
a sync waits the device is busy, so its own duration is not the cost). Those intervals are merged
and the time any device of the rank is busy in them (another stream's work) is taken out; syncs
outside every step are counted apart and never in the impact. The evidence also gives
`idle_summed_ns`: each sync's whole gap, from its return to the next device work, summed. Without steps:
the part of the union of the syncs' waiting runtime calls (what the host waited; `sync_ns`) in which no
device of the rank ran anything the trace holds (`sync_idle_ns`): neither side worked then, while
a wait beside running device work costs the window nothing (TraceLens's torch.compile benchmark: two
hipDeviceSynchronize waiting 11.87 ms of a 13.28 ms device-bound span were its first finding; an
inference server's 463 ms blocking copy with the device idle stays 463 ms). Saving bound: the same. Only
meaningful with a device: on a CPU-only run it is not applicable. The evidence gives `waits_ns`
(the union of the waiting calls, inside the steps where there are steps) and `waits_device_idle_ns`
(the part of it in which no device of the rank ran anything the trace holds); where that is
UNSEEN_WAIT_SHARE of the waits or more, the host waited on work the trace does not show (another
thread's or process's kernels, a graph's nodes, dropped events) and the advice says so instead of
telling to remove the sync (the inference server's 463 ms blocking copy).
"""

from __future__ import annotations

import numpy as np

from ...vocab import DEVICE_WORK_SQL, device_work, memcpy_call, sync_call, to_host_copy, top_host_call
from .. import metrics
from ..engine import Context
from ..model import Location
from ..rank_rows import arrays as rank_arrays
from ..rank_rows import rows as rank_rows
from ._util import ms, no_device, profiler_tip, rows, share_at_least

RULE_ID = "host-sync"
TITLE = "Host-device synchronisation"
CATEGORY = "synchronization"
SCOPE = "rank"
THRESHOLDS = {
    "SYNC_SHARE_MIN": 0.01,  # the device idle the syncs cause (without steps: their waits with the device idle) / analysed time
    "UNSEEN_WAIT_SHARE": 0.5,  # the waits' time with no device work recorded / their time: they waited on work the trace does not hold
}
SCREEN_ONE_RANK = False  # the check's first query is the screen's for that rank (engine.py): one rank runs it once

def waits(alias: str = "r") -> str:
    """A runtime call waits for a device: a sync call, or a blocking device-to-host copy (its own
    copy to the host ended before the call returned). The blocking copies' calls are one
    uncorrelated set (device copies to the host joined to the call that launched them, by
    `launch_id`): a correlated EXISTS beside the OR made DuckDB join every event of the rank to
    the copies, the larger part of this rule's queries."""
    a = f"{alias}." if alias else ""
    return (f"({sync_call(alias)} OR {a}kind = 'runtime' AND {memcpy_call(alias)} AND {a}event_id IN (SELECT c.launch_id FROM events c "
            f"JOIN events l ON l.event_id = c.launch_id WHERE {to_host_copy('c')} AND c.ts_ns + c.dur_ns <= l.ts_ns + l.dur_ns))")


def _ranks(rank: int | None, alias: str = "") -> str:
    a = f"{alias}." if alias else ""
    return "TRUE" if rank is None else f"{a}rank = {int(rank)}"


def waiting_calls_sql(rank: int | None) -> str:
    """The runtime calls that wait for a device (`waits`): rank, event_id, top_op_id, ts_ns, dur_ns."""
    return f"SELECT r.rank, r.event_id, r.top_op_id, r.ts_ns, r.dur_ns FROM events r WHERE {_ranks(rank, 'r')} AND {waits('r')}"


def syncs_sql(rank: int | None, calls: str | None = None) -> str:
    """The host syncs: top-level host calls (an operator, or a runtime call outside every operator)
    that are, or have beneath them, a runtime call that waits for a device. Columns: rank,
    event_id, name, source_frame_id, ts_ns, end_ns, dur_ns, step, s_end (the end of the profiler
    step it starts in; null outside every step), waits (its waiting runtime calls) and wait_ns
    (their durations: the time the host waited, not the operator's, which may hold other work).
    `calls`: the name of a CTE of the statement holding `waiting_calls_sql(rank)`'s rows (else read here)."""
    return f"""WITH st AS (SELECT rank, step, min(ts_ns) AS s_ts, max(ts_ns + dur_ns) AS s_end FROM events
         WHERE {_ranks(rank)} AND kind = 'step' GROUP BY rank, step),
w AS (SELECT coalesce(r.top_op_id, r.event_id) AS host_call, count(*) AS waits, sum(r.dur_ns) AS wait_ns
      FROM {calls or f"({waiting_calls_sql(rank)})"} r GROUP BY ALL)
SELECT e.rank, e.event_id, e.name, e.source_frame_id, e.ts_ns, e.ts_ns + e.dur_ns AS end_ns, e.dur_ns,
  CASE WHEN e.ts_ns < st.s_end THEN st.step END AS step, CASE WHEN e.ts_ns < st.s_end THEN st.s_end END AS s_end,
  w.waits, w.wait_ns::BIGINT AS wait_ns
FROM events e JOIN w ON w.host_call = e.event_id ASOF LEFT JOIN st ON st.rank = e.rank AND e.ts_ns >= st.s_ts
WHERE {_ranks(rank, 'e')} AND {top_host_call('e')}"""


def figures_sql(rank: int | None, busy_in_sql: bool = True) -> str:
    """Per rank with host syncs (plain DuckDB over `events`): stalls (syncs inside steps), wait_ns
    (the durations of their waiting runtime calls), idle_after_ns (the device idle they cause: the impact with steps),
    idle_summed_ns (each sync's whole gap, from its return to the next device work, summed: what a
    count of the idle after every sync would say, for comparison), sync_ns (the union
    of the intervals of every sync's waiting runtime calls: the impact without steps), syncs (all of
    them), sync_idle_ns (the part of that union in which no device of the rank ran anything the trace
    holds: the impact without steps), outside_steps and outside_wait_ns (those outside every step).
    With `busy_in_sql=False` (`_figures`), idle_after_ns and sync_idle_ns are left out and the rows carry
    the merged intervals instead (after_a, after_b; the waits' union, waits_a, waits_b) and how many
    device events have no device (no_device), for the busy time in them to be taken out of the
    devices' busy unions the summary merged."""
    if busy_in_sql:
        idle_ctes = f""",
busy AS ({metrics.union_sql(f"{_ranks(rank)} AND {device_work()}", by=("rank",))}),
idle AS (SELECT u.rank, sum(u.b - u.a - coalesce((SELECT sum(least(u.b, y.end_ns) - greatest(u.a, y.start_ns)) FROM busy y
           WHERE y.rank = u.rank AND y.start_ns < u.b AND y.end_ns > u.a), 0)) AS ns FROM u GROUP BY u.rank)"""
        # the part of the waits' union with no device work (sync_idle_ns): the impact without steps
        idle_ctes += """,
wi AS (SELECT w.rank, sum(w.end_ns - w.start_ns - coalesce((SELECT sum(least(w.end_ns, y.end_ns) - greatest(w.start_ns, y.start_ns))
         FROM busy y WHERE y.rank = w.rank AND y.start_ns < w.end_ns AND y.end_ns > w.start_ns), 0)) AS ns FROM wu w GROUP BY w.rank)"""
        idle_cols = "coalesce(any_value(idle.ns), 0)::BIGINT AS idle_after_ns, coalesce(any_value(wi.ns), 0)::BIGINT AS sync_idle_ns, "
        idle_join = "LEFT JOIN idle USING (rank) LEFT JOIN wi USING (rank) "
    else:
        idle_ctes = f""",
idle AS (SELECT rank, list(a ORDER BY a) AS after_a, list(b ORDER BY a) AS after_b FROM u GROUP BY rank),
wl AS (SELECT rank, list(start_ns ORDER BY start_ns) AS waits_a, list(end_ns ORDER BY start_ns) AS waits_b FROM wu GROUP BY rank),
nd AS (SELECT rank, count(*) AS n FROM events WHERE {_ranks(rank)} AND dur_ns > 0 AND device IS NULL AND {device_work()} GROUP BY rank)"""
        idle_cols = ("coalesce(any_value(idle.after_a), []) AS after_a, coalesce(any_value(idle.after_b), []) AS after_b, "
                     "coalesce(any_value(wl.waits_a), []) AS waits_a, coalesce(any_value(wl.waits_b), []) AS waits_b, "
                     "coalesce(any_value(nd.n), 0) AS no_device, ")
        idle_join = "LEFT JOIN idle USING (rank) LEFT JOIN wl USING (rank) LEFT JOIN nd USING (rank) "
    # the waiting calls read once: the syncs and the union of their intervals both start from them
    return f"""WITH wc AS MATERIALIZED ({waiting_calls_sql(rank)}),
s AS ({syncs_sql(rank, "wc")}),
d AS (SELECT rank, ts_ns FROM events WHERE {_ranks(rank)} AND kind IN {DEVICE_WORK_SQL}),
nx AS (SELECT s.rank, s.end_ns, s.wait_ns, least(coalesce(d.ts_ns, s.s_end), s.s_end) AS b
       FROM s ASOF LEFT JOIN d ON s.rank = d.rank AND s.end_ns <= d.ts_ns WHERE s.s_end IS NOT NULL),
iv AS (SELECT rank, greatest(min(end_ns), b - sum(wait_ns)) AS a, b FROM nx GROUP BY rank, b),
mx AS (SELECT rank, a, b, max(b) OVER (PARTITION BY rank ORDER BY a, b ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pe
       FROM iv WHERE b > a),
isl AS (SELECT rank, a, b, sum(CASE WHEN pe IS NULL OR a > pe THEN 1 ELSE 0 END)
          OVER (PARTITION BY rank ORDER BY a, b ROWS UNBOUNDED PRECEDING) AS i FROM mx),
u AS (SELECT rank, min(a) AS a, max(b) AS b FROM isl GROUP BY rank, i),
summed AS (SELECT rank, sum(b - end_ns) AS ns FROM nx WHERE b > end_ns GROUP BY rank),
wr AS (SELECT rank, ts_ns, ts_ns + dur_ns AS end_ns FROM wc WHERE dur_ns > 0),
wu AS (
  WITH _mx AS (SELECT rank, ts_ns, end_ns, max(end_ns) OVER (PARTITION BY rank ORDER BY ts_ns, end_ns
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end FROM wr),
  _isl AS (SELECT rank, ts_ns, end_ns, sum(CASE WHEN prev_end IS NULL OR ts_ns > prev_end THEN 1 ELSE 0 END)
             OVER (PARTITION BY rank ORDER BY ts_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island FROM _mx)
  SELECT rank, min(ts_ns) AS start_ns, max(end_ns) AS end_ns FROM _isl GROUP BY rank, island),
all_u AS (SELECT rank, sum(end_ns - start_ns) AS ns FROM wu GROUP BY rank){idle_ctes}
SELECT s.rank, count(*) FILTER (WHERE s.s_end IS NOT NULL) AS stalls,
  coalesce(sum(s.wait_ns) FILTER (WHERE s.s_end IS NOT NULL), 0)::BIGINT AS wait_ns,
  {idle_cols}coalesce(any_value(summed.ns), 0)::BIGINT AS idle_summed_ns,
  count(*) AS syncs, coalesce(any_value(all_u.ns), 0)::BIGINT AS sync_ns,
  count(*) FILTER (WHERE s.s_end IS NULL) AS outside_steps,
  coalesce(sum(s.wait_ns) FILTER (WHERE s.s_end IS NULL), 0)::BIGINT AS outside_wait_ns
FROM s {idle_join}LEFT JOIN summed USING (rank) LEFT JOIN all_u USING (rank)
GROUP BY s.rank ORDER BY s.rank"""


def _figures(run, rank: int | None) -> dict[int, dict]:
    """`figures_sql`'s rows by rank. The merged idle's busy part (the busy time inside the idle
    after the syncs) is taken from the devices' busy unions the summary merged and prepared on
    `run` (metrics.DEVICE_BUSY) where every rank asked has them and all its device events have a
    device: the same figure, without a union of every device event in SQL (most of the query's
    time); else `figures_sql` computes it."""
    busy = (getattr(run, "prepared", None) or {}).get(metrics.DEVICE_BUSY.name) or {}
    cur = run.sql(figures_sql(rank, busy_in_sql=False))
    names = [c[0] for c in cur.description]
    got = {int(r[0]): dict(zip(names, r)) for r in cur.fetchall()}
    if any(v["no_device"] or r not in busy for r, v in got.items()):
        cur = run.sql(figures_sql(rank))
        names = [c[0] for c in cur.description]
        return {int(r[0]): dict(zip(names, r)) for r in cur.fetchall()}
    for r, v in got.items():
        after = np.stack([np.asarray(v.pop("after_a"), dtype=np.int64), np.asarray(v.pop("after_b"), dtype=np.int64)], axis=1)
        b = busy[r]
        every = metrics.union_array(b["start_ns"], b["end_ns"])  # all devices of the rank (busy_sql's union by rank)
        v["idle_after_ns"] = int((after[:, 1] - after[:, 0]).sum()) - metrics.covered_within(after, every)
        waits = np.stack([np.asarray(v.pop("waits_a"), dtype=np.int64), np.asarray(v.pop("waits_b"), dtype=np.int64)], axis=1)
        v["sync_idle_ns"] = v["sync_ns"] - (metrics.covered_within(waits, every) if len(every) else 0)
        del v["no_device"]
    return got


def _figure(v: dict, with_steps: bool) -> int:
    """The impact, the screen's and the check's: the device idle the syncs inside steps cause, or
    without steps the part of the syncs' waits with every device of the rank idle."""
    return v["idle_after_ns"] if with_steps else v["sync_idle_ns"]


_SCREENED = "host_sync_figures"
"""Where the screen leaves every rank's figures on the batch's run (`run.prepared`, None for a rank
without syncs): the check of a rank it selects reads them instead of querying its rank again."""


def screen(run, summaries: dict) -> set[int]:
    """Ranks without a device (not applicable) and ranks whose figure (the check's, every rank in
    one query) is at least the check's share."""
    got = _figures(run, None)
    if getattr(run, "prepared", None) is not None:
        run.prepared[_SCREENED] = {r: got.get(r) for r in summaries}
    ns = {r: _figure(v, bool(summaries[r]["steps"]["count"])) for r, v in got.items() if r in summaries}
    return no_device(summaries) | share_at_least(summaries, ns, THRESHOLDS["SYNC_SHARE_MIN"])


def check(ctx: Context) -> list:
    ctx.require_device()
    steps = ctx.summary["steps"]["count"]
    sql = figures_sql(ctx.rank)
    screened = (getattr(ctx.run, "prepared", None) or {}).get(_SCREENED) or {}
    v = screened[ctx.rank] if ctx.rank in screened else _figures(ctx.run, ctx.rank).get(int(ctx.rank))
    if v is None:
        return []
    # with steps a sync costs the device idle it causes inside the steps, not its own duration: the
    # host waits while the device works, then the device waits for the next launch, longer by what
    # the host waited (no longer: the rest of the gap is host work the sync did not cause)
    # without steps, the time the host waited while no device of the rank ran anything: a wait while the device
    # works costs the window nothing (a benchmark's synchronize at its end waited 11.87 ms of a 13.28 ms device-bound
    # span, and was its first finding, 'Remove host syncs')
    impact = _figure(v, bool(steps))
    count = v["stalls"] if steps else v["syncs"]
    if not ctx.analysed_ns or not count or impact / ctx.analysed_ns < THRESHOLDS["SYNC_SHARE_MIN"]:
        return []
    # (with steps the waits inside them, read only for a finding's advice)
    waited, unseen = _waits_in_steps(ctx) if steps else (v["sync_ns"], v["sync_idle_ns"])
    by_line = rows(ctx.run, f"""WITH s AS ({syncs_sql(ctx.rank)})
        SELECT source_frame_id AS frame_id, arg_max(name, wait_ns) AS name, count(*) AS calls, sum(wait_ns)::BIGINT AS ns,
        min(event_id) AS sample_id FROM s {"WHERE s_end IS NOT NULL" if steps else ""}
        GROUP BY source_frame_id ORDER BY ns DESC, frame_id NULLS LAST LIMIT 3""")
    top = by_line[0] if by_line else {"frame_id": None, "name": None, "sample_id": None}
    where_txt = "; ".join(f"{ctx.source_of(b['frame_id']) or 'unknown line'}: {b['name']} x{b['calls']} {ms(b['ns'])}" for b in by_line)
    syncs = f"{count} host-device synchronisation{'' if count == 1 else 's'}"
    title = (f"{syncs} {'costs' if count == 1 else 'cost'} the device {ms(impact)} of idle ({'it waits' if count == 1 else 'they wait'} "
             f"{ms(v['wait_ns'])})" if steps else
             f"{syncs} {'waits' if count == 1 else 'wait'} {ms(v['sync_ns'])}" + (f", the device idle for {ms(impact)} of it"
                                                                                  if impact < v["sync_ns"] else ""))
    outside = (f" {v['outside_steps']} more outside every step ({ms(v['outside_wait_ns'])}) are not counted."
               if steps and v.get("outside_steps") else "")
    values = {k: v[k] for k in ("stalls", "wait_ns", "idle_after_ns", "idle_summed_ns", "syncs", "sync_ns", "sync_idle_ns",
                                "outside_steps", "outside_wait_ns")}
    values |= {"waits_ns": waited, "waits_device_idle_ns": unseen}
    return [ctx.finding(
        title=title, impact_ns=impact, saving_bound_ns=impact,
        location=Location(op=top["name"], source=ctx.source_of(top["frame_id"])),
        sql=sql, values=values, sample_event_ids=[b["sample_id"] for b in by_line], uses_source=True,
        recommendation=(unseen_words(waited, unseen, where_txt, profiler_tip(ctx))
                        or f"Remove host syncs from the step ({where_txt}). Keep values on the device "
                        "(no .item(), float(t), print(t) or data-dependent `if` inside the loop); log metrics every N steps; "
                        "avoid torch.nonzero / boolean-mask indexing (use torch.where); drop explicit torch.cuda.synchronize().") + outside,
    )]


def _waits_in_steps(ctx: Context) -> tuple[int, int]:
    """(the union of the rank's waiting runtime calls inside its steps; the part of it in which no
    device of the rank ran anything the trace holds): without steps, `figures_sql`'s sync_ns and
    sync_idle_ns."""
    waits = waits_union(ctx.run, ctx.rank)
    total = int((waits[:, 1] - waits[:, 0]).sum()) if len(waits) else 0
    return total, unseen_ns(ctx.run, ctx.rank, waits)


def waits_union(run, rank: int) -> np.ndarray:
    """The union of the rank's waiting runtime calls (`waits`) inside its steps, (n, 2) (without steps
    `figures_sql` unions them: its sync_ns)."""
    got = run.sql(f"SELECT ts_ns, ts_ns + dur_ns AS end_ns FROM ({waiting_calls_sql(rank)}) WHERE dur_ns > 0").fetchnumpy()
    waits = metrics.union_array(np.asarray(got["ts_ns"], dtype=np.int64), np.asarray(got["end_ns"], dtype=np.int64))
    if len(waits):
        st = np.asarray(rank_rows(run, metrics.STEPS, rank), dtype=np.int64).reshape(-1, 3)
        waits = metrics.intersect_unions(waits, metrics.union_array(st[:, 1], st[:, 1] + st[:, 2]))
    return waits


def unseen_ns(run, rank: int, intervals: np.ndarray) -> int:
    """The time in `intervals` (a union) in which no device of the rank ran anything the trace holds
    (metrics.DEVICE_BUSY's union over its devices)."""
    if not len(intervals):
        return 0
    busy = rank_arrays(run, metrics.DEVICE_BUSY, rank)
    every = metrics.union_array(np.asarray(busy["start_ns"], dtype=np.int64), np.asarray(busy["end_ns"], dtype=np.int64))
    return int((intervals[:, 1] - intervals[:, 0]).sum()) - (metrics.covered_within(intervals, every) if len(every) else 0)


def unseen_words(waited: int, unseen: int, where: str, profiler: str) -> str:
    """The advice where the host waited mostly while no device ran anything the trace holds
    (UNSEEN_WAIT_SHARE): the sync is not what costs, and the device's `profiler` (profiler_tip) shows
    what it ran; else "". (Also the critical path's, for its host waits.)"""
    if not waited or unseen < THRESHOLDS["UNSEEN_WAIT_SHARE"] * waited:
        return ""
    return (f"For {ms(unseen)} of the {ms(waited)} the host waited ({where}), no device of this rank ran anything the trace "
            "holds: the host waited on work the trace does not show (kernels another thread or process launched, the nodes of a "
            "CUDA/HIP graph, events the profiler dropped), so removing the sync only moves the wait. Find what the device ran "
            f"({profiler}, or the trace of the process that launched it) and make that cheaper or overlap it.")
