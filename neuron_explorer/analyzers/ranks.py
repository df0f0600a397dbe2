"""Who waits for whom across ranks: collective instances, rank clocks, arrivals, waits, lateness.

THE definitions behind the cross-rank rules (rank-skew, collective-wait, load-imbalance), the
`cross_rank` part of the report's summary, `info` and the MCP summary (docs/METRICS.md "Across
ranks" states them for users):

- A **collective** of a rank is each of its collective device kernels (name matching
  `vocab.COMM_KERNEL_PATTERN`) when it has any, else each of its top-level collective CPU
  operators (`vocab.COMM_OP_PATTERN`): on a device the collective runs, and waits, in its kernel;
  a CPU operator such as gloo's `c10d::allreduce_` is where the rank calls it.
- A **collective instance** is the k-th collective of one name within one profiler step (a
  device kernel's step is its launch's): the same (name, step, k) on each rank is one collective,
  matched by order, never by time. Its participants are the ranks that have it (at least two).
  Ranks in different process groups that call a same-named collective in the same order are
  taken as one group (traces do not say which group a kernel served). In runs with profiler
  steps, collectives outside every step are not matched (the ranks' windows differ there); in runs
  without steps, k counts from the start of each trace.
- **Rank clocks**: ranks' traces need not share a clock or a profiling window, so each rank's
  clock offset is estimated on moments all ranks share, never on raw start times. With collective
  kernels: the ends of the matched instances (a collective completes on every participant together,
  when the last one's data arrived); offset = the median over its instances of (its end minus the
  instance's median end). Without: the starts of the steps every rank with steps recorded
  (synchronous training starts each step together); offset = the median over those steps of
  (its start minus the step's median start). Medians are `quantile_disc` (the lower middle value).
  With neither, the offset is 0.
- A rank's **arrival** at an instance is its collective's start minus its clock offset. The
  **last rank** is the latest arrival (ties: the lower rank number counts as the earlier).
- **Wait** of rank r at an instance = the last arrival minus r's arrival (the last rank's is 0), for
  a collective kernel at most its duration: the time r spends in the collective waiting for the last
  participant (a kernel that ended before the last arrival, as a point-to-point SendRecv may, waited
  only while it ran: multirank_128's rank 0 arrived 164.18 ms before rank 1 at a 47.65 ms kernel; a
  CPU collective operator is not cut: gloo's returns at once and its work is waited for later). A
  rank's collective wait is the sum over its instances; its share is that over its analysed time (its
  profiler steps' total, or its span without steps: `analysed_ns` of the summary).
- **Lateness** of the last rank at an instance = its arrival minus the median arrival of the other
  participants, at most the longest wait of another participant (what it cost them). **Saving
  bound** of a straggler at an instance = its arrival minus the second-latest arrival, at most the
  same: were it on time, the collective would start when the next-latest rank arrived.
- **Balanced saving** of an instance = the last arrival minus the mean arrival: what the
  collective would start earlier if the work before it were spread evenly over the participants.

Everything is one set-based SQL query over the whole run (grouped by rank, never a query per rank),
so the cost grows with the collectives recorded, not with ranks squared. The SQL uses only the
`events` view, so evidence queries reproduce it on plain DuckDB views.

Must not: decide what is a problem (rules do), render anything or write files.
"""

from __future__ import annotations

import weakref

from ..store import Run
from ..vocab import COMM_KERNEL_PATTERN, COMM_OP_PATTERN, DEVICE_WORK_SQL, comm_kernel, comm_op, sql_literal, top_op


def events_sql() -> str:
    """The events the cross-rank figures start from (`ev` of `arrivals_sql`): every rank's step
    slices, collective kernels and top-level collective CPU operators."""
    return f"""SELECT rank, kind, name, step, event_id, ts_ns, dur_ns, kind = 'kernel' AS on_device FROM events
        WHERE kind = 'step' OR ({comm_kernel()})
           OR ({top_op()} AND {comm_op()})"""


