"""The attribution graph: trace nodes plus weighted edges source -> call, and its pruning."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgrad.attribution.weights import get_method
from agentgrad.core.trace import write_json_atomic
from agentgrad.errors import TraceError


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

    def prune(self, top_k: int = 1, method: str = "mean_l1", seed: int = 0) -> "AttributionGraph":
        """Keep the ``top_k`` highest-scoring incoming edges of every node.

        Ties (and the ``random`` method) are decided by a RNG seeded with ``seed``, so the same
        seed keeps the same edges. Structural edges (tool results) are always kept; ``all``
        keeps every edge.
        """
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        blame = get_method(method)
        rng = random.Random(seed)
        kept: list[Edge] = []
        for target in sorted({e.target for e in self.edges}):
            inc = self.incoming(target)
            if blame.keep_all or all(e.structural for e in inc):
                kept.extend(inc)
                continue
            scored = [(blame.score(e.weights, rng), rng.random(), e) for e in inc]
            scored.sort(key=lambda x: (-x[0], x[1]))  # ties broken by the seeded second key
            kept.extend(e for _, _, e in scored[:top_k])
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
