"""launch-overhead: many short kernels, each paying a launch.

Counts kernels shorter than SHORT_KERNEL_NS on each device, leaving out the kernels a CUDA/HIP graph
replays (`events.graph`): a graph launch issues all of them in one call, so they pay no launch each
and the advice (fuse, capture a graph) is already taken. When there are many per steady step
(metrics.steady_steps: warm-up and a partial last step left out; without steps, in the analysed
window) and they make up most kernels, the time the host spends in their launch calls (the runtime call that
launched each one, `launch_id`) is the cost: the device finishes each kernel faster than the host
can issue the next. Impact: host time in the launch calls of the short kernels, each call counted
once — a call that launched many kernels (a CUDA/HIP graph launch, a multi-kernel launch) is
charged once, not once per kernel — as the union of the calls' intervals (`launch_ns`; with profiler steps,
the calls inside steps), and with steps the part of it in which the steps' critical path runs on the
host (`on_path_ns`, critical_path.host_union: a launch while the device works through earlier work
costs the step nothing), reported when it is at least LAUNCH_SHARE_MIN of the analysed time (MTIA's
890 short kernels were launched in 0.87 ms of a 459.67 ms window: nothing to gain). Saving bound: the
same (fusion, torch.compile or CUDA graphs remove most launches). In a training run, where the
short kernels launched inside Optimizer.zero_grad (its range, vocab.ZERO_GRAD_RANGE) are ZERO_GRAD_SHARE_MIN
of those counted or more, the advice first names them (a step's count) and set_to_none=True: before
torch 2.0 zero_grad zeroed each gradient with a kernel of its own. Where the first launch of each
kernel name holds half the launch time or more (`first_launch_ns`: loading the kernels' code, as
critical-path's one-off launch is for one call), the advice says so first, and to profile steady steps.
On a rank that runs a serving engine (its operators or Python calls show vLLM or SGLang:
vocab.SERVING_ENGINES), the advice names the engine's own switches for graphs and torch.compile
(peaks.ENGINE_GRAPHS, ENGINE_COMPILE: vLLM's enforce_eager and compilation_config, SGLang's
--disable-cuda-graph, --cuda-graph-max-bs and --enable-torch-compile), as every rule's graph advice
does (_util.graph_tip): the engine's model runner captures the graphs, not the user's code, and where
the rank replays some already, it says so and names what graphs leave out.
"""

from __future__ import annotations

import numpy as np

from ...vocab import ZERO_GRAD_RANGE, in_steps
from .. import critical_path as cp
from .. import metrics
from .. import peaks as P
from ..engine import Context
from ..metrics import per_step_words, union_of_sql
from ..model import Location
from ._util import ENGINE, SET_TO_NONE, STEADY_STEPS, graph_tip, ms, no_device, q, row, serving_engine_of

RULE_ID = "launch-overhead"
TITLE = "Kernel launch overhead: many short kernels"
CATEGORY = "launch_overhead"
SCOPE = "rank"
THRESHOLDS = {
    "SHORT_KERNEL_NS": 10_000,  # a kernel shorter than this is 'short'
    "SHORT_KERNELS_PER_STEP_MIN": 100,  # at least this many short kernels per step (or in total without steps)
    "SHORT_KERNEL_FRACTION_MIN": 0.5,  # and at least this fraction of all kernels
    "LAUNCH_SHARE_MIN": 0.01,  # and their launch calls at least this share of the analysed time
    "ZERO_GRAD_SHARE_MIN": 0.10,  # short kernels launched inside Optimizer.zero_grad / those counted: named in the advice
}
RANK_QUERIES = (ENGINE,)
"""The serving engine each rank runs, for the graph advice (_util.serving_engine_of): once per batch."""


def screen(run, summaries: dict) -> set[int]:
    """Ranks without a device (not applicable) and those with a device whose short kernels pass
    both of the check's counts."""
    t = THRESHOLDS
    out = no_device(summaries)
    for r, _d, short, kernels in run.sql(f"SELECT rank, device, count(*) FILTER (WHERE dur_ns < {t['SHORT_KERNEL_NS']}), count(*) "
                                        "FROM events WHERE kind = 'kernel' AND NOT graph GROUP BY rank, device").fetchall():
        if r in summaries and kernels and short / max(summaries[r]["steps"]["count"], 1) >= t["SHORT_KERNELS_PER_STEP_MIN"] \
                and short / kernels >= t["SHORT_KERNEL_FRACTION_MIN"]:
            out.add(r)
    return out


