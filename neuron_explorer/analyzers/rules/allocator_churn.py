"""allocator-churn: device memory is allocated and freed through the driver inside the steps.

Finds runtime calls that allocate or free device memory outside the caching allocator's cache
(cudaMalloc, cudaFree, hipMalloc, hipFree, their async and driver variants: vocab.allocator_call)
inside the steady steps (metrics.steady_steps: warm-up, when the cache fills, is left out), or in
the whole span without steps. A free waits for the device and every call goes to the driver, so
with the caching allocator off the host spends the step in them and the operators around them
look slow. Names the operators the calls sit in (the innermost operator around each call, its
top-level operator with it), the user's source line where stacks exist, and the calls per step,
which choose the advice: frees in every steady step (at least FREES_PER_STEP_MIN each) mean the
cache is not caching — the caching allocator is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1, on ROCm
PYTORCH_NO_HIP_MEMORY_CACHING=1: `ENVIRONMENT`, by the calls' runtime) or `torch.cuda.empty_cache()` runs in the loop; calls in some
steps only, or mallocs without frees, mean the cache grows or is fragmented
(`expandable_segments:True`). Without steps the calls per step are unknown: the advice says so, and
says when one long call makes most of their time (first-use initialisation more likely than churn).
Impact: the union of the calls' intervals (over all threads; overlapping calls count once) within
the steady steps' ranges, or within the span without steps: never more than the analysed time.
Reported when it is at least ALLOC_SHARE_MIN of the analysed time. Saving bound: the same. Not
applicable on a CPU-only rank, or one whose trace recorded no runtime calls (no allocator call
could be seen); a rank whose runtime calls include no allocator call has no finding.
"""

from __future__ import annotations

import numpy as np

from ...vocab import allocator_call, allocator_free, in_steps
from .. import metrics
from ..engine import Context, NotApplicable
from ..model import Location
from ._util import STEADY_STEPS, ms, no_device, pct, ranks_with, row, rows

RULE_ID = "allocator-churn"
TITLE = "Device memory allocated and freed through the driver in the steps"
CATEGORY = "memory"
SCOPE = "rank"
THRESHOLDS = {
    "ALLOC_SHARE_MIN": 0.01,  # union of the allocator calls / analysed time
    "FREES_PER_STEP_MIN": 2,  # frees in every steady step, at least this many each: the cache is not caching
    "OPS_SHOWN": 3,  # operators named, by their calls' time
}

def _where(rank: int, steps, alias: str = "") -> str:
    """The rank's allocator calls; with steps, those in `steps` (the steady steps)."""
    a = f"{alias}." if alias else ""
    return f"{a}rank = {rank} AND {allocator_call(alias)}" + (f" AND {in_steps(steps, alias)}" if steps is not None else "")


def _steps_sql(rank: int, steps: list[int]) -> str:
    """Allocator time within the steady steps' ranges and the calls per step, from plain DuckDB."""
    free = allocator_free("e")
    return f"""WITH st AS (SELECT step, ts_ns AS s_ts, ts_ns + dur_ns AS s_end FROM steps WHERE rank = {rank} AND {in_steps(steps)}),
u AS ({metrics.union_sql(_where(rank, steps))}),
c AS (SELECT st.step, count(e.event_id) AS calls, count(e.event_id) FILTER (WHERE {free}) AS frees,
        count(e.event_id) FILTER (WHERE {free} AND e.op_id IS NOT NULL) AS frees_in_ops, coalesce(sum(e.dur_ns), 0) AS call_ns
      FROM st LEFT JOIN events e ON e.step = st.step AND {_where(rank, steps, 'e')} GROUP BY st.step)
SELECT (SELECT coalesce(sum(greatest(0, least(u.end_ns, st.s_end) - greatest(u.start_ns, st.s_ts))), 0)
        FROM u JOIN st ON u.start_ns < st.s_end AND st.s_ts < u.end_ns)::BIGINT AS alloc_ns,
  sum(calls)::BIGINT AS calls, sum(frees)::BIGINT AS frees, (sum(calls) - sum(frees))::BIGINT AS mallocs,
  sum(frees_in_ops)::BIGINT AS frees_in_ops, sum(call_ns)::BIGINT AS call_ns, count(*) AS steps,
  count(*) FILTER (WHERE calls > 0) AS steps_with_calls, min(frees)::BIGINT AS min_frees_per_step,
  list(frees ORDER BY step) AS frees_per_step, list(calls - frees ORDER BY step) AS mallocs_per_step,
  list(step ORDER BY step) AS step_numbers
FROM c"""


def claimed(calls: tuple, steps: tuple, steady: list[int] | None) -> np.ndarray:
    """The union this rule's impact measures, from the rank's allocator calls (`calls`: start_ns,
    end_ns and step arrays) and steps (`steps`: step, start_ns, end_ns arrays): with steps, the
    calls of the steady steps `steady` within the steady steps' ranges; without, every call
    (`_steps_sql`'s and `_window_sql`'s `alloc_ns`, as intervals: device-idle leaves the device's
    idle in them to this rule)."""
    start, end, step = (np.asarray(c, dtype=np.int64) for c in calls)
    if steady is None:
        return metrics.union_array(start, end)
    steady_ = np.asarray(sorted(steady), dtype=np.int64)
    keep = np.isin(step, steady_)
    s_step, s_start, s_end = (np.asarray(c, dtype=np.int64) for c in steps)
    mine = np.isin(s_step, steady_)
    return metrics.intersect_unions(metrics.union_array(start[keep], end[keep]), metrics.union_array(s_start[mine], s_end[mine]))