def arrivals_sql(ev: str | None = None) -> str:
    """CTEs (no leading WITH) ending in `ranked` (one row per rank and matched instance: rank, name,
    skey (the step, -1 outside steps in runs without steps), k, event_id, ts_ns, end_ns,
    on_device, offset_ns, at_ns (aligned arrival), pos (1 = last arrival)) and `inst` (one row per
    instance: participants, last_rank, last_event_id, last_at, second_at, others_mid_at, above_mean_ns (the
    last arrival minus the mean arrival, exact: epoch ns do not fit a double's 53 bits)). `ev`: a
    table holding `events_sql`'s rows, read instead of scanning the events again."""
    return f"""ev AS MATERIALIZED ({events_sql() if ev is None else f'SELECT * FROM {ev}'}),
steps0 AS (SELECT rank, step, min(ts_ns) AS ts_ns, max(ts_ns + dur_ns) - min(ts_ns) AS dur_ns FROM ev WHERE kind = 'step' GROUP BY rank, step),
dev_ranks AS (SELECT DISTINCT rank FROM ev WHERE on_device),
coll AS (SELECT rank, name, step, event_id, ts_ns, ts_ns + dur_ns AS end_ns, on_device FROM ev
         WHERE on_device OR (kind = 'cpu_op' AND rank NOT IN (SELECT rank FROM dev_ranks))),
numbered AS (SELECT *, coalesce(step, -1) AS skey,
                    row_number() OVER (PARTITION BY rank, name, coalesce(step, -1) ORDER BY ts_ns, event_id) AS k
             FROM coll WHERE step IS NOT NULL OR NOT EXISTS (SELECT 1 FROM steps0)),
m AS (SELECT * FROM (SELECT *, count(*) OVER (PARTITION BY name, skey, k) AS participants FROM numbered) WHERE participants >= 2),
end_mid AS (SELECT name, skey, k, quantile_disc(end_ns, 0.5) AS mid_ns FROM m WHERE on_device GROUP BY name, skey, k),
end_off AS (SELECT m.rank, quantile_disc(m.end_ns - end_mid.mid_ns, 0.5) AS off FROM m JOIN end_mid USING (name, skey, k)
            WHERE m.on_device GROUP BY m.rank),
common AS (SELECT rank, step, ts_ns FROM steps0 WHERE step IN (SELECT step FROM steps0 GROUP BY step
           HAVING count(DISTINCT rank) = (SELECT count(DISTINCT rank) FROM steps0))),
step_mid AS (SELECT step, quantile_disc(ts_ns, 0.5) AS mid_ns FROM common GROUP BY step),
step_off AS (SELECT rank, quantile_disc(common.ts_ns - step_mid.mid_ns, 0.5) AS off FROM common JOIN step_mid USING (step) GROUP BY rank),
all_ranks AS (SELECT DISTINCT rank FROM events),
off AS (SELECT rank, coalesce(end_off.off, step_off.off, 0)::BIGINT AS offset_ns,
               CASE WHEN end_off.off IS NOT NULL THEN 'collective_ends' WHEN step_off.off IS NOT NULL THEN 'step_starts' ELSE 'none' END AS aligned_on
        FROM all_ranks LEFT JOIN end_off USING (rank) LEFT JOIN step_off USING (rank)),
ranked AS MATERIALIZED (SELECT m.*, off.offset_ns, m.ts_ns - off.offset_ns AS at_ns,
                  row_number() OVER (PARTITION BY name, skey, k ORDER BY m.ts_ns - off.offset_ns DESC, m.rank DESC) AS pos,
                  max(m.ts_ns - off.offset_ns) OVER (PARTITION BY name, skey, k) - (m.ts_ns - off.offset_ns) AS until_last_ns,
                  CASE WHEN m.on_device THEN least(until_last_ns, m.end_ns - m.ts_ns) ELSE until_last_ns END AS wait_ns
           FROM m JOIN off USING (rank)),
inst AS MATERIALIZED (SELECT name, skey, k, count(*) AS participants, max(at_ns) AS last_at,
                any_value(rank) FILTER (WHERE pos = 1) AS last_rank, any_value(event_id) FILTER (WHERE pos = 1) AS last_event_id,
                max(at_ns) FILTER (WHERE pos = 2) AS second_at, quantile_disc(at_ns, 0.5) FILTER (WHERE pos > 1) AS others_mid_at,
                max(wait_ns) FILTER (WHERE pos > 1) AS others_wait_max,
                (count(*)::HUGEINT * max(at_ns) - sum(at_ns)) / count(*) AS above_mean_ns
         FROM ranked GROUP BY name, skey, k)"""


