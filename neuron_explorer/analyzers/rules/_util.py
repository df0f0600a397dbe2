"""Small helpers shared by rules (private: may change)."""

from __future__ import annotations

from ...store import sql_literal as q  # noqa: F401  (rules write q(...) for a SQL string literal)
from ...vocab import serving_engine
from ..rank_rows import RankQuery
from ..rank_rows import rows as rank_rows

STEADY_STEPS = "Profile steady steps (torch.profiler.schedule(wait=1, warmup=1, active=3) with prof.step())"
"""How the advice says to see what each iteration costs, where what the trace shows may be a one-off."""
SEE_UNTRACED = "Record with with_stack=True, or sample the process (py-spy)"
"""How the advice says to see host time the trace holds no event for."""
SET_TO_NONE = "optimizer.zero_grad(set_to_none=True), torch's default since 2.0, launches none"
"""How the advice says to stop zero_grad zeroing each gradient with a kernel (vocab.ZERO_GRAD_RANGE)."""
FUSED_ATTENTION_LEFT = ("cut the padding (pack sequences of different lengths), keep the context no longer than needed, and check "
                        "which backend runs (torch.nn.attention.sdpa_kernel chooses among them)")
"""What is left for attention that runs fused already: critical-path's attention class and
device-underuse's attention below the roofline say it alike."""


def records_python(ctx) -> bool:
    """Whether the rank's trace records Python calls (the import counted some: with_stack's Python tracer)."""
    from ..metrics import rank_entry

    return bool((rank_entry(ctx.run, ctx.rank).get("counts") or {}).get("python"))


def ms(ns: float | int | None) -> str:
    """A finding's time in ms, thousands separated as fmt.duration writes it (13,336.25 ms, not 13336.25)."""
    return "n/a" if ns is None else f"{ns / 1e6:,.2f} ms"


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def row(run, sql: str) -> dict:
    rel = run.sql(sql)
    cols = [d[0] for d in rel.description]
    r = rel.fetchone()
    return dict(zip(cols, r)) if r else {c: None for c in cols}


def rows(run, sql: str) -> list[dict]:
    rel = run.sql(sql)
    cols = [d[0] for d in rel.description]
    return [dict(zip(cols, r)) for r in rel.fetchall()]


def no_device(summaries: dict) -> set[int]:
    """Ranks of `summaries` without device work: a rule that requires a device checks them to say
    it does not apply (for `screen`)."""
    return {r for r, s in summaries.items() if not s["devices"]}


RANKS_WITH = "ranks_with"
"""Where `ranks_with_many` keeps its answers on a run (`run.prepared`)."""


def ranks_with(run, where: str, summaries: dict) -> set[int]:
    """Ranks of `summaries` with at least one event matching `where` (SQL over `events`): one query
    over every rank of `run`'s views, for a rule whose check reports nothing on a rank without such
    events (for `screen`); none where the engine already asked (`ranks_with_many`, the conditions
    of every rule's SCREEN_WHERES)."""
    known = (getattr(run, "prepared", None) or {}).get(RANKS_WITH, {}).get(where)
    if known is None:
        known = {int(r) for (r,) in run.sql(f"SELECT DISTINCT rank FROM events WHERE {where}").fetchall()}
    return known & set(summaries)


def ranks_with_many(run, wheres) -> None:
    """`ranks_with`'s answer for each of `wheres` (SQL conditions over `events`), from one scan of
    the events of every rank of `run`'s views instead of one each, kept on `run.prepared`."""
    wheres = list(dict.fromkeys(wheres))
    if not wheres:
        return
    got: dict[str, set[int]] = {w: set() for w in wheres}
    flags = ", ".join(f"bool_or({w})" for w in wheres)
    for rank, *hit in run.sql(f"SELECT rank, {flags} FROM events WHERE " + " OR ".join(f"({w})" for w in wheres) + " GROUP BY rank").fetchall():
        for w, h in zip(wheres, hit):
            if h:
                got[w].add(int(rank))
    run.prepared.setdefault(RANKS_WITH, {}).update(got)


def share_at_least(summaries: dict, ns_by_rank: dict, share: float) -> set[int]:
    """Ranks of `summaries` whose figure in `ns_by_rank` is at least `share` of their analysed time
    (a screen's test: the check's threshold, or a bound of its figure)."""
    return {r for r, s in summaries.items() if s["analysed_ns"] and (ns_by_rank.get(r) or 0) >= share * s["analysed_ns"]}


def _device_of(ctx) -> tuple[str | None, list[dict]]:
    """The rank's device name and deviceProperties (the manifest's)."""
    from ..metrics import rank_entry
    from ..utilisation import device_name

    props = [p for p in (rank_entry(ctx.run, ctx.rank).get("device_properties") or []) if isinstance(p, dict)]
    return device_name(ctx.run, ctx.rank), props


def _arch_of(ctx, device: str | None):
    """The rank's detected architecture (utilisation.detect_device: its name, deviceProperties, a
    backend's own categories, its kernels' names), for the advice whose words follow the device."""
    from ..utilisation import detect_device

    return detect_device(ctx.run, ctx.rank, device).arch


