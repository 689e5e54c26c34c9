"""The planted episodes in prose: agents that write sentences in their own words, not ``key: value`` lines.

The ``lines`` style of :mod:`agentgrad.benchmarks.planted.episodes` writes every call's output as
``key: value`` lines, so a model-free walk can follow a wrong value by its *key* (``provenance:key``
solves every planted value family there). Real agents write sentences: the ``prose`` style rewrites
every call's output, after the fault is planted, as one sentence per fact in the agent's own wording
(a sentence frame and a paraphrase of each key chosen per agent, never the key itself, so two agents
name the same fact differently); lookups and the task stay structured records (``key: value``), as
tool results and forms are. The values, the fault, the truth and the loss are those of the ``lines``
episode; only where the characters sit changes, and every span (the loss span, the truth's
corrupted spans, the calls' message spans) is moved with them.

``misroute`` has no prose form (its routing lines are instructions, not facts).
"""

from __future__ import annotations

import random

from agentgrad.benchmarks.planted.builder import source_block
from agentgrad.core.trace import Trace, join_blocks

STYLES = ("lines", "prose")

# two paraphrases of every key the generator draws (never the key itself)
ALIASES: dict[str, tuple[str, str]] = {
    "color": ("colour", "shade"), "city": ("town", "place"), "day": ("date", "weekday"),
    "price": ("cost", "fare"), "room": ("chamber", "suite"), "guest": ("visitor", "caller"),
    "time": ("hour", "moment"), "food": ("dish", "meal"), "area": ("district", "region"),
    "phone": ("number to call", "telephone line"), "ref": ("reference", "booking code"),
    "stars": ("rating", "grade"), "parking": ("car space", "garage"), "size": ("dimension", "bulk"),
    "fruit": ("produce", "harvest"), "metal": ("alloy", "ore"), "river": ("stream", "waterway"),
    "month": ("season", "moon"), "sport": ("game", "pastime"), "drink": ("beverage", "refreshment"),
    "flower": ("blossom", "bloom"), "animal": ("creature", "beast"), "planet": ("world", "orb"),
    "school": ("academy", "college"), "street": ("road", "avenue"), "train": ("railway service", "locomotive"),
    "hotel": ("inn", "lodging"), "museum": ("gallery", "exhibition hall"), "bank": ("lender", "vault"),
    "shop": ("store", "boutique"), "park": ("green", "common"), "lake": ("pond", "mere"),
    "bridge": ("crossing", "span"), "castle": ("fortress", "keep"), "market": ("bazaar", "fair"),
    "forest": ("woods", "woodland"), "island": ("isle", "atoll"), "engine": ("motor", "machine"),
    "wheel": ("tyre", "rim"), "window": ("pane", "casement"), "garden": ("yard", "plot"),
    "tower": ("spire", "turret"), "harbor": ("port", "dock"), "valley": ("dale", "glen"),
    "cloud": ("mist", "vapour"), "storm": ("tempest", "gale"), "coin": ("token", "piece"),
    "lamp": ("light", "lantern"),
}
# the sentence an agent writes per fact: no colon or equals sign, so no line reads as ``key: value``
FRAMES = ("The {alias} is {value}.", "For the {alias} we have {value}.", "It is {value} for the {alias}.",
          "I found {value} as the {alias}.")


def _alias(key: str, pick: int) -> str:
    return ALIASES[key][pick % 2] if key in ALIASES else f"{key.replace('_', ' ')} field"


def to_prose(trace: Trace, seed: str) -> dict[int, dict[tuple[int, int], tuple[int, int]]]:
    """Rewrite every call's ``key: value`` output of ``trace`` as sentences (in place); returns, per
    call, where each value's characters were (in the ``lines`` text) -> where they are now."""
    rng = random.Random(f"prose|{seed}")
    agents = sorted({n.name for n in trace.nodes if n.kind == "call"})
    frame = {a: FRAMES[rng.randrange(len(FRAMES))] for a in agents}
    pick = {a: rng.randrange(2) for a in agents}
    moved: dict[int, dict[tuple[int, int], tuple[int, int]]] = {}
    for node in trace.nodes:
        if node.kind != "call":
            continue
        out, where, at, to = [], {}, 0, 0  # at / to: where the line / its sentence starts
        for line in node.text.split("\n"):
            key, value = line.split(": ", 1)
            before, after = frame[node.name].format(alias=_alias(key, pick[node.name] + len(key)),
                                                    value="\0").split("\0")
            where[(at + len(key) + 2, at + len(line))] = (to + len(before), to + len(before) + len(value))
            out.append(before + value + after)
            at, to = at + len(line) + 1, to + len(out[-1]) + 1
        node.text = "\n".join(out)
        node.messages[0]["content"] += " Write one sentence per fact, in your own words."
        moved[node.id] = where
    for node in trace.nodes:  # the user messages hold the sources' new texts
        if node.kind == "call":
            node.messages[1]["content"], node.spans = join_blocks([source_block(trace, s.source) for s in node.spans], 1)
    return moved
