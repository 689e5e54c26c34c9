"""The statistics every blame table prints: a proportion's interval, and a paired comparison.

A blame figure means something only beside the best model-free baseline, on the same episodes:
:func:`paired` gives the difference of two methods' per-episode credits with a bootstrap interval
and an exact sign test over the episodes where they disagree. An optimisation figure varies over
cases and over questions at once: :func:`crossed_bootstrap` resamples both, and
:func:`stratified_permutation_corr` tests a relation across methods within each case.
"""

from __future__ import annotations

import math
import operator
import random
from typing import Any, Callable, Sequence


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n (k may be fractional: tie credits)."""
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test: the probability, with wins and losses equally likely, of a split at
    least as uneven as ``wins`` vs ``losses`` (ties left out). 1.0 when there is no disagreement."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired(a: Sequence[float], b: Sequence[float], resamples: int = 2000, seed: int = 0) -> dict[str, float]:
    """``a - b`` on the same items: the mean difference, its 95% bootstrap interval (items resampled
    with replacement), the items where ``a`` is ahead (``wins``) and behind (``losses``), and the
    exact sign test's two-sided p over those."""
    if len(a) != len(b):
        raise ValueError(f"paired: {len(a)} against {len(b)} items")
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    if n == 0:
        return {"n": 0, "diff": 0.0, "ci95": [0.0, 0.0], "wins": 0, "losses": 0, "p": 1.0}
    rng = random.Random(seed)
    means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    wins, losses = sum(x > 0 for x in d), sum(x < 0 for x in d)
    return {"n": n, "diff": sum(d) / n, "ci95": [means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]],
            "wins": wins, "losses": losses, "p": sign_test(wins, losses)}


def crossed_bootstrap(matrices: dict[str, Sequence[Sequence[float]]], stat: Callable[[dict[str, float]], float],
                      resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """A statistic of per-(case, question) values with its 95% interval, cases and questions resampled together.

    Each matrix holds one row per case and one column per question, the same questions in every
    row (a benchmark that asks every case the same test questions): a replicate draws the cases with
    replacement and, once for all of them, the questions with replacement (questions are shared, so
    a hard question is hard in every case: drawing them per case would understate the spread). Each
    matrix is reduced to the mean over the drawn cases of their mean over the drawn questions, and
    ``stat`` maps those means (by matrix name) to the statistic. A replicate whose statistic is not a
    number (a ratio over zero) is left out.

    Returns ``value`` (the statistic on the data), ``ci95``, ``p`` (two-sided: twice the smaller share
    of replicates at or below and at or above 0, at most 1), ``cases``, ``questions`` and ``resamples``
    (the replicates kept)."""
    mats = {k: [list(map(float, row)) for row in m] for k, m in matrices.items()}
    shapes = {(len(m), len(m[0]) if m else 0) for m in mats.values()}
    if len(shapes) != 1 or any(len(row) != next(iter(shapes))[1] for m in mats.values() for row in m):
        raise ValueError(f"crossed_bootstrap: matrices of different shapes {sorted(shapes)}")
    k, n = next(iter(shapes))
    if k == 0 or n == 0:
        return {"value": math.nan, "ci95": [math.nan, math.nan], "p": 1.0, "cases": k, "questions": n, "resamples": 0}

    def value(rows: list[int], weights: list[float]) -> float:
        means = {}
        for name, m in mats.items():
            sums = {r: sum(map(operator.mul, weights, m[r])) for r in set(rows)}
            means[name] = sum(sums[r] for r in rows) / (len(rows) * n)
        try:
            return stat(means)
        except ZeroDivisionError:
            return math.nan

    point = value(list(range(k)), [1.0] * n)
    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        rows = [rng.randrange(k) for _ in range(k)]
        weights = [0.0] * n
        for _ in range(n):
            weights[rng.randrange(n)] += 1.0
        v = value(rows, weights)
        if v == v:
            draws.append(v)
    if not draws:
        return {"value": point, "ci95": [math.nan, math.nan], "p": 1.0, "cases": k, "questions": n, "resamples": 0}
    draws.sort()
    m = len(draws)
    lo, hi = draws[int(0.025 * m)], draws[max(int(0.975 * m) - 1, 0)]
    p = min(1.0, 2 * min(sum(d <= 0 for d in draws), sum(d >= 0 for d in draws)) / m)
    return {"value": point, "ci95": [lo, hi], "p": p, "cases": k, "questions": n, "resamples": m}


def stratified_permutation_corr(points: Sequence[tuple[Any, float, float]], permutations: int = 10000,
                                seed: int = 0) -> dict[str, Any]:
    """Does x predict y within strata? Pearson's r of ``(stratum, x, y)`` points after each stratum's
    means are taken out (what differs between strata, such as a case that is easier for every
    method, cannot make the correlation), with a two-sided permutation p: x shuffled within each
    stratum, ``(1 + #|r_perm| >= |r|) / (1 + permutations)``. Strata with one point carry nothing
    and are left out. Returns ``r``, ``p``, ``strata``, ``points``, ``slope`` (y per unit of x)."""
    groups: dict[Any, list[tuple[float, float]]] = {}
    for s, x, y in points:
        groups.setdefault(s, []).append((float(x), float(y)))
    groups = {s: g for s, g in groups.items() if len(g) > 1}

    def centred(g: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
        mx, my = sum(x for x, _ in g) / len(g), sum(y for _, y in g) / len(g)
        return [x - mx for x, _ in g], [y - my for _, y in g]

    xs, ys = [], []
    for g in groups.values():
        cx, cy = centred(g)
        xs.append(cx)
        ys.append(cy)
    sxx = sum(v * v for c in xs for v in c)
    syy = sum(v * v for c in ys for v in c)
    n_points = sum(len(c) for c in xs)
    if sxx == 0 or syy == 0:
        return {"r": math.nan, "p": 1.0, "strata": len(groups), "points": n_points, "slope": math.nan}

    def corr(xs_: list[list[float]]) -> float:
        return sum(a * b for cx, cy in zip(xs_, ys) for a, b in zip(cx, cy)) / math.sqrt(sxx * syy)

    r = corr(xs)
    rng = random.Random(seed)
    hits = 0
    for _ in range(permutations):
        shuffled = [rng.sample(c, len(c)) for c in xs]  # centred x permuted within each stratum
        hits += abs(corr(shuffled)) >= abs(r) - 1e-12
    slope = sum(a * b for cx, cy in zip(xs, ys) for a, b in zip(cx, cy)) / sxx
    return {"r": r, "p": (1 + hits) / (1 + permutations), "strata": len(groups), "points": n_points, "slope": slope}