def graph_tip(ctx) -> str:
    """peaks.graph_advice for the rank's device, and the serving engine it runs (`serving_engine_of`),
    which replays graphs already or not (metrics.graph_replays)."""
    from .. import peaks
    from ..metrics import graph_replays, rank_entry

    device, props = _device_of(ctx)
    return peaks.graph_advice(device, props, _arch_of(ctx, device), serving_engine_of(ctx.run, ctx.rank),
                              graph_replays(rank_entry(ctx.run, ctx.rank)) is not None)


ENGINE = RankQuery(
    "serving_engine",
    f"SELECT {serving_engine()} AS engine, count(*) AS n FROM events WHERE rank = ? AND kind IN ('cpu_op', 'python') "
    "GROUP BY 1 HAVING engine IS NOT NULL ORDER BY n DESC, engine",
    f"SELECT rank, {serving_engine()} AS engine, count(*) AS n FROM events WHERE kind IN ('cpu_op', 'python') "
    "GROUP BY 1, 2 HAVING engine IS NOT NULL ORDER BY 1, n DESC, engine")
"""The serving engines a rank's operators and Python calls show, most shown first (`serving_engine_of`);
a rule that gives graph advice lists it in its RANK_QUERIES, so that a batch of ranks reads it once."""


def serving_engine_of(run, rank: int) -> str | None:
    """The serving engine a rank runs (vocab.SERVING_ENGINES: the one most of its operators and Python
    calls show), None for none (ENGINE's rows: the batch's, else one query of the rank's)."""
    got = rank_rows(run, ENGINE, int(rank))
    return got[0][0] if got else None


def graph_kind(graphs: str) -> str:
    """'HIP' or 'CUDA': the graphs a device's graph advice (`graph_tip`, peaks.graph_advice) names, for
    words about graphs a trace replays (CUDA where the device runs none, or is not known)."""
    return "HIP" if graphs.startswith("HIP") else "CUDA"


def profiler_tip(ctx) -> str:
    """peaks.profiler_advice for the rank's device: the profiler that shows what held it beyond the trace."""
    from .. import peaks

    device, props = _device_of(ctx)
    return peaks.profiler_advice(device, props, _arch_of(ctx, device))


def step_bounds_sql(rank: int) -> str:
    """Rows (step, s0, s1): each profiler step of the rank, from its first start to its last end."""
    return f"SELECT step, min(ts_ns) AS s0, max(ts_ns + dur_ns) AS s1 FROM events WHERE rank = {int(rank)} AND kind = 'step' GROUP BY step"


def in_steps_ns_sql(alias: str, steps: str = "st") -> str:
    """SQL aggregate: the time of interval `alias` (ts_ns, dur_ns) inside the steps `steps`
    (step_bounds_sql rows, LEFT JOINed on overlap; 0 outside every step)."""
    return (f"coalesce(sum(greatest(least({alias}.ts_ns + {alias}.dur_ns, {steps}.s1) - greatest({alias}.ts_ns, {steps}.s0), 0)), 0)")


COMPILER_KERNEL = "(?i)triton"
"""A kernel a compiler generated: Inductor's (and Triton's) kernels on NVIDIA and AMD devices carry the name."""
MIN_COMPILED_KERNELS = 10
"""Kernels launched inside compiled code, at least, before none of them being generated says the backend generates none."""


def unfused_backend_words(ctx, names) -> str:
    """Where the top-level calls of torch.compile'd code named `names` (vocab.is_compiled_run) launched
    MIN_COMPILED_KERNELS kernels or more on the rank and none was generated by a compiler
    (COMPILER_KERNEL): the sentence that says its backend runs ATen's kernels one by one (as
    backend='aot_eager' does) and the default one would fuse them; else "". Only on NVIDIA and AMD
    devices, where Inductor's kernels are Triton's (a Trainium or MTIA compiler names its own). One query."""
    from .. import peaks

    device, props = _device_of(ctx)
    arch = _arch_of(ctx, device)
    if not names or arch is None or arch.vendor not in ("nvidia", "amd") or peaks.is_torchneuron_device(device, props):
        return ""
    kernels, generated = ctx.run.sql(f"""SELECT count(*), count(*) FILTER (WHERE regexp_matches(k.name, {q(COMPILER_KERNEL)}))
FROM events k JOIN events o ON o.rank = {int(ctx.rank)} AND o.event_id = k.top_op_id
WHERE k.rank = {int(ctx.rank)} AND k.kind = 'kernel' AND o.name IN ({", ".join(q(n) for n in sorted(set(names)))})""").fetchone()
    if kernels < MIN_COMPILED_KERNELS or generated:
        return ""
    return (f"None of the {kernels:,} kernels those calls launched was generated by the compiler (no Triton kernels): the "
            "backend runs each ATen operator's own kernel (as backend='aot_eager' does), so nothing is fused; the default "
            "backend, inductor, generates fused kernels. ")


def unseen_queue_words(ns: int, of: str, profiler: str) -> str:
    """The words for idle the critical path charges to work waiting behind work the trace does not show
    (critical_path.UNSEEN_QUEUE): `ns` of `of` (what it is part of: 'this time'), with the device's
    `profiler` (profiler_tip). critical-path's idle class and device-idle's longest gaps say it alike."""
    return (f"{ms(ns)} of {of} is device work that was ready (launched, its stream's earlier work done) yet waited while "
            "nothing the trace holds ran on any device: it waited behind work the trace does not show (a stream waiting on "
            "an event of work launched before the trace began, a CUDA/HIP graph's dependencies, another process on the "
            f"device, events the profiler dropped). {profiler} shows what held it")
