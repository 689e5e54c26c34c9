"""``chat``: JSONL conversations in the OpenAI message shape, as traces (see :mod:`agentgrad.importers`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgrad.core.trace import Node, Span, Trace
from agentgrad.importers.base import ImportResult, BadRecord, read_user_text, text_field, tool_calls

def chat_trace(messages: Any, id: str = "") -> Trace:
    """One conversation (a list of OpenAI-shaped messages) as a trace."""
    if not isinstance(messages, list):
        raise BadRecord("messages must be a list")
    trace = Trace(id=id, meta={"imported": "chat"})
    systems: dict[str | None, str] = {}
    seen: list[tuple[int, str]] = []  # (node id, role as the next call sees it) of earlier messages
    asked: dict[str, int] = {}  # tool_call_id -> the call node that asked
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadRecord(f"message {i} must be an object")
        role = m.get("role")
        content = text_field(m.get("content"), f"message {i} field 'content'")
        name = m.get("name")
        if name is not None and not isinstance(name, str):
            raise BadRecord(f"message {i} field 'name' must be a string")
        if role == "system":
            systems[name] = content
            continue
        if role == "user":
            node = trace.add(Node(id=-1, kind="input", name=name or "user", text=content, meta={"message": i}))
        elif role == "tool":
            parent = asked.get(str(m.get("tool_call_id", "")))
            node = trace.add(Node(id=-1, kind="tool", name=name or "tool", text=content,
                                  parents=[parent] if parent is not None else [],
                                  meta={"message": i, "tool_call_id": m.get("tool_call_id")}))
        elif role == "assistant":
            agent = name or "assistant"
            msgs: list[dict[str, Any]] = []
            spans: list[Span] = []
            prompt = systems.get(agent, systems.get(None))
            if prompt is not None:
                msgs.append({"role": "system", "content": prompt})
            for src, src_role in seen:
                text = trace.nodes[src].text
                spans.append(Span(src, len(msgs), 0, len(text)))
                msgs.append({"role": "assistant" if src_role == "assistant" and trace.nodes[src].name == agent
                             else "user", "content": text})
            calls = tool_calls(m.get("tool_calls"), i)
            node = trace.add(Node(id=-1, kind="call", name=agent, text=content, tool_calls=calls, messages=msgs,
                                  spans=spans, parents=sorted({s.source for s in spans}), meta={"message": i}))
            for c in calls:
                asked[c.id] = node.id
        else:
            raise BadRecord(f"message {i} has role {role!r}; use system, user, assistant or tool")
        seen.append((node.id, role))
    if not trace.calls():
        raise BadRecord("no assistant message: nothing to attribute")
    return trace


def import_chat(path: str | Path) -> ImportResult:
    """Every conversation of a JSONL file; broken lines are reported with their line number."""
    p = Path(path)
    lines = read_user_text(p, 'chat JSONL (one conversation per line: a list of messages, or {"messages": [...]})'
                           ).splitlines()
    out = ImportResult()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadRecord(f"not JSON ({e.msg})") from None
            messages, cid = (rec.get("messages"), rec.get("id")) if isinstance(rec, dict) else (rec, None)
            out.traces.append(chat_trace(messages, str(cid) if cid is not None else f"line-{n}"))
        except BadRecord as e:
            out.broken.append(f"{p}:{n}: {e}")
    return out
