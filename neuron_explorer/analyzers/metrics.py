"""Summary numbers of a run, per rank and device, as query functions that return plain data.

Each number is defined in docs/METRICS.md; the definitions there and the SQL here must agree.
The analyzer, the dashboard and the agent interface call these same functions.

Must not: print, render or decide what is a problem (that is what rules do).
"""

from __future__ import annotations

import math

from ..store import Run, sql_literal

DEVICE_WORK_KINDS = ("kernel", "memcpy", "memset")
"""Kinds whose intervals make a device busy."""

COMM_KERNEL_PATTERN = "(?i)(nccl|gloo|rccl)"
"""A device kernel is a collective when its name matches this (regexp, case-insensitive)."""

COMM_OP_PATTERN = "^(c10d::|c10d_functional::|_c10d_functional::|record_param_comms$|gloo:|nccl:)"
"""A CPU operator is a collective when its name matches this regexp."""


def kinds_sql(kinds) -> str:
    return "(" + ", ".join(sql_literal(k) for k in kinds) + ")"


def union_sql(where: str) -> str:
    """SQL giving the merged (union) intervals of the events matching `where`: rows (start_ns, end_ns).

    Plain DuckDB window functions, so that evidence queries reproduce interval unions without
    Neuron Explorer. An interval starts a new island when it begins after the furthest end seen so far.
    """
    return f"""WITH _iv AS (SELECT ts_ns, ts_ns + dur_ns AS end_ns FROM events WHERE dur_ns > 0 AND ({where})),
_mx AS (SELECT ts_ns, end_ns, max(end_ns) OVER (ORDER BY ts_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end FROM _iv),
_isl AS (SELECT ts_ns, end_ns, sum(CASE WHEN prev_end IS NULL OR ts_ns > prev_end THEN 1 ELSE 0 END)
         OVER (ORDER BY ts_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island FROM _mx)
SELECT min(ts_ns) AS start_ns, max(end_ns) AS end_ns FROM _isl GROUP BY island"""


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


def step_stats(run: Run, rank: int) -> dict:
    """Profiler steps of a rank: count, total, mean, p50, p90 (linear interpolation), max, cv (population)."""
    rows = [d for (d,) in run.sql("SELECT dur_ns FROM steps WHERE rank = ? ORDER BY step", [rank]).fetchall()]
    return step_stats_of(rows)


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
    """Top user source lines by CPU time and by device time, self and total (see METRICS.md).

    self: events whose innermost user frame is the line; total: events with the line anywhere in
    their user-frame ancestry (each event counted once per line).
    """
    frames = {fid: (f"{file}:{line}", parent) for fid, file, line, parent in run.sql(
        "SELECT frame_id, file, line, parent_frame_id FROM frames WHERE rank = ? AND is_user", [rank]).fetchall()}
    if not frames:
        return {"cpu": [], "device": [], "has_frames": False}
    cpu = dict(run.sql("SELECT frame_id, sum(dur_ns)::BIGINT FROM events WHERE rank = ? AND kind = 'cpu_op' AND event_id = top_op_id "
                       "AND frame_id IS NOT NULL GROUP BY 1", [rank]).fetchall())
    dev = dict(run.sql(f"SELECT frame_id, sum(dur_ns)::BIGINT FROM events WHERE rank = ? AND kind IN {kinds_sql(DEVICE_WORK_KINDS)} "
                       "AND frame_id IS NOT NULL GROUP BY 1", [rank]).fetchall())
    chains: dict[int, set[str]] = {}

    def lines_of(fid: int) -> set[str]:
        if fid in chains:
            return chains[fid]
        seen, out, cur = set(), set(), fid
        while cur is not None and cur in frames and cur not in seen:
            seen.add(cur)
            out.add(frames[cur][0])
            cur = frames[cur][1]
        chains[fid] = out
        return out

    def rank_lines(per_frame: dict) -> list[dict]:
        self_t: dict[str, int] = {}
        total_t: dict[str, int] = {}
        for fid, t in per_frame.items():
            if fid not in frames:
                continue
            self_t[frames[fid][0]] = self_t.get(frames[fid][0], 0) + t
            for line in lines_of(fid):
                total_t[line] = total_t.get(line, 0) + t
        out = [{"source": s, "self_ns": self_t.get(s, 0), "total_ns": t} for s, t in total_t.items()]
        out.sort(key=lambda r: (-r["self_ns"], -r["total_ns"], r["source"]))
        return out[:limit]

    return {"cpu": rank_lines(cpu), "device": rank_lines(dev), "has_frames": True}


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
    }


def summary(run: Run) -> dict:
    return {"ranks": [rank_summary(run, r) for r in ranks(run)]}