def intervals_sql(rank: int, steady: list[int] | None) -> str:
    """`claimed`'s intervals in plain DuckDB over `events` (rows ts_ns, end_ns; their union is
    `claimed`): the rank's allocator calls, with steps those of the steady steps cut to the steady
    steps' ranges (the `steps` view's, spelled over `events` so that the query needs nothing else)."""
    r = int(rank)
    if steady is None:
        return f"SELECT ts_ns, ts_ns + dur_ns AS end_ns FROM events WHERE {_where(r, None)}"
    return (f"SELECT greatest(e.ts_ns, s.ts_ns) AS ts_ns, least(e.ts_ns + e.dur_ns, s.ts_ns + s.dur_ns) AS end_ns FROM events e "
            f"JOIN (SELECT step, min(ts_ns) AS ts_ns, max(ts_ns + dur_ns) - min(ts_ns) AS dur_ns FROM events WHERE rank = {r} "
            f"AND kind = 'step' GROUP BY step) s ON {in_steps(steady, 's')} AND e.ts_ns < s.ts_ns + s.dur_ns "
            f"AND s.ts_ns < e.ts_ns + e.dur_ns WHERE {_where(r, steady, 'e')}")


def _window_sql(rank: int) -> str:
    """Allocator time and calls over the whole span (a rank without steps), from plain DuckDB."""
    free = allocator_free()
    return f"""WITH u AS ({metrics.union_sql(_where(rank, None))})
SELECT (SELECT coalesce(sum(end_ns - start_ns), 0) FROM u)::BIGINT AS alloc_ns, count(*) AS calls,
  count(*) FILTER (WHERE {free}) AS frees, count(*) FILTER (WHERE NOT {free}) AS mallocs,
  count(*) FILTER (WHERE {free} AND op_id IS NOT NULL) AS frees_in_ops, coalesce(sum(dur_ns), 0)::BIGINT AS call_ns,
  max(dur_ns)::BIGINT AS longest_call_ns
FROM events WHERE {_where(rank, None)}"""


SCREEN_WHERES = (allocator_call(), "kind = 'runtime'")
"""The allocator calls and runtime calls `screen` looks for (the engine asks for every rule's in one query: `ranks_with_many`)."""


def screen(run, summaries: dict) -> set[int]:
    """Ranks without a device or without runtime calls (not applicable) and those with an
    allocator call (the check decides on the share)."""
    found, runtime = (ranks_with(run, w, summaries) for w in SCREEN_WHERES)
    return no_device(summaries) | (set(summaries) - runtime) | found


ENVIRONMENT = {"cuda": ("PYTORCH_NO_CUDA_MEMORY_CACHING=1 is set in the environment", "PYTORCH_CUDA_ALLOC_CONF"),
               "rocm": ("PYTORCH_NO_HIP_MEMORY_CACHING=1, or PYTORCH_NO_CUDA_MEMORY_CACHING=1, which ROCm reads too, is set in "
                        "the environment", "PYTORCH_HIP_ALLOC_CONF")}
"""PyTorch's environment variables for the caching allocator, by runtime: what turns it off, and
where its options go (the HIP (ROCm) semantics notes name the HIP ones)."""


def _runtime(call_names) -> str:
    """'rocm' where the allocator calls are HIP's (hipMalloc, hipFree...), else 'cuda'."""
    return "rocm" if any((n or "").startswith("hip") for n in call_names) else "cuda"


