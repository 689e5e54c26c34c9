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

import hashlib
import itertools
import random
from dataclasses import dataclass, field
from typing import Any, Iterator

from agentgrad.blame.backward import VerbalLoss
from agentgrad.core.trace import Node, Trace, join_blocks
from agentgrad.errors import ConfigError

TOPOLOGIES = ("chain", "fanin", "manager", "broadcast")
FAULTS = ("wrong_value", "omitted", "tool", "decoy", "transformed", "ignored", "misroute")
COPIED = ("wrong_value", "omitted", "tool")  # the wrong text is copied verbatim down to the answer
FAMILIES = ("decoy", "transformed", "ignored", "misroute")  # the string test cannot decide these
ROUTED = {"misroute": ("manager",)}  # families that exist only in some topologies


def supports(topology: str, fault: str, style: str = "lines") -> bool:
    """Whether ``fault`` can be planted in ``topology`` (``misroute`` needs a router and has no prose form)."""
    return topology in ROUTED.get(fault, TOPOLOGIES) and not (style == "prose" and fault == "misroute")
UNKNOWN = "unknown"

KEYS = ["color", "city", "day", "price", "room", "guest", "time", "food", "area", "phone", "ref", "stars",
        "parking", "size", "fruit", "metal", "river", "month", "sport", "drink", "flower", "animal", "planet",
        "school", "street", "train", "hotel", "museum", "bank", "shop", "park", "lake", "bridge", "castle", "market",
        "forest", "island", "engine", "wheel", "window", "garden", "tower", "harbor", "valley", "cloud", "storm",
        "coin", "lamp"]
ADJ = ["red", "blue", "green", "amber", "silver", "quiet", "rapid", "gentle", "bright", "hollow", "lucky", "brave",
       "calm", "dusty", "eager", "fancy", "giant", "humble", "icy", "jolly", "kind", "lively", "misty", "noble",
       "odd", "proud", "rusty", "shy", "tidy", "warm"]
NOUN = ["fox", "owl", "river", "stone", "harbor", "garden", "tower", "meadow", "anchor", "beacon", "canyon", "delta",
        "ember", "forest", "glacier", "island", "jungle", "kettle", "lantern", "mirror", "needle", "orchard", "pillar",
        "quarry", "ribbon", "saddle", "temple", "valley", "willow", "zephyr"]
NAMES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
         "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey",
         "xray", "yankee", "zulu", "ada", "bea", "cal", "dan", "eve", "fay", "gus", "hal", "ivy", "jon", "kim",
         "leo", "max", "ned"]
TEMPLATE_WORDS = ["you", "are", "report", "from", "task", "lookup", "answer", "the", "question", UNKNOWN]


def _held_out(item: str, share: float = 0.25) -> bool:
    """A fixed, seed-independent split: about ``share`` of the items are kept for evaluation only."""
    return int(hashlib.sha256(item.encode()).hexdigest()[:8], 16) / 16**8 < share


def pools(split: str) -> tuple[list[str], list[str]]:
    """(values, agent names) of ``split``: ``train`` (fault-free training) or ``eval`` (held out)."""
    if split not in ("train", "eval"):
        raise ConfigError(f"split must be train or eval, got {split!r}")
    values = [f"{a} {n}" for a in ADJ for n in NOUN]
    pick = (lambda x: _held_out(x)) if split == "eval" else (lambda x: not _held_out(x))
    return [v for v in values if pick(v)], [n for n in NAMES if pick(n)]


@dataclass
class Episode:
    """One generated episode: the trace, its loss (None when fault-free) and the truth."""

    trace: Trace
    loss: VerbalLoss | None
    truth: dict[str, Any] = field(default_factory=dict)


def source_block(trace: Trace, source: int) -> tuple[int, str, str]:
    """How a source appears in a call's user message: under ``[from NAME]`` (the task: ``[task]``)."""
    node = trace.nodes[source]
    return source, (f"[from {node.name}]\n" if node.kind != "input" else "[task]\n"), node.text


