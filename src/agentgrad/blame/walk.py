"""The backward walk, written once: kept edges, root-to-loss paths, and the rules that blame.

Two forms of one walk. Over a whole attribution graph (:func:`kept_incoming`, :func:`kept_parents`,
:func:`root_paths`): every call keeps its top-k incoming edges by an edge rule, and paths run from
the roots to the loss's targets; ``backward`` (trajectories), ``credit.split_credit`` and
``optim.targets`` read the graph through these. From a loss (:func:`walk`, :func:`walk_topk`): the
walk starts at the loss's target and attributes a call only when it reaches it, with an objective
and a rule (:mod:`agentgrad.blame.rules`: each rule, what it blames and its parameters). Both
choose edges with :func:`~agentgrad.attribution.graph.strongest` (ties broken by a seeded RNG). The
rules that follow the wrong text read it with a fact reader (:mod:`agentgrad.blame.facts`): where a
value's key is, what a token's unit of text is; no text format is assumed here. What a source
carries of that text, and the ``follow``, ``origin`` and ``blend`` rules, are :mod:`agentgrad.blame.follow`'s.

``path``, ``earliest`` and ``maxw`` keep the ``ctx.top_k`` heaviest sources of every call (1: one
chain) and pass through a tool result to the call that asked for it; ``stop`` and ``carry`` follow
one source and end at a tool. Objectives: ``whole`` (the gradient of log p of the whole output) or
``targeted`` (only the output tokens the loss points at; upstream, the region of each source that
the gradient points at becomes that call's target); ``contrast`` and ``judged`` are walked as
``whole`` is: the context differentiates them (:meth:`~agentgrad.blame.context.BlameContext.attribute`).
"""

from __future__ import annotations

import random
from typing import Any, Mapping

from agentgrad.attribution.graph import AttributionGraph, Edge, strongest
from agentgrad.blame.facts import LINES, FactReader
from agentgrad.blame.follow import SUPPORTED, carried, fact_key, region_in_source, surprisal, walk_follow
from agentgrad.blame.rules import RULES, WALK_RULES

CONTENT_RULES = ("stop", "carry")
OBJECTIVES = ("whole", "targeted", "contrast", "judged")  # contrast, judged: BlameContext.attribute
__all__ = ["RULES", "CONTENT_RULES", "SUPPORTED", "OBJECTIVES", "kept_incoming", "kept_parents", "root_paths",
           "walk", "walk_follow", "walk_topk", "surprisal"]


# --- over a whole graph --------------------------------------------------------------------------
def kept_incoming(graph: AttributionGraph, top_k: int | None, rule: str, seed: int = 0) -> dict[int, list[Edge]]:
    """target -> its kept incoming edges: the ``top_k`` of every node by edge ``rule`` (None: every edge)."""
    out: dict[int, list[Edge]] = {}
    for e in graph.prune(top_k, rule, seed).edges if top_k is not None else graph.edges:
        out.setdefault(e.target, []).append(e)
    return out


def kept_parents(graph: AttributionGraph, top_k: int | None, rule: str, seed: int = 0) -> dict[int, list[int]]:
    """node -> the sources of its kept incoming edges (see :func:`kept_incoming`)."""
    return {t: [e.source for e in es] for t, es in kept_incoming(graph, top_k, rule, seed).items()}


def root_paths(parents: dict[int, list[int]], targets: list[int], max_paths: int = 64) -> list[list[int]]:
    """Every path root -> ... -> target along ``parents``, depth first (at most ``max_paths``)."""
    paths: list[list[int]] = []

    def visit(node: int, suffix: list[int]) -> None:  # towards the roots
        if len(paths) >= max_paths:
            return
        path = [node] + suffix
        ups = [p for p in parents.get(node, []) if p not in path]  # a trace is acyclic; be safe anyway
        if not ups:
            paths.append(path)
        for p in ups:
            visit(p, path)

    for target in targets:
        visit(target, [])
    return paths


