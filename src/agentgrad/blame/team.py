"""The team-level verdict of a set of failed traces: which agent fails most often, and how sure is that.

One :class:`TraceVerdict` per trace (blamed, succeeded, malformed, unblamed or error, with its reason);
for a blamed trace one :class:`~agentgrad.blame.verdict.Verdict` per method: the top entry, the agents
whose prompts to repair, the two best scores and the agent sequences of the blamed paths. :func:`team_verdict`
turns the blamed traces into, per method,

- **shares**: each agent's share of the failures blamed on it. A failure is blamed on the agents
  to repair (a tool result's caller; the node's own agent where no prompt is named, e.g. an input
  ``user``); a failure whose method names several splits its unit equally among them, so the
  shares of one method sum to 1;
- **intervals**: each share's Wilson score interval (:func:`agentgrad.core.stats.wilson`, ``level``
  95% by default) over the n traces the method blamed. A percentile bootstrap over the traces was the
  interval before 2026-12-06: over few traces that agree it is [1, 1] whatever they say (2 of 2 traces
  gave [1.00, 1.00]; Wilson gives [0.34, 1.00]), so it could not show how few traces a verdict rests on;
- the **trajectories** most often walked (agent sequences, each counted once per trace);
- the **repair order**: agents by share, then by the interval's lower bound;
- the **agreement**: on how many blamed traces the confidence signal's two methods name the same
  agent (:mod:`agentgrad.blame.confidence`, whose measured meaning comes with it).

Pure functions of the records: nothing here reads or writes a file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Iterable

from agentgrad.blame.backward import VerbalLoss
from agentgrad.blame.confidence import Confidence, confidence
from agentgrad.blame.verdict import Verdict
from agentgrad.core.stats import wilson
from agentgrad.core.trace import Trace

if TYPE_CHECKING:
    from agentgrad.attribution.result import Attribution

STATUSES = ("blamed", "succeeded", "malformed", "unblamed", "error")  # error: a bug of agentgrad's on that trace
NOBODY = "(nothing)"  # the share of failures for which a method named no node at all


@dataclass
class TraceVerdict:
    """One trace of the set: its status and, when blamed, every method's verdict.

    ``reason`` says why a trace was not blamed (malformed: what is broken; unblamed: what it lacks;
    succeeded: how the answer matched); ``note`` says what to know about a blamed one (e.g. that no
    differing text of the final output could be marked as wrong)."""

    trace: str
    status: str
    methods: dict[str, Verdict] = field(default_factory=dict)
    reason: str = ""
    note: str = ""
    source: str = ""  # the file it was read from
    file: str = ""  # where the run directory keeps a blamed trace (traces.jsonl) ...
    offset: int | None = None  # ... and the byte offset of its line there
    loss: str | None = None
    wrong: str | None = None
    expected: str | None = None
    target: int | None = None  # the node the loss attaches to (the final answer)
    seconds: float = 0.0
    confidence: dict[str, Any] | None = None  # blame/confidence.py's signal of a blamed trace (no figures)
    # kept in memory by the blame of one trace, never written: the trace, its loss, what the gradient
    # methods shared (None where no scorer ran), the scorer, the records of its file not imported
    data: Trace | None = field(default=None, repr=False, compare=False)
    verbal: VerbalLoss | None = field(default=None, repr=False, compare=False)
    attribution: Attribution | None = field(default=None, repr=False, compare=False)
    scorer: Any = field(default=None, repr=False, compare=False)
    broken: list[str] = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"trace verdict status {self.status!r}; valid: {', '.join(STATUSES)}")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"trace": self.trace, "status": self.status, "source": self.source}
        for k in ("reason", "note", "file", "loss", "wrong", "expected"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        for k in ("offset", "target"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.methods:
            d["methods"] = {m: v.to_dict() for m, v in self.methods.items()}
        if self.confidence:
            d["confidence"] = self.confidence
        d["seconds"] = self.seconds
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TraceVerdict:
        return cls(trace=str(d["trace"]), status=str(d["status"]), reason=str(d.get("reason") or ""),
                   note=str(d.get("note") or ""), source=str(d.get("source") or ""),
                   file=str(d.get("file") or ""), loss=d.get("loss"),
                   wrong=d.get("wrong"), expected=d.get("expected"),
                   offset=d.get("offset"), target=d.get("target"), seconds=float(d.get("seconds") or 0.0),
                   confidence=d.get("confidence"),
                   methods={m: Verdict.from_dict(v, m) for m, v in (d.get("methods") or {}).items()})


@dataclass
class AgentShare:
    """One agent's share of one method's blamed failures, with its Wilson interval."""

    agent: str
    failures: float  # the failures blamed on it (a tie split counts a fraction)
    share: float
    low: float
    high: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MethodTeam:
    """One method over the set: its blamed traces and every agent's share, largest first."""

    method: str
    traces: int
    shares: list[AgentShare]

    def share(self, agent: str) -> AgentShare | None:
        return next((s for s in self.shares if s.agent == agent), None)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "traces": self.traces, "shares": [s.to_dict() for s in self.shares]}


@dataclass
class TrajectoryCount:
    agents: list[str]
    traces: int  # the blamed traces on which the method walked this agent sequence

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TeamVerdict:
    """The verdict of a set: counts per status, per method the shares, the trajectories, the repair order."""

    counts: dict[str, int]
    methods: dict[str, MethodTeam]
    primary: str | None  # the method the trajectories and the repair order come from
    trajectories: list[TrajectoryCount]
    repair: list[str]
    level: float = 0.95
    agreement: Agreement | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"counts": self.counts, "primary": self.primary, "repair": self.repair,
                "agreement": self.agreement.to_dict() if self.agreement else None,
                "methods": {m: t.to_dict() for m, t in self.methods.items()},
                "trajectories": [t.to_dict() for t in self.trajectories],
                "interval": {"kind": "wilson", "level": self.level}}


