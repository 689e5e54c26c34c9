"""Planted-fault episodes: synthetic multi-agent traces where the origin of every output token is known.

Every episode is an ordinary :class:`~agentgrad.core.trace.Trace` (``input``, ``tool`` and ``call``
nodes, messages with exact spans), built the way a run records one. Outputs are ``key: value``
lines; a call's system prompt says which keys to report (``Report: a, b.``) and its user message
holds its sources under headers (``[from NAME]``). Each reported value is copied from the one
source that holds that key, so the generator knows, per call, which source (and which characters)
every output fact came from.

One fault is planted per episode (``fault``): at one node on the path of one fact that reaches the
final output, the value is corrupted (``wrong_value``: another value, ``omitted``: ``unknown``; at a
call) or the tool result that introduces the fact holds a wrong value (``tool``). Every downstream
call copies the corrupted value, so the final output is wrong, and a :class:`VerbalLoss` naming the
key, the wrong and the expected value is attached to the final call, with the character span of the
wrong value in its output. The truth (``trace.meta["truth"]``) is for scoring only; blame methods
never see it (:func:`without_truth`).

Fault families where the wrong string alone does not point at the planted call (``FAMILIES``):

- ``decoy``: a ``wrong_value`` whose wrong value is the true value of another key that an innocent
  source (a sibling worker, a later lookup) holds and some call downstream of the planted one
  reads: several sources of that call contain the string, one carried it into the answer;
- ``transformed``: the key holds a typed value (a time, a number, a distance, a date, a price) and
  a call downstream of the planted one rewrites it (12-hour clock, words, metres, a long date, a
  currency sign; its prompt asks for that format), so the final wrong text occurs nowhere upstream
  verbatim; the loss span still marks it;
- ``ignored``: a call drops a key its prompt asks it to report, and so does every call after it;
  the loss names the missing key and has no span;
- ``misroute`` (``manager`` only, the topology with a router): the manager's routing line sends a
  requested key to a worker whose lookup lacks it, which honestly reports ``unknown``; the worker
  that holds it is not asked. No wrong value at the manager, only a wrong outcome.

Styles: ``lines`` (above) or ``prose`` (the same episode, every call writing one sentence per fact
in its own words: :mod:`agentgrad.benchmarks.planted.prose`; no ``misroute``).

Topologies (``TOPOLOGIES``): ``chain`` (A -> B -> C -> D, each adding facts from its own lookup),
``fanin`` (3-5 workers -> responder; distractor workers, up to 10x longer, are not used),
``manager`` (the paper's MultiWOZ shape: manager -> domain workers with lookups -> responder),
``broadcast`` (every call reads every earlier message; agents speak more than once).
"""

from __future__ import annotations

import itertools
import random
from typing import Any, Iterator

from agentgrad.benchmarks.planted.builder import (
    ADJ, BUILD, KEYS, NAMES, NOUN, ROUTED, TEMPLATE_WORDS, UNKNOWN, Builder, Episode, pools, replay, source_block,
    value_path, value_span,
)
from agentgrad.blame.backward import VerbalLoss
from agentgrad.core.trace import Node, Trace
from agentgrad.errors import ConfigError

# the generator's vocabulary and episode type, read from here by the trained scorer, the tests and the scripts
__all__ = ["ADJ", "COPIED", "Episode", "FAMILIES", "FAULTS", "KEYS", "NAMES", "NOUN", "ROUTED", "TEMPLATE_WORDS",
           "TOPOLOGIES", "UNKNOWN", "generate", "pools", "source_block", "supports", "training_calls",
           "training_episodes", "value_span", "without_truth"]

TOPOLOGIES = ("chain", "fanin", "manager", "broadcast")
FAULTS = ("wrong_value", "omitted", "tool", "decoy", "transformed", "ignored", "misroute")
COPIED = ("wrong_value", "omitted", "tool")  # the wrong text is copied verbatim down to the answer
FAMILIES = ("decoy", "transformed", "ignored", "misroute")  # the string test cannot decide these


def supports(topology: str, fault: str, style: str = "lines") -> bool:
    """Whether ``fault`` can be planted in ``topology`` (``misroute`` needs a router and has no prose form)."""
    return topology in ROUTED.get(fault, TOPOLOGIES) and not (style == "prose" and fault == "misroute")


