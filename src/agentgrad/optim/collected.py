"""What a failed sample teaches the next step (:class:`Collected`), and its attribution record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentgrad.attribution.io import attribution_record
from agentgrad.blame.backward import Trajectory, VerbalLoss, render_trajectories
from agentgrad.core.trace import Trace


@dataclass
class Collected:
    """What one failed sample contributes to the next step."""

    sample: str
    trajectories: list[Trajectory]
    loss: VerbalLoss
    rendered: dict[str, str]  # agent -> this sample's trajectories through it, rendered
    excerpts: dict[str, list[str]]  # agent -> its outputs on this sample's trajectories
    agents: list[str]  # every agent that made a call in the failed episode
    blamed: list[str] = field(default_factory=list)  # the agents the blame method puts at the top
    pairs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # agent -> (output, target)
    # agent -> per call on the failure paths, (start, end, L1) of its prompt's tokens (prompt_weights)
    prompt_scores: dict[str, list[list[tuple[int, int, float]]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"sample": self.sample, "trajectories": [t.to_dict() for t in self.trajectories],
                "loss": self.loss.to_dict(), "rendered": self.rendered, "excerpts": self.excerpts,
                "agents": self.agents, "blamed": self.blamed, "pairs": self.pairs, "prompt_scores": self.prompt_scores}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Collected":
        return cls(d["sample"], [Trajectory(t["nodes"], t["agents"], VerbalLoss.from_dict(t["loss"]))
                                 for t in d["trajectories"]], VerbalLoss.from_dict(d["loss"]), d["rendered"],
                   d["excerpts"], d["agents"], d["blamed"], {a: [tuple(p) for p in ps] for a, ps in d["pairs"].items()},
                   {a: [[tuple(x) for x in c] for c in cs] for a, cs in d["prompt_scores"].items()})


def prompt_scores(results: list[Any], trajectories: list[Trajectory]) -> dict[str, list[list[tuple[int, int, float]]]]:
    """Per agent, for each of its calls on the trajectories: (start, end, L1) of its prompt's tokens
    (characters of the prompt), from attributions scored with ``prompt_weights``; else nothing."""
    by_node = {a.node_id: a for a in results}
    out: dict[str, list[list[tuple[int, int, float]]]] = {}
    for n in dict.fromkeys(n for t in trajectories for n in t.nodes):
        a = by_node.get(n)
        if a is not None and a.prompt is not None and a.prompt.l1:
            out.setdefault(a.agent, []).append([(c[1], c[2], v) for c, v in zip(a.prompt.chars, a.prompt.l1) if c])
    return out


def failure_record(trace: Trace, results: list[Any], graph: Any, outcome: Any, blame_error: str | None,
                   loss: VerbalLoss, score: float, scorer: Any, method: str, top_k: int, seed: int,
                   trace_path: str, weight: str) -> dict[str, Any]:
    """A failed sample's attribution record: the attribution file of ``trace``
    (:func:`~agentgrad.attribution.io.attribution_record`) with the loss, the score that
    :mod:`agentgrad.blame.credit` splits, the trajectories and the blame (or why there is none)."""
    record = attribution_record(trace, results, graph, scorer, method, top_k, seed, trace_path, weight)
    record["loss"] = loss.to_dict()
    record["score"] = score
    record["trajectories"] = [t.to_dict() for t in (outcome.trajectories if outcome else [])]
    record["blame"] = outcome.to_dict() if outcome else {"method": method, "error": blame_error}
    return record


def collect(sample: str, trace: Trace, loss: VerbalLoss, outcome: Any, results: list[Any],
            pairs: dict[str, list[tuple[str, str]]], max_node_chars: int, max_chars: int) -> Collected:
    """What the optimizer reads of a failed sample: per agent on the blame's trajectories, its
    outputs there and those trajectories rendered (``max_node_chars`` / ``max_chars``)."""
    trajs = outcome.trajectories if outcome else []
    excerpts: dict[str, list[str]] = {}
    for t in trajs:
        for n in t.nodes:
            node = trace.nodes[n]
            if node.kind == "call":
                excerpts.setdefault(node.name, []).append(node.text)
    rendered = {a: render_trajectories(trace, [t for t in trajs if a in t.agents], max_node_chars, max_chars)
                for a in excerpts}
    return Collected(sample, trajs, loss, rendered, excerpts, sorted({n.name for n in trace.calls()}),
                     outcome.repair if outcome else [], pairs, prompt_scores(results, trajs))
