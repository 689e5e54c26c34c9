"""Agents: a prompt plus a model, called like a function, recorded in the active trace.

Calling an agent renders its messages (the prompt as the system message, the inputs as the user
message), records a ``call`` node with the exact spans of every input, and loops over tool calls
up to ``max_tool_rounds``: each tool run is a ``tool`` node, and the next request carries the
assistant's tool calls and the results as messages with their own spans.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Generator, Sequence

from agentgrad.core.text import Text, as_text
from agentgrad.core.tools import Tool
from agentgrad.core.trace import Node, Span, Trace, ToolCall, current_trace
from agentgrad.errors import ConfigError
from agentgrad.core.model import Generation, GenerationSettings, LanguageModel

_invocations = itertools.count()


@dataclass(frozen=True)
class Prompt:
    """The optimisable text of an agent. ``protected`` substrings must survive every rewrite."""

    text: str
    protected: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        missing = self.missing_protected(self.text)
        if missing:
            raise ConfigError(f"protected text {missing[0][:60]!r} does not occur in the prompt")

    def missing_protected(self, new_text: str) -> list[str]:
        """Protected spans that ``new_text`` no longer contains verbatim."""
        return [p for p in self.protected if p not in new_text]

    def replace(self, new_text: str) -> "Prompt":
        """A new version of this prompt; raises if a protected span was dropped."""
        return Prompt(new_text, self.protected)

    def __str__(self) -> str:
        return self.text


class Output(Text):
    """An agent's reply: text whose provenance is the final call node, plus its tool calls."""

    __slots__ = ("node", "tool_calls", "calls", "ended", "trace")

    def __init__(self, text: str, node: int, tool_calls: list[ToolCall], calls: list[int], ended: bool, trace: Trace):
        super().__init__(text, source=node)
        for k, v in dict(node=node, tool_calls=tool_calls, calls=calls, ended=ended, trace=trace).items():
            object.__setattr__(self, k, v)


@dataclass
class _Msg:
    """A message under construction: content keeps its provenance."""

    role: str
    content: Text
    extra: dict[str, Any] = field(default_factory=dict)


def render_messages(msgs: Sequence[_Msg]) -> tuple[list[dict[str, Any]], list[Span]]:
    """Plain message dicts and the spans of every sourced segment, found at render time."""
    out, spans = [], []
    for i, m in enumerate(msgs):
        out.append({"role": m.role, "content": m.content.text, **m.extra})
        spans.extend(Span(src, i, a, b) for src, a, b in m.content.spans())
    return out, spans


