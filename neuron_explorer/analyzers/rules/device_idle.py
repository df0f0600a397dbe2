"""device-idle: the device waits for the host.

Finds devices that sit idle for a large share of the analysed window (the rank's profiler steps,
or its span without steps: the time every share is of): the summary's device time, whose idle is
the window's time where no kernel, memcpy or memset ran on any stream of the device
(device_time.py, docs/METRICS.md "Device time"). For the largest gaps, the longest pieces of that
idle (so none outside the steps), it names what the host was doing meanwhile (the top-level
operators that overlap the gap), which tells whether the job is host-bound (Python, data loading,
launches) or waits on something else. Impact: that idle, less the idle while the host was
in a call another rule names as the cause, so that one cause is one finding: a device allocator
call (allocator-churn's intervals: with steps, in the steady steps; a free waits for the device,
and with the caching allocator off most of the idle is in them), and without profiler steps a
host sync's waiting call (host_sync.waiting_calls_sql: host-sync's figure there is the union of
those waits; an inference server's blocking `aten::copy_` waiting 463 ms with the device idle was
both rules' finding), and the DataLoader's fetches (input-pipeline's union: a single-process
loader fetching while the device waits, 188 of the 274 ms of idle in the torch 1.8 ResNet-50
trace), and a kernel's first launch loading its code, which the critical path's launch finding
names as a one-off (the critical-path rule's one_off_launch: the MI250 trace's 6.54 ms hipLaunchKernel was
6.54 of its 9.19 ms of idle, and the advice to keep the device fed did not fit it), without steps the
kernels' first launches that launch-overhead names as most of its launch time (launch_overhead.first_launches:
TraceLens's normalisation test, 726.51 ms of them inside 1,187.80 ms of idle), and with steps the
idle after the last event the trace holds (a step's range running on where nothing was recorded, which
the critical path names: cuda_triton's one step idled 13,335 ms there, with no call to name). With steps
host-sync counts the idle the syncs cause after they return, and the idle during a wait stays
here. The evidence gives the whole idle (`idle_ns`) and the parts left out. Saving bound: the same.
Where HOST_PATH_SHARE of the idle left here or more lies where the steps' critical path runs on the
host (`idle_under_host_path_ns`) and the host's traced operators fill
under UNTRACED_HOST_SHARE of the named gaps (`host_calls_in_gaps_ns` of `gaps_ns`), critical-path's host class is the finding for it
(`leaves_to`): it names the Python and calls that kept the device waiting, or, where the trace records
no Python the host class can name (no user frames: `user_frames`), the time in no traced call that
most of it is and how to see it. So are its host and launch
classes, with the steps host-bound, for idle spread over many gaps (the named ones under SPREAD_SHARE
of it): the host's time between the device's work all through, not stalls this finding could name.
When the longest gap holds half the idle and one host operator runs through nearly all of it, the
advice first names it as a likely one-off (a library's first use) and to profile steady steps; when
the host's traced calls take under a tenth of it, as time in no traced call and how to see it;
and where the host's traced calls take under UNTRACED_GAPS_SHARE of all the named gaps (their
`host_calls_in_gaps_ns` of `gaps_ns`), it says so first, before what to feed the device
(multirank_128: 36.07 ms of calls in 147.65 ms of gaps, the rest inside `## backward ##` ranges with
nothing recorded beneath them).
A gap's heaviest host call that takes FIRST_CALL_RATIO times the median of the other calls of its
name with the same inputs (vocab.call_inputs: shapes and types, where recorded) is compared with
them in the advice ("the first of 36 calls with these inputs; the others took 0.07 ms at the
median") and in the evidence (`outlier_calls`); where such first calls fill half the named gaps and
FIRST_CALLS_IDLE_SHARE of the idle, the advice first says they are a cost of new inputs (a library
choosing or loading kernels), not of every iteration. Where none of these leads and the named gaps
hold under SPREAD_SHARE of the idle, it says first that the idle is spread over many gaps (their
number), not a few stalls to remove. Each named gap says how long the host waited on the device inside it (the union of
host_sync.waits, cut to the gap; `waited_in_gaps_ns` sums them): where that is WAITED_GAPS_SHARE of
the named gaps or more, neither side worked there, and the advice says what can hold a device the
trace does not show instead of telling the host to feed it (with steps only: without, the syncs'
waits are host-sync's and left out). Likewise where the critical path (its steps', else its window's)
charges WAITED_GAPS_SHARE of the named gaps or more to ready work waiting behind work the trace does
not show (critical_path.unseen_queue_ns, cause UNSEEN_QUEUE: a blocking copy to the device queued
behind a kernel that waits on an event of earlier work), in the critical-path idle class's own words
(_util.unseen_queue_words): no one-off, nothing to feed.
"""

from __future__ import annotations

import numpy as np

from ...vocab import DEVICE_WORK_SQL, allocator_call, call_inputs, kinds_sql, top_host_call
from .. import critical_path, device_time, metrics
from ..engine import Context
from ..model import Location
from ..rank_rows import RankQuery, prepared_rows
from ..rank_rows import arrays as rank_arrays
from ..rank_rows import rows as rank_rows
from . import allocator_churn, host_sync, input_pipeline, launch_overhead
from . import critical_path as critical_path_rule
from ._util import ENGINE, SEE_UNTRACED, STEADY_STEPS, graph_tip, ms, pct, profiler_tip, records_python, unseen_queue_words

RULE_ID = "device-idle"
TITLE = "Device idle between kernels (host-bound gaps)"
CATEGORY = "device_idle"
SCOPE = "rank"
THRESHOLDS = {
    "IDLE_SHARE_MIN": 0.10,  # idle time / the analysed window (the summary's device time)
    "GAPS_SHOWN": 3,  # largest gaps whose host activity is named
    "HOST_PATH_SHARE": 0.5,  # idle under the critical path's host class / the finding's idle: critical-path's cause
}


_BEFORE_ALL, _AFTER_ALL = np.iinfo(np.int64).min, np.iinfo(np.int64).max
"""The ends of the idle before a device's first busy interval and after its last (cut to the analysed window; SQL: null)."""


