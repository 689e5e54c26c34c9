"""Blame methods behind one interface: an episode with a loss -> a ranking of (agent, node, score).

A method sees only what a real run has: the trace (without the generator's truth), the verbal loss
(its text, targets, ``details`` and the ``spans`` of the output it names as wrong) and a scorer.

Rules that turn a backward walk into a blamed node (the walk starts at the loss's target and
follows, at each call, the incoming edge with the largest weight; ties broken by a seeded RNG):

- ``earliest``: walk to a root; blame the earliest call or tool on the path (the obvious rule,
  which blames the first agent of every chain whatever happened).
- ``path``: every call or tool on the path, tied (the paper's update rule).
- ``maxw``: the node on the path whose edge to its successor has the largest weight.
- ``stop``: walk back only while the source carries the faulty content: the source's
  highest-scoring token lies inside an occurrence of the text the loss names as wrong (the loss
  span of the target's output). The first node whose chosen source does not carry it is blamed;
  a tool or input that carries it is blamed itself. Without loss spans it falls back to ``path``.
- ``carry``: as ``stop``, but at each call the walk follows the heaviest source *among those that
  carry the faulty content* (rather than the heaviest source, stopping when it does not carry it),
  and stops where none does: when the content reaches a call from several sources (a broadcast
  log, where every earlier message is read), a heavier source that does not hold it does not end
  the walk.

Objectives: ``whole`` (the gradient of log p of the whole output, the paper's) or ``targeted`` (only
the output tokens the loss points at; upstream, the region of each source that the gradient
points at becomes that call's target: for ``stop`` and ``carry``, the occurrence of the wrong text
the highest-scoring token lies in, else the source's highest-scoring tokens). Controls: ``random`` (a uniform upstream call or tool),
``all`` (every upstream call and tool, tied), ``last`` (where the loss is attached).
``occlusion:OBJ:RULE``: the same walk with edge weights from counterfactual occlusion (the drop in
log p of the output when the source's tokens are replaced by a filler; forward passes only), the
``stop`` rule checking that the chosen source contains the wrong text.
``gbc:W:OBJ:top2``: the walk keeping the two heaviest edges of every call, with the ``stop`` test
along each path (:func:`walk_topk`).
``temporal``: temporal credit, each step scored by how surprising the loss-relevant content is
there given the step's inputs (:func:`temporal`; forward passes only).
``judge:PROTOCOL``: an LLM judge (:mod:`agentgrad.blame.judge`): ``all_at_once``,
``step_by_step``, ``binary_search``, ``hybrid``.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from agentgrad.attribution.weights import WEIGHT_NAMES
from agentgrad.backward import VerbalLoss
from agentgrad.blame.judge import PROTOCOLS, judge_blame, steps_of
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError, RegistryError

RULES = ("earliest", "path", "maxw", "stop", "carry")
OBJECTIVES = ("whole", "targeted")


@dataclass
class Blame:
    agent: str
    node: int
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "node": self.node, "score": self.score}


class BlameContext:
    """One episode as a method sees it, with attribution cached across methods and counted."""

    def __init__(self, trace: Trace, loss: VerbalLoss, scorer: Any = None, seed: int = 0, judge: Any = None):
        self.trace, self.loss, self.scorer, self.seed, self.judge = trace, loss, scorer, seed, judge
        self._cache: dict[tuple, tuple[Any, float, int, int]] = {}  # key -> (value, seconds, backward, forward)
        self._render: dict[int, Any] = {}
        # what the methods used, each pass counted every time a method needs it (cached or not), so
        # that a method's cost is what it would cost alone
        self.backward_passes = 0
        self.forward_passes = 0
        self.seconds = 0.0

    def _cached(self, key: tuple, compute: Callable[[], Any], backward: int, forward: Callable[[Any], int]) -> Any:
        if key not in self._cache:
            if self.scorer is None:
                raise ConfigError(f"{key[0]} needs a scorer")
            t0 = time.time()
            value = compute()
            self._cache[key] = (value, time.time() - t0, backward, forward(value))
        value, seconds, b, f = self._cache[key]
        self.seconds += seconds
        self.backward_passes += b
        self.forward_passes += f
        return value

    def too_long(self) -> bool:
        """Whether some call the methods needed was longer than the scorer's context (and skipped)."""
        return any(k[0] == "gradient blame" and v[0].skipped and "context" in v[0].skipped
                   for k, v in self._cache.items())

    def whole_attributions(self) -> list[Any]:
        """The whole-output attributions the methods computed (the paper's objective), in node order."""
        found = {k[1]: v[0] for k, v in self._cache.items() if k[0] == "gradient blame" and not k[2]}
        return [found[n] for n in sorted(found)]

    @property
    def judge_requests(self) -> int:
        return self.judge.requests if self.judge is not None else 0

    @property
    def target(self) -> int:
        return self.loss.targets[0]

    def wrong_text(self) -> str | None:
        spans = self.loss.spans.get(self.target)
        if not spans:
            return None
        a, b = spans[0]
        return self.trace.nodes[self.target].text[a:b] or None

    def attribute(self, node: int, region: tuple[tuple[int, int], ...] | None) -> Any:
        """The scorer's gradients at a call (one backward pass), for the whole output or ``region``."""
        return self._cached(("gradient blame", node, region or ()),
                            lambda: self.scorer.attribute_node(self.trace, self.trace.nodes[node],
                                                               list(region) if region else None), 1, lambda v: 0)

    def occlusion(self, node: int, region: tuple[tuple[int, int], ...] | None) -> dict[int, float]:
        """Occlusion weights of a call's sources (one forward pass, plus one per source)."""
        return self._cached(("occlusion", node, region or ()),
                            lambda: self.scorer.occlusion(self.trace, self.trace.nodes[node],
                                                          list(region) if region else None), 0, lambda v: 1 + len(v))

    def output_logprobs(self, node: int) -> Any:
        """(rendering, log p of each output token) of a call; None when it cannot be scored."""
        return self._cached(("temporal credit", node), lambda: self.scorer.output_logprobs(self.trace.nodes[node]),
                            0, lambda v: 1)

    def render(self, node: int) -> Any:
        """The scorer's rendering of a call (token offsets, source character ranges), cached."""
        from agentgrad.attribution.render import render_call

        if node not in self._render:
            self._render[node] = render_call(self.scorer.tokenizer, self.trace.nodes[node])
        return self._render[node]

    def upstream(self) -> list[int]:
        """Calls and tools upstream of the loss target (itself included), in trace order."""
        return steps_of(self.trace, self.target)

    def blame(self, node: int, score: float) -> Blame:
        return Blame(self.trace.nodes[node].name, node, score)


