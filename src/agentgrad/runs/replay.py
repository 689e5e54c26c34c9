"""Counterfactual replay of a recorded run: one call sampled afresh, everything after it generated again.

:class:`Replayer` is what the ``replay`` blame method (:func:`agentgrad.blame.methods.replay`) calls
through :class:`~agentgrad.blame.context.BlameContext`: given a recorded episode of a
:class:`~agentgrad.runs.graph_system.GraphSystem` and a check of its final answer, it runs the
system again with

- every call that neither is the replayed one nor reads it (directly or through others) fixed to
  its recorded output (:class:`Fixed`), so the rest of the run is the recorded one, a fault
  injected upstream included;
- the replayed call sampled afresh (:class:`Sampled`: the agent's settings at ``temperature``,
  seeded per call and sample, so a replay is reproducible);
- every call downstream of it generated again by the agents' own model and settings,

and reports whether the final answer is right, with the generations it took. The answer is checked
by ``check`` (the task's metric, code): no model is asked for a verdict, so replay has no reply
format to constrain; agents that declare an output schema keep it in their replays (the sampled
call's settings are the agent's, with only temperature and seed replaced). Supported: systems in
which every agent makes one call per run (no tool rounds); anything else is a one-line
:class:`~agentgrad.errors.ConfigError`.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from agentgrad.core.model import Generation, ThreadedAsyncMixin
from agentgrad.core.trace import Trace
from agentgrad.errors import AgentgradError, ConfigError, ServerUnreachableError

TEMPERATURE = 0.7  # a fresh sample: the usual sampling temperature of chat models


class Fixed(ThreadedAsyncMixin):
    """A model that returns ``text`` instead of generating; it describes itself as ``inner`` does,
    so a trace does not tell which call was fixed (or injected)."""

    def __init__(self, inner: Any, text: str):
        self.inner, self.text, self.name = inner, text, getattr(inner, "name", "model")

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def generate(self, messages, tools, settings):  # type: ignore[no-untyped-def]
        return Generation(text=self.text, finish_reason="stop")


class Sampled(ThreadedAsyncMixin):
    """``inner`` sampling at ``temperature`` with ``seed``, whatever the agent's settings say."""

    def __init__(self, inner: Any, temperature: float, seed: int):
        self.inner, self.temperature, self.seed, self.name = inner, temperature, seed, getattr(inner, "name", "model")

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def generate(self, messages, tools, settings):  # type: ignore[no-untyped-def]
        return self.inner.generate(messages, tools, settings.model_copy(update={"temperature": self.temperature,
                                                                                 "seed": self.seed}))


def downstream(trace: Trace, node: int) -> set[int]:
    """The nodes that read ``node``'s output, directly or through others."""
    out: set[int] = set()
    for n in trace.nodes[node + 1:]:
        if node in n.parents or out.intersection(n.parents):
            out.add(n.id)
    return out


class Replayer:
    """``(node, sample) -> (right, generations)`` for one recorded episode (see the module docstring).

    Args:
        make_system: a fresh system of the recorded run's configuration, on the agents' real models.
        example: the episode's example (its inputs).
        trace: the recorded episode.
        check: ``(output, trace) -> bool``: whether a run's final answer is right.
        seed: with the episode id, seeds the fresh samples.
        temperature: the fresh samples' temperature.
        episode: the episode's id (run ids of the replays, and their seeds).
    """

    def __init__(self, make_system: Callable[[], Any], example: dict[str, Any], trace: Trace,
                 check: Callable[[Any, Trace], bool], seed: int = 0, temperature: float = TEMPERATURE,
                 episode: str = "episode"):
        self.make_system, self.example, self.trace, self.check = make_system, example, trace, check
        self.seed, self.temperature, self.episode = seed, temperature, episode

    def __call__(self, node: int, sample: int) -> tuple[bool, int]:
        names = [n.name for n in self.trace.nodes if n.kind == "call"]
        twice = sorted({a for a in names if names.count(a) > 1})
        if twice:
            raise ConfigError(f"replay needs one call per agent and run; agent {twice[0]!r} made "
                              f"{names.count(twice[0])} (tool rounds are not replayed)")
        target = self.trace.nodes[node]
        if target.kind != "call":
            raise ConfigError(f"replay samples calls; node {node} is a {target.kind}")
        after = downstream(self.trace, node)
        system = self.make_system()
        for n in self.trace.nodes:
            if n.kind == "call" and n.id != node and n.id not in after:
                agent = system.nodes[n.name]
                agent.model = Fixed(agent.model, n.text)
        key = f"{self.episode}/{node}/{sample}/{self.seed}"
        agent = system.nodes[target.name]
        agent.model = Sampled(agent.model, self.temperature, int(hashlib.sha256(key.encode()).hexdigest()[:8], 16))
        generations = 1 + sum(self.trace.nodes[n].kind == "call" for n in after)
        try:
            ep = system.run(self.example, id=f"{self.episode}-replay-{node}-{sample}")
        except ServerUnreachableError:  # no server: not a replay that failed, a benchmark that cannot go on
            raise
        except AgentgradError:  # a replay that breaks the run (a reply too long, ...) did not make it right
            return False, generations
        return bool(self.check(ep.output, ep.trace)), generations