def _gaps_sql(rank_where: str) -> str:
    """Each device's largest gaps: its idle inside the analysed window (device_time.windows_sql, the
    union of the rank's profiler steps, or its span without steps), the pieces of that window no busy
    interval covers: rows (rank, device, i, gap_start, gap_end), i = 0 the longest (ties: the earlier end)."""
    union = metrics.union_sql(f"{rank_where} AND device IS NOT NULL AND kind IN {DEVICE_WORK_SQL}", ("rank", "device"))
    wins = metrics.union_of_sql(f"SELECT rank, lo AS ts_ns, hi AS end_ns FROM ({device_time.windows_sql('SELECT rank FROM u')}) WHERE hi > lo",
                                ("rank",))
    return f"""WITH u AS ({union}),
w AS ({wins}),
idle AS (SELECT rank, device, lag(end_ns) OVER (PARTITION BY rank, device ORDER BY start_ns) AS gap_start, start_ns AS gap_end FROM u
         UNION ALL SELECT rank, device, max(end_ns), NULL FROM u GROUP BY rank, device),
gp AS (SELECT idle.rank, idle.device, greatest(coalesce(idle.gap_start, w.start_ns), w.start_ns) AS gap_start,
         least(coalesce(idle.gap_end, w.end_ns), w.end_ns) AS gap_end
       FROM idle JOIN w ON idle.rank = w.rank AND coalesce(idle.gap_start, w.start_ns) < w.end_ns AND coalesce(idle.gap_end, w.end_ns) > w.start_ns)
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


def _cut(union: np.ndarray, wins: np.ndarray) -> np.ndarray:
    """The pieces of `union` (sorted disjoint (n, 2), as metrics.union_array gives) inside each window
    of `wins` ((m, 2) of (lo, hi)), window by window: the intersection of two unions where `wins` is one."""
    if not len(union) or not len(wins):
        return np.empty((0, 2), dtype=np.int64)
    first = np.searchsorted(union[:, 1], wins[:, 0], side="right")  # the first interval ending after the window's start
    n = np.maximum(np.searchsorted(union[:, 0], wins[:, 1], side="left") - first, 0)  # those starting before its end
    w = np.repeat(np.arange(len(wins)), n)
    idx = np.repeat(first, n) + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    out = np.stack([np.maximum(union[idx, 0], wins[w, 0]), np.minimum(union[idx, 1], wins[w, 1])], axis=1)
    return out[out[:, 1] > out[:, 0]]


def _complement(union: np.ndarray) -> np.ndarray:
    """Where `union` (sorted disjoint (n, 2)) has no interval: before its first, between, after its last."""
    return np.stack([np.concatenate([[_BEFORE_ALL], union[:, 1]]), np.concatenate([union[:, 0], [_AFTER_ALL]])], axis=1)


def _windows(run, ranks) -> dict[int, np.ndarray]:
    """Each rank's analysed window (device_time.windows_many: its profiler steps, its span without
    steps; the summary's device time is over them), (n, 2) of (lo, hi) in step order."""
    return {int(r): np.asarray([(lo, hi) for _, lo, hi in ws], dtype=np.int64).reshape(-1, 2)
            for r, ws in device_time.windows_many(run, [int(r) for r in ranks]).items()}


def _idle_pieces(busy: np.ndarray, wins: np.ndarray) -> np.ndarray:
    """A device's idle inside the analysed window: the pieces of the windows' union (`wins`, a rank's
    `_windows`) that its busy union (`busy`) does not cover, sorted (a gap across two steps one
    after another is one piece)."""
    return _cut(_complement(busy), metrics.union_array(wins[:, 0], wins[:, 1]))


def _longest(device: int, pieces: np.ndarray) -> list[tuple]:
    """GAPS' rows of a device from its idle pieces: the GAPS_SHOWN longest (ties: the earlier end), numbered from 0."""
    order = np.lexsort((pieces[:, 1], pieces[:, 0] - pieces[:, 1]))[: THRESHOLDS["GAPS_SHOWN"]]
    return [(device, i, int(a), int(b)) for i, (a, b) in enumerate(pieces[order].tolist())]


def _read_gaps(run, ranks) -> dict[int, list[tuple]]:
    """GAPS' rows of each rank from its devices' busy unions (metrics.DEVICE_BUSY, which the summary
    reads for every rank: prepared for a batch) and its analysed window, as `_gaps_sql` computes
    them: per device, its idle pieces inside the window (`_idle_pieces`), the GAPS_SHOWN longest
    (ties: the earlier end) numbered from 0. The union is not computed again."""
    wins = _windows(run, ranks)
    out = {}
    for r in ranks:
        busy = rank_arrays(run, metrics.DEVICE_BUSY, r)
        dev = np.asarray(busy["device"], dtype=np.int64)
        iv = np.stack([np.asarray(busy["start_ns"], dtype=np.int64), np.asarray(busy["end_ns"], dtype=np.int64)], axis=1)
        w = wins.get(int(r), np.empty((0, 2), dtype=np.int64))
        out[int(r)] = [g for d in dict.fromkeys(dev.tolist()) for g in _longest(d, _idle_pieces(iv[dev == d], w))]
    return out


def _read_host(run, ranks) -> dict[int, list[tuple]]:
    """HOST's rows of each rank: `_host_sql` over the gaps `_read_gaps` gives (GAPS' rows), in one
    query for all `ranks`, so that the busy union is not computed again for it."""
    gaps = [(int(r), *g) for r in ranks for g in rank_rows(run, GAPS, r)]
    out: dict[int, list[tuple]] = {int(r): [] for r in ranks}
    for row in _host_of(run, gaps):
        out[int(row[0])].append(tuple(row[1:]))
    return out


def _listed_gaps(gaps: list[tuple]) -> str:
    """A query giving the gaps listed as (rank, device, i, gap_start, gap_end), as `_gaps_sql`'s rows."""
    values = ", ".join(f"({int(r)}, {int(d)}, {int(i)}, {int(a)}, {int(b)})" for r, d, i, a, b in gaps)
    return ("SELECT col0::INTEGER AS rank, col1::BIGINT AS device, col2::INTEGER AS i, col3::BIGINT AS gap_start, "
            f"col4::BIGINT AS gap_end FROM (VALUES {values})")


def _host_of(run, gaps: list[tuple]) -> list[tuple]:
    """`_host_in`'s rows (rank first) over the gaps listed as (rank, device, i, gap_start, gap_end), in one query."""
    if not gaps:
        return []
    return run.sql(f"SELECT * FROM ({_host_in(_listed_gaps(gaps))}) ORDER BY rank, device, i, overlap_ns DESC, name").fetchall()


GAPS = RankQuery("device_idle_gaps", _one_rank(_gaps_sql("rank = ?")), f"SELECT * FROM ({_gaps_sql('TRUE')}) ORDER BY rank, device, i",
                 read=_read_gaps)
HOST = RankQuery("device_idle_host", f"SELECT * EXCLUDE (rank) FROM ({_host_sql('rank = ?')}) ORDER BY device, i, overlap_ns DESC, name",
                 f"SELECT * FROM ({_host_sql('TRUE')}) ORDER BY rank, device, i, overlap_ns DESC, name", read=_read_host)


def _repeats_sql(tops: str) -> str:
    """For each call of the query `tops` (rows rank, event_id), the other calls of the rank with its
    kind, name and inputs (vocab.call_inputs): rows (rank, event_id, dur_ns, has_inputs, others,
    median_ns of the others, how many came before it), ordered by rank and event id; a call with no
    other has no row."""
    return f"""WITH t AS (SELECT e.rank, e.event_id, e.kind, e.name, e.ts_ns, e.dur_ns, {call_inputs('e')} AS inputs
    FROM events e JOIN ({tops}) c ON e.rank = c.rank AND e.event_id = c.event_id),
o AS (SELECT e.rank, e.event_id, e.kind, e.name, e.ts_ns, e.dur_ns, {call_inputs('e')} AS inputs FROM events e
    WHERE e.rank IN (SELECT rank FROM t) AND e.name IN (SELECT name FROM t))
SELECT t.rank, t.event_id, t.dur_ns, t.inputs <> '' AS has_inputs, count(*) AS others, median(o.dur_ns)::BIGINT AS median_ns,
  count(*) FILTER (WHERE o.ts_ns < t.ts_ns) AS before
FROM t JOIN o ON o.rank = t.rank AND o.kind = t.kind AND o.name = t.name AND o.inputs IS NOT DISTINCT FROM t.inputs AND o.event_id <> t.event_id
GROUP BY t.rank, t.event_id, t.dur_ns, t.inputs, t.ts_ns ORDER BY t.rank, t.event_id"""