class _Builder:
    """Builds one trace, tracking where every (node, key) value sits and where it came from."""

    def __init__(self, rng: random.Random, values: list[str], names: list[str]):
        self.rng, self.values, self.trace = rng, values, Trace()
        self.names = rng.sample(names, len(names))
        self.facts: dict[int, dict[str, str]] = {}  # node -> key -> value
        self.origin: dict[tuple[int, str], int | None] = {}  # (call node, key) -> source node copied from
        self.fresh_keys = rng.sample(KEYS, len(KEYS))
        self.override: dict[tuple[str, str], str] = {}  # (agent, key) -> corrupted value (planting)

    def name(self) -> str:
        return self.names.pop()

    def new_facts(self, n: int) -> dict[str, str]:
        out = {}
        for _ in range(n):
            if not self.fresh_keys:
                self.fresh_keys = self.rng.sample(KEYS, len(KEYS))  # long distractors may reuse keys
            k = self.fresh_keys.pop()
            out[k] = UNKNOWN if self.rng.random() < 0.08 else self.rng.choice(self.values)
        return out

    @staticmethod
    def render(facts: dict[str, str]) -> str:
        return "\n".join(f"{k}: {v}" for k, v in facts.items())

    def source(self, kind: str, name: str, facts: dict[str, str]) -> int:
        node = self.trace.add(Node(id=-1, kind=kind, name=name, text=self.render(facts)))
        self.facts[node.id] = dict(facts)
        return node.id

    def call(self, agent: str, sources: list[int], keys: list[str]) -> int:
        """A call of ``agent`` reading ``sources`` and reporting ``keys`` (each copied from the source holding it)."""
        out: dict[str, str] = {}
        node_id = len(self.trace.nodes)
        for k in keys:
            holder = next((s for s in reversed(sources) if k in self.facts[s]), None)
            out[k] = self.facts[holder][k] if holder is not None else UNKNOWN
            self.origin[(node_id, k)] = holder
        return self.emit(agent, sources, out, f"You are {agent}. Report: {', '.join(keys)}.")

    def emit(self, agent: str, sources: list[int], out: dict[str, str], system: str) -> int:
        """A call of ``agent`` reading ``sources`` whose output is the ``key: value`` lines of ``out``."""
        user, spans = join_blocks([source_block(self.trace, s) for s in sources], 1)
        node = self.trace.add(Node(id=-1, kind="call", name=agent, text=self.render(out), parents=list(sources),
                                   messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                                   spans=spans, model={"backend": "synthetic"}))
        self.facts[node.id] = dict(out)
        return node.id


def _chain(b: _Builder, long: bool) -> None:
    task = b.source("input", "task", b.new_facts(3))
    prev, carried = task, list(b.facts[task])[:2]
    for i in range(4):
        agent = b.name()
        look = b.source("tool", f"lookup_{agent}", b.new_facts(12 if long and i == 1 else 2))
        own = list(b.facts[look])[:1 + (i % 2)]
        keep = carried if i == 0 else b.rng.sample(carried, max(1, len(carried) - b.rng.randint(0, 1)))
        prev = b.call(agent, [prev, look], keep + own)
        carried = keep + own


def _fanin(b: _Builder, long: bool) -> None:
    task = b.source("input", "task", b.new_facts(2))
    k = b.rng.randint(3, 5)
    used = b.rng.sample(range(k), b.rng.randint(1, 2))
    workers, keys = [], []
    for i in range(k):
        agent = b.name()
        first_distractor = min(j for j in range(k) if j not in used)
        n = 2 if i in used else (20 if long and i == first_distractor else 3)  # a distractor 10x longer
        look = b.source("tool", f"lookup_{agent}", b.new_facts(n))
        mine = list(b.facts[look])[:n if i not in used else 2]
        w = b.call(agent, [task, look], mine)
        workers.append(w)
        if i in used:
            keys += mine
    b.call(b.name(), workers, keys)


