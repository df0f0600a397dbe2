"""The figures of a run, per rank and device, as query functions that return plain data: span,
steps (the steady-state selection), device busy and idle, communication and its overlap, the
collective CPU operators (the top-level operators, less the compiles inside them, are lines.py's).

Each figure is defined in docs/METRICS.md; the definitions there and the SQL here must agree.
The summary (analyzers/summary.py), the rules, the dashboard and the agent interface call these
same functions. The ideas they select by (device work, collectives, top-level operators) are
neuron_explorer/vocab.py's.

Must not: import the summary or any module above it (summary.py, the rules, the engine), print,
render or decide what is a problem (that is what rules do).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..store import Run
from ..vocab import DEVICE_WORK_KINDS, DEVICE_WORK_SQL, comm_kernel_name, kinds_sql, sql_literal, training_work
from .rank_rows import RankQuery, prepared_rows
from .rank_rows import arrays as rank_arrays
from .rank_rows import rows as rank_rows

if TYPE_CHECKING:
    import numpy as np


def union_sql(where: str, by: tuple[str, ...] = ()) -> str:
    """SQL giving the merged (union) intervals of the events matching `where`: rows (start_ns, end_ns).

    Plain DuckDB window functions, so that evidence queries reproduce interval unions without
    Neuron Explorer. An interval starts a new island when it begins after the furthest end seen so far.
    With `by` (columns, e.g. ('rank', 'device')), one union per value of those columns, in one
    query: rows (*by, start_ns, end_ns).
    """
    cols = "".join(f"{c}, " for c in by)
    return union_of_sql(f"SELECT {cols}ts_ns, ts_ns + dur_ns AS end_ns FROM events WHERE dur_ns > 0 AND ({where})", by)


def union_of_sql(intervals: str, by: tuple[str, ...] = ()) -> str:
    """`union_sql` over any query `intervals` giving rows (*by, ts_ns, end_ns) with end_ns > ts_ns
    (intervals cut to steps, launch calls picked by their kernels): rows (*by, start_ns, end_ns)."""
    cols = "".join(f"{c}, " for c in by)
    part = f"PARTITION BY {', '.join(by)} " if by else ""
    return f"""WITH _iv AS ({intervals}),