def _tops_sql(rank_where: str) -> str:
    """Each gap's heaviest host call (HOST's first row per device and gap): rows (rank, event_id)."""
    return f"""SELECT DISTINCT rank, event_id FROM ({_host_sql(rank_where)})
QUALIFY row_number() OVER (PARTITION BY rank, device, i ORDER BY overlap_ns DESC, name) = 1"""


def _tops(host_rows: list[tuple]) -> list[tuple[int, str]]:
    """(event id, name) of each gap's heaviest host call in HOST's rows of a rank (ordered by device,
    gap, heaviest first), each call once."""
    seen: dict[tuple, tuple[int, str]] = {}
    for dev, i, name, event_id, _frame, _ns in host_rows:
        seen.setdefault((dev, i), (int(event_id), name))
    return sorted(set(seen.values()))


def _repeats_of(run, tops: list[tuple]) -> list[tuple]:
    """`_repeats_sql`'s rows over the calls listed as (rank, event_id, name), in one query that reads
    the args (for the calls' inputs) only of the events with those ranks and names: given as
    literals, the Parquet scan filters on them before it reads any args (a join on the calls read
    every event's args: 2.4 ms a rank on 256 small ranks, against 0.7)."""
    if not tops:
        return []
    values = ", ".join(f"({int(r)}, {int(e)})" for r, e, _ in tops)
    ranks = ", ".join(str(r) for r in sorted({int(r) for r, _, _ in tops}))
    return run.sql(f"""WITH c AS (SELECT rank, event_id, kind, name, ts_ns, dur_ns, {call_inputs()} AS inputs FROM events
    WHERE rank IN ({ranks}) AND name IN {kinds_sql(sorted({n for _, _, n in tops}))}),
t AS (SELECT c.* FROM c JOIN (SELECT col0::INTEGER AS rank, col1::BIGINT AS event_id FROM (VALUES {values})) x
    ON c.rank = x.rank AND c.event_id = x.event_id)
SELECT t.rank, t.event_id, t.dur_ns, t.inputs <> '' AS has_inputs, count(*) AS others, median(o.dur_ns)::BIGINT AS median_ns,
  count(*) FILTER (WHERE o.ts_ns < t.ts_ns) AS before
FROM t JOIN c o ON o.rank = t.rank AND o.kind = t.kind AND o.name = t.name AND o.inputs IS NOT DISTINCT FROM t.inputs AND o.event_id <> t.event_id
GROUP BY t.rank, t.event_id, t.dur_ns, t.inputs, t.ts_ns ORDER BY t.rank, t.event_id""").fetchall()


def _read_repeats(run, ranks) -> dict[int, list[tuple]]:
    """REPEATS' rows of each rank: over the gaps' heaviest calls of HOST's rows (prepared for the
    batch), in one query for all `ranks`."""
    out: dict[int, list[tuple]] = {int(r): [] for r in ranks}
    for row in _repeats_of(run, [(int(r), e, n) for r in ranks for e, n in _tops(rank_rows(run, HOST, r))]):
        out[int(row[0])].append(tuple(row[1:]))
    return out


def _waits_sql(gaps: str) -> str:
    """How long the host waited on a device inside each gap of the query `gaps` (rows rank, device, i,
    gap_start, gap_end): the union of the waiting runtime calls (host_sync.waits: synchronize calls,
    blocking copies to the host) cut to the gap. Rows (rank, device, i, waited_ns), ordered by them;
    a gap with no wait has no row."""
    cut = f"""SELECT g.rank, g.device, g.i, greatest(r.ts_ns, g.gap_start) AS ts_ns, least(r.ts_ns + r.dur_ns, g.gap_end) AS end_ns
    FROM ({gaps}) g JOIN events r ON r.rank = g.rank AND r.ts_ns < g.gap_end AND r.ts_ns + r.dur_ns > g.gap_start
    WHERE {host_sync.waits('r')}"""
    return f"""SELECT rank, device, i, sum(end_ns - start_ns)::BIGINT AS waited_ns
FROM ({metrics.union_of_sql(cut, by=("rank", "device", "i"))}) GROUP BY rank, device, i ORDER BY rank, device, i"""


def _waits_of(run, gaps: list[tuple]) -> list[tuple]:
    """`_waits_sql`'s rows over the gaps listed as (rank, device, i, gap_start, gap_end), in one query."""
    if not gaps:
        return []
    return run.sql(_waits_sql(_listed_gaps(gaps))).fetchall()


def _read_waits(run, ranks) -> dict[int, list[tuple]]:
    """WAITS' rows of each rank: over GAPS' rows (prepared for the batch), in one query for all `ranks`."""
    out: dict[int, list[tuple]] = {int(r): [] for r in ranks}
    for row in _waits_of(run, [(int(r), *g) for r in ranks for g in rank_rows(run, GAPS, r)]):
        out[int(row[0])].append(tuple(row[1:]))
    return out


WAITS = RankQuery("device_idle_waits", f"SELECT * EXCLUDE (rank) FROM ({_waits_sql(_gaps_sql('rank = ?'))})",
                  f"SELECT * FROM ({_waits_sql(_gaps_sql('TRUE'))})", read=_read_waits)
"""How long the host waited on the device inside each named gap, for all ranks of a batch at once."""


REPEATS = RankQuery("device_idle_repeats", f"SELECT * EXCLUDE (rank) FROM ({_repeats_sql(_tops_sql('rank = ?'))})",
                    f"SELECT * FROM ({_repeats_sql(_tops_sql('TRUE'))})", read=_read_repeats)
"""How each gap's heaviest host call compares with the other calls of its name and inputs (the
first call of new shapes), for all ranks of a batch at once."""


def screen(run, summaries: dict) -> set[int]:
    """Ranks without a device (not applicable) and those with a device idle beyond the check's
    share of the analysed window (the summary's device time: no query)."""
    return {r for r, s in summaries.items() if not s["devices"] or any(
        d["window_ns"] and d["idle_ns"] / d["window_ns"] >= THRESHOLDS["IDLE_SHARE_MIN"] for d in s["device_time"])}


def _device_busy(ctx: Context, device: int) -> np.ndarray:
    """The device's busy union, (n, 2) sorted (metrics.DEVICE_BUSY: the summary merged it)."""
    busy = rank_arrays(ctx.run, metrics.DEVICE_BUSY, ctx.rank)
    mine = np.asarray(busy["device"], dtype=np.int64) == device
    return np.stack([np.asarray(busy["start_ns"], dtype=np.int64)[mine], np.asarray(busy["end_ns"], dtype=np.int64)[mine]], axis=1)


def _idle_in(busy: np.ndarray, intervals: np.ndarray, wins: np.ndarray) -> int:
    """The device's idle inside the analysed window during `intervals` (a union, as
    metrics.union_array gives), window by window as the summary's device time counts its idle
    (`wins`: the rank's `_windows`): their length within each window less the busy time in them."""
    w = _cut(intervals, wins)
    return int((w[:, 1] - w[:, 0]).sum()) - metrics.covered_within(w, busy) if len(w) else 0


_ALLOC_CALLS = f"SELECT rank, 0 AS what, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns, coalesce(step, -1) AS step FROM events WHERE {allocator_call()}"
_SYNC_WAITS = f"SELECT rank, 1 AS what, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns, -1 AS step FROM ({host_sync.waiting_calls_sql(None)})"
_LOADER_FETCHES = f"SELECT rank, 3 AS what, ts_ns AS start_ns, end_ns, -1 AS step FROM ({input_pipeline.fetches_sql()})"
_CLAIMED_ORDER = "what, start_ns, end_ns, step"


