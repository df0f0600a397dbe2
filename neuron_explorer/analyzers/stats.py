"""Small-sample statistics for comparing runs: robust summaries, rank and t tests, confidence intervals.

Profiles hold few steps (5 to 50) and step times have heavy tails (garbage collection, allocator
growth, periodic work), so the comparison is built on medians and ranks: Mann-Whitney U (exact
for small samples), bootstrap confidence intervals of the difference and the ratio of medians, and Cliff's
delta as the effect size. Welch's t-test is used only when both samples pass a stated screen for
outliers (`no_outliers`), the case where its assumptions hold. The t distribution's CDF comes
from the regularised incomplete beta function (continued fraction, as in every numerics text),
so no SciPy dependency is needed. Definitions: docs/COMPARE.md.

Must not: read runs or decide verdicts (analyzers/diff/verdict.py does).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    n: int
    mean: float
    std: float  # sample standard deviation (n - 1)
    ci_low: float  # 95% confidence interval of the mean (Student's t)
    ci_high: float
    median: float = float("nan")
    mad: float = float("nan")  # median absolute deviation from the median (unscaled)


def describe(values: list[float]) -> Sample:
    n = len(values)
    if n == 0:
        return Sample(0, float("nan"), float("nan"), float("nan"), float("nan"))
    mean = sum(values) / n
    med, mad = median(values), median_abs_deviation(values)
    if n == 1:
        return Sample(1, mean, float("nan"), float("nan"), float("nan"), med, mad)
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    std = math.sqrt(var)
    half = t_quantile(0.975, n - 1) * std / math.sqrt(n)
    return Sample(n, mean, std, mean - half, mean + half, med, mad)


def median(values) -> float:
    s = sorted(values)
    n = len(s)
    if not n:
        return float("nan")
    return float(s[n // 2]) if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def median_abs_deviation(values) -> float:
    """MAD: the median of |v - median|. Times 1.4826 it estimates the standard deviation of normal data."""
    m = median(values)
    return median([abs(v - m) for v in values])


MAD_TO_SD = 1.4826
"""1.4826 x MAD estimates the standard deviation of normal data, and is not moved by outliers."""
OUTLIER_SDS = 3.0
"""`no_outliers`: every value within this many robust standard deviations (1.4826 x MAD) of the median."""


def robust_sd(values) -> float:
    return MAD_TO_SD * median_abs_deviation(values)


def no_outliers(values) -> bool:
    """The screen for Welch's t-test: at least 5 values and every one within OUTLIER_SDS robust
    standard deviations of the median (a constant sample passes). Heavy tails, single spikes and
    bimodal steps fail it, and then the rank test is used instead."""
    if len(values) < 5:
        return False
    m, sd = median(values), robust_sd(values)
    return all(abs(v - m) <= OUTLIER_SDS * sd for v in values)


@dataclass(frozen=True)
class Test:
    """The outcome of comparing two samples (test minus base)."""
    name: str  # 'welch-t' | 'mann-whitney-u' | 'none'
    statistic: float  # Welch's t, or U of the test sample (pairs where test > base, ties count 1/2)
    p_value: float  # two-sided; NaN when it cannot be computed
    effect_size: float  # Cliff's delta: P(test > base) - P(test < base), in [-1, 1]
    reason: str  # why this test


def compare_samples(base: list[float], test: list[float]) -> Test:
    """Welch's t-test when both samples pass `no_outliers`, else Mann-Whitney U; Cliff's delta either way."""
    if len(base) < 2 or len(test) < 2:
        return Test("none", float("nan"), float("nan"), cliffs_delta(base, test), "fewer than 2 values on a side")
    if no_outliers(base) and no_outliers(test):
        t, p = welch(base, test)
        return Test("welch-t", t, p, cliffs_delta(base, test),
                    f"both samples have at least 5 values, all within {OUTLIER_SDS:g} robust SDs of their median")
    u, p = mann_whitney(base, test)
    why = "fewer than 5 values on a side" if min(len(base), len(test)) < 5 else \
        f"a sample has values beyond {OUTLIER_SDS:g} robust SDs of its median (heavy tail, spikes)"
    return Test("mann-whitney-u", u, p, cliffs_delta(base, test), why)


def cliffs_delta(base, test) -> float:
    """P(test > base) - P(test < base) over all pairs: +1 when every test value is larger."""
    if not base or not test:
        return float("nan")
    return 2.0 * u_statistic(base, test) / (len(base) * len(test)) - 1.0


def u_statistic(base, test) -> float:
    """Mann-Whitney U of `test`: the pairs (b, t) with t > b, plus half the ties (via ranks, O(n log n))."""
    ranks = _midranks(list(base) + list(test))
    r_test = sum(ranks[len(base):])
    return r_test - len(test) * (len(test) + 1) / 2.0


def _midranks(values) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


EXACT_U_MAX_N = 60
"""Mann-Whitney U is exact (the permutation distribution) up to this many values in all, without ties."""


def mann_whitney(base, test) -> tuple[float, float]:
    """Mann-Whitney U test of `test` against `base`: (U of test, two-sided p-value).

    Exact without ties and up to EXACT_U_MAX_N values; otherwise the normal approximation with the
    tie correction and a continuity correction of 1/2.
    """
    n1, n2 = len(base), len(test)
    if not n1 or not n2:
        return float("nan"), float("nan")
    u = u_statistic(base, test)
    values = list(base) + list(test)
    ties = len(set(values)) < len(values)
    if not ties and n1 + n2 <= EXACT_U_MAX_N:
        counts = _u_counts(n1, n2)
        total = sum(counts)
        k = int(round(u))
        low = sum(counts[: k + 1]) / total
        high = sum(counts[k:]) / total
        return u, min(1.0, 2.0 * min(low, high))
    n = n1 + n2
    tie_term = 0.0
    ranks = sorted(values)
    i = 0
    while i < n:
        j = i
        while j + 1 < n and ranks[j + 1] == ranks[i]:
            j += 1
        t = j - i + 1
        tie_term += t ** 3 - t
        i = j + 1
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if var <= 0:
        return u, 1.0
    z = (abs(u - n1 * n2 / 2.0) - 0.5) / math.sqrt(var)
    return u, min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))


def _u_counts(n1: int, n2: int) -> list[int]:
    """How many of the C(n1+n2, n1) orderings give U = 0, 1, ..., n1*n2: the coefficients of the
    Gaussian binomial [n1+n2 choose n1]_q = prod_{i=1..n1} (1 - q^(n2+i)) / (1 - q^i)."""
    size = n1 * n2 + 1
    c = [0] * (size + n1 + n2 + 1)
    c[0] = 1
    for i in range(1, n1 + 1):
        a = n2 + i
        for j in range(len(c) - 1, a - 1, -1):  # multiply by (1 - q^a)
            c[j] -= c[j - a]
        for j in range(i, len(c)):  # divide by (1 - q^i): a power series, exact here
            c[j] += c[j - i]
    return c[:size]


BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
"""The bootstrap is seeded, so the same two runs always give the same interval."""


def bootstrap_median_diff_ci(base, test, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of median(test) - median(base): both samples resampled with
    replacement BOOTSTRAP_RESAMPLES times (seeded)."""
    if len(base) < 2 or len(test) < 2:
        return float("nan"), float("nan")
    rng = random.Random(BOOTSTRAP_SEED)
    nb, nt = len(base), len(test)
    diffs = sorted(median(rng.choices(test, k=nt)) - median(rng.choices(base, k=nb)) for _ in range(BOOTSTRAP_RESAMPLES))
    lo = diffs[int(math.floor((1 - level) / 2 * (len(diffs) - 1)))]
    hi = diffs[int(math.ceil((1 + level) / 2 * (len(diffs) - 1)))]
    return lo, hi