def _calls_sql(rank: int, device: int, stepped: bool) -> str:
    """The CTEs `k` (the device's kernels not replayed by a graph, `first`: the first of its name) and
    `l` (each launch call of a short one once, `first`: it launched a name's first kernel; with steps,
    the calls inside them)."""
    short = f"k.dur_ns < {THRESHOLDS['SHORT_KERNEL_NS']}"
    launch_in_steps = " AND step IS NOT NULL" if stepped else ""  # with steps, the launches in them
    # each launch call once: a graph launch that ran 280 short kernels costs its own duration, not 280 times it
    return f"""WITH k AS (SELECT event_id, dur_ns, launch_id, step,
        row_number() OVER (PARTITION BY name ORDER BY ts_ns, event_id) = 1 AS first FROM events k
      WHERE k.rank = {int(rank)} AND k.device = {int(device)} AND k.kind = 'kernel' AND NOT k.graph),
l AS (SELECT ts_ns, ts_ns + dur_ns AS end_ns, event_id IN (SELECT launch_id FROM k WHERE first) AS first FROM events
      WHERE rank = {int(rank)} AND dur_ns > 0{launch_in_steps} AND event_id IN (SELECT launch_id FROM k WHERE {short}))"""


def _figures(ctx: Context, device: int) -> tuple[dict, str, str, int, str]:
    """The device's figures (one row: short kernels, launches, `launch_ns`, first launches...), the
    query that gives them, its launch calls' CTEs (`_calls_sql`), the steady steps counted (0: over
    the window) and the SQL test of a kernel `k` in them."""
    steady = ctx.steady_steps
    steps = len(steady) if steady is not None else 0  # per steady step; 0: over the window
    short = f"k.dur_ns < {THRESHOLDS['SHORT_KERNEL_NS']}"
    # counted per step: the short kernels of the steady steps (warm-up and a partial last step left out)
    in_steady = in_steps(steady, "k") if steady is not None else "TRUE"
    calls = _calls_sql(ctx.rank, device, bool(ctx.summary["steps"]["count"]))
    sql = f"""{calls},
u AS ({union_of_sql("SELECT ts_ns, end_ns FROM l")}),
uf AS ({union_of_sql("SELECT ts_ns, end_ns FROM l WHERE first")})
SELECT count(*) FILTER (WHERE {short}) AS short_kernels, count(*) AS kernels,
  count(*) FILTER (WHERE {short} AND {in_steady}) AS short_kernels_counted, count(*) FILTER (WHERE {in_steady}) AS kernels_counted,
  coalesce(sum(k.dur_ns) FILTER (WHERE {short}), 0)::BIGINT AS short_kernel_ns,
  (SELECT count(*) FROM l) AS launches,
  (SELECT coalesce(sum(end_ns - start_ns), 0) FROM u)::BIGINT AS launch_ns,
  (SELECT count(*) FROM l WHERE first) AS first_launches,
  (SELECT coalesce(sum(end_ns - start_ns), 0) FROM uf)::BIGINT AS first_launch_ns,
  min(k.event_id) FILTER (WHERE {short}) AS sample_id
FROM k"""
    return row(ctx.run, sql), sql, calls, steps, in_steady


def _many_launches(ctx: Context, v: dict, steps: int, launch_ns: int) -> bool:
    """The counts and the launch time (`launch_ns`: the launches' union, or with steps their time on
    the critical path) the finding needs: SHORT_KERNELS_PER_STEP_MIN, SHORT_KERNEL_FRACTION_MIN,
    LAUNCH_SHARE_MIN of the analysed time."""
    return bool(v["kernels_counted"]) and v["short_kernels_counted"] / max(steps, 1) >= THRESHOLDS["SHORT_KERNELS_PER_STEP_MIN"] \
        and v["short_kernels"] / v["kernels"] >= THRESHOLDS["SHORT_KERNEL_FRACTION_MIN"] \
        and bool(ctx.analysed_ns) and launch_ns / ctx.analysed_ns >= THRESHOLDS["LAUNCH_SHARE_MIN"]