def _claimed_sql(one: bool) -> str:
    """The rank's host calls whose device idle other rules name (module docstring), and its steps:
    rows (what, start_ns, end_ns, step), `what` 0 an allocator call, 1 a host sync's waiting call
    (only on a rank without steps), 2 a profiler step, 3 a DataLoader fetch (step -1: none)."""
    body = f"""{_ALLOC_CALLS}
UNION ALL {_LOADER_FETCHES}
UNION ALL SELECT * FROM ({_SYNC_WAITS}) WHERE rank NOT IN (SELECT rank FROM steps)
UNION ALL SELECT rank, 2, ts_ns, ts_ns + dur_ns, step FROM steps"""
    if one:
        return f"SELECT what, start_ns, end_ns, step FROM ({body}) WHERE rank = ? ORDER BY {_CLAIMED_ORDER}"
    return f"SELECT rank, what, start_ns, end_ns, step FROM ({body}) ORDER BY rank, {_CLAIMED_ORDER}"


def _read_claimed(run, ranks) -> dict[int, dict]:
    """CLAIMED's rows of each rank, as `many` gives them, with the host syncs' waits read only for
    the ranks without steps (a rank with steps has none): the waits' query is most of the cost, and
    ranks of a training job have steps. Each rank's steps come from metrics.STEPS, which the
    summary prepared for the batch."""
    steps = {int(r): prepared_rows(run, metrics.STEPS, r) for r in ranks}
    if any(v is None for v in steps.values()):
        steps = {int(r): [] for r in ranks}
        for r, st, ts, dur in run.sql("SELECT rank, step, ts_ns, dur_ns FROM steps ORDER BY rank, step").fetchall():
            if int(r) in steps:
                steps[int(r)].append((st, ts, dur))
    bare = [r for r, v in steps.items() if not v]
    sql = f"{_ALLOC_CALLS} UNION ALL {_LOADER_FETCHES}"
    if bare:
        sql += f" UNION ALL SELECT * FROM ({_SYNC_WAITS}) WHERE rank IN ({', '.join(map(str, bare))})"
    cols = {k: np.asarray(v, dtype=np.int64) for k, v in run.sql(sql).fetchnumpy().items()}
    out = {}
    for r in steps:
        mine = cols["rank"] == r
        st = np.asarray(steps[r], dtype=np.int64).reshape(-1, 3)
        what = np.concatenate([cols["what"][mine], np.full(len(st), 2, dtype=np.int64)])
        start = np.concatenate([cols["start_ns"][mine], st[:, 1]])
        end = np.concatenate([cols["end_ns"][mine], st[:, 1] + st[:, 2]])
        step = np.concatenate([cols["step"][mine], st[:, 0]])
        order = np.lexsort((step, end, start, what))
        out[r] = {"what": what[order], "start_ns": start[order], "end_ns": end[order], "step": step[order]}
    return out


CLAIMED = RankQuery("device_idle_claimed", _claimed_sql(True), _claimed_sql(False), arrays=True, read=_read_claimed)
"""Each rank's allocator calls, host syncs' waiting calls (ranks without steps), DataLoader fetches
and steps: one query for a batch."""

RANK_QUERIES = (GAPS, HOST, CLAIMED, REPEATS, WAITS, ENGINE)
"""The largest gaps of every device, what the host ran in them and the host calls other rules name,
for all ranks of a batch at once. The gaps and the host's work are read (`read`) from the devices'
busy unions the summary reads anyway; `one` and `many` are the same rows in SQL alone
(tests/test_rank_batching.py holds them equal)."""


_FIRST_LAUNCH_SQL = "SELECT ts_ns, ts_ns + dur_ns AS end_ns FROM events WHERE rank = {rank} AND event_id = {event_id}"
"""The one-off launch call's interval (critical_path_rule.one_off_launch names its event)."""


def _first_launch(ctx: Context) -> tuple[int | None, np.ndarray]:
    """(event id, its interval as a union) of the rank's one-off launch (critical-path's: a kernel's
    first launch loading its code), or (None, empty)."""
    try:
        got = critical_path_rule.one_off_launch(ctx)
    except Exception:  # noqa: BLE001 - no path (no steps, a walk that fails: critical-path reports why): no one-off to leave out
        got = None
    if got is None:
        return None, np.empty((0, 2), dtype=np.int64)
    rows = ctx.run.sql(_FIRST_LAUNCH_SQL.format(rank=int(ctx.rank), event_id=int(got[0]))).fetchall()
    iv = np.asarray([(a, b) for a, b in rows if b > a], dtype=np.int64).reshape(-1, 2)
    return int(got[0]), iv


_UNRECORDED_SQL = f"SELECT ({metrics.LAST_RECORDED.one.replace('?', '{rank}')}) AS ts_ns, {_AFTER_ALL} AS end_ns"
"""After the last event the trace holds (metrics.LAST_RECORDED's instant), as an interval."""


def _unrecorded(ctx: Context) -> np.ndarray:
    """With steps, the time after the last event the trace holds (metrics.LAST_RECORDED, which the
    summary prepares) as a union: a step's range running on where nothing was recorded, which the
    critical path charges as such (its `unrecorded_ns`); without steps the window ends there."""
    last = (rank_rows(ctx.run, metrics.LAST_RECORDED, ctx.rank) or [(None,)])[0][0]
    if not ctx.summary["steps"]["count"] or last is None:
        return np.empty((0, 2), dtype=np.int64)
    return np.asarray([(int(last), _AFTER_ALL)], dtype=np.int64)


def _host_path(ctx: Context) -> np.ndarray:
    """Where the steps' critical path runs on the host in CPU operators and Python (its host class,
    category host_compute), as a union; empty without steps or a path."""
    if not ctx.summary["steps"]["count"]:
        return np.empty((0, 2), dtype=np.int64)
    try:
        path = critical_path.path_of(ctx.run, ctx.rank)
    except Exception:  # noqa: BLE001 - no path (a walk that fails: critical-path reports why): nothing to leave to it
        return np.empty((0, 2), dtype=np.int64)
    keep = path.category == critical_path.CATEGORIES.index("host_compute")
    return metrics.union_array(path.ts[keep], path.ts[keep] + path.ns[keep])


