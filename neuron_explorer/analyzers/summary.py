"""The summary of a run: every figure of a rank (the `summary` of report.json), for one rank or for
many at once.

The summary puts together the figures of the modules below it: span, steps, devices,
communication (metrics.py), top-level operators and time per source line (lines.py), what bounds
each step (critical_path.py), utilisation (utilisation.py) and the exclusive device time
(device_time.py). Each number is defined in
docs/METRICS.md. The engine, and through it the rules, read it.

Must not: compute a figure itself (the modules below do; `rank_summaries` only groups their
queries by rank), decide what is a problem, or render anything.
"""

from __future__ import annotations

from ..store import Run
from ..vocab import training_work
from .critical_path import RANK_QUERIES as _PATH_QUERIES
from .critical_path import bound as _step_bound
from .device_time import achieved as _achieved
from .device_time import breakdown as _device_time
from .device_time import breakdowns as _device_times
from .device_time import cpu_comm, cpu_comm_of, cpu_comm_sql, windows_many
from .lines import RANK_QUERIES as _LINES_QUERIES
from .lines import rank_top_level_ops, self_and_total, top_level_ops, top_level_ops_sql
from .metrics import (
    DEVICE_BUSY,
    DEVICES,
    LAST_RECORDED,
    SPANS,
    STEPS,
    busy_rows,
    covered_within,
    device_events_lost,
    device_summary,
    device_unions_many,
    devices,
    graph_replays,
    open_ended_steps,
    peak_memory,
    rank_entry,
    ranks,
    select_steady_steps,
    span,
    step_stats,
    step_stats_of_selection,
    trains,
)
from .metrics import RANK_QUERIES as _METRICS_QUERIES
from .utilisation import RANK_QUERIES as _UTILISATION_QUERIES
from .utilisation import rank_utilisation

RANK_QUERIES = _METRICS_QUERIES + _UTILISATION_QUERIES + _PATH_QUERIES + _LINES_QUERIES
"""The per-rank queries of the figures `complete_summary` adds rank by rank (rank_rows.py): the
engine runs each once per batch of ranks, grouped by rank."""


def source_lines(run: Run, rank: int, limit: int = 10) -> dict:
    """Top user source lines by CPU time and by device time, self and total, by the one definition
    of time per source line (analyzers/lines.py, METRICS.md)."""
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
    out = {
        "rank": rank,
        **sp,
        "steps": steps,
        "analysed_ns": steps["total_ns"] if steps["count"] else sp["span_ns"],
        "devices": [device_summary(run, rank, d) for d in devices(run, rank)],
        "device_events_lost": device_events_lost(rank_entry(run, rank)),
        "graph_replays": graph_replays(rank_entry(run, rank)),
        "training": trains(run, rank),
        **cpu_comm(run, rank),
        **rank_top_level_ops(run, rank),
        "source_lines": source_lines(run, rank),
        "bound": _bound(run, rank),
        "utilisation": _utilisation(run, rank),
        "device_time": _device_time(run, rank),
        "peak_memory": peak_memory(run, rank),
    }
    out["achieved"] = _achieved(out["utilisation"], out["device_time"], out["analysed_ns"])
    return out


def _utilisation(run: Run, rank: int) -> dict:
    """FLOPs, MFU and roofline (utilisation.py)."""
    return rank_utilisation(run, rank)


def _bound(run: Run, rank: int) -> dict:
    """What bounds each step, from its critical path (critical_path.py)."""
    return _step_bound(run, rank)


def summary(run: Run) -> dict:
    return {"ranks": [rank_summary(run, r) for r in ranks(run)]}


# ---- the same numbers for many ranks at once ---------------------------------------------------

