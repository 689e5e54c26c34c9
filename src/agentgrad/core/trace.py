"""Nodes, spans and traces: the exact record of one episode of a multi-agent system.

A trace is a list of nodes in the order they were created. Node ids are their positions.
``kind`` is ``input`` (text from outside: a user turn, a task field), ``call`` (one request to a
language model), ``tool`` (one tool execution) or ``loss`` (added by later stages).
"""

from __future__ import annotations

import copy

import contextvars
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from agentgrad.core.text import Text
from agentgrad.errors import TraceError
from agentgrad.core.files import write_json_atomic  # noqa: F401  (re-exported: the one write path)
from agentgrad.core.redact import redacted

SCHEMA = "agentgrad.trace"
SCHEMA_VERSION = 1
NODE_KINDS = ("input", "call", "tool", "loss")


@dataclass(frozen=True)
class ToolCall:
    """A tool call asked for by a model. ``arguments`` is the parsed JSON object."""

    name: str
    arguments: dict[str, Any]
    id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ToolCall":
        return cls(name=d["name"], arguments=dict(d.get("arguments") or {}), id=d.get("id", ""))


@dataclass(frozen=True)
class Span:
    """Characters ``[start, end)`` of ``messages[message].content`` that came from node ``source``: its
    text from character ``at`` on (0: from its start; a framework that quoted part of an output)."""

    source: int
    message: int
    start: int
    end: int
    at: int = 0

    def to_dict(self) -> dict[str, int]:
        d = {"source": self.source, "message": self.message, "start": self.start, "end": self.end}
        if self.at:
            d["at"] = self.at
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Span":
        return cls(int(d["source"]), int(d["message"]), int(d["start"]), int(d["end"]), int(d.get("at", 0)))


@dataclass
class Node:
    """One unit of an episode. Fields that do not apply to a kind stay empty."""

    id: int
    kind: str
    name: str = ""  # agent name (call), input name (input), tool name (tool)
    text: str = ""  # the output text (call), the input text (input), the result (tool)
    tool_calls: list[ToolCall] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    model: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def agent(self) -> str | None:
        return self.name if self.kind == "call" else None

    def span_text(self, span: Span) -> str:
        return self.messages[span.message]["content"][span.start : span.end]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "agent": self.agent,
            "output": {"text": self.text, "tool_calls": [c.to_dict() for c in self.tool_calls]},
            "parents": list(self.parents),
        }
        if self.kind == "call":
            d.update(
                messages=self.messages,
                spans=[s.to_dict() for s in self.spans],
                tools=self.tools,
                model=redacted(self.model),
                settings=redacted(self.settings),
                usage=self.usage,
            )
        d["timing"] = self.timing
        d["meta"] = self.meta
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Node":
        out = d.get("output") or {}
        return cls(
            id=int(d["id"]),
            kind=d["kind"],
            name=d.get("name") or d.get("agent") or "",
            text=out.get("text", ""),
            tool_calls=[ToolCall.from_dict(c) for c in out.get("tool_calls", [])],
            messages=list(d.get("messages", [])),
            spans=[Span.from_dict(s) for s in d.get("spans", [])],
            tools=list(d.get("tools", [])),
            parents=[int(p) for p in d.get("parents", [])],
            model=dict(d.get("model", {})),
            settings=dict(d.get("settings", {})),
            usage=dict(d.get("usage", {})),
            timing=dict(d.get("timing", {})),
            meta=dict(d.get("meta", {})),
        )


_CURRENT: contextvars.ContextVar["Trace | None"] = contextvars.ContextVar("agentgrad_trace", default=None)