def leaves_to(finding) -> list:
    """Idle most of which (HOST_PATH_SHARE or more) lies where the steps' critical path runs on the
    host, in gaps where the host ran almost no traced operator (under UNTRACED_HOST_SHARE of the named
    gaps: this finding could only say 'no traced call'), is what critical-path's host class names,
    with the Python and calls that kept the device waiting: that finding is the one for the cause
    (h100_timesformer: 'Device 0 idle 58.6% (224.10 ms)', advising to record stacks the trace has,
    beside 'host time in operators and Python: 225.02 ms on the critical path (… steps host-bound
    (59%)); heaviest: …image_transforms.py(390): normalize 104.92 ms').
    Where the gaps name operators, both stay: this finding says which gaps and what ran in them; but
    idle spread over many gaps (its longest under SPREAD_SHARE of it) on host-bound steps is the host's
    time seen from the device, all through: critical-path's host and launch classes name what the host
    did, with the steps' bound, and this finding's gaps are a few of thousands (HTA's MTIA training
    trace: 'Device 9 idle 42.2% (5,634.54 ms)', spread over 22,268 gaps, beside the path's launches,
    8,344.47 ms, and host time, 4,933.10 ms, of steps host-bound (100%))."""
    v = finding.evidence.values
    if not finding.impact_ns:
        return []
    owners = []
    if v.get("idle_under_host_path_ns", 0) >= THRESHOLDS["HOST_PATH_SHARE"] * finding.impact_ns \
            and v.get("host_calls_in_gaps_ns", 0) < UNTRACED_HOST_SHARE * v.get("gaps_ns", 0):  # the gaps do not name the host's calls
        # (where the trace records no Python, the host class names nothing more, unless most of it is in no traced
        # call: then its advice to see that time is this finding's)
        frames = v.get("user_frames", True)
        owners.append((critical_path_rule.RULE_ID, lambda g: g.evidence.values.get("class") == "host" and (
            frames or 2 * g.evidence.values.get("untraced_ns", 0) >= g.impact_ns)))
    if v.get("gaps_ns", 0) < SPREAD_SHARE * finding.impact_ns:
        owners.append((critical_path_rule.RULE_ID, lambda g: g.evidence.values.get("class") in ("host", "launch")
                       and g.evidence.values.get("bound") == "host"))
    return owners


def _claimed(ctx: Context) -> dict:
    """The intervals whose device idle other rules name (module docstring), each a union:
    `syncs` (without steps), `allocator_calls` (allocator_churn.claimed), `loader` (the DataLoader's
    fetches), `first_launch` (critical-path's one-off launch; its event id is `first_launch_id`),
    `first_launches` (without steps, the first launches launch-overhead names; `first_launches_sql`
    selects them), `unrecorded` (with steps, after the last recorded event: critical-path's) and `either`."""
    got = rank_arrays(ctx.run, CLAIMED, ctx.rank)
    what = np.asarray(got["what"], dtype=np.int64)
    start, end, step = (np.asarray(got[k], dtype=np.int64) for k in ("start_ns", "end_ns", "step"))
    part = {k: what == k for k in (0, 1, 2, 3)}
    stepped = bool(ctx.summary["steps"]["count"])
    out = {"allocator_calls": allocator_churn.claimed((start[part[0]], end[part[0]], step[part[0]]),
                                                      (step[part[2]], start[part[2]], end[part[2]]),
                                                      list(ctx.summary["steps"]["steady_steps"]) if stepped else None),
           "syncs": np.empty((0, 2), dtype=np.int64) if stepped else metrics.union_array(start[part[1]], end[part[1]]),
           "loader": metrics.union_array(start[part[3]], end[part[3]])}
    out["first_launch_id"], out["first_launch"] = _first_launch(ctx)
    out["first_launches"], out["first_launches_sql"] = launch_overhead.first_launches(ctx)
    out["unrecorded"] = _unrecorded(ctx)
    every = np.concatenate([out["syncs"], out["allocator_calls"], out["loader"], out["first_launch"], out["first_launches"],
                            out["unrecorded"]])
    out["either"] = metrics.union_array(every[:, 0], every[:, 1])
    return out


def _length(union: np.ndarray) -> int:
    return int((union[:, 1] - union[:, 0]).sum()) if len(union) else 0


def _gaps_outside(ctx: Context, device: int, idle: np.ndarray, claimed: np.ndarray) -> tuple[list, list]:
    """GAPS' and HOST's rows of one device (`idle`: its `_idle_pieces`), with the claimed intervals cut
    out of its gaps: the GAPS_SHOWN longest pieces of idle left (ties: the earlier end) and what the
    host ran in them (one query, for a rank whose longest gaps overlap what other rules name)."""
    gaps = _longest(device, _cut(idle, _complement(claimed)))
    return gaps, [tuple(r[1:]) for r in _host_of(ctx.run, [(ctx.rank, *g) for g in gaps])]


ONE_OFF_GAP_SHARE = 0.5
"""A gap holding at least this share of a device's idle, nearly all of it (ONE_OFF_HOST_SHARE) inside
one host operator, is named a one-off first."""
ONE_OFF_HOST_SHARE = 0.9
RECURRING_GAP_SHARE = 0.8
"""A one-off's operator running through another gap this long, relative to the longest, comes back:
no one-off (a cost of every step)."""
UNTRACED_HOST_SHARE = 0.1
"""Such a gap where the host's traced calls (the heaviest GAPS_SHOWN names) take less than this share
is named as time in no traced call first."""


UNTRACED_GAPS_SHARE = 0.5
"""Named gaps in which the host's traced calls take less than this share of their time (`host_calls_in_gaps_ns`
of `gaps_ns`) are said first to be mostly time in no traced call: the advice to feed the device names
nothing the host did there (multirank_128: 36.07 ms of calls in 147.65 ms of gaps, the rest inside
`## backward ##` and `forward` with nothing recorded beneath them)."""


def _untraced_gaps(ctx: Context, gaps_ns: int, calls_ns: int) -> str:
    """What the advice says first where the host's traced calls take under UNTRACED_GAPS_SHARE of the
    named gaps (`gaps_ns`, `calls_ns`: the finding's figures): time in no traced call, and how to see
    it (the Python the trace records, where it records Python; else stacks or a sampler); else ""."""
    if not gaps_ns or calls_ns >= UNTRACED_GAPS_SHARE * gaps_ns:
        return ""
    see = ("Read the Python the trace records in those gaps (the timeline's Python rows), or sample the process (py-spy)"
           if records_python(ctx) else SEE_UNTRACED)
    return (f"In the longest gaps ({ms(gaps_ns)}) the host's traced calls take {ms(min(calls_ns, gaps_ns))}: for the rest it ran "
            "no traced call (Python between operators, a sleep, or a wait the profiler does not record, such as a sync inside a "
            f"library). {see}, to see what it did, before moving work off the host. ")


def _one_off_gap(gaps: list[dict], by_gap: dict[int, list], idle: int) -> str:
    """What the advice says first when the longest gap holds ONE_OFF_GAP_SHARE of the idle: where one
    host operator runs through ONE_OFF_HOST_SHARE of it, launching nothing, a one-off (a library's
    first use) more likely than what every iteration costs, unless the same operator runs through
    another gap nearly as long (RECURRING_GAP_SHARE: a cost of every step). cuda_alexnet_train: the
    first aten::to, 29,930 ms of a 30,455 ms gap before the first kernel (CUDA initialised as the model
    moved to the device), 87% of its 34,886 ms of idle, then the first aten::conv2d's 3,146 ms (the
    cuDNN handle and kernels loaded); the advice to keep the device fed did not fit them. Where the host's
    traced calls take less than UNTRACED_HOST_SHARE of it, time in no traced call
    (cuda_event_sync_multistream: 0.04 ms of calls in a 42.57 ms gap). Else ""."""
    if not gaps or not idle:
        return ""
    gap = gaps[0]["gap_end"] - gaps[0]["gap_start"]
    ran = by_gap.get(0) or []
    if gap < ONE_OFF_GAP_SHARE * idle:
        return ""
    traced = sum(b["overlap_ns"] for b in ran)
    if traced < UNTRACED_HOST_SHARE * gap:  # the host in no traced call for most of it
        return (f"One gap of {ms(gap)} holds {pct(min(1.0, gap / idle))} of this idle, and the host's traced calls in it take "
                f"{ms(traced)}: for the rest the host ran no traced call (Python between operators, a sleep, or a wait the profiler "
                "does not record). " + SEE_UNTRACED + ", to see what it did. ")
    top = ran[0]
    if top["overlap_ns"] < ONE_OFF_HOST_SHARE * gap:
        return ""
    # the same operator through another gap nearly as long (RECURRING_GAP_SHARE): a cost that comes back, not a one-off
    if any(by_gap.get(i) and by_gap[i][0]["name"] == top["name"] and g["gap_end"] - g["gap_start"] >= RECURRING_GAP_SHARE * gap
           for i, g in enumerate(gaps) if i):
        return ""
    return (f"One gap of {ms(gap)} holds {pct(min(1.0, gap / idle))} of this idle, the host in {top['name']} for "
            f"{ms(top['overlap_ns'])} of it with no device work: a one-off more likely than the cost of every iteration, "
            "such as a library's first use (cuDNN, cuBLAS or MIOpen handles, autotuning, kernels loaded lazily). "
            + STEADY_STEPS + " to see the idle each iteration has. ")


