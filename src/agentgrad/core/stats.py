"""Small statistics shared across layers: a mean with its 95% t interval (the ablation's summary
and the report's figures of it), the Wilson score interval of a proportion (the team verdict's shares,
the benchmarks' accuracies), and the percentile interval of bootstrap replicates that every bootstrap of
the package reads its interval with (the benchmarks' paired differences)."""

from __future__ import annotations

import math


def mean_ci(xs: list[float]) -> tuple[float, float, float]:
    """Mean and a 95% t interval (normal beyond 30 values); one value: the value, twice."""
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, math.nan
    m = sum(xs) / n
    if n == 1:
        return m, m, m
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    t = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}.get(n, 2.09 if n <= 20 else
                                                                                             2.04 if n <= 30 else 1.96)
    h = t * sd / math.sqrt(n)
    return m, m - h, m + h


def percentile_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of bootstrap ``values``: the sorted values at ``int(a * R)`` and
    ``int((1 - a) * R) - 1``, ``a = (1 - level) / 2``, R replicates ((0, 0) for none)."""
    if not values:
        return (0.0, 0.0)
    v, r = sorted(values), len(values)
    a = (1 - level) / 2
    return (v[min(int(a * r), r - 1)], v[max(int((1 - a) * r) - 1, 0)])


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n (k may be fractional: tie credits); (0, 0) for n = 0.

    Unlike a bootstrap over n items, it is wide where n is small: 2 of 2 is [0.34, 1.00], not [1, 1]."""
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(max(p * (1 - p), 0.0) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))
