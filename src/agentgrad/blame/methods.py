"""The blame registry: every blame method of the package under one name scheme.

A blame method is ``(BlameContext) -> ranking``: a list of :class:`~agentgrad.blame.context.Blame`
(agent, node, score), best first. The optimisation loop, ``agentgrad attribute``, the planted-fault
and Who&When benchmarks, and the GEPA and DSPy selectors all take these names (``docs/blame.md``).

- ``gbc:W:OBJ:RULE``: the backward walk (:mod:`agentgrad.blame.walk`) on GBC weight ``W``
  (``mean_l1``, ``max_l1``, ``mean_gxi``, ``max_gxi``), objective ``OBJ`` (``whole``, ``targeted``;
  failure-conditioned: ``contrast``, the output against the loss's expected answer, and ``judged``,
  the scorer's judgment of the call given the loss: :meth:`~agentgrad.blame.context.BlameContext.attribute`)
  and rule ``RULE`` (``earliest``, ``path``, ``maxw``, ``direct``, ``stop``, ``carry``, ``follow``, ``origin``, ``blend``);
- ``gbc:W:OBJ:top2``: the walk keeping the two heaviest edges of every call, with the ``stop`` test
  along each path (:func:`~agentgrad.blame.walk.walk_topk`);
- ``occlusion:OBJ:RULE`` (``maxw``, ``stop``, ``carry``): the same walk with edge weights from
  counterfactual occlusion (the drop in log p of the output when the source's tokens are replaced by
  a filler; forward passes only), the content test checking that the source contains the wrong text;
- ``temporal``: temporal credit, each step scored by how surprising the loss-relevant content is
  there given the step's inputs (:func:`temporal`; forward passes only);
- ``replay``: counterfactual replay, for runs with a checkable outcome (:func:`replay`): every
  upstream call sampled afresh and what follows generated again; the call whose replays most often
  turn the final answer right is blamed (many generations; no scorer);
- ``judge:PROTOCOL``: an LLM judge (:mod:`agentgrad.blame.judge`): ``all_at_once``,
  ``step_by_step``, ``binary_search``, ``hybrid``;
- ``provenance``: string provenance, no model at all (:mod:`agentgrad.blame.provenance`): from the loss target,
  follow the sources whose text contains the wrong string (the latest holder first;
  ``provenance:earliest``: the earliest); blame where none does. The baseline every
  blame figure stands beside: a method that does not beat it has found nothing the text did not say;
  ``provenance:key`` (:func:`~agentgrad.blame.provenance.key_provenance`) follows the *key* of the wrong value's ``key: value``
  line instead of its text, and blames where that key's value first changed: what a string method
  can do on a log of ``key: value`` lines even where the value was rewritten; ``provenance:key:root``
  also counts the call that first states the key (none of its sources does) as a change;
- controls: ``random`` (a uniform upstream call or tool), ``all`` (every upstream call and tool,
  tied; it walks every edge), ``last`` (where the loss is attached);
- trivial priors (:mod:`agentgrad.blame.priors`): ``first`` (the first step), ``most_active`` (the
  agent with most steps, at its first), ``position:F`` (the step at fraction F of the log; F in
  0, 0.25, 0.5, 0.75, 1, fixed in advance).

Fact readers: the methods that follow the wrong text (the walks' ``stop``, ``carry``, ``follow``,
``origin``, ``blend``, ``top2``; ``provenance:key``) read what a fact is in the agents' text with a
fact reader (:mod:`agentgrad.blame.facts`: ``lines``, ``prose``, ``json``), detected from the trace,
or chosen by the name: ``NAME@READER`` (``gbc:max_l1:targeted:blend@prose``); :func:`fact_reader`
says which, and the outcome names it.

Aliases (the names of the first releases, still accepted): ``mean_l1``, ``max_l1``, ``mean_gxi`` and
``max_gxi`` are ``gbc:W:whole:path`` (the paper's top-k path rule on the whole output).
"""

from __future__ import annotations

import difflib
import math
import random
from typing import Any, Callable

from agentgrad.attribution.weights import WEIGHT_NAMES
from agentgrad.blame.context import Blame, BlameContext
from agentgrad.blame.facts import detect_reader, get_reader, occurrences
from agentgrad.blame.follow import SUPPORTED
from agentgrad.blame.judge import PROTOCOLS, judge_blame
from agentgrad.blame.priors import prior_methods
from agentgrad.blame.provenance import key_provenance, provenance
from agentgrad.blame.rules import WALK_RULES
from agentgrad.blame.walk import OBJECTIVES, RULES, walk, walk_topk
from agentgrad.errors import ConfigError, ContextLengthError, JudgeReplyError, RegistryError

