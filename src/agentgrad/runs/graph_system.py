"""Systems declared in YAML: agents and the nodes feeding each, run in topological order."""

from __future__ import annotations

from typing import Any, Callable

from agentgrad.core.config import SystemConfig
from agentgrad.core.agent import Agent, Prompt
from agentgrad.core.system import System
from agentgrad.core.tools import Tool
from agentgrad.errors import ConfigError, GraphError
from agentgrad.core.model import GenerationSettings, LanguageModel
from agentgrad.models.registry import create_model


def build_agents(cfg: SystemConfig, models: dict[str, LanguageModel],
                 tools_for: Callable[[str], list[Tool]] = lambda name: [],
                 order: list[str] | None = None) -> dict[str, Agent]:
    """One :class:`Agent` per entry of ``cfg.agents`` (in ``order``, default the configuration's), on
    its model with its generation settings and the tools ``tools_for(name)`` gives: the one place
    agents are built from a configuration."""
    agents = {}
    for name in order if order is not None else list(cfg.agents):
        spec = cfg.agents[name]
        if spec.model not in models:
            raise ConfigError(f"agent {name!r} uses model {spec.model!r}, which is not defined under models "
                              f"(defined: {', '.join(models) or 'none'})")
        settings = GenerationSettings.model_validate(cfg.settings.model_dump() | spec.settings)
        agents[name] = Agent(name, Prompt(spec.prompt, tuple(spec.protected)), models[spec.model], tools_for(name),
                             settings, spec.template, spec.max_tool_rounds, spec.model, spec.parallel_tool_calls)
    return agents


def topological_levels(cfg: SystemConfig) -> list[list[str]]:
    """Agents grouped in levels (each depends only on earlier levels); raises on dangling inputs and cycles."""
    names = list(cfg.agents)
    clash = set(names) & set(cfg.inputs)
    if clash:
        raise GraphError(f"{sorted(clash)[0]!r} is both an input and an agent; rename one")
    for name, spec in cfg.agents.items():
        for src in spec.inputs:
            if src not in cfg.agents and src not in cfg.inputs:
                raise GraphError(
                    f"agent {name!r} reads {src!r}, which is neither an input ({', '.join(cfg.inputs) or 'none'}) "
                    f"nor an agent"
                )
        if spec.model not in cfg.models:
            raise GraphError(
                f"agent {name!r} uses model {spec.model!r}, which is not defined under models "
                f"(defined: {', '.join(cfg.models) or 'none'})"
            )
    cycle = _find_cycle(cfg)
    if cycle:
        raise GraphError(f"the agents form a cycle: {' -> '.join(cycle)}")
    done: set[str] = set()
    levels: list[list[str]] = []
    while len(done) < len(names):
        level = [n for n in names if n not in done and all(s in done or s in cfg.inputs for s in cfg.agents[n].inputs)]
        levels.append(level)
        done.update(level)
    if cfg.output is not None and cfg.output not in cfg.agents:
        raise GraphError(f"output {cfg.output!r} is not an agent (agents: {', '.join(names)})")
    return levels


def _find_cycle(cfg: SystemConfig) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: finished
    stack: list[str] = []

    def dfs(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for s in cfg.agents[n].inputs:
            if s not in cfg.agents:
                continue
            if state.get(s) == 1:
                return stack[stack.index(s) :] + [s]
            if s not in state:
                found = dfs(s)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in cfg.agents:
        if n not in state:
            found = dfs(n)
            if found:
                return found
    return None


class GraphSystem(System):
    """A :class:`System` built from a :class:`SystemConfig`."""

    def __init__(self, cfg: SystemConfig, models: dict[str, LanguageModel] | None = None):
        self.cfg = cfg
        self.name = cfg.name
        self.levels = topological_levels(cfg)
        order = [n for level in self.levels for n in level]
        self.output_name = cfg.output or order[-1]
        if models is None:
            models = {n: create_model(n, spec.backend, **spec.options()) for n, spec in cfg.models.items()}
        self.models = models
        self.nodes: dict[str, Agent] = build_agents(cfg, models, order=order)

    def input_names(self) -> list[str]:
        return list(self.cfg.inputs)

    def select_inputs(self, example: dict[str, Any]) -> dict[str, Any]:
        missing = [k for k in self.cfg.inputs if k not in example]
        if missing:
            raise GraphError(f"the example has no field {missing[0]!r}, an input of system {self.name!r}")
        return {k: example[k] for k in self.cfg.inputs}

    def forward(self, **inputs: Any) -> Any:
        values = dict(inputs)
        for level in self.levels:
            for n in level:
                values[n] = self.nodes[n](**{s: values[s] for s in self.cfg.agents[n].inputs})
        return values[self.output_name]

    async def aforward(self, **inputs: Any) -> Any:
        # Agents run one after another in topological order, so node ids (and so traces) are the
        # same on every run with deterministic models; throughput comes from running examples
        # concurrently (``agentgrad run --concurrency``).
        values = dict(inputs)
        for level in self.levels:
            for n in level:
                values[n] = await self.nodes[n].acall(**{s: values[s] for s in self.cfg.agents[n].inputs})
        return values[self.output_name]