def trace_confidence(methods: dict[str, Verdict]) -> Confidence:
    """The confidence signal of one blamed trace (:func:`agentgrad.blame.confidence.confidence` over
    each method's top agent)."""
    return confidence({m: [v.agent] if v.agent else [] for m, v in methods.items()})


@dataclass
class Agreement:
    """How often the confidence signal's two methods agreed over the blamed traces, with what that was
    measured to mean (the signal of the first blamed trace that has one)."""

    signal: str
    method: str | None
    partner: str | None
    agree: int
    disagree: int
    meaning: dict[bool, str] = field(default_factory=dict)  # value -> the measured meaning's sentence

    def to_dict(self) -> dict[str, Any]:
        return {"signal": self.signal, "method": self.method, "partner": self.partner, "agree": self.agree,
                "disagree": self.disagree, "meaning": {("agree" if k else "disagree"): v for k, v in self.meaning.items()}}


def agreement(traces: Iterable[TraceVerdict]) -> Agreement | None:
    """The agreement of the blamed traces' confidence signals (None where no trace has one)."""
    confs = [trace_confidence(t.methods) for t in traces if t.status == "blamed"]
    confs = [c for c in confs if c.value is not None]
    if not confs:
        return None
    first = confs[0]
    same = [c for c in confs if (c.signal, c.method, c.partner) == (first.signal, first.method, first.partner)]
    meaning = {c.value: c.meaning for c in same}
    return Agreement(first.signal, first.method, first.partner, sum(c.value is True for c in same),
                     sum(c.value is False for c in same), meaning)


def agent_weights(verdicts: list[Verdict]) -> list[dict[str, float]]:
    """Per verdict, the unit of its failure split over the agents it is blamed on (:data:`NOBODY` if none)."""
    out = []
    for v in verdicts:
        who = v.blamed_agents() or [NOBODY]
        out.append({a: 1 / len(who) for a in who})
    return out


def shares(verdicts: list[Verdict], level: float = 0.95, method: str = "") -> MethodTeam:
    """Every agent's share of ``verdicts`` (one per blamed trace) with its Wilson interval at ``level``."""
    n = len(verdicts)
    weights = agent_weights(verdicts)
    agents = list(dict.fromkeys(a for w in weights for a in w))
    z = NormalDist().inv_cdf(1 - (1 - level) / 2)
    out = []
    for a in agents:
        total = sum(w.get(a, 0.0) for w in weights)
        lo, hi = wilson(total, n, z)
        out.append(AgentShare(a, round(total, 6), total / n, lo, hi))
    out.sort(key=lambda s: (-s.share, -s.low, s.agent))
    return MethodTeam(method, n, out)


def common_trajectories(verdicts: Iterable[Verdict], top: int = 5) -> list[TrajectoryCount]:
    """The agent sequences walked most often, each counted once per trace; ties in first-seen order."""
    counts: dict[tuple[str, ...], int] = {}
    for v in verdicts:
        for t in dict.fromkeys(tuple(t) for t in v.paths if t):
            counts[t] = counts.get(t, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])  # stable: first seen first among equals
    return [TrajectoryCount(list(k), c) for k, c in ranked[:top]]


def repair_order(team: MethodTeam) -> list[str]:
    """The agents whose prompts to repair first: by share, then by the interval's lower bound
    (the share of a pseudo-agent such as :data:`NOBODY` names no prompt and is left out)."""
    return [s.agent for s in sorted(team.shares, key=lambda s: (-s.share, -s.low, s.agent)) if s.agent != NOBODY]


def team_verdict(traces: Iterable[TraceVerdict], methods: list[str] | None = None, primary: str | None = None,
                 level: float = 0.95, top: int = 5) -> TeamVerdict:
    """The team-level verdict of ``traces`` (see the module docstring).

    Args:
        methods: the methods to report, in order (default: every method of the blamed traces, in
            the order first seen).
        primary: the method whose trajectories and repair order are given (default: the first).
        level: the intervals' coverage (each method's over the traces it blamed).
        top: the most common trajectories kept.
    """
    traces = list(traces)
    counts = {s: 0 for s in STATUSES if s != "error"}  # error: counted only where there is one
    for t in traces:
        counts[t.status] = counts.get(t.status, 0) + 1
    blamed = [t for t in traces if t.status == "blamed"]
    names = methods or list(dict.fromkeys(m for t in blamed for m in t.methods))
    per: dict[str, MethodTeam] = {}
    for m in names:
        per[m] = shares([t.methods[m] for t in blamed if m in t.methods], level, m)
    main = primary if primary in per else (names[0] if names else None)
    trajectories = common_trajectories((t.methods[main] for t in blamed if main in t.methods), top) if main else []
    return TeamVerdict(counts, per, main, trajectories, repair_order(per[main]) if main else [], level,
                       agreement(blamed))


__all__ = ["AgentShare", "Agreement", "agreement", "trace_confidence", "MethodTeam", "NOBODY", "STATUSES", "TeamVerdict", "TraceVerdict",
           "TrajectoryCount", "common_trajectories", "repair_order",
           "shares", "team_verdict"]
