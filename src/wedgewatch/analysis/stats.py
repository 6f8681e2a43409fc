"""The statistics every analysis shares: intervals for rates and differences, exact tests.

Closed forms, so that ``report``, ``compare`` and ``scan`` do not pay statsmodels' import time; the
tests hold each one against statsmodels or scipy.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

__all__ = [
    "detectable_difference",
    "fisher_exact",
    "mcnemar_exact",
    "newcombe_diff",
    "poisson_sf",
    "rate",
    "wilson",
]


def median(xs: list[float]) -> float:
    """The median of finite numbers without overflow: ``statistics.median`` averages the middle
    two as ``(a + b) / 2``, which is ``inf`` for two durations near the largest float (a result
    file can hold anything; property tests found it)."""
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else s[mid - 1] / 2 + s[mid] / 2


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (statsmodels' ``method='wilson'``).
    (nan, nan) for n=0."""
    if n == 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(k: int, n: int, confidence: float = 0.95) -> dict[str, Any]:
    """``{k, n, rate, ci95}`` with a Wilson interval (the shape ``wedgewatch report`` uses)."""
    lo, hi = wilson(k, n, confidence)
    return {"k": k, "n": n, "rate": (k / n) if n else None, "ci95": [lo, hi] if n else None}


def newcombe_diff(k1: int, n1: int, k2: int, n2: int, confidence: float = 0.95) -> tuple[float, float, float]:
    """p1 - p2 with Newcombe's hybrid score interval (his method 10): each proportion's Wilson
    interval, combined. Unlike the Wald interval it stays inside [-1, 1] and behaves at 0/n and
    n/n, which small agent runs hit all the time. (nan, nan, nan) when either n is 0."""
    if n1 == 0 or n2 == 0:
        return math.nan, math.nan, math.nan
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson(k1, n1, confidence)
    l2, u2 = wilson(k2, n2, confidence)
    d = p1 - p2
    lo = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    hi = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return d, max(-1.0, lo), min(1.0, hi)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value on the discordant pairs (b one way, c the other): the
    binomial test of min(b, c) in b + c at 1/2. 1.0 when there is no discordant pair."""
    n = b + c
    if n == 0:
        return 1.0
    # int / int is a correctly rounded true division in Python at any size: float(1 << n)
    # overflowed at n >= 1,024 discordant pairs.
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / (1 << n)
    return min(1.0, 2 * tail)


def detectable_difference(n1: int, n2: int, p: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The difference in proportions (around a common rate ``p``) that a two-sided test at
    ``alpha`` would find with probability ``power``, with n1 and n2 observations (normal
    approximation). What "n too small to tell" means in numbers."""
    if n1 == 0 or n2 == 0:
        return math.nan
    p = min(max(p, 0.05), 0.95)  # at 0 or 1 the approximation says nothing can be detected
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return z * math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))


def poisson_sf(m: int, lam: float) -> float:
    """P(X >= m) for X ~ Poisson(lam), summed from the tail up so that tiny values keep their
    precision (a tight cluster's chance is often far below 1e-16)."""
    if m <= 0:
        return 1.0
    if lam <= 0:
        return 0.0
    if m <= lam:
        # Each term in log space: exp(-lam) alone underflows to 0 at lam > ~745, which made the
        # whole CDF 0 and the tail 1.0.
        log_lam = math.log(lam)
        cdf = math.fsum(math.exp(-lam + i * log_lam - math.lgamma(i + 1)) for i in range(m))
        return min(1.0, max(0.0, 1.0 - cdf))
    term = math.exp(-lam + m * math.log(lam) - math.lgamma(m + 1))
    total, i = 0.0, m
    while term > total * 1e-17 and i < m + 10_000:
        total += term
        i += 1
        term *= lam / i
    return min(1.0, total)


def fisher_exact(k1: int, n1: int, k2: int, n2: int) -> dict[str, float]:
    """Fisher's exact test on two independent groups, k1 of n1 against k2 of n2 (scipy): the
    two-sided p, and the one-sided p in the direction the data lean (group 1's rate above group
    2's when it is, else below). The test for 'wedged on a used server vs on a fresh one', where
    the two groups share no instance and McNemar's pairing does not apply."""
    from scipy.stats import fisher_exact as _fisher

    table = [[k1, n1 - k1], [k2, n2 - k2]]
    two = float(_fisher(table, alternative="two-sided").pvalue)
    higher = n1 and n2 and k1 * n2 >= k2 * n1
    one = float(_fisher(table, alternative="greater" if higher else "less").pvalue)
    return {"p_two_sided": min(1.0, two), "p_one_sided": min(1.0, one)}