class Trace:
    """The nodes of one episode, in creation order.

    Use as a context manager to make it the active trace: agent calls made inside record their
    nodes here (also from asyncio tasks and ``asyncio.to_thread``, which copy the context).
    """

    def __init__(self, id: str = "", meta: dict[str, Any] | None = None):
        self.id = id
        self.meta: dict[str, Any] = dict(meta or {})
        self.nodes: list[Node] = []
        self._lock = threading.Lock()
        self._tokens: list[contextvars.Token] = []

    # --- recording ------------------------------------------------------------------------
    def add(self, node: Node) -> Node:
        """Append ``node``, giving it the next id."""
        with self._lock:
            node.id = len(self.nodes)
            self.nodes.append(node)
        return node

    def input(self, text: str, name: str = "input", **meta: Any) -> Text:
        """Record text from outside the system and return it with its provenance."""
        node = self.add(Node(id=-1, kind="input", name=name, text=str(text), meta=meta))
        return Text(str(text), source=node.id)

    def __enter__(self) -> "Trace":
        self._tokens.append(_CURRENT.set(self))
        return self

    def __exit__(self, *exc: Any) -> None:
        _CURRENT.reset(self._tokens.pop())

    # --- queries --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __getitem__(self, i: int) -> Node:
        return self.nodes[i]

    def calls(self, agent: str | None = None) -> list[Node]:
        return [n for n in self.nodes if n.kind == "call" and (agent is None or n.name == agent)]

    def upstream(self, node: int) -> list[int]:
        """The call and tool nodes ``node`` depends on (itself included), in trace order: who could be blamed."""
        seen, stack = set(), [node]
        while stack:
            n = stack.pop()
            if n not in seen:
                seen.add(n)
                stack.extend(self.nodes[n].parents)
        return sorted(n for n in seen if self.nodes[n].kind in ("call", "tool"))

    def without_meta(self, *keys: str) -> "Trace":
        """A copy without the given ``meta`` entries (e.g. the labels a blame method may not see)."""
        d = copy.deepcopy(self.to_dict())
        for k in keys:
            d["meta"].pop(k, None)
        return Trace.from_dict(d)

    # --- serialisation --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "id": self.id,
            "meta": self.meta,
            "nodes": [n.to_dict() for n in self.nodes],
        }

    @classmethod
    def from_dict(cls, d: Any, where: str = "trace") -> "Trace":
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise TraceError(f"{where} is not an agentgrad trace (no \"schema\": \"{SCHEMA}\" field)")
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            raise TraceError(
                f"{where} has trace schema version {version!r}; this agentgrad reads version {SCHEMA_VERSION}"
            )
        nodes, meta = d.get("nodes"), d.get("meta", {})
        if not isinstance(nodes, list):
            raise TraceError(f"{where}: \"nodes\" must be a list of node objects, got {type(nodes).__name__}")
        if not isinstance(meta, dict):
            raise TraceError(f"{where}: \"meta\" must be an object, got {type(meta).__name__}")
        tr = cls(id=str(d.get("id", "")), meta=dict(meta))
        for i, n in enumerate(nodes):
            if not isinstance(n, dict):
                raise TraceError(f"{where}: node at position {i} must be an object, got {type(n).__name__}")
            try:
                tr.nodes.append(Node.from_dict(n))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise TraceError(f"{where}: node at position {i} is malformed ({type(e).__name__}: {e})") from None
        tr.validate(where)
        return tr

    def validate(self, where: str = "trace") -> None:
        """Check ids, kinds and that every span lies inside its message and points backwards."""
        for i, n in enumerate(self.nodes):
            if n.id != i:
                raise TraceError(f"{where}: node at position {i} has id {n.id}")
            if n.kind not in NODE_KINDS:
                raise TraceError(f"{where}: node {i} has unknown kind {n.kind!r}")
            if not isinstance(n.text, str) or not isinstance(n.name, str):
                raise TraceError(f"{where}: node {i} must have a text output and a string name")
            for p in n.parents:
                if not 0 <= p < i:
                    raise TraceError(f"{where}: node {i} has parent {p}, which is not an earlier node")
            for j, m in enumerate(n.messages):
                if not isinstance(m, dict) or not isinstance(m.get("content") or "", str):
                    raise TraceError(f"{where}: node {i} message {j} must be an object with a text content")
            for s in n.spans:
                if not 0 <= s.source < i:
                    raise TraceError(f"{where}: node {i} has a span from node {s.source}, not an earlier node")
                if not 0 <= s.message < len(n.messages):
                    raise TraceError(f"{where}: node {i} has a span in message {s.message}, which does not exist")
                content = n.messages[s.message].get("content") or ""
                if not 0 <= s.start <= s.end <= len(content):
                    raise TraceError(f"{where}: node {i} has span [{s.start}, {s.end}) outside its message")

    def save(self, path: str | os.PathLike) -> Path:
        """Write the trace as JSON atomically (temporary file, fsync, rename)."""
        path = Path(path)
        write_json_atomic(path, self.to_dict())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Trace":
        from agentgrad.core.files import read_text

        path = Path(path)
        raw = read_text(path, "trace file", TraceError)
        try:
            d = json.loads(raw)
        except json.JSONDecodeError as e:
            raise TraceError(f"trace file {path} is not valid JSON (line {e.lineno}: {e.msg})") from None
        return cls.from_dict(d, where=f"trace file {path}")


def join_blocks(blocks: list[tuple[int, str, str]], message: int) -> tuple[str, list[Span]]:
    """One message made of ``(source node, header, text)`` blocks separated by a blank line, and the
    span of each text in it (``message``: the index the message will have)."""
    content, spans = "", []
    for source, header, text in blocks:
        content += ("\n\n" if content else "") + header
        spans.append(Span(source, message, len(content), len(content) + len(text)))
        content += text
    return content, spans


def current_trace() -> Trace | None:
    """The active trace of this context, if any."""
    return _CURRENT.get()


def now() -> float:
    return time.time()