def first_launches(ctx: Context) -> tuple[np.ndarray, str | None]:
    """Without profiler steps, the launch calls that this rule's findings name as first launches (the
    devices whose finding says its launch time is mostly kernels' first launches, `_mostly_first`):
    their union, and SQL that selects them (ts_ns, end_ns); else (empty, None). device-idle leaves
    the device's idle while the host is in them to this rule (TraceLens's normalisation test on an
    MI300X: 726.51 of the 727.21 ms launching, inside device-idle's 1,187.80 ms). With steps the
    critical path's one-off launch is that call (critical_path.one_off_launch)."""
    none = np.empty((0, 2), dtype=np.int64), None
    if ctx.summary["steps"]["count"] or not ctx.has_device():
        return none
    parts = []
    for dev in ctx.summary["devices"]:
        v, _, calls, steps, _ = _figures(ctx, dev["device"])
        if _many_launches(ctx, v, steps, v["launch_ns"]) and _mostly_first(v):
            parts.append(f"{calls} SELECT ts_ns, end_ns FROM l WHERE first")
    if not parts:
        return none
    sql = " UNION ALL ".join(f"SELECT * FROM ({p})" for p in parts)
    got = np.asarray(ctx.run.sql(sql).fetchall(), dtype=np.int64).reshape(-1, 2)
    return metrics.union_array(got[:, 0], got[:, 1]), sql


def check(ctx: Context) -> list:
    ctx.require_device()
    out = []
    for dev in ctx.summary["devices"]:
        d = dev["device"]
        v, sql, calls, steps, in_steady = _figures(ctx, d)
        if not _many_launches(ctx, v, steps, v["launch_ns"]):
            continue
        # with steps, what the launches cost is their time on the critical path: while the device works through what
        # was launched before, a launch costs the step nothing
        on_path = _on_path_ns(ctx, calls) if ctx.summary["steps"]["count"] else None
        impact = v["launch_ns"] if on_path is None else on_path
        if on_path is not None and not _many_launches(ctx, v, steps, on_path):
            continue
        rate = (f" ({per_step_words(v['short_kernels_counted'], steps)} over {steps} steady steps)" if steps
                else f" {per_step_words(v['short_kernels'], 0)} ({ms(ctx.analysed_ns)})")
        top = row(ctx.run, f"""SELECT o.name AS op, any_value(k.source_frame_id) AS frame_id, count(*) AS n
            FROM events k JOIN events o ON o.event_id = k.top_op_id
            WHERE k.rank = {ctx.rank} AND k.device = {d} AND k.kind = 'kernel' AND NOT k.graph AND k.dur_ns < {THRESHOLDS['SHORT_KERNEL_NS']}
            GROUP BY o.name ORDER BY n DESC, o.name LIMIT 1""")
        zeroing = _zero_grad_words(ctx, d, in_steady, v["short_kernels_counted"], steps) if ctx.trains() else ""
        out.append(ctx.finding(
            title=f"{v['short_kernels']} short kernels on device {d}{rate}, {ms(v['launch_ns'])} launching them"
                  + (f" ({v['launches']} launch calls)" if v["launches"] < v["short_kernels"] else "")
                  + (f", {ms(v['first_launch_ns'])} of it first launches (loading {v['first_launches']} kernels' code)"
                     if _mostly_first(v) else "")
                  + (f", {ms(on_path)} of it on the critical path" if on_path is not None else ""),
            impact_ns=impact, saving_bound_ns=impact,
            location=Location(device=d, op=top["op"], source=ctx.source_of(top["frame_id"])),
            sql=sql, values={**{k: v[k] for k in ("short_kernels", "kernels", "short_kernel_ns", "launches", "launch_ns",
                                                  "first_launches", "first_launch_ns")}, "on_path_ns": on_path,
                             "short_kernels_per_step": v["short_kernels_counted"] / steps if steps else None},
            sample_event_ids=[v["sample_id"]] if v["sample_id"] else [], uses_source=True,
            recommendation=(first := _first_launch_words(v)) + f"{'m' if first else 'M'}ost kernels run under "
            f"{THRESHOLDS['SHORT_KERNEL_NS'] // 1000} us, so launches dominate"
            + (f" (most under {top['op']})" if top["op"] else "") + ". " + zeroing
            + "Fuse them: " + _fuse(graph_tip(ctx), serving_engine_of(ctx.run, ctx.rank)) + ", "
            + ("foreach/fused optimizers, " if ctx.trains() else "") + "larger batches.",
        ))
    return out