def analysed_sql() -> str:
    """CTE `analysed` (no leading comma): per rank, its analysed time (the total of its profiler
    steps, or its span over events other than kind 'other' without steps): `analysed_ns` of the summary."""
    return """analysed AS (SELECT a.rank, coalesce(s.total_ns, a.span_ns)::BIGINT AS analysed_ns FROM
    (SELECT rank, max(ts_ns + dur_ns) - min(ts_ns) AS span_ns FROM events WHERE kind <> 'other' GROUP BY rank) a
    LEFT JOIN (SELECT rank, sum(dur_ns) AS total_ns FROM steps0 GROUP BY rank) s USING (rank))"""


def per_rank_sql(ev: str | None = None) -> str:
    """One row per rank: its clock offset and what it was aligned on, its collective wait (sum,
    share of its analysed time, instances), and as the last arrival: lateness, saving bound, how
    often, per step and the collective with the most lateness; and on every row the run's totals of
    `totals_sql` (run_instances, run_balanced_saving_ns, run_max_participants). `ev`: as for `arrivals_sql`."""
    return f"""WITH {arrivals_sql(ev)},
{analysed_sql()},
waits AS (SELECT rank, sum(wait_ns)::BIGINT AS wait_ns, count(*) AS instances FROM ranked GROUP BY rank),
late AS (SELECT last_rank AS rank, name, skey, last_event_id, least(last_at - others_mid_at, others_wait_max) AS late_ns,
                least(last_at - second_at, others_wait_max) AS saving_ns FROM inst),
late_rank AS (SELECT rank, sum(late_ns)::BIGINT AS late_ns, sum(saving_ns)::BIGINT AS late_saving_ns, count(*) AS times_last,
                     min(last_event_id) AS sample_event_id FROM late GROUP BY rank),
late_step AS (SELECT rank, list({{'step': skey, 'late_ns': late_ns}} ORDER BY skey) AS late_steps
              FROM (SELECT rank, skey, sum(late_ns)::BIGINT AS late_ns FROM late GROUP BY rank, skey) GROUP BY rank),
late_name AS (SELECT rank, arg_max(name, late_ns) AS late_collective
              FROM (SELECT rank, name, sum(late_ns) AS late_ns FROM late GROUP BY rank, name) GROUP BY rank)
SELECT off.rank, off.offset_ns, off.aligned_on, analysed.analysed_ns,
       coalesce(waits.wait_ns, 0) AS wait_ns, coalesce(waits.instances, 0) AS instances,
       CASE WHEN analysed.analysed_ns > 0 THEN coalesce(waits.wait_ns, 0) / analysed.analysed_ns END AS wait_share,
       coalesce(late_rank.late_ns, 0) AS late_ns, coalesce(late_rank.late_saving_ns, 0) AS late_saving_ns,
       coalesce(late_rank.times_last, 0) AS times_last, late_rank.sample_event_id, late_step.late_steps, late_name.late_collective,
       (SELECT count(*) FROM inst) AS run_instances, (SELECT round(coalesce(sum(above_mean_ns), 0))::BIGINT FROM inst) AS run_balanced_saving_ns,
       (SELECT coalesce(max(participants), 0) FROM inst) AS run_max_participants
FROM off LEFT JOIN analysed USING (rank) LEFT JOIN waits USING (rank) LEFT JOIN late_rank USING (rank)
     LEFT JOIN late_step USING (rank) LEFT JOIN late_name USING (rank)
ORDER BY off.rank"""