_mx AS (SELECT {cols}ts_ns, end_ns,
        max(end_ns) OVER ({part}ORDER BY ts_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end FROM _iv),
_isl AS (SELECT {cols}ts_ns, end_ns, sum(CASE WHEN prev_end IS NULL OR ts_ns > prev_end THEN 1 ELSE 0 END)
         OVER ({part}ORDER BY ts_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island FROM _mx)
SELECT {cols}min(ts_ns) AS start_ns, max(end_ns) AS end_ns FROM _isl GROUP BY {cols}island"""


def device_where(rank: int, device: int, kinds=DEVICE_WORK_KINDS, extra: str = "") -> str:
    w = f"rank = {int(rank)} AND device = {int(device)} AND kind IN {kinds_sql(kinds)}"
    return w + (f" AND ({extra})" if extra else "")


def busy_sql(rank: int, device: int) -> str:
    """One row: busy_ns, window_start_ns, window_end_ns, window_ns, idle_ns for a device."""
    return (f"WITH u AS ({union_sql(device_where(rank, device))})\n"
            "SELECT sum(end_ns - start_ns)::BIGINT AS busy_ns, min(start_ns) AS window_start_ns, max(end_ns) AS window_end_ns, "
            "(max(end_ns) - min(start_ns))::BIGINT AS window_ns, (max(end_ns) - min(start_ns) - sum(end_ns - start_ns))::BIGINT AS idle_ns FROM u")


def comm_overlap_sql(rank: int, device: int) -> str:
    """One row: comm_ns (union of collective kernels), comm_overlap_ns (its intersection with the union of all
    other kernel/memcpy/memset intervals of the device) and comm_exposed_ns (the difference)."""
    comm = union_sql(device_where(rank, device, ("kernel",), comm_kernel_name()))
    comp = union_sql(device_where(rank, device, DEVICE_WORK_KINDS, f"NOT {comm_kernel_name()}"))
    return f"""WITH c AS ({comm}), k AS ({comp}),
ov AS (SELECT coalesce(sum(least(c.end_ns, k.end_ns) - greatest(c.start_ns, k.start_ns)), 0) AS overlap_ns
       FROM c JOIN k ON c.start_ns < k.end_ns AND k.start_ns < c.end_ns)
SELECT (SELECT coalesce(sum(end_ns - start_ns), 0) FROM c)::BIGINT AS comm_ns, (SELECT overlap_ns FROM ov)::BIGINT AS comm_overlap_ns,
       ((SELECT coalesce(sum(end_ns - start_ns), 0) FROM c) - (SELECT overlap_ns FROM ov))::BIGINT AS comm_exposed_ns"""


class Coverage:
    """Sorted, disjoint intervals (a union) and the length they cover in any range, in O(log n).
    `intervals`: (start, end) pairs, or an (n, 2) integer array (as `interval_array` reads them)."""

    def __init__(self, intervals):
        import numpy as np  # imported when used: the CLI's start-up loads this module, not numpy

        arr = np.asarray(intervals, dtype=np.int64).reshape(-1, 2)
        self._starts, self._ends = np.ascontiguousarray(arr[:, 0]), np.ascontiguousarray(arr[:, 1])
        self._done = np.concatenate([[0], np.cumsum(self._ends - self._starts)])  # done[i]: covered length of the first i intervals

    @property
    def intervals(self) -> list[tuple[int, int]]:
        return list(zip(self._starts.tolist(), self._ends.tolist()))

    @property
    def starts(self) -> list[int]:
        return self._starts.tolist()

    def before(self, t: int) -> int:
        """Covered length before instant t."""
        i = int(self._starts.searchsorted(t, side="right"))
        return int(self._done[i]) - (max(int(self._ends[i - 1]) - t, 0) if i else 0)

    def within(self, lo: int, hi: int) -> int:
        return self.before(hi) - self.before(lo) if hi > lo else 0


def intervals(run: Run, where: str) -> list[tuple[int, int]]:
    return [tuple(r) for r in run.sql(union_sql(where) + " ORDER BY start_ns").fetchall()]


def interval_array(run: Run, where: str) -> np.ndarray:
    """`intervals` as an (n, 2) int64 array (start, end), read without a Python object per interval."""
    import numpy as np

    got = run.sql(union_sql(where) + " ORDER BY start_ns").fetchnumpy()
    return np.stack([np.asarray(got["start_ns"], dtype=np.int64), np.asarray(got["end_ns"], dtype=np.int64)], axis=1)


def ranks(run: Run) -> list[int]:
    return [r for (r,) in run.sql("SELECT DISTINCT rank FROM events ORDER BY rank").fetchall()]


DEVICES = RankQuery("devices", f"SELECT DISTINCT device FROM events WHERE rank = ? AND kind IN {DEVICE_WORK_SQL} AND device IS NOT NULL ORDER BY 1",
                    f"SELECT DISTINCT rank, device FROM events WHERE kind IN {DEVICE_WORK_SQL} AND device IS NOT NULL ORDER BY 1, 2")
STEPS = RankQuery("steps", "SELECT step, ts_ns, dur_ns FROM steps WHERE rank = ? ORDER BY step",
                  "SELECT rank, step, ts_ns, dur_ns FROM steps ORDER BY rank, step")
DEVICE_BUSY = RankQuery(
    "device_busy", union_sql(f"rank = ? AND device IS NOT NULL AND kind IN {DEVICE_WORK_SQL}", ("device",)) + " ORDER BY device, start_ns",
    union_sql(f"device IS NOT NULL AND kind IN {DEVICE_WORK_SQL}", ("rank", "device")) + " ORDER BY rank, device, start_ns", arrays=True)
"""Each device's busy union (`step_device_busy`), all devices of a rank in one query."""
PEAK_MEMORY = RankQuery(
    "peak_memory", "SELECT device_type, device, max(total_allocated)::BIGINT, max(total_reserved)::BIGINT, count(*) FROM memory "
                   "WHERE rank = ? AND device_type <> 0 GROUP BY ALL ORDER BY 1, 2",
    "SELECT rank, device_type, device, max(total_allocated)::BIGINT, max(total_reserved)::BIGINT, count(*) FROM memory "
    "WHERE device_type <> 0 GROUP BY ALL ORDER BY 1, 2, 3")
LAST_RECORDED = RankQuery("last_recorded", "SELECT max(ts_ns + dur_ns) FROM events WHERE rank = ? AND kind NOT IN ('step', 'other')",
                          "SELECT rank, max(ts_ns + dur_ns) FROM events WHERE kind NOT IN ('step', 'other') GROUP BY rank ORDER BY rank")
"""When the last event the rank's trace holds ends (its steps' and the profiler's own ranges left
out): the summary's batch query of the spans prepares it for every rank (summary.rank_summaries)."""
SPANS = RankQuery("spans", "SELECT min(ts_ns), max(ts_ns + dur_ns) FROM events WHERE rank = ? AND kind <> 'other' HAVING count(*) > 0",
                  "SELECT rank, min(ts_ns), max(ts_ns + dur_ns) FROM events WHERE kind <> 'other' GROUP BY rank ORDER BY rank")
"""The rank's span (`span`) as a row (start, end), none for a rank without events: the summary's batch
query of the spans prepares it for every rank, for the analysed windows of the ranks without steps
(device_time.windows_many)."""
RANK_QUERIES = (DEVICES, STEPS, DEVICE_BUSY, PEAK_MEMORY, LAST_RECORDED, SPANS)
"""The per-rank queries of this module's figures, which the engine runs once per batch of ranks (rank_rows.py)."""

def _device_work_sql(one: bool) -> str:
    """DEVICE_WORK's query, over one rank (`rank = ?`) or, `rank` first, every rank of the views. The
    collective test is made once per distinct name and joined back (over the held events of a batch
    of small ranks, per row, it took 110 ms instead of 29 ms for 154k intervals)."""
    lead, where, order = ("", "rank = ? AND ", "") if one else ("d.rank, ", "", "rank, ")
    return (f"WITH d AS (SELECT rank, device, ts_ns, ts_ns + dur_ns AS end_ns, (kind = 'kernel')::TINYINT AS kernel, name FROM events "
            f"WHERE {where}dur_ns > 0 AND device IS NOT NULL AND kind IN {DEVICE_WORK_SQL}),\n"
            f"n AS MATERIALIZED (SELECT name, coalesce({comm_kernel_name()}::TINYINT, -1) AS comm FROM (SELECT DISTINCT name FROM d))\n"
            f"SELECT {lead}d.device, d.ts_ns, d.end_ns, d.kernel, coalesce(n.comm, -1)::TINYINT AS comm "
            f"FROM d LEFT JOIN n ON n.name IS NOT DISTINCT FROM d.name ORDER BY {order}device, ts_ns, end_ns")


DEVICE_WORK = RankQuery("device_work", _device_work_sql(True), _device_work_sql(False), arrays=True)
"""Every interval of device work of a rank with a duration (what `union_sql(device_where(...))`
merges), with `kernel` (1: a kernel) and `comm` (1: its name is a collective's,
vocab.COMM_KERNEL_PATTERN; 0: not; -1: no name, which matches neither test in SQL): read once per
batch of ranks, the rows of every device union the analysis needs (`device_unions`)."""

UNION_CLASSES = ("busy", "kernels", "compute", "comm", "not_comm")
"""The device unions `device_unions` gives, as `events` predicates over device work of one device:
`busy` every interval (`union_sql(device_where(...))`, DEVICE_BUSY); `kernels` kind = 'kernel';
`compute` kernels whose name is not a collective's (`NOT coalesce(regexp_matches(...), false)`:
an unnamed kernel is compute); `comm` collective kernels (`regexp_matches(...)`); `not_comm` device
work whose name is not a collective's (`NOT regexp_matches(...)`: an unnamed one is neither).
device_time.UNION_WHERES and the summary's communication figures are these."""


def device_unions(work: dict) -> dict[int, dict[str, np.ndarray]]:
    """Per device of one rank's DEVICE_WORK rows (`work`, as `rank_rows.arrays` gives them): each
    union of UNION_CLASSES as an (n, 2) int64 array of (start, end), sorted (`union_array`, the
    NumPy twin of `union_sql`)."""
    import numpy as np

    dev = np.asarray(work["device"])
    ts, end = np.asarray(work["ts_ns"], dtype=np.int64), np.asarray(work["end_ns"], dtype=np.int64)
    kernel, comm = np.asarray(work["kernel"]) == 1, np.asarray(work["comm"])
    cuts = np.flatnonzero(dev[1:] != dev[:-1]) + 1 if len(dev) else np.zeros(0, dtype=np.int64)
    out = {}
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(dev)]):
        if hi <= lo:
            continue
        s, e, k, c = ts[lo:hi], end[lo:hi], kernel[lo:hi], comm[lo:hi]
        out[int(dev[lo])] = {"busy": union_array(s, e), "kernels": union_array(s[k], e[k]),
                             "compute": union_array(s[k & (c != 1)], e[k & (c != 1)]),
                             "comm": union_array(s[k & (c == 1)], e[k & (c == 1)]),
                             "not_comm": union_array(s[c == 0], e[c == 0])}
    return out


