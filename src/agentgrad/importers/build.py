"""One trace built from spans, whatever their convention: calls, tools, inputs and the edges between them.

Both span importers (OpenInference, OTel GenAI) read a call's messages, output and tool calls in
their own way and hand them here, in trace order. :class:`TraceBuilder` gives every call its
predecessors by two rules:

- **message overlap** (:mod:`agentgrad.importers.overlap`): a message that is, or contains, an
  earlier node's output is a span on that node (a text several nodes produced: in order); a user message no node produced becomes an input
  node (``user``), as does an unmatched tool result (its tool's name) or assistant message
  (``history``: a conversation from before the trace);
- **tool calls**: an assistant message repeating earlier tool calls (matched by id) makes the call
  that asked for them a parent; a tool node's parent is the call that asked for it (by tool call
  id, else the latest unanswered call of a tool of that name, else the latest call of its agent).

Structural parents (span links, a graph's parent node) may be added; they carry no span, so the
scorer gives them no weight, but the blame walk and the report see them.
"""

from __future__ import annotations

from typing import Any

from agentgrad.core.trace import Node, Span, ToolCall, Trace
from agentgrad.importers.overlap import Produced


SYSTEM = ("system", "developer")  # the agent's own prompt (OpenAI's newer name for the system role): not an input


class TraceBuilder:
    """Nodes appended in the order their spans started."""

    def __init__(self, trace_id: str, fmt: str):
        self.trace = Trace(id=trace_id, meta={"imported": fmt})
        self.produced = Produced()
        self.asked: dict[str, int] = {}  # tool call id -> the call node that asked
        self.pending: dict[str, list[int]] = {}  # tool name -> calls that asked and have no result yet
        self.last_call: dict[str, int] = {}  # agent -> its latest call node

    def _input(self, text: str, name: str) -> int:
        node = self.trace.add(Node(id=-1, kind="input", name=name, text=text))
        self.produced.add(node.id, text, quotable=False)  # a framework's rendering: its parts are boilerplate
        return node.id

    def call(self, agent: str, messages: list[dict[str, Any]], text: str, tool_calls: list[ToolCall],
             parents: list[int] | None = None, **fields: Any) -> Node:
        """A call node: its spans found by message overlap, inputs created for unmatched messages."""
        spans: list[Span] = []
        extra = set(parents or [])
        whole = self.produced.whole([m.get("content") or "" if m.get("role") not in SYSTEM else "" for m in messages])
        for j, m in enumerate(messages):
            content = m.get("content") or ""
            for c in m.get("tool_calls") or []:
                src = self.asked.get(str(c.get("id") or ""))
                if src is not None:
                    extra.add(src)
            if m.get("role") in SYSTEM or not content:
                continue
            found = self.produced.spans(content, j, whole[j])
            if whole[j] is None:  # parts of earlier outputs the framework re-rendered into this message
                found = sorted(found + self.produced.fragments(content, j, found), key=lambda s: s.start)
            if not found:
                role = m.get("role")
                name = {"user": "user", "assistant": "history"}.get(role, str(m.get("name") or role or "input"))
                found = [Span(self._input(content, name), j, 0, len(content))]
            spans.extend(found)
        node = self.trace.add(Node(id=-1, kind="call", name=agent, text=text, tool_calls=list(tool_calls),
                                   messages=messages, spans=spans,
                                   parents=sorted({s.source for s in spans} | extra), **fields))
        for c in tool_calls:
            if c.id:
                self.asked[c.id] = node.id
            self.pending.setdefault(c.name, []).append(node.id)
        self.last_call[agent] = node.id
        self.produced.add(node.id, text)
        return node

    def tool(self, name: str, text: str, call_id: str = "", agent: str | None = None, **fields: Any) -> Node:
        """A tool node, its parent the call that asked for it (see the module docstring)."""
        parent = self.asked.get(call_id) if call_id else None
        waiting = self.pending.get(name) or []
        if parent is None and waiting:
            parent = waiting[-1]
        if parent is not None and parent in waiting:
            waiting.remove(parent)
        if parent is None and agent is not None:
            parent = self.last_call.get(agent)
        if agent is not None:  # the agent it ran for (a tool a node's code ran, no model asking, has no parent)
            fields["meta"] = {**fields.get("meta", {}), "agent": agent}
        node = self.trace.add(Node(id=-1, kind="tool", name=name, text=text,
                                   parents=[parent] if parent is not None else [], **fields))
        self.produced.add(node.id, text)
        return node
