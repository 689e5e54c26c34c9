"""``openinference``: OpenInference spans (Arize Phoenix, the OpenInference instrumentors) as traces.

OpenInference puts everything on span attributes, lists flattened with indices
(``llm.input_messages.0.message.role``). The mapping, span by span in start-time order
(:func:`openinference_trace`):

- ``openinference.span.kind`` = ``LLM``: a call node. Messages: ``llm.input_messages.<i>.message.``
  ``role``, ``content`` (or the ``text`` items of ``contents.<j>.message_content``), ``tool_calls.<k>.
  tool_call.{id,function.name,function.arguments}``, ``tool_call_id``, ``name``; else
  ``llm.prompts.<i>.prompt.text`` (completions). Output: ``llm.output_messages.<i>.message.``
  ``content``/``contents``/``tool_calls``, else ``llm.choices.<i>.completion.text``. Tools offered:
  ``llm.tools.<i>.tool.json_schema``; model ``llm.model_name``; settings ``llm.invocation_parameters``;
  usage ``llm.token_count.{prompt,completion}``.
- ``TOOL``: a tool node named ``tool.name`` (else the span name), its text ``output.value`` (the
  ``content`` of a serialised tool message), its call id ``tool_call.id`` / ``tool.id``. A TOOL span
  that records a handoff (the Agents SDK's ``handoff to B``: ``input.value`` / ``output.value`` the two
  agents) is a graph edge, not a node.
- The agent of a call: ``agent.name`` (or ``gen_ai.agent.name``) on it or its nearest ancestor,
  an ancestor ``AGENT`` span's ``graph.node.id`` or name (smolagents' ``<agent>.run`` without its
  ``.run``: managed agents by their names, the manager by its class), or LangGraph's node (the first
  ``langgraph_checkpoint_ns`` segment, else ``langgraph_node``, of the span's ``metadata``); a call
  outside every agent is the ``harness`` (the app's own code), never an agent named after a method.
- ``AGENT`` and ``CHAIN`` spans are not nodes; their ``graph.node.id`` / ``graph.node.parent_id``
  and the handoffs make ``trace.meta["graph"]`` (agent -> the agents it came from), and an agent's
  first call gets the latest call of each agent it came from as a (structural) parent.

Predecessors come from the message-overlap and tool-call rules of :mod:`agentgrad.importers.build`.
An LLM span that records no input messages or no output (an instrumentor told to hide them:
``OPENINFERENCE_HIDE_INPUTS``, ``..._HIDE_INPUT_MESSAGES``, ``..._HIDE_OUTPUTS``, or text replaced by
``__REDACTED__``) breaks its trace: its inputs cannot be attributed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentgrad.core.trace import ToolCall, Trace
from agentgrad.importers.base import BadRecord
from agentgrad.importers.build import TraceBuilder
from agentgrad.importers.otlp import OPENINFERENCE_KIND, OtlpSpan

REDACTED = "__REDACTED__"
HARNESS = "harness"  # a model call outside any agent (the app's own code around the agents)
HIDDEN = ("the instrumentor hid it (OPENINFERENCE_HIDE_INPUTS, OPENINFERENCE_HIDE_OUTPUTS, ..._MESSAGES or "
          "..._TEXT, or TraceConfig(hide_...=True)); export with content recorded to attribute it")


_INDEXED = re.compile(r"^(.+?)\.(\d+)\.(.+)$")


def lists(attrs: dict[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    """Every flattened list of a span at once (one pass over its attributes): ``prefix.<i>.rest = v`` ->
    ``{prefix: {i: {rest: v}}}``; ``rest`` may hold inner lists, read with :func:`indexed`."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for k, v in attrs.items():
        m = _INDEXED.match(k)
        if m is not None:
            out.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = v
    return out


def indexed(attrs: dict[str, Any], prefix: str, grouped: dict[str, dict[int, dict[str, Any]]] | None = None
            ) -> list[dict[str, Any]]:
    """The objects of a flattened list attribute: ``prefix.<i>.rest`` -> ``[{rest: value}, ...]`` by ``i``
    (an unflattened list of objects under ``prefix`` itself is taken as it is). ``grouped``: the
    span's :func:`lists`, when already made."""
    whole = attrs.get(prefix)
    if isinstance(whole, list) and all(isinstance(x, dict) for x in whole):
        return whole
    items = (grouped if grouped is not None else lists(attrs)).get(prefix) or {}
    return [items[i] for i in sorted(items)]


def _text(msg: dict[str, Any], where: str) -> str:
    content = msg.get("message.content")
    if content is None and any(k.startswith("message.contents") for k in msg):
        parts = [str(c.get("message_content.text", "")) for c in indexed(msg, "message.contents")
                 if c.get("message_content.type", "text") == "text" and c.get("message_content.text") is not None]
        content = "".join(parts)
    if content is None:
        content = ""
    elif not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    if content == REDACTED:
        raise BadRecord(f"{where} is {REDACTED}: {HIDDEN}")
    return content


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return {"_raw": raw}
    return dict(raw) if isinstance(raw, dict) else {"_value": raw}


