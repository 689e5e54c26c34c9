"""``otel``: OpenTelemetry spans as OTLP JSON with the GenAI semantic conventions (see :mod:`agentgrad.importers`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgrad.core.trace import Node, Span, ToolCall, Trace
from agentgrad.errors import ConfigError
from agentgrad.importers.base import ImportResult, BadRecord

LLM_OPERATIONS = {"chat", "text_completion", "generate_content"}


def _otel_value(v: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value."""
    if not isinstance(v, dict):
        return v
    for k in ("stringValue", "boolValue", "doubleValue"):
        if k in v:
            return v[k]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_otel_value(x) for x in v["arrayValue"].get("values", [])]
    if "kvlistValue" in v:
        return _otel_attrs(v["kvlistValue"].get("values", []))
    return None


def _otel_attrs(items: Any) -> dict[str, Any]:
    if not isinstance(items, list):
        raise BadRecord("'attributes' must be a list")
    out = {}
    for a in items:
        if not isinstance(a, dict) or "key" not in a:
            raise BadRecord("an attribute needs a 'key'")
        out[str(a["key"])] = _otel_value(a.get("value"))
    return out


def _json_value(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return v
    return v


def _parts_text(m: dict[str, Any]) -> str:
    """The text of a GenAI message: ``content`` or the ``text`` parts (``gen_ai.input.messages`` shape)."""
    if isinstance(m.get("content"), str):
        return m["content"]
    texts = [str(p.get("content", "")) for p in m.get("parts") or [] if isinstance(p, dict) and p.get("type") == "text"]
    return "\n".join(texts)


def _parts_calls(m: dict[str, Any]) -> list[ToolCall]:
    calls = []
    for p in m.get("parts") or []:
        if isinstance(p, dict) and p.get("type") == "tool_call":
            calls.append(ToolCall(name=str(p.get("name", "")), arguments=_json_value(p.get("arguments")) or {},
                                  id=str(p.get("id", ""))))
    for c in m.get("tool_calls") or []:
        f = c.get("function", c) if isinstance(c, dict) else {}
        calls.append(ToolCall(name=str(f.get("name", "")), arguments=_json_value(f.get("arguments")) or {},
                              id=str(c.get("id", ""))))
    return calls


def _llm_io(attrs: dict[str, Any], events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str, list[ToolCall]]:
    """(input messages, output text, output tool calls) of an LLM span, from whichever convention it uses."""
    msgs: list[dict[str, Any]] = []
    if attrs.get("gen_ai.system_instructions") is not None:  # v1.37+: attributes holding JSON
        sys_parts = _json_value(attrs["gen_ai.system_instructions"])
        text = sys_parts if isinstance(sys_parts, str) else _parts_text({"parts": sys_parts})
        msgs.append({"role": "system", "content": text})
    if attrs.get("gen_ai.input.messages") is not None:
        for m in _json_value(attrs["gen_ai.input.messages"]) or []:
            msgs.append({"role": m.get("role", "user"), "content": _parts_text(m)})
    for e in events:  # v1.26-1.36: one event per message
        name = e.get("name", "")
        ea = _otel_attrs(e.get("attributes", []))
        role = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}.get(name)
        if role:
            msgs.append({"role": role, "content": str(ea.get("content", ""))})
    i = 0
    while f"gen_ai.prompt.{i}.role" in attrs or f"gen_ai.prompt.{i}.content" in attrs:  # flattened attributes
        msgs.append({"role": attrs.get(f"gen_ai.prompt.{i}.role", "user"),
                     "content": str(attrs.get(f"gen_ai.prompt.{i}.content", ""))})
        i += 1
    text, calls = "", []
    if attrs.get("gen_ai.output.messages") is not None:
        outs = _json_value(attrs["gen_ai.output.messages"]) or []
        text = "\n".join(_parts_text(m) for m in outs)
        calls = [c for m in outs for c in _parts_calls(m)]
    choice = next((e for e in events if e.get("name") == "gen_ai.choice"), None)
    if choice is not None and not text and not calls:
        ca = _otel_attrs(choice.get("attributes", []))
        message = _json_value(ca.get("message", {}))
        message = message if isinstance(message, dict) else {"content": str(message)}
        text, calls = _parts_text(message), _parts_calls(message)
    if not text and not calls and "gen_ai.completion.0.content" in attrs:
        text = str(attrs["gen_ai.completion.0.content"])
    return msgs, text, calls


