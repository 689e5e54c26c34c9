"""The blame registry: every blame method of the package, written out once as a table of families.

A blame method is ``(BlameContext) -> ranking``: a list of :class:`~agentgrad.blame.context.Blame`
(agent, node, score), best first. The optimisation loop, ``agentgrad blame``, ``agentgrad attribute``,
the planted-fault, Who&When and AgentRx benchmarks, and the GEPA and DSPy selectors all take these names.

:data:`FAMILIES` is the registry: one :class:`Family` a row, with its name pattern, its parts and
their values (a name is the pattern with one value of each part, in the order the parts list them),
the function, what it needs (a scorer, a judge, replayable runs, or nothing), which names read facts,
and where a tuned parameter was chosen. The name grammar (:func:`registry_summary`), the CLI's
``--methods`` help (:func:`registry_grammar`), an unknown name's error and docs/blame.md's table
(:func:`registry_markdown`, checked by a test) are all made from it.

Fact readers: the methods that follow the wrong text read what a fact is in the agents' text with a
fact reader (:mod:`agentgrad.blame.facts`: ``lines``, ``prose``, ``json``), detected from the trace,
or chosen by the name: ``NAME@READER`` (``gbc:max_l1:targeted:blend@prose``); :func:`fact_reader`
says which, and the verdict names it. ``agent:NAME`` blames a fixed agent (a benchmark's oracle).

Aliases (the names of the first releases, still accepted): ``mean_l1``, ``max_l1``, ``mean_gxi`` and
``max_gxi`` are ``gbc:W:whole:path`` (the paper's top-k path rule on the whole output).
"""

from __future__ import annotations

import difflib
import itertools
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Mapping

from agentgrad.attribution.weights import WEIGHT_NAMES
from agentgrad.blame.context import Blame, BlameContext
from agentgrad.blame.facts import detect_reader, get_reader
from agentgrad.blame.judge import PROTOCOLS, judge_blame
from agentgrad.blame.priors import POSITIONS, first, most_active, position, position_name
from agentgrad.blame.provenance import key_provenance, provenance
from agentgrad.blame.temporal import replay, temporal
from agentgrad.blame.walk import OBJECTIVES, RULES, WALK_RULES, walk, walk_topk
from agentgrad.errors import ConfigError, ContextLengthError, JudgeReplyError, RegistryError

DEFAULT_METHOD = "gbc:max_l1:targeted:blend"  # at or above carry on every planted family, both report seeds (docs/blame.md)
# the tokens a call is read within by default (agentgrad blame): its system prompt, its task and the latest steps
# that fit. On AgentRx's report half it gave the exact path's accuracy on every run at 0.75 of its CPU
# (docs/agentrx.md, registered before it ran); 0 or None: every call whole, up to the scorer's context
WINDOW = 4096
ALIASES = {w: f"gbc:{w}:whole:path" for w in WEIGHT_NAMES}


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


def _all(ctx: BlameContext) -> list[Blame]:
    """Every upstream call and tool, tied; every edge of the trace is walked (the textual-gradient style)."""
    ctx.walked = {n: sorted(ctx.trace.nodes[n].parents) for n in [*ctx.upstream(), ctx.target]
                  if ctx.trace.nodes[n].parents}
    return [ctx.blame(n, 1.0) for n in ctx.upstream()]


def _gbc(ctx: BlameContext, weight: str, objective: str, rule: str, reader: Any = None) -> list[Blame]:
    if rule == "top2":
        return walk_topk(ctx, weight, objective, k=2, reader=reader)
    return walk(ctx, weight, rule, objective, reader=reader)


def _occlusion(ctx: BlameContext, objective: str, rule: str, reader: Any = None) -> list[Blame]:
    return walk(ctx, "mean_l1", rule, objective, occlusion=True, reader=reader)


MethodFn = Callable[[BlameContext], list[Blame]]
FACT_RULES = tuple(r for r in RULES if WALK_RULES[r].reads_facts) + ("top2",)


@dataclass(frozen=True)
class Family:
    """One family of blame methods: a row of :data:`FAMILIES`.

    ``pattern`` is the name with each part in capitals (``gbc:WEIGHT:OBJECTIVE:RULE``); ``parts`` give
    each part's values in registry order; ``fn(ctx, **{part.lower(): value}, reader=...)`` ranks
    (``reader`` only where the name reads facts). ``needs``: ``scorer`` (a white-box model),
    ``judge``, ``runs`` (replayable runs) or ``""`` (no model: a baseline). ``facts``: the part
    values whose names read facts (``{"RULE": (...)}``), or True for the whole family. ``tuned``:
    a parameter chosen on a benchmark, and the seed it was chosen on."""

    pattern: str
    doc: str
    fn: Callable[..., list[Blame]]
    parts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    needs: str = ""
    facts: Mapping[str, tuple[str, ...]] | bool = False
    tuned: str = ""

    def names(self) -> list[tuple[str, dict[str, str]]]:
        """Every name of the family with its parts' values, in registry order."""
        if not self.parts:
            return [(self.pattern, {})]
        keys = list(self.parts)
        out = []
        for combo in itertools.product(*self.parts.values()):
            name = self.pattern
            for k, v in zip(keys, combo):
                name = name.replace(k, v, 1)
            out.append((name, dict(zip(keys, combo))))
        return out

    def reads_facts(self, values: Mapping[str, str]) -> bool:
        if isinstance(self.facts, bool):
            return self.facts
        return all(values[k] in allowed for k, allowed in self.facts.items())