DEFAULT_METHOD = "gbc:max_l1:targeted:blend"  # at or above carry on every planted family, both report seeds (docs/blame.md)
ALIASES = {w: f"gbc:{w}:whole:path" for w in WEIGHT_NAMES}


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
        spans = occurrences(node.text, wrong)
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


def replay(ctx: BlameContext) -> list[Blame]:
    """Counterfactual replay: blame the call whose fresh samples most often make the run right.

    For every upstream call (the loss target included), ``ctx.replays`` runs in which that call's
    output is sampled afresh and every later call that reads it is generated again
    (:meth:`BlameContext.replay`); a call scores the share of its replays whose final answer is
    right. Calls are ranked by that share, and among equal shares the later call first: replaying a
    call generates every call after it again, the faulty one included, so a call that ties with its
    successor is not where the fault entered. When no replay turns the answer right every call
    scores 0. The strongest black-box rival of gradient blame, at the price of
    ``replays x (1 + calls downstream)`` generations per call.
    """
    calls = [n for n in ctx.upstream() if ctx.trace.nodes[n].kind == "call"]
    share = {n: sum(ctx.replay(n, i) for i in range(ctx.replays)) / ctx.replays for n in calls}
    if not any(share.values()):  # no replay helped: nothing is named, every call ties
        return [ctx.blame(n, 0.0) for n in calls]
    ranked = sorted(calls, key=lambda n: (-share[n], -n))
    # a strict order (scores fall by a hair with rank), so that the later of two equal shares is the top-1
    return [ctx.blame(n, share[n] - 1e-9 * i) for i, n in enumerate(ranked)]


def judged(ctx: BlameContext, protocol: str) -> list[Blame]:
    if ctx.judge is None:
        raise ConfigError(f"judge:{protocol} needs a judge model (--judge openai:MODEL@URL)")
    ctx.judge.named_agent = None
    try:
        out = [ctx.blame(n, s) for n, s in judge_blame(ctx.judge, ctx.trace, ctx.loss, protocol)]
    except JudgeReplyError:  # a small judge that cannot keep the format: no blame, counted, never a crash
        ctx.meter.named_nothing(f"judge:{protocol}", "unparsed")
        return []
    except ContextLengthError:  # a log longer than the judge's context: the same (a small model's 8k tokens)
        ctx.meter.named_nothing(f"judge:{protocol}", "unread")
        return []
    if out and ctx.judge.named_agent:
        out[0] = Blame(ctx.judge.named_agent, out[0].node, out[0].score)
    return out


MethodFn = Callable[[BlameContext], list[Blame]]
_METHODS: dict[str, MethodFn] = {}
_READS_FACTS: set[str] = set()  # methods that take ``reader=`` (a fact reader: NAME@READER chooses it)


def register(name: str, fn: MethodFn, reads_facts: bool = False) -> None:
    """Register ``fn`` as ``name``; ``reads_facts``: it takes ``reader=`` (a
    :class:`~agentgrad.blame.facts.FactReader`, None: detected from the trace)."""
    _METHODS[name] = fn
    if reads_facts:
        _READS_FACTS.add(name)


def _all(ctx: BlameContext) -> list[Blame]:
    """Every upstream call and tool, tied; every edge of the trace is walked (the textual-gradient style)."""
    ctx.walked = {n: sorted(ctx.trace.nodes[n].parents) for n in [*ctx.upstream(), ctx.target]
                  if ctx.trace.nodes[n].parents}
    return [ctx.blame(n, 1.0) for n in ctx.upstream()]


