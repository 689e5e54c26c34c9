"""Bring your own logs: multi-agent logs not written with agentgrad, as ordinary agentgrad traces.

Every importer returns an :class:`ImportResult`: the traces (``input``, ``call`` and ``tool`` nodes
with exact spans, so that ``attribute`` and the blame methods work on them unchanged) and the
records that could not be read, each with the file, line or member, and field at fault. A partly
broken file imports its valid records; the broken ones are counted and reported, never dropped
silently.

Formats:

- ``chat``: JSONL, one conversation per line: a list of messages, or ``{"id"?, "messages": [...]}``;
  a message is ``{role, name?, content, tool_calls?, tool_call_id?}`` (the OpenAI shape). ``user``
  messages become input nodes, ``assistant`` messages call nodes (the agent is ``name``, else
  "assistant"), ``tool`` messages tool nodes (parent: the call that asked for them). A call's
  messages are its agent's system prompt (a ``system`` message with that ``name``, else one
  without a name) and every earlier non-system message, each a span on the node that produced it.
- ``otel``: OpenTelemetry spans exported as OTLP JSON (a file holding one export request, or one
  per line as the collector's file exporter writes them), with the GenAI semantic conventions; the
  mapping is in :func:`otel_traces` and the README.
- ``whowhen``: the Who&When failure-attribution logs (Zhang et al., ICML 2025), read from the
  archive ``who_and_when.tar.gz`` without unpacking it. Node 0 is the question (an input); history
  step ``i`` is node ``i + 1``: a call of its agent (``name``, else the role without a parenthesis:
  "Orchestrator (thought)" is the Orchestrator), whose messages are the agent's system prompt where
  the log has one and one user message holding the question and every earlier step under
  ``[NAME]`` headers (broadcast: every step reads every earlier one), each a span; a ``human``
  step is an input. The labels (``mistake_agent``, ``mistake_step`` as an int, ``mistake_node``,
  ``ground_truth``, ...) are in ``trace.meta["labels"]``.
"""

from __future__ import annotations

import json
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from agentgrad.core.trace import Node, Span, ToolCall, Trace, join_blocks
from agentgrad.errors import ConfigError

FORMATS = ("chat", "otel", "whowhen")
WHOWHEN_SUBSETS = {"hand": "Hand-Crafted", "algorithm": "Algorithm-Generated"}


@dataclass
class ImportResult:
    traces: list[Trace] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # "where: what is wrong", one per record not imported


class _Bad(Exception):
    """A record that cannot be imported (the message names the field)."""


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Bad(f"{what} must be a string")
    return value


# --- chat --------------------------------------------------------------------------------------
def chat_trace(messages: Any, id: str = "") -> Trace:
    """One conversation (a list of OpenAI-shaped messages) as a trace."""
    if not isinstance(messages, list):
        raise _Bad("messages must be a list")
    trace = Trace(id=id, meta={"imported": "chat"})
    systems: dict[str | None, str] = {}
    seen: list[tuple[int, str]] = []  # (node id, role as the next call sees it) of earlier messages
    asked: dict[str, int] = {}  # tool_call_id -> the call node that asked
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _Bad(f"message {i} must be an object")
        role = m.get("role")
        content = _text(m.get("content"), f"message {i} field 'content'")
        name = m.get("name")
        if name is not None and not isinstance(name, str):
            raise _Bad(f"message {i} field 'name' must be a string")
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
            calls = []
            for j, c in enumerate(m.get("tool_calls") or []):
                try:
                    f = c.get("function", c)
                    args = f.get("arguments", {})
                    calls.append(ToolCall(name=str(f["name"]), arguments=json.loads(args) if isinstance(args, str)
                                          else dict(args), id=str(c.get("id") or f"call_{i}_{j}")))
                except (AttributeError, KeyError, TypeError, ValueError):
                    raise _Bad(f"message {i} tool_calls[{j}] needs a function name and JSON arguments") from None
            node = trace.add(Node(id=-1, kind="call", name=agent, text=content, tool_calls=calls, messages=msgs,
                                  spans=spans, parents=sorted({s.source for s in spans}), meta={"message": i}))
            for c in calls:
                asked[c.id] = node.id
        else:
            raise _Bad(f"message {i} has role {role!r}; use system, user, assistant or tool")
        seen.append((node.id, role))
    if not trace.calls():
        raise _Bad("no assistant message: nothing to attribute")
    return trace