def bootstrap_median_ratio_ci(base, test, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of median(test) / median(base), resampled as
    bootstrap_median_diff_ci (the same seed and count). A ratio of positive times, so never below 0:
    as a change, never below -100%. NaN when a sample has fewer than 2 values or a median is not
    positive."""
    if len(base) < 2 or len(test) < 2:
        return float("nan"), float("nan")
    rng = random.Random(BOOTSTRAP_SEED)
    nb, nt = len(base), len(test)
    ratios = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        t, b = median(rng.choices(test, k=nt)), median(rng.choices(base, k=nb))
        if b <= 0 or t < 0:
            return float("nan"), float("nan")
        ratios.append(t / b)
    ratios.sort()
    return ratios[int(math.floor((1 - level) / 2 * (len(ratios) - 1)))], ratios[int(math.ceil((1 + level) / 2 * (len(ratios) - 1)))]


def log_ratio_t_ci(base: list[float], test: list[float], level: float = 0.95) -> tuple[float, float]:
    """The interval of the ratio of the recordings' geometric means, test / base: Student's t with
    pooled variance (df = n - 2, as run_level_t) on the logs of the values, exp of its ends. Load
    scales time, so ratios; a ratio's interval is never below 0 (as a change, never below -100%),
    and unlike Fieller's interval for a ratio of means it is bounded however few the recordings.
    NaN with fewer than 3 values in all or a value that is not positive."""
    nb, nt = len(base), len(test)
    nan = float("nan")
    if nb < 1 or nt < 1 or nb + nt < 3 or min(base + test) <= 0:
        return nan, nan
    lb, lt = [math.log(x) for x in base], [math.log(x) for x in test]
    mb, mt = sum(lb) / nb, sum(lt) / nt
    df = nb + nt - 2
    sd = math.sqrt((sum((x - mb) ** 2 for x in lb) + sum((x - mt) ** 2 for x in lt)) / df)
    half = t_quantile(1 - (1 - level) / 2, df) * sd * math.sqrt(1 / nb + 1 / nt)
    return math.exp(mt - mb - half), math.exp(mt - mb + half)


def normal_quantile(p: float) -> float:
    """The p-quantile of the standard normal, by bisection on erfc."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


MW_EFFICIENCY = 3.0 / math.pi
"""Asymptotic relative efficiency of Mann-Whitney U against the t-test on normal data (0.955)."""


def steps_to_detect(sd: float, change: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Steps per run for a two-sided rank test at `alpha` to detect a shift of `change` with `power`,
    when steps vary with standard deviation `sd`: 2 (z(1-alpha/2) + z(power))^2 sd^2 / change^2,
    divided by MW_EFFICIENCY. inf when change is 0."""
    if change <= 0:
        return math.inf
    z = normal_quantile(1 - alpha / 2) + normal_quantile(power)
    return 2.0 * z * z * sd * sd / (change * change) / MW_EFFICIENCY


def detectable_change(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The inverse of steps_to_detect: the smallest shift n steps per run detect with `power`."""
    if n < 1:
        return math.inf
    z = normal_quantile(1 - alpha / 2) + normal_quantile(power)
    return z * sd * math.sqrt(2.0 / n / MW_EFFICIENCY)


def welch(a: list[float], b: list[float]) -> tuple[float, float]:
    """Welch's unequal-variance t-test of mean(b) - mean(a): (t statistic, two-sided p-value).

    With fewer than two values on a side there is no variance: p is NaN (cannot tell).
    When both sides have zero variance, p is 0 if the means differ and 1 otherwise.
    """
    if len(a) < 2 or len(b) < 2:
        return float("nan"), float("nan")
    sa, sb = describe(a), describe(b)
    va, vb = sa.std**2 / sa.n, sb.std**2 / sb.n
    diff = sb.mean - sa.mean
    if va + vb == 0:
        return (math.copysign(math.inf, diff), 0.0) if diff else (0.0, 1.0)
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va**2 / (sa.n - 1) if va else 0.0) + (vb**2 / (sb.n - 1) if vb else 0.0))
    return t, 2.0 * t_sf(abs(t), df)


