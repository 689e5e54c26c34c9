"""Following the wrong text: where a source carries it, and the walk that follows it to where it changed.

The rules that follow the text a loss names as wrong (``stop``, ``carry``, ``top2`` in
:mod:`agentgrad.blame.walk`; ``follow``, ``origin`` and ``blend`` here, :func:`walk_follow`) ask the
same questions of a call's sources: which occurrence of the text a source carries (its
highest-scoring token inside it, or on the cue right before it: :func:`carried`), under which key
the text is stated (:func:`fact_key`), which region of a source the gradient points at
(:func:`region_in_source`), and how surprising the text is where it was written (:func:`surprisal`).
What a fact is in the text (a key, a cue, a unit) is the fact reader's (:mod:`agentgrad.blame.facts`).
"""

from __future__ import annotations

import random
from typing import Any

from agentgrad.attribution.graph import strongest
from agentgrad.attribution.render import source_windows
from agentgrad.blame.facts import LINES, FactReader

SUPPORTED = 0.6931  # ln 2: content whose tokens each have p > 1/2 is taken as copied from the step's inputs (not tuned)


def region_in_source(ctx: Any, src: Any, node: int) -> tuple[tuple[int, int], ...] | None:
    """The characters of the source's output that its highest-scoring tokens cover (>= half the max)."""
    if not src.l1:
        return None
    top = max(src.l1)
    keep = sorted(p for p, v in zip(src.positions, src.l1) if v >= 0.5 * top)
    r = ctx.render(node)
    chars = []
    for (a, b, at) in source_windows(r, src.source):
        for p in keep:
            ta, tb = r.offsets[p]
            if ta < b and tb > a:
                chars.append((max(ta, a) - a + at, min(tb, b) - a + at))
    return tuple(chars) or None


def carried(ctx: Any, src: Any, node: int, wrong: str, key: str | None = None,
             whole: bool = False, reader: FactReader = LINES) -> tuple[int, int] | None:
    """The occurrence of ``wrong`` in the source's text that the source's highest-scoring token lies
    in or is the cue right before (the reader's ``cue_before``; character range in that text), or None when
    it is neither for any occurrence. With ``key`` (the key whose value ``wrong`` is at the call),
    only occurrences that are that key's value count (the reader's ``held``)."""
    top = top_token(ctx, src, node)
    if top is None:
        return None
    text, lo, hi = top
    while lo < hi and text[lo].isspace():  # a BPE token may carry the space before a word
        lo += 1
    # inside an occurrence, or the cue right before it: a copying model retrieves the content by its
    # key, so its gradient peaks on the value or on the key (SmolLM2's tokenizer splits "museum:" into
    # "museum" and ":", so the key is not the token next to the value)
    return next(((oa, ob) for oa, ob in reader.held(text, wrong, key, whole)
                 if (oa <= lo and hi <= ob) or reader.cue_before(text, hi, oa)), None)


def fact_key(ctx: Any, node: int, region: Any, sources: Any, reader: FactReader = LINES) -> str | None:
    """The key a followed value is identified by: the key it is stated under at ``node`` (the reader's
    ``key_at``), when some source states that key (with any value); else None, and any occurrence
    counts (free text, or a key renamed on the way)."""
    key = reader.key_at(ctx.trace.nodes[node].text, region)
    if key is None or not any(reader.key_value(ctx.trace.nodes[s].text, key) is not None for s in sources):
        return None
    return key


def top_token(ctx: Any, src: Any, node: int) -> tuple[str, int, int] | None:
    """The source's text and the character range in it of the source's highest-scoring token at
    ``node`` (None when it scored no token, or the token lies in no span of that source)."""
    if not src.l1:
        return None
    r = ctx.render(node)
    ta, tb = r.offsets[src.positions[max(range(len(src.l1)), key=lambda i: src.l1[i])]]
    for (a, b, at) in source_windows(r, src.source):
        if ta < b and tb > a:
            return ctx.trace.nodes[src.source].text, max(ta, a) - a + at, min(tb, b) - a + at
    return None


def _top_char(ctx: Any, src: Any, node: int) -> int | None:
    """Where in the source's text its highest-scoring token starts (leading spaces skipped)."""
    top = top_token(ctx, src, node)
    if top is None:
        return None
    text, lo, hi = top
    while lo < hi - 1 and text[lo].isspace():
        lo += 1
    return lo


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
        key = fact_key(ctx, node, region, atts, reader) if followed.strip() else None
        holds = ({s: carried(ctx, a, node, followed, key, strings, reader) for s, a in atts.items()}
                 if followed.strip() else {})  # source -> the occurrence of the followed text it carries
        if strings and followed.strip():
            holds = {s: where if where is not None else next(iter(reader.held(ctx.trace.nodes[s].text, followed, key,
                                                                          True)), None)
                     for s, where in holds.items()}
        pool = [s for s in atts if holds.get(s) is not None]
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
                holds, pool = held, list(held)
                several = len(pool) > 1
        if several and forks[0] > 0:
            up, more, found = _fork(ctx, node, pool, holds, atts, (*below, *path), weight, objective, rng,
                                    invented, forks, strings, reader)
            return up + path, changed + more, found or invention
        best = strongest(pool, lambda s: atts[s].weights[weight], 1, rng)
        if not best:
            break
        best = best[0]
        ctx.walked[node] = [best]
        path.insert(0, best)
        if objective == "targeted":
            where = holds.get(best)
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
