"""Systems: code that calls agents, run once per example (or once per turn) inside a trace."""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from typing import Any

from agentgrad.core.agent import Agent
from agentgrad.core.text import Text
from agentgrad.core.trace import Trace, current_trace


@dataclass
class Episode:
    """The result of running a system on one example: its output and the trace that produced it."""

    output: Any
    trace: Trace


def wrap_inputs(trace: Trace, value: Any, name: str) -> Any:
    """Record strings (also inside lists and dicts) as input nodes; keep other values as they are."""
    if isinstance(value, Text):
        return value
    if isinstance(value, str):
        return trace.input(value, name=name)
    if isinstance(value, list):
        return [wrap_inputs(trace, v, f"{name}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: wrap_inputs(trace, v, f"{name}.{k}") for k, v in value.items()}
    return value


class System:
    """A multi-agent system written as code. Subclass and define ``forward`` or ``aforward``.

    Agents stored as attributes (also in lists and dicts) are found by :meth:`agents`, so an
    optimizer can read and rewrite their prompts. Example::

        class Pipeline(System):
            def __init__(self, model):
                self.a = Agent("a", "Summarise.", model)
                self.b = Agent("b", "Answer from the summary.", model)

            def forward(self, question):
                return self.b(question=question, summary=self.a(question))
    """

    name = "system"

    def forward(self, **inputs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines neither forward nor aforward")

    async def aforward(self, **inputs: Any) -> Any:
        # The context (and so the active trace) is copied into the worker thread.
        return await asyncio.to_thread(self.forward, **inputs)

    def agents(self) -> dict[str, Agent]:
        """Every agent reachable from this system's attributes, by name."""
        found: dict[str, Agent] = {}

        def visit(v: Any) -> None:
            if isinstance(v, Agent):
                found.setdefault(v.name, v)
            elif isinstance(v, (list, tuple)):
                for x in v:
                    visit(x)
            elif isinstance(v, dict):
                for x in v.values():
                    visit(x)

        visit(list(vars(self).values()))
        return found

    def input_names(self) -> list[str] | None:
        """Names of the example fields the system reads (``None``: all of them)."""
        sig = inspect.signature(self.forward if type(self).forward is not System.forward else self.aforward)
        if any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
            return None
        return [n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]

    def select_inputs(self, example: dict[str, Any]) -> dict[str, Any]:
        """The fields of ``example`` that ``forward`` takes (all of them when it takes ``**kwargs``)."""
        names = self.input_names()
        return dict(example) if names is None else {k: example[k] for k in names if k in example}

    def __call__(self, **inputs: Any) -> Any:
        """Call ``forward`` inside the active trace (one turn of a multi-turn episode)."""
        trace = current_trace()
        if trace is None:
            raise RuntimeError("call a system inside `with Trace():`, or use system.run(example)")
        return self.forward(**{k: wrap_inputs(trace, v, k) for k, v in inputs.items()})

    def run(self, example: dict[str, Any], id: str = "") -> Episode:
        """Run on one example in a new trace; string fields become input nodes."""
        with Trace(id=id) as trace:
            inputs = {k: wrap_inputs(trace, v, k) for k, v in self.select_inputs(example).items()}
            if type(self).forward is System.forward:
                output = asyncio.run(self.aforward(**inputs))
            else:
                output = self.forward(**inputs)
        return Episode(output, trace)

    async def arun(self, example: dict[str, Any], id: str = "") -> Episode:
        with Trace(id=id) as trace:
            inputs = {k: wrap_inputs(trace, v, k) for k, v in self.select_inputs(example).items()}
            output = await self.aforward(**inputs)
        return Episode(output, trace)
