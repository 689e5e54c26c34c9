"""LLM-judge blame on any backend: all-at-once, step-by-step and binary search.

The three protocols of the Who&When study (Zhang et al., "Which Agent Causes Task Failures and
When?", ICML 2025), with prompts in our own words. The judge reads the episode as a numbered log
(every call and tool result upstream of the failing output, in the order they happened), plus
the task and the verbal loss, and names the step where the decisive mistake was made:

- ``all_at_once``: the whole log in one request; the judge names the agent and the step (the agent it
  names is blamed when it is one of the log's, else the agent of the step);
- ``step_by_step``: one request per step, in order, each showing the log up to that step: "is this
  step the decisive mistake?"; the first yes is blamed (none: the last step);
- ``binary_search``: the judge is shown the log and a range of steps split in two halves and says
  which half holds the decisive mistake, until one step is left (about log2(n) requests);
- ``hybrid`` (the study's Section 4.7): all-at-once names the agent, then step-by-step over that
  agent's own steps only; the first yes is blamed (none: the step all-at-once named).

A reply that does not parse is asked once more with a reminder of the format; a second bad reply
is a :class:`~agentgrad.errors.ModelError` that quotes it.
"""

from __future__ import annotations

import re
from typing import Any

from agentgrad.blame.backward import VerbalLoss
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError, JudgeReplyError, ModelError

PROTOCOLS = ("all_at_once", "step_by_step", "binary_search", "hybrid")

_SYSTEM = ("You audit the log of a team of AI agents that failed at a task. Find the step where the decisive "
           "mistake was made: the earliest step whose output is wrong and makes the final answer wrong. A tool "
           "result can be that step. Follow the requested answer format exactly.")


def make_judge(spec: str) -> Any:
    """A judge model from ``BACKEND:VALUE`` (``openai:MODEL@URL``, ``openai:MODEL``, ``hf:PATH``, a folder)."""
    from agentgrad.core.config import model_spec_from_value
    from agentgrad.models.registry import create_model

    if not spec.strip():
        raise ConfigError("--judge needs a model, e.g. openai:gpt-4o-mini@http://localhost:8000/v1")
    ms = model_spec_from_value(spec)
    model = create_model("judge", ms.backend, **ms.options())
    getattr(model, "check", lambda: None)()  # a missing key fails here, before anything is written
    return model


def steps_of(trace: Trace, target: int) -> list[int]:
    """The steps a judge reads: the calls and tool results upstream of ``target``, in trace order."""
    return trace.upstream(target)


def render_log(trace: Trace, steps: list[int], upto: int | None = None) -> str:
    """The task input(s) and the numbered steps (1-based), up to step ``upto`` (1-based, inclusive)."""
    inputs = [n for n in trace.nodes if n.kind == "input"]
    lines = ["TASK:"] + [n.text for n in inputs] + ["", "LOG:"]
    for i, n in enumerate(steps[: upto or len(steps)], 1):
        node = trace.nodes[n]
        what = f"agent {node.name}" if node.kind == "call" else f"tool result {node.name}"
        lines.append(f"--- step {i}: {what} ---\n{node.text}")
    return "\n".join(lines)


class Judge:
    """Asks a model about an episode's log; counts its requests."""

    def __init__(self, model: Any, max_new_tokens: int = 256):
        from agentgrad.core.model import GenerationSettings

        self.model, self.requests = model, 0
        self.unparsed = 0  # questions whose two replies both failed to parse
        self.last_reply = ""
        self.named_agent: str | None = None  # the agent the last all-at-once answer named, if one of the log's
        self.settings = GenerationSettings(temperature=0.0, max_new_tokens=max_new_tokens)

    def ask(self, prompt: str, parse: Any, fmt: str) -> Any:
        messages = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": prompt}]
        for attempt in range(2):
            self.requests += 1
            reply = self.model.generate(messages, None, self.settings).text
            self.last_reply = reply
            value = parse(reply)
            if value is not None:
                return value
            messages = messages + [{"role": "assistant", "content": reply},
                                   {"role": "user", "content": f"That reply does not follow the format. Answer "
                                                               f"with exactly: {fmt}"}]
        self.unparsed += 1
        raise JudgeReplyError(f"the judge's reply does not parse (expected {fmt}): {reply.strip()[:160]!r}")


def _parse_step(n: int):
    def parse(reply: str) -> int | None:
        m = _STEP_NUMBER.search(reply)
        return int(m.group(1)) if m and 1 <= int(m.group(1)) <= n else None
    return parse


