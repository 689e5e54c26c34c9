"""Target back-propagation: per call, what its output should have been; the optimizer kind ``target``.

Instead of one verbal loss walked back unchanged, every call on the failure's kept edges receives a
local target (after GTBP, Zhu, Yao and Kuwaranancharoen). A target writer (an LLM on any backend, or
the scripted one) first writes the target of the call the loss attaches to, from its output and the
loss; then, walking the kept edges of the attribution graph backward (only the sources the GBC
weights say mattered, top-k), writes for each source call the output it should have produced so
that its reader reaches its own target. The edges walked are a parents map: in the optimisation
loop, the edges the blame method walked (:class:`agentgrad.blame.verdict.Verdict`); from a
graph, its kept top-k edges (:func:`agentgrad.blame.walk.kept_parents`). A tool result between two
calls is passed through: the call that asked for the tool gets a target written from the tool's
result. Inputs get none. A call read by several calls takes the target written for the reader
nearest the loss (the first one reached).

The optimizer then updates each agent's prompt from its (output, target) pairs across the step's
episodes: an LLM rewrites the prompts (the reply validated exactly as the verbal optimizer's: JSON,
known and blamed agents only, protected spans kept, a length cap; retried with the reason), or,
without an LLM, each pair becomes a "## Warning" bullet.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from agentgrad.blame.backward import VerbalLoss, cut
from agentgrad.core.trace import Node, Trace
from agentgrad.errors import ModelError
from agentgrad.core.model import GenerationSettings, LanguageModel, OutputSchema
from agentgrad.optim import prompts as T
from agentgrad.optim.optimizer import (
    StepInput, StepResult, UpdateError, add_warning, ask_for_prompts, parse_reply, render_history,
)


class TargetWriter(Protocol):
    def final(self, trace: Trace, node: Node, loss: VerbalLoss) -> str: ...

    def source(self, trace: Trace, reader: Node, reader_target: str, source: Node, via: Node | None) -> str: ...


class ScriptedTargetWriter:
    """No LLM (tests, the demo, ablations): the final call's target is the expected result the loss
    names (``loss.details["expected"]``, else the loss text); a source's target says what its reader
    needs to produce. Deterministic."""

    def final(self, trace: Trace, node: Node, loss: VerbalLoss) -> str:
        return str(loss.details.get("expected") or loss.text)

    def source(self, trace: Trace, reader: Node, reader_target: str, source: Node, via: Node | None) -> str:
        return f"Output from which {reader.name} can produce: {cut(' '.join(reader_target.split()), 200)}"


def target_schema(max_chars: int, max_new_tokens: int | None = None) -> OutputSchema:
    """The shape of a target writer's reply: ``{"target": "<a non-empty output>"}``, short enough to fit
    ``max_new_tokens`` (as :func:`~agentgrad.optim.optimizer.rewrite_schema`)."""
    from agentgrad.optim.optimizer import CHARS_PER_TOKEN

    cap = max_chars if max_new_tokens is None else min(max_chars, max(1, CHARS_PER_TOKEN * (max_new_tokens - 16)))
    return OutputSchema(name="target", json_schema={
        "type": "object", "properties": {"target": {"type": "string", "minLength": 1, "maxLength": cap}},
        "required": ["target"], "additionalProperties": False})


class LLMTargetWriter:
    """Targets written by an LLM (any backend), its reply constrained to :func:`target_schema`; a
    reply that does not parse all the same (a backend that could not constrain it) is asked again
    with the reason, and after ``max_attempts`` a one-line :class:`ModelError`."""

    def __init__(self, model: LanguageModel, max_attempts: int = 3, max_chars: int = 4000,
                 settings: GenerationSettings | None = None):
        self.model, self.max_attempts, self.max_chars = model, max_attempts, max_chars
        self.settings = settings or GenerationSettings(max_new_tokens=2048)
        self.unconstrained = 0  # replies decoded without the output schema

    def _ask(self, user: str) -> str:
        msgs: list[dict[str, Any]] = [{"role": "system", "content": T.TARGET_SYSTEM}, {"role": "user", "content": user}]
        last = ""
        schema = target_schema(self.max_chars, self.settings.max_new_tokens)
        settings = self.settings.with_output(schema)
        for _ in range(self.max_attempts):
            gen = self.model.generate(msgs, None, settings)
            reply = gen.text
            self.unconstrained += gen.constrained is not True
            try:
                data = parse_reply(reply)
                target = data.get("target") if isinstance(data, dict) else None
                if not isinstance(target, str) or not target.strip():
                    raise UpdateError('the reply must be {"target": "<a non-empty output>"}')
                return target
            except UpdateError as e:
                last = str(e)
                msgs = msgs + [{"role": "assistant", "content": reply},
                               {"role": "user", "content": T.TARGET_RETRY.format(error=e)}]
        raise ModelError(f"the target writer gave no usable target in {self.max_attempts} attempts: {last}")

    def _inputs(self, node: Node) -> str:
        return cut("\n\n".join(f"[{m.get('role')}] {m.get('content') or ''}" for m in node.messages[1:]), self.max_chars)

    def final(self, trace: Trace, node: Node, loss: VerbalLoss) -> str:
        return self._ask(T.TARGET_FINAL.format(agent=node.name, inputs=self._inputs(node),
                                               output=cut(node.text, self.max_chars), loss=cut(loss.text, self.max_chars)))

    def source(self, trace: Trace, reader: Node, reader_target: str, source: Node, via: Node | None) -> str:
        return self._ask(T.TARGET_SOURCE.format(
            reader=reader.name, source=source.name, via=f" (through the result of tool {via.name})" if via else "",
            reader_output=cut(reader.text, self.max_chars), reader_target=cut(reader_target, self.max_chars),
            source_inputs_note=("Its tool calls: " + ", ".join(f"{c.name}({c.arguments})" for c in source.tool_calls)
                                + "\n") if source.tool_calls else "",
            source_output=cut(source.text, self.max_chars)))


def propagate_targets(trace: Trace, parents: dict[int, list[int]], loss: VerbalLoss, writer: TargetWriter,
                      max_calls: int = 64) -> dict[int, str]:
    """node id -> target output, for the calls the loss attaches to and the calls upstream of them
    along ``parents`` (node -> the sources walked; breadth first from the loss; at most ``max_calls``)."""
    targets: dict[int, str] = {}
    queue: deque[int] = deque()
    for t in loss.targets:
        node = trace.nodes[t]
        if node.kind == "call" and t not in targets:
            targets[t] = writer.final(trace, node, loss)
            queue.append(t)
    while queue and len(targets) < max_calls:
        v = queue.popleft()
        reader = trace.nodes[v]
        for s in sorted(parents.get(v, []), reverse=True):
            src = trace.nodes[s]
            via = None
            if src.kind == "tool":  # the tool's result came from the call that asked for it
                via, callers = src, [p for p in src.parents if trace.nodes[p].kind == "call"]
            else:
                callers = [s] if src.kind == "call" else []
            for c in callers:
                if c not in targets and len(targets) < max_calls:
                    targets[c] = writer.source(trace, reader, targets[v], trace.nodes[c], via)
                    queue.append(c)
    return targets


class TargetOptimizer:
    """Prompt updates from (output, target) pairs; see the module docstring.

    Args:
        writer: writes the targets (``LLMTargetWriter`` or ``ScriptedTargetWriter``).
        model: the LLM that rewrites prompts; None: a "## Warning" bullet per pair, no LLM.
    """

    kind = "target"

    def __init__(self, writer: TargetWriter, model: LanguageModel | None = None, max_attempts: int = 3,
                 max_chars: int = 8000, settings: GenerationSettings | None = None, pair_chars: int = 400):
        self.writer, self.model = writer, model
        self.max_attempts, self.max_chars, self.pair_chars = max_attempts, max_chars, pair_chars
        self.settings = settings or GenerationSettings(max_new_tokens=4096)

    def targets(self, trace: Trace, parents: dict[int, list[int]], loss: VerbalLoss) -> dict[int, str]:
        return propagate_targets(trace, parents, loss, self.writer)

    def messages(self, inp: StepInput) -> list[dict[str, Any]]:
        agents = "\n\n".join(T.AGENT_BLOCK.format(name=n, tools=", ".join(inp.tools.get(n, [])) or "none", prompt=p.text)
                             for n, p in inp.prompts.items())
        pairs = "\n\n".join(T.PAIR_BLOCK.format(agent=a, i=i + 1, output=cut(o, self.pair_chars), target=cut(t, self.pair_chars))
                            for a in inp.blamed for i, (o, t) in enumerate(inp.pairs.get(a, [])))
        protected = "; ".join(repr(s) for a in inp.blamed for s in inp.prompts[a].protected) or "(none)"
        user = T.TARGET_OPTIMIZER_USER.format(agents=agents, pairs=pairs, history=render_history(inp.history),
                                              blamed=", ".join(inp.blamed), protected=protected, max_chars=self.max_chars)
        return [{"role": "system", "content": T.OPTIMIZER_SYSTEM}, {"role": "user", "content": user}]

    def step(self, inp: StepInput) -> StepResult:
        blamed = [a for a in inp.blamed if inp.pairs.get(a)]
        if not blamed:
            return StepResult({}, 0, ["no targets were written for this step's failures"], skipped=True)
        inp = StepInput(**{**inp.__dict__, "blamed": blamed})
        if self.model is None:
            out = {}
            for agent in blamed:
                bullets = [f"Aim for: {cut(' '.join(t.split()), 160)} (you wrote {cut(' '.join(o.split()), 60)!r})"
                           for o, t in inp.pairs[agent]]
                text = add_warning(inp.prompts[agent].text, bullets)
                if len(text) <= self.max_chars and text != inp.prompts[agent].text:
                    out[agent] = text
            return StepResult(out)
        return ask_for_prompts(self.model, self.messages(inp), inp, self.max_attempts, self.max_chars, self.settings)


OPTIMIZER_KINDS = ("verbal", "target", "edit")


def optimizer_for(kind: str, model: LanguageModel | None, max_attempts: int = 3, max_chars: int = 8000,
                  max_new_tokens: int = 4096) -> Any:
    """The one way to build a prompt optimizer: ``verbal`` (the paper's: the loss walked back
    unchanged) or ``target`` (target back-propagation), on an LLM, or without one (deterministic);
    or ``edit`` (no LLM: the blamed agents' prompts lose the sentence their gradients point at)."""
    from agentgrad.errors import ConfigError
    from agentgrad.optim.optimizer import DeterministicOptimizer, PromptOptimizer

    settings = GenerationSettings(max_new_tokens=max_new_tokens)
    if kind == "verbal":
        if model is None:
            return DeterministicOptimizer(max_chars=max_chars)
        return PromptOptimizer(model, max_attempts, max_chars, settings)
    if kind == "edit":
        from agentgrad.optim.edit import EditOptimizer

        return EditOptimizer(max_chars=max_chars)
    if kind == "target":
        writer = LLMTargetWriter(model, max_attempts) if model is not None else ScriptedTargetWriter()
        return TargetOptimizer(writer, model, max_attempts, max_chars, settings)
    raise ConfigError(f"unknown optimizer {kind!r}; valid: {', '.join(OPTIMIZER_KINDS)}")
