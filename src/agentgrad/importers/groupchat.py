"""``groupchat``: multi-agent conversations as the frameworks write them, one reader for all of them.

A group chat is a list of messages each said by a named agent: Magentic-One's logs and Who&When's
``history`` (``role`` "Orchestrator (-> WebSurfer)", "WebSurfer", ..., ``human`` for the task),
AutoGen AgentChat's ``TaskResult.messages`` (``source``, ``type``, ``content``; a selector's
``SelectSpeakerEvent``, where the team emits them, is a call of the manager addressed to the speaker it
chose, which no agent reads: its only edge out is to that speaker's next message), AG2's group chat
``messages`` (``name`` beside an OpenAI ``role``), LangGraph messages with a ``name``. The speaker is
``name``, else ``source``, else the role: ``X (-> Y)`` is X speaking to Y (``meta["to"]``),
``X (thought)`` X's own reasoning, any other parenthesis X. A message of the user (``human``, or
``user`` / ``user_proxy`` without another agent's name) is an input; ``system`` messages are the
agents' prompts (by ``name``, else everyone's); AutoGen's ``ToolCallRequestEvent`` becomes the
requesting call's tool calls and ``ToolCallExecutionEvent`` one tool node per result, whose parent is
the call that asked; OpenAI ``tool_calls`` on a message and ``tool`` messages (AG2's, with their
``tool_responses``) the same. Every other message is a call of its speaker. A list whose messages name
their speakers in two of these ways is refused (:func:`one_shape`).

The data flow of a group chat is a broadcast: every message is visible to every later speaker. A
call's messages are its agent's prompt (where the log has one) and one user message holding every
earlier message under a ``[NAME]`` header, each a span on the node that wrote it
(:func:`~agentgrad.core.trace.join_blocks`); its parents are every earlier node. The Who&When
importer is this reader with the log's question as node 0 (:func:`agentgrad.importers.whowhen.whowhen_trace`).

Of a call's broadcast edges, some say more than that the text was there: an explicit address (the
instruction ``X (-> Y)`` that Y's next message answers, AutoGen's handoff), the reply to the speaker's
own last address, and the earlier outputs a call quotes. :func:`preferred_edges` finds them;
:func:`prefer_addressed` keeps only those edges (the speaker's own last message, its tool results and
the task beside them) on every call that has any, the rest of its context still rendered as the model
read it (``agentgrad blame --edges addressed``; the default keeps every edge: docs/agentrx.md).
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentgrad.core.trace import Node, Trace, join_blocks
from agentgrad.importers.base import BadRecord, text_field, tool_calls
from agentgrad.importers.overlap import Produced

CHAT_ROLES = ("system", "user", "assistant", "tool", "function", "developer")
USER = re.compile(r"^(human|user)([ _-]?proxy)?$", re.IGNORECASE)
ROLE = re.compile(r"^\s*(?P<agent>[^()]*?)\s*(?:\((?P<note>[^()]*)\))?\s*$")


def speaker(msg: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """``(agent, addressee, note)`` of one message: the agent from ``name``, ``source`` or the role
    (``X (-> Y)``: X to Y; ``X (thought)``: note ``thought``)."""
    role = str(msg.get("role") or "")
    m = ROLE.match(role)
    agent, note = (m.group("agent"), m.group("note")) if m else (role, None)
    to = None
    if note and note.strip().startswith("->"):
        to, note = note.strip()[2:].strip() or None, None
    named = msg.get("name") if isinstance(msg.get("name"), str) and msg.get("name") else msg.get("source")
    if isinstance(named, str) and named:
        agent = named
    target = msg.get("target")  # AutoGen's HandoffMessage
    if to is None and isinstance(target, str) and target:
        to = target
    return agent.strip(), to, (note.strip() if note else None)


def is_group_chat(messages: list[Any]) -> bool:
    """Whether a message list names its speakers (a group chat) rather than being a chat in the OpenAI
    shape (whose assistant messages may carry their agent's ``name``: :mod:`agentgrad.importers.chat`):
    some message has a ``source``, a role that is not a chat role, or ``user`` messages carry two
    names or more (AG2's group chat: every agent's message is a ``user`` message with its name)."""
    names = set()
    for m in messages:
        if not isinstance(m, dict):
            continue
        if "source" in m or (m.get("role") is not None and str(m.get("role")) not in CHAT_ROLES):
            return True
        if m.get("role") == "user" and isinstance(m.get("name"), str):
            names.add(m["name"])
    return len(names) >= 2


def _shape(m: Any) -> str | None:
    """How a message names its speaker (None for a system message, a plain task and a non-object, which
    fit every shape): AutoGen's ``source``, an OpenAI role (AG2, LangGraph, a chat), or the agent's name
    as the role (Magentic-One, Who&When)."""
    if not isinstance(m, dict) or m.get("role") in ("system", "developer"):
        return None
    if "source" in m:
        return "AutoGen's source"
    if m.get("role") == "human" or (m.get("role") == "user" and not m.get("name")):
        return None
    return "an OpenAI role" if str(m.get("role")) in CHAT_ROLES else "the agent's name as its role"


def one_shape(messages: list[Any]) -> None:
    """Refuse, in one line, a list whose messages name their speakers in two ways (logs of two frameworks
    joined, or one edited by hand): which agent spoke would be a guess."""
    first: dict[str, int] = {}
    for i, m in enumerate(messages):
        shape = _shape(m)
        if shape is not None:
            first.setdefault(shape, i)
            if len(first) > 1:
                (a, i0), (b, i1) = sorted(first.items(), key=lambda kv: kv[1])
                raise BadRecord(f"message {i1} names its speaker by {b} and message {i0} by {a}: mixed shapes "
                                f"in one list; give one framework's log per file")


def _content(m: dict[str, Any], i: int) -> str:
    c = m.get("content")
    if isinstance(c, list):  # AutoGen's multimodal or event content: the text parts, the rest as JSON
        return "\n".join(x if isinstance(x, str) else json.dumps(x, ensure_ascii=False) for x in c)
    if isinstance(c, dict):
        return json.dumps(c, ensure_ascii=False)
    return text_field(c, f"message {i} field 'content'")


def group_chat_trace(messages: Any, id: str = "", question: str | None = None,
                     prompts: dict[str, str] | None = None, imported: str = "groupchat") -> Trace:
    """One group chat (a list of agent-named messages) as a broadcast trace (see the module docstring).

    Args:
        question: the task as node 0 (an input named ``question``), for logs that keep it apart
            (Who&When); else the first message of the user is the task.
        prompts: agent -> system prompt, where the log keeps them apart (Who&When's ``system_prompt``).
        imported: what ``trace.meta["imported"]`` names.
    """
    if not isinstance(messages, list) or not messages:
        raise BadRecord("the messages must be a non-empty list")
    one_shape(messages)
    trace = Trace(id=id, meta={"imported": imported})
    prompts = {k: v for k, v in (prompts or {}).items() if isinstance(v, str)}
    first = trace.add(Node(id=-1, kind="input", name="question", text=question)).id if question is not None else 0
    asked: dict[str, int] = {}  # tool call id -> the call node that asked for it
    named: dict[str, str] = {}  # tool call id -> the tool it named
    unseen: set[int] = set()  # a selector's choices: read by no agent, an address of the next speaker only
    chosen: dict[str, int] = {}  # agent -> the selector's latest choice of it not yet answered
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadRecord(f"message {i} must be an object, got {type(m).__name__}")
        if "content" not in m:
            raise BadRecord(f"message {i} has no 'content'")
        agent, to, note = speaker(m)
        if not agent and m.get("role") != "system":
            raise BadRecord(f"message {i} names no agent (role {m.get('role')!r}, no name or source)")
        meta: dict[str, Any] = {"step": i, "role": m.get("role")}
        if to:
            meta["to"] = to
        if note:
            meta["note"] = note
        kind = str(m.get("type") or "")
        if kind == "SelectSpeakerEvent":  # AutoGen's selector choosing the next speaker(s)
            names = m.get("content") if isinstance(m.get("content"), list) else [m.get("content")]
            if not names or not all(isinstance(x, str) and x for x in names):
                raise BadRecord(f"message {i} (SelectSpeakerEvent) must name the chosen speakers as strings")
            if len(names) == 1:
                meta["to"] = names[0]

        if m.get("role") == "system":
            prompts[agent if m.get("name") else ""] = _content(m, i)
            continue
        results = _tool_results(m, kind)
        if results is not None:
            for j, r in enumerate(results):
                if not isinstance(r, dict):
                    raise BadRecord(f"message {i} result {j} must be an object")
                raw = r.get("call_id") if "call_id" in r else r.get("tool_call_id")  # AutoGen's, OpenAI's
                parent = asked.get(str(raw))
                trace.add(Node(id=-1, kind="tool", name=str(r.get("name") or named.get(str(raw), "tool")),
                               text=_text(r.get("content")), parents=[parent] if parent is not None else [],
                               meta={**meta, "tool_call_id": raw, "is_error": bool(r.get("is_error"))}))
            continue
        content = _content(m, i)
        if m.get("role") == "human" or USER.match(agent) or (m.get("role") == "user" and not m.get("name")
                                                              and "source" not in m):
            trace.add(Node(id=-1, kind="input", name=agent, text=content, meta=meta))
            continue
        calls = tool_calls(m.get("content") if kind == "ToolCallRequestEvent" else m.get("tool_calls"), i)
        system = prompts.get(agent, prompts.get(""))
        seen = [src for src in range(first, len(trace.nodes)) if src not in unseen]
        user, spans = join_blocks([(src, "[question]\n" if question is not None and src == first
                                    else f"[{trace.nodes[src].name}]\n", trace.nodes[src].text)
                                   for src in seen], 1 if system is not None else 0)
        msgs = ([{"role": "system", "content": system}] if system is not None else []) + [
            {"role": "user", "content": user}]
        picked = [chosen.pop(agent)] if agent in chosen else []  # the choice this message answers: no span
        node = trace.add(Node(id=-1, kind="call", name=agent, text=content, tool_calls=calls, messages=msgs,
                              spans=spans, parents=sorted(seen + picked), meta=meta))
        if kind == "SelectSpeakerEvent":
            unseen.add(node.id)
            for name in names:
                chosen[name] = node.id
        for c in calls:
            asked[c.id], named[c.id] = node.id, c.name
    if not trace.calls():
        raise BadRecord("no message of an agent: nothing to blame")
    return trace


def _tool_results(m: dict[str, Any], kind: str) -> list[Any] | None:
    """The tool results a message carries, or None for a message that is no tool result: AutoGen's
    ``ToolCallExecutionEvent`` (its ``content``), AG2's ``tool_responses``, or one OpenAI ``tool`` message."""
    if kind == "ToolCallExecutionEvent":
        return m.get("content") if isinstance(m.get("content"), list) else []
    if isinstance(m.get("tool_responses"), list):
        return m["tool_responses"]
    if m.get("role") == "tool":
        return [m]
    return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def agent_key(name: Any) -> str:
    """An agent's name as names are compared: lower-cased, without spaces (``Websurfer`` = ``WebSurfer``)."""
    return "".join(str(name or "").lower().split())


def preferred_edges(trace: Trace) -> dict[int, dict[str, list[int]]]:
    """For each call of a group chat, its edges that say more than a broadcast, by kind (each list of
    earlier node ids, possibly empty):

    - ``address``: the latest earlier message addressed to the call's speaker (``meta["to"]``);
    - ``reply``: the messages (and their tool results) of the agent the speaker last addressed, said
      after that address: the answer it reads;
    - ``quoted``: the earlier outputs the call's own output quotes (whole, or a run of at least
      :data:`~agentgrad.importers.overlap.MIN_FRAGMENT` characters from a word start to a word end).
    """
    out: dict[int, dict[str, list[int]]] = {}
    produced = Produced()
    addressed_to: dict[str, int] = {}  # agent -> the latest message addressed to it
    last_address: dict[str, tuple[str, int]] = {}  # speaker -> (the agent it last addressed, that message)
    said: list[tuple[int, str]] = []  # (node, agent) of every message so far, tools under their caller's agent
    for n in trace.nodes:
        agent = agent_key(n.name if n.kind != "tool" else
                     next((trace.nodes[p].name for p in n.parents if trace.nodes[p].kind == "call"), n.name))
        if n.kind == "call":
            edges: dict[str, list[int]] = {"address": [], "reply": [], "quoted": []}
            if agent in addressed_to:
                edges["address"].append(addressed_to[agent])
            if agent in last_address:
                to, at = last_address[agent]
                edges["reply"] = [i for i, a in said if i > at and a == to]
            found = produced.spans(n.text, 0)
            found += produced.fragments(n.text, 0, found)
            edges["quoted"] = sorted({s.source for s in found if s.source != n.id})
            out[n.id] = edges
            to = n.meta.get("to")
            if to:
                addressed_to[agent_key(to)] = n.id
                last_address[agent] = (agent_key(to), n.id)
        said.append((n.id, agent))
        if n.kind in ("call", "tool"):
            produced.add(n.id, n.text)
    return out


def prefer_addressed(trace: Trace) -> Trace:
    """A copy of a group chat's trace whose calls keep only their preferred edges (:func:`preferred_edges`),
    with the speaker's own latest earlier message, the tool results of its own calls since then and the
    inputs beside them, on every call that has an address, reply or quoted edge whose text it reads; a
    call with none keeps all its edges (an edge that carries no text, a selector's choice, is always
    kept). Each call's messages are left as the model read them (only which spans are edges changes),
    and ``meta["edges"]`` says which were kept. A trace that is no group chat is refused."""
    if trace.meta.get("imported") not in ("groupchat", "whowhen"):
        raise BadRecord(f"--edges addressed reads a group chat's addresses, and this trace was imported as "
                        f"{trace.meta.get('imported')!r}: leave --edges at all")
    prefer = preferred_edges(trace)
    out = Trace.from_dict(trace.to_dict())
    for n in out.nodes:
        edges = prefer.get(n.id)
        spanned = {s.source for s in n.spans}
        if n.kind != "call" or not edges or not any(p in spanned for p in sum(edges.values(), [])):
            continue
        mine = [p for p in n.parents if out.nodes[p].kind == "call" and agent_key(out.nodes[p].name) == agent_key(n.name)]
        own = mine[-1:] if mine else []
        tools = [p for p in n.parents if out.nodes[p].kind == "tool" and own
                 and any(q >= own[0] and agent_key(out.nodes[q].name) == agent_key(n.name) for q in out.nodes[p].parents)]
        keep = set(sum(edges.values(), [])) | set(own) | set(tools) | {
            p for p in n.parents if out.nodes[p].kind == "input"}
        n.spans = [s for s in n.spans if s.source in keep]
        n.parents = [p for p in n.parents if p in keep or p not in spanned]  # a structural edge: always kept
        n.meta = {**n.meta, "edges": {k: v for k, v in edges.items() if v}}
    out.meta = {**out.meta, "edges": "addressed"}
    return out


__all__ = ["CHAT_ROLES", "agent_key", "group_chat_trace", "is_group_chat", "prefer_addressed", "preferred_edges", "speaker"]
