"""The backward walk, written once: kept edges, root-to-loss paths, and the rules that blame.

Two forms of one walk. Over a whole attribution graph (:func:`kept_incoming`, :func:`kept_parents`,
:func:`root_paths`): every call keeps its top-k incoming edges by an edge rule, and paths run from
the roots to the loss's targets; ``backward`` (trajectories), ``credit.split_credit`` and
``optim.targets`` read the graph through these. From a loss (:func:`walk`, :func:`walk_topk`): the
walk starts at the loss's target and attributes a call only when it reaches it, with an objective
and a rule (:data:`WALK_RULES`, at the end: each rule, what it blames, its function and its parameters). Both
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
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from agentgrad.attribution.graph import AttributionGraph, Edge, strongest
from agentgrad.blame.facts import LINES, FactReader
from agentgrad.blame.follow import SUPPORTED, carried, fact_key, region_in_source, surprisal, walk_follow
from agentgrad.errors import RegistryError

CONTENT_RULES = ("stop", "carry")
OBJECTIVES = ("whole", "targeted", "contrast", "judged")  # contrast, judged: BlameContext.attribute
__all__ = ["RULES", "CONTENT_RULES", "SUPPORTED", "OBJECTIVES", "WALK_RULES", "WalkRule", "kept_incoming",
           "kept_parents", "root_paths", "walk", "walk_follow", "walk_topk", "surprisal"]


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
    """The backward walk from the loss target, turned into a ranking by ``rule`` (:data:`WALK_RULES`: each
    rule with its function and parameters; an unknown rule is a :class:`RegistryError`).

    ``weight``: which of the four GBC weights ranks the sources; ``occlusion``: counterfactual
    occlusion weights instead (forward passes only); ``reader``: what a fact is in the trace's text
    (default: the one detected from the trace, :attr:`~agentgrad.blame.context.BlameContext.reader`); ``params``: the rule's parameters
    (default: those it is registered with). The edges followed are left in ``ctx.walked``.
    """
    if rule not in WALK_RULES:
        raise RegistryError(f"unknown walk rule {rule!r}; valid: {', '.join(WALK_RULES)}")
    rng = random.Random(ctx.seed)
    reader = reader or ctx.reader
    params = WALK_RULES[rule].params if params is None else params
    if rule in CONTENT_RULES and ctx.wrong_text() is None:  # no wrong text to follow: every node reached
        rule = "path"
    ctx.walked = {}
    return WALK_RULES[rule].fn(ctx, weight, rule, objective, occlusion, rng, reader, params)


def _content(ctx: Any, weight: str, rule: str, objective: str, occlusion: bool, rng: random.Random,
             reader: FactReader, params: Mapping[str, Any]) -> list[Any]:
    """``stop`` and ``carry``: follow one source while it carries the wrong text."""
    wrong = ctx.wrong_text()
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


def _follow_rule(ctx: Any, weight: str, rule: str, objective: str, occlusion: bool, rng: random.Random,
                 reader: FactReader, params: Mapping[str, Any]) -> list[Any]:
    """``follow``, ``origin`` and ``blend`` (:func:`~agentgrad.blame.follow.walk_follow`)."""
    return walk_follow(ctx, weight, objective, rng, params.get("invented"), rule == "blend", params.get("forks", 0),
                       reader)


def _direct(ctx: Any, weight: str, rule: str, objective: str, occlusion: bool, rng: random.Random,
            reader: FactReader, params: Mapping[str, Any]) -> list[Any]:
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


def _walk_tree(ctx: Any, weight: str, rule: str, objective: str, occlusion: bool, rng: random.Random,
               reader: FactReader, params: Mapping[str, Any]) -> list[Any]:
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


# --- the walk rules: what each blames, its function, its parameters (and where a tuned one was chosen)
@dataclass(frozen=True)
class WalkRule:
    """One rule: its name, what it blames, the function that walks it, its parameters and where any of
    them was tuned (benchmark and seed). ``reads_facts``: the rule follows the text the loss names as
    wrong, and reads it with a fact reader (:mod:`agentgrad.blame.facts`)."""

    name: str
    doc: str
    fn: Callable[..., list[Any]]  # (ctx, weight, rule, objective, occlusion, rng, reader, params) -> ranking
    params: dict[str, Any] = field(default_factory=dict)
    tuned: dict[str, str] = field(default_factory=dict)  # parameter -> where it was chosen (benchmark, seed)
    reads_facts: bool = False


# ``origin``: followed text whose tokens average below p = e^-5 (1/148) given the step's inputs was
# invented there, not rewritten
INVENTED = ("the planted-fault benchmark in prose, development seed 10: chosen from 3, 4, ..., 10 nats by "
            "the mean agent top-1 over the copied, rewritten and decoy faults (docs/planted-faults.md)")

WALK_RULES: dict[str, WalkRule] = {r.name: r for r in (
    WalkRule("earliest", "walk to the roots; blame the earliest call or tool reached (the obvious rule, which "
                         "blames the first agent of every chain whatever happened)", _walk_tree),
    WalkRule("path", "every call or tool reached, tied (the paper's update rule)", _walk_tree),
    WalkRule("maxw", "the node whose edge to its successor has the largest weight", _walk_tree),
    WalkRule("direct", "no walk: the loss call's own sources, ranked by their weight at that call (one backward "
                       "pass); with a signed weight under contrast, by how far each pushed the produced answer "
                       "above the expected one", _direct),
    WalkRule("stop", "walk back only while the chosen source carries the wrong text (its top token inside an "
                     "occurrence, or that occurrence's cue: its key); blame the first node whose source does "
                     "not; a tool or input that carries it is blamed itself; without loss spans, path",
             _content, reads_facts=True),
    WalkRule("carry", "stop, following the heaviest source among those that carry the wrong text; it ends "
                      "where none does", _content, reads_facts=True),
    WalkRule("follow", "follow the wrong text to the roots, re-targeting where it changed (on the unit of "
                       "text the gradient peaks in); blame the earliest change that the call's inputs do not "
                       "predict (mean -log p above ln 2), else the tool at the root", _follow_rule, reads_facts=True),
    WalkRule("origin", "follow, but a change whose text is invented there (mean -log p above invented "
                       "nats) ends the walk and is blamed", _follow_rule, params={"invented": 5.0},
             tuned={"invented": INVENTED}, reads_facts=True),
    WalkRule("blend", "origin with the string test added: a source that holds the text verbatim carries it; "
                      "several holders (or sources stating the wrong value's key) are each followed, at most "
                      "forks sub-walks, and the heaviest whose walk meets an invention is taken", _follow_rule,
             params={"invented": 5.0, "forks": 8}, tuned={"invented": INVENTED}, reads_facts=True),
)}
RULES = tuple(WALK_RULES)