def _manager(b: _Builder, long: bool) -> None:
    user = b.source("input", "task", b.new_facts(4))
    manager = b.call(b.name(), [user], list(b.facts[user])[:3])
    routed = list(b.facts[manager])
    workers, keys = [], []
    for i, domain in enumerate(b.rng.sample(range(3), b.rng.randint(2, 3))):
        agent = b.name()
        look = b.source("tool", f"lookup_{agent}", b.new_facts(12 if long and i == 0 else 3))
        mine = [routed[i % len(routed)]] + list(b.facts[look])[:2]
        workers.append(b.call(agent, [manager, look], mine))
        keys += mine[1:] if i else mine
    b.call(b.name(), workers, keys)


def _broadcast(b: _Builder, long: bool) -> None:
    task = b.source("input", "task", b.new_facts(3))
    agents = [b.name() for _ in range(3)]
    history, known = [task], list(b.facts[task])
    for turn in range(5):
        agent = agents[turn % len(agents)]
        look = b.source("tool", f"lookup_{agent}_{turn}", b.new_facts(12 if long and turn == 1 else 2))
        history.append(look)
        mine = list(b.facts[look])[:1]
        carried = b.rng.sample(known, min(len(known), 2))
        c = b.call(agent, list(history), carried + mine)
        history.append(c)
        known = list(dict.fromkeys(known + mine))
    # the last speaker answers from everything
    final_keys = b.rng.sample(list(b.facts[history[-1]]), min(3, len(b.facts[history[-1]])))
    b.call(agents[0], list(history), final_keys)


_BUILD = {"chain": _chain, "fanin": _fanin, "manager": _manager, "broadcast": _broadcast}


def _path(b: _Builder, node: int, key: str) -> list[int]:
    """The nodes a key's value passed through to reach ``node``: [origin source, ..., node]."""
    path = [node]
    while b.trace.nodes[path[0]].kind == "call":
        src = b.origin.get((path[0], key))
        if src is None:
            break
        path.insert(0, src)
    return path


def _replay(b: _Builder, corrupt_at: int, key: str, wrong: str | None,
            transform: tuple[int, Any] | None = None) -> None:
    """Set ``key`` to ``wrong`` at ``corrupt_at`` (None: drop its line) and re-render every downstream
    copy, keeping spans exact. A copy of a dropped key is dropped too; ``transform`` (node, function):
    that node reports ``function(value)`` of the value it reads."""
    if wrong is None:
        b.facts[corrupt_at].pop(key)
    else:
        b.facts[corrupt_at][key] = wrong
    for node in b.trace.nodes[corrupt_at:]:
        if node.id != corrupt_at and node.kind == "call":
            for k in list(b.facts[node.id]):
                src = b.origin.get((node.id, k))
                if src is not None and k not in b.facts[src]:
                    del b.facts[node.id][k]
                elif src is not None:
                    b.facts[node.id][k] = b.facts[src][k]
                    if transform is not None and (node.id, k) == (transform[0], key):
                        b.facts[node.id][k] = transform[1](b.facts[src][k])
        if node.id >= corrupt_at:
            node.text = b.render(b.facts[node.id])
    for node in b.trace.nodes:  # re-render user messages from the (possibly changed) sources
        if node.kind != "call":
            continue
        node.messages[1]["content"], node.spans = join_blocks([source_block(b.trace, s.source) for s in node.spans], 1)


def value_span(text: str, key: str) -> tuple[int, int] | None:
    """Characters of ``key``'s value on its ``key: value`` line of ``text``."""
    at = ("\n" + text).find(f"\n{key}: ")
    if at < 0:
        return None
    start = at + len(key) + 2
    end = text.find("\n", start)
    return (start, len(text) if end < 0 else end)


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
        b = _Builder(rng, values, names)
        _BUILD[topology](b, long)
        final = len(b.trace.nodes) - 1
        b.trace.id = f"{topology}-{fault or 'clean'}-{seed}"
        if fault is None:
            return Episode(b.trace, None, {"topology": topology, "fault": None, "long": long})
        candidates = []
        for key, value in b.facts[final].items():
            if value == UNKNOWN:
                continue
            path = _path(b, final, key)
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
    _replay(b, root, key, wrong)
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