def _builtins() -> None:
    if _METHODS:
        return
    for w in WEIGHT_NAMES:
        for obj in OBJECTIVES:
            for rule in RULES:  # each with the parameters it is registered with (blame/rules.py)
                register(f"gbc:{w}:{obj}:{rule}",
                         lambda c, w=w, o=obj, r=rule, reader=None: walk(c, w, r, o, reader=reader),
                         WALK_RULES[rule].reads_facts)
            register(f"gbc:{w}:{obj}:top2",
                     lambda c, w=w, o=obj, reader=None: walk_topk(c, w, o, k=2, reader=reader), True)
    for obj in ("whole", "targeted"):  # occlusion weighs the output's own log p
        for rule in ("maxw", "stop", "carry"):
            register(f"occlusion:{obj}:{rule}",
                     lambda c, o=obj, r=rule, reader=None: walk(c, "mean_l1", r, o, occlusion=True, reader=reader),
                     WALK_RULES[rule].reads_facts)
    register("temporal", temporal)
    register("replay", replay)
    for p in PROTOCOLS:
        register(f"judge:{p}", lambda c, p=p: judged(c, p))
    register("provenance", provenance)
    register("provenance:earliest", lambda c: provenance(c, earliest=True))
    register("provenance:key", key_provenance, True)
    register("provenance:key:root", lambda c, reader=None: key_provenance(c, root=True, reader=reader), True)
    for name, fn in prior_methods().items():  # first, most_active, position:F (blame/priors.py)
        register(name, fn)
    register("random", lambda c: [c.blame(random.Random(c.seed).choice(c.upstream()), 1.0)])
    register("all", _all)
    register("last", lambda c: [c.blame(c.target, 1.0)])


def _agent(ctx: BlameContext, agent: str) -> list[Blame]:
    """Every upstream call of ``agent``, tied (nothing when it made none): a fixed blame, such as the
    oracle of a benchmark whose faulty agent is known."""
    return [ctx.blame(n, 1.0) for n in ctx.upstream()
            if ctx.trace.nodes[n].kind == "call" and ctx.trace.nodes[n].name == agent]


def list_blame_methods() -> list[str]:
    """Every registered name (the aliases of :data:`ALIASES` aside)."""
    _builtins()
    return list(_METHODS)


def canonical(name: str) -> str:
    """The registry name of ``name`` (an alias resolved; ``NAME@READER``: a method that reads facts, with
    that fact reader); an unknown name is a one-line :class:`RegistryError` that lists the valid ones."""
    _builtins()
    base, at, reader = name.partition("@")
    if at:
        base = canonical(base)
        if base not in _READS_FACTS:
            raise RegistryError(f"{base} reads no facts, so it takes no fact reader (@{reader}): only the walks "
                                f"that follow the wrong text (stop, carry, follow, origin, blend, top2) and "
                                f"provenance:key do")
        try:
            get_reader(reader)
        except ConfigError as e:  # an unknown reader: a name outside the registry, with the valid readers
            raise RegistryError(f"{name!r}: {e}") from None
        return f"{base}@{reader}"
    name = ALIASES.get(name, name)
    if name.startswith("agent:") and name[len("agent:"):]:
        return name  # the fixed blame of one named agent
    if name not in _METHODS:
        near = difflib.get_close_matches(name, list(_METHODS) + list(ALIASES), n=1, cutoff=0.75)
        raise RegistryError(f"unknown blame method {name!r}" + (f" (did you mean {near[0]}?)" if near else "")
                            + f"; the default is {DEFAULT_METHOD}; valid: {registry_summary()} (or all), agent:NAME (blame that agent); "
                            f"aliases: {', '.join(f'{a} = {m}' for a, m in ALIASES.items())}")
    return name


def registry_summary() -> str:
    """The registry's names, short: a family whose names are every combination of their parts
    (``gbc:WEIGHT:OBJECTIVE:RULE``) as that pattern with each part's values, every other name whole."""
    _builtins()
    families: dict[str, list[list[str]]] = {}
    for n in _METHODS:
        head, _, rest = n.partition(":")
        families.setdefault(head, []).append(rest.split(":") if rest else [])
    out = []
    for head, parts in families.items():
        width = {len(p) for p in parts}
        if len(parts) > 1 and width != {0} and len(width) == 1:
            values = [list(dict.fromkeys(p[i] for p in parts)) for i in range(width.pop())]
            if len(parts) == len(set(map(tuple, parts))) == math.prod(len(v) for v in values) and len(values) > 1:
                named = [_PART_NAMES.get((head, i), f"PART{i + 1}") for i in range(len(values))]
                out.append(f"{head}:{':'.join(named)} ("
                           + "; ".join(f"{k}: {', '.join(v)}" for k, v in zip(named, values)) + ")")
                continue
        out.extend(":".join([head, *p]) for p in parts)
    return ", ".join(out)


_PART_NAMES = {("gbc", 0): "WEIGHT", ("gbc", 1): "OBJECTIVE", ("gbc", 2): "RULE", ("occlusion", 0): "OBJECTIVE",
               ("occlusion", 1): "RULE"}


