"""Prompt optimizers: an LLM that rewrites the blamed agents' prompts, and a deterministic baseline.

Both return new prompts for the blamed agents only. The LLM is asked for one JSON object
``{"prompts": {agent: prompt}}`` whose shape (the blamed agents only, each a non-empty string under
the length cap that keeps every protected span of its old prompt, in order) goes with the request
as an output schema (:func:`rewrite_schema`): a backend that constrains decoding can only answer in
it. The reply is still validated (it parses, names only blamed agents, leaves no prompt empty, keeps
protected spans verbatim, stays under the cap); a rejected reply is retried with the reason (one cut
by the token budget, with half the length), and after ``max_attempts`` the step is skipped (the
caller logs it) and the run goes on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentgrad.blame.backward import VerbalLoss, cut
from agentgrad.core.agent import Prompt
from agentgrad.errors import AgentgradError, OutputSchemaError, ServerUnreachableError
from agentgrad.core.model import GenerationSettings, LanguageModel, OutputSchema
from agentgrad.optim import prompts as T


class UpdateError(ValueError):
    """An optimizer reply that cannot be used; the message says what was wrong."""


@dataclass
class Failure:
    """One failed sample of a step, kept apart from the others: its loss and, for each agent on its
    trajectories, those trajectories as text and that agent's own outputs on them."""

    sample: str
    loss: VerbalLoss
    rendered: dict[str, str] = field(default_factory=dict)  # agent -> the trajectories through it, rendered
    outputs: dict[str, list[str]] = field(default_factory=dict)  # agent -> its outputs on those trajectories


def render_feedback(failures: list[Failure], blamed: list[str], max_chars: int = 6000) -> str:
    """The failures grouped by blamed agent: each agent's section holds only the trajectories it is on."""
    sections = []
    for agent in blamed:
        own = [f"Sample {f.sample}:\n{f.rendered[agent]}" for f in failures if agent in f.rendered]
        if own:
            sections.append(T.FAILURES_OF.format(agent=agent) + "\n" + "\n\n".join(own))
    return cut("\n\n".join(sections), max_chars)


@dataclass
class StepInput:
    """What an optimizer sees at one step."""

    prompts: dict[str, Prompt]  # every agent's current prompt
    tools: dict[str, list[str]]  # every agent's tool names
    blamed: list[str]  # the agents it may change
    feedback: str  # the failures rendered per blamed agent (render_feedback)
    failures: list[Failure] = field(default_factory=list)  # the step's failed samples, one each
    history: list[dict[str, Any]] = field(default_factory=list)
    pairs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # agent -> (output, target): target optimizer
    # agent -> per failing episode, (start, end, L1 of the gradient) of each token of its prompt
    # (the scorer's prompt_weights): what the edit optimizer reads
    prompt_scores: dict[str, list[list[tuple[int, int, float]]]] = field(default_factory=dict)


@dataclass
class StepResult:
    prompts: dict[str, str]  # new prompts (blamed agents only)
    attempts: int = 1
    errors: list[str] = field(default_factory=list)
    skipped: bool = False
    notes: list[str] = field(default_factory=list)  # what was changed and why, in words (logged with the step)
    unconstrained: int = 0  # LLM replies decoded without the output schema (a backend that could not constrain)


class Optimizer(Protocol):
    def step(self, inp: StepInput) -> StepResult: ...


@runtime_checkable
class TargetSource(Protocol):
    """An optimizer that learns from (output, target) pairs: the trainer asks it for targets along
    each failed episode's walked edges (target back-propagation, ``optim/targets.py``)."""

    def targets(self, trace: Any, parents: dict[int, list[int]], loss: Any) -> dict[int, str]: ...


def parse_reply(text: str, schema: OutputSchema | None = None) -> Any:
    """The JSON object in an LLM reply (code fences and prose around it are allowed), checked
    against ``schema`` when given; an :class:`UpdateError` saying what is wrong."""
    try:
        return (schema or OutputSchema(json_schema={})).parse(text)
    except OutputSchemaError as e:
        raise UpdateError(str(e)) from None


CHARS_PER_TOKEN = 1  # the worst case, not the typical 4.5 of English: a small model that degenerates repeats
# one-character tokens ("1.1.1.1", "12345678": SmolLM2 gives every digit its own token), and at 3 characters a
# token 21 of 151 rewrites in the ablation were cut by the budget inside the string and did not parse


