"""Trivial priors: blame methods that read nothing but the order and the names of a log's steps.

Who&When is known to be dominated by such priors (the agent that spoke first, the one that spoke
most, a fixed place in the log): a method that does not beat them has found nothing about the
failure. They use no model and no loss text, so they are model-free baselines
(:func:`agentgrad.blame.methods.model_free`) and every Who&When table prints them.

The steps are the calls and tool results upstream of the loss target, in trace order
(:meth:`~agentgrad.blame.context.BlameContext.upstream`); a user's turn (an input node) is not a step.

- ``first``: the first step (the first agent other than the user to act), blamed at that step.
- ``most_active``: the agent with the most calls among the steps, blamed at its first call. Agents
  with equal counts tie at the top (a benchmark then credits each 1/ties: the expected accuracy of
  picking one), so no order among them is invented.
- ``position:F``: the step at fraction ``F`` of the steps, index ``floor(F * (n - 1) + 1/2)``
  (``position:0`` is the first step, ``position:1`` the last). ``F`` must be fixed before the logs
  it is scored on are seen (:data:`POSITIONS` are registered; choosing another on one subset and
  reporting it on another is the honest use), never chosen on the logs it is scored on.
"""

from __future__ import annotations

from typing import Any

POSITIONS = (0.0, 0.25, 0.5, 0.75, 1.0)  # fixed in advance: the quartiles of the log


def _steps(ctx: Any) -> list[int]:
    return ctx.upstream() or [ctx.target]


def first(ctx: Any) -> list[Any]:
    """The first step of the log, ranked above every later one (scores fall with position)."""
    steps = _steps(ctx)
    return [ctx.blame(n, 1.0 / (i + 1)) for i, n in enumerate(steps)]


def most_active(ctx: Any) -> list[Any]:
    """Every acting agent at its first step, scored by how many steps it took (most first, ties tied)."""
    nodes = ctx.trace.nodes
    counts: dict[str, int] = {}
    first_step: dict[str, int] = {}
    for n in _steps(ctx):
        name = nodes[n].name
        if nodes[n].kind == "tool":  # a tool's result is its caller's doing: counted for the call, not itself
            continue
        counts[name] = counts.get(name, 0) + 1
        first_step.setdefault(name, n)
    if not counts:
        return [ctx.blame(ctx.target, 1.0)]
    ranked = sorted(counts, key=lambda a: (-counts[a], first_step[a]))
    return [ctx.blame(first_step[a], float(counts[a])) for a in ranked]


def position(ctx: Any, fraction: float) -> list[Any]:
    """The step at ``fraction`` of the log, then the others by distance from it (nearer first)."""
    steps = _steps(ctx)
    at = int(fraction * (len(steps) - 1) + 0.5)
    order = sorted(range(len(steps)), key=lambda i: (abs(i - at), i))
    return [ctx.blame(steps[i], 1.0 / (k + 1)) for k, i in enumerate(order)]


def position_name(fraction: float) -> str:
    """The registry name of ``position`` at ``fraction`` (``position:0.25``)."""
    return f"position:{fraction:g}"


def is_prior(name: str) -> bool:
    """Whether a registry name is one of the trivial priors."""
    return name in ("first", "most_active") or name.startswith("position:")