def device_unions_many(run: Run, ranks: list[int]) -> dict[int, dict[int, dict[str, np.ndarray]]]:
    """`device_unions` of every rank of `ranks` (those with device work), the rows read by one
    DEVICE_WORK query grouped by rank (or the rows the engine prepared)."""
    from .rank_rows import prepare

    want = [int(r) for r in ranks]
    got = prepare(run, [DEVICE_WORK], want).get(DEVICE_WORK.name, {}) if len(want) > 1 else {}
    out = {}
    for r in want:
        per = device_unions(got[r] if r in got else rank_arrays(run, DEVICE_WORK, r))
        if per:
            out[r] = per
    return out


def busy_rows(per_device: dict[int, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """DEVICE_BUSY's rows of a rank (as `rank_rows.arrays` reads them: `device`, `start_ns`,
    `end_ns`, by device then start) from its `device_unions`: a caller that computed the unions
    prepares them (`run.prepared`), so that the figures and rules reading DEVICE_BUSY later
    (device-idle's gaps, step_device_busy) do not compute the union again."""
    import numpy as np

    devs = sorted(per_device)
    if not devs:
        return {"device": np.zeros(0, dtype=np.int32), "start_ns": np.zeros(0, dtype=np.int64), "end_ns": np.zeros(0, dtype=np.int64)}
    return {"device": np.concatenate([np.full(len(per_device[d]["busy"]), d, dtype=np.int32) for d in devs]),
            "start_ns": np.concatenate([per_device[d]["busy"][:, 0] for d in devs]),
            "end_ns": np.concatenate([per_device[d]["busy"][:, 1] for d in devs])}


def covered_within(union: np.ndarray, other: np.ndarray) -> int:
    """The length of `union`'s intervals that `other` covers (both sorted disjoint (n, 2) arrays, as
    `union_array` gives): the overlap of two unions, summed."""
    import numpy as np

    if not len(union) or not len(other):
        return 0
    starts, ends = other[:, 0], other[:, 1]
    done = np.concatenate([[0], np.cumsum(ends - starts)])

    def before(t: np.ndarray) -> np.ndarray:  # Coverage.before, for many instants at once
        i = np.searchsorted(starts, t, side="right")
        return done[i] - np.where(i > 0, np.maximum(ends[np.maximum(i - 1, 0)] - t, 0), 0)
    return int((before(union[:, 1]) - before(union[:, 0])).sum())


def devices(run: Run, rank: int) -> list[int]:
    return [d for (d,) in rank_rows(run, DEVICES, rank)]


def span(run: Run, rank: int) -> dict:
    """First start to last end over the rank's events, leaving out kind 'other' (profiler bookkeeping spans)."""
    lo, hi = run.sql("SELECT min(ts_ns), max(ts_ns + dur_ns) FROM events WHERE rank = ? AND kind <> 'other'", [rank]).fetchone()
    return {"start_ns": lo, "end_ns": hi, "span_ns": (hi - lo) if lo is not None else 0}


def trains(run: Run, rank: int) -> bool:
    """Whether the rank does training work: any event in the backward pass or the optimizer
    (vocab.training_work). False for inference and evaluation runs: rules then give no training
    advice (DataLoader workers, fused optimizers, ...)."""
    return run.sql(f"SELECT count(*) FROM (SELECT 1 FROM events WHERE rank = ? AND {training_work()} LIMIT 1)", [rank]).fetchone()[0] > 0


def per_step_words(count: float, steps: int, unit: str = "") -> str:
    """A count over the steady steps in words: '585/step' with steps (count over `steps`, the
    steady steps), 'in the analysed window' without (`steps` 0: the count is the window's)."""
    return f"{count / steps:.0f}{unit}/step" if steps else "in the analysed window"


# ---- a device run whose device events were lost -------------------------------------------------

DEVICE_EVENTS_LOST = "device events lost"
"""The words for a rank that launched device work but whose trace holds no device events (not a
CPU-only rank): what the report, info, notebooks, the dashboard and not-applicable reasons say."""
RE_RECORD = "re-record with the device activity on (ProfilerActivity.CUDA) and a normal profiler stop"
"""What to do about it."""


DEVICE_BACKEND = re.compile(r"(?i)(?<![a-z])(nccl|rccl|hccl|xccl)(?![a-z])")
"""Process-group backends that run on devices (NVIDIA's and AMD's NCCL/RCCL, Gaudi's HCCL, Intel's
XCCL): a rank whose trace names one ran on a device."""


def device_events_lost(entry: dict | None) -> dict | None:
    """For a rank's manifest entry: {"launches": launch calls, "launch_flows": launch flow starts}
    when the importer counted launches or `ac2g` flow starts but the rank has no device events
    (its data_quality keys `launches_without_device_events`, `launch_flows_without_device_events`),
    and with "backend" when it counted none but the trace's process group ran on a device backend
    (`distributedInfo.backend`, DEVICE_BACKEND: a GPU job profiled without its device activity):
    a device run whose device events were lost. None otherwise (a CPU-only rank, or one with
    device events). The one definition; docs/METRICS.md states it."""
    dq = (entry or {}).get("data_quality") or {}
    launches = int(dq.get("launches_without_device_events") or 0)
    flows = int(dq.get("launch_flows_without_device_events") or 0)
    if launches or flows:
        return {"launches": launches, "launch_flows": flows}
    backend = ((entry or {}).get("distributed_info") or {}).get("backend")
    if entry and not entry.get("devices") and isinstance(backend, str) and DEVICE_BACKEND.search(backend):
        return {"launches": 0, "launch_flows": 0, "backend": backend}
    return None


def graph_replays(entry: dict | None) -> dict | None:
    """For a rank's manifest entry: its replayed graph work (device events whose launch is a graph
    launch, `events.graph`) as {"device_events", "launches", "capture_linked": paired with a captured
    node that had an operator (they take its operator and statement), "launch_only": keeping their
    launch's operator and statement, "not_linked": the rank's device events with no launch at all
    (a replay whose launch was lost is among them), "with_operator": those with an operator (their
    capture's, else their launch's outermost one), "capture_linked_share" and "operator_share"
    (of device_events), "captures": graphs read from capture traces (None: none given),
    "launches_matched": graph launches paired with a captured graph}; None when the rank replays
    no graph. The one definition; docs/METRICS.md
    "Graph replays" states it."""
    dq = (entry or {}).get("data_quality") or {}
    n = int(dq.get("graph_replay_device_events") or 0)
    if not n:
        return None
    linked = int(dq.get("graph_replay_capture_linked") or 0)
    return {"device_events": n, "launches": int(dq.get("graph_launches") or 0), "capture_linked": linked,
            "launch_only": n - linked, "not_linked": int(dq.get("device_events_without_launch") or 0),
            "with_operator": int(dq.get("graph_replay_with_operator") or 0),
            "capture_linked_share": linked / n, "operator_share": int(dq.get("graph_replay_with_operator") or 0) / n,
            "captures": dq.get("graph_captures"), "launches_matched": dq.get("graph_launches_matched")}


_ENTRIES: list[tuple[dict, int, dict[int, dict]]] = []
"""The manifests `rank_entry` read last, each with its length and its entries by rank."""


def rank_entry(run: Run, rank: int) -> dict:
    """The manifest's entry of a rank ({} when it lists none; the first when it lists two). The
    entries are indexed once per manifest: a rule asks for its rank's on every rank, and a scan of
    the list each time cost 0.3 s over 256 ranks."""
    listed = run.manifest.get("ranks", [])
    index = next((by_rank for manifest, n, by_rank in _ENTRIES if manifest is run.manifest and n == len(listed)), None)
    if index is None:
        index = {}
        for e in listed:
            index.setdefault(int(e.get("rank", 0)), e)
        _ENTRIES[:] = [(run.manifest, len(listed), index)] + _ENTRIES[:3]
    return index.get(int(rank), {})


def no_device_words(lost: dict | None) -> str:
    """How to call a rank without device events: DEVICE_EVENTS_LOST with its launch count when
    `lost` (from `device_events_lost`), else 'CPU only'."""
    if not lost:
        return "CPU only"
    n = lost["launches"] or lost["launch_flows"]
    if not n and lost.get("backend"):
        return f"{DEVICE_EVENTS_LOST} (its process group's backend, {lost['backend']}, runs on devices; no kernels recorded)"
    return f"{DEVICE_EVENTS_LOST} ({n} launch{'es' if n != 1 else ''} recorded, no kernels)"


def no_device_reason(lost: dict | None) -> str:
    """Why a rule that needs device events does not apply to a rank without them."""
    if not lost:
        return "no device events (kernel, memcpy, memset) in this rank: a CPU-only run"
    return f"{no_device_words(lost)}: {RE_RECORD}"


# ---- steady-state steps: THE selection used by step statistics, step-outliers and diff ----------

WARMUP_ROBUST_SDS = 5.0
"""A leading step is warm-up when it differs from the median step by more than this many robust
standard deviations (1.4826 x MAD of the candidate steps)..."""
WARMUP_MIN_SHARE = 0.10
"""...and by more than this share of the median step (so a very steady run keeps its first steps)."""
WARMUP_MAX_SHARE = 0.25
"""At most this share of the candidate steps (rounded down) is left out as warm-up."""
PARTIAL_MAX_SHARE = 0.5
"""The last step is partial when it is shorter than this share of the median step."""
MIN_STEPS_TO_SELECT = 4
"""With fewer candidate steps there is no robust reference: warm-up and short last steps are kept."""


@dataclass
class StepSelection:
    """Which profiler steps are the steady state, and why each other step was left out."""
    steps: list[int]  # every step, in order
    durations_ns: list[float]  # per step (the slowest rank's duration when several ranks are read)
    used: list[int]  # the steady steps
    left_out: list[dict] = field(default_factory=list)  # {"step", "dur_ns", "reason"}

    @property
    def used_durations_ns(self) -> list[float]:
        keep = set(self.used)
        return [d for s, d in zip(self.steps, self.durations_ns) if s in keep]

    def to_dict(self) -> dict:
        return {"steps": len(self.steps), "used": list(self.used), "left_out": [dict(x) for x in self.left_out]}


def steady_steps(run: Run, rank: int | None = None) -> StepSelection:
    """The steady-state steps of a rank (or of the job when rank is None: per step, the slowest
    rank's duration). The one definition behind `steps` in the summary, the step-outliers rule and
    `diff`; docs/METRICS.md and docs/COMPARE.md state it.

    1. Steps that do not lie between two step boundaries: a live run recorded without a schedule
       (`neuron-explorer record`, or `nx.profile` without one) opens its first step when the
       profiler starts (script start-up, imports, model construction) and closes its last when it
       stops (the remainder after the last optimizer.step() / prof.step()). Both are left out.
    2. A last step shorter than PARTIAL_MAX_SHARE of the median: a partial step.
    3. Warm-up: the leading steps, in order, whose duration differs from the median of the
       candidates by more than max(WARMUP_ROBUST_SDS x 1.4826 x MAD, WARMUP_MIN_SHARE x median);
       at most WARMUP_MAX_SHARE of the candidates. Slow steps later in the run are kept (they are
       the run's variance, which robust statistics and the step-outliers rule judge).
    """
    if rank is None:
        rows = run.sql("SELECT step, max(dur_ns) FROM steps GROUP BY step ORDER BY step").fetchall()
    else:
        rows = run.sql("SELECT step, dur_ns FROM steps WHERE rank = ? ORDER BY step", [rank]).fetchall()
    return select_steady_steps([int(r[0]) for r in rows], [float(r[1]) for r in rows], open_ended=open_ended_steps(run))


def open_ended_steps(run: Run) -> bool:
    """True when the first and last steps are bounded by the profiler's start and stop, not by step
    calls: a live run whose profiler had no schedule (torch then opens a step at start() and at
    every step(), and closes the open one at stop())."""
    prof = run.manifest.get("profiler")
    return run.manifest.get("source") == "live" and isinstance(prof, dict) and "schedule" in prof and prof["schedule"] is None


def select_steady_steps(steps: list[int], durations_ns: list[float], *, open_ended: bool = False) -> StepSelection:
    """The selection of `steady_steps` on plain data (see there for the rules)."""
    sel = StepSelection(list(steps), list(durations_ns), [])
    cand = list(zip(steps, durations_ns))

    def drop(item, reason):
        sel.left_out.append({"step": item[0], "dur_ns": item[1], "reason": reason})

    if open_ended and len(cand) >= 3:
        drop(cand.pop(0), "before the first step boundary: starts when the profiler started (start-up, first iteration)")
        drop(cand.pop(), "after the last step boundary: a partial step, ended by the profiler's stop")
    if len(cand) >= MIN_STEPS_TO_SELECT:
        med = _median([d for _, d in cand])
        if cand[-1][1] < PARTIAL_MAX_SHARE * med:
            drop(cand.pop(), f"partial: shorter than {PARTIAL_MAX_SHARE:.0%} of the median step")
    if len(cand) >= MIN_STEPS_TO_SELECT:
        durs = [d for _, d in cand]
        med = _median(durs)
        mad = _median([abs(d - med) for d in durs])
        limit = max(WARMUP_ROBUST_SDS * 1.4826 * mad, WARMUP_MIN_SHARE * med)
        cap = int(len(cand) * WARMUP_MAX_SHARE)
        warm = 0
        while warm < cap and abs(cand[warm][1] - med) > limit:
            warm += 1
        for item in cand[:warm]:
            drop(item, f"warm-up: {item[1] / med:.2f}x the median step, beyond the warm-up threshold of ±{limit / med:.0%}")
        cand = cand[warm:]
    sel.used = [s for s, _ in cand]
    sel.left_out.sort(key=lambda x: x["step"])
    return sel


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def step_stats(run: Run, rank: int) -> dict:
    """Profiler steps of a rank: count and total over every step (the analysed window); mean, p50,
    p90 (linear interpolation), max and cv (population) over the steady steps (`steady_steps`)."""
    return step_stats_of_selection(steady_steps(run, rank))


def step_stats_of_selection(sel: StepSelection) -> dict:
    out = step_stats_of([int(d) for d in sel.used_durations_ns])
    out["count"], out["total_ns"] = len(sel.steps), int(sum(sel.durations_ns))
    out["steady_count"] = len(sel.used)
    out["steady_steps"] = list(sel.used)
    out["left_out"] = [{**x, "dur_ns": int(x["dur_ns"])} for x in sel.left_out]
    return out


def step_stats_of(durs: list[int]) -> dict:
    n = len(durs)
    if not n:
        return {"count": 0, "total_ns": 0, "mean_ns": None, "p50_ns": None, "p90_ns": None, "max_ns": None, "cv": None}
    s = sorted(durs)
    mean = sum(s) / n
    std = math.sqrt(sum((d - mean) ** 2 for d in s) / n)
    return {"count": n, "total_ns": int(sum(s)), "mean_ns": mean, "p50_ns": _quantile(s, 0.5), "p90_ns": _quantile(s, 0.9),
            "max_ns": s[-1], "cv": (std / mean) if mean else None}


def _quantile(sorted_values: list[int], q: float) -> float:
    """Linear interpolation between closest ranks (DuckDB quantile_cont, numpy 'linear')."""
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def device_summary(run: Run, rank: int, device: int) -> dict:
    """Busy (union of kernel, memcpy, memset over all streams), per-kind sums, idle, communication and overlap."""
    busy = dict(zip(("busy_ns", "window_start_ns", "window_end_ns", "window_ns", "idle_ns"), run.sql(busy_sql(rank, device)).fetchone()))
    sums = dict(run.sql("SELECT kind, sum(dur_ns)::BIGINT FROM events WHERE rank = ? AND device = ? GROUP BY kind", [rank, device]).fetchall())
    comm = dict(zip(("comm_ns", "comm_overlap_ns", "comm_exposed_ns"), run.sql(comm_overlap_sql(rank, device)).fetchone()))
    return {
        "device": device,
        **{k: (int(v) if v is not None else 0) for k, v in busy.items()},
        "kernel_ns": int(sums.get("kernel") or 0),
        "memcpy_ns": int(sums.get("memcpy") or 0),
        "memset_ns": int(sums.get("memset") or 0),
        **{k: int(v or 0) for k, v in comm.items()},
    }


_NAMED_WORK = f"device, name, ts_ns, ts_ns + dur_ns AS end_ns FROM events WHERE dur_ns > 0 AND device IS NOT NULL AND kind IN {DEVICE_WORK_SQL}"
DEVICE_WORK_NAMED = RankQuery("device_work_named", f"SELECT {_NAMED_WORK} AND rank = ? ORDER BY device, ts_ns, end_ns, name",
                              f"SELECT rank, {_NAMED_WORK} ORDER BY rank, device, ts_ns, end_ns, name", arrow=True)
"""Every interval of device work of a rank with its name (`device_work_intervals`), as an Arrow
table: read once per batch of ranks where a rule asks (the critical path's saving bound)."""


def device_work_intervals(run: Run, rank: int) -> dict:
    """Every interval of device work of the rank with a duration (kernel, memcpy, memset on a
    device: what `union_sql(device_where(...))` merges), read in one query (DEVICE_WORK_NAMED, or
    the batch's rows of it): arrays `device`, `ts_ns`, `end_ns` and `name` (codes into the list
    `names`; -1: no name)."""
    import numpy as np
    import pyarrow.compute as pc

    got = rank_rows(run, DEVICE_WORK_NAMED, rank)
    names = pc.dictionary_encode(got["name"]).combine_chunks()
    return {"device": got["device"].to_numpy(), "ts_ns": got["ts_ns"].to_numpy(), "end_ns": got["end_ns"].to_numpy(),
            "name": np.asarray(names.indices.fill_null(-1).to_numpy(), dtype=np.int64), "names": names.dictionary.to_pylist()}


def intersect_unions(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The intervals two unions share (both sorted disjoint (n, 2) arrays, as `union_array` gives):
    a union of the same form."""
    import numpy as np

    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i, 0], b[j, 0]), min(a[i, 1], b[j, 1])
        if hi > lo:
            out.append((lo, hi))
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return np.asarray(out, dtype=np.int64).reshape(-1, 2)


def union_array(starts, ends):
    """The union of intervals [start, end) as `union_sql` merges them (an interval starts a new
    island when it begins after the furthest end before it, in (start, end) order): an (n, 2)
    int64 array of (start, end), sorted."""
    import numpy as np

    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    if not len(starts):
        return np.empty((0, 2), dtype=np.int64)
    order = np.lexsort((ends, starts))
    s, e = starts[order], ends[order]
    first = np.flatnonzero(np.concatenate([[True], s[1:] > np.maximum.accumulate(e)[:-1]]))
    return np.stack([s[first], np.maximum.reduceat(e, first)], axis=1)


def _kept_work(work: dict, device: int, without_name: str | tuple | None):
    """`work`'s rows (device_work_intervals) on `device`, less those `without_name` takes out (as
    `step_device_busy`'s SQL: a tuple compares `coalesce(name, '')`, a name `IS DISTINCT FROM`)."""
    import numpy as np

    keep = work["device"] == device
    if without_name is not None:
        names = set(without_name) if isinstance(without_name, tuple) else {without_name}
        gone = [i for i, n in enumerate(work["names"]) if n in names]
        if isinstance(without_name, tuple) and "" in names:
            gone.append(-1)  # no name reads as '' there
        if gone:
            keep &= ~np.isin(work["name"], gone)
    return keep


def step_device_busy(run: Run, rank: int, without_name: str | tuple | None = None, work: dict | None = None) -> list[dict]:
    """Device utilisation per profiler step: for each step of the rank and each device the rank
    used, `busy_ns` = the length of the step's range [ts_ns, ts_ns + dur_ns) covered by the device's
    busy union (kernel, memcpy, memset on any stream, as `busy_ns` of `device_summary`), and
    `busy_share` = busy_ns / the step's dur_ns. Work a step launched that ran after its end counts
    in the step whose range it ran in. `without_name`: the same without the device events of that
    name, or of those names (a tuple: a class of work), (what the device would still do were they gone:
    critical_path.saving_bound). `work`: the rank's `device_work_intervals`, already read (a caller
    that asks for many names: merged in NumPy, not one query per device and name)."""
    import numpy as np

    steps = rank_rows(run, STEPS, rank)
    out = []
    busy = prepared_rows(run, DEVICE_BUSY, rank) if without_name is None and work is None else None
    for device in devices(run, rank):
        if work is not None:
            keep = _kept_work(work, device, without_name)
            cov = Coverage(union_array(work["ts_ns"][keep], work["end_ns"][keep]))
        elif busy is not None:  # every device's union, from the batch's query
            at = busy["device"] == device
            cov = Coverage(np.stack([busy["start_ns"][at].astype(np.int64), busy["end_ns"][at].astype(np.int64)], axis=1))
        else:
            if isinstance(without_name, tuple):
                extra = f"coalesce(name, '') NOT IN {kinds_sql(without_name)}" if without_name else ""
            else:
                extra = f"name IS DISTINCT FROM {sql_literal(without_name)}" if without_name is not None else ""
            cov = Coverage(interval_array(run, device_where(rank, device, extra=extra)))
        for step, ts, dur in steps:
            busy = cov.within(int(ts), int(ts) + int(dur))
            out.append({"step": int(step), "device": device, "dur_ns": int(dur), "busy_ns": int(busy),
                        "busy_share": (busy / dur) if dur else None})
    return out


def peak_memory(run: Run, rank: int) -> list[dict]:
    """Per device the rank's allocator recorded (not the CPU: `device_type` 0): `peak_allocated_bytes`
    = the largest `total_allocated`, `peak_reserved_bytes` = the largest `total_reserved` (null when
    the trace does not record it) and `events`. Empty without allocator events (profile_memory=True)."""
    rows = rank_rows(run, PEAK_MEMORY, rank)
    return [{"device_type": int(t), "device": None if d is None else int(d), "peak_allocated_bytes": a, "peak_reserved_bytes": r,
             "events": int(n)} for t, d, a, r, n in rows]