# The registry. A new method is a new row (or a new value of a part); nothing else registers one.
FAMILIES: tuple[Family, ...] = (
    Family("gbc:WEIGHT:OBJECTIVE:RULE", "the backward walk on the gradients of a white-box scorer: connection "
           "weight WEIGHT, objective OBJECTIVE, walk rule RULE (top2: the two heaviest edges of every call, "
           "with the stop test along each path)", _gbc,
           {"WEIGHT": WEIGHT_NAMES, "OBJECTIVE": OBJECTIVES, "RULE": (*RULES, "top2")}, needs="scorer",
           facts={"RULE": FACT_RULES}, tuned="RULE origin and blend: invented = 5 nats, chosen on the planted "
           "faults in prose, development seed 10 (blame.walk.WALK_RULES)"),
    Family("occlusion:OBJECTIVE:RULE", "the same walk with edge weights from counterfactual occlusion (the drop "
           "in log p of the output when a source's tokens are replaced by a filler; forward passes only)",
           _occlusion, {"OBJECTIVE": ("whole", "targeted"), "RULE": ("maxw", "stop", "carry")}, needs="scorer",
           facts={"RULE": ("stop", "carry")}),
    Family("temporal", "temporal credit: each upstream call scored by how surprising the wrong text is there "
           "given its own inputs (one forward pass per call)", temporal, needs="scorer"),
    Family("replay", "counterfactual replay: each upstream call sampled afresh and everything after it "
           "generated again; the call whose replays most often turn the answer right", replay, needs="runs"),
    Family("judge:PROTOCOL", "an LLM judge reads the log (the Who&When protocols)",
           lambda c, protocol: judged(c, protocol), {"PROTOCOL": PROTOCOLS}, needs="judge"),
    Family("provenance", "string provenance, no model: follow the sources whose text holds the wrong string "
           "(the latest holder first); blame where none does", provenance),
    Family("provenance:earliest", "provenance, following the earliest holder", lambda c: provenance(c, earliest=True)),
    Family("provenance:key", "key provenance, no model: follow the key of the wrong value's fact; blame where "
           "that key's value first changed", key_provenance, facts=True),
    Family("provenance:key:root", "key provenance that also counts the call first stating the key as a change",
           lambda c, reader=None: key_provenance(c, root=True, reader=reader), facts=True),
    Family("first", "prior: the first step of the log", first),
    Family("most_active", "prior: the agent with the most steps, at its first", most_active),
    Family("position:F", "prior: the step at fraction F of the log", lambda c, f: position(c, float(f)),
           {"F": tuple(position_name(p)[len("position:"):] for p in POSITIONS)},
           tuned="F fixed in advance (the quartiles), never chosen on the logs it is scored on"),
    Family("random", "control: a uniform upstream call or tool (seeded)",
           lambda c: [c.blame(random.Random(c.seed).choice(c.upstream()), 1.0)]),
    Family("all", "control: every upstream call and tool, tied (the textual-gradient style)", _all),
    Family("last", "control: where the loss is attached", lambda c: [c.blame(c.target, 1.0)]),
)


@dataclass(frozen=True)
class _Entry:
    family: Family
    values: dict[str, str]
    reads_facts: bool


@lru_cache(maxsize=1)
def _registry() -> dict[str, _Entry]:
    """name -> (family, parts' values, reads facts), over :data:`FAMILIES` in order."""
    out: dict[str, _Entry] = {}
    for fam in FAMILIES:
        for name, values in fam.names():
            if name in out:
                raise RegistryError(f"blame method {name!r} is registered twice (FAMILIES)")
            out[name] = _Entry(fam, values, fam.reads_facts(values))
    return out


def _agent(ctx: BlameContext, agent: str) -> list[Blame]:
    """Every upstream call of ``agent``, tied (nothing when it made none): a fixed blame, such as the
    oracle of a benchmark whose faulty agent is known."""
    return [ctx.blame(n, 1.0) for n in ctx.upstream()
            if ctx.trace.nodes[n].kind == "call" and ctx.trace.nodes[n].name == agent]


