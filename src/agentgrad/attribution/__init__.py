"""GBC attribution: connection weights from a white-box scorer, the attribution graph."""

from agentgrad.attribution.graph import AttributionGraph, Edge
from agentgrad.attribution.render import RenderedCall, render_call
from agentgrad.attribution.scorer import NodeAttribution, Scorer, SourceAttribution, build_graph
from agentgrad.attribution.weights import EDGE_RULES, WEIGHT_NAMES, connection_weights

__all__ = [
    "AttributionGraph", "EDGE_RULES", "Edge", "NodeAttribution", "RenderedCall", "Scorer", "SourceAttribution",
    "WEIGHT_NAMES", "build_graph", "connection_weights", "render_call",
]