def totals_sql() -> str:
    """One row over every matched instance: instances, and the balanced saving (sum of last minus mean arrival)."""
    return f"""WITH {arrivals_sql()}
SELECT count(*) AS instances, round(coalesce(sum(above_mean_ns), 0))::BIGINT AS balanced_saving_ns,
       coalesce(max(participants), 0) AS max_participants FROM inst"""


_CACHE: dict[int, tuple[weakref.ref, dict]] = {}
_ARRIVALS: dict[int, tuple[weakref.ref, object]] = {}
_EVENTS: dict[int, tuple[weakref.ref, object]] = {}
_IMBALANCE: dict[int, tuple[weakref.ref, dict]] = {}


def _kept(cache: dict, run: Run) -> bool:
    """Whether `cache` holds a value for this open run (not for another that had its id)."""
    hit = cache.get(id(run))
    return hit is not None and hit[0]() is run


def _cached(cache: dict, run: Run, make):
    """`make()`'s value kept per open run (dropped when the run is)."""
    if _kept(cache, run):
        return cache[id(run)][1]
    out = make()
    for key in [k for k, (ref, _) in cache.items() if ref() is None]:
        del cache[key]
    cache[id(run)] = (weakref.ref(run), out)
    return out


def collective_events(run: Run):
    """`events_sql`'s rows as an Arrow table, read once per open run: the arrivals and the per-rank
    figures both start from them (their scan of every rank's events is most of either query), and
    it is dropped once both are kept (`_done_with_events`)."""
    from .rank_rows import arrow_of

    return _cached(_EVENTS, run, lambda: arrow_of(run, events_sql(), []))


def _done_with_events(run: Run) -> None:
    """Drop the run's collective events once the arrivals and the per-rank figures are both kept."""
    if _kept(_ARRIVALS, run) and _kept(_CACHE, run):
        _EVENTS.pop(id(run), None)


ARRIVALS_SELECT = """SELECT r.rank, r.name, r.skey, r.on_device, r.event_id, r.ts_ns, r.pos, r.at_ns, r.wait_ns, i.last_at, i.last_rank
FROM ranked r JOIN inst i USING (name, skey, k)"""
"""`arrivals`' rows, after `arrivals_sql`'s CTEs."""


def arrivals(run: Run):
    """Every participant's arrival at every matched collective instance, with the instance's last
    arrival, as an Arrow table (columns rank, name, skey, on_device, event_id, ts_ns, pos, at_ns,
    wait_ns (the module docstring's wait), last_at, last_rank: `arrivals_sql`'s `ranked` joined to
    `inst`), read once per open run for
    what starts from it: collective-wait's location, the critical path's waits for the last rank."""
    from .rank_rows import arrow_of

    got = _cached(_ARRIVALS, run, lambda: arrow_of(run, f"WITH {arrivals_sql('nx_collective_events')}\n{ARRIVALS_SELECT}",
                                                   [], {"nx_collective_events": collective_events(run)}))
    _done_with_events(run)
    return got