def list_blame_methods() -> list[str]:
    """Every registered name (the aliases of :data:`ALIASES` aside), in :data:`FAMILIES` order."""
    return list(_registry())


def canonical(name: str) -> str:
    """The registry name of ``name`` (an alias resolved; ``NAME@READER``: a method that reads facts, with
    that fact reader); an unknown name is a one-line :class:`RegistryError` that lists the valid ones."""
    base, at, reader = name.partition("@")
    if at:
        base = canonical(base)
        if not reads_facts(base):
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
    if name not in _registry():
        near = difflib.get_close_matches(name, list(_registry()) + list(ALIASES), n=1, cutoff=0.75)
        raise RegistryError(f"unknown blame method {name!r}" + (f" (did you mean {near[0]}?)" if near else "")
                            + f"; the default is {DEFAULT_METHOD}; valid: {registry_summary()} (or all), agent:NAME (blame that agent); "
                            f"aliases: {', '.join(f'{a} = {m}' for a, m in ALIASES.items())}")
    return name


def registry_summary() -> str:
    """The registry's names, short: a family of two parts or more as its pattern with each part's
    values, every other name whole."""
    out = []
    for fam in FAMILIES:
        if len(fam.parts) > 1:
            out.append(f"{fam.pattern} (" + "; ".join(f"{k}: {', '.join(v)}" for k, v in fam.parts.items()) + ")")
        else:
            out.extend(n for n, _ in fam.names())
    return ", ".join(out)


def registry_grammar() -> str:
    """The name grammar in one line (the CLI's ``--methods`` help): every family's pattern, the families
    that share a head as ``HEAD[:VARIANT] (VARIANT: ...)`` (a help screen turns ``:key:`` into an emoji)."""
    heads: dict[str, list[str]] = {}
    for f in FAMILIES:
        heads.setdefault(f.pattern.split(":")[0], []).append(f.pattern)
    out = []
    for head, patterns in heads.items():
        variants = [p.partition(":")[2] for p in patterns if p != head]
        out.append(f"{head}[:VARIANT] (VARIANT: {', '.join(variants)})" if head in patterns and variants
                   else ", ".join(patterns))
    return ", ".join(out)


def registry_markdown() -> str:
    """docs/blame.md's table of the registry (a test holds the page to it)."""
    rows = ["| family | parts | what it blames | needs | tuned |", "|---|---|---|---|---|"]
    for f in FAMILIES:
        parts = "; ".join(f"`{k}`: {', '.join(f'`{v}`' for v in vals)}" for k, vals in f.parts.items()) or "-"
        rows.append(f"| `{f.pattern}` | {parts} | {f.doc} | {f.needs or 'no model'} | {f.tuned or '-'} |")
    return "\n".join(rows)


def get_blame_method(name: str) -> MethodFn:
    """The ranking function of ``name`` (checked by :func:`canonical`)."""
    name = canonical(name)
    if name.startswith("agent:"):
        return lambda c, a=name[len("agent:"):]: _agent(c, a)
    base, _, reader = name.partition("@")
    e = _registry()[base]
    kw = {k.lower(): v for k, v in e.values.items()}
    if reader:
        return lambda c, r=get_reader(reader): e.family.fn(c, reader=r, **kw)
    return lambda c: e.family.fn(c, **kw)


def reads_facts(name: str) -> bool:
    """Whether method ``name`` follows the wrong text and reads it with a fact reader."""
    base = canonical(name).partition("@")[0]
    return base in _registry() and _registry()[base].reads_facts


def needs(name: str) -> str:
    """What method ``name`` needs: ``scorer``, ``judge``, ``runs`` or ``""`` (no model)."""
    base = canonical(name).partition("@")[0]
    return _registry()[base].family.needs if base in _registry() else "agent"


def with_reader(name: str, reader: str) -> str:
    """``name`` with fact reader ``reader`` where it is a method that reads facts and names no reader
    itself (``NAME@READER``), else ``name``: how a benchmark declares the reader its figures were made with."""
    name = canonical(name)
    return f"{name}@{get_reader(reader).name}" if "@" not in name and reads_facts(name) else name


def fact_reader(name: str, trace: Any) -> str | None:
    """The fact reader (:mod:`agentgrad.blame.facts`) that method ``name`` reads ``trace`` with: the one
    its name chooses (``NAME@READER``), else the one detected from the trace (given a
    :class:`BlameContext` for ``trace``, the one it detected: :attr:`BlameContext.reader`); None for a
    method that reads no facts."""
    base, _, reader = canonical(name).partition("@")
    if not reads_facts(base):
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
    return needs(name) == "scorer"


def model_free(name: str) -> bool:
    """Whether a blame method uses no model at all (no scorer, judge or replayed runs): the
    baselines every blame figure is given beside (``provenance``, the controls, the fixed priors)."""
    return needs(name) == ""


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
