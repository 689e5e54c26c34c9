"""The backward walk, written once: kept edges, root-to-loss paths, and the rules that blame.

Two forms of one walk. Over a whole attribution graph (:func:`kept_incoming`, :func:`kept_parents`,
:func:`root_paths`): every call keeps its top-k incoming edges by an edge rule, and paths run from
the roots to the loss's targets; ``backward`` (trajectories), ``credit.split_credit`` and
``optim.targets`` read the graph through these. From a loss (:func:`walk`, :func:`walk_topk`): the
walk starts at the loss's target and attributes a call only when it reaches it, with an objective
and a rule (:mod:`agentgrad.blame.rules`: each rule, what it blames and its parameters). Both
choose edges with :func:`~agentgrad.attribution.graph.strongest` (ties broken by a seeded RNG). The
rules that follow the wrong text read it with a fact reader (:mod:`agentgrad.blame.facts`): where a
value's key is, what a token's unit of text is; no text format is assumed here.

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
from agentgrad.blame.facts import LINES, FactReader, detect_reader
from agentgrad.blame.rules import RULES, WALK_RULES

CONTENT_RULES = ("stop", "carry")
SUPPORTED = 0.6931  # ln 2: content whose tokens each have p > 1/2 is taken as copied from the step's inputs (not tuned)
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
def _region_in_source(ctx: Any, src: Any, node: int) -> tuple[tuple[int, int], ...] | None:
    """The characters of the source's output that its highest-scoring tokens cover (>= half the max)."""
    if not src.l1:
        return None
    top = max(src.l1)
    keep = sorted(p for p, v in zip(src.positions, src.l1) if v >= 0.5 * top)
    r = ctx.render(node)
    chars = []
    for (a, b) in r.source_chars.get(src.source, []):
        for p in keep:
            ta, tb = r.offsets[p]
            if ta < b and tb > a:
                chars.append((max(ta, a) - a, min(tb, b) - a))
    return tuple(chars) or None


def _carried(ctx: Any, src: Any, node: int, wrong: str, key: str | None = None,
             whole: bool = False, reader: FactReader = LINES) -> tuple[int, int] | None:
    """The occurrence of ``wrong`` in the source's text that the source's highest-scoring token lies
    in or is the cue right before (the reader's ``cue_before``; character range in that text), or None when
    it is neither for any occurrence. With ``key`` (the key whose value ``wrong`` is at the call),
    only occurrences that are that key's value count (the reader's ``held``)."""
    if not src.l1:
        return None
    r = ctx.render(node)
    ta, tb = r.offsets[src.positions[max(range(len(src.l1)), key=lambda i: src.l1[i])]]
    text = ctx.trace.nodes[src.source].text
    for (a, b) in r.source_chars.get(src.source, []):
        if ta < b and tb > a:
            lo, hi = max(ta, a) - a, min(tb, b) - a
            while lo < hi and text[lo].isspace():  # a BPE token may carry the space before a word
                lo += 1
            # inside an occurrence, or the cue right before it: a copying model retrieves the content
            # by its key, so its gradient peaks on the value or on the key (SmolLM2's tokenizer splits
            # "museum:" into "museum" and ":", so the key is not the token next to the value)
            return next(((oa, ob) for oa, ob in reader.held(text, wrong, key, whole)
                         if (oa <= lo and hi <= ob) or reader.cue_before(text, hi, oa)), None)
    return None


def _sources(ctx: Any, node: int, region: Any, weight: str, occlusion: bool, wrong: str | None,
             reader: FactReader = LINES, objective: str = "whole") -> tuple:
    """(weights, attributions, where) of a call's sources; ``where``: the occurrence of the wrong text
    each carries (when ``wrong`` is given). Empty weights: the call cannot be walked through."""
    if occlusion:
        weights = ctx.occlusion(node, region)
        key = _fact_key(ctx, node, region, weights, reader) if wrong else None
        where = {s: ((0, 0) if reader.held(ctx.trace.nodes[s].text, wrong, key) else None)
                 for s in weights} if wrong else {}
        return weights, {}, where
    att = ctx.attribute(node, region, objective)
    if not att.sources or att.skipped:
        return {}, {}, {}
    atts = {s.source: s for s in att.sources}
    key = _fact_key(ctx, node, region, atts, reader) if wrong else None
    where = {s.source: _carried(ctx, s, node, wrong, key, reader=reader) for s in att.sources} if wrong else {}
    return {s.source: s.weights[weight] for s in att.sources}, atts, where


