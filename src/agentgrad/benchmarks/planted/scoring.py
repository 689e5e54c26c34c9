"""One episode's methods scored against its known truth, with what each cost (the benchmarks' meter).

Per method: ``agent_top1`` (the top-ranked agent is the one at fault; when several are tied at the
top, the credit is 1/ties if the truth is among them: the expected accuracy of picking one),
``node_top1`` (the same for the node, the step), ``agent_top3`` (the truth among the agents of the
top three ranks), ``top`` (the agents tied at the top score: what the method names, so that two
methods' agreement is read directly), and the cost: seconds, backward (gradient) and forward (occlusion, temporal)
passes, judge requests and generations, as the method would cost alone (passes shared with other
methods are counted for each).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from agentgrad.blame.context import Blame, BlameContext, Meter, top_tied


def top1_credit(ranking: list[Blame], truth: Any, key: Callable[[Blame], Any]) -> float:
    """1/ties where ``truth`` is among the top-ranked (by ``key``: agent or node), else 0."""
    top = top_tied(ranking, key)
    return (1.0 / len(top)) if truth in top else 0.0


def top3(ranking: list[Blame], truth: str) -> float:
    """Whether the agent ``truth`` is among the agents of the top three ranks."""
    agents = list(dict.fromkeys(b.agent for b in sorted(ranking, key=lambda b: -b.score)))
    return float(truth in agents[:3])


class Cost(Meter):
    """The benchmarks' cost counters of one episode (a :class:`~agentgrad.blame.context.Meter`): what its
    methods used, each pass counted every time a method needs it (cached or not), so that a method's
    cost is what it would cost alone; and the judge methods that named nothing."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.backward = 0
        self.forward = 0
        self.generations = 0  # the replay method's generations (every call of every replayed run)
        self.unparsed: list[str] = []  # judge methods whose judge gave no parsable reply (they named nothing)
        self.unread: list[str] = []  # judge methods whose prompt was longer than the judge's context (the same)

    def spent(self, seconds: float = 0.0, backward: int = 0, forward: int = 0, generations: int = 0) -> None:
        self.seconds += seconds
        self.backward += backward
        self.forward += forward
        self.generations += generations

    def named_nothing(self, method: str, why: str) -> None:
        {"unparsed": self.unparsed, "unread": self.unread}[why].append(method)


def cost_of(ctx: BlameContext) -> Cost:
    """The :class:`Cost` a benchmark's context counts into (made with ``meter=Cost()``)."""
    if not isinstance(ctx.meter, Cost):
        raise TypeError("a benchmark's BlameContext counts its cost: make it with meter=Cost()")
    return ctx.meter


def score_methods(ctx: BlameContext, fns: dict[str, Callable[[BlameContext], list[Blame]]], agent: str,
                  node: int) -> dict[str, dict[str, Any]]:
    """Every method's ranking of one episode scored against the truth (``agent`` and its ``node``):
    the fields an episode record holds per method (see the module docstring), with its cost (the
    context's :class:`Cost`)."""
    out: dict[str, dict[str, Any]] = {}
    cost = cost_of(ctx)
    for m, fn in fns.items():
        b0, f0, s0, j0, g0 = cost.backward, cost.forward, cost.seconds, ctx.judge_requests, cost.generations
        t0 = time.time()
        ranking = fn(ctx)
        out[m] = {
            "agent_top1": top1_credit(ranking, agent, lambda b: b.agent),
            "node_top1": top1_credit(ranking, node, lambda b: b.node),
            "agent_top3": top3(ranking, agent),
            "top": top_tied(ranking, lambda b: b.agent),  # the agents it names (tied at the top score)
            "ranking": [b.to_dict() for b in ranking[:5]],
            "backward": cost.backward - b0, "forward": cost.forward - f0,
            "judge_requests": ctx.judge_requests - j0, "generations": cost.generations - g0,
            "unparsed": m in cost.unparsed,  # a judge that gave no parsable reply (named nothing)
            "unread": m in cost.unread,  # a judge whose prompt was longer than its context (named nothing)
            # scorer time (replay: its runs' time), or for a judge the wall time of its requests
            "seconds": round(cost.seconds - s0 + (time.time() - t0 if ctx.judge_requests > j0 else 0), 4),
        }
    return out