@dataclass
class Agent:
    """A named prompt plus a model, with optional tools and generation settings.

    Args:
        name: unique within a system; it names the call nodes.
        prompt: the system prompt (a ``Prompt`` or a string).
        model: the language model that answers.
        tools: tools the model may call.
        settings: decoding settings.
        template: how inputs are laid out in the user message, with ``{name}`` / ``{0}`` fields;
            by default a single input is used as is and several are labelled blocks.
        max_tool_rounds: how many rounds of tool calls are run before the loop stops.
        model_ref: the configuration's name for the model (recorded in traces).
        parallel_tool_calls: run every tool call of a reply; when False only the first is run and
            kept (the others are recorded in the call node's ``meta["dropped_tool_calls"]``), as
            tau-bench's tool-calling agent does.
    """

    name: str
    prompt: Prompt | str
    model: LanguageModel
    tools: list[Tool] = field(default_factory=list)
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    template: str | None = None
    max_tool_rounds: int = 8
    model_ref: str = ""
    parallel_tool_calls: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.prompt, str):
            self.prompt = Prompt(self.prompt)
        names = [t.name for t in self.tools]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(f"agent {self.name!r} has two tools named {sorted(dup)[0]!r}")
        self._tools = {t.name: t for t in self.tools}

    # --- public calls ---------------------------------------------------------------------
    def __call__(self, *inputs: Any, **named: Any) -> Output:
        return self.chat(self._messages(inputs, named))

    async def acall(self, *inputs: Any, **named: Any) -> Output:
        return await self.achat(self._messages(inputs, named))

    def chat(self, messages: Sequence[tuple[Any, ...]]) -> Output:
        """Call with explicit ``(role, content)`` messages after the system prompt (multi-turn).

        A message may carry a third element, the extra fields of an OpenAI-style message
        (``tool_calls`` of an assistant message, ``tool_call_id`` and ``name`` of a tool result):
        :func:`transcript` gives a turn's messages in that form, to continue a conversation.
        """
        loop = self._loop(self._with_system(messages))
        reply: Any = None
        while True:
            try:
                kind, *args = loop.send(reply)
            except StopIteration as stop:
                return stop.value
            if kind == "generate":
                reply = self.model.generate(*args)
            else:
                tool, arguments = args
                reply = asyncio.run(tool.arun(arguments)) if inspect.iscoroutinefunction(tool.fn) else tool.run(arguments)

    async def achat(self, messages: Sequence[tuple[Any, ...]]) -> Output:
        loop = self._loop(self._with_system(messages))
        reply: Any = None
        while True:
            try:
                kind, *args = loop.send(reply)
            except StopIteration as stop:
                return stop.value
            if kind == "generate":
                reply = await self.model.agenerate(*args)
            else:
                reply = await args[0].arun(args[1])

    # --- rendering ------------------------------------------------------------------------
    def _messages(self, inputs: tuple[Any, ...], named: dict[str, Any]) -> list[tuple[str, Any]]:
        return [("user", self.render_inputs(inputs, named))]

    def render_inputs(self, inputs: Sequence[Any], named: dict[str, Any]) -> Text:
        """The user message: the template filled in, or the inputs as labelled blocks."""
        if self.template is not None:
            try:
                return Text.format(self.template, *inputs, **named)
            except (KeyError, IndexError) as e:
                raise ConfigError(f"agent {self.name!r}: template field {e} has no input") from None
        items = [(None, as_text(v)) for v in inputs] + [(k, as_text(v)) for k, v in named.items()]
        if len(items) == 1:
            return items[0][1]
        trace = current_trace()
        blocks = []
        for i, (label, text) in enumerate(items):
            if label is None:
                srcs = text.sources
                label = trace.nodes[srcs[0]].name if trace is not None and srcs else f"input {i + 1}"
            blocks.append(Text.format("{0}:\n{1}", label, text))
        return Text.join("\n\n", blocks)

    def _with_system(self, messages: Sequence[tuple[Any, ...]]) -> list[_Msg]:
        """The system prompt, then ``(role, content)`` or ``(role, content, extra)`` messages."""
        return [_Msg("system", Text(str(self.prompt)))] + [
            _Msg(m[0], as_text(m[1]), dict(m[2]) if len(m) > 2 else {}) for m in messages]

    # --- the loop, written once for both drivers ------------------------------------------
    def _loop(self, msgs: list[_Msg]) -> Generator[tuple[Any, ...], Any, Output]:
        trace = current_trace()
        if trace is None:  # called outside a system: record into a private trace
            trace = Trace(id=f"{self.name}-call")
        invocation = next(_invocations)
        schemas = [t.schema() for t in self.tools]
        calls: list[int] = []
        for round_ in itertools.count():
            messages, spans = render_messages(msgs)
            t0 = time.time()
            gen: Generation = yield ("generate", messages, schemas or None, self.settings)
            tool_calls = list(gen.tool_calls) if self.parallel_tool_calls else list(gen.tool_calls[:1])
            dropped = gen.tool_calls[len(tool_calls):]
            node = trace.add(
                Node(
                    id=-1,
                    kind="call",
                    name=self.name,
                    text=gen.text,
                    tool_calls=tool_calls,
                    messages=messages,
                    spans=spans,
                    tools=schemas,
                    parents=sorted({s.source for s in spans}),
                    model={"ref": self.model_ref or getattr(self.model, "name", ""), **self.model.describe()},
                    settings=self.settings.record(),
                    usage=dict(gen.usage),
                    timing={"start": t0, "seconds": round(time.time() - t0, 6)},
                    meta={"invocation": invocation, "round": round_, "finish_reason": gen.finish_reason}
                    | ({"raw": gen.raw} if gen.raw is not None else {})
                    | ({"dropped_tool_calls": [c.to_dict() for c in dropped]} if dropped else {}),
                )
            )
            calls.append(node.id)
            ended = False
            if not tool_calls or round_ >= self.max_tool_rounds:
                if tool_calls:
                    node.meta["stopped"] = "max_tool_rounds"
                break
            assistant = {"tool_calls": [c.to_dict() for c in tool_calls]}
            msgs.append(_Msg("assistant", Text(gen.text, source=node.id), assistant))
            for call in tool_calls:
                tool = self._tools.get(call.name)
                t1 = time.time()
                if tool is None:
                    result = f"Error: unknown tool {call.name!r}; available: {', '.join(self._tools) or 'none'}"
                else:
                    result = yield ("tool", tool, call.arguments)
                tnode = trace.add(
                    Node(
                        id=-1,
                        kind="tool",
                        name=call.name,
                        text=result,
                        parents=[node.id],
                        timing={"start": t1, "seconds": round(time.time() - t1, 6)},
                        meta={"arguments": call.arguments, "tool_call_id": call.id, "agent": self.name},
                    )
                )
                msgs.append(_Msg("tool", Text(result, source=tnode.id), {"tool_call_id": call.id, "name": call.name}))
                ended = ended or bool(tool and tool.ends_episode)
            if ended:
                trace.meta["ended_by"] = {"agent": self.name, "node": calls[-1]}
                break
        last = trace.nodes[calls[-1]]
        return Output(last.text, last.id, list(last.tool_calls), calls, ended, trace)


