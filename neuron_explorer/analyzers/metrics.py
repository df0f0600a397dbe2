"""Summary numbers of a run, per rank and device, as query functions that return plain data.

Each number is defined in docs/METRICS.md; the definitions there and the SQL here must agree.
The analyzer, the dashboard and the agent interface call these same functions.

Must not: print, render or decide what is a problem (that is what rules do).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from ..store import Run, sql_literal

DEVICE_WORK_KINDS = ("kernel", "memcpy", "memset")
"""Kinds whose intervals make a device busy."""

COMM_KERNEL_PATTERN = "(?i)(nccl|gloo|rccl)"
"""A device kernel is a collective when its name matches this (regexp, case-insensitive)."""

COMM_OP_PATTERN = "^(c10d::|c10d_functional::|_c10d_functional::|record_param_comms$|gloo:|nccl:)"
"""A CPU operator is a collective when its name matches this regexp."""


def kinds_sql(kinds) -> str:
    return "(" + ", ".join(sql_literal(k) for k in kinds) + ")"


def union_sql(where: str, by: tuple[str, ...] = ()) -> str:
    """SQL giving the merged (union) intervals of the events matching `where`: rows (start_ns, end_ns).

    Plain DuckDB window functions, so that evidence queries reproduce interval unions without
    Neuron Explorer. An interval starts a new island when it begins after the furthest end seen so far.
    With `by` (columns, e.g. ('rank', 'device')), one union per value of those columns, in one
    query: rows (*by, start_ns, end_ns).
    """
    cols = "".join(f"{c}, " for c in by)
    part = f"PARTITION BY {', '.join(by)} " if by else ""
    return f"""WITH _iv AS (SELECT {cols}ts_ns, ts_ns + dur_ns AS end_ns FROM events WHERE dur_ns > 0 AND ({where})),
