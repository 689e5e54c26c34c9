"""Tool calls on a model whose chat template has none: one schema-constrained JSON reply.

A chat template without tool support (SmolLM2's ChatML, for one) drops the tools a request offers,
so the model never sees them and never calls one. Such a call is rewritten here: the tools are
described in the system message, and the reply is constrained (:class:`OutputSchema`) to one JSON
object, either ``{"tool_calls": [{"name": ..., "arguments": {...}}, ...]}`` (each name one of the
tools, its arguments that tool's parameter schema) or ``{"content": "<the answer>"}``. The backend
turns it back into a :class:`Generation` with tool calls, so agents and traces see what a native
tool-calling model gives. Earlier tool calls and results in the messages are rendered as text (a
template without tools has no place for them either).
"""

from __future__ import annotations

import json
from typing import Any

from agentgrad.core.model import Generation, OutputSchema
from agentgrad.core.trace import ToolCall

TOOLS_SYSTEM = """\

# Tools
You can call these tools. Each is given as its name, what it does, and the JSON schema of its arguments:
{tools}

Reply with one JSON object and nothing else: either {{"tool_calls": [{{"name": "<tool name>", "arguments": \
{{...}}}}]}} to call tools (their results come back in the next message), or {{"content": "<your answer>"}} \
when you need no tool."""


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    return tool.get("function", tool)


def tool_reply_schema(tools: list[dict[str, Any]]) -> OutputSchema:
    """The one JSON reply a template-less model gives when offered ``tools`` (OpenAI-style schemas)."""
    calls = []
    for t in tools:
        fn = _function(t)
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        calls.append({"type": "object", "properties": {"name": {"const": fn["name"]}, "arguments": params},
                      "required": ["name", "arguments"], "additionalProperties": False})
    call = calls[0] if len(calls) == 1 else {"anyOf": calls}
    schema = {"anyOf": [
        {"type": "object", "properties": {"tool_calls": {"type": "array", "items": call, "minItems": 1}},
         "required": ["tool_calls"], "additionalProperties": False},
        {"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"],
         "additionalProperties": False},
    ]}
    return OutputSchema(name="tool_reply", json_schema=schema)


def describe_tools(tools: list[dict[str, Any]]) -> str:
    lines = []
    for t in tools:
        fn = _function(t)
        lines.append(f"- {fn['name']}: {fn.get('description', '').strip() or '(no description)'}\n  arguments: "
                     f"{json.dumps(fn.get('parameters') or {}, ensure_ascii=False)}")
    return "\n".join(lines)


def messages_without_tools(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` for a template without tools: the tools described in the system message (one is
    added if absent), earlier tool calls and results as plain assistant and user text."""
    out: list[dict[str, Any]] = []
    note = TOOLS_SYSTEM.format(tools=describe_tools(tools))
    if not messages or messages[0].get("role") != "system":
        out.append({"role": "system", "content": note.lstrip()})
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content") or ""
        if i == 0 and role == "system":
            out.append({"role": "system", "content": content + "\n" + note})
        elif role == "assistant" and m.get("tool_calls"):
            calls = [{"name": c["name"], "arguments": c["arguments"]} for c in m["tool_calls"]]
            out.append({"role": "assistant", "content": json.dumps({"tool_calls": calls}, ensure_ascii=False)})
        elif role == "tool":
            out.append({"role": "user", "content": f"Result of tool {m.get('name') or m.get('tool_call_id', '')}:\n{content}"})
        else:
            out.append({"role": role, "content": content})
    return out


def parse_tool_reply(gen: Generation) -> Generation:
    """``gen`` (a reply under :func:`tool_reply_schema`) as text or tool calls. A reply that is not
    such an object (a backend that could not constrain it) is kept as text: a reply, not a crash."""
    try:
        value = json.loads(gen.text)
    except json.JSONDecodeError:
        return gen
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list) and value["tool_calls"]:
        calls = []
        for i, c in enumerate(value["tool_calls"]):
            if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                return gen
            calls.append(ToolCall(name=c["name"], arguments=c.get("arguments") or {}, id=f"call_{i}"))
        return Generation(text="", tool_calls=calls, usage=gen.usage, finish_reason="tool_calls", raw=gen.text,
                          constrained=gen.constrained)
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return Generation(text=value["content"], usage=gen.usage, finish_reason=gen.finish_reason, raw=gen.text,
                          constrained=gen.constrained)
    return gen
