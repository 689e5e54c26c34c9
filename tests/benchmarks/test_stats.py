"""The bootstrap in numpy gives the pure-Python bootstrap's figures exactly (the committed figures rest on them).

:func:`paired` and :func:`crossed_bootstrap` draw their resamples with ``random.Random(seed).randrange``
and sum with ``sum()``; the vectorised code takes the same draws in bulk (``_Randbelow``, ``_draw_rounds``) and adds as
``sum()`` adds (``_rowsums``). Each part is checked against Python itself, and the two statistics
against their pure-Python definitions (below, as they were written before) on inputs of every kind
the tables give them: fractional tie credits, integer credits, one item, a ratio over zero.
"""

from __future__ import annotations

import math
import operator
import random

import numpy as np
import pytest

from agentgrad.benchmarks import stats
from agentgrad.benchmarks.stats import _draw_rounds, _Randbelow, _rowsums, crossed_bootstrap, paired


def paired_by_loop(a, b, resamples=2000, seed=0):
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    rng = random.Random(seed)
    means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    wins, losses = sum(x > 0 for x in d), sum(x < 0 for x in d)
    return {"n": n, "diff": sum(d) / n, "ci95": [means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]],
            "wins": wins, "losses": losses, "p": stats.sign_test(wins, losses)}


def crossed_by_loop(matrices, stat, resamples=2000, seed=0):
    mats = {k: [list(map(float, row)) for row in m] for k, m in matrices.items()}
    k, n = len(next(iter(mats.values()))), len(next(iter(mats.values()))[0])

    def value(rows, weights):
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
    p = min(1.0, 2 * min(sum(x <= 0 for x in draws), sum(x >= 0 for x in draws)) / m)
    return {"value": point, "ci95": [draws[int(0.025 * m)], draws[max(int(0.975 * m) - 1, 0)]], "p": p,
            "cases": k, "questions": n, "resamples": m}


@pytest.mark.parametrize("read_ahead", [1.05, 0.2])  # 0.2: blocks of rounds run out of words and read more
def test_bulk_draws_are_the_draws_of_randrange_in_order(monkeypatch, read_ahead):
    monkeypatch.setattr(stats, "_READ_AHEAD", read_ahead)
    bounds = [1, 2, 3, 5, 7, 8, 9, 31, 32, 33, 100, 2**16 + 1, 2**31 + 1, 2**32 - 1]
    plan = [(b, c) for b in bounds for c in (1, 3, 200)] + [(5, 0), (7, 70_000), (3, 5)]
    mine, theirs = _Randbelow(random.Random(11)), random.Random(11)
    for bound, count in plan:
        assert mine.take(bound, count).tolist() == [theirs.randrange(bound) for _ in range(count)], (bound, count)
    with pytest.raises(ValueError, match="only from 1"):
        mine.take(2**32, 1)
    bounds = [3, 1, 2**31 + 1, 7, 7, 2**32 - 1, 2]  # rounds of mixed bounds, many blocks of them
    theirs = random.Random(12)
    assert _draw_rounds(bounds, 40_000, random.Random(12)).tolist() == \
        [[theirs.randrange(b) for b in bounds] for _ in range(40_000)]


def cpython_neumaier(xs):
    """CPython 3.12's sum() of floats (Python/bltinmodule.c), transcribed."""
    f, c = 0.0 + xs[0], 0.0
    for x in xs[1:]:
        t = f + x
        c += (f - t) + x if abs(f) >= abs(x) else (x - t) + f
        f = t
    return f + c if c and math.isfinite(c) else f


def rows_to_sum():
    r = random.Random(3)
    rows = [[r.choice([0.0, -0.0, 1.0, 0.5, 1 / 3, 0.1, -2 / 7]) for _ in range(r.randint(1, 40))] for _ in range(300)]
    rows += [[r.uniform(-1, 1) * 10 ** r.randint(-20, 20) for _ in range(25)] for _ in range(300)]
    rows += [[1.0, 1e100, 1.0, -1e100], [-0.0], [-0.0, -0.0], [math.inf, 1.0], [1.0, math.inf, -math.inf],
             [math.nan, 1.0], [1e308, 1e308, -1e308], [0.1] * 10]
    return rows


def plain(xs):
    """Python 3.11's sum() of floats: left to right from 0."""
    f = 0.0 + xs[0]
    for x in xs[1:]:
        f = f + x
    return f


def same(x, y):
    """The same float, the sign of a zero included (any NaN is a NaN)."""
    return (x != x and y != y) or (x == y and math.copysign(1, x) == math.copysign(1, y))


def test_row_sums_are_the_builtin_sums_bit_for_bit():
    for row in rows_to_sum():
        assert same(_rowsums(np.array([row]))[0], sum(row)), row
    grid = np.random.default_rng(0).normal(size=(6, 5, 9))
    assert [[sum(r) for r in block] for block in grid.tolist()] == _rowsums(grid).tolist()
    assert _rowsums(np.zeros((3, 0))).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("compensated", [False, True])
def test_each_way_of_adding_is_the_one_its_python_uses(monkeypatch, compensated):
    """Python 3.11 adds left to right, 3.12 and later compensate: both ways, whichever runs here."""
    monkeypatch.setattr(stats, "_COMPENSATED", compensated)
    for row in rows_to_sum():
        want = cpython_neumaier(row) if compensated else plain(row)
        assert same(_rowsums(np.array([row]))[0], want), row


def test_paired_is_its_loop_of_draws_exactly():
    r = random.Random(7)
    for trial in range(30):
        n = r.choice([1, 2, 3, 16, 17, 50, 79, 130])
        credits = [0.0, 1.0, 0.5, 1 / 3, 0.25]
        if trial % 4 == 0:  # integer credits (hits) are summed as integers
            a, b = [r.randint(0, 1) for _ in range(n)], [r.randint(0, 1) for _ in range(n)]
        else:
            a, b = [r.choice(credits) for _ in range(n)], [r.choice(credits) for _ in range(n)]
        resamples, seed = r.choice([1, 10, 2000]), r.randrange(1000)
        assert paired(a, b, resamples, seed) == paired_by_loop(a, b, resamples, seed), (trial, n, resamples)


def test_crossed_bootstrap_is_its_loop_of_draws_exactly():
    r = random.Random(8)
    for trial in range(24):
        k, n = r.choice([1, 2, 5, 21]), r.choice([1, 3, 12, 33])
        values = [0.0, 1.0, 0.5, 1 / 3, r.random()]
        mats = {name: [[r.choice(values) for _ in range(n)] for _ in range(k)] for name in ("clean", "bugged", "fixed")}
        if trial % 2:
            def stat(m):
                return (m["fixed"] - m["bugged"]) / (m["clean"] - m["bugged"])  # over zero in some replicates
        else:
            def stat(m):
                return m["fixed"] - m["bugged"]
        resamples, seed = r.choice([1, 50, 400]), r.randrange(1000)
        got, want = crossed_bootstrap(mats, stat, resamples, seed), crossed_by_loop(mats, stat, resamples, seed)
        assert repr(got) == repr(want), (trial, k, n)  # repr: nan equals nan