def _occurs(text: str, needle: str) -> list[tuple[int, int]]:
    out, at = [], text.find(needle)
    while at >= 0 and needle:
        out.append((at, at + len(needle)))
        at = text.find(needle, at + 1)
    return out


def _region_in_source(ctx: BlameContext, src: Any, node: int) -> tuple[tuple[int, int], ...] | None:
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


def _carried(ctx: BlameContext, src: Any, node: int, wrong: str) -> tuple[int, int] | None:
    """The occurrence of ``wrong`` in the source's text that the source's highest-scoring token lies
    in or right before (character range in that text), or None when it is neither for any occurrence."""
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
            # inside an occurrence, or the token right before it (only spaces between): the cue a
            # copying model retrieves the content by (a key before its value), so its gradient peaks there
            return next(((oa, ob) for oa, ob in _occurs(text, wrong)
                         if (oa <= lo and hi <= ob) or (hi <= oa and not text[hi:oa].strip())), None)
    return None


def walk(ctx: BlameContext, weight: str, rule: str, objective: str, occlusion: bool = False) -> list[Blame]:
    """The top-1 backward walk from the loss target, turned into a ranking by ``rule``."""
    rng = random.Random(ctx.seed)
    wrong = ctx.wrong_text()
    if rule in ("stop", "carry") and wrong is None:
        rule = "path"
    tests_content = rule in ("stop", "carry")
    node = ctx.target
    region = tuple(ctx.loss.spans.get(node, [])) if objective == "targeted" else None
    path, edge_w, stopped = [node], {}, None
    while ctx.trace.nodes[node].kind == "call":
        where: dict[int, tuple[int, int] | None] = {}  # source -> the occurrence of the wrong text it carries
        if occlusion:
            weights = ctx.occlusion(node, region)
            if not weights:
                break
            atts = {}
            if tests_content:
                where = {s: ((0, 0) if wrong in ctx.trace.nodes[s].text else None) for s in weights}
        else:
            att = ctx.attribute(node, region)
            if not att.sources or att.skipped:
                break
            atts = {s.source: s for s in att.sources}
            weights = {s.source: s.weights[weight] for s in att.sources}
            if tests_content:
                where = {s.source: _carried(ctx, s, node, wrong) for s in att.sources}
        pool = [s for s in weights if where.get(s) is not None] if rule == "carry" else list(weights)
        if not pool:
            stopped = node
            break
        best = max(pool, key=lambda s: (weights[s], rng.random()))
        if rule == "stop" and where.get(best) is None:
            stopped = node
            break
        edge_w[best] = weights[best]
        path.insert(0, best)
        if objective == "targeted" and not occlusion:
            # upstream, the target is what the gradient points at in the source: the occurrence of
            # the wrong text it lies in when the rule tests content, else its highest-scoring tokens
            region = (where[best],) if tests_content else _region_in_source(ctx, atts[best], node)
        node = best
    blamable = [n for n in path if ctx.trace.nodes[n].kind in ("call", "tool")]
    if not blamable:
        return []
    if rule in ("stop", "carry"):
        first = stopped if stopped is not None else (path[0] if ctx.trace.nodes[path[0]].kind in ("call", "tool")
                                                     else blamable[0])
        rest = [n for n in reversed(blamable) if n != first]
        return [ctx.blame(first, 1.0)] + [ctx.blame(n, 0.5 / (i + 1)) for i, n in enumerate(rest)]
    if rule == "earliest":
        return [ctx.blame(n, 1.0 / (i + 1)) for i, n in enumerate(blamable)]
    if rule == "path":
        return [ctx.blame(n, 1.0) for n in blamable]
    # maxw: the node whose edge to its successor weighs most (the target itself scores lowest)
    ranked = sorted(blamable, key=lambda n: -edge_w.get(n, float("-inf")))
    return [ctx.blame(n, 1.0 / (i + 1)) for i, n in enumerate(ranked)]


