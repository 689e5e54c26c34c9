"""The statistics every blame table prints: a proportion's interval, and a paired comparison.

A blame figure means something only beside the best model-free baseline, on the same episodes:
:func:`paired` gives the difference of two methods' per-episode credits with a bootstrap interval
and an exact sign test over the episodes where they disagree. An optimisation figure varies over
cases and over questions at once: :func:`crossed_bootstrap` resamples both, and
:func:`stratified_permutation_corr` tests a relation across methods within each case.

The bootstrap resamples are those of plain loops of ``random.Random(seed)`` draws and ``sum()``: the
draws are taken in bulk (once per shape) and the sums made in numpy, in the same order and rounding,
so that every figure equals the pure-Python one to the last bit (tests/benchmarks/test_stats.py checks it).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import random
from typing import Any, Callable, Sequence

import numpy as np

from agentgrad.core.stats import percentile_interval

# Python 3.12 and later add floats in sum() with Neumaier's compensation, earlier ones left to right
_COMPENSATED = sum([0.1] * 10) == 1.0
_READ_AHEAD = 1.05  # words read for a block of rounds of draws: this much over the average


class _Randbelow:
    """``rng.randrange(bound)`` draws taken many at a time: the very values, in the same order, that
    calls of ``rng.randrange`` would give. Python draws below ``bound`` by reading the generator's
    next 32-bit words until one's top ``bound.bit_length()`` bits are below ``bound``
    (``Random._randbelow_with_getrandbits``); ``rng.getrandbits(32 * w)`` is the next ``w`` words,
    the first the least significant, so a run of draws is the run of accepted words. The words read
    past the last draw are lost: ``rng`` is not to be used after."""

    def __init__(self, rng: random.Random):
        self.rng, self.words, self.pos = rng, np.empty(0, dtype=np.uint32), 0

    def take(self, bound: int, count: int) -> np.ndarray:
        if not 0 < bound < 1 << 32:
            raise ValueError(f"draws below {bound}: only from 1 to 2**32 - 1")
        shift, span = 32 - bound.bit_length(), 2 * count + 64  # a word is accepted with p > 1/2
        while True:
            if self.pos + span > len(self.words):
                fresh = max(span, 1 << 16)
                raw = self.rng.getrandbits(32 * fresh).to_bytes(4 * fresh, "little")
                self.words = np.concatenate([self.words[self.pos:], np.frombuffer(raw, dtype="<u4")])
                self.pos = 0
            top = self.words[self.pos:self.pos + span] >> shift
            accepted = np.flatnonzero(top < bound)
            if len(accepted) >= count:
                break
            span *= 2
        self.pos += int(accepted[count - 1]) + 1 if count else 0
        return top[accepted[:count]].astype(np.int64)


@functools.lru_cache(maxsize=2)
def _item_draws(n: int, resamples: int, seed: int) -> np.ndarray:
    """The items of :func:`paired`'s resamples, one row each: ``resamples * n`` draws of
    ``random.Random(seed).randrange(n)`` in order (read-only: shared by every call of this shape)."""
    picks = _Randbelow(random.Random(seed)).take(n, n * resamples).reshape(resamples, n)
    picks.flags.writeable = False
    return picks


@functools.lru_cache(maxsize=2)
def _case_question_draws(k: int, n: int, resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`crossed_bootstrap`'s replicates: per replicate, k draws of ``randrange(k)`` (the cases) then
    n of ``randrange(n)`` (the questions), in the order of one ``random.Random(seed)``; returned as the
    cases (replicate x k) and each question's count (question x replicate, floats), read-only."""
    both = _draw_rounds([k] * k + [n] * n, resamples, random.Random(seed))
    rows, cols = both[:, :k], both[:, k:]
    cols = cols + n * np.arange(resamples)[:, None]
    weights = np.bincount(cols.ravel(), minlength=resamples * n).reshape(resamples, n).astype(float)
    rows, weights = np.ascontiguousarray(rows), np.ascontiguousarray(weights.T)  # weights: question x replicate
    rows.flags.writeable = weights.flags.writeable = False
    return rows, weights


def _rowsums(x: np.ndarray) -> np.ndarray:
    """``sum(row)`` of every row (the last axis) of an array of floats, bit for bit as the built-in
    adds a list of floats (:func:`_sum_terms`)."""
    x = np.asarray(x, dtype=float)
    return _sum_terms(np.moveaxis(x, -1, 0), x.shape[:-1])