FIRST_CALL_RATIO = 5.0
"""A gap's operator call at least this many times the median of the other calls of its name with the
same inputs (vocab.call_inputs) is named an outlier: the first of them, a library choosing or loading
kernels for inputs it has not seen; FIRST_CALL_OTHERS_MIN other calls at least, so that a median means
something. b200_vllm_eager: two of its three longest gaps were each one aten::linear of 1.7-2.5 ms,
the first with its shapes; the other 35 took 0.07-0.09 ms at the median."""
FIRST_CALL_OTHERS_MIN = 2


def _repeat_calls(rows: list[tuple]) -> dict[int, dict]:
    """The gaps' heaviest host calls (REPEATS' rows of a rank) that are outliers among the calls of
    their name with the same inputs (FIRST_CALL_RATIO): {event id: {others, median_ns, first,
    inputs}}, `others` the number of those other calls, `median_ns` their median time, `first`
    whether it came before all of them, `inputs` whether the profiler recorded its inputs."""
    return {int(i): {"others": int(n), "median_ns": int(med), "first": not before, "inputs": bool(has)}
            for i, dur, has, n, med, before in rows
            if n >= FIRST_CALL_OTHERS_MIN and med is not None and dur >= FIRST_CALL_RATIO * max(int(med), 1)}


def _repeat_words(call: dict) -> str:
    """How a gap's outlier call compares with the other calls of its name and inputs (_repeat_calls)."""
    with_inputs = " with these inputs" if call["inputs"] else ""
    if call["first"]:
        return f" (the first of {call['others'] + 1} calls{with_inputs}; the others took {ms(call['median_ns'])} at the median)"
    return f" (the other {call['others']} calls{with_inputs} took {ms(call['median_ns'])} at the median)"


FIRST_CALLS_IDLE_SHARE = 0.25
"""The first-call gaps lead the advice only where they hold at least this share of the idle: the
b200 vLLM eager decode's two (4.58 ms) are 6% of its 75.82 ms of idle, which is the host too slow
between its calls all through; its gaps list still says which calls were first."""


SPREAD_SHARE = 0.25
"""Where the named gaps hold less than this share of the idle, and nothing else leads the advice, it
says first that the idle is spread over many gaps: the time between the device's work all through,
not a few stalls to find (b200 vLLM eager decode: its 3 longest gaps are 7.22 ms of its 75.82 ms of
idle, over 856 gaps)."""


def _spread_words(gaps_ns: int, idle: int, count_pieces, shown: int) -> str:
    """What the advice says first where the `shown` longest gaps (`gaps_ns`) hold less than SPREAD_SHARE
    of the `idle`, over more gaps in all (`count_pieces()`, counted only then); else ""."""
    if not idle or gaps_ns >= SPREAD_SHARE * idle or (pieces := count_pieces()) <= shown:
        return ""
    return (f"The idle is spread over {pieces:,} gaps, the {shown} longest {ms(gaps_ns)} ({pct(gaps_ns / idle)} of it): not a few "
            "stalls to remove but the time between the device's work all through, which fewer and larger kernels, or a host that "
            "launches further ahead, shorten. ")


def _first_calls_words(gaps: list[dict], by_gap: dict[int, list], repeats: dict[int, dict], idle: int) -> str:
    """What the advice says first when the gaps whose heaviest host call is a first call (_repeat_calls)
    hold at least half of the named gaps' time and FIRST_CALLS_IDLE_SHARE of the `idle`; else ""."""
    lengths = [g["gap_end"] - g["gap_start"] for g in gaps]
    first = [i for i in range(len(gaps)) if by_gap.get(i) and repeats.get(by_gap[i][0]["event_id"], {}).get("first")]
    first_ns = sum(lengths[i] for i in first)
    if not first or 2 * first_ns < sum(lengths) or first_ns < FIRST_CALLS_IDLE_SHARE * idle:
        return ""
    n, shown = len(first), len(gaps)
    which = "The longest gap" if first == [0] else f"The {n} longest gaps" if n == shown else f"{n} of the {shown} longest gaps"
    names = sorted({by_gap[i][0]["name"] for i in first})
    inputs = all(repeats[by_gap[i][0]["event_id"]]["inputs"] for i in first)
    return (f"{which} ({ms(first_ns)}) {'are first calls' if n > 1 else 'is the first call'} of {', '.join(names)}"
            + (" with inputs not seen before, many times the later calls with the same inputs" if inputs else ", many times the later calls")
            + ": a library choosing or loading kernels for new inputs (cuBLAS or hipBLASLt heuristics, cuDNN or MIOpen autotuning, "
            "lazy loading) costs once per shape, not every iteration. "
            + STEADY_STEPS + " to see the idle each iteration has. ")


WAITED_GAPS_SHARE = 0.5
"""Where the host waited on the device (WAITS) for at least this share of the named gaps' time, the
advice says first that neither side worked there. a100_train_blocking_dtoh: its three longest gaps in
the steps (64 ms each) are blocking copies waiting with nothing on the device; 459 of its 693 ms of
idle in the steps are such waits."""


def _unseen_words(ctx: Context, gaps: list[dict]) -> str:
    """What the advice says first where the critical path charges WAITED_GAPS_SHARE or more of the named
    gaps to work that was launched and ready but waited behind work the trace does not show
    (critical_path.unseen_queue_ns): not a one-off on the host, nor a device to feed faster; else "".
    SGLang's prefill/decode trace (TraceLens): a 493.28 ms gap, 99.7% of the idle, while the host sat in
    a blocking copy (`aten::to`, hipMemcpyWithStream) queued behind a kernel waiting on an event of the
    batch launched before the trace began; it was told 'a one-off ... a library's first use'."""
    total = sum(g["gap_end"] - g["gap_start"] for g in gaps)
    if not total:
        return ""
    ns = critical_path.unseen_queue_ns(ctx.run, ctx.rank, sorted((g["gap_start"], g["gap_end"]) for g in gaps))
    if ns < WAITED_GAPS_SHARE * total:
        return ""
    return unseen_queue_words(ns, f"the longest gaps' {ms(total)}", profiler_tip(ctx)) + "; feeding the device faster does not shorten it. "