def walk(ctx: Any, weight: str, rule: str, objective: str, occlusion: bool = False,
         reader: FactReader | None = None, params: Mapping[str, Any] | None = None) -> list[Any]:
    """The backward walk from the loss target, turned into a ranking by ``rule`` (:mod:`agentgrad.blame.rules`).

    ``weight``: which of the four GBC weights ranks the sources; ``occlusion``: counterfactual
    occlusion weights instead (forward passes only); ``reader``: what a fact is in the trace's text
    (default: :func:`~agentgrad.blame.facts.detect_reader`); ``params``: the rule's parameters
    (default: those it is registered with). The edges followed are left in ``ctx.walked``.
    """
    rng = random.Random(ctx.seed)
    reader = reader or detect_reader(ctx.trace)
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


def _fact_key(ctx: Any, node: int, region: Any, sources: Any, reader: FactReader = LINES) -> str | None:
    """The key a followed value is identified by: the key it is stated under at ``node`` (the reader's
    ``key_at``), when some source states that key (with any value); else None, and any occurrence
    counts (free text, or a key renamed on the way)."""
    key = reader.key_at(ctx.trace.nodes[node].text, region)
    if key is None or not any(reader.key_value(ctx.trace.nodes[s].text, key) is not None for s in sources):
        return None
    return key


def _top_char(ctx: Any, src: Any, node: int) -> int | None:
    """Where in the source's text its highest-scoring token starts (leading spaces skipped)."""
    if not src.l1:
        return None
    r = ctx.render(node)
    ta, tb = r.offsets[src.positions[max(range(len(src.l1)), key=lambda i: src.l1[i])]]
    text = ctx.trace.nodes[src.source].text
    for (a, b) in r.source_chars.get(src.source, []):
        if ta < b and tb > a:
            lo = max(ta, a) - a
            while lo < min(tb, b) - a - 1 and text[lo].isspace():
                lo += 1
            return lo
    return None


def surprisal(ctx: Any, node: int, att: Any, region: tuple[tuple[int, int], ...] | None) -> float:
    """Mean -log p of the objective's tokens at a call (``att``: its attribution for ``region``)."""
    r = ctx.render(node)
    n = len(r.output_tokens_for(list(region))) if region else 0
    n = n or (r.output_range[1] - r.output_range[0])
    return -att.log_prob / max(n, 1)


def walk_follow(ctx: Any, weight: str, objective: str, rng: random.Random, invented: float | None = None,
                blend: bool = False, forks: int = 0, reader: FactReader = LINES) -> list[Any]:
    """The ``follow`` rule (module docstring): the gradient chooses the path, the earliest change the
    step. ``invented`` (the ``origin`` rule): a change whose followed text is that surprising (mean
    -log p) ends the walk there and is blamed. ``blend`` (the ``blend`` rule): a source that holds
    the followed text verbatim (whole) carries it too; where the text changed at a call and is the
    value of a key that sources state, the sources stating it (with a value) are the only
    candidates, each followed on its value, even past an invention; where several carry it or state
    the key, each is followed (at most ``forks`` walks in all) and taken as :func:`_fork` says."""
    region = tuple(ctx.loss.spans.get(ctx.target, [])) if objective == "targeted" else None
    path, changed, _ = _follow(ctx, ctx.target, region, (), weight, objective, rng, invented,
                               [forks if blend else 0], blend, reader)
    if changed:
        first = changed[-1]
    elif ctx.trace.nodes[path[0]].kind in ("call", "tool"):
        first = path[0]
    else:
        first = next((n for n in path if ctx.trace.nodes[n].kind in ("call", "tool")), ctx.target)
    rest = [n for n in reversed(path) if n != first and ctx.trace.nodes[n].kind in ("call", "tool")]
    return [ctx.blame(first, 1.0)] + [ctx.blame(n, 0.5 / (i + 1)) for i, n in enumerate(rest)]


