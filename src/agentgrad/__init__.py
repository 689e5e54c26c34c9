"""agentgrad: find which agent of a multi-agent LLM system is to blame, and fix its prompt.

Importing this package has no side effects: no files, clients, handlers or model loads.
"""

from agentgrad.core.agent import Agent, Output, Prompt
from agentgrad.runs.graph_system import GraphSystem
from agentgrad.core.system import Episode, System
from agentgrad.core.text import Text
from agentgrad.core.tools import Tool
from agentgrad.core.trace import Node, Span, ToolCall, Trace, current_trace
from agentgrad.errors import (
    AgentgradError,
    ConfigError,
    ContextLengthError,
    GraphError,
    ModelError,
    RegistryError,
    RunError,
    TraceError,
)
from agentgrad.core.model import Generation, GenerationSettings, LanguageModel
from agentgrad.models.registry import create_model, list_backends, register_backend
from agentgrad.blame.backward import Trajectory, VerbalLoss
from agentgrad.attribution.result import Attribution
from agentgrad.blame.context import Blame
from agentgrad.blame.verdict import Verdict
from agentgrad.blame.team import TeamVerdict, TraceVerdict
from agentgrad.blame.methods import list_blame_methods
from agentgrad.blame.losses import verbal_loss
from agentgrad.runs.blame_set import BlameSet, blame_set
from agentgrad.api import OptimizeResult, attribute, blame, load_model, load_scorer, load_system, optimize

__version__ = "0.1.0"


__all__ = [
    "Attribution", "Blame", "BlameSet", "OptimizeResult", "TeamVerdict", "TraceVerdict", "Trajectory", "Verdict",
    "VerbalLoss", "attribute", "blame", "blame_set", "list_blame_methods", "load_model", "load_scorer",
    "load_system", "optimize", "verbal_loss", "Agent", "AgentgradError", "ConfigError", "ContextLengthError", "Episode", "Generation",
    "GenerationSettings", "GraphError", "GraphSystem", "LanguageModel", "ModelError", "Node", "Output",
    "Prompt", "RegistryError", "RunError", "Span", "System", "Text", "Tool", "ToolCall", "Trace",
    "TraceError", "create_model", "current_trace", "list_backends", "register_backend",
]
