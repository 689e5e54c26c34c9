"""Connection weights: the four GBC formulas, and the rules that rank a call's incoming edges.

For a source S of call v with per-token gradients g_t = d/de_t sum_i log p(y_i) and input
embeddings e_t (n_S the tokens of S; several spans of one source are one set of tokens):

    mean_l1  = (1/n_S) sum_{t in S} ||g_t||_1        max_l1  = max_{t in S} ||g_t||_1
    mean_gxi = (1/n_S) sum_{t in S} g_t . e_t        max_gxi = max_{t in S} g_t . e_t

An edge rule ranks the incoming edges of a call when a graph is pruned to its top-k edges: one of
the four weights, ``random`` (a seeded random score per edge) or ``all`` (every edge kept). Blame
methods (which agent is to blame for a loss) are :mod:`agentgrad.blame.methods`; each names the
edge rule it walks by.
"""

from __future__ import annotations

from typing import Sequence

from agentgrad.errors import RegistryError

WEIGHT_NAMES = ("mean_l1", "max_l1", "mean_gxi", "max_gxi")
EDGE_RULES = WEIGHT_NAMES + ("random", "all")


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


def check_edge_rule(rule: str) -> str:
    """``rule`` when it is an edge rule, else a :class:`RegistryError` listing them."""
    if rule not in EDGE_RULES:
        raise RegistryError(f"unknown edge rule {rule!r}; valid: {', '.join(EDGE_RULES)} "
                            f"(blame methods: agentgrad.blame.methods)")
    return rule
