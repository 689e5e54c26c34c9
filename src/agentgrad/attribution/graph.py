"""The attribution graph: trace nodes plus weighted edges source -> call, and its pruning."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from agentgrad.attribution.weights import check_edge_rule
from agentgrad.core.trace import write_json_atomic
from agentgrad.errors import TraceError

T = TypeVar("T")


def strongest(items: Iterable[T], score: Callable[[T], float], k: int, rng: random.Random) -> list[T]:
    """The ``k`` highest-scoring items, strongest first; ties are broken by ``rng`` (one draw per
    item, in order, so the same seed keeps the same items). The one top-k choice of the package:
    the graph's pruning and the blame walk both choose edges with it."""
    return sorted(items, key=lambda x: (score(x), rng.random()), reverse=True)[:k]


@dataclass
class Edge:
    source: int
    target: int
    weights: dict[str, float]
    structural: bool = False  # a tool's result depends on the call that asked for it: weight 1

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "weights": self.weights, "structural": self.structural}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Edge":
        return cls(int(d["source"]), int(d["target"]), dict(d["weights"]), bool(d.get("structural", False)))


@dataclass
class AttributionGraph:
    """Nodes (id -> kind and name) and weighted edges; ``prune`` keeps the top-k incoming edges."""

    nodes: dict[int, dict[str, Any]]
    edges: list[Edge] = field(default_factory=list)

    def incoming(self, target: int) -> list[Edge]:
        return [e for e in self.edges if e.target == target]

    def prune(self, top_k: int = 1, rule: str = "mean_l1", seed: int = 0) -> "AttributionGraph":
        """Keep the ``top_k`` highest-scoring incoming edges of every node by an edge ``rule``.

        ``rule`` is one of the four weights, ``random`` (a seeded random score per edge) or ``all``
        (every edge kept). Ties (and ``random``) are decided by a RNG seeded with ``seed``, so the
        same seed keeps the same edges. Structural edges (tool results) are always kept.
        """
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        check_edge_rule(rule)
        rng = random.Random(seed)
        score = (lambda e: rng.random()) if rule == "random" else (lambda e: e.weights[rule])
        kept: list[Edge] = []
        for target in sorted({e.target for e in self.edges}):
            inc = self.incoming(target)
            if rule == "all" or all(e.structural for e in inc):
                kept.extend(inc)
                continue
            kept.extend(strongest(inc, score, top_k, rng))
        return AttributionGraph(dict(self.nodes), kept)

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": [{"id": i, **v} for i, v in sorted(self.nodes.items())],
            "edges": [e.to_dict() for e in self.edges],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AttributionGraph":
        return cls({int(n["id"]): {k: v for k, v in n.items() if k != "id"} for n in d["nodes"]},
                   [Edge.from_dict(e) for e in d["edges"]])

    def save(self, path: str | Path) -> None:
        write_json_atomic(Path(path), self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "AttributionGraph":
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise TraceError(f"cannot read attribution graph {path}: {e}") from None
