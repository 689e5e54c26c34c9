"""The walk rules: what a backward walk from a loss blames, each registered with its parameters.

A rule is walked by :func:`agentgrad.blame.walk.walk` with the parameters declared here; a
parameter tuned on a benchmark says so (:attr:`WalkRule.tuned`: the benchmark and the seed it was
chosen on), and nothing tuned lives in the walk itself. ``reads_facts``: the rule follows the text
the loss names as wrong, and reads it with a fact reader (:mod:`agentgrad.blame.facts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class WalkRule:
    """One rule: its name, what it blames, its parameters and where any of them was tuned."""

    name: str
    doc: str
    params: dict[str, Any] = field(default_factory=dict)
    tuned: dict[str, str] = field(default_factory=dict)  # parameter -> where it was chosen (benchmark, seed)
    reads_facts: bool = False


# ``origin``: followed text whose tokens average below p = e^-5 (1/148) given the step's inputs was
# invented there, not rewritten
_INVENTED = ("the planted-fault benchmark in prose, development seed 10: chosen from 3, 4, ..., 10 nats by "
             "the mean agent top-1 over the copied, rewritten and decoy faults (docs/blame-benchmarks.md)")

WALK_RULES: dict[str, WalkRule] = {r.name: r for r in (
    WalkRule("earliest", "walk to the roots; blame the earliest call or tool reached (the obvious rule, which "
                         "blames the first agent of every chain whatever happened)"),
    WalkRule("path", "every call or tool reached, tied (the paper's update rule)"),
    WalkRule("maxw", "the node whose edge to its successor has the largest weight"),
    WalkRule("direct", "no walk: the loss call's own sources, ranked by their weight at that call (one backward "
                       "pass); with a signed weight under contrast, by how far each pushed the produced answer "
                       "above the expected one"),
    WalkRule("stop", "walk back only while the chosen source carries the wrong text (its top token inside an "
                     "occurrence, or that occurrence's cue: its key); blame the first node whose source does "
                     "not; a tool or input that carries it is blamed itself; without loss spans, path",
             reads_facts=True),
    WalkRule("carry", "stop, following the heaviest source among those that carry the wrong text; it ends "
                      "where none does", reads_facts=True),
    WalkRule("follow", "follow the wrong text to the roots, re-targeting where it changed (on the unit of "
                       "text the gradient peaks in); blame the earliest change that the call's inputs do not "
                       "predict (mean -log p above ln 2), else the tool at the root", reads_facts=True),
    WalkRule("origin", "follow, but a change whose text is invented there (mean -log p above invented "
                       "nats) ends the walk and is blamed", params={"invented": 5.0},
             tuned={"invented": _INVENTED}, reads_facts=True),
    WalkRule("blend", "origin with the string test added: a source that holds the text verbatim carries it; "
                      "several holders (or sources stating the wrong value's key) are each followed, at most "
                      "forks sub-walks, and the heaviest whose walk meets an invention is taken",
             params={"invented": 5.0, "forks": 8}, tuned={"invented": _INVENTED}, reads_facts=True),
)}
RULES = tuple(WALK_RULES)