def rank_summaries(run: Run, ranks_: list[int], *, per_rank: bool = True) -> dict[int, dict]:
    """`rank_summary` of every rank in `ranks_`, the same numbers, with each set-based figure (span,
    steps, devices, busy, per-kind sums, communication, top-level operators, device time) computed by
    one query grouped by rank over all of them instead of one query per rank: a job of many small ranks
    then pays each query's fixed cost once. With per_rank=False the figures that are computed
    rank by rank (source_lines, bound, utilisation: `complete_summary` adds them) are left out."""
    want = [int(r) for r in ranks_]
    keep = set(want)
    spans, last = {}, {r: [] for r in want}
    for r, lo, hi, recorded in run.sql("SELECT rank, min(ts_ns), max(ts_ns + dur_ns), max(ts_ns + dur_ns) FILTER (WHERE kind <> 'step') "
                                       "FROM events WHERE kind <> 'other' GROUP BY rank").fetchall():
        spans[int(r)] = (lo, hi)
        if int(r) in keep and recorded is not None:
            last[int(r)] = [(recorded,)]  # LAST_RECORDED's rows, from the same scan (and SPANS', below)
    # the steps' and devices' rows are STEPS' and DEVICES' (metrics.py), prepared on the run for the
    # figures computed rank by rank that read them again
    steps_of: dict[int, list] = {r: [] for r in want}
    for r, *row in run.sql(STEPS.many).fetchall():
        if int(r) in keep:
            steps_of[int(r)].append(tuple(row))
    step_rows = {r: [(int(step), float(dur)) for step, _, dur in rows] for r, rows in steps_of.items()}
    open_ended = open_ended_steps(run)
    devs: dict[int, list[int]] = {r: [] for r in want}
    for r, d in run.sql(DEVICES.many).fetchall():
        if int(r) in keep:
            devs[int(r)].append(d)
    for q, got in ((STEPS, steps_of), (DEVICES, {r: [(d,) for d in ds] for r, ds in devs.items()}), (LAST_RECORDED, last),
                   (SPANS, {r: [spans[r]] if r in spans else [] for r in want})):
        run.prepared.setdefault(q.name, {}).update(got)
    # every device union of the batch's ranks, merged once from one read of their device work: the busy
    # figures, communication and its overlap here, device time below and device-idle's gaps (DEVICE_BUSY)
    unions = device_unions_many(run, want)
    prepared_busy = run.prepared.setdefault(DEVICE_BUSY.name, {})
    busy, comm = {}, {}
    for r in want:
        per = unions.get(r, {})
        prepared_busy[r] = busy_rows(per)
        for d, u in per.items():
            b = u["busy"]
            if len(b):  # as `busy_sql`'s sums over the union's rows
                lo, hi, ns = int(b[0, 0]), int(b[-1, 1]), int((b[:, 1] - b[:, 0]).sum())
                busy[(r, d)] = (ns, lo, hi, hi - lo, hi - lo - ns)
            if len(u["comm"]):  # as `comm_overlap_sql`: the collectives' union and its overlap with the other work's
                comm[(r, d)] = (int((u["comm"][:, 1] - u["comm"][:, 0]).sum()), covered_within(u["comm"], u["not_comm"]))
    sums: dict[tuple, dict] = {}
    for r, d, kind, ns in run.sql("SELECT rank, device, kind, sum(dur_ns)::BIGINT FROM events WHERE device IS NOT NULL "
                                  "GROUP BY rank, device, kind").fetchall():
        sums.setdefault((int(r), d), {})[kind] = ns
    # the host's collectives, over the analysed windows of the rows read above, the host work's unions
    # only for the ranks without a device
    windows = [(r, lo, hi) for r, ws in windows_many(run, want).items() for _, lo, hi in ws]
    cpu = {int(r): row for r, *row in run.sql(cpu_comm_sql(", ".join(str(r) for r in want), [r for r in want if not devs[r]],
                                                            windows)).fetchall()} if want else {}
    tops: dict[int, list] = {r: [] for r in want}
    for r, *row in run.sql(top_level_ops_sql(None)).fetchall():
        if int(r) in keep:
            tops[int(r)].append(row)
    entries = {int(e.get("rank", 0)): e for e in run.manifest.get("ranks", [])}
    training = {int(r) for r, in run.sql(f"SELECT DISTINCT rank FROM events WHERE {training_work()}").fetchall()}
    device_time = _device_times(run, want, unions)
    out = {}
    for r in want:
        lo, hi = spans.get(r, (None, None))
        sp = {"start_ns": lo, "end_ns": hi, "span_ns": (hi - lo) if lo is not None else 0}
        rows = step_rows[r]
        steps = step_stats_of_selection(select_steady_steps([s for s, _ in rows], [d for _, d in rows], open_ended=open_ended))
        devices_ = []
        for d in devs[r]:
            b = dict(zip(("busy_ns", "window_start_ns", "window_end_ns", "window_ns", "idle_ns"), busy.get((r, d), (None,) * 5)))
            ks = sums.get((r, d), {})
            c, o = comm.get((r, d), (0, 0))
            devices_.append({"device": d, **{k: (int(v) if v is not None else 0) for k, v in b.items()},
                             "kernel_ns": int(ks.get("kernel") or 0), "memcpy_ns": int(ks.get("memcpy") or 0),
                             "memset_ns": int(ks.get("memset") or 0),
                             "comm_ns": int(c or 0), "comm_overlap_ns": int(o or 0), "comm_exposed_ns": int((c or 0) - (o or 0))})
        out[r] = {"rank": r, **sp, "steps": steps, "analysed_ns": steps["total_ns"] if steps["count"] else sp["span_ns"],
                  "devices": devices_, "device_events_lost": device_events_lost(entries.get(r)),
                  "graph_replays": graph_replays(entries.get(r)),
                  "training": r in training,
                  **cpu_comm_of(cpu.get(r)), **top_level_ops(tops[r]),
                  "device_time": device_time[r]}
        if per_rank:
            complete_summary(run, out[r])
    return out


def complete_summary(run: Run, summary: dict) -> dict:
    """Add to a summary of `rank_summaries(..., per_rank=False)` the figures computed rank by rank
    (source lines, what bounds each step, utilisation), in `rank_summary`'s order of keys (the
    device time, grouped by rank there, moves to its place)."""
    rank = summary["rank"]
    device_time = summary.pop("device_time", None)
    summary["source_lines"] = source_lines(run, rank)
    summary["bound"] = _bound(run, rank)
    summary["utilisation"] = _utilisation(run, rank)
    summary["device_time"] = _device_time(run, rank) if device_time is None else device_time
    summary["peak_memory"] = peak_memory(run, rank)
    summary["achieved"] = _achieved(summary["utilisation"], summary["device_time"], summary["analysed_ns"])
    return summary
