"""Tool calls parsed out of generated text, in the formats common chat templates teach.

Formats: Hermes / Qwen (``<tool_call>{...}</tool_call>``), Mistral (``[TOOL_CALLS] [...]``),
Llama 3.1 JSON (an output that is one JSON object ``{"name", "parameters"}``, optionally after
``<|python_tag|>``) and Llama's ``<function=NAME>{...}</function>``. Text that does not parse is
returned unchanged: a malformed reply is a reply, not a crash.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

from agentgrad.core.trace import ToolCall

# No \s* around a lazy group: with a long run of spaces the engine backtracks in cubic time (2.5 s for
# 2,000 spaces after a tag, minutes for a degenerate reply); the payload is stripped afterwards.
_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_FUNCTION_NAME = re.compile(r"<function=([\w.\-]+)>")


def _function_tags(text: str) -> Iterator[tuple[str, str]]:
    """``(name, body)`` of each ``<function=NAME>body</function>``, in linear time (a regex with a lazy
    body rescans the rest of the text from every unclosed tag: 19 s for a reply of 20,000 of them)."""
    pos = 0
    while (start := text.find("<function=", pos)) >= 0:
        m = _FUNCTION_NAME.match(text, start)
        if not m:
            pos = start + 1
            continue
        end = text.find("</function>", m.end())
        if end < 0:
            return  # no later tag can be closed either
        yield m.group(1), text[m.end():end]
        pos = end + len("</function>")


def _as_call(obj: Any, i: int) -> ToolCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(name=obj["name"], arguments=args, id=str(obj.get("id") or f"call_{i}"))


def _json_calls(payload: str) -> list[ToolCall] | None:
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError:
        return None
    items = obj if isinstance(obj, list) else [obj]
    calls = [_as_call(o, i) for i, o in enumerate(items)]
    return calls if calls and all(c is not None for c in calls) else None  # type: ignore[return-value]


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """Split ``text`` into the prose part and the tool calls it contains (possibly none)."""
    if "<tool_call>" in text:
        calls: list[ToolCall] = []
        for m in _HERMES.finditer(text):
            got = _json_calls(m.group(1).strip())
            if got is None:
                return text, []
            calls.extend(got)
        if calls:
            content = text[: text.index("<tool_call>")].strip()
            return content, [ToolCall(c.name, c.arguments, f"call_{i}") for i, c in enumerate(calls)]
    if "[TOOL_CALLS]" in text:
        head, _, payload = text.partition("[TOOL_CALLS]")
        got = _json_calls(payload.strip())
        if got:
            return head.strip(), got
    if "<function=" in text:
        found = []
        for i, (name, body) in enumerate(_function_tags(text)):
            c = _as_call({"name": name, "arguments": body.strip() or "{}"}, i)
            if c is None:
                return text, []
            found.append(c)
        if found:
            return text[: text.index("<function=")].strip(), found
    stripped = text.strip()
    if stripped.startswith("<|python_tag|>"):
        stripped = stripped[len("<|python_tag|>") :].strip()
    if stripped[:1] in "{[":
        got = _json_calls(stripped)
        if got:
            return "", got
    return text, []
