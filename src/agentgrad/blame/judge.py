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

Every question asks for one JSON object whose shape is passed with the request as an output
schema (:class:`~agentgrad.core.model.OutputSchema`): the verdict ``{"agent", "step", "reason"}``
(the agent one of the log's, the step one of its numbers), ``{"answer": "YES" | "NO", "reason"}``
or ``{"half": "LOWER" | "UPPER", "reason"}``. A backend that constrains decoding (hf, llama.cpp and
hosted servers) can only reply in that shape; a reply that still does not parse (a server without
structured output, a reply cut at the token limit, or llama-cpp-python 0.3.36 letting a raw newline
into the reason and stopping inside it) is asked once more, afresh and for the verdict alone: the bad
reply is not shown (SmolLM2 shown its own reply repeats it word for word) and the reason, which no
figure reads, is left out of the shape; a second bad reply is a
:class:`~agentgrad.errors.JudgeReplyError` that quotes it. The judge counts replies
decoded without the schema (``unconstrained``), so a table can say what its figures rest on.
"""

from __future__ import annotations

from typing import Any

from agentgrad.blame.backward import VerbalLoss
from agentgrad.core.model import GenerationSettings, OutputSchema
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError, JudgeReplyError, OutputSchemaError

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


REASON_CHARS = 200  # a one-sentence reason; fewer where the judge's token budget is small


def _shape(properties: dict[str, Any], name: str) -> OutputSchema:
    return OutputSchema(name=name, json_schema={"type": "object", "properties": properties,
                                                "required": list(properties), "additionalProperties": False})


class Judge:
    """Asks a model about an episode's log; counts its requests.

    Args:
        model: the judge model (any backend).
        max_new_tokens: its token budget per reply (the reason is shortened to fit it).
    """

    def __init__(self, model: Any, max_new_tokens: int = 256):
        self.model, self.requests = model, 0
        self.unparsed = 0  # questions whose two replies both failed to parse
        self.reasked = 0  # questions asked a second time after a reply that did not parse
        self.unconstrained = 0  # replies decoded without the output schema (the backend could not constrain)
        self.last_reply = ""
        self.named_agent: str | None = None  # the agent the last all-at-once answer named, if one of the log's
        self.settings = GenerationSettings(temperature=0.0, max_new_tokens=max_new_tokens)
        # the fixed part of a verdict is about 30 tokens, and a token holds at least one character: a
        # reason of this many characters always fits the budget
        self.reason_chars = max(0, min(REASON_CHARS, max_new_tokens - 48))

    def reason(self) -> dict[str, Any]:
        return {"type": "string", "maxLength": self.reason_chars}

    def ask(self, question: str, fields: dict[str, Any], shown: dict[str, str], name: str) -> dict[str, Any]:
        """The verdict on ``question``: a JSON object of ``fields`` (their schemas; ``shown``: how the
        format line describes each) and a one-sentence reason, decoded under that shape. A reply that
        does not parse is asked again, afresh, for the fields alone (module docstring)."""
        why, fmt = "", ""
        for attempt in range(2):
            with_reason = attempt == 0
            fmt = "{" + ", ".join(f'"{k}": {v}' for k, v in shown.items()) + \
                  (', "reason": "<one sentence>"}' if with_reason else "}")
            schema = _shape(fields | ({"reason": self.reason()} if with_reason else {}), name)
            note = "\n\nAn earlier reply did not follow the format." if attempt else ""
            messages = [{"role": "system", "content": _SYSTEM},
                        {"role": "user", "content": f"{question}{note} Answer with {'exactly ' if attempt else ''}"
                                                        f"one JSON object: {fmt}"}]
            self.requests += 1
            gen = self.model.generate(messages, None, self.settings.with_output(schema))
            reply = gen.text
            self.last_reply = reply
            self.unconstrained += gen.constrained is not True
            try:
                return schema.parse(reply)
            except OutputSchemaError as e:
                why = str(e)
            if attempt == 0:
                self.reasked += 1
        self.unparsed += 1
        raise JudgeReplyError(f"the judge's reply does not parse (expected {fmt}): {why}")


def _is_the_mistake(judge: Judge, trace: Trace, steps: list[int], i: int, failure: str) -> bool:
    """Step-by-step's question about step ``i`` (1-based), shown the log up to it."""
    said = judge.ask(f"{render_log(trace, steps, i)}\n\n{failure}\n\nIs step {i} the decisive mistake (its output "
                     f"is wrong, and the steps before it were right)?",
                     {"answer": {"enum": ["YES", "NO"]}}, {"answer": '"YES or NO"'}, "step_verdict")
    return said["answer"] == "YES"


def judge_blame(judge: Judge, trace: Trace, loss: VerbalLoss, protocol: str) -> list[tuple[int, float]]:
    """The judged ranking of ``(node, score)`` for the failure ``loss`` describes."""
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown judge protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    steps = steps_of(trace, loss.targets[0])
    if not steps:
        return []
    failure = f"WHAT WENT WRONG: {loss.text}"
    if protocol == "all_at_once":
        agents = sorted({trace.nodes[n].name for n in steps})
        said = judge.ask(f"{render_log(trace, steps)}\n\n{failure}\n\nWhich agent made the decisive mistake, and "
                         f"at which step?",
                         {"agent": {"enum": agents}, "step": {"enum": list(range(1, len(steps) + 1))}},
                         {"agent": f'"<one of: {", ".join(agents)}>"', "step": f"<a step number, 1 to {len(steps)}>"},
                         "verdict")
        judge.named_agent = said["agent"]
        return [(steps[said["step"] - 1], 1.0)]
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
        said = judge.ask(f"{render_log(trace, steps)}\n\n{failure}\n\nThe decisive mistake is in steps {lo} to "
                         f"{hi}. Is it in the lower half (steps {lo} to {mid}) or the upper half (steps {mid + 1} to "
                         f"{hi})?", {"half": {"enum": ["LOWER", "UPPER"]}}, {"half": '"LOWER or UPPER"'}, "half_verdict")
        lo, hi = (lo, mid) if said["half"] == "LOWER" else (mid + 1, hi)
    return [(steps[lo - 1], 1.0)]