def walk_topk(ctx: BlameContext, weight: str, objective: str, k: int = 2, budget: int = 32) -> list[Blame]:
    """The backward walk keeping the ``k`` heaviest incoming edges of every call (a tree of paths).

    Along each path it applies the ``stop`` test: it goes on into a source only while the source's
    highest-scoring token lies inside the wrong text; where a kept source does not carry it, the
    call is a stopping point, and a tool or input that carries it is one itself. A node's score is
    the largest, over the paths reaching it, of the product of its edges' rank discounts (1 for
    the heaviest edge, 1/2 for the second, ...). At most ``budget`` calls are attributed.
    """
    wrong = ctx.wrong_text()
    target = ctx.target
    region0 = tuple(ctx.loss.spans.get(target, [])) if objective == "targeted" else None
    frontier = [(target, region0, 1.0)]
    stops: dict[int, float] = {}
    visited: set[tuple[int, Any]] = set()
    spent = 0
    while frontier and spent < budget:
        node, region, score = frontier.pop(0)
        if (node, region) in visited:
            continue
        visited.add((node, region))
        if ctx.trace.nodes[node].kind != "call":
            stops[node] = max(stops.get(node, 0.0), score)
            continue
        att = ctx.attribute(node, region)
        spent += 1
        if not att.sources or att.skipped:
            stops[node] = max(stops.get(node, 0.0), score)
            continue
        ranked = sorted(att.sources, key=lambda s: -s.weights[weight])[:k]
        for rank, src in enumerate(ranked):
            child = score / (rank + 1)
            occ = _carried(ctx, src, node, wrong) if wrong is not None else None
            if wrong is not None and occ is None:
                stops[node] = max(stops.get(node, 0.0), child)
                continue
            nxt = ((occ,) if occ is not None else _region_in_source(ctx, src, node)) if objective == "targeted" else None
            frontier.append((src.source, nxt, child))
    blamable = {n: v for n, v in stops.items() if ctx.trace.nodes[n].kind in ("call", "tool")}
    if not blamable:
        return [ctx.blame(target, 1.0)]
    return [ctx.blame(n, v) for n, v in sorted(blamable.items(), key=lambda kv: (-kv[1], -kv[0]))]


SUPPORTED = 0.6931  # ln 2: content whose tokens each have p > 1/2 is taken as copied from the step's inputs


