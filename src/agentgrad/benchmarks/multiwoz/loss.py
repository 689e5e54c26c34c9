"""MultiWOZ verbal losses: the turn-level JGA loss and the dialogue-level Inform & Success loss.

JGA loss, for each turn whose predicted state differs from the gold one: the prediction, the
ground truth, the false positives and the false negatives. It is attached to the call that wrote
each wrong slot value and, for a slot missing altogether, to that domain's worker call(s) of the
turn, or to the manager's call of the turn when no worker of that domain ran (the single-agent
baseline's call of the turn when there is one agent).

Inform & Success loss: the queries made vs the constraints needed, and the information given vs
requested, attached to the responder's calls.
"""

from __future__ import annotations

import json
from typing import Any

from agentgrad.blame.backward import VerbalLoss
from agentgrad.benchmarks.multiwoz.evaluator import compare_states, goal_of
from agentgrad.benchmarks.multiwoz.system import WORKERS, DialogueOutcome


def _fmt(state: dict[str, str], slots: list[str] | None = None) -> str:
    keys = sorted(state) if slots is None else slots
    return "{" + ", ".join(f"{k}={state[k]}" for k in keys if k in state) + "}"


def jga_losses(outcome: DialogueOutcome) -> list[tuple[str, list[int]]]:
    """``(text, targets)`` for every turn whose state is wrong."""
    out = []
    for res, turn in zip(outcome.turns, outcome.dialogue.turns):
        c = compare_states(res.state, turn.state)
        if c["joint"]:
            continue
        targets: list[int] = []
        for slot in c["fp"]:
            if slot in res.sources:
                targets.append(res.sources[slot])
        for slot in c["fn"]:
            if slot in res.state:
                continue  # a wrong value: attached above to the call that wrote it
            domain = slot.split("-")[0]
            calls = res.calls.get(WORKERS[domain]) or res.calls.get("agent") or res.calls.get("manager") or []
            targets.extend(calls[-1:])
        fp = [f"{s}={res.state[s]}" + (f" (truth: {turn.state[s]})" if s in turn.state else "") for s in c["fp"]]
        fn = [f"{s}={turn.state[s]}" for s in c["fn"] if s not in res.state]
        text = (f"Turn {res.turn} (user: {turn.user!r}): the dialogue state is wrong.\n"
                f"Prediction: {_fmt(res.state)}\nGround truth: {_fmt(turn.state)}\n"
                f"False positives (wrong or unwanted values): {', '.join(fp) or 'none'}\n"
                f"False negatives (missing slots): {', '.join(fn) or 'none'}")
        out.append((text, list(dict.fromkeys(targets))))
    return out


def inform_success_loss(outcome: DialogueOutcome, verdict: dict[str, Any]) -> tuple[str, list[int]] | None:
    """The dialogue-level loss, when Inform or Success failed."""
    if verdict["inform"] and verdict["success"]:
        return None
    goal = goal_of(outcome.dialogue)
    made = "; ".join(f"{q['tool']}({json.dumps(q['arguments'], sort_keys=True)}) -> {q['count']} match(es)"
                     for q in outcome.queries) or "none"
    needed = "; ".join(f"{d}: {json.dumps(g['informable'], sort_keys=True)}" for d, g in goal.items()) or "none"
    requested = "; ".join(f"{d}: {', '.join(g['requestable']) or 'nothing'}" for d, g in goal.items())
    given = "; ".join(f"{d}: {', '.join(v) or 'nothing'}" for d, v in verdict["provided"].items())
    wrong = [d for d, ok in verdict["match"].items() if not ok]
    text = (f"Dialogue-level result: Inform {int(verdict['inform'])}, Success {int(verdict['success'])}.\n"
            f"Queries made: {made}\nConstraints the user's goal needs: {needed}\n"
            + (f"Domains whose offered venues do not satisfy the goal (or none offered): {', '.join(wrong)}\n" if wrong
               else "")
            + f"Information requested: {requested}\nInformation given in the replies: {given}")
    targets = [r.reply_node for r in outcome.turns if r.reply_node is not None]
    return text, targets


def dialogue_loss(outcome: DialogueOutcome, verdict: dict[str, Any], max_turns: int = 4) -> VerbalLoss | None:
    """Both losses of one dialogue as one :class:`VerbalLoss` (``None`` when nothing failed).

    At most ``max_turns`` wrong turns are described (the first ones), with their targets.
    """
    turns = jga_losses(outcome)
    dialog = inform_success_loss(outcome, verdict)
    if not turns and dialog is None:
        return None
    parts = [t for t, _ in turns[:max_turns]]
    targets = [n for _, ts in turns[:max_turns] for n in ts]
    if len(turns) > max_turns:
        parts.append(f"({len(turns) - max_turns} more turn(s) with a wrong state not shown)")
    if dialog is not None:
        parts.append(dialog[0])
        targets += dialog[1]
    return VerbalLoss("\n\n".join(parts), list(dict.fromkeys(targets)), "multiwoz",
                      {"wrong_turns": len(turns), "inform": verdict["inform"], "success": verdict["success"]})
