"""The paper's MultiWOZ system (manager, five domain workers, responder), the single-agent baseline, gold.

A dialogue is one episode. Each user turn (with the gold history before it, as in the standard
turn-level evaluation) runs:

- multi: the **manager** reads the history, the user's words and the state, and names the domains
  of the turn (``DOMAINS: hotel, taxi``) with a note; each named **domain worker** holds only its
  domain's query and booking tools, whose arguments are the dialogue state; the **responder**
  writes the reply from the history, the manager's note and the workers' findings;
- single: one agent with every tool writes the reply;
- gold: the annotated state and reply, unchanged (to validate the data and the evaluator).

Every slot value of the state remembers the call that wrote it (``StateTracker``), so a loss
can attach to exactly that call. Prompts are in ``prompts/{multi,single}.yaml``.
"""

from __future__ import annotations

import contextvars
import zlib
from dataclasses import dataclass, field
from typing import Any

from agentgrad.benchmarks.common import build_agents, named_line, require_agents
from agentgrad.benchmarks.multiwoz.data import DOMAINS, Dialogue, Turn, normalize_value
from agentgrad.benchmarks.multiwoz.db import VenueDB
from agentgrad.benchmarks.multiwoz.evaluator import delexicalize
from agentgrad.benchmarks.multiwoz.tools import DOMAIN_TOOLS, SPECS, Bookings, make_tools, state_updates
from agentgrad.core.config import SystemConfig
from agentgrad.core.agent import Output, tool_report
from agentgrad.core.system import System
from agentgrad.core.text import Text
from agentgrad.core.tools import Tool
from agentgrad.core.trace import Trace, current_trace
from agentgrad.errors import ConfigError, ModelError
from agentgrad.core.model import LanguageModel

_BOOKINGS: contextvars.ContextVar[Bookings] = contextvars.ContextVar("agentgrad_multiwoz_bookings")
WORKERS = {d: f"{d}_worker" for d in DOMAINS}


def _bookings() -> Bookings:
    return _BOOKINGS.get()