def _tool_calls(msg: dict[str, Any]) -> list[ToolCall]:
    out: list[ToolCall] = []
    if not any(k.startswith("message.tool_calls") for k in msg):
        return out
    for c in indexed(msg, "message.tool_calls"):
        out.append(ToolCall(name=str(c.get("tool_call.function.name") or ""),
                            arguments=_arguments(c.get("tool_call.function.arguments")),
                            id=str(c.get("tool_call.id") or "")))
    return out


def _function_results(m: dict[str, Any], msg: dict[str, Any]) -> None:
    """AutoGen AgentChat's instrumentor records a tool result message as ``role: function`` with its results
    as JSON under ``function.<i>`` (``name``, ``content``, ``call_id``), not as ``message.content``: read
    them as the message's content and tool call id."""
    results = [r for r in (_json(v) for k, v in sorted(m.items()) if re.fullmatch(r"function\.\d+", k))
               if isinstance(r, dict) and isinstance(r.get("content"), str)]
    if results:
        msg["content"] = "\n".join(r["content"] for r in results)
        if len(results) == 1 and results[0].get("call_id"):
            msg["tool_call_id"] = str(results[0]["call_id"])


def _messages(attrs: dict[str, Any], sid: str, grouped: dict[str, Any]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for i, m in enumerate(indexed(attrs, "llm.input_messages", grouped)):
        msg: dict[str, Any] = {"role": str(m.get("message.role") or "user"),
                               "content": _text(m, f"LLM span {sid}: input message {i}")}
        calls = _tool_calls(m)
        if calls:
            msg["tool_calls"] = [c.to_dict() for c in calls]
        if m.get("message.tool_call_id"):
            msg["tool_call_id"] = str(m["message.tool_call_id"])
        if m.get("message.name"):
            msg["name"] = str(m["message.name"])
        if not msg["content"]:
            _function_results(m, msg)
        msgs.append(msg)
    if not msgs:
        for p in indexed(attrs, "llm.prompts", grouped):
            text = p.get("prompt.text")
            if text == REDACTED:
                raise BadRecord(f"LLM span {sid}: its prompt is {REDACTED}: {HIDDEN}")
            msgs.append({"role": "user", "content": str(text or "")})
    return msgs


def _output(attrs: dict[str, Any], sid: str, grouped: dict[str, Any]) -> tuple[str, list[ToolCall]] | None:
    outs = indexed(attrs, "llm.output_messages", grouped)
    if outs:
        texts = [_text(m, f"LLM span {sid}: output message {i}") for i, m in enumerate(outs)]
        return "\n".join(t for t in texts if t), [c for m in outs for c in _tool_calls(m)]
    choices = indexed(attrs, "llm.choices", grouped)
    if choices:
        return "\n".join(str(c.get("completion.text") or "") for c in choices), []
    return None


def _json(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return None
    return v


def _langgraph_node(attrs: dict[str, Any]) -> str | None:
    meta = attrs.get("metadata")
    if not isinstance(meta, str) or "langgraph" not in meta:
        return None
    meta = _json(meta)
    if not isinstance(meta, dict):
        return None
    ns = meta.get("langgraph_checkpoint_ns")
    if isinstance(ns, str) and ns:
        return ns.split("|")[0].split(":")[0] or None
    node = meta.get("langgraph_node")
    return str(node) if node else None


def _label(sp: OtlpSpan) -> str | None:
    """The agent a span names itself, if any (see the module docstring)."""
    a = sp.attrs
    name = a.get("agent.name") or a.get("gen_ai.agent.name")
    if name:
        return str(name)
    if str(a.get(OPENINFERENCE_KIND, "")).upper() == "AGENT":
        # smolagents names its agent spans "<agent>.run" (the manager at the root: its class)
        return str(a.get("graph.node.id") or (sp.name[:-4] if sp.name.endswith(".run") else sp.name))
    return _langgraph_node(a)


def _tool_text(attrs: dict[str, Any]) -> str:
    out = attrs.get("output.value")
    if out is None:
        return ""
    if out == REDACTED:
        raise BadRecord(f"a tool span's output.value is {REDACTED}: {HIDDEN}")
    if not isinstance(out, str):
        return json.dumps(out, ensure_ascii=False)
    if attrs.get("output.mime_type") == "application/json" and out.startswith("{"):
        d = _json(out)
        if isinstance(d, dict) and isinstance(d.get("content"), str) and (d.get("type") == "tool"
                                                                          or "tool_call_id" in d):
            return d["content"]  # a serialised tool message: the text the next call reads
    return out


def _task(spans: list[OtlpSpan]) -> str | None:
    """What the app was asked, as its root agent received it: the root span's ``input.value`` when that is
    an AGENT span's JSON with a ``task`` (smolagents' ``run(task)``, which its first prompt wraps in ``New
    task:``); None otherwise."""
    ids = {sp.span_id for sp in spans}
    root = next((sp for sp in spans if sp.parent not in ids), None)
    if root is None or str(root.attrs.get(OPENINFERENCE_KIND, "")).upper() != "AGENT":
        return None
    value = _json(root.attrs.get("input.value"))
    task = value.get("task") if isinstance(value, dict) else None
    return task if isinstance(task, str) and task.strip() else None


def openinference_trace(trace_id: str, spans: list[OtlpSpan]) -> Trace:
    """One trace tree's spans (start-time order, tree checked) as a trace; see the module docstring."""
    by_id = {sp.span_id: sp for sp in spans}
    agent_of: dict[str, str | None] = {}

    def agent(sp: OtlpSpan) -> str | None:
        chain = []
        at: OtlpSpan | None = sp
        found = None
        while at is not None:
            if at.span_id in agent_of:
                found = agent_of[at.span_id]
                break
            chain.append(at.span_id)
            found = _label(at)
            if found:
                break
            at = by_id.get(at.parent)
        for s in chain:
            agent_of[s] = found
        return found

    b = TraceBuilder(trace_id, "openinference")
    graph: dict[str, list[str]] = {}
    first_call_seen: set[str] = set()
    for sp in spans:
        kind = str(sp.attrs.get(OPENINFERENCE_KIND, "")).upper()
        a = sp.attrs
        meta = {"span_id": sp.span_id, "span_name": sp.name, "attributes": a,
                **({"error": sp.failure()} if sp.failure() else {})}
        if sp.failure() and kind not in ("LLM", "TOOL"):  # an agent's or a chain's failure: not a node's
            b.trace.meta.setdefault("errors", []).append({"span_id": sp.span_id, "span_name": sp.name,
                                                          "error": sp.failure(), "agent": agent(sp)})
        if kind in ("AGENT", "CHAIN") and a.get("graph.node.id"):
            parent_node = a.get("graph.node.parent_id")
            node_id = str(a["graph.node.id"])
            graph.setdefault(node_id, [])
            if parent_node and str(parent_node) not in graph[node_id]:
                graph[node_id].append(str(parent_node))
        elif kind == "LLM":
            grouped = lists(a)
            msgs = _messages(a, sp.span_id, grouped)
            if not msgs or all(not m["content"] and not m.get("tool_calls") for m in msgs):
                raise BadRecord(f"LLM span {sp.span_id} ({sp.name}) records no input messages: {HIDDEN}")
            out = _output(a, sp.span_id, grouped)
            if out is None:
                raise BadRecord(f"LLM span {sp.span_id} ({sp.name}) records no output messages: {HIDDEN}")
            text, calls = out
            name = agent(sp) or HARNESS
            parents = []
            if name not in first_call_seen:  # a handoff or graph edge into this agent: its first call reads it
                first_call_seen.add(name)
                parents = [b.last_call[p] for p in graph.get(name, []) if p in b.last_call]
            usage = {k: int(a[f"llm.token_count.{v}"]) for k, v in (("prompt_tokens", "prompt"),
                     ("completion_tokens", "completion")) if isinstance(a.get(f"llm.token_count.{v}"), int)}
            settings = _json(a.get("llm.invocation_parameters"))
            tools = [t for t in (_json(x.get("tool.json_schema")) for x in indexed(a, "llm.tools", grouped)) if isinstance(t, dict)]
            b.call(name, msgs, text, calls, parents=parents, tools=tools, usage=usage,
                   model={"name": a.get("llm.model_name"), "provider": a.get("llm.provider") or a.get("llm.system")},
                   settings=settings if isinstance(settings, dict) else {}, meta=meta)
        elif kind == "TOOL":
            if not a.get("tool.name") and sp.name.startswith("handoff to "):
                src, dst = a.get("input.value"), a.get("output.value")
                if isinstance(src, str) and isinstance(dst, str):
                    graph.setdefault(dst, [])
                    if src not in graph[dst]:
                        graph[dst].append(src)
                continue
            b.tool(str(a.get("tool.name") or sp.name or "tool"), _tool_text(a),
                   call_id=str(a.get("tool_call.id") or a.get("tool.id") or a.get("gen_ai.tool.call.id") or ""),
                   agent=agent(sp), meta=meta)
    if graph:
        b.trace.meta["graph"] = graph
    task = _task(spans)
    if task is not None:
        b.trace.meta["task"] = task
    if not b.trace.calls():
        raise BadRecord("no LLM span (openinference.span.kind LLM): nothing to attribute")
    return b.trace