def rewrite_schema(blamed: list[str], max_chars: int, max_new_tokens: int | None = None,
                   protected: Mapping[str, Sequence[str]] | None = None) -> OutputSchema:
    """The shape of an optimizer's reply: ``{"prompts": {agent: prompt}}``, every blamed agent (and no
    other) with a non-empty prompt of at most ``max_chars`` characters, and short enough that all of
    them fit ``max_new_tokens`` (a small model constrained to a string otherwise writes on until the
    budget cuts the reply, which then does not parse). ``protected``: an agent's spans its new prompt
    must keep verbatim, in this order (a ``pattern``; with the shape alone, SmolLM2 dropped one in 201 of
    244 replies of the ablation), the cap raised where the spans alone would not fit under it."""
    cap = max_chars
    if max_new_tokens is not None:  # about 16 tokens of JSON around each prompt
        cap = min(cap, max(1, CHARS_PER_TOKEN * (max_new_tokens - 8 - 16 * len(blamed)) // max(len(blamed), 1)))
    props = {}
    for a in blamed:
        spans = [p for p in (protected or {}).get(a, ()) if p]
        props[a] = {"type": "string", "minLength": 1, "maxLength": max(cap, sum(map(len, spans)) + len(spans))}
        if spans:
            props[a]["pattern"] = "^[\\s\\S]*" + "[\\s\\S]*".join(map(_literal, spans)) + "[\\s\\S]*$"
    return OutputSchema(name="rewrite", json_schema={
        "type": "object", "additionalProperties": False, "required": ["prompts"],
        "properties": {"prompts": {"type": "object", "properties": props,
                                   "required": list(blamed), "additionalProperties": False}}})


def _literal(text: str) -> str:
    """``text`` as a regular expression matching itself (only the metacharacters escaped: a space stays a
    space, which every regex dialect a server may use reads alike)."""
    return re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", text)


def protected_in_order(inp: "StepInput") -> dict[str, list[str]]:
    """Each blamed agent's protected spans, in the order they stand in its current prompt."""
    return {a: sorted(inp.prompts[a].protected, key=lambda s, t=inp.prompts[a].text: t.find(s)) for a in inp.blamed}


def validate_update(reply: Any, inp: StepInput, max_chars: int) -> dict[str, str]:
    """The new prompts of a parsed reply, or :class:`UpdateError` saying what is wrong."""
    if not isinstance(reply, dict) or not isinstance(reply.get("prompts"), dict):
        raise UpdateError('the reply must be an object {"prompts": {agent: prompt}}')
    new = reply["prompts"]
    unknown = [a for a in new if a not in inp.prompts]
    if unknown:
        raise UpdateError(f"names unknown agent(s) {', '.join(map(repr, unknown))}; known: {', '.join(inp.prompts)}")
    extra = [a for a in new if a not in inp.blamed]
    if extra:
        raise UpdateError(f"changes agent(s) {', '.join(extra)}, which were not blamed; only {', '.join(inp.blamed)}")
    out = {}
    for agent, text in new.items():
        if not isinstance(text, str) or not text.strip():
            raise UpdateError(f"the prompt of {agent!r} is empty")
        missing = inp.prompts[agent].missing_protected(text)
        if missing:
            raise UpdateError(f"the prompt of {agent!r} dropped protected text {missing[0]!r}")
        if len(text) > max_chars:
            raise UpdateError(f"the prompt of {agent!r} has {len(text):,} characters; the cap is {max_chars:,}")
        out[agent] = text
    return out


def render_history(history: list[dict[str, Any]]) -> str:
    if not history:
        return "(none yet)"
    return "\n".join(
        T.HISTORY_LINE.format(step=h["step"], agents=", ".join(h["agents"]) or "none", before=h.get("before"),
                              after=h.get("after"), verdict="kept" if h.get("accepted") else "rejected")
        for h in history
    )


class PromptOptimizer:
    """An LLM (any backend) that rewrites the blamed agents' prompts.

    Args:
        model: the optimizer LLM.
        max_attempts: replies tried per step before the step is skipped.
        max_chars: length cap of a new prompt.
        settings: decoding settings of the optimizer.
    """

    def __init__(self, model: LanguageModel, max_attempts: int = 3, max_chars: int = 8000,
                 settings: GenerationSettings | None = None):
        self.model = model
        self.max_attempts = max_attempts
        self.max_chars = max_chars
        self.settings = settings or GenerationSettings(max_new_tokens=4096)

    def messages(self, inp: StepInput) -> list[dict[str, Any]]:
        agents = "\n\n".join(
            T.AGENT_BLOCK.format(name=n, tools=", ".join(inp.tools.get(n, [])) or "none", prompt=p.text)
            for n, p in inp.prompts.items()
        )
        protected = "; ".join(repr(s) for a in inp.blamed for s in inp.prompts[a].protected) or "(none)"
        user = T.OPTIMIZER_USER.format(agents=agents, trajectories=inp.feedback, history=render_history(inp.history),
                                       blamed=", ".join(inp.blamed), protected=protected, max_chars=self.max_chars)
        return [{"role": "system", "content": T.OPTIMIZER_SYSTEM}, {"role": "user", "content": user}]

    def step(self, inp: StepInput) -> StepResult:
        return ask_for_prompts(self.model, self.messages(inp), inp, self.max_attempts, self.max_chars, self.settings)


def ask_for_prompts(model: LanguageModel, msgs: list[dict[str, Any]], inp: StepInput, max_attempts: int,
                    max_chars: int, settings: GenerationSettings) -> StepResult:
    """New prompts from an LLM, decoded under :func:`rewrite_schema`: its reply validated, a rejected
    one retried with the reason; after ``max_attempts`` (or a failure of the model) the step is
    skipped and the run goes on. A model server that cannot be reached stops the run instead."""
    errors: list[str] = []
    protected, budget = protected_in_order(inp), settings.max_new_tokens
    settings = settings.with_output(rewrite_schema(inp.blamed, max_chars, budget, protected))
    unconstrained = 0
    for attempt in range(1, max_attempts + 1):
        try:
            gen = model.generate(msgs, None, settings)
        except ServerUnreachableError:
            raise
        except AgentgradError as e:  # the optimizer model failed: skip the step, keep the run
            errors.append(f"optimizer model failed: {e}")
            break
        reply = gen.text
        unconstrained += gen.constrained is not True
        try:
            return StepResult(validate_update(parse_reply(reply), inp, max_chars), attempt, errors,
                              unconstrained=unconstrained)
        except UpdateError as e:
            errors.append(str(e))
            msgs = msgs + [{"role": "assistant", "content": reply},
                           {"role": "user", "content": T.OPTIMIZER_RETRY.format(error=e, blamed=", ".join(inp.blamed))}]
            if gen.finish_reason == "length" and budget:  # cut by the token budget inside the shape (characters
                budget //= 2  # of several tokens, escapes): ask for half the length
                settings = settings.with_output(rewrite_schema(inp.blamed, max_chars, budget, protected))
    return StepResult({}, len(errors), errors, skipped=True, unconstrained=unconstrained)


def add_warning(prompt: str, bullets: list[str]) -> str:
    """``prompt`` with ``bullets`` added to its "## Warning" section (created if absent), no duplicates."""
    lines = prompt.rstrip("\n").split("\n")
    if T.WARNING_HEADER not in lines:
        lines += ["", T.WARNING_HEADER]
    at = lines.index(T.WARNING_HEADER) + 1
    while at < len(lines) and lines[at].startswith("- "):
        at += 1
    existing = set(lines)
    new = [T.WARNING_BULLET.format(rule=b) for b in bullets]
    new = [b for b in dict.fromkeys(new) if b not in existing]
    return "\n".join(lines[:at] + new + lines[at:]) + "\n"


class DeterministicOptimizer:
    """No LLM: appends each loss, condensed, as a Warning bullet to the prompts of the agents on its
    trajectories, illustrated by that agent's own output in the failed episode.

    The baseline for ablations (is the LLM surgeon needed?) and the demo's optimizer.
    """

    def __init__(self, max_chars: int = 8000, bullet_chars: int = 160):
        self.max_chars = max_chars
        self.bullet_chars = bullet_chars

    def step(self, inp: StepInput) -> StepResult:
        out = {}
        for agent in inp.blamed:
            bullets = []
            for f in inp.failures:  # only the failures whose trajectories this agent is on
                if agent not in f.outputs and agent not in f.rendered:
                    continue
                rule = " ".join(f.loss.text.split())
                example = f.outputs.get(agent, [])  # its own output in that same episode
                case = f" (e.g. you wrote {cut(' '.join(example[0].split()), 60)!r})" if example else ""
                bullets.append(f"Avoid: {cut(rule, self.bullet_chars)}{case}")
            text = add_warning(inp.prompts[agent].text, bullets)
            if len(text) <= self.max_chars and text != inp.prompts[agent].text:
                out[agent] = text
        return StepResult(out)