@dataclass(frozen=True)
class RunLevel:
    """A comparison of two sets of recordings, one value per recording (recording_value, or a delta
    row's mean per step): Student's t with pooled variance (run_level_t), paired t on ratios
    (paired_ratio_t) or on differences (paired_difference_t)."""
    delta: float  # test - base, in the values' unit
    ci_low: float  # 95% interval of delta (or `level`)
    ci_high: float
    t: float
    p_value: float
    df: int
    sd: float  # pooled standard deviation of one recording's value: the run-to-run variation


def run_level_t(base_medians: list[float], test_medians: list[float], level: float = 0.95) -> RunLevel:
    """Two-sample t-test with pooled variance on the recordings' values (recording_value). Each is one
    value, so the variation between recordings (process placement, machine load, memory layout)
    is what the test sees; df = runs - 2. NaN figures when there are fewer than 3 runs in all."""
    nb, nt = len(base_medians), len(test_medians)
    nan = float("nan")
    if nb < 1 or nt < 1 or nb + nt < 3:
        return RunLevel(nan, nan, nan, nan, nan, max(nb + nt - 2, 0), nan)
    mb, mt = sum(base_medians) / nb, sum(test_medians) / nt
    ss = sum((x - mb) ** 2 for x in base_medians) + sum((x - mt) ** 2 for x in test_medians)
    df = nb + nt - 2
    sd = math.sqrt(ss / df)
    delta = mt - mb
    se = sd * math.sqrt(1 / nb + 1 / nt)
    if se == 0:
        return RunLevel(delta, delta, delta, math.copysign(math.inf, delta) if delta else 0.0, 0.0 if delta else 1.0, df, 0.0)
    t = delta / se
    half = t_quantile(1 - (1 - level) / 2, df) * se
    return RunLevel(delta, delta - half, delta + half, t, 2.0 * t_sf(abs(t), df), df, sd)


