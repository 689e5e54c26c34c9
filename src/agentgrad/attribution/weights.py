"""The rules that rank a call's incoming edges when a graph is pruned to its top-k edges.

An edge rule is one of the four GBC weights (defined, with their formulas, in
:mod:`agentgrad.attribution.gbc`), ``random`` (a seeded random score per edge) or ``all`` (every
edge kept). Blame methods (which agent is to blame for a loss) are :mod:`agentgrad.blame.methods`;
each names the edge rule it walks by.
"""

from __future__ import annotations

from agentgrad.attribution.gbc import WEIGHT_NAMES, connection_weights
from agentgrad.errors import RegistryError

EDGE_RULES = WEIGHT_NAMES + ("random", "all")

__all__ = ["EDGE_RULES", "WEIGHT_NAMES", "check_edge_rule", "connection_weights"]


def check_edge_rule(rule: str) -> str:
    """``rule`` when it is an edge rule, else a :class:`RegistryError` listing them."""
    if rule not in EDGE_RULES:
        raise RegistryError(f"unknown edge rule {rule!r}; valid: {', '.join(EDGE_RULES)} "
                            f"(blame methods: agentgrad.blame.methods)")
    return rule