_mx AS (SELECT {cols}ts_ns, end_ns, max(end_ns) OVER ({part}ORDER BY ts_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end FROM _iv),
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
    pat = sql_literal(COMM_KERNEL_PATTERN)
    comm = union_sql(device_where(rank, device, ("kernel",), f"regexp_matches(name, {pat})"))
    comp = union_sql(device_where(rank, device, DEVICE_WORK_KINDS, f"NOT regexp_matches(name, {pat})"))
    return f"""WITH c AS ({comm}), k AS ({comp}),
ov AS (SELECT coalesce(sum(least(c.end_ns, k.end_ns) - greatest(c.start_ns, k.start_ns)), 0) AS overlap_ns
       FROM c JOIN k ON c.start_ns < k.end_ns AND k.start_ns < c.end_ns)
SELECT (SELECT coalesce(sum(end_ns - start_ns), 0) FROM c)::BIGINT AS comm_ns, (SELECT overlap_ns FROM ov)::BIGINT AS comm_overlap_ns,
       ((SELECT coalesce(sum(end_ns - start_ns), 0) FROM c) - (SELECT overlap_ns FROM ov))::BIGINT AS comm_exposed_ns"""


def intervals(run: Run, where: str) -> list[tuple[int, int]]:
    return [tuple(r) for r in run.sql(union_sql(where) + " ORDER BY start_ns").fetchall()]


def ranks(run: Run) -> list[int]:
    return [r for (r,) in run.sql("SELECT DISTINCT rank FROM events ORDER BY rank").fetchall()]


def devices(run: Run, rank: int) -> list[int]:
    return [d for (d,) in run.sql(
        f"SELECT DISTINCT device FROM events WHERE rank = ? AND kind IN {kinds_sql(DEVICE_WORK_KINDS)} AND device IS NOT NULL ORDER BY 1",
        [rank]).fetchall()]


def span(run: Run, rank: int) -> dict:
    """First start to last end over the rank's events, leaving out kind 'other' (profiler bookkeeping spans)."""
    lo, hi = run.sql("SELECT min(ts_ns), max(ts_ns + dur_ns) FROM events WHERE rank = ? AND kind <> 'other'", [rank]).fetchone()
    return {"start_ns": lo, "end_ns": hi, "span_ns": (hi - lo) if lo is not None else 0}


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
    return select_steady_steps([int(r[0]) for r in rows], [float(r[1]) for r in rows], open_ended=_open_ended_steps(run))


def _open_ended_steps(run: Run) -> bool:
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
    return _step_stats_of_selection(steady_steps(run, rank))


def _step_stats_of_selection(sel: StepSelection) -> dict:
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


def step_device_busy(run: Run, rank: int, without_name: str | None = None) -> list[dict]:
    """Device utilisation per profiler step: for each step of the rank and each device the rank
    used, `busy_ns` = the length of the step's range [ts_ns, ts_ns + dur_ns) covered by the device's
    busy union (kernel, memcpy, memset on any stream, as `busy_ns` of `device_summary`), and
    `busy_share` = busy_ns / the step's dur_ns. Work a step launched that ran after its end counts
    in the step whose range it ran in. `without_name`: the same without the device events of that
    name (what the device would still do were they gone: critical_path.saving_bound)."""
    steps = run.sql("SELECT step, ts_ns, dur_ns FROM steps WHERE rank = ? ORDER BY step", [rank]).fetchall()
    out = []
    for device in devices(run, rank):
        iv = intervals(run, device_where(rank, device, extra=f"name IS DISTINCT FROM {sql_literal(without_name)}"
                                         if without_name is not None else ""))
        starts = [s for s, _ in iv]
        done = [0]  # done[i]: busy length of the first i intervals
        for s, e in iv:
            done.append(done[-1] + (e - s))

        def covered(t: int) -> int:  # busy length before instant t
            i = bisect.bisect_right(starts, t)
            return done[i] - (max(iv[i - 1][1] - t, 0) if i else 0)

        for step, ts, dur in steps:
            busy = covered(int(ts) + int(dur)) - covered(int(ts))
            out.append({"step": int(step), "device": device, "dur_ns": int(dur), "busy_ns": int(busy),
                        "busy_share": (busy / dur) if dur else None})
    return out


def cpu_comm(run: Run, rank: int) -> dict:
    """Collective CPU operators (c10d, record_param_comms): union of their intervals on the host."""
    iv = intervals(run, f"rank = {int(rank)} AND kind = 'cpu_op' AND regexp_matches(name, {sql_literal(COMM_OP_PATTERN)})")
    return {"comm_cpu_ns": sum(e - s for s, e in iv), "comm_cpu_intervals": len(iv)}


def top_level_ops(run: Run, rank: int, limit: int = 10) -> list[dict]:
    """CPU time per top-level operator name (an operator with no operator around it: event_id = top_op_id)."""
    rows = run.sql(
        "SELECT name, count(*) AS calls, sum(dur_ns)::BIGINT AS cpu_ns FROM events "
        "WHERE rank = ? AND kind = 'cpu_op' AND event_id = top_op_id GROUP BY name ORDER BY cpu_ns DESC, name LIMIT ?",
        [rank, limit]).fetchall()
    return [{"name": n, "calls": c, "cpu_ns": t} for n, c, t in rows]


def source_lines(run: Run, rank: int, limit: int = 10) -> dict:
    """Top user source lines by CPU time and by device time, self and total, by the one definition
    of time per source line (analyzers/lines.py, METRICS.md)."""
    from .lines import self_and_total

    got = self_and_total(run, rank)
    if not got["has_frames"]:
        return {"cpu": [], "device": [], "has_frames": False}

    def ranked(side: str) -> list[dict]:
        out = [{"source": s, "self_ns": r[f"{side}_ns_self"], "total_ns": r[f"{side}_ns_total"],
                "backward_self_ns": r[f"{side}_backward_ns_self"], "calls": r["calls_self"]}
               for s, r in got["lines"].items() if r[f"{side}_ns_total"]]
        out.sort(key=lambda r: (-r["self_ns"], -r["total_ns"], r["source"]))
        return out[:limit]

    return {"cpu": ranked("cpu"), "device": ranked("device"), "has_frames": True}


def rank_summary(run: Run, rank: int) -> dict:
    """Every summary number of one rank (the `summary` of report.json)."""
    sp = span(run, rank)
    steps = step_stats(run, rank)
    return {
        "rank": rank,
        **sp,
        "steps": steps,
        "analysed_ns": steps["total_ns"] if steps["count"] else sp["span_ns"],
        "devices": [device_summary(run, rank, d) for d in devices(run, rank)],
        **cpu_comm(run, rank),
        "top_level_ops": top_level_ops(run, rank),
        "source_lines": source_lines(run, rank),
        "bound": _bound(run, rank),
        "utilisation": _utilisation(run, rank),
    }


def _utilisation(run: Run, rank: int) -> dict:
    from .utilisation import rank_utilisation  # FLOPs, MFU and roofline: their own module

    return rank_utilisation(run, rank)


def _bound(run: Run, rank: int) -> dict:
    from .critical_path import bound  # what bounds each step, from its critical path: its own module

    return bound(run, rank)


def summary(run: Run) -> dict:
    return {"ranks": [rank_summary(run, r) for r in ranks(run)]}


# ---- the same numbers for many ranks at once ---------------------------------------------------

def rank_summaries(run: Run, ranks_: list[int], *, per_rank: bool = True) -> dict[int, dict]:
    """`rank_summary` of every rank in `ranks_`, the same numbers, with each set-based figure (span,
    steps, devices, busy, per-kind sums, communication, top-level operators) computed by one query
    grouped by rank over all of them instead of one query per rank: a job of many small ranks
    then pays each query's fixed cost once. With per_rank=False the figures that are computed
    rank by rank (source_lines, bound, utilisation: `complete_summary` adds them) are left out."""
    want = [int(r) for r in ranks_]
    keep = set(want)
    spans = {int(r): (lo, hi) for r, lo, hi in run.sql(
        "SELECT rank, min(ts_ns), max(ts_ns + dur_ns) FROM events WHERE kind <> 'other' GROUP BY rank").fetchall()}
    step_rows: dict[int, list] = {r: [] for r in want}
    for r, step, dur in run.sql("SELECT rank, step, dur_ns FROM steps ORDER BY rank, step").fetchall():
        if int(r) in keep:
            step_rows[int(r)].append((int(step), float(dur)))
    open_ended = _open_ended_steps(run)
    devs: dict[int, list[int]] = {r: [] for r in want}
    for r, d in run.sql(f"SELECT DISTINCT rank, device FROM events WHERE kind IN {kinds_sql(DEVICE_WORK_KINDS)} "
                        "AND device IS NOT NULL ORDER BY 1, 2").fetchall():
        if int(r) in keep:
            devs[int(r)].append(d)
    dev_where = f"kind IN {kinds_sql(DEVICE_WORK_KINDS)} AND device IS NOT NULL"
    busy = {(int(r), d): v for r, d, *v in run.sql(
        f"WITH u AS ({union_sql(dev_where, ('rank', 'device'))})\n"
        "SELECT rank, device, sum(end_ns - start_ns)::BIGINT, min(start_ns), max(end_ns), (max(end_ns) - min(start_ns))::BIGINT, "
        "(max(end_ns) - min(start_ns) - sum(end_ns - start_ns))::BIGINT FROM u GROUP BY rank, device").fetchall()}
    sums: dict[tuple, dict] = {}
    for r, d, kind, ns in run.sql("SELECT rank, device, kind, sum(dur_ns)::BIGINT FROM events WHERE device IS NOT NULL "
                                  "GROUP BY rank, device, kind").fetchall():
        sums.setdefault((int(r), d), {})[kind] = ns
    pat = sql_literal(COMM_KERNEL_PATTERN)
    comm_sql = f"""WITH c AS ({union_sql(f"kind = 'kernel' AND device IS NOT NULL AND regexp_matches(name, {pat})", ('rank', 'device'))}),
k AS ({union_sql(f"{dev_where} AND NOT regexp_matches(name, {pat})", ('rank', 'device'))}),
cs AS (SELECT rank, device, sum(end_ns - start_ns) AS comm_ns FROM c GROUP BY rank, device),
ov AS (SELECT c.rank, c.device, sum(least(c.end_ns, k.end_ns) - greatest(c.start_ns, k.start_ns)) AS overlap_ns
       FROM c JOIN k ON c.rank = k.rank AND c.device = k.device AND c.start_ns < k.end_ns AND k.start_ns < c.end_ns GROUP BY c.rank, c.device)
SELECT cs.rank, cs.device, cs.comm_ns::BIGINT, coalesce(ov.overlap_ns, 0)::BIGINT FROM cs LEFT JOIN ov USING (rank, device)"""
    comm = {(int(r), d): (c, o) for r, d, c, o in run.sql(comm_sql).fetchall()}
    comm_ops = union_sql(f"kind = 'cpu_op' AND regexp_matches(name, {sql_literal(COMM_OP_PATTERN)})", ("rank",))
    cpu = {int(r): (ns, n) for r, ns, n in run.sql(
        f"SELECT rank, sum(end_ns - start_ns), count(*) FROM ({comm_ops}) GROUP BY rank").fetchall()}
    tops: dict[int, list] = {r: [] for r in want}
    for r, name, calls, ns in run.sql("SELECT rank, name, count(*), sum(dur_ns)::BIGINT FROM events "
                                      "WHERE kind = 'cpu_op' AND event_id = top_op_id GROUP BY rank, name").fetchall():
        if int(r) in keep:
            tops[int(r)].append({"name": name, "calls": calls, "cpu_ns": ns})
    out = {}
    for r in want:
        lo, hi = spans.get(r, (None, None))
        sp = {"start_ns": lo, "end_ns": hi, "span_ns": (hi - lo) if lo is not None else 0}
        rows = step_rows[r]
        steps = _step_stats_of_selection(select_steady_steps([s for s, _ in rows], [d for _, d in rows], open_ended=open_ended))
        devices_ = []
        for d in devs[r]:
            b = dict(zip(("busy_ns", "window_start_ns", "window_end_ns", "window_ns", "idle_ns"), busy.get((r, d), (None,) * 5)))
            ks = sums.get((r, d), {})
            c, o = comm.get((r, d), (0, 0))
            devices_.append({"device": d, **{k: (int(v) if v is not None else 0) for k, v in b.items()},
                             "kernel_ns": int(ks.get("kernel") or 0), "memcpy_ns": int(ks.get("memcpy") or 0),
                             "memset_ns": int(ks.get("memset") or 0),
                             "comm_ns": int(c or 0), "comm_overlap_ns": int(o or 0), "comm_exposed_ns": int((c or 0) - (o or 0))})
        ns, n = cpu.get(r, (0, 0))
        top = sorted(tops[r], key=lambda t: (-t["cpu_ns"], t["name"]))[:10]
        out[r] = {"rank": r, **sp, "steps": steps, "analysed_ns": steps["total_ns"] if steps["count"] else sp["span_ns"],
                  "devices": devices_, "comm_cpu_ns": int(ns or 0), "comm_cpu_intervals": int(n), "top_level_ops": top}
        if per_rank:
            complete_summary(run, out[r])
    return out


def complete_summary(run: Run, summary: dict) -> dict:
    """Add to a summary of `rank_summaries(..., per_rank=False)` the figures computed rank by rank
    (source lines, what bounds each step, utilisation), in `rank_summary`'s order of keys."""
    rank = summary["rank"]
    summary["source_lines"] = source_lines(run, rank)
    summary["bound"] = _bound(run, rank)
    summary["utilisation"] = _utilisation(run, rank)
    return summary