def wait_intervals(run: Run, rank: int) -> dict[int, list[tuple[int, int]]]:
    """Per device of `rank`: where its collective kernels waited for the last participant to
    arrive, on its own clock, merged (sorted, disjoint): at each instance where it arrived before
    the last (`arrivals`), its kernel's first `wait_ns`, the time collective-wait counts as its wait."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from .metrics import union_array
    from .rank_rows import arrow_of

    a = arrivals(run)
    a = a.filter(pc.and_(pc.and_(pc.equal(a["rank"], rank), a["on_device"]), pc.greater(a["wait_ns"], 0)))
    if not a.num_rows:
        return {}
    got = arrow_of(run, "SELECT e.device, e.ts_ns, e.ts_ns + i.wait AS end_ns FROM events e JOIN _waiting i ON e.event_id = i.id "
                        "WHERE e.rank = ? AND e.device IS NOT NULL", [rank],
                   {"_waiting": pa.table({"id": a["event_id"], "wait": a["wait_ns"]})})
    device, ts, end = (np.asarray(got[c].to_numpy(), dtype=np.int64) for c in ("device", "ts_ns", "end_ns"))
    return {int(d): [tuple(x) for x in union_array(ts[device == d], end[device == d]).tolist()] for d in np.unique(device)}


def collective_waits(run: Run) -> dict:
    """The cross-rank figures of a run, as plain data (computed once per open run):
    {"ranks": [per-rank rows of `per_rank_sql`], "instances", "balanced_saving_ns", "max_participants"}.
    Ranks with no matched collective have wait 0 and no share of waiting."""
    got = _cached(_CACHE, run, lambda: _collective_waits(run))
    _done_with_events(run)
    return got


def _collective_waits(run: Run) -> dict:
    from .rank_rows import arrow_of

    rows = []
    for row in arrow_of(run, per_rank_sql("nx_collective_events"), [], {"nx_collective_events": collective_events(run)}).to_pylist():
        row["wait_share"] = None if row["wait_share"] is None else round(float(row["wait_share"]), 6)
        row["late_steps"] = [{"step": int(s["step"]), "late_ns": int(s["late_ns"])} for s in row["late_steps"] or []]
        rows.append(row)
    first = rows[0] if rows else {}
    instances, balanced, max_participants = (first.get(k) or 0 for k in ("run_instances", "run_balanced_saving_ns", "run_max_participants"))
    for row in rows:
        for k in ("run_instances", "run_balanced_saving_ns", "run_max_participants"):
            del row[k]
    return {"ranks": rows, "instances": int(instances), "balanced_saving_ns": int(balanced), "max_participants": int(max_participants)}


def summary(run: Run) -> dict:
    """The report's `cross_rank` summary: per rank its clock offset and collective wait (ns and
    share of its analysed time), and the number of matched collective instances. Empty ranks list
    with one rank."""
    if len(run.ranks) < 2:  # the manifest's ranks: no query for a one-rank run
        return {"ranks": [], "instances": 0}
    got = collective_waits(run)
    keep = ("rank", "offset_ns", "aligned_on", "wait_ns", "wait_share", "instances", "late_ns", "times_last")
    return {"ranks": [{k: r[k] for k in keep} for r in got["ranks"]], "instances": got["instances"],
            "definitions": "docs/METRICS.md, Across ranks"}


# ---- load imbalance: the work each rank does per step -----------------------------------------

def work_per_step_sql() -> str:
    """One row per rank and step that every rank with steps recorded: the rank's work in the step,
    work_ns. Work is device compute on ranks with device events (the union of kernel, memcpy and
    memset intervals other than collective kernels, by their launch's step), else host compute on
    CPU-only ranks (the union of top-level CPU operators that are not collectives). Collectives are
    left out: a rank that waits longer in them is not busier."""
    kpat, opat = sql_literal(COMM_KERNEL_PATTERN), sql_literal(COMM_OP_PATTERN)
    dev = DEVICE_WORK_SQL
    # One scan of the events: the steps, the device and operator names and the candidate intervals
    # all come from it (four scans of every rank's file before: 0.73 -> 0.44 s over 256 ranks). The
    # collective patterns are matched once per distinct name, not once per event. The union of a
    # rank's intervals in a step is the sum, in start order, of the part of each that ends beyond
    # every earlier one: one window, no islands.
    return f"""WITH ev AS MATERIALIZED (SELECT rank, kind, step, name, ts_ns, ts_ns + dur_ns AS end_ns, dur_ns > 0 AS timed,
           kind IN {dev} AND device IS NOT NULL AS on_dev, {top_op()} AS top_level FROM events
         WHERE kind = 'step' OR kind IN {dev} OR kind = 'cpu_op'),
steps0 AS (SELECT rank, step FROM ev WHERE kind = 'step' GROUP BY rank, step),
common AS (SELECT step FROM steps0 GROUP BY step HAVING count(DISTINCT rank) = (SELECT count(DISTINCT rank) FROM steps0)),
dev_ranks AS (SELECT DISTINCT rank FROM ev WHERE on_dev),
names AS (SELECT name, regexp_matches(name, {kpat}) AS comm_kernel, regexp_matches(name, {opat}) AS comm_op
          FROM (SELECT DISTINCT name FROM ev WHERE kind <> 'step')),
cand AS (SELECT rank, step, name, ts_ns, end_ns, on_dev FROM ev WHERE timed AND step IN (SELECT step FROM common) AND (on_dev OR top_level)),
iv AS (SELECT c.rank, c.step, c.ts_ns, c.end_ns FROM cand c JOIN names n ON c.name = n.name
       WHERE CASE WHEN c.on_dev THEN NOT n.comm_kernel ELSE NOT n.comm_op AND c.rank NOT IN (SELECT rank FROM dev_ranks) END),
mx AS (SELECT *, max(end_ns) OVER (PARTITION BY rank, step ORDER BY ts_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
       FROM iv),
u AS (SELECT rank, step, sum(greatest(end_ns - greatest(ts_ns, coalesce(prev_end, ts_ns)), 0)) AS busy_ns FROM mx GROUP BY rank, step),
work AS (SELECT s.rank, s.step, coalesce(u.busy_ns, 0)::BIGINT AS work_ns,
                s.rank IN (SELECT rank FROM dev_ranks) AS on_device
         FROM steps0 s LEFT JOIN u USING (rank, step) WHERE s.step IN (SELECT step FROM common))"""


def imbalance_sql() -> str:
    """Per common step: the heaviest rank's work (max_ns, heaviest_rank: the lowest rank on a tie), the median rank's
    (median_ns, lower middle) and the mean (mean_ns)."""
    return f"""{work_per_step_sql()},
per_step AS (SELECT step, max(work_ns) AS max_ns, arg_max(rank, [work_ns, -rank]) AS heaviest_rank, quantile_disc(work_ns, 0.5) AS median_ns,
                    avg(work_ns) AS mean_ns, count(*) AS ranks, bool_and(on_device) AS on_device FROM work GROUP BY step)
SELECT step, max_ns, heaviest_rank, median_ns, mean_ns, ranks, on_device FROM per_step ORDER BY step"""


def imbalance(run: Run) -> dict:
    """Load imbalance from one query (`work_per_step_sql`): {"steps": per common step {step, max_ns,
    heaviest_rank (the lowest rank on a tie), median_ns (lower middle), mean_ns, ranks, on_device},
    "ranks": per rank {rank, work_ns, steps}, heaviest first (the lower rank on a tie)}: the per-step
    numbers of `imbalance_sql` (its evidence query) from one pass over `work`. Computed once per open
    run (callers must not change it)."""
    return _cached(_IMBALANCE, run, lambda: _imbalance(run))


def _imbalance(run: Run) -> dict:
    by_step: dict[int, list[tuple[int, int, bool]]] = {}
    for rank, step, work_ns, on_device in run.sql(work_per_step_sql() + "\nSELECT rank, step, work_ns, on_device FROM work").fetchall():
        by_step.setdefault(int(step), []).append((int(work_ns), int(rank), bool(on_device)))
    steps, totals = [], {}
    for step in sorted(by_step):
        got = by_step[step]
        works = sorted(w for w, _, _ in got)
        top = max(w for w, _, _ in got)
        steps.append({"step": step, "max_ns": top, "heaviest_rank": min(r for w, r, _ in got if w == top),
                      "median_ns": works[(len(works) - 1) // 2], "mean_ns": sum(works) / len(works), "ranks": len(works),
                      "on_device": all(d for _, _, d in got)})
        for w, r, _ in got:
            t = totals.setdefault(r, {"rank": r, "work_ns": 0, "steps": 0})
            t["work_ns"] += w
            t["steps"] += 1
    return {"steps": steps, "ranks": sorted(totals.values(), key=lambda t: (-t["work_ns"], t["rank"]))}