def generate(topology: str, fault: str | None, seed: int, split: str = "eval", long: bool | None = None,
             style: str = "lines") -> Episode:
    """One episode of ``topology`` with one planted ``fault`` (None: fault-free), from ``seed``.

    ``long`` makes one source (a distractor, or a source the fault does not pass through)
    about 10x longer than the others; by default every other seed. ``style``: ``lines`` (every
    call writes ``key: value`` lines) or ``prose`` (the same episode, the calls writing sentences in
    their own words: :mod:`agentgrad.benchmarks.planted.prose`).
    """
    if style != "lines":
        return _in_prose(generate(topology, fault, seed, split, long), style)
    if topology not in TOPOLOGIES:
        raise ConfigError(f"unknown topology {topology!r}; valid: {', '.join(TOPOLOGIES)}, all")
    if fault is not None and fault not in FAULTS:
        raise ConfigError(f"unknown fault kind {fault!r}; valid: {', '.join(FAULTS)}")
    rng = random.Random(f"{topology}|{fault}|{seed}|{split}")
    values, names = pools(split)
    long = bool(seed % 2) if long is None else long
    if fault in FAMILIES:
        from agentgrad.benchmarks.planted.families import plant_family  # it builds on this module

        return plant_family(topology, fault, seed, long, rng, values, names)
    for _attempt in range(50):
        b = Builder(rng, values, names)
        BUILD[topology](b, long)
        final = len(b.trace.nodes) - 1
        b.trace.id = f"{topology}-{fault or 'clean'}-{seed}"
        if fault is None:
            return Episode(b.trace, None, {"topology": topology, "fault": None, "long": long})
        candidates = []
        for key, value in b.facts[final].items():
            if value == UNKNOWN:
                continue
            path = value_path(b, final, key)
            if b.trace.nodes[path[0]].kind == "input" and fault == "tool":
                continue
            for i, n in enumerate(path):
                kind = b.trace.nodes[n].kind
                if (fault == "tool" and kind == "tool") or (fault != "tool" and kind == "call"):
                    candidates.append((key, path, i))
        if candidates:
            break
    else:  # pragma: no cover - every topology has calls and tools on some path
        raise ConfigError(f"could not plant a {fault} fault in a {topology} episode (seed {seed})")
    key, path, i = rng.choice(candidates)
    root = path[i]
    expected = b.facts[root][key] if b.trace.nodes[root].kind == "tool" else b.facts[path[i - 1]][key]
    present = {v for facts in b.facts.values() for v in facts.values()}  # a wrong value is new to the episode
    wrong = UNKNOWN if fault == "omitted" else rng.choice([v for v in values if v not in present])
    replay(b, root, key, wrong)
    corrupted = {n: [value_span(b.trace.nodes[n].text, key)] for n in path[i:]}
    span = corrupted[final][0]
    if fault == "omitted":
        text = f"The final answer does not give {key}: it says {UNKNOWN}, but {key} should be {expected}."
    else:
        text = f"The final answer is wrong: {key} should be {expected}, but it says {wrong}."
    loss = VerbalLoss(text, [final], fault, {"key": key, "expected": expected, "wrong": wrong},
                      spans={final: [span]})
    root_node = b.trace.nodes[root]
    truth = {"topology": topology, "fault": fault, "long": long, "key": key, "node": root, "agent": root_node.name,
             "kind": root_node.kind, "path": path[i:], "corrupted": {str(n): s for n, s in corrupted.items()},
             "candidates": sorted({b.trace.nodes[n].name for n in b.trace.upstream(final)})}
    b.trace.meta["truth"] = truth
    return Episode(b.trace, loss, truth)


def _in_prose(ep: Episode, style: str) -> Episode:
    """``ep`` with its calls writing sentences (:func:`agentgrad.benchmarks.planted.prose.to_prose`)."""
    from agentgrad.benchmarks.planted.prose import STYLES, to_prose

    if style not in STYLES:
        raise ConfigError(f"unknown style {style!r}; valid: {', '.join(STYLES)}")
    if ep.truth.get("fault") == "misroute":
        raise ConfigError("misroute has no prose form (its routing lines are instructions): use --style lines")
    moved = to_prose(ep.trace, ep.trace.id)

    def move(node: int, spans: list[Any]) -> list[Any]:  # a tool's or the task's spans stay where they are
        return [moved[node].get(tuple(s), s) if node in moved and s else s for s in spans]

    if ep.loss:
        ep.loss.spans = {n: move(n, s) for n, s in ep.loss.spans.items()}
    if "corrupted" in ep.truth:
        ep.truth["corrupted"] = {n: move(int(n), s) for n, s in ep.truth["corrupted"].items()}
    ep.trace.id += "-prose"
    ep.truth["style"] = style
    return ep


def without_truth(trace: Trace) -> Trace:
    """A copy of ``trace`` without the generator's ground truth: what a blame method may see."""
    return trace.without_meta("truth")


def training_episodes(seed: int = 0) -> Iterator[Episode]:
    """Fault-free ``train`` episodes of every topology in turn, without end (the trained scorer's data)."""
    for i in itertools.count():
        yield generate(TOPOLOGIES[i % len(TOPOLOGIES)], None, seed * 1_000_003 + i, split="train")


def training_calls(n: int, seed: int = 0) -> list[Node]:
    """The call nodes of the first training episodes, ``n`` of them."""
    out: list[Node] = []
    for ep in training_episodes(seed):
        if len(out) >= n:
            break
        out.extend(ep.trace.calls())
    return out[:n]