# Patterns without two whitespace runs side by side: "STEP\s*:?\s*(\d+)" and a lazy agent name followed by
# "\s+STEP" backtrack in quadratic time on a reply with a long run of spaces (6 s for 20,000).
_STEP_NUMBER = re.compile(r"STEP\s*(?::\s*)?(\d+)", re.I)
_AGENT = re.compile(r"AGENT\s*:(\s*)([^\n,;]*)", re.I)
_STEP_WORD = re.compile(r"\bSTEP\b", re.I)


def _named_agent(reply: str, agents: set[str]) -> str | None:
    """The agent after the first "AGENT:" (up to a line end, comma, semicolon or "[and] STEP"), if one of
    ``agents`` (case-insensitive)."""
    for m in _AGENT.finditer(reply):
        said = m.group(2)
        if not said and not m.group(1).replace("\n", ""):
            continue  # "AGENT:" with nothing after it on its line: a later one may name the agent
        for s in _STEP_WORD.finditer(said):
            if s.start() > 0 and said[s.start() - 1].isspace():
                said = said[: s.start()].rstrip()
                if len(said) > 3 and said.lower().endswith("and") and said[-4].isspace():
                    said = said[:-3]
                break
        said = said.strip(" \t*`'\".").lower()  # also "**AGENT:** name" (markdown bold)
        return next((a for a in agents if a.lower() == said), None)
    return None


def _parse_word(words: tuple[str, ...]):
    def parse(reply: str) -> str | None:
        found = [w for w in words if re.search(rf"\b{w}\b", reply, re.I)]
        return found[0].upper() if len(found) == 1 else None
    return parse


def _is_the_mistake(judge: Judge, trace: Trace, steps: list[int], i: int, failure: str) -> bool:
    """Step-by-step's question about step ``i`` (1-based), shown the log up to it."""
    fmt = "YES or NO"
    return judge.ask(f"{render_log(trace, steps, i)}\n\n{failure}\n\nIs step {i} the decisive mistake (its output "
                     f"is wrong, and the steps before it were right)? Answer {fmt}, then one sentence of reason.",
                     _parse_word(("yes", "no")), fmt) == "YES"


def judge_blame(judge: Judge, trace: Trace, loss: VerbalLoss, protocol: str) -> list[tuple[int, float]]:
    """The judged ranking of ``(node, score)`` for the failure ``loss`` describes."""
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown judge protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    steps = steps_of(trace, loss.targets[0])
    if not steps:
        return []
    failure = f"WHAT WENT WRONG: {loss.text}"
    if protocol == "all_at_once":
        fmt = "AGENT: <name> and STEP: <number>"
        i = judge.ask(f"{render_log(trace, steps)}\n\n{failure}\n\nWhich agent made the decisive mistake, and at "
                      f"which step? Answer with {fmt}, then one sentence of reason.", _parse_step(len(steps)), fmt)
        judge.named_agent = _named_agent(judge.last_reply, {trace.nodes[n].name for n in steps})
        return [(steps[i - 1], 1.0)]
    if protocol == "hybrid":
        (named, _), = judge_blame(judge, trace, loss, "all_at_once")
        agent = judge.named_agent or trace.nodes[named].name
        own = [i for i, n in enumerate(steps, 1) if trace.nodes[n].kind == "call" and trace.nodes[n].name == agent]
        found = next((i for i in own if _is_the_mistake(judge, trace, steps, i, failure)), None)
        return [(steps[found - 1] if found else named, 1.0)]
    if protocol == "step_by_step":
        found = next((i for i in range(1, len(steps) + 1) if _is_the_mistake(judge, trace, steps, i, failure)), None)
        return [(steps[(found or len(steps)) - 1], 1.0)]
    lo, hi = 1, len(steps)
    while lo < hi:
        mid = (lo + hi) // 2
        fmt = "LOWER or UPPER"
        said = judge.ask(f"{render_log(trace, steps)}\n\n{failure}\n\nThe decisive mistake is in steps {lo} to "
                         f"{hi}. Is it in the lower half (steps {lo} to {mid}) or the upper half (steps {mid + 1} to "
                         f"{hi})? Answer {fmt}, then one sentence of reason.", _parse_word(("lower", "upper")), fmt)
        lo, hi = (lo, mid) if said == "LOWER" else (mid + 1, hi)
    return [(steps[lo - 1], 1.0)]
