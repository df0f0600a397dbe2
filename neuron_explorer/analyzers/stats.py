"""Small-sample statistics for comparing runs: means with confidence intervals and Welch's t-test.

Profiles hold few steps (3 to 20), so the normal approximation is wrong; Student's t is right.
The t distribution's CDF is computed from the regularised incomplete beta function (continued
fraction, as in every numerics text), so no SciPy dependency is needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    n: int
    mean: float
    std: float  # sample standard deviation (n - 1)
    ci_low: float  # 95% confidence interval of the mean (Student's t)
    ci_high: float


def describe(values: list[float]) -> Sample:
    n = len(values)
    if n == 0:
        return Sample(0, float("nan"), float("nan"), float("nan"), float("nan"))
    mean = sum(values) / n
    if n == 1:
        return Sample(1, mean, float("nan"), float("nan"), float("nan"))
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    std = math.sqrt(var)
    half = t_quantile(0.975, n - 1) * std / math.sqrt(n)
    return Sample(n, mean, std, mean - half, mean + half)


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