def _follow(ctx: Any, node: int, region: Any, below: tuple[int, ...], weight: str, objective: str,
            rng: random.Random, invented: float | None, forks: list[int],
            strings: bool = False, reader: FactReader = LINES) -> tuple[list[int], list[int], bool]:
    """The walk of :func:`walk_follow` from ``node`` up: ``(path, root first, ending at node; the
    changes, in walk order; whether it met a call where the text was invented)``. ``forks``: the sub-walks left;
    ``strings`` (``blend``): a source holding the followed text verbatim (as a whole value) carries
    it, wherever its gradient peaks, and where the text changed at a call whose followed text is a
    key's value, the sources that state that key are the ones rewritten (:func:`_fork` among them),
    invented or not (an invention then ends the walk only off a key stated above)."""
    path, changed, invention = [node], [], False
    while ctx.trace.nodes[node].kind == "call":
        att = ctx.attribute(node, region, objective)
        if not att.sources or att.skipped:
            break
        atts = {s.source: s for s in att.sources if s.source not in path and s.source not in below}
        text = ctx.trace.nodes[node].text
        followed = text[min(a for a, _ in region):max(b for _, b in region)] if region else ""
        key = _fact_key(ctx, node, region, atts, reader) if followed.strip() else None
        carried = ({s: _carried(ctx, a, node, followed, key, strings, reader) for s, a in atts.items()}
                   if followed.strip() else {})
        if strings and followed.strip():
            carried = {s: where if where is not None else next(iter(reader.held(ctx.trace.nodes[s].text, followed, key,
                                                                          True)), None)
                       for s, where in carried.items()}
        pool = [s for s in atts if carried.get(s) is not None]
        several = len(pool) > 1  # several sources carry it verbatim: each is followed (``blend``)
        if not pool:  # the followed text changed here: rewritten from a source, or introduced
            surprise = surprisal(ctx, node, att, region) if followed.strip() else None
            if surprise is None or surprise > SUPPORTED:
                changed.append(node)
            held: dict[int, tuple[int, int]] = {}
            if strings and key is not None:  # a key's value rewritten: from a source that states the key
                spans = {s: reader.key_span(ctx.trace.nodes[s].text, key) for s in atts}
                held = {s: w for s, w in spans.items() if w is not None and w[1] > w[0]}
            if invented is not None and surprise is not None and surprise > invented:
                if not held:
                    return path, changed, True  # invented here: what lies above is unrelated to it
                # ``blend``: a key's value made up here, or told by a source that states the key
                # otherwise (a worker answering ``unknown`` to a question routed to it): its holders
                # are followed on by key, and the earliest change is blamed
                invention = True
            pool = list(atts)
            if held:
                carried, pool = held, list(held)
                several = len(pool) > 1
        if several and forks[0] > 0:
            up, more, found = _fork(ctx, node, pool, carried, atts, (*below, *path), weight, objective, rng,
                                    invented, forks, strings, reader)
            return up + path, changed + more, found or invention
        best = strongest(pool, lambda s: atts[s].weights[weight], 1, rng)
        if not best:
            break
        best = best[0]
        ctx.walked[node] = [best]
        path.insert(0, best)
        if objective == "targeted":
            where = carried.get(best)
            if where is None:  # re-target on the unit of text the gradient peaks in
                top = _top_char(ctx, atts[best], node)
                where = reader.unit(ctx.trace.nodes[best].text, top) if top is not None else None
            region = (where,) if where is not None else None
        node = best
    return path, changed, invention


def _fork(ctx: Any, node: int, pool: list[int], where: dict[int, Any], atts: dict[int, Any], below: tuple[int, ...],
          weight: str, objective: str, rng: random.Random, invented: float | None, forks: list[int],
          strings: bool, reader: FactReader = LINES) -> tuple[list[int], list[int], bool]:
    """Follow each of ``pool`` from ``node`` (heaviest first, while sub-walks are left), each on the text
    ``where`` says it holds; the heaviest whose walk meets a call where the text was invented is taken, else
    the heaviest in which the text changed somewhere (a walk that reaches a tool or an input with the
    text unchanged found an innocent holder), else the heaviest."""
    ranked = strongest(pool, lambda s: atts[s].weights[weight], len(pool), rng)
    walked, tried = dict(ctx.walked), []
    for s in ranked:
        if forks[0] <= 0:
            break
        forks[0] -= 1
        ctx.walked = dict(walked)
        ctx.walked[node] = [s]
        sub = _follow(ctx, s, (where[s],), below, weight, objective, rng, invented, forks, strings, reader)
        tried.append((sub, ctx.walked))
        if sub[2]:
            break
    (up, more, found), ctx.walked = next((t for t in tried if t[0][2]),
                                         next((t for t in tried if t[0][1]), tried[0]))
    return up, more, found


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
            ups = [(s, _region_in_source(ctx, atts[s], node) if objective == "targeted" and not occlusion else region)
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
    reader = reader or detect_reader(ctx.trace)
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
        key = _fact_key(ctx, node, region, [s.source for s in att.sources], reader) if wrong else None
        for rank, src in enumerate(ranked):
            child = score / (rank + 1)
            occ = _carried(ctx, src, node, wrong, key, reader=reader) if wrong is not None else None
            if wrong is not None and occ is None:
                stops[node] = max(stops.get(node, 0.0), child)
                continue
            nxt = ((occ,) if occ is not None else _region_in_source(ctx, src, node)) if objective == "targeted" else None
            frontier.append((src.source, nxt, child))
            ups = ctx.walked.setdefault(node, [])
            if src.source not in ups:
                ups.append(src.source)
    blamable = {n: v for n, v in stops.items() if ctx.trace.nodes[n].kind in ("call", "tool")}
    if not blamable:
        return [ctx.blame(target, 1.0)]
    return [ctx.blame(n, v) for n, v in sorted(blamable.items(), key=lambda kv: (-kv[1], -kv[0]))]