def _waits_words(gaps: list[dict], waited: dict[int, int], profiler: str) -> str:
    """What the advice says first where the host waited on the device through WAITED_GAPS_SHARE of the
    named gaps (`waited`: ns by gap index), with the device's `profiler` (profiler_tip); else ""."""
    total = sum(g["gap_end"] - g["gap_start"] for g in gaps)
    ns = sum(waited.values())
    if not total or ns < WAITED_GAPS_SHARE * total:
        return ""
    return (f"In the longest gaps the host was waiting on the device (synchronize calls, blocking copies) for {ms(ns)} of "
            f"{ms(total)}, while the trace shows nothing running on it: neither side worked there, so feeding the device "
            "faster does not shorten them. The device was held by something the trace does not show: work it does not hold "
            "(events the profiler dropped, the nodes of a CUDA/HIP graph), another process on the same device, or a wait on "
            f"another stream or device (an event, a collective); {profiler} shows which. ")


def evidence_sql(rank: int, device: int, steady: list[int] | None, first_launch: int | None = None, unrecorded: bool = False,
                 first_launches: str | None = None) -> str:
    """Evidence SQL, plain DuckDB: one row, over the analysed window (device_time.windows_sql, window
    by window), the device's busy_ns, window_ns and idle_ns (the summary's device time: idle_ns is
    its `idle_ns`, busy_ns the rest of the window), idle_left_out_ns (its idle while the host was in
    the calls other rules name: allocator calls, allocator_churn.intervals_sql; without steps the
    host syncs' waiting calls; the DataLoader's fetches; `first_launch`, the event id of
    critical-path's one-off launch; `first_launches`, SQL of launch-overhead's first launches; with
    `unrecorded`, after the last recorded event) and impact_ns (the rest)."""
    r = int(rank)
    parts = [allocator_churn.intervals_sql(r, steady), f"SELECT ts_ns, end_ns FROM ({input_pipeline.fetches_sql()}) WHERE rank = {r}"]
    if steady is None:
        parts.append(f"SELECT ts_ns, ts_ns + dur_ns AS end_ns FROM ({host_sync.waiting_calls_sql(r)})")
    if first_launch is not None:
        parts.append(_FIRST_LAUNCH_SQL.format(rank=r, event_id=int(first_launch)))
    if first_launches is not None:
        parts.append(first_launches)
    if unrecorded:
        parts.append(_UNRECORDED_SQL.format(rank=r))
    claimed = " UNION ALL ".join(f"SELECT * FROM ({p}) WHERE end_ns > ts_ns" for p in parts)
    return f"""WITH b AS ({metrics.union_sql(metrics.device_where(r, device))}),
w AS ({device_time.windows_sql(str(r))}),
t AS (SELECT (SELECT coalesce(sum(hi - lo), 0) FROM w) AS window_ns,
  (SELECT coalesce(sum(least(b.end_ns, w.hi) - greatest(b.start_ns, w.lo)), 0) FROM b JOIN w ON b.start_ns < w.hi AND b.end_ns > w.lo) AS busy_ns),
c AS ({metrics.union_of_sql(claimed)}),
cw AS (SELECT greatest(c.start_ns, w.lo) AS a, least(c.end_ns, w.hi) AS z FROM c JOIN w ON c.end_ns > w.lo AND c.start_ns < w.hi),
cb AS (SELECT coalesce(sum(least(cw.z, b.end_ns) - greatest(cw.a, b.start_ns)), 0) AS ns FROM cw JOIN b ON b.start_ns < cw.z AND b.end_ns > cw.a),
lo AS (SELECT (SELECT coalesce(sum(z - a), 0) FROM cw) - (SELECT ns FROM cb) AS ns)
SELECT t.busy_ns::BIGINT AS busy_ns, t.window_ns::BIGINT AS window_ns, (t.window_ns - t.busy_ns)::BIGINT AS idle_ns,
  lo.ns::BIGINT AS idle_left_out_ns, (t.window_ns - t.busy_ns - lo.ns)::BIGINT AS impact_ns FROM t, lo"""


