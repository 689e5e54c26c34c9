"""How a planted-fault episode is built: the word pools, the four topologies' calls (each fact copied
from the one source that holds it, every origin tracked), the path of a fact, and the replay that
re-renders every downstream copy once a value is corrupted (:mod:`agentgrad.benchmarks.planted.episodes`
plants the faults; :mod:`agentgrad.benchmarks.planted.families` the families built on this)."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

from agentgrad.blame.backward import VerbalLoss
from agentgrad.core.trace import Node, Trace, join_blocks
from agentgrad.errors import ConfigError

ROUTED = {"misroute": ("manager",)}  # families that exist only in some topologies
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


class Builder:
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


def _chain(b: Builder, long: bool) -> None:
    task = b.source("input", "task", b.new_facts(3))
    prev, carried = task, list(b.facts[task])[:2]
    for i in range(4):
        agent = b.name()
        look = b.source("tool", f"lookup_{agent}", b.new_facts(12 if long and i == 1 else 2))
        own = list(b.facts[look])[:1 + (i % 2)]
        keep = carried if i == 0 else b.rng.sample(carried, max(1, len(carried) - b.rng.randint(0, 1)))
        prev = b.call(agent, [prev, look], keep + own)
        carried = keep + own


def _fanin(b: Builder, long: bool) -> None:
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


def _manager(b: Builder, long: bool) -> None:
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


def _broadcast(b: Builder, long: bool) -> None:
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


BUILD = {"chain": _chain, "fanin": _fanin, "manager": _manager, "broadcast": _broadcast}


def value_path(b: Builder, node: int, key: str) -> list[int]:
    """The nodes a key's value passed through to reach ``node``: [origin source, ..., node]."""
    path = [node]
    while b.trace.nodes[path[0]].kind == "call":
        src = b.origin.get((path[0], key))
        if src is None:
            break
        path.insert(0, src)
    return path


def replay(b: Builder, corrupt_at: int, key: str, wrong: str | None,
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
