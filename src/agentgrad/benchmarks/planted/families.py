"""Planted fault families where the wrong string alone does not point at the planted call.

``decoy``, ``transformed``, ``ignored`` and ``misroute`` (see :mod:`agentgrad.benchmarks.planted.episodes`
for what each plants). Every episode is built as the first three families are (the same topologies,
the same ``key: value`` calls with exact spans), and the truth is the planted call, as there.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from agentgrad.benchmarks.planted.builder import (BUILD, ROUTED, UNKNOWN, Builder, Episode, replay, value_path,
                                                  value_span)
from agentgrad.blame.backward import VerbalLoss
from agentgrad.errors import ConfigError

_ONES = "zero one two three four five six seven eight nine".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]


def _words(n: int) -> str:
    """21..99 in words (``forty-two``)."""
    tens, ones = divmod(n, 10)
    return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")


# kind -> (a value in the form the lookups hold, the rewrite a formatting call makes, what its prompt asks)
TRANSFORMS: dict[str, tuple[Callable[[random.Random], str], Callable[[str], str], str]] = {
    "time": (lambda r: f"{r.randrange(13, 24)}:{r.choice((0, 15, 30, 45)):02d}",
             lambda v: f"{int(v.split(':')[0]) - 12}:{v.split(':')[1]} pm", "12-hour clock"),
    "number": (lambda r: str(r.randrange(21, 100)), lambda v: _words(int(v)), "in words"),
    "distance": (lambda r: f"{r.randrange(3, 40) / 2:g} km", lambda v: f"{round(float(v.split()[0]) * 1000)} m",
                 "in metres"),
    "date": (lambda r: f"2026-{r.randrange(1, 13):02d}-{r.randrange(1, 29):02d}",
             lambda v: f"{int(v[8:])} {MONTHS[int(v[5:7]) - 1]} {v[:4]}", "day month year"),
    "price": (lambda r: f"{r.randrange(5, 100)} dollars", lambda v: f"${int(v.split()[0])}.00", "with a currency sign"),
}


def _decoys(b: Builder, path: list[int], i: int, key: str) -> list[tuple[int, str, str, int]]:
    """(innocent source, its key, its value, the call reading it) for a fault at ``path[i]``: a source
    off the fault's path that a call downstream of the planted one reads, holding another key's true
    value; that value is absent from every input of the planted call (it could not have copied it)."""
    nodes, root = b.trace.nodes, path[i]
    expected = b.facts[path[i - 1]][key]
    seen_by_root = " ".join(nodes[sp.source].text for sp in nodes[root].spans)
    out = []
    for c in path[i + 1:]:
        for s in dict.fromkeys(sp.source for sp in nodes[c].spans):
            if s in path:
                continue
            out += [(s, k2, v, c) for k2, v in b.facts[s].items()
                    if k2 != key and v not in (UNKNOWN, expected) and v not in seen_by_root]
    return out


def _options(b: Builder, fault: str, final: int) -> list[tuple[str, list[int], int, list[Any]]]:
    """(key, path, planted position, the family's choices there) for every call on a path to the answer."""
    out = []
    for key, value in b.facts[final].items():
        if value == UNKNOWN:
            continue
        path = value_path(b, final, key)
        for i, n in enumerate(path):
            if b.trace.nodes[n].kind != "call":
                continue
            if fault == "decoy":
                extra: list[Any] = _decoys(b, path, i, key)
            elif fault == "transformed":  # the call that rewrites the value: one after the planted one
                extra = [t for t in path[i + 1:] if b.trace.nodes[t].kind == "call"]
            else:
                extra = [None]
            if extra:
                out.append((key, path, i, extra))
    return out


def plant_family(topology: str, fault: str, seed: int, long: bool, rng: random.Random, values: list[str],
                 names: list[str]) -> Episode:
    """One episode of ``topology`` with a fault of family ``fault`` (``FAMILIES``)."""
    if fault == "misroute":
        if topology not in ROUTED["misroute"]:
            raise ConfigError(f"misroute needs a router: topology {', '.join(ROUTED['misroute'])} only, not {topology}")
        return _misroute(seed, long, rng, values, names)
    for _attempt in range(50):
        b = Builder(rng, values, names)
        BUILD[topology](b, long)
        final = len(b.trace.nodes) - 1
        b.trace.id = f"{topology}-{fault}-{seed}"
        options = _options(b, fault, final)
        if not options:
            continue
        key, path, i, extra = rng.choice(options)
        choice = rng.choice(extra)
        planted = _plant(b, fault, key, path, i, choice, final, rng, values)
        if planted is not None:
            break
    else:
        raise ConfigError(f"could not plant a {fault} fault in a {topology} episode (seed {seed})")
    loss, details = planted
    root = path[i]
    spans = {n: [value_span(b.trace.nodes[n].text, key)] for n in path[i:] if key in b.facts[n]}
    truth = {"topology": topology, "fault": fault, "long": long, "key": key, "node": root,
             "agent": b.trace.nodes[root].name, "kind": "call", "path": path[i:],
             "corrupted": {str(n): s for n, s in spans.items()},
             "candidates": sorted({b.trace.nodes[n].name for n in b.trace.upstream(final)}), **details}
    b.trace.meta["truth"] = truth
    return Episode(b.trace, loss, truth)


def _plant(b: Builder, fault: str, key: str, path: list[int], i: int, choice: Any, final: int, rng: random.Random,
           values: list[str]) -> tuple[VerbalLoss, dict[str, Any]] | None:
    """Plant the fault (the trace changes in place); the loss and the truth's extra fields, or None
    when this draw cannot hold it (another is drawn)."""
    root = path[i]
    expected = b.facts[path[i - 1]][key]
    if fault == "ignored":
        replay(b, root, key, None)
        text = f"The final answer does not give {key}; {key} should be {expected}."
        return VerbalLoss(text, [final], fault, {"key": key, "expected": expected}), {}
    if fault == "decoy":
        source, decoy_key, wrong, reader = choice
        replay(b, root, key, wrong)
        carrier = path[path.index(reader) - 1]
        text = f"The final answer is wrong: {key} should be {expected}, but it says {wrong}."
        loss = VerbalLoss(text, [final], fault, {"key": key, "expected": expected, "wrong": wrong},
                          spans={final: [value_span(b.trace.nodes[final].text, key)]})
        # provenance follows the latest holder (inputs last): it takes the decoy where that is the decoy
        rank = lambda n: (b.trace.nodes[n].kind != "input", n)  # noqa: E731
        return loss, {"decoy": source, "decoy_key": decoy_key, "decoy_reader": reader,
                      "decoy_later": rank(source) > rank(carrier)}
    # transformed: the key holds a typed value from its origin; ``choice`` rewrites it, as its prompt asks
    kind = rng.choice(sorted(TRANSFORMS))
    make, rewrite, form = TRANSFORMS[kind]
    right = make(rng)
    wrong = next(v for v in (make(rng) for _ in range(100)) if v != right and rewrite(v) != rewrite(right))
    replay(b, path[0], key, right)
    replay(b, root, key, wrong, transform=(choice, rewrite))
    t = b.trace.nodes[choice]
    t.messages[0]["content"] = f"You are {t.name}. Report: " + ", ".join(
        f"{k} ({form})" if k == key else k for k in b.facts[choice]) + "."
    shown = rewrite(wrong)
    after = {choice}  # the rewriting call and every node that reads it, directly or not
    for node in b.trace.nodes[choice + 1:]:
        if any(sp.source in after for sp in node.spans):
            after.add(node.id)
    if any(shown in b.trace.nodes[n].text for n in b.trace.upstream(final) if n not in after):
        return None  # the rewritten text occurs upstream verbatim after all: draw again
    text = f"The final answer is wrong: {key} should be {rewrite(right)}, but it says {shown}."
    loss = VerbalLoss(text, [final], fault, {"key": key, "expected": rewrite(right), "wrong": shown},
                      spans={final: [value_span(b.trace.nodes[final].text, key)]})
    return loss, {"transform": kind, "transform_at": choice, "planted_value": wrong}


def _misroute(seed: int, long: bool, rng: random.Random, values: list[str], names: list[str]) -> Episode:
    """The manager topology with routing: the user requests two keys held by two workers' lookups, the
    manager's prompt says which worker handles which keys, and its output routes each requested key
    (``KEY: ask WORKER``); a worker reports the keys routed to it from its lookup (``unknown`` where
    its lookup lacks one) and its own first fact; the responder reports the requested keys. The
    fault: the manager routes one requested key to another worker."""
    for _attempt in range(50):
        b = Builder(rng, values, names)
        n = rng.randint(2, 3)
        agents, manager, responder = [b.name() for _ in range(n)], b.name(), b.name()
        domains = [b.new_facts(12 if long and w == 0 else 3) for w in range(n)]
        held = {k: w for w in range(n) for k, v in list(domains[w].items())[1:] if v != UNKNOWN}
        if len({held[k] for k in held}) >= 2:
            break
    else:  # pragma: no cover - three keys per worker, two of them requestable
        raise ConfigError(f"could not plant a misroute fault (seed {seed})")
    by_worker: dict[int, list[str]] = {}
    for k, w in held.items():
        by_worker.setdefault(w, []).append(k)
    asked = rng.sample(sorted(by_worker), 2)
    requested = {rng.choice(by_worker[w]): w for w in asked}
    key = rng.choice(sorted(requested))
    wrong_worker = rng.choice([w for w in range(n) if w != requested[key]])
    user = b.source("input", "task", {**b.new_facts(2), "request": ", ".join(requested)})
    own = [k for k in b.facts[user] if k != "request"]
    routes = {k: agents[wrong_worker if k == key else w] for k, w in requested.items()}
    handles = "; ".join(f"{a} handles {', '.join(domains[w])}" for w, a in enumerate(agents))
    m = b.emit(manager, [user], {**{k: b.facts[user][k] for k in own}, **{k: f"ask {a}" for k, a in routes.items()}},
               f"You are {manager}. Report: {', '.join(own)}. Route each requested key to the worker that "
               f"handles it ({handles}) as KEY: ask WORKER.")
    workers = []
    for w, agent in enumerate(agents):
        look = b.source("tool", f"lookup_{agent}", domains[w])
        mine = [k for k, a in routes.items() if a == agent]
        first = list(domains[w])[0]
        out = {**{k: domains[w].get(k, UNKNOWN) for k in mine}, first: domains[w][first]}
        workers.append(b.emit(agent, [m, look], out,
                              f"You are {agent}. Report: the keys the manager asks you for, and {first}."))
    final_out = {k: next((b.facts[x][k] for x in reversed(workers) if k in b.facts[x]), UNKNOWN) for k in requested}
    final = b.emit(responder, workers, final_out, f"You are {responder}. Report: {', '.join(requested)}.")
    b.trace.id = f"manager-misroute-{seed}"
    expected = domains[requested[key]][key]
    path = [m, workers[wrong_worker], final]
    text = f"The final answer does not give {key}: it says {UNKNOWN}, but {key} should be {expected}."
    loss = VerbalLoss(text, [final], "misroute", {"key": key, "expected": expected, "wrong": UNKNOWN},
                      spans={final: [value_span(b.trace.nodes[final].text, key)]})
    truth = {"topology": "manager", "fault": "misroute", "long": long, "key": key, "node": m, "agent": manager,
             "kind": "call", "path": path,
             "corrupted": {str(x): [value_span(b.trace.nodes[x].text, key)] for x in path},
             "candidates": sorted({b.trace.nodes[x].name for x in b.trace.upstream(final)}),
             "routed_to": agents[wrong_worker], "holder": agents[requested[key]]}
    b.trace.meta["truth"] = truth
    return Episode(b.trace, loss, truth)