# --- from a loss -----------------------------------------------------------------------------------
def _sources(ctx: Any, node: int, region: Any, weight: str, occlusion: bool, wrong: str | None,
             reader: FactReader = LINES, objective: str = "whole") -> tuple:
    """(weights, attributions, where) of a call's sources; ``where``: the occurrence of the wrong text
    each carries (when ``wrong`` is given). Empty weights: the call cannot be walked through."""
    if occlusion:
        weights = ctx.occlusion(node, region)
        key = fact_key(ctx, node, region, weights, reader) if wrong else None
        where = {s: ((0, 0) if reader.held(ctx.trace.nodes[s].text, wrong, key) else None)
                 for s in weights} if wrong else {}
        return weights, {}, where
    att = ctx.attribute(node, region, objective)
    if not att.sources or att.skipped:
        return {}, {}, {}
    atts = {s.source: s for s in att.sources}
    key = fact_key(ctx, node, region, atts, reader) if wrong else None
    where = {s.source: carried(ctx, s, node, wrong, key, reader=reader) for s in att.sources} if wrong else {}
    return {s.source: s.weights[weight] for s in att.sources}, atts, where


def walk(ctx: Any, weight: str, rule: str, objective: str, occlusion: bool = False,
         reader: FactReader | None = None, params: Mapping[str, Any] | None = None) -> list[Any]:
    """The backward walk from the loss target, turned into a ranking by ``rule`` (:mod:`agentgrad.blame.rules`).

    ``weight``: which of the four GBC weights ranks the sources; ``occlusion``: counterfactual
    occlusion weights instead (forward passes only); ``reader``: what a fact is in the trace's text
    (default: the one detected from the trace, :attr:`~agentgrad.blame.context.BlameContext.reader`); ``params``: the rule's parameters
    (default: those it is registered with). The edges followed are left in ``ctx.walked``.
    """
    rng = random.Random(ctx.seed)
    reader = reader or ctx.reader
    params = WALK_RULES[rule].params if params is None else params
    wrong = ctx.wrong_text()
    if rule in CONTENT_RULES and wrong is None:
        rule = "path"
    ctx.walked = {}
    if rule in ("follow", "origin", "blend"):
        return walk_follow(ctx, weight, objective, rng, params.get("invented"), rule == "blend",
                           params.get("forks", 0), reader)
    if rule == "direct":
        return _direct(ctx, weight, objective, occlusion, rng)
    if rule not in CONTENT_RULES:
        return _walk_tree(ctx, weight, rule, objective, occlusion, rng)
    node = ctx.target
    region = tuple(ctx.loss.spans.get(node, [])) if objective == "targeted" else None
    path, stopped = [node], None
    while ctx.trace.nodes[node].kind == "call":
        weights, atts, where = _sources(ctx, node, region, weight, occlusion, wrong, reader, objective)
        if not weights:
            break
        pool = [s for s in weights if where.get(s) is not None] if rule == "carry" else list(weights)
        best = strongest(pool, lambda s: weights[s], 1, rng)
        if not best or (rule == "stop" and where.get(best[0]) is None):
            stopped = node
            break
        best = best[0]
        ctx.walked[node] = [best]
        path.insert(0, best)
        if objective == "targeted" and not occlusion:
            region = (where[best],)  # upstream, the target is the occurrence of the wrong text it carries
        node = best
    blamable = [n for n in path if ctx.trace.nodes[n].kind in ("call", "tool")]
    if not blamable:
        return []
    first = stopped if stopped is not None else (path[0] if ctx.trace.nodes[path[0]].kind in ("call", "tool")
                                                 else blamable[0])
    rest = [n for n in reversed(blamable) if n != first]
    return [ctx.blame(first, 1.0)] + [ctx.blame(n, 0.5 / (i + 1)) for i, n in enumerate(rest)]


def _direct(ctx: Any, weight: str, objective: str, occlusion: bool, rng: random.Random) -> list[Any]:
    """``direct``: the loss call's sources that are calls or tools, heaviest first by ``weight`` (ranks
    1, 1/2, ...), then the loss call itself; no walk. A loss call with no such source blames itself."""
    target = ctx.target
    if ctx.trace.nodes[target].kind != "call":
        return [ctx.blame(target, 1.0)]
    region = tuple(ctx.loss.spans.get(target, [])) if objective == "targeted" else None
    weights, _, _ = _sources(ctx, target, region, weight, occlusion, None, objective=objective)
    pool = [s for s in weights if ctx.trace.nodes[s].kind in ("call", "tool")]
    ranked = strongest(pool, lambda s: weights[s], len(pool), rng)
    if ranked:
        ctx.walked[target] = ranked[:1]
    return [ctx.blame(n, 1.0 / (i + 1)) for i, n in enumerate([*ranked, target])]


