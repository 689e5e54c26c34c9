"""GBC attribution: connection weights from a white-box scorer, the attribution graph."""

from agentgrad.attribution.graph import AttributionGraph, Edge
from agentgrad.attribution.render import RenderedCall, render_call
from agentgrad.attribution.scorer import NodeAttribution, Scorer, SourceAttribution, build_graph
from agentgrad.attribution.weights import WEIGHT_NAMES, connection_weights, get_method, list_methods, register_method

__all__ = [
    "AttributionGraph", "Edge", "NodeAttribution", "RenderedCall", "Scorer", "SourceAttribution", "WEIGHT_NAMES",
    "build_graph", "connection_weights", "get_method", "list_methods", "register_method", "render_call",
]
