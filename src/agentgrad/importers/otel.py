"""``otel``: OpenTelemetry spans as OTLP JSON with the GenAI semantic conventions (see :mod:`agentgrad.importers`).

The GenAI conventions have moved content three times, and every form is read: attributes holding
JSON (``gen_ai.system_instructions``, ``gen_ai.input.messages``, ``gen_ai.output.messages``, v1.37+,
messages as ``parts``), the same three on the event ``gen_ai.client.inference.operation.details``,
one event per message (``gen_ai.system.message``, ``gen_ai.user.message``,
``gen_ai.assistant.message``, ``gen_ai.tool.message``, ``gen_ai.choice``, v1.26-1.36), and the older
flattened ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``.
"""

from __future__ import annotations

import json
from typing import Any

from agentgrad.core.trace import ToolCall, Trace
from agentgrad.importers.base import BadRecord
from agentgrad.importers.build import TraceBuilder
from agentgrad.importers.otlp import OtlpSpan

LLM_OPERATIONS = {"chat", "text_completion", "generate_content"}
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
CONTENT_KEYS = ("gen_ai.system_instructions", "gen_ai.input.messages", "gen_ai.output.messages")
HIDDEN = ("the instrumentor did not record message content (set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="
          "true, or its own capture setting); export with content recorded to attribute it")
_EVENT_ROLES = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}


def _json_value(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return v
    return v


def _part_text(p: dict[str, Any]) -> str | None:
    if p.get("type") == "text":
        return str(p.get("content", ""))
    if p.get("type") == "tool_call_response":
        r = p.get("response", p.get("result"))
        return r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)
    return None


def _parts_text(m: dict[str, Any]) -> str:
    """The text of a GenAI message: ``content``, or its ``text`` (and tool response) parts."""
    if isinstance(m.get("content"), str):
        return m["content"]
    texts = [t for p in m.get("parts") or [] if isinstance(p, dict) and (t := _part_text(p)) is not None]
    return "\n".join(texts)


def _parts_calls(m: dict[str, Any]) -> list[ToolCall]:
    calls = []
    for p in m.get("parts") or []:
        if isinstance(p, dict) and p.get("type") == "tool_call":
            args = _json_value(p.get("arguments"))
            calls.append(ToolCall(name=str(p.get("name", "")), arguments=args if isinstance(args, dict) else {},
                                  id=str(p.get("id", ""))))
    for c in m.get("tool_calls") or []:
        f = c.get("function", c) if isinstance(c, dict) else {}
        args = _json_value(f.get("arguments"))
        calls.append(ToolCall(name=str(f.get("name", "")), arguments=args if isinstance(args, dict) else {},
                              id=str(c.get("id", ""))))
    return calls


def _message(m: Any) -> dict[str, Any]:
    m = m if isinstance(m, dict) else {"content": str(m)}
    msg: dict[str, Any] = {"role": str(m.get("role") or "user"), "content": _parts_text(m)}
    calls = _parts_calls(m)
    if calls:
        msg["tool_calls"] = [c.to_dict() for c in calls]
    resp = next((p for p in m.get("parts") or [] if isinstance(p, dict) and p.get("type") == "tool_call_response"), None)
    if resp is not None and resp.get("id"):
        msg["tool_call_id"] = str(resp["id"])
    return msg


def _llm_io(attrs: dict[str, Any], events: list[tuple[str, dict[str, Any]]]) -> tuple[list[dict[str, Any]], str, list[ToolCall], bool]:
    """(input messages, output text, output tool calls, whether an output was recorded) of an LLM span."""
    attrs = dict(attrs)
    for name, ea in events:  # the content event of recent conventions: its attributes as if on the span
        if name == DETAILS_EVENT:
            for k in CONTENT_KEYS:
                if ea.get(k) is not None and attrs.get(k) is None:
                    attrs[k] = ea[k]
    msgs: list[dict[str, Any]] = []
    if attrs.get("gen_ai.system_instructions") is not None:
        sys_parts = _json_value(attrs["gen_ai.system_instructions"])
        text = sys_parts if isinstance(sys_parts, str) else _parts_text({"parts": sys_parts})
        msgs.append({"role": "system", "content": text})
    if attrs.get("gen_ai.input.messages") is not None:
        msgs.extend(_message(m) for m in _json_value(attrs["gen_ai.input.messages"]) or [])
    for name, ea in events:  # v1.26-1.36: one event per message
        role = _EVENT_ROLES.get(name)
        if role:
            content = _json_value(ea.get("content", ""))
            msg = _message({"role": role, **(content if isinstance(content, dict) else {"content": str(content)})})
            msg["role"] = role
            msgs.append(msg)
    i = 0
    while f"gen_ai.prompt.{i}.role" in attrs or f"gen_ai.prompt.{i}.content" in attrs:  # flattened attributes
        msgs.append({"role": str(attrs.get(f"gen_ai.prompt.{i}.role", "user")),
                     "content": str(attrs.get(f"gen_ai.prompt.{i}.content", ""))})
        i += 1
    text, calls, recorded = "", [], False
    if attrs.get("gen_ai.output.messages") is not None:
        outs = [_message(m) for m in _json_value(attrs["gen_ai.output.messages"]) or []]
        text = "\n".join(m["content"] for m in outs if m["content"])
        calls = [ToolCall.from_dict(c) for m in outs for c in m.get("tool_calls", [])]
        recorded = True
    choice = next((ea for name, ea in events if name == "gen_ai.choice"), None)
    if choice is not None and not recorded:
        message = _json_value(choice.get("message", {}))
        message = message if isinstance(message, dict) else {"content": str(message)}
        text, calls, recorded = _parts_text(message), _parts_calls(message), True
    if not recorded and "gen_ai.completion.0.content" in attrs:
        text, recorded = str(attrs["gen_ai.completion.0.content"]), True
    return msgs, text, calls, recorded


