"""Connection weights (the four GBC formulas) and the blame methods that rank edges.

For a source S of call v with per-token gradients g_t = d/de_t sum_i log p(y_i) and input
embeddings e_t (n_S the tokens of S; several spans of one source are one set of tokens):

    mean_l1  = (1/n_S) sum_{t in S} ||g_t||_1        max_l1  = max_{t in S} ||g_t||_1
    mean_gxi = (1/n_S) sum_{t in S} g_t . e_t        max_gxi = max_{t in S} g_t . e_t
"""

from __future__ import annotations

import random
from typing import Any, Protocol, Sequence

from agentgrad.errors import RegistryError

WEIGHT_NAMES = ("mean_l1", "max_l1", "mean_gxi", "max_gxi")


def connection_weights(l1: Sequence[float], gxi: Sequence[float]) -> dict[str, float]:
    """The four weights from a source's per-token L1 norms and gradient-x-input values."""
    if len(l1) == 0:
        return {k: 0.0 for k in WEIGHT_NAMES}
    n = len(l1)
    return {
        "mean_l1": float(sum(l1) / n),
        "max_l1": float(max(l1)),
        "mean_gxi": float(sum(gxi) / n),
        "max_gxi": float(max(gxi)),
    }


class BlameMethod(Protocol):
    """Scores an incoming edge; the top-k scores of each call are kept."""

    name: str
    keep_all: bool

    def score(self, weights: dict[str, float], rng: random.Random) -> float: ...


class WeightBlame:
    keep_all = False

    def __init__(self, key: str):
        self.name = key

    def score(self, weights: dict[str, float], rng: random.Random) -> float:
        return weights[self.name]


class RandomBlame:
    """A seeded random weight per edge: isolates attribution from the optimizer in ablations."""

    name, keep_all = "random", False

    def score(self, weights: dict[str, float], rng: random.Random) -> float:
        return rng.random()


class AllBlame:
    """Every predecessor has weight 1 and is kept: the textual-gradient style of blame."""

    name, keep_all = "all", True

    def score(self, weights: dict[str, float], rng: random.Random) -> float:
        return 1.0


_METHODS: dict[str, BlameMethod] = {k: WeightBlame(k) for k in WEIGHT_NAMES}
_METHODS["random"] = RandomBlame()
_METHODS["all"] = AllBlame()


def register_method(method: BlameMethod) -> None:
    _METHODS[method.name] = method


def list_methods() -> list[str]:
    return list(_METHODS)


def get_method(name: str) -> BlameMethod:
    try:
        return _METHODS[name]
    except KeyError:
        raise RegistryError(f"unknown blame method {name!r}; valid: {', '.join(_METHODS)}") from None


def describe(method: BlameMethod) -> dict[str, Any]:
    return {"name": method.name, "keep_all": method.keep_all}