def _sum_terms(terms: Any, shape: tuple[int, ...]) -> np.ndarray:
    """The sums of arrays of ``shape``, term after term, bit for bit as ``sum()`` adds floats: from 0,
    left to right, and where the built-in compensates (Python 3.12+) with its compensation, so that
    the vectorised statistics equal the pure-Python ones."""
    terms = iter(terms)
    total = np.zeros(shape)
    first = next(terms, None)
    if first is None:
        return total
    with np.errstate(all="ignore"):
        total = total + first
        if not _COMPENSATED:
            for col in terms:
                total = total + col
            return total
        comp = np.zeros_like(total)
        for col in terms:
            t = total + col
            comp = comp + np.where(np.abs(total) >= np.abs(col), (total - t) + col, (col - t) + total)
            total = t
        return np.where((comp != 0) & np.isfinite(comp), total + comp, total)


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
    # each resample is n draws of rng.randrange(n), as a loop of them would make it (the same for
    # every pair of n items: drawn once), and its sum is the one sum() makes of its items
    picks, block, means = _item_draws(n, resamples, seed), max(1, (1 << 22) // n), []
    floats = np.array(d, dtype=float) if all(type(x) is float for x in d) else None
    for start in range(0, resamples, block):
        rows = picks[start:start + block]
        if floats is not None:
            means.extend((_sum_terms(floats[rows.T], (len(rows),)) / n).tolist())
        else:
            means.extend(sum(map(d.__getitem__, row)) / n for row in rows.tolist())
    wins, losses = sum(x > 0 for x in d), sum(x < 0 for x in d)
    return {"n": n, "diff": sum(d) / n, "ci95": list(percentile_interval(means)),
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
    # a replicate draws k cases, then n questions (rng.randrange each, in that order), as the loop of
    # draws would (the same for every statistic of this shape: drawn once); the means are summed as
    # value() sums them (_rowsums), so that the replicates are those of the loop
    all_rows, all_weights = _case_question_draws(k, n, resamples, seed)
    arrays = {name: np.array(m, dtype=float) for name, m in mats.items()}
    draws, block = [], max(1, (1 << 22) // (k * n))
    for start in range(0, resamples, block):
        rows, weights = all_rows[start:start + block], all_weights[:, start:start + block]
        means = {}
        for name, m in arrays.items():  # each case's weighted sum over the questions: (replicate, case)
            per_case = _sum_terms((w[:, None] * q[None, :] for w, q in zip(weights, m.T)), (len(rows), k))
            means[name] = (_rowsums(np.take_along_axis(per_case, rows, axis=1)) / (k * n)).tolist()
        for i in range(len(rows)):
            try:
                v = stat({name: ms[i] for name, ms in means.items()})
            except ZeroDivisionError:
                v = math.nan
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


def _draw_rounds(bounds: list[int], rounds: int, rng: random.Random) -> np.ndarray:
    """``rounds`` rounds of ``rng.randrange(b)`` for each ``b`` of ``bounds`` in turn (round x draw), the
    very values a loop of them would give. A draw below b reads the generator's 32-bit words until one's
    top ``b.bit_length()`` bits are below b (see :class:`_Randbelow`), so a run of draws below the same
    b is the run of the next words b accepts: the words are read in bulk, and each run's words found
    from a count of the words each bound accepts."""
    if not all(0 < b < 1 << 32 for b in bounds):
        raise ValueError(f"draws below {max(bounds)}: only from 1 to 2**32 - 1")
    runs = [(b, len(list(g))) for b, g in itertools.groupby(bounds)]  # (bound, draws) in a round
    per_round = sum((1 << b.bit_length()) / b for b in bounds)  # words a round reads, on average
    block = max(1, int((1 << 21) / (len(set(bounds)) * per_round)))  # rounds at a time: bounded memory
    words, draws, done = np.empty(0, dtype=np.uint32), [], 0
    while done < rounds:
        count = min(block, rounds - done)
        fresh = max(0, int(per_round * count * _READ_AHEAD) + 4096 - len(words))
        while True:
            raw = rng.getrandbits(32 * fresh).to_bytes(4 * fresh, "little") if fresh else b""
            words = np.concatenate([words, np.frombuffer(raw, dtype="<u4")])
            accepted, tables = {}, {}  # bound -> the positions of the words it accepts; how many lie before each
            for b in set(bounds):
                ok = (words >> (32 - b.bit_length())) < b
                accepted[b] = np.flatnonzero(ok)
                tables[b] = (np.concatenate([[0], np.cumsum(ok)]).tolist(), accepted[b].tolist())
            steps = [(*tables[b], r) for b, r in runs]
            firsts, p = [], 0  # per run of each round: the index of its first word among its bound's
            try:
                for _ in range(count):
                    for seen, at, r in steps:
                        c = seen[p]
                        firsts.append(c)
                        p = at[c + r - 1] + 1
                break
            except IndexError:  # a run ran past the words read: read more (the same stream), redo the block
                fresh = max(len(words), 4096)
        firsts_by_run = np.array(firsts, dtype=np.int64).reshape(count, len(runs))
        cols = [words[accepted[b][firsts_by_run[:, j, None] + np.arange(r)]] >> (32 - b.bit_length())
                for j, (b, r) in enumerate(runs)]
        draws.append(np.concatenate(cols, axis=1).astype(np.int64))
        words, done = words[p:], done + count
    return np.concatenate(draws) if draws else np.empty((0, len(bounds)), dtype=np.int64)
