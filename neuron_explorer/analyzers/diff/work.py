"""The work per step, base against test: how many operator calls the steady steps make, and that
work priced at the base's time per call — counts that the machine's speed does not move, which
the verdict can stand on (docs/COMPARE.md "The work per step").

Must not: read runs (collect.py does) or decide the verdict (verdict.py does).
"""

from __future__ import annotations

import math

from ..stats import mann_whitney, median
from .collect import Side
from .result import ALPHA, MIN_SHARE_OF_STEP


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def rank_p(base: list[float], test: list[float]) -> float:
    """Mann-Whitney's two-sided p of two sides' per-step values; 1 when they are the same values."""
    return 1.0 if sorted(base) == sorted(test) else mann_whitney(base, test)[1]


def work_per_step(base: Side, test: Side) -> dict | None:
    """What the steps do, base against test, over every recording's steady steps (none set aside:
    what a step does does not move with the machine's speed). Operator calls per step: medians,
    Mann-Whitney p (1 when the two sides' counts are the same values); `changed`: p < ALPHA and the
    medians differ by at least MIN_SHARE_OF_STEP of the base's. `cost`: the priced work
    (priced_work). None when neither side has an operator call."""
    base_calls, test_calls = operator_calls(base), operator_calls(test)
    if not any(base_calls) and not any(test_calls):
        return None
    base_median, test_median = median(base_calls), median(test_calls)
    p = rank_p(base_calls, test_calls)
    pct = 100.0 * (test_median - base_median) / base_median if base_median else float("nan")
    changed = bool(math.isfinite(p) and p < ALPHA and base_median and abs(test_median - base_median) >= MIN_SHARE_OF_STEP * base_median)
    return {"metric": "operator calls per step", "base_median": base_median, "test_median": test_median, "delta_pct": pct,
            "p_value": p, "test_name": "mann-whitney-u", "changed": changed, "cost": priced_work(base, test)}


def operator_calls(side: Side) -> list[float]:
    """Operator calls per steady step of a side, every rank, its recordings one after the other."""
    vecs = [v for (metric, _), v in side.counts.items() if metric == "cpu"]
    return [float(sum(col)) for col in zip(*vecs)] if vecs else [0.0] * len(side.pooled_times)


def priced_work(base: Side, test: Side) -> dict | None:
    """The work per step priced at the base's time per call: each call (collect.calls_per_step:
    one name, the same inputs) at its mean time per call in the base; a call only the test makes at
    the test's time per call divided by `test_speed`, the ratio of the test's to the base's time
    for the calls both make (how much slower the test's machine ran the same work). Per steady
    step, the sum of calls x price, divided by the recording's ranks (a per-rank figure, as the
    step is). For the host ('cpu': operators' self time) and the device ('device': device work)
    each: the medians per step, their difference, that as a percentage of the base's mean steady
    step (the steps the prices came from, so the share does not move with the machine's speed),
    Mann-Whitney p on the per-step values (1 when they are the same values), and `significant`:
    p < ALPHA and |delta_pct| >= MIN_SHARE_OF_STEP. The resource with the larger change (a
    significant one first); None when neither side made a call."""
    step = mean(base.pooled_times)
    found = []
    for metric in ("cpu", "device"):
        calls = sorted({c for m, c in base.counts if m == metric} | {c for m, c in test.counts if m == metric})
        if not calls or not step:
            continue

        base_price = {c: _per_call(base, metric, c) for c in calls}
        test_price = {c: _per_call(test, metric, c) for c in calls}
        both = [c for c in calls if base_price[c] is not None and test_price[c] is not None]
        made = {c: sum(test.counts[(metric, c)]) for c in both}
        at_base = sum(made[c] * base_price[c] for c in both)
        at_test = sum(made[c] * test_price[c] for c in both)
        speed = at_test / at_base if at_base > 0 and at_test > 0 else 1.0
        price = {c: base_price[c] if base_price[c] is not None else (test_price[c] or 0.0) / speed for c in calls}
        base_work, test_work = priced_steps(base, metric, price), priced_steps(test, metric, price)
        delta = median(test_work) - median(base_work)
        p = rank_p(base_work, test_work)
        pct = 100.0 * delta / step
        found.append({"metric": metric, "base_ns_per_step": median(base_work), "test_ns_per_step": median(test_work),
                      "delta_ns_per_step": delta, "delta_pct": pct, "p_value": p, "test_name": "mann-whitney-u",
                      "test_speed": speed, "significant": bool(p < ALPHA and abs(pct) >= 100 * MIN_SHARE_OF_STEP)})
    return max(found, key=lambda c: (c["significant"], abs(c["delta_pct"])), default=None)


def _per_call(side: Side, metric: str, call) -> float | None:
    """A call's mean time per call over a side's steady steps; None when the side never makes it."""
    n = sum(side.counts.get((metric, call), ()))
    return sum(side.call_ns[(metric, call)]) / n if n else None


def priced_steps(side: Side, metric: str, price: dict[tuple[str, str], float]) -> list[float]:
    """Per steady step of a side (its recordings one after the other): the calls of `metric` priced
    at `price`, divided by the step's recording's ranks."""
    out = [0.0] * len(side.pooled_times)
    for call in sorted(price):
        vec = side.counts.get((metric, call))
        if vec:
            c = price[call]
            out = [w + n * c for w, n in zip(out, vec)]
    return [w / r for w, r in zip(out, side.step_ranks)]