def paired_ratio_t(base_medians: list[float], test_medians: list[float], level: float = 0.95) -> RunLevel:
    """Paired t on log(test / base) of recordings made in pairs (pair k: base k and test k recorded
    at the same time, or one right after the other, on one host), so that what the machine did
    while a pair ran falls on both of its sides alike and cancels in their ratio. Load scales time,
    hence ratios, not differences. delta and its interval are in the base's unit: mean(base) times
    (exp(mean log ratio) - 1); sd is the ratios' spread in that unit (sd of log ratio x mean(base));
    df = pairs - 1. NaN figures with fewer than 2 pairs or a non-positive value."""
    n = len(base_medians)
    nan = float("nan")
    if n != len(test_medians) or n < 2 or min(base_medians + test_medians) <= 0:
        return RunLevel(nan, nan, nan, nan, nan, max(n - 1, 0), nan)
    logs = [math.log(t / b) for b, t in zip(base_medians, test_medians)]
    m = sum(logs) / n
    df = n - 1
    sd_log = math.sqrt(sum((x - m) ** 2 for x in logs) / df)
    ref = sum(base_medians) / n
    delta = ref * math.expm1(m)
    se = sd_log / math.sqrt(n)
    if se == 0:
        return RunLevel(delta, delta, delta, math.copysign(math.inf, m) if m else 0.0, 0.0 if m else 1.0, df, 0.0)
    half = t_quantile(1 - (1 - level) / 2, df) * se
    t = m / se
    return RunLevel(delta, ref * math.expm1(m - half), ref * math.expm1(m + half), t, 2.0 * t_sf(abs(t), df), df, sd_log * ref)


def paired_difference_t(base_values: list[float], test_values: list[float], level: float = 0.95) -> RunLevel:
    """Paired t on the differences test_k - base_k of recordings made in pairs: the delta lists' test
    for pairs (a row can be 0 in a recording, so its ratio may not exist). delta = mean difference,
    its t interval; sd = the differences' standard deviation; df = pairs - 1. NaN figures with fewer
    than 2 pairs."""
    n = len(base_values)
    nan = float("nan")
    if n != len(test_values) or n < 2:
        return RunLevel(nan, nan, nan, nan, nan, max(n - 1, 0), nan)
    diffs = [t - b for b, t in zip(base_values, test_values)]
    m = sum(diffs) / n
    df = n - 1
    sd = math.sqrt(sum((x - m) ** 2 for x in diffs) / df)
    se = sd / math.sqrt(n)
    if se == 0:
        return RunLevel(m, m, m, math.copysign(math.inf, m) if m else 0.0, 0.0 if m else 1.0, df, 0.0)
    half = t_quantile(1 - (1 - level) / 2, df) * se
    t = m / se
    return RunLevel(m, m - half, m + half, t, 2.0 * t_sf(abs(t), df), df, sd)


