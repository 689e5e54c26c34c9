"""The conversation-level verbal loss of tau-bench retail.

It compares the gold write actions with the write actions the system made, and the required
output strings with the replies. It is attached to the call that made each wrong write action, to
the last call of the agent that owns the tool of each missing action (the manager when that
worker never ran), and to the calls whose replies reached the customer when a required string is
missing.
"""

from __future__ import annotations

import json
from typing import Any

from agentgrad.blame.backward import VerbalLoss
from agentgrad.benchmarks.taubench import tools as T
from agentgrad.benchmarks.taubench.system import TOOL_OWNER, RetailOutcome
from agentgrad.core.trace import Trace


def _key(name: str, kwargs: dict[str, Any]) -> str:
    return name + json.dumps(kwargs, sort_keys=True)


def _show(name: str, kwargs: dict[str, Any]) -> str:
    return f"{name}({json.dumps(kwargs, sort_keys=True)})"


def predicted_writes(trace: Trace) -> list[tuple[int, str, dict[str, Any]]]:
    """``(call node, tool, arguments)`` of every write tool the system called, in order."""
    return [(n.parents[0], n.name, dict(n.meta.get("arguments", {}))) for n in trace.nodes
            if n.kind == "tool" and n.name in T.WRITE_TOOLS]


def reward_loss(trace: Trace, outcome: RetailOutcome) -> VerbalLoss | None:
    """The loss of a conversation whose reward is below 1 (``None`` for a success)."""
    reward, task = outcome.reward, outcome.task
    if reward.reward >= 1.0:
        return None
    gold = [(a.name, a.kwargs) for a in task.actions if a.name in T.WRITE_TOOLS]
    made = predicted_writes(trace)
    unmatched = {i: _key(n, k) for i, (n, k) in enumerate(gold)}
    wrong: list[tuple[int, str, dict[str, Any]]] = []
    for call, name, kwargs in made:
        hit = next((i for i, key in unmatched.items() if key == _key(name, kwargs)), None)
        if hit is None:
            wrong.append((call, name, kwargs))
        else:
            del unmatched[hit]
    missing = [gold[i] for i in sorted(unmatched)]

    calls = trace.calls()
    agents = {c.name for c in calls}
    fallback = "agent" if "agent" in agents else "manager"  # single-agent baseline, or the router

    def last_call(agent: str) -> int | None:
        found = [c.id for c in calls if c.name == agent]
        return found[-1] if found else None

    def responsible(tool: str) -> str:
        """The worker owning ``tool`` if it ran, else the manager (which did not route to it)."""
        owner = TOOL_OWNER.get(tool, "")
        return owner if owner in agents and fallback == "manager" else fallback

    targets: list[int] = []
    lines = [f"Conversation outcome: action reward {reward.actions:g}, output reward {reward.outputs:g} "
             f"(ended by {outcome.ended_by} after {outcome.turns} turn(s))."]
    lines.append("Gold write actions: " + ("; ".join(_show(n, k) for n, k in gold) or "none"))
    lines.append("Write actions made: " + ("; ".join(_show(n, k) for _, n, k in made) or "none"))
    if reward.actions < 1.0:
        for call, name, kwargs in wrong:
            lines.append(f"Wrong action by {trace.nodes[call].name}: {_show(name, kwargs)} is not a gold action.")
            targets.append(call)
        for name, kwargs in missing:
            who = responsible(name)
            node = last_call(who)
            lines.append(f"Missing action (expected from {who}): {_show(name, kwargs)} was never made.")
            if node is not None:
                targets.append(node)
        if not wrong and not missing:  # same write actions, yet a different database (e.g. their order)
            lines.append("The write actions match the gold ones, but the final database differs from the gold one.")
            node = last_call(fallback)
            if node is not None:
                targets.append(node)
    if reward.outputs < 1.0:
        said = [o for o, ok in reward.outputs_found.items() if ok]
        lost = [o for o, ok in reward.outputs_found.items() if not ok]
        lines.append("Information the customer had to be told: " + ", ".join(repr(o) for o in task.outputs))
        lines.append("Told: " + (", ".join(repr(o) for o in said) or "none") + "; never told: "
                     + ", ".join(repr(o) for o in lost) + ".")
        targets.extend(outcome.reply_nodes or ([last_call(fallback)] if last_call(fallback) is not None else []))
    return VerbalLoss("\n".join(lines), list(dict.fromkeys(targets)), "taubench_reward",
                      {"wrong": [_show(n, k) for _, n, k in wrong], "missing": [_show(n, k) for n, k in missing],
                       "outputs_missing": [o for o, ok in reward.outputs_found.items() if not ok],
                       "reward": reward.to_dict()})