def import_chat(path: str | Path) -> ImportResult:
    """Every conversation of a JSONL file; broken lines are reported with their line number."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {p}: {e}") from None
    out = ImportResult()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise _Bad(f"not JSON ({e.msg})") from None
            messages, cid = (rec.get("messages"), rec.get("id")) if isinstance(rec, dict) else (rec, None)
            out.traces.append(chat_trace(messages, str(cid) if cid is not None else f"line-{n}"))
        except _Bad as e:
            out.broken.append(f"{p}:{n}: {e}")
    return out


# --- OpenTelemetry (OTLP JSON, GenAI semantic conventions) -------------------------------------
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
        raise _Bad("'attributes' must be a list")
    out = {}
    for a in items:
        if not isinstance(a, dict) or "key" not in a:
            raise _Bad("an attribute needs a 'key'")
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
        raise _Bad("field 'resourceSpans' must be a list")
    spans: list[dict[str, Any]] = []
    for rs in doc["resourceSpans"]:
        for ss in (rs or {}).get("scopeSpans") or (rs or {}).get("instrumentationLibrarySpans") or []:
            for sp in (ss or {}).get("spans") or []:
                if not isinstance(sp, dict) or not sp.get("spanId") or not sp.get("traceId"):
                    raise _Bad("every span needs 'traceId' and 'spanId'")
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
                    docs.append((n, _Bad(f"not JSON ({e.msg})")))
    out = ImportResult()
    for n, doc in docs:
        try:
            if isinstance(doc, _Bad):
                raise doc
            out.traces.extend(otel_traces(doc))
        except _Bad as e:
            out.broken.append(f"{p}:{n}: {e}")
    return out


# --- Who&When ----------------------------------------------------------------------------------
def _agent(step: dict[str, Any]) -> str:
    name = step.get("name")
    if isinstance(name, str) and name:
        return name
    return re.sub(r"\s*\(.*\)\s*$", "", str(step.get("role", ""))).strip() or "unknown"


def whowhen_trace(log: Any, id: str, subset: str) -> Trace:
    """One Who&When log as a broadcast trace, its labels in ``meta["labels"]``."""
    if not isinstance(log, dict):
        raise _Bad("the log must be an object")
    history = log.get("history")
    if not isinstance(history, list) or not history:
        raise _Bad("field 'history' must be a non-empty list")
    question = _text(log.get("question"), "field 'question'")
    try:
        step = int(str(log.get("mistake_step")))
    except ValueError:
        raise _Bad(f"field 'mistake_step' must be a step number, got {log.get('mistake_step')!r}") from None
    if not 0 <= step < len(history):
        raise _Bad(f"field 'mistake_step' {step} is outside the history (0-{len(history) - 1})")
    prompts = log.get("system_prompt") if isinstance(log.get("system_prompt"), dict) else {}
    trace = Trace(id=id, meta={"imported": "whowhen"})
    q = trace.add(Node(id=-1, kind="input", name="question", text=question))
    for i, s in enumerate(history):
        if not isinstance(s, dict):
            raise _Bad(f"history[{i}] must be an object")
        content = _text(s.get("content"), f"history[{i}] field 'content'")
        agent = _agent(s)
        meta = {"step": i, "role": s.get("role")}
        if s.get("role") == "human":
            trace.add(Node(id=-1, kind="input", name=agent, text=content, meta=meta))
            continue
        system = prompts.get(agent) if isinstance(prompts.get(agent), str) else None
        user, spans = join_blocks([(src, "[question]\n" if src == q.id else f"[{trace.nodes[src].name}]\n",
                                    trace.nodes[src].text) for src in range(q.id, len(trace.nodes))],
                                  1 if system is not None else 0)
        msgs = ([{"role": "system", "content": system}] if system is not None else []) + [
            {"role": "user", "content": user}]
        trace.add(Node(id=-1, kind="call", name=agent, text=content, messages=msgs, spans=spans,
                       parents=list(range(q.id, len(trace.nodes))), meta=meta))
    labels = {k: log.get(k) for k in ("mistake_agent", "mistake_reason", "ground_truth", "question_ID", "level",
                                       "is_correct", "is_corrected") if k in log}
    labels.update(mistake_step=step, mistake_node=step + 1, subset=subset)
    trace.meta["labels"] = labels
    return trace


def _whowhen_members(path: Path) -> Iterator[tuple[str, str, Any]]:
    """(subset, file stem, parsed JSON or the _Bad that reading it raised) of every log in the archive."""
    try:
        tar = tarfile.open(path)
    except FileNotFoundError:
        raise ConfigError(f"the Who&When archive {path} does not exist") from None
    except (OSError, tarfile.TarError):
        raise ConfigError(f"cannot read the Who&When archive {path}: not a .tar.gz archive") from None
    with tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            parts = m.name.split("/")
            if not m.isfile() or not m.name.endswith(".json") or len(parts) < 2:
                continue
            subset = next((k for k, v in WHOWHEN_SUBSETS.items() if v == parts[-2]), None)
            if subset is None:
                continue
            try:
                yield subset, Path(parts[-1]).stem, json.loads(tar.extractfile(m).read())  # type: ignore[union-attr]
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                yield subset, Path(parts[-1]).stem, _Bad(f"not JSON ({e})")


def whowhen_archive(data: str | Path | None = None) -> Path:
    from agentgrad.benchmarks.data import benchmark_dir

    return benchmark_dir("whowhen", data) / "who_and_when.tar.gz"


def import_whowhen(path: str | Path | None = None, subset: str = "all") -> ImportResult:
    """The Who&When logs of ``subset`` (hand, algorithm or all) from the archive (default: the data directory's)."""
    if subset not in ("all", *WHOWHEN_SUBSETS):
        raise ConfigError(f"unknown Who&When subset {subset!r}; valid: hand, algorithm, all")
    p = Path(path) if path is not None else whowhen_archive()
    out = ImportResult()
    for sub, stem, log in _whowhen_members(p):
        if subset != "all" and sub != subset:
            continue
        try:
            if isinstance(log, _Bad):
                raise log
            out.traces.append(whowhen_trace(log, f"{sub}-{stem}", sub))
        except _Bad as e:
            out.broken.append(f"{p}:{WHOWHEN_SUBSETS[sub]}/{stem}.json: {e}")
    return out


def import_logs(fmt: str, src: str | Path | None, subset: str = "all") -> ImportResult:
    if fmt == "chat":
        if src is None:
            raise ConfigError("import chat needs a JSONL file")
        return import_chat(src)
    if fmt == "whowhen":
        return import_whowhen(src, subset)
    if fmt == "otel":
        if src is None:
            raise ConfigError("import otel needs an OTLP JSON file")
        return import_otel(src)
    raise ConfigError(f"unknown log format {fmt!r}; valid: {', '.join(FORMATS)}")