def check(ctx: Context) -> list:
    ctx.require_device()
    out, found, claimed, wins, host_path = [], None, None, None, None
    steady = list(ctx.summary["steps"]["steady_steps"]) if ctx.summary["steps"]["count"] else None
    for dev in ctx.summary["device_time"]:
        d = dev["device"]
        # the summary's device time over the analysed window (device_time.py: the evidence's first three)
        v = {"busy_ns": dev["window_ns"] - dev["idle_ns"], "window_ns": dev["window_ns"], "idle_ns": dev["idle_ns"]}
        if not v["window_ns"] or v["idle_ns"] / v["window_ns"] < THRESHOLDS["IDLE_SHARE_MIN"]:
            continue
        claimed = claimed if claimed is not None else _claimed(ctx)
        wins = wins if wins is not None else _windows(ctx.run, [ctx.rank])[int(ctx.rank)]
        busy = _device_busy(ctx, d)
        left_out = {k: _idle_in(busy, claimed[k], wins)
                    for k in ("syncs", "allocator_calls", "loader", "first_launch", "first_launches", "unrecorded", "either")}
        v["idle_in_syncs_ns"], v["idle_in_allocator_calls_ns"] = left_out["syncs"], left_out["allocator_calls"]
        v["idle_in_loader_ns"], v["idle_in_first_launch_ns"] = left_out["loader"], left_out["first_launch"]
        v["idle_in_first_launches_ns"], v["idle_unrecorded_ns"] = left_out["first_launches"], left_out["unrecorded"]
        sql = evidence_sql(ctx.rank, d, steady, claimed["first_launch_id"] if left_out["first_launch"] else None, bool(left_out["unrecorded"]),
                           claimed["first_launches_sql"] if left_out["first_launches"] else None)
        idle = v["idle_ns"] - left_out["either"]
        if idle / v["window_ns"] < THRESHOLDS["IDLE_SHARE_MIN"]:
            continue
        host_path = host_path if host_path is not None else _host_path(ctx)
        if len(host_path):  # the idle left here under the path's host class (leaves_to)
            both = np.concatenate([host_path, claimed["either"]])
            v["idle_under_host_path_ns"] = _idle_in(busy, metrics.union_array(both[:, 0], both[:, 1]), wins) - left_out["either"]
        else:
            v["idle_under_host_path_ns"] = 0
        if found is None:  # every device's gaps and host activity, once
            found = (rank_rows(ctx.run, GAPS, ctx.rank), rank_rows(ctx.run, HOST, ctx.rank))
        shown, in_gaps = [g for g in found[0] if g[0] == d], [h for h in found[1] if h[0] == d]
        longest = np.asarray([(a, b) for _, _, a, b in shown], dtype=np.int64).reshape(-1, 2)
        outside = bool(len(claimed["either"])) and bool(metrics.covered_within(longest[np.argsort(longest[:, 0])], claimed["either"]))
        if outside:
            shown, in_gaps = _gaps_outside(ctx, d, _idle_pieces(busy, wins), claimed["either"])  # the gaps named are the idle left here
        gaps = [{"gap_start": gs, "gap_end": ge} for _, _, gs, ge in shown]
        host, samples, frame = [], [], None
        by_gap: dict[int, list] = {i: [] for i in range(len(gaps))}
        for dev_, i, name, event_id, frame_id, overlap_ns in in_gaps:
            if dev_ == d and i in by_gap:
                by_gap[i].append({"name": name, "event_id": event_id, "frame_id": frame_id, "overlap_ns": overlap_ns})
        repeats = _repeat_calls(_batch_or(ctx, REPEATS, outside, lambda h=in_gaps: _repeats_of(ctx.run, [(ctx.rank, e, n) for e, n in _tops(h)])))
        waited = {i: ns for dev_, i, ns in _batch_or(ctx, WAITS, outside, lambda s=shown: _waits_of(ctx.run, [(ctx.rank, *g) for g in s]))
                  if dev_ == d}
        compared: set[int] = set()  # a call through several gaps is compared once, in the first
        for i, g in enumerate(gaps):
            ran = by_gap[i]
            said = ran[0]["event_id"] if ran and ran[0]["event_id"] in repeats and ran[0]["event_id"] not in compared else None
            if said is not None:
                compared.add(said)
            what = ", ".join(f"{b['name']} {ms(b['overlap_ns'])}" + (_repeat_words(repeats[said]) if not j and said is not None else "")
                             for j, b in enumerate(ran)) or "no recorded host activity"
            host.append(f"gap of {ms(g['gap_end'] - g['gap_start'])}: host ran {what}"
                        + (f" (waiting on the device for {ms(waited[i])} of it)" if waited.get(i) else ""))
            samples += [b["event_id"] for b in ran[:1]]
            if frame is None and ran and ran[0]["frame_id"] is not None:
                frame = ran[0]["frame_id"]
        share = idle / v["window_ns"]
        named_gaps_ns = sum(g["gap_end"] - g["gap_start"] for g in gaps)
        calls_in_gaps_ns = sum(b["overlap_ns"] for ran in by_gap.values() for b in ran)
        # a part names its rule where that rule reports it: the claimed union is the rule's own figure (its
        # impact: allocator-churn's union of calls, host-sync's of waits without steps, input-pipeline's of
        # fetches; the critical path's unrecorded time, this idle), reported from its share of the analysed time
        figure = {c: _length(claimed[c]) for c in ("allocator_calls", "syncs", "loader", "first_launch", "first_launches")} \
            | {"unrecorded": v["idle_unrecorded_ns"]}
        parts = (("idle_in_allocator_calls_ns", "allocator_calls", "while the host was in device allocator calls", allocator_churn.RULE_ID,
                  allocator_churn.THRESHOLDS["ALLOC_SHARE_MIN"]),
                 ("idle_in_syncs_ns", "syncs", "while the host waited in syncs", host_sync.RULE_ID, host_sync.THRESHOLDS["SYNC_SHARE_MIN"]),
                 ("idle_in_loader_ns", "loader", "while the host waited for the DataLoader", input_pipeline.RULE_ID,
                  input_pipeline.THRESHOLDS["LOADER_SHARE_MIN"]),
                 # (critical-path names it where it is kept: `one_off_launch` is only a launch class it reports)
                 ("idle_in_first_launch_ns", "first_launch", "while the host was in a kernel's first launch, loading its code",
                  critical_path_rule.RULE_ID, 0.0),
                 # (claimed only where launch-overhead's finding names them: `first_launches`)
                 ("idle_in_first_launches_ns", "first_launches", "while the host was in kernels' first launches, loading their code",
                  launch_overhead.RULE_ID, 0.0),
                 ("idle_unrecorded_ns", "unrecorded", "after the last event the trace holds", critical_path_rule.RULE_ID,
                  critical_path_rule.THRESHOLDS["CLASS_SHARE_MIN"]))
        named = [f"{ms(v[k])} {what}" + (f" ({rule}'s)" if ctx.analysed_ns and figure[c] >= least * ctx.analysed_ns else "")
                 for k, c, what, rule, least in parts if ms(v[k]) != ms(0)]  # a part printing as 0.00 ms is not named (its figure is in the values)
        besides = f", besides {' and '.join(named)}" if named else ""
        out.append(ctx.finding(
            title=f"Device {d} idle {pct(share)} of the analysed window ({ms(idle)}{besides})",
            impact_ns=idle, saving_bound_ns=idle,
            location=Location(device=d, source=ctx.source_of(frame)),
            sql=sql, values={"busy_ns": v["busy_ns"], "window_ns": v["window_ns"], "idle_ns": v["idle_ns"],
                             "idle_in_syncs_ns": v["idle_in_syncs_ns"], "idle_in_allocator_calls_ns": v["idle_in_allocator_calls_ns"],
                             "idle_in_loader_ns": v["idle_in_loader_ns"], "idle_in_first_launch_ns": v["idle_in_first_launch_ns"],
                             "idle_in_first_launches_ns": v["idle_in_first_launches_ns"],
                             "idle_unrecorded_ns": v["idle_unrecorded_ns"],
                             "idle_left_out_ns": left_out["either"],
                             # (of the idle left here, where the steps' critical path ran on the host: leaves_to)
                             "idle_under_host_path_ns": v["idle_under_host_path_ns"],
                             "user_frames": ctx.has_user_frames(),  # (the trace records Python the host class can name)
                             "gaps_ns": named_gaps_ns, "host_calls_in_gaps_ns": calls_in_gaps_ns,  # (the named gaps, the host's calls in them)
                             # the gaps' calls many times the other calls of their name and inputs (_repeat_calls)
                             "outlier_calls": [{"event_id": int(e), **c} for e, c in repeats.items() if e in compared],
                             "waited_in_gaps_ns": sum(waited.values())},  # (the host waiting on the device in the named gaps)
            sample_event_ids=samples, uses_source=True,
            recommendation=_advice(ctx, gaps, by_gap, idle, waited, repeats, host, named_gaps_ns, calls_in_gaps_ns,
                                   lambda busy=busy, wins=wins: len(_idle_pieces(busy, wins))),
        ))
    return out


def _batch_or(ctx: Context, query: RankQuery, outside: bool, here) -> list[tuple]:
    """The rank's rows of `query` where the engine prepared them for its batch; else (one rank alone,
    or gaps named outside what other rules claim) `here()`'s rows, rank first, over the rows in hand."""
    got = None if outside else prepared_rows(ctx.run, query, ctx.rank)
    return got if got is not None else [r[1:] for r in here()]


def _advice(ctx: Context, gaps: list[dict], by_gap: dict[int, list], idle: int, waited: dict[int, int], repeats: dict[int, dict],
            host: list[str], gaps_ns: int, calls_ns: int, count_pieces) -> str:
    """The finding's advice: what the longest gaps are first where that is known (a one-off, the host
    waiting on the device, first calls with new inputs, mostly no traced call: `gaps_ns` and `calls_ns`,
    the finding's named gaps and the host's calls in them; else the idle spread over many gaps,
    `count_pieces()` of them),
    then the gaps with what the host ran, then
    how to feed the device (not where the gaps are waits on both sides: there is nothing to feed)."""
    if waits := _waits_words(gaps, waited, profiler_tip(ctx)):
        return waits + "Largest gaps — " + "; ".join(host) + "."
    if unseen := _unseen_words(ctx, gaps):
        return unseen + "Largest gaps — " + "; ".join(host) + "."
    return ((_one_off_gap(gaps, by_gap, idle) or _first_calls_words(gaps, by_gap, repeats, idle) or _untraced_gaps(ctx, gaps_ns, calls_ns)
             or _spread_words(gaps_ns, idle, count_pieces, len(gaps)))
            + "Keep the device fed: largest gaps — "
            + "; ".join(host) + ". "
            + ("Move host work out of the step (DataLoader workers, pin_memory), avoid" if ctx.trains() else
               "Prepare inputs ahead of the device (pinned memory, non_blocking copies), avoid")
            + " synchronising calls, batch small ops or use " + graph_tip(ctx) + " to cut launch gaps.")