def get_blame_method(name: str) -> MethodFn:
    name = canonical(name)
    if name.startswith("agent:"):
        return lambda c, a=name[len("agent:"):]: _agent(c, a)
    base, _, reader = name.partition("@")
    if reader:
        return lambda c, fn=_METHODS[base], r=get_reader(reader): fn(c, reader=r)
    return _METHODS[name]


def with_reader(name: str, reader: str) -> str:
    """``name`` with fact reader ``reader`` where it is a method that reads facts and names no reader
    itself (``NAME@READER``), else ``name``: how a benchmark declares the reader its figures were made with."""
    name = canonical(name)
    return f"{name}@{get_reader(reader).name}" if name in _READS_FACTS else name


def fact_reader(name: str, trace: Any) -> str | None:
    """The fact reader (:mod:`agentgrad.blame.facts`) that method ``name`` reads ``trace`` with: the one
    its name chooses (``NAME@READER``), else the one detected from the trace (given a
    :class:`BlameContext` for ``trace``, the one it detected: :attr:`BlameContext.reader`); None for a
    method that reads no facts."""
    base, _, reader = canonical(name).partition("@")
    if base not in _READS_FACTS:
        return None
    return reader or (trace.reader if isinstance(trace, BlameContext) else detect_reader(trace)).name


def edge_rule(name: str) -> str:
    """The edge rule by which a graph is pruned for method ``name`` when no loss is walked (the kept
    edges of ``agentgrad attribute``): its GBC weight, ``random`` or ``all`` for those controls, and
    the paper's ``mean_l1`` for methods that weigh no GBC edge (occlusion, temporal, judges, last)."""
    name = canonical(name)
    if name.startswith("gbc:"):
        return name.split(":")[1]
    return name if name in ("random", "all") else "mean_l1"


def needs_scorer(name: str) -> bool:
    """Whether a blame method reads a white-box scorer (gradients, occlusion, temporal credit)."""
    return canonical(name).split(":")[0] in ("gbc", "occlusion", "temporal")


def model_free(name: str) -> bool:
    """Whether a blame method uses no model at all (no scorer, judge or replayed runs): the
    baselines every blame figure is given beside (``provenance``, the controls, the fixed priors)."""
    name = canonical(name)
    return not needs_scorer(name) and not name.startswith("judge:") and name != "replay" \
        and not name.startswith("agent:")


def check_expected(methods: list[str], expected: str | None) -> None:
    """A ``contrast`` method needs the right answer to contrast with: without one it would silently be
    the ``whole`` objective, so naming it without ``expected`` is a one-line :class:`ConfigError`."""
    contrast = [m for m in methods if canonical(m).startswith("gbc:") and canonical(m).split(":")[2] == "contrast"]
    if contrast and expected in (None, ""):
        raise ConfigError(f"{contrast[0]} differentiates the produced answer against the right one: give it "
                          f"(--expected TEXT; expected= in the library), or choose the whole or targeted objective")


def select_methods(spec: str, judge: bool = False, replay: bool = False, exact: bool = False) -> list[str]:
    """``all``, or a comma list of names, aliases and prefixes (``gbc:mean_l1``, ``occlusion``, ``judge``),
    in the order given.

    ``all`` takes the judge methods only when a judge is given (``judge``), and ``replay`` only where
    runs can be replayed (``replay``: ``bench inject``); naming one without it is an error. A name is
    also the prefix of its variants (``provenance`` selects ``provenance:earliest``, ``provenance:key``,
    ...), as the benchmarks' ``--methods`` take it; with ``exact`` (``agentgrad blame --method``) a
    name selects itself alone, and only a prefix that is no name selects its family."""
    names = list_blame_methods()
    if spec == "all":
        return [n for n in names if (judge or not n.startswith("judge:")) and (replay or n != "replay")]
    out: list[str] = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        part = ALIASES.get(part, part)
        hit = [part] if exact and part in names else [n for n in names if n == part or n.startswith(part + ":")]
        if not hit and "@" in part:  # NAME@READER: that method alone, with that fact reader
            hit = [canonical(part)]
        if not hit and part.startswith("agent:"):
            hit = [canonical(part)]
        if not hit:
            canonical(part)  # raises with the valid names
        out.extend(h for h in hit if h not in out)
    if not out:
        raise ConfigError("--methods selects no method")
    if not judge and any(n.startswith("judge:") for n in out):
        raise ConfigError("the judge methods need a judge model: add --judge openai:MODEL@URL")
    if not replay and "replay" in out:
        raise ConfigError("replay needs runs that can be run again with a checkable outcome: use it with "
                          "agentgrad bench inject --replays N")
    return out
