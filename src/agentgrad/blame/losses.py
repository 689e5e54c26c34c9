"""Verbal losses written from words: attached to the call they describe, with the wrong text's spans.

:func:`verbal_loss` turns "what went wrong" (and optionally the wrong text and the right answer) into a
:class:`~agentgrad.blame.backward.VerbalLoss` on a recorded trace, ``ag.verbal_loss`` in Python and the
``--loss``/``--wrong``/``--expected`` of ``agentgrad blame``.
"""

from __future__ import annotations

from agentgrad.blame.backward import VerbalLoss
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError


def verbal_loss(trace: Trace, text: str, wrong: str | None = None, target: str | int | None = None,
                expected: str | None = None) -> VerbalLoss:
    """A verbal loss for a recorded trace, from words: attached to ``target`` (a node id, or an agent
    name: its last call; default the trace's last call, the final answer), and, with ``wrong``, the
    places of that text in the target's output as the loss's spans (what the loss-targeted objective
    differentiates and the string-provenance method follows back). With ``expected`` (the right
    answer, or the right text in place of ``wrong``), the failure-conditioned ``contrast`` objective
    differentiates the produced output against it (``details["expected"]``)."""
    calls = trace.calls()
    if not calls:
        raise ConfigError("the trace has no call node to attach a loss to")
    if not str(text).strip():
        raise ConfigError("the loss is empty: say in words what went wrong")
    if target is None:
        node = calls[-1]
    elif isinstance(target, int) or str(target).isdigit():
        t = int(target)
        if not 0 <= t < len(trace.nodes) or trace.nodes[t].kind != "call":
            raise ConfigError(f"target {t} is not a call node of the trace (its calls: "
                              f"{', '.join(f'{c.id} {c.name}' for c in calls)[:300]})")
        node = trace.nodes[t]
    else:
        mine = trace.calls(str(target))
        if not mine:
            raise ConfigError(f"no agent {target!r} in the trace; its agents: {', '.join(dict.fromkeys(c.name for c in calls))}")
        node = mine[-1]
    spans: dict[int, list[tuple[int, int]]] = {}
    if wrong:
        found, at = [], node.text.find(wrong)
        while at >= 0:
            found.append((at, at + len(wrong)))
            at = node.text.find(wrong, at + len(wrong))
        if not found:
            raise ConfigError(f"the wrong text {wrong!r} is not in the output of node {node.id} ({node.name}): "
                              f"{node.text[:200]!r}")
        spans[node.id] = found
    if expected is not None and not str(expected).strip():
        raise ConfigError("the expected answer is empty: give the right answer, or leave it out")
    details = {"produced": node.text, **({"wrong": wrong} if wrong else {}),
               **({"expected": str(expected)} if expected is not None else {})}
    return VerbalLoss(str(text), [node.id], "generic", details, spans)