def _walk_tree(ctx: Any, weight: str, rule: str, objective: str, occlusion: bool, rng: random.Random) -> list[Any]:
    """``path``, ``earliest`` and ``maxw``: keep the ``ctx.top_k`` heaviest sources of every call."""
    target = ctx.target
    stack = [(target, tuple(ctx.loss.spans.get(target, [])) if objective == "targeted" else None)]
    reached, edge_w = {target}, {}
    while stack:
        node, region = stack.pop()
        kind = ctx.trace.nodes[node].kind
        if kind == "tool":  # a tool's result depends on the call that asked for it
            ups = [(p, None) for p in ctx.trace.nodes[node].parents if ctx.trace.nodes[p].kind == "call"]
        elif kind == "call":
            weights, atts, _ = _sources(ctx, node, region, weight, occlusion, None, objective=objective)
            kept = strongest(list(weights), lambda s: weights[s], ctx.top_k, rng)
            for s in kept:
                edge_w[s] = max(edge_w.get(s, float("-inf")), weights[s])
            ups = [(s, region_in_source(ctx, atts[s], node) if objective == "targeted" and not occlusion else region)
                   for s in kept]
        else:
            ups = []
        if ups:
            ctx.walked[node] = [s for s, _ in ups]
        for s, r in reversed(ups):  # the strongest source is walked first
            if s not in reached:
                reached.add(s)
                stack.append((s, r))
    blamable = sorted(n for n in reached if ctx.trace.nodes[n].kind in ("call", "tool"))
    if rule == "earliest":
        return [ctx.blame(n, 1.0 / (i + 1)) for i, n in enumerate(blamable)]
    if rule == "path":
        return [ctx.blame(n, 1.0) for n in blamable]
    # maxw: the node whose edge to its successor weighs most (the target itself scores lowest)
    ranked = sorted(blamable, key=lambda n: -edge_w.get(n, float("-inf")))
    return [ctx.blame(n, 1.0 / (i + 1)) for i, n in enumerate(ranked)]


def walk_topk(ctx: Any, weight: str, objective: str, k: int = 2, budget: int = 32,
              reader: FactReader | None = None) -> list[Any]:
    """The backward walk keeping the ``k`` heaviest incoming edges of every call (a tree of paths).

    Along each path it applies the ``stop`` test: it goes on into a source only while the source's
    highest-scoring token lies inside the wrong text; where a kept source does not carry it, the
    call is a stopping point, and a tool or input that carries it is one itself. A node's score is
    the largest, over the paths reaching it, of the product of its edges' rank discounts (1 for
    the heaviest edge, 1/2 for the second, ...). At most ``budget`` calls are attributed.
    """
    reader = reader or ctx.reader
    wrong = ctx.wrong_text()
    target = ctx.target
    region0 = tuple(ctx.loss.spans.get(target, [])) if objective == "targeted" else None
    frontier = [(target, region0, 1.0)]
    stops: dict[int, float] = {}
    visited: set[tuple[int, Any]] = set()
    ctx.walked = {}
    spent = 0
    while frontier and spent < budget:
        node, region, score = frontier.pop(0)
        if (node, region) in visited:
            continue
        visited.add((node, region))
        if ctx.trace.nodes[node].kind != "call":
            stops[node] = max(stops.get(node, 0.0), score)
            continue
        att = ctx.attribute(node, region, objective)
        spent += 1
        if not att.sources or att.skipped:
            stops[node] = max(stops.get(node, 0.0), score)
            continue
        ranked = sorted(att.sources, key=lambda s: -s.weights[weight])[:k]
        key = fact_key(ctx, node, region, [s.source for s in att.sources], reader) if wrong else None
        for rank, src in enumerate(ranked):
            child = score / (rank + 1)
            occ = carried(ctx, src, node, wrong, key, reader=reader) if wrong is not None else None
            if wrong is not None and occ is None:
                stops[node] = max(stops.get(node, 0.0), child)
                continue
            nxt = ((occ,) if occ is not None else region_in_source(ctx, src, node)) if objective == "targeted" else None
            frontier.append((src.source, nxt, child))
            ups = ctx.walked.setdefault(node, [])
            if src.source not in ups:
                ups.append(src.source)
    blamable = {n: v for n, v in stops.items() if ctx.trace.nodes[n].kind in ("call", "tool")}
    if not blamable:
        return [ctx.blame(target, 1.0)]
    return [ctx.blame(n, v) for n, v in sorted(blamable.items(), key=lambda kv: (-kv[1], -kv[0]))]