def _advice(v: dict, stepped: bool, runtime: str = "cuda") -> str:
    t = THRESHOLDS
    turned_off, conf = ENVIRONMENT[runtime]
    off = f"the caching allocator is off ({turned_off}: unset it)"
    empty = "torch.cuda.empty_cache() is called in the loop (remove it; it returns the cache to the driver every time)"
    frees, inside = v["frees"] or 0, v["frees_in_ops"] or 0
    # frees inside operators are tensors released to the driver (no cache); a burst outside every
    # operator is an explicit empty_cache()
    causes = f"{off}, or {empty}" if inside * 2 >= frees else f"{empty}, or {off}"
    where = f" {inside} of the {frees} frees sit inside operators." if frees else ""
    grow = ("the caching allocator had to go to the driver for more memory: the cache grows (new tensor sizes, "
            "e.g. variable sequence lengths) or is fragmented (a free means it released cached blocks to retry an "
            f"allocation). Set {conf}=expandable_segments:True, keep shapes stable (pad or bucket "
            "variable lengths) and check the memory peak against the device's capacity")
    if not stepped:
        longest = v["longest_call_ns"] or 0
        one = (f" One call of {ms(longest)} is {pct(longest / v['call_ns'])} of their time: a single long call is more "
               "likely a one-off (the driver or a library initialising on first use) than churn."
               if v["call_ns"] and longest * 2 >= v["call_ns"] else "")
        return (f"No profiler steps, so whether these {v['calls']} calls ({v['mallocs']} allocations, {frees} frees) repeat "
                "every iteration cannot be told. Once, at start-up or in the first iteration, they are the cache filling "
                f"(a one-off).{one} If they repeat, frees in every iteration mean " + causes + "; allocations in some iterations "
                "only mean " + grow + ". " + STEADY_STEPS + " to tell." + where)
    if v["steps_with_calls"] == v["steps"] and (v["min_frees_per_step"] or 0) >= t["FREES_PER_STEP_MIN"]:
        return (f"Device memory goes back to the driver in every steady step (frees per step: {v['frees_per_step']}), "
                f"so the caching allocator is not caching: {causes}." + where
                + " With the cache on, steady steps make no allocator calls.")
    first = v["steps_with_calls"] == 1 and (v["frees_per_step"][0] or v["mallocs_per_step"][0])
    return (f"Allocator calls in {v['steps_with_calls']} of {v['steps']} steady steps (allocations per step: "
            f"{v['mallocs_per_step']}, frees: {v['frees_per_step']}): {grow}."
            + (" They are all in the first analysed step: if that step is still warm-up, profile later steps to confirm."
               if first else ""))


def check(ctx: Context) -> list:
    ctx.require_device()
    if not row(ctx.run, f"SELECT count(*) AS n FROM events WHERE rank = {ctx.rank} AND kind = 'runtime'")["n"]:
        raise NotApplicable("no runtime calls in this rank: the trace did not record the runtime API, so no allocator call could be seen")
    stepped = bool(ctx.summary["steps"]["count"])
    steady = list(ctx.summary["steps"]["steady_steps"]) if stepped else None
    sql = _steps_sql(ctx.rank, steady) if stepped else _window_sql(ctx.rank)
    v = row(ctx.run, sql)
    impact = int(v["alloc_ns"] or 0)
    if not ctx.analysed_ns or not v["calls"] or impact / ctx.analysed_ns < THRESHOLDS["ALLOC_SHARE_MIN"]:
        return []
    w = _where(ctx.rank, steady, "e")
    by_name = rows(ctx.run, f"SELECT e.name, count(*) AS calls, sum(e.dur_ns)::BIGINT AS ns FROM events e WHERE {w} "
                            "GROUP BY e.name ORDER BY ns DESC, e.name")  # the costliest call first: the one to remove

    ops = rows(ctx.run, f"""SELECT o.name AS op, arg_max(t.name, e.dur_ns) AS top_level, count(*) AS calls, sum(e.dur_ns)::BIGINT AS ns,
        min(e.event_id) AS sample_id
        FROM events e LEFT JOIN events o ON o.event_id = e.op_id LEFT JOIN events t ON t.event_id = e.top_op_id
        WHERE {w} GROUP BY o.name ORDER BY ns DESC, o.name NULLS LAST LIMIT {int(THRESHOLDS['OPS_SHOWN'])}""")
    line = row(ctx.run, f"""SELECT e.source_frame_id AS frame_id, sum(e.dur_ns)::BIGINT AS ns FROM events e
        WHERE {w} AND e.source_frame_id IS NOT NULL GROUP BY e.source_frame_id ORDER BY ns DESC, e.source_frame_id LIMIT 1""")
    source = ctx.source_of(line["frame_id"])
    top = next((o for o in ops if o["op"]), None)
    share = impact / ctx.analysed_ns
    names = ", ".join(f"{n['name']} x{n['calls']} {ms(n['ns'])}" for n in by_name[:3])
    op_txt = "; ".join(
        (f"{o['op']}" + (f" (in {o['top_level']})" if o["top_level"] and o["top_level"] != o["op"] else "") if o["op"]
         else "outside every operator") + f": {o['calls']} calls, {ms(o['ns'])}" for o in ops)
    values = {**v, "share": round(share, 6), "calls_by_name": {n["name"]: n["calls"] for n in by_name},
              "ns_by_name": {n["name"]: n["ns"] for n in by_name},
              "operators": [{k: o[k] for k in ("op", "top_level", "calls", "ns")} for o in ops]}
    return [ctx.finding(
        title=f"{v['calls']} device allocator calls ({names}) take {ms(impact)}, {pct(share)} of the analysed time",
        impact_ns=impact, saving_bound_ns=impact,
        location=Location(op=top["op"] if top else None, source=source,
                          steps=[s for s, n_f, n_m in zip(v["step_numbers"], v["frees_per_step"], v["mallocs_per_step"]) if n_f or n_m]
                          if stepped else []),
        sql=sql, values=values, sample_event_ids=[o["sample_id"] for o in ops], uses_source=True,
        recommendation=_advice(v, stepped, _runtime(n["name"] for n in by_name)) + (f" Where: {op_txt}." if op_txt else "")
        + (f" Source line: {source}." if source else ""),
    )]
