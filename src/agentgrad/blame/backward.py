"""Verbal losses and the backward walk over the attribution graph.

A :class:`VerbalLoss` is a natural-language description of what went wrong, attached to the node(s)
that produced the wrong part of the result. :func:`backward` prunes the attribution graph to the
top-k incoming edges of every node (by an edge rule) and walks from each target back to the roots
(:mod:`agentgrad.blame.walk`); every root-to-loss path is a :class:`Trajectory` naming the agents
on it. The optimisation loop walks a blame method instead (:func:`agentgrad.blame.outcome.blame_episode`),
whose trajectories are the paths it walked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentgrad.attribution.graph import AttributionGraph
from agentgrad.blame.walk import kept_parents, root_paths
from agentgrad.core.trace import Node, Trace
from agentgrad.errors import TraceError

GENERIC_LOSS = "Expected: {expected}\nProduced: {produced}\nWhat is wrong: {explanation}"


@dataclass
class VerbalLoss:
    """What went wrong (``text``), and the nodes that produced the wrong part (``targets``)."""

    text: str
    targets: list[int]
    kind: str = "generic"
    details: dict[str, Any] = field(default_factory=dict)
    # Optional: per target node, the character ranges of its output that the loss names as wrong
    # (the loss-targeted objective differentiates only those tokens).
    spans: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    @classmethod
    def generic(cls, expected: str, produced: str, explanation: str, targets: list[int],
                spans: dict[int, list[tuple[int, int]]] | None = None) -> "VerbalLoss":
        """The task-independent template: expected vs produced, with an explanation (and, when the
        wrong text's place is known, its ``spans``: per target, character ranges of its output)."""
        text = GENERIC_LOSS.format(expected=expected, produced=produced, explanation=explanation)
        return cls(text, list(targets), "generic", {"expected": expected, "produced": produced}, dict(spans or {}))

    def attach(self, trace: Trace) -> Node:
        """Record the loss as a ``loss`` node whose parents are its targets."""
        for t in self.targets:
            if not 0 <= t < len(trace.nodes):
                raise TraceError(f"loss targets node {t}, which the trace does not have")
        return trace.add(Node(id=-1, kind="loss", name=self.kind, text=self.text, parents=list(self.targets),
                              meta={"details": self.details}))

    def to_dict(self) -> dict[str, Any]:
        d = {"text": self.text, "targets": self.targets, "kind": self.kind, "details": self.details}
        if self.spans:
            d["spans"] = {str(k): [list(r) for r in v] for k, v in self.spans.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VerbalLoss":
        spans = {int(k): [(int(a), int(b)) for a, b in v] for k, v in (d.get("spans") or {}).items()}
        return cls(d["text"], [int(t) for t in d["targets"]], d.get("kind", "generic"), dict(d.get("details", {})),
                   spans)


@dataclass
class Trajectory:
    """A path root -> ... -> target along kept edges, and the loss at its end."""

    nodes: list[int]
    agents: list[str]  # the agents of the call nodes on the path, in path order
    loss: VerbalLoss

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "agents": self.agents, "loss": self.loss.to_dict()}


def backward(
    graph: AttributionGraph,
    loss: VerbalLoss,
    top_k: int = 1,
    method: str = "mean_l1",
    seed: int = 0,
    max_paths: int = 64,
) -> list[Trajectory]:
    """Every path from a root to one of ``loss.targets`` along the kept edges (at most ``max_paths``).

    ``method`` is an edge rule: one of the four weights, ``random`` or ``all``."""
    paths = root_paths(kept_parents(graph, top_k, method, seed), loss.targets, max_paths)
    return [trajectory(graph.nodes, p, loss) for p in paths]


def trajectory(nodes: dict[int, dict[str, Any]], path: list[int], loss: VerbalLoss) -> Trajectory:
    """The trajectory of ``path`` (node ids, root first), naming the agents of its calls."""
    return Trajectory(path, [nodes[n]["name"] for n in path if nodes[n]["kind"] == "call"], loss)


def blamed_agents(trajectories: list[Trajectory]) -> dict[str, int]:
    """How often each agent appears on the trajectories (once per trajectory)."""
    counts: dict[str, int] = {}
    for t in trajectories:
        for a in dict.fromkeys(t.agents):
            counts[a] = counts.get(a, 0) + 1
    return counts


def cut(text: str, limit: int) -> str:
    """``text`` shortened to about ``limit`` characters, the cut made visible."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = max(limit * 2 // 3, 1)
    tail = max(limit - head, 0)
    removed = len(text) - head - tail
    return text[:head] + f" ... [{removed:,} characters cut] ... " + (text[-tail:] if tail else "")


def render_trajectories(
    trace: Trace, trajectories: list[Trajectory], max_node_chars: int = 300, max_chars: int = 6000
) -> str:
    """Compact text for the optimizer: ``name: output excerpt -> ... -> LOSS: text`` per trajectory.

    Each node's text is cut to ``max_node_chars`` and the whole to ``max_chars``; cuts are visible.
    """
    lines = []
    for i, t in enumerate(trajectories, 1):
        steps = []
        for n in t.nodes:
            node = trace.nodes[n]
            label = {"call": f"[agent {node.name}]", "tool": f"[tool {node.name}]"}.get(node.kind, f"[{node.kind} {node.name}]")
            body = node.text if not node.tool_calls else node.text + " " + "; ".join(
                f"calls {c.name}({c.arguments})" for c in node.tool_calls)
            steps.append(f"{label} {cut(body.strip(), max_node_chars)!r}")
        lines.append(f"Trajectory {i}: " + " -> ".join(steps) + f" -> LOSS: {cut(t.loss.text, max_node_chars * 2)}")
    return cut("\n".join(lines), max_chars)