def otel_traces(doc: Any) -> list[Trace]:
    """The traces of one OTLP JSON export request (``resourceSpans``), one agentgrad trace per trace id.

    Mapping: an LLM span (``gen_ai.operation.name`` chat / text_completion / generate_content) is a
    call node: its agent is ``gen_ai.agent.name`` on it or on the nearest ``invoke_agent`` ancestor,
    else the span name; its messages and output come from ``gen_ai.system_instructions`` /
    ``gen_ai.input.messages`` / ``gen_ai.output.messages``, or the ``gen_ai.*.message`` and
    ``gen_ai.choice`` events, or ``gen_ai.prompt.N.*`` / ``gen_ai.completion.0.content``. An
    ``execute_tool`` span is a tool node (``gen_ai.tool.name``; its text ``gen_ai.tool.call.result``;
    its parent the call whose tool call has its ``gen_ai.tool.call.id``, else the call that precedes
    it under the same parent span). A message whose text is an earlier node's output is a span on
    that node; other user messages become input nodes. Links to spans that are nodes add parents.
    Spans are taken in start-time order; every attribute is kept in the node's ``meta``.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
        raise BadRecord("field 'resourceSpans' must be a list")
    spans: list[dict[str, Any]] = []
    for rs in doc["resourceSpans"]:
        for ss in (rs or {}).get("scopeSpans") or (rs or {}).get("instrumentationLibrarySpans") or []:
            for sp in (ss or {}).get("spans") or []:
                if not isinstance(sp, dict) or not sp.get("spanId") or not sp.get("traceId"):
                    raise BadRecord("every span needs 'traceId' and 'spanId'")
                spans.append(sp)
    by_id = {sp["spanId"]: sp for sp in spans}
    out: list[Trace] = []
    for trace_id in dict.fromkeys(sp["traceId"] for sp in spans):
        mine = sorted((sp for sp in spans if sp["traceId"] == trace_id),
                      key=lambda sp: (int(sp.get("startTimeUnixNano") or 0), sp["spanId"]))
        trace = Trace(id=str(trace_id), meta={"imported": "otel"})
        node_of: dict[str, int] = {}
        produced: dict[str, int] = {}  # text -> the latest node that produced it
        asked: dict[str, int] = {}  # tool call id -> call node
        last_call_under: dict[str, int] = {}  # parent span id -> latest call node under it
        for sp in mine:
            attrs = _otel_attrs(sp.get("attributes", []))
            op = attrs.get("gen_ai.operation.name")
            meta = {"span_id": sp["spanId"], "span_name": sp.get("name"), "attributes": attrs}
            parent_span = sp.get("parentSpanId") or ""
            if op in LLM_OPERATIONS:
                agent = attrs.get("gen_ai.agent.name")
                anc = by_id.get(parent_span)
                while agent is None and anc is not None:
                    aa = _otel_attrs(anc.get("attributes", []))
                    agent = aa.get("gen_ai.agent.name") if aa.get("gen_ai.operation.name") == "invoke_agent" else None
                    anc = by_id.get(anc.get("parentSpanId") or "")
                msgs, text, calls = _llm_io(attrs, sp.get("events") or [])
                node_spans = []
                for j, m in enumerate(msgs):
                    content = m["content"]
                    if m["role"] == "system" or not content:
                        continue
                    src = produced.get(content)
                    if src is None and m["role"] == "user":
                        src = trace.add(Node(id=-1, kind="input", name="user", text=content)).id
                        produced[content] = src
                    if src is not None:
                        node_spans.append(Span(src, j, 0, len(content)))
                linked = [node_of[lk.get("spanId")] for lk in sp.get("links") or [] if lk.get("spanId") in node_of]
                node = trace.add(Node(id=-1, kind="call", name=str(agent or sp.get("name") or "llm"), text=text,
                                      tool_calls=calls, messages=msgs, spans=node_spans,
                                      parents=sorted({s.source for s in node_spans} | set(linked)), meta=meta))
                for c in calls:
                    if c.id:
                        asked[c.id] = node.id
                last_call_under[parent_span] = node.id
            elif op == "execute_tool":
                call_id = str(attrs.get("gen_ai.tool.call.id", ""))
                parent = asked.get(call_id, last_call_under.get(parent_span))
                result = attrs.get("gen_ai.tool.call.result", "")
                node = trace.add(Node(id=-1, kind="tool", name=str(attrs.get("gen_ai.tool.name") or sp.get("name")),
                                      text=result if isinstance(result, str) else json.dumps(result),
                                      parents=[parent] if parent is not None else [], meta=meta))
            else:
                continue
            node_of[sp["spanId"]] = node.id
            if node.text:
                produced[node.text] = node.id
        if trace.calls():
            out.append(trace)
    return out


def import_otel(path: str | Path) -> ImportResult:
    """The traces of an OTLP JSON file (one export request, or one per line); broken lines are reported."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {p}: {e}") from None
    try:
        docs = [(1, json.loads(text))]
    except json.JSONDecodeError:
        docs = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    docs.append((n, json.loads(line)))
                except json.JSONDecodeError as e:
                    docs.append((n, BadRecord(f"not JSON ({e.msg})")))
    out = ImportResult()
    for n, doc in docs:
        try:
            if isinstance(doc, BadRecord):
                raise doc
            out.traces.extend(otel_traces(doc))
        except BadRecord as e:
            out.broken.append(f"{p}:{n}: {e}")
    return out
