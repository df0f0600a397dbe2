"""load-imbalance: some ranks have more work per step than the others, who then wait for them.

With several ranks: per profiler step that every rank with steps recorded, each rank's work is its
device busy time without collectives (the union of its kernel, memcpy and memset intervals other
than collective kernels, by their launch's step), or on CPU-only ranks its host compute (the union
of its top-level CPU operators other than collectives); analyzers/ranks.py and docs/METRICS.md
"Across ranks" define it. Collectives are left out: a rank that waits longer in them is not busier.
Per step, the heaviest rank's work is compared with the median rank's (the lower middle value).
Fires when the summed excess (max minus median) is at least IMBALANCE_SHARE_MIN of the heaviest
rank's analysed time. The finding is located on the rank with the most work over those steps, lists
the heaviest ranks and the max and median of the ranks' totals, and the steps in which it was the
heaviest. Impact: the sum over steps of the heaviest rank's work minus the median rank's. Saving
bound: the sum over steps of the heaviest rank's work minus the mean (model: the step's work spread
evenly over the ranks, none is longer than the mean; the other ranks stop waiting for the heaviest).
Not applicable with one rank or without a step recorded by every rank.
"""

from __future__ import annotations

from .. import ranks as xr
from ..engine import Context, NotApplicable
from ..model import Location
from ._util import ms

RULE_ID = "load-imbalance"
TITLE = "Load imbalance: uneven work per rank"
CATEGORY = "communication"
SCOPE = "run"
THRESHOLDS = {
    "IMBALANCE_SHARE_MIN": 0.05,  # sum over steps of (max - median work) / the heaviest rank's analysed time
    "HEAVIEST_SHOWN": 3,  # ranks named in the text
}


def prepare(run) -> None:
    """The per-step work the check reads (kept per open run; engine._prepare_run_rules)."""
    xr.imbalance(run)


def check(ctx: Context) -> list:
    if len(ctx.summaries) < 2:
        raise NotApplicable("one rank only: load imbalance needs several ranks in the run")
    got = xr.imbalance(ctx.run)
    per_step = [s for s in got["steps"] if s["ranks"] >= 2]
    if not per_step:
        raise NotApplicable("no profiler step recorded by every rank: no common steps to compare the ranks' work on")
    totals = got["ranks"]
    heaviest = totals[0]
    rank = int(heaviest["rank"])
    excess = sum(int(s["max_ns"] - s["median_ns"]) for s in per_step)
    saving = sum(int(round(s["max_ns"] - s["mean_ns"])) for s in per_step)
    denom = ctx.summaries.get(rank, {}).get("analysed_ns")
    if not denom or excess / denom < THRESHOLDS["IMBALANCE_SHARE_MIN"]:
        return []
    works = sorted(int(t["work_ns"]) for t in totals)
    median_total = works[(len(works) - 1) // 2]
    on_device = all(s["on_device"] for s in per_step)
    what = "device busy time (without collectives)" if on_device else "host compute (top-level operators, without collectives)"
    steps = [int(s["step"]) for s in per_step if s["heaviest_rank"] == rank and s["max_ns"] > s["median_ns"]]
    shown = totals[:THRESHOLDS["HEAVIEST_SHOWN"]]
    sql = f"{xr.imbalance_sql()}"
    return [ctx.finding(
        title=f"Load imbalance: rank {rank} has {ms(heaviest['work_ns'])} of {what} over {len(per_step)} common steps, "
              f"the median rank {ms(median_total)}",
        impact_ns=excess, saving_bound_ns=saving, rank=rank, location=Location(rank=rank, steps=steps),
        sql=sql, values={"work": "device" if on_device else "host", "heaviest_rank": rank, "max_work_ns": int(heaviest["work_ns"]),
                         "median_work_ns": median_total, "excess_ns": excess, "balanced_saving_ns": saving, "steps": len(per_step),
                         "heaviest_ranks": [{"rank": int(t["rank"]), "work_ns": int(t["work_ns"])} for t in shown],
                         "saving_model": "the step's work spread evenly over the ranks: the heaviest does the mean"},
        recommendation="Heaviest ranks: " + ", ".join(f"rank {int(t['rank'])} {ms(t['work_ns'])}" for t in shown)
        + f" (median {ms(median_total)}). Balance the work per rank: shard data by tokens or cost rather than by count, "
        "balance pipeline stages and expert routing, and look for work only some ranks do (logging, evaluation, checkpointing).",
    )]
