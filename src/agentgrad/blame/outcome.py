"""One failed episode blamed by one registry method: its :class:`~agentgrad.blame.verdict.Verdict`.

This is what the optimisation loop (and the GEPA adapter) asks of blame. For every target of the
verbal loss, the method ranks the upstream nodes (:mod:`agentgrad.blame.methods`); then

- **blamed** are the entries tied at the top of each target's ranking: one for a ranked method,
  every node reached for ``path`` and ``all``;
- **repair** are the agents whose prompts to repair (:func:`agentgrad.blame.verdict.repair_agents`);
- **trajectories** (what the optimizer reads) are the paths the method walked, from where each walk
  ended to the loss target (:func:`agentgrad.blame.walk.root_paths` over ``ctx.walked``), each
  starting at the blamed node where the walk went on past it (``follow``, ``origin``, ``blend``); for a
  method that walks no edge (``temporal``, judges, ``random``, ``last``), the trace's path from each
  blamed node to the target;
- **parents** are those paths' edges (the target optimizer writes its targets along them);
- **reader** is the fact reader the method read the trace's text with (:mod:`agentgrad.blame.facts`;
  None for a method that reads no facts).

All methods of one episode share one :class:`~agentgrad.blame.context.BlameContext`, primed with the
whole-output attributions already computed, so gradients are taken once per episode.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from agentgrad.blame.backward import VerbalLoss, trajectory
from agentgrad.blame.context import Blame, BlameContext
from agentgrad.blame.methods import canonical, fact_reader, get_blame_method
from agentgrad.blame.verdict import Verdict
from agentgrad.blame.walk import root_paths
from agentgrad.core.trace import Trace


def trace_path(trace: Trace, source: int, target: int) -> list[int]:
    """A shortest path ``source -> ... -> target`` along the trace's parents ([source, target] when
    ``source`` is not upstream of ``target``)."""
    came: dict[int, int | None] = {target: None}
    queue = deque([target])
    while queue and source not in came:
        n = queue.popleft()
        for p in trace.nodes[n].parents:
            if p not in came:
                came[p] = n
                queue.append(p)
    if source not in came:
        return [source, target] if source != target else [target]
    path, at = [], source
    while at is not None:
        path.append(at)
        at = came[at]
    return path


def _from_blamed(trace: Trace, path: list[int], tops: set[int]) -> list[int]:
    """``path`` from its first blamed node on, where the walk went on past it to a call or tool that
    is not blamed (``follow``, ``origin``, ``blend``: above the fault is where its text came from);
    else ``path`` whole (an input above the blamed call stays, as do ``path``'s tied calls)."""
    at = next((i for i, n in enumerate(path) if n in tops), 0)
    if any(trace.nodes[n].kind in ("call", "tool") for n in path[:at]):
        return path[at:]
    return path


def blame_episode(method: str, trace: Trace, loss: VerbalLoss, scorer: Any = None, *, results: list[Any] | None = None,
                  seed: int = 0, top_k: int = 1, max_paths: int = 16, judge: Any = None,
                  context: BlameContext | None = None) -> Verdict:
    """Blame one failed episode with registry ``method`` (an alias is resolved).

    Args:
        results: whole-output attributions already computed for the trace (``Scorer.attribute``),
            reused instead of computed again.
        top_k: incoming edges kept per call by the ``path``, ``earliest`` and ``maxw`` walks.
        max_paths: the most trajectories returned.
        context: a :class:`BlameContext` of this trace, loss and scorer shared with other methods, so
            that each call's gradients are taken once for all of them (its settings are used).
    """
    name = canonical(method)
    fn = get_blame_method(name)
    ctx = context if context is not None else BlameContext(trace, loss, scorer, seed, judge, top_k)
    ctx.prime(results or [])
    ranking: list[Blame] = []
    blamed: list[Blame] = []
    paths: list[list[int]] = []
    for target in dict.fromkeys(loss.targets):
        focused = ctx.focus(target)
        ranks = fn(focused)
        best = max((b.score for b in ranks), default=None)
        top = [b for b in ranks if b.score == best]
        ranking += ranks
        blamed += top
        if focused.walked:
            tops = {b.node for b in top}
            found = [_from_blamed(trace, p, tops) for p in root_paths(focused.walked, [target], max_paths)]
        else:
            found = [trace_path(trace, b.node, target) for b in top]
        for p in found:
            if p not in paths:
                paths.append(p)
    paths = paths[:max_paths]
    parents: dict[int, list[int]] = {}
    for p in paths:
        for a, b in zip(p, p[1:]):
            if a not in parents.setdefault(b, []):
                parents[b].append(a)
    nodes = {n.id: {"kind": n.kind, "name": n.name} for n in trace.nodes}
    return Verdict.of(name, trace, ranking, blamed, [trajectory(nodes, p, loss) for p in paths], parents,
                      fact_reader(name, ctx))
