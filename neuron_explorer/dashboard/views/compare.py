"""The compare view's queries: two runs served by the dashboard, named by index.

`compare` is `analyzers.diff.compare` on the two runs (step time over the steady-state steps, with
the steps used and left out, medians, the test used, its p-value, effect size and verdict; the
delta lists per source line, module, operator and kernel), cached per
(base, test) pair and returned without paths. `compare_timeline` is the existing timeline view
of one step of each run, aligned: both windows start where the step starts (x = 0) and have the
same length — the longer of the two steps plus a margin — so both are drawn to the same time
scale and the slower step visibly extends further.

Must not: re-implement the comparison or the timeline (it calls diff.compare and
timeline.timeline_arrays), draw, or accept a path.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from ..runs import OpenRun, QueryError, RunSet
from ..runs import parse_int as _int
from ..timeline import _jsonable, timeline_arrays

if TYPE_CHECKING:  # the diff (its statistics) is imported when two runs are first compared, not with the dashboard
    from ...analyzers import diff as diff_mod

DELTA_TYPES = ("source_line", "module", "operator", "kernel")
DELTA_LIMIT = 500
"""Most rows returned per delta list (the answer says when it cut)."""
WINDOW_MARGIN = 0.04
"""The aligned windows run this share past the longer step, so its end is visible."""

_cache: "weakref.WeakKeyDictionary[RunSet, dict]" = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def _pair(rs: RunSet, base, test) -> tuple[OpenRun, OpenRun]:
    b, t = rs.get(base), rs.get(test)
    if b.index == t.index:
        raise QueryError(f"base and test are the same run ({b.index}); pick two different runs")
    return b, t


def _diff(rs: RunSet, b: OpenRun, t: OpenRun) -> diff_mod.Diff:
    """diff.compare of the pair, computed once per (base, test) and RunSet. A per-pair lock keeps
    two simultaneous requests from computing it twice."""
    with _cache_lock:
        per_rs = _cache.setdefault(rs, {})
        slot = per_rs.setdefault((b.index, t.index), {"lock": threading.Lock(), "diff": None})
    from ...analyzers import diff as diff_mod

    with slot["lock"]:
        if slot["diff"] is None:
            slot["diff"] = diff_mod.compare(b.path, t.path)
        return slot["diff"]


def compare(rs: RunSet, base=0, test=1, limit=None) -> dict:
    """The comparison of run `test` against run `base` (docs/COMPARE.md has every definition).

    step_time: per-run samples over the steady steps (n, median, mean, std, 95% CI in ns), the
    steps used and left out (steps.base / steps.test), delta_ns (change of the median), its
    bootstrap CI, test_name, p_value, effect_size, significant, verdict and reason. deltas: per
    type (source_line, module, operator, kernel) the rows of diff.compare in its order (largest
    absolute change per step first), with counts of all and of significant rows."""
    from ...analyzers import diff as diff_mod

    b, t = _pair(rs, base, test)
    limit = _int(limit, "limit", DELTA_LIMIT)
    if limit < 1:
        raise QueryError(f"limit must be at least 1, got {limit}")
    d = _diff(rs, b, t).to_dict()  # NaN already null
    step_time = {**d["step_time"], "runs": {role: [{k: v for k, v in x.items() if k != "path"} for x in recs]  # no paths in answers
                                            for role, recs in (d["step_time"].get("runs") or {}).items()}}
    deltas, cut = {}, False
    for type_ in DELTA_TYPES:
        rows = [x for x in d["deltas"] if x["type"] == type_]
        deltas[type_] = {"rows": rows[:limit], "total_rows": len(rows), "significant": sum(1 for x in rows if x["significant"]),
                         "truncated": len(rows) > limit}
        cut |= len(rows) > limit
    return {"base": _who(b), "test": _who(t), "step_time": step_time, "deltas": deltas, "notes": d["notes"],
            "alpha": diff_mod.ALPHA, "min_share_of_step": diff_mod.MIN_SHARE_OF_STEP, "truncated": cut}


def _who(r: OpenRun) -> dict:
    return {"run": r.index, "name": r.name}


def _step_spans(r: OpenRun) -> dict[int, tuple[int, int]]:
    """step number → (start, end) ns over all ranks: the earliest rank's start to the latest end."""
    out: dict[int, tuple[int, int]] = {}
    for s in r.steps():
        a, e = s["ts_ns"], s["ts_ns"] + s["dur_ns"]
        if s["step"] in out:
            a0, e0 = out[s["step"]]
            a, e = min(a, a0), max(e, e0)
        out[s["step"]] = (a, e)
    return out


def aligned_windows(rs: RunSet, base=0, test=1, step=None) -> dict:
    """Where each run's timeline window starts and ends for one step (no events read).

    The step is one both runs have (default: the middle one of those, away from warm-up). When a
    run has no profiler steps, or they share no step number, the whole runs are aligned at
    their first events instead (step is None)."""
    b, t = _pair(rs, base, test)
    spans_b, spans_t = _step_spans(b), _step_spans(t)
    common = sorted(set(spans_b) & set(spans_t))
    if common:
        if step is None or step == "":
            chosen = common[(len(common) - 1) // 2]
        else:
            chosen = _int(step, "step")
            if chosen not in common:
                raise QueryError(f"step {chosen} is not in both runs (steps in both: {_ranges(common)})")
        (b0, b1), (t0, t1) = spans_b[chosen], spans_t[chosen]
    else:
        if step not in (None, ""):
            raise QueryError("the two runs share no profiler step number: only whole runs can be aligned")
        chosen = None
        (b0, b1), (t0, t1) = b.span(), t.span()
    length = max(b1 - b0, t1 - t0, 1)
    window = length + max(int(length * WINDOW_MARGIN), 1)
    runs = []
    for r, a, e in ((b, b0, b1), (t, t0, t1)):
        runs.append({**_who(r), "t0": a, "t1": a + window, "step_start_ns": a, "step_dur_ns": e - a,
                     "start_ms": (a - r.span()[0]) / 1e6})
    change = (runs[1]["step_dur_ns"] - runs[0]["step_dur_ns"]) / runs[0]["step_dur_ns"] * 100 if runs[0]["step_dur_ns"] else None
    return {"step": chosen, "steps": common, "window_ns": window, "base": runs[0], "test": runs[1], "dur_change_pct": change}


def _ranges(xs: list[int]) -> str:
    return f"{xs[0]}..{xs[-1]}" if len(xs) > 3 and xs == list(range(xs[0], xs[-1] + 1)) else ", ".join(map(str, xs))


def compare_timeline_arrays(rs: RunSet, base=0, test=1, step=None, width=None) -> dict:
    """`aligned_windows` with each run's timeline of its window (timeline.timeline_arrays: offsets
    are µs from the step's start, so the same step number starts at x = 0 in both)."""
    w = aligned_windows(rs, base=base, test=test, step=step)
    for side in ("base", "test"):
        x = w[side]
        x["timeline"] = timeline_arrays(rs, run=x["run"], t0=x["t0"], t1=x["t1"], width=width)
    return w


def compare_timeline(rs: RunSet, base=0, test=1, step=None, width=None) -> dict:
    """One step of each run on the same time scale: the windows (`aligned_windows`) and each run's
    timeline (the `timeline` view's data) under base.timeline and test.timeline."""
    return _jsonable(compare_timeline_arrays(rs, base=base, test=test, step=step, width=width))
