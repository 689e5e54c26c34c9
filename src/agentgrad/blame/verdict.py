"""One method's verdict on one trace: the one type every blame result is made of.

A :class:`Verdict` holds what a method says about one failed trace:

- **ranking**: every entry the method ranked, best first (:class:`~agentgrad.blame.context.Blame`);
- **blamed**: the entries tied at the top of each loss target's ranking (one for a ranked method,
  every node reached for ``path`` and ``all``);
- **repair**: the agents whose prompts to repair (:func:`repair_agents`, the one rule: a call's
  agent; a tool result's caller, or the agent it ran for where no call asked for it; an input
  blames no prompt);
- **trajectories**: the paths the method walked (what the optimizer reads) and their **parents**;
- the top entry as a table shows it (``agent``, ``node``, ``kind``, ``score``, the runner-up in
  ``next``, the two best ``scores``), with the node's original ``span`` id and name where the trace
  was imported from an observability export;
- **reader**: the fact reader the method read the text with (None where it reads no facts).

One trace's verdicts make a :class:`~agentgrad.blame.team.TraceVerdict`; a set's, a
:class:`~agentgrad.blame.team.TeamVerdict`. ``to_dict``/``from_dict`` round-trip a verdict (the
ranking kept to its first ten entries; the trajectories as the agents on each path).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentgrad.blame.backward import Trajectory
from agentgrad.blame.context import Blame
from agentgrad.core.trace import Trace

RANKING_KEPT = 10  # the ranking entries a stored verdict keeps


def repair_agents(trace: Trace, blamed: list[Blame]) -> list[str]:
    """The agents whose prompts the blamed entries point at: a call's agent; a tool result's calling
    agents, or where no call asked for it (a tool a framework node ran itself) the agent it ran for
    (``meta["agent"]``, recorded at import); an input (the task itself) names no prompt."""
    out: list[str] = []
    for b in blamed:
        node = trace.nodes[b.node]
        if node.kind == "call":
            out.append(b.agent)
        elif node.kind == "tool":
            callers = [trace.nodes[p].name for p in node.parents if trace.nodes[p].kind == "call"]
            out.extend(callers or ([str(node.meta["agent"])] if node.meta.get("agent") else []))
    return list(dict.fromkeys(out))


@dataclass
class Verdict:
    """What one blame method says about one trace (see the module docstring)."""

    method: str
    # kept whole in memory, the first ten when stored: not compared (a stored verdict equals its original)
    ranking: list[Blame] = field(default_factory=list, compare=False)
    blamed: list[Blame] = field(default_factory=list)
    repair: list[str] = field(default_factory=list)
    trajectories: list[Trajectory] = field(default_factory=list, compare=False)  # stored as ``paths``
    parents: dict[int, list[int]] = field(default_factory=dict, compare=False)
    reader: str | None = None
    agent: str | None = None  # the top entry's agent (a tool's or input's name for those)
    node: int | None = None
    kind: str | None = None  # call, tool or input
    span: str | None = None  # the top node's original span id, where the trace was imported from spans
    span_name: str | None = None
    next: str | None = None  # the runner-up: "agent (nN)"
    scores: list[float] = field(default_factory=list)  # the top score and the runner-up's
    paths: list[list[str]] = field(default_factory=list)  # the agents of each trajectory, root first

    @classmethod
    def of(cls, method: str, trace: Trace, ranking: list[Blame], blamed: list[Blame],
           trajectories: list[Trajectory] | None = None, parents: dict[int, list[int]] | None = None,
           reader: str | None = None) -> "Verdict":
        """A verdict from a method's ranking and blamed entries on ``trace``: the top entry, the
        runner-up (the best entry at another node), the agents to repair, the span ids."""
        top = blamed[0] if blamed else None
        nxt = next((b for b in ranking if top is None or b.node != top.node), None)
        meta = trace.nodes[top.node].meta if top else {}
        trajectories = list(trajectories or [])
        return cls(method, list(ranking), list(blamed), repair_agents(trace, blamed), trajectories, dict(parents or {}),
                   reader, top.agent if top else None, top.node if top else None,
                   trace.nodes[top.node].kind if top else None,
                   str(meta["span_id"]) if meta.get("span_id") else None,
                   str(meta["span_name"]) if meta.get("span_name") else None,
                   f"{nxt.agent} (n{nxt.node})" if nxt else None,
                   [b.score for b in (top, nxt) if b is not None], [list(t.agents) for t in trajectories])

    @property
    def score(self) -> float | None:
        return self.scores[0] if self.scores else None

    def blamed_agents(self) -> list[str]:
        """The agents this failure is blamed on: those to repair, else the top entry's own agent."""
        return list(dict.fromkeys(self.repair)) or ([self.agent] if self.agent else [])

    def row(self) -> dict[str, Any]:
        """The table's cells: method, the top entry, the agents to repair and the runner-up."""
        return {"method": self.method, "agent": self.agent, "node": self.node, "kind": self.kind, "score": self.score,
                "repair": self.repair, "next": self.next, **({"span": self.span} if self.span else {})}

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"method": self.method, "agent": self.agent, "node": self.node, "kind": self.kind,
                             "repair": self.repair, "scores": self.scores, "trajectories": self.paths,
                             "next": self.next, "ranking": [b.to_dict() for b in self.ranking[:RANKING_KEPT]],
                             "blamed": [b.to_dict() for b in self.blamed]}
        for k in ("reader", "span", "span_name"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], method: str = "") -> "Verdict":
        """A stored verdict (``method``: its name where the record keys verdicts by method)."""
        def blames(xs: Any) -> list[Blame]:
            return [Blame(str(b["agent"]), int(b["node"]), float(b["score"])) for b in xs or []]

        return cls(str(d.get("method") or method), blames(d.get("ranking")), blames(d.get("blamed")),
                   list(d.get("repair") or []), reader=d.get("reader"), agent=d.get("agent"), node=d.get("node"),
                   kind=d.get("kind"), span=d.get("span"), span_name=d.get("span_name"), next=d.get("next"),
                   scores=[float(s) for s in d.get("scores") or []],
                   paths=[list(t) for t in d.get("trajectories") or []])


__all__ = ["RANKING_KEPT", "Verdict", "repair_agents"]