RECORDING_QUANTILE = 0.25
"""A recording's value in a run set is this quantile of its steady steps (recording_value)."""


def recording_value(steps: list[float], q: float = RECORDING_QUANTILE) -> float:
    """One recording's value when several recordings per side are compared: the ⌈q·n⌉-th fastest of
    its n steady steps (nearest rank; q = 0.25, the lower quartile: the fastest of up to 4 steps, the
    2nd of 5 to 8, the 8th of 29).

    On shared machines the speed of the machine comes in levels that change every few seconds,
    within a process as well as between processes: the steps of one recording of the benchmark loop
    run at 20 ms, then 28 ms for a while, then 20 ms again (bench/README.md "diff error rates").
    Whatever disturbs a step only adds time, so a recording's fastest steps are the ones that ran
    at the machine's full speed; its median is whichever level held for most of it. A change that
    slows only some steps (one in five) moves neither this nor the median: the delta lists and the
    consistency check (docs/COMPARE.md) are what catch it. NaN for no steps."""
    if not steps:
        return float("nan")
    ordered = sorted(steps)
    return ordered[max(1, math.ceil(q * len(ordered) - 1e-9)) - 1]


SLOW_RECORDING_SHARE = 0.08
"""Recordings of one side whose value exceeds the side's fastest by more than this share of it
are set aside as disturbed (slow_recordings)."""


def slow_recordings(values: list[float], share: float = SLOW_RECORDING_SHARE) -> list[int]:
    """Indices of the recordings of one side (one value each: recording_value) set aside as
    disturbed: those slower than the side's fastest recording by more than `share` x its value, but
    never the two fastest: the test weighs each side's own spread, which one recording does not
    have (when only one recording of a side ran at full speed, the second fastest keeps the
    verdict from resting on it alone). A side of one or two recordings keeps them all.
    Whatever disturbs a process only adds time (other jobs; on small VMs the machine runs at one of
    a few speed levels, 15-70% apart, for seconds at a time: docs/COMPARE.md), and every recording
    of a side runs the same code, so the recordings near the fastest are the ones that measured it.
    Chosen on 1,040 recordings of a quiet 2-core VM (bench/README.md "diff error rates"): keeping
    those within 8% of the fastest detected the most +20% regressions among the shares tried
    (5-15%) with no more false alarms; keeping the two fastest removed a false alarm of a side
    that never ran at full speed, and cost no detection at 8 recordings per side."""
    if len(values) < 3 or not min(values) > 0:
        return []
    limit = (1.0 + share) * min(values)
    fastest_two = sorted(range(len(values)), key=lambda i: values[i])[:2]
    return [i for i, m in enumerate(values) if m > limit and i not in fastest_two]


def pairs_to_detect(sd: float, change: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Pairs of recordings for a paired t-test to detect `change` with `power` (normal approximation);
    sd is the spread of one pair's difference (paired_ratio_t's sd)."""
    if change <= 0 or not math.isfinite(sd):
        return float("nan")
    z = normal_quantile(1 - alpha / 2) + normal_quantile(power)
    return (z * sd / change) ** 2


def runs_to_detect(sd: float, change: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Recordings per side for a run-level t-test to detect `change` with `power` (normal approximation)."""
    if change <= 0 or not math.isfinite(sd):
        return float("nan")
    z = normal_quantile(1 - alpha / 2) + normal_quantile(power)
    return 2.0 * (z * sd / change) ** 2


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with df degrees of freedom, t >= 0."""
    if math.isinf(t):
        return 0.0
    x = df / (df + t * t)
    return 0.5 * betainc(df / 2.0, 0.5, x)


def t_quantile(p: float, df: float) -> float:
    """The p-quantile (p > 0.5) of Student's t, by bisection on the CDF."""
    lo, hi = 0.0, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        if 1.0 - t_sf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1.0 - x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _beta_cf(b, a, 1.0 - x) / b


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)), -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h