def otel_trace(trace_id: str, spans: list[OtlpSpan]) -> Trace:
    """One trace tree's spans (start-time order) as a trace, by the GenAI conventions.

    Mapping: an LLM span (``gen_ai.operation.name`` chat / text_completion / generate_content) is a
    call node: its agent is ``gen_ai.agent.name`` on it or on the nearest ``invoke_agent`` ancestor,
    else the span name; its messages and output as the module docstring says. An ``execute_tool``
    span is a tool node (``gen_ai.tool.name``; its text ``gen_ai.tool.call.result``; its parent the
    call whose tool call has its ``gen_ai.tool.call.id``, else the latest call that asked for a tool
    of that name, else the latest call of its agent). Predecessors: the message-overlap rule
    (:mod:`agentgrad.importers.build`); links to spans that became nodes add parents. Every
    attribute is kept in the node's ``meta``.
    """
    by_id = {sp.span_id: sp for sp in spans}

    def agent(sp: OtlpSpan) -> str | None:
        at: OtlpSpan | None = sp
        while at is not None:
            name = at.attrs.get("gen_ai.agent.name")
            if name and (at is sp or at.attrs.get("gen_ai.operation.name") in ("invoke_agent", "create_agent")):
                return str(name)
            at = by_id.get(at.parent)
        return None

    b = TraceBuilder(trace_id, "otel")
    node_of: dict[str, int] = {}
    for sp in spans:
        attrs = sp.attrs
        op = attrs.get("gen_ai.operation.name")
        meta = {"span_id": sp.span_id, "span_name": sp.name, "attributes": attrs,
                **({"error": sp.failure()} if sp.failure() else {})}
        if sp.failure() and op not in LLM_OPERATIONS and op != "execute_tool":
            b.trace.meta.setdefault("errors", []).append({"span_id": sp.span_id, "span_name": sp.name,
                                                          "error": sp.failure(), "agent": agent(sp)})
        if op in LLM_OPERATIONS:
            msgs, text, calls, recorded = _llm_io(attrs, sp.events)
            if not msgs or not recorded:
                what = "input messages" if not msgs else "output"
                raise BadRecord(f"LLM span {sp.span_id} ({sp.name}) records no {what}: {HIDDEN}")
            linked = [node_of[s] for s in sp.links if s in node_of]
            usage = {k: int(attrs[a]) for k, a in (("prompt_tokens", "gen_ai.usage.input_tokens"),
                     ("completion_tokens", "gen_ai.usage.output_tokens")) if isinstance(attrs.get(a), int)}
            tools = _json_value(attrs.get("gen_ai.tool.definitions"))
            node = b.call(str(agent(sp) or sp.name or "llm"), msgs, text, calls, parents=linked, meta=meta,
                          usage=usage, tools=tools if isinstance(tools, list) else [],
                          model={"name": attrs.get("gen_ai.request.model") or attrs.get("gen_ai.response.model"),
                                 "provider": attrs.get("gen_ai.provider.name") or attrs.get("gen_ai.system")})
        elif op == "execute_tool":
            result = attrs.get("gen_ai.tool.call.result", "")
            node = b.tool(str(attrs.get("gen_ai.tool.name") or sp.name), result if isinstance(result, str)
                          else json.dumps(result, ensure_ascii=False),
                          call_id=str(attrs.get("gen_ai.tool.call.id", "")), agent=agent(sp), meta=meta)
        else:
            continue
        node_of[sp.span_id] = node.id
    if not b.trace.calls():
        raise BadRecord("no LLM span (gen_ai.operation.name chat, text_completion or generate_content): "
                        "nothing to attribute")
    return b.trace