def temporal(ctx: BlameContext) -> list[Blame]:
    """Temporal credit: score each step by how much the loss-relevant content changes there.

    The loss-relevant content is the text the loss names as wrong (its span in the failing
    output). For every upstream call whose output contains it, the step's score is the surprisal
    of that content given the step's own inputs (the largest, over its occurrences, of the mean
    -log p of its tokens: one forward pass per call): a step that copies the content from a
    source scores low, the step that introduced it scores high. The highest-scoring step is
    blamed; when no call finds the content surprising (every token more likely than 1/2), it came
    in from outside the modelled calls, and the earliest tool or input result holding it is blamed.
    Without a loss span, the failing call is blamed.
    """
    wrong = ctx.wrong_text()
    if wrong is None:
        return [ctx.blame(ctx.target, 1.0)]
    scores: dict[int, float] = {}
    holders = []
    for n in ctx.upstream():
        node = ctx.trace.nodes[n]
        spans = _occurs(node.text, wrong)
        if not spans:
            continue
        holders.append(n)
        if node.kind != "call":
            continue
        scored = ctx.output_logprobs(n)
        if scored is None:
            continue
        r, lps = scored
        o_s = r.output_range[0]
        worst = 0.0
        for a, b in spans:
            toks = r.output_tokens_for([(a, b)])
            if toks:
                worst = max(worst, -sum(lps[t - o_s] for t in toks) / len(toks))
        scores[n] = worst
    ranked = sorted(scores, key=lambda n: -scores[n])
    if ranked and scores[ranked[0]] > SUPPORTED:
        return [ctx.blame(n, scores[n]) for n in ranked]
    outside = [n for n in holders if ctx.trace.nodes[n].kind != "call"]
    if outside:
        return [ctx.blame(outside[0], float("inf"))] + [ctx.blame(n, scores[n]) for n in ranked]
    return [ctx.blame(n, scores[n]) for n in ranked] or [ctx.blame(ctx.target, 1.0)]


def judged(ctx: BlameContext, protocol: str) -> list[Blame]:
    if ctx.judge is None:
        raise ConfigError(f"judge:{protocol} needs a judge model (--judge openai:MODEL@URL)")
    ctx.judge.named_agent = None
    out = [ctx.blame(n, s) for n, s in judge_blame(ctx.judge, ctx.trace, ctx.loss, protocol)]
    if out and ctx.judge.named_agent:
        out[0] = Blame(ctx.judge.named_agent, out[0].node, out[0].score)
    return out


MethodFn = Callable[[BlameContext], list[Blame]]
_METHODS: dict[str, MethodFn] = {}


def register(name: str, fn: MethodFn) -> None:
    _METHODS[name] = fn


def _builtins() -> None:
    if _METHODS:
        return
    for w in WEIGHT_NAMES:
        for obj in OBJECTIVES:
            for rule in RULES:
                register(f"gbc:{w}:{obj}:{rule}", lambda c, w=w, o=obj, r=rule: walk(c, w, r, o))
            register(f"gbc:{w}:{obj}:top2", lambda c, w=w, o=obj: walk_topk(c, w, o, k=2))
    for obj in OBJECTIVES:
        for rule in ("maxw", "stop", "carry"):
            register(f"occlusion:{obj}:{rule}", lambda c, o=obj, r=rule: walk(c, "mean_l1", r, o, occlusion=True))
    register("temporal", temporal)
    for p in PROTOCOLS:
        register(f"judge:{p}", lambda c, p=p: judged(c, p))
    register("random", lambda c: [c.blame(random.Random(c.seed).choice(c.upstream()), 1.0)])
    register("all", lambda c: [c.blame(n, 1.0) for n in c.upstream()])
    register("last", lambda c: [c.blame(c.target, 1.0)])


def list_blame_methods() -> list[str]:
    _builtins()
    return list(_METHODS)


def get_blame_method(name: str) -> MethodFn:
    _builtins()
    if name not in _METHODS:
        raise RegistryError(f"unknown blame method {name!r}; valid: {', '.join(_METHODS)} (or all)")
    return _METHODS[name]


def needs_scorer(name: str) -> bool:
    """Whether a blame method reads a white-box scorer (gradients, occlusion, temporal credit)."""
    return name.split(":")[0] in ("gbc", "occlusion", "temporal")


def select_methods(spec: str, judge: bool = False) -> list[str]:
    """``all``, or a comma list of names and prefixes (``gbc:mean_l1``, ``occlusion``, ``judge``).

    ``all`` takes the judge methods only when a judge is given (``judge``); naming one without it
    is an error."""
    names = list_blame_methods()
    if spec == "all":
        return [n for n in names if judge or not n.startswith("judge:")]
    out: list[str] = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        hit = [n for n in names if n == part or n.startswith(part + ":")]
        if not hit:
            get_blame_method(part)  # raises with the valid names
        out.extend(h for h in hit if h not in out)
    if not out:
        raise ConfigError("--methods selects no method")
    if not judge and any(n.startswith("judge:") for n in out):
        raise ConfigError("the judge methods need a judge model: add --judge openai:MODEL@URL")
    return out