def _first_launch_words(v: dict) -> str:
    """What the advice says first where the first launch of each kernel name (`first_launch_ns`, the
    union of those calls) is at least half the launch time: loading the kernels' code, a one-off
    (critical_path.ONE_OFF_LAUNCH_WORDS, for one kernel) more likely than the cost of every launch.
    TraceLens's normalisation test (an MI300X): 147 short kernels launched in 727.21 ms, 4.9 ms a call,
    each kernel launched about once; it was told to fuse them. Else ""."""
    if not _mostly_first(v):
        return ""
    first, total = v["first_launch_ns"], v["launch_ns"]
    return (f"{ms(first)} of the {ms(total)} is the first launch of each of {v['first_launches']} kernels: a kernel's first "
            "launch loads its code (CUDA's lazy module loading, ROCm's code objects), a one-off that warm-up steps absorb, not "
            f"the cost of every launch. {STEADY_STEPS} to see what launching costs each iteration; if it does repeat: ")


def _on_path_ns(ctx: Context, calls: str) -> int | None:
    """The part of the launch calls' union (`calls`: the check's CTEs, `l` the calls) in which the
    steps' critical path runs on the host (critical_path.host_union)."""
    return cp.on_host_path_ns(ctx.run, ctx.rank, calls + " SELECT ts_ns AS start_ns, end_ns FROM l")


def _mostly_first(v: dict) -> bool:
    """The first launch of each kernel name (`first_launch_ns`) is at least half the launch time: the
    title says so, and the advice starts with it (`_first_launch_words`)."""
    first, total = v.get("first_launch_ns") or 0, v.get("launch_ns") or 0
    return bool(total) and first * 2 >= total


def _fuse(graphs: str, engine: str | None = None) -> str:
    """torch.compile and the device's way to launch fewer programs (once, where they are the same), each
    by a serving engine's own switch where the rank runs one (vocab.SERVING_ENGINES, peaks.compile_advice)."""
    return graphs if graphs.startswith("torch.compile") else P.compile_advice(engine) + ", " + graphs


def _zero_grad_words(ctx: Context, device: int, in_steady: str, counted: int, steps: int) -> str:
    """What the advice says first where the short kernels launched inside Optimizer.zero_grad are at
    least ZERO_GRAD_SHARE_MIN of those counted: zero_grad(set_to_none=False), torch's default before
    2.0, zeroes each gradient with a kernel of its own (a ResNet-50: 161 a step, 18% of the V100
    trace's short kernels); with set_to_none=True it launches none. Else ""."""
    n = row(ctx.run, f"""SELECT count(*) AS n FROM events k JOIN events l ON l.rank = k.rank AND l.event_id = k.launch_id
        JOIN events z ON z.rank = l.rank AND z.pid = l.pid AND z.tid = l.tid AND starts_with(z.name, {q(ZERO_GRAD_RANGE)})
          AND l.ts_ns >= z.ts_ns AND l.ts_ns + l.dur_ns <= z.ts_ns + z.dur_ns
        WHERE k.rank = {ctx.rank} AND k.device = {device} AND k.kind = 'kernel' AND NOT k.graph
          AND k.dur_ns < {THRESHOLDS['SHORT_KERNEL_NS']} AND {in_steady}""")["n"]
    if not counted or n < THRESHOLDS["ZERO_GRAD_SHARE_MIN"] * counted:
        return ""
    return (f"Optimizer.zero_grad launches {f'{n / steps:.0f} of them a step' if steps else f'{n} of them'}, one for each gradient it zeroes: "
            f"{SET_TO_NONE}. ")
