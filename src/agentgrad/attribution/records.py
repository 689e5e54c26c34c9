"""What the scorer records: a scored call (:class:`NodeAttribution`) and each of its sources
(:class:`SourceAttribution`), with ``to_dict``/``from_dict``; a call prepared for scoring
(:class:`PreparedCall`); and the attribution graph built from scored calls (:func:`build_graph`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agentgrad.attribution.graph import AttributionGraph, Edge
from agentgrad.attribution.render import RenderedCall
from agentgrad.core.trace import Trace


@dataclass
class SourceAttribution:
    """One source (a predecessor node) of a call: its tokens and weights."""

    source: int
    kind: str
    name: str
    token_ranges: list[tuple[int, int]]
    weights: dict[str, float]
    positions: list[int] = field(default_factory=list)  # the source's token positions (union of ranges)
    l1: list[float] = field(default_factory=list)  # ||g_t||_1 per position
    gxi: list[float] = field(default_factory=list)  # g_t . e_t per position
    chars: list[tuple[int, int, int] | None] = field(default_factory=list)  # (message, start, end) per position

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "kind": self.kind,
            "name": self.name,
            "token_ranges": [list(r) for r in self.token_ranges],
            "weights": self.weights,
            "token_scores": {"positions": self.positions, "l1": self.l1, "gxi": self.gxi,
                             "chars": [list(c) if c else None for c in self.chars]},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SourceAttribution":
        ts = d.get("token_scores") or {}
        return cls(int(d["source"]), d["kind"], d["name"], [tuple(r) for r in d["token_ranges"]], dict(d["weights"]),
                   list(ts.get("positions", [])), list(ts.get("l1", [])), list(ts.get("gxi", [])),
                   [tuple(c) if c else None for c in ts.get("chars", [])])




@dataclass
class NodeAttribution:
    """The scored view of one call node."""

    node_id: int
    agent: str
    input_ids: list[int]
    output_token_range: tuple[int, int]
    sources: list[SourceAttribution]
    mode: str  # "cached" or "naive"
    prefix_tokens: int = 0
    cache_hit: bool = False
    log_prob: float = 0.0  # sum of log p(output tokens)
    seconds: float = 0.0
    skipped: str | None = None
    render: str = "placeholder"
    prompt: SourceAttribution | None = None  # the call's own prompt scored like a source (prompt_weights)

    def to_dict(self) -> dict[str, Any]:
        extra = {"prompt": self.prompt.to_dict()} if self.prompt is not None else {}
        return {**extra, 
            "node_id": self.node_id,
            "agent": self.agent,
            "input_ids": self.input_ids,
            "output_token_range": list(self.output_token_range),
            "sources": [s.to_dict() for s in self.sources],
            "mode": self.mode,
            "prefix_tokens": self.prefix_tokens,
            "cache_hit": self.cache_hit,
            "log_prob": self.log_prob,
            "seconds": self.seconds,
            "skipped": self.skipped,
            "render": self.render,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "NodeAttribution":
        return cls(int(d["node_id"]), d["agent"], list(d["input_ids"]), tuple(d["output_token_range"]),
                   [SourceAttribution.from_dict(s) for s in d["sources"]], d["mode"], int(d.get("prefix_tokens", 0)),
                   bool(d.get("cache_hit", False)), float(d.get("log_prob", 0.0)), float(d.get("seconds", 0.0)),
                   d.get("skipped"), d.get("render", "placeholder"),
                   SourceAttribution.from_dict(d["prompt"]) if d.get("prompt") else None)



class PreparedCall(NamedTuple):
    """A call rendered for scoring, what the scorer's passes need of it."""

    rendering: RenderedCall
    fields: dict[str, Any]  # the NodeAttribution fields known before scoring (node, tokens, mode, render)
    targets: list[int] | None  # the output tokens of a loss-targeted objective (None: every output token)
    prompt_positions: dict[int, tuple[int, int, int]]  # the prompt's tokens (prompt_weights), else empty
    first_prompt_token: int | None  # the first of them, where the pass with gradients must start


def token_runs(positions: list[int]) -> list[tuple[int, int]]:
    """Sorted positions as [start, end) ranges of consecutive ones."""
    out: list[tuple[int, int]] = []
    for t in positions:
        if out and out[-1][1] == t:
            out[-1] = (out[-1][0], t + 1)
        else:
            out.append((t, t + 1))
    return out



def build_graph(trace: Trace, results: list[NodeAttribution]) -> AttributionGraph:
    """Weighted edges source -> call from scored nodes, plus structural edges call -> tool."""
    nodes = {n.id: {"kind": n.kind, "name": n.name} for n in trace.nodes}
    edges: list[Edge] = []
    for res in results:
        edges.extend(Edge(s.source, res.node_id, dict(s.weights)) for s in res.sources)
    for n in trace.nodes:
        if n.kind == "tool":
            edges.extend(Edge(p, n.id, {k: 1.0 for k in ("mean_l1", "max_l1", "mean_gxi", "max_gxi")}, True)
                         for p in n.parents)
    edges.sort(key=lambda e: (e.target, e.source))
    return AttributionGraph(nodes, edges)
