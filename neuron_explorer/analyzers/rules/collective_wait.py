"""collective-wait: ranks spend their steps in collectives waiting for the last rank to arrive.

With several ranks: a rank's wait at a collective instance is the last participant's arrival minus
its own arrival, on aligned clocks (analyzers/ranks.py; docs/METRICS.md "Across ranks"); its
collective wait is the sum over the instances it took part in, and its share that over its analysed
time. Fires when the mean share over ranks is at least WAIT_SHARE_MIN. The finding is located on the
rank that waits the most, names the collective and the steps it waited in most, and lists the ranks
that wait the most and the ranks they wait for (the last arrivals). Impact: the mean collective
wait over ranks (the time the average rank spends idle in collectives). Saving bound: the summed
balanced saving over instances, each the last arrival minus the mean arrival (model: were the work
before each collective spread evenly over its participants, all would arrive at the mean arrival
and the collective would start that much earlier). Not applicable with one rank or without a
collective matched on two ranks.
"""

from __future__ import annotations

from .. import ranks as xr
from ..engine import Context, NotApplicable
from ..model import Location
from ..rank_rows import arrow_of
from ._util import ms, pct

RULE_ID = "collective-wait"
TITLE = "Collective wait: ranks waiting for the last arrival"
CATEGORY = "communication"
SCOPE = "run"
THRESHOLDS = {
    "WAIT_SHARE_MIN": 0.05,  # mean over ranks of (collective wait / the rank's analysed time)
    "WORST_SHOWN": 3,  # ranks named in the text
}


def prepare(run) -> None:
    """The cross-rank figures and arrivals the check reads (kept per open run; engine._prepare_run_rules)."""
    xr.collective_waits(run)
    xr.arrivals(run)


def check(ctx: Context) -> list:
    if len(ctx.summaries) < 2:
        raise NotApplicable("one rank only: collective wait needs several ranks in the run")
    got = xr.collective_waits(ctx.run)
    if not got["instances"]:
        raise NotApplicable("no collective matched on two ranks (same name, same step, same order)")
    waits = [r for r in got["ranks"] if r["instances"] and r["wait_share"] is not None]
    if not waits:
        return []
    mean_share = sum(r["wait_share"] for r in waits) / len(waits)
    if mean_share < THRESHOLDS["WAIT_SHARE_MIN"]:
        return []
    mean_wait = sum(r["wait_ns"] for r in waits) // len(waits)
    worst = sorted(waits, key=lambda r: (-r["wait_share"], r["rank"]))
    top = worst[0]
    shown = THRESHOLDS["WORST_SHOWN"]
    waited_for = sorted((r for r in got["ranks"] if r["late_ns"] > 0), key=lambda r: (-r["late_ns"], r["rank"]))
    where = _where(ctx, top["rank"])
    sql = (f"SELECT (SELECT sum(wait_ns) // count(*) FROM ({xr.per_rank_sql()}) WHERE instances > 0) AS mean_wait_ns,\n"
           f"(SELECT balanced_saving_ns FROM ({xr.totals_sql()})) AS balanced_saving_ns,\n"
           f"(SELECT instances FROM ({xr.totals_sql()})) AS matched_instances")
    return [ctx.finding(
        title=f"Ranks wait {pct(mean_share)} of their step time in collectives for the last arrival; "
              f"rank {top['rank']} waits {ms(top['wait_ns'])} ({pct(top['wait_share'])})",
        impact_ns=mean_wait, saving_bound_ns=got["balanced_saving_ns"], rank=top["rank"],
        location=Location(rank=top["rank"], steps=where["steps"], op=where["op"], kernel=where["kernel"]),
        sql=sql, values={"mean_wait_ns": mean_wait, "mean_wait_share": round(mean_share, 6),
                         "worst_ranks": [{"rank": r["rank"], "wait_ns": r["wait_ns"], "wait_share": r["wait_share"]} for r in worst[:shown]],
                         "waited_for": [{"rank": r["rank"], "late_ns": r["late_ns"]} for r in waited_for[:shown]],
                         "balanced_saving_ns": got["balanced_saving_ns"], "matched_instances": got["instances"],
                         "saving_model": "were the work before each collective balanced, every rank would arrive at the mean arrival"},
        sample_event_ids=where["sample_ids"],
        recommendation="Most waiting: " + ", ".join(f"rank {r['rank']} {ms(r['wait_ns'])} ({pct(r['wait_share'])})" for r in worst[:shown])
        + (". They wait for " + ", ".join(f"rank {r['rank']} ({ms(r['late_ns'])} late)" for r in waited_for[:shown]) if waited_for else "")
        + ". Even out the work before the collectives (data shards, sequence lengths, rank-specific work) and see the "
        "rank-skew and load-imbalance findings for who is late and why.",
    )]


def _where(ctx: Context, rank: int) -> dict:
    """The collective and the steps the given rank waits in most (one grouped query over the run's
    arrivals, `ranks.arrivals`)."""
    got = arrow_of(ctx.run, f"""WITH w AS (SELECT name, skey, on_device, event_id, wait_ns FROM a
      WHERE rank = {int(rank)})
SELECT name, on_device, sum(wait_ns) AS wait_ns, list(DISTINCT skey ORDER BY skey) FILTER (WHERE wait_ns > 0) AS steps,
       arg_max(event_id, wait_ns) AS sample_id FROM w GROUP BY name, on_device ORDER BY wait_ns DESC, name LIMIT 1""",
                   [], {"a": xr.arrivals(ctx.run)}).to_pylist()
    if not got:
        return {"steps": [], "op": None, "kernel": None, "sample_ids": []}
    g = got[0]
    return {"steps": [s for s in (g["steps"] or []) if s >= 0], "op": None if g["on_device"] else g["name"],
            "kernel": g["name"] if g["on_device"] else None, "sample_ids": [g["sample_id"]] if g["sample_id"] is not None else []}
