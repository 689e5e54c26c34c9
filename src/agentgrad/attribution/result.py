"""A typed attribution result: one trace's scored calls and its weighted graph, with save and load."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgrad.attribution.graph import AttributionGraph
from agentgrad.attribution.scorer import NodeAttribution
from agentgrad.core.trace import Trace, write_json_atomic
from agentgrad.errors import TraceError

SCHEMA = "agentgrad.attribution.result"


@dataclass
class Attribution:
    """What :func:`agentgrad.attribute` returns: per call, the gradients with respect to each source
    (``nodes``), and the connection weights as a graph (``graph``), for ``trace``."""

    trace: Trace
    nodes: list[NodeAttribution]
    graph: AttributionGraph
    scorer: dict[str, Any] = field(default_factory=dict)

    def node(self, node_id: int) -> NodeAttribution:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"node {node_id} was not attributed")

    def weights(self, node_id: int, weight: str = "max_l1") -> dict[str, float]:
        """The connection weights into call ``node_id``, by source name (the agent or input)."""
        return {s.name: s.weights[weight] for s in self.node(node_id).sources}

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "schema_version": 1, "trace": self.trace.to_dict(), "scorer": self.scorer,
                "nodes": [n.to_dict() for n in self.nodes], "graph": self.graph.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Attribution":
        if d.get("schema") != SCHEMA:
            raise TraceError(f"not an attribution result (schema {d.get('schema')!r}, expected {SCHEMA!r})")
        return cls(Trace.from_dict(d["trace"]), [NodeAttribution.from_dict(n) for n in d["nodes"]],
                   AttributionGraph.from_dict(d["graph"]), dict(d.get("scorer") or {}))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        write_json_atomic(path, self.to_dict())
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Attribution":
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise TraceError(f"cannot read attribution result {path}: {e}") from None