class StateTracker:
    """The accumulated dialogue state; every value remembers the call node that wrote it."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.sources: dict[str, int] = {}

    def update(self, trace: Trace, calls: list[int]) -> None:
        """Apply the tool calls of ``calls`` (call node ids) in order."""
        for cid in calls:
            for tc in trace.nodes[cid].tool_calls:
                for slot, value in state_updates(tc.name, tc.arguments).items():
                    v = normalize_value(slot, value)
                    if v is None:
                        self.values.pop(slot, None)
                        self.sources.pop(slot, None)
                    else:
                        self.values[slot], self.sources[slot] = v, cid

    def text(self, domain: str | None = None) -> Text:
        """The state as ``slot = value`` lines, each value sourced from the call that wrote it."""
        items = [(s, v) for s, v in sorted(self.values.items()) if domain is None or s.startswith(domain + "-")]
        if not items:
            return Text("(empty)")
        return Text.join("\n", [Text.format("{0} = {1}", s, Text(v, source=self.sources[s])) for s, v in items])


@dataclass
class TurnResult:
    turn: int
    state: dict[str, str]
    reply: str
    response: str  # delexicalised
    reply_node: int | None
    calls: dict[str, list[int]] = field(default_factory=dict)  # agent -> call node ids of this turn
    sources: dict[str, int] = field(default_factory=dict)  # slot -> call node that wrote it
    user_node: int | None = None

    def prediction(self) -> dict[str, Any]:
        return {"turn": self.turn, "state": self.state, "reply": self.reply, "response": self.response}


@dataclass
class DialogueOutcome:
    dialogue: Dialogue
    turns: list[TurnResult]
    queries: list[dict[str, Any]]
    bookings: list[dict[str, Any]]
    error: str | None = None

    def __str__(self) -> str:
        return self.turns[-1].reply if self.turns else ""


class MultiWOZSystem(System):
    """The dialogue loop shared by the systems; subclasses define one turn.

    Args:
        cfg: agents, prompts and models (``prompts/*.yaml``); unused by ``gold``.
        models: the models of ``cfg``.
        db: the venue database.
        seed: seeds the booking references (with the dialogue id).
    """

    kind = "base"
    required: list[str] = []

    def __init__(self, cfg: SystemConfig | None, models: dict[str, LanguageModel], db: VenueDB, seed: int = 0):
        self.cfg = cfg
        self.name = f"multiwoz-{self.kind}"
        self.db = db
        self.seed = seed
        if cfg is not None:
            require_agents(cfg, self.required, f"the {self.kind} MultiWOZ system")
            self.agents_ = build_agents(cfg, models, self.tools_for)

    def tools_for(self, agent: str) -> list[Tool]:
        return []

    def turn(self, gold: Turn, user: Text, history: Text, tracker: StateTracker, result: TurnResult) -> Output | None:
        """Answer one user turn: update ``tracker`` and return the reply (``gold`` is for the gold system only)."""
        raise NotImplementedError

    def response(self, gold: Turn, result: TurnResult, bookings: Bookings) -> str:
        """The delexicalised reply: values the tools returned and the database's venue names as placeholders."""
        values = {k: set(v) for k, v in bookings.seen.items()}
        values.setdefault("name", set()).update(self.db.distinct_names)
        return delexicalize(result.reply, values)

    def forward(self, dialogue: Dialogue) -> DialogueOutcome:
        if not isinstance(dialogue, Dialogue):
            raise ConfigError("a MultiWOZ example needs a 'dialogue' field holding a Dialogue")
        trace = current_trace()
        bookings = Bookings(self.db, seed=zlib.crc32(f"{self.seed}:{dialogue.id}".encode()))
        token = _BOOKINGS.set(bookings)
        tracker = StateTracker()
        lines: list[Text] = []
        results: list[TurnResult] = []
        error = None
        try:
            for i, t in enumerate(dialogue.turns):
                user = trace.input(t.user, name="user", turn=i)
                history = Text.join("\n", lines) if lines else Text("(start of the dialogue)")
                result = TurnResult(i, {}, "", "", None, user_node=user.sources[0])
                if error is None:
                    try:
                        reply = self.turn(t, user, history, tracker, result)
                    except ModelError as e:  # the dialogue is still scored; the remaining turns get no reply
                        error, reply = str(e), None
                    if reply is not None:
                        result.reply, result.reply_node = str(reply), reply.node
                result.state, result.sources = dict(tracker.values), dict(tracker.sources)
                result.response = self.response(t, result, bookings)
                results.append(result)
                gold_reply = trace.input(t.system, name="system", turn=i)
                lines += [Text.format("User: {0}", user), Text.format("Assistant: {0}", gold_reply)]
        finally:
            _BOOKINGS.reset(token)
        trace.meta.update(dialogue=dialogue.id, labels=dialogue.labels)
        if error:
            trace.meta["error"] = error
        return DialogueOutcome(dialogue, results, list(bookings.queries), list(bookings.made), error)


class GoldSystem(MultiWOZSystem):
    """Replays the annotated states and replies."""

    kind = "gold"

    def __init__(self, cfg: SystemConfig | None, models: dict[str, LanguageModel], db: VenueDB, seed: int = 0):
        super().__init__(None, {}, db, seed)

    def turn(self, gold: Turn, user: Text, history: Text, tracker: StateTracker, result: TurnResult) -> None:
        tracker.values, tracker.sources = dict(gold.state), {}
        result.reply = gold.system

    def response(self, gold: Turn, result: TurnResult, bookings: Bookings) -> str:
        """Delexicalised by the annotated spans first, then by venue names and patterns."""
        return delexicalize(gold.system, {"name": self.db.distinct_names}, gold.system_spans)


class MultiAgentWOZ(MultiWOZSystem):
    """Manager -> domain workers (their own tools) -> responder, once per user turn."""

    kind = "multi"
    required = ["manager", *WORKERS.values(), "responder"]

    def tools_for(self, agent: str) -> list[Tool]:
        domain = next((d for d, w in WORKERS.items() if w == agent), None)
        return make_tools(DOMAIN_TOOLS[domain], _bookings) if domain else []

    @staticmethod
    def domains(text: str) -> list[str]:
        """The domains on the manager's ``DOMAINS:`` line, in order (unknown names ignored)."""
        return named_line(text, "DOMAIN", DOMAINS)

    def turn(self, gold: Turn, user: Text, history: Text, tracker: StateTracker, result: TurnResult) -> Output:
        a = self.agents_
        plan = a["manager"](history=history, user=user, state=tracker.text())
        trace = plan.trace
        result.calls["manager"] = list(plan.calls)
        routed = self.domains(str(plan))
        trace.nodes[plan.node].meta["domains"] = routed
        findings: list[Text] = []
        for d in routed:
            out = a[WORKERS[d]](history=history, user=user, instruction=plan, state=tracker.text(d))
            result.calls[WORKERS[d]] = list(out.calls)
            tracker.update(trace, out.calls)
            findings.append(Text.format("[{0}] {1}", d, tool_report(out)))
        reply = a["responder"](history=history, user=user, instruction=plan,
                               findings=Text.join("\n", findings) if findings else Text("(no findings)"))
        result.calls["responder"] = list(reply.calls)
        return reply


class SingleAgentWOZ(MultiWOZSystem):
    """One agent with every tool, once per user turn."""

    kind = "single"
    required = ["agent"]

    def tools_for(self, agent: str) -> list[Tool]:
        return make_tools(list(SPECS), _bookings)

    def turn(self, gold: Turn, user: Text, history: Text, tracker: StateTracker, result: TurnResult) -> Output:
        out = self.agents_["agent"](history=history, user=user, state=tracker.text())
        result.calls["agent"] = list(out.calls)
        tracker.update(out.trace, out.calls)
        return out


SYSTEMS: dict[str, type[MultiWOZSystem]] = {"multi": MultiAgentWOZ, "single": SingleAgentWOZ, "gold": GoldSystem}


def build_system(kind: str, cfg: SystemConfig | None, models: dict[str, LanguageModel], db: VenueDB,
                 seed: int = 0) -> MultiWOZSystem:
    if kind not in SYSTEMS:
        raise ConfigError(f"unknown MultiWOZ system {kind!r}; valid: {', '.join(SYSTEMS)}")
    return SYSTEMS[kind](cfg, models, db, seed)