def transcript(output: Output) -> list[tuple[str, Text, dict[str, Any]]]:
    """The assistant and tool messages of one agent invocation, provenance kept.

    Appending them to the messages of the next :meth:`Agent.chat` continues the conversation with
    every earlier tool call and result in view, as a tool-calling agent keeps its history.
    """
    trace = output.trace
    out: list[tuple[str, Text, dict[str, Any]]] = []
    for cid in output.calls:
        node = trace.nodes[cid]
        results = [n for n in trace.nodes[cid + 1:] if n.kind == "tool" and n.parents == [cid]]
        if node.tool_calls and results:
            out.append(("assistant", Text(node.text, source=cid), {"tool_calls": [c.to_dict() for c in node.tool_calls]}))
            for r in results:
                out.append(("tool", Text(r.text, source=r.id), {"tool_call_id": r.meta.get("tool_call_id", ""),
                                                                 "name": r.name}))
        else:
            out.append(("assistant", Text(node.text, source=cid), {}))
    return out


def tool_report(output: Output) -> Text:
    """What an invocation did: ``tool(arguments) -> result`` per tool call, then its final words.

    Results keep their provenance (the tool nodes), so an agent reading the report is connected to
    the tools' outputs, not only to the agent that called them.
    """
    import json

    trace = output.trace
    parts: list[Text] = []
    for cid in output.calls:
        for call in trace.nodes[cid].tool_calls:
            found = [n for n in trace.nodes[cid + 1:] if n.kind == "tool" and n.parents == [cid]
                     and n.meta.get("tool_call_id") == call.id]
            if found:
                parts.append(Text.format("{0}({1}) -> {2}", call.name, json.dumps(call.arguments, ensure_ascii=False),
                                         Text(found[0].text, source=found[0].id)))
    parts.append(Text(output))
    return Text.join("; ", parts)
