"""Verbal losses written from words: attached to the call they describe, with the wrong text's spans.

:func:`verbal_loss` turns "what went wrong" (and optionally the wrong text and the right answer) into a
:class:`~agentgrad.blame.backward.VerbalLoss` on a recorded trace, ``ag.verbal_loss`` in Python and the
``--loss``/``--wrong``/``--expected`` of ``agentgrad blame``; :func:`record_loss` locates a loss from
a run's own record of what it should have done (tau-bench's ``reward_info``).
"""

from __future__ import annotations

import json
import re

from typing import Any

from agentgrad.blame.backward import VerbalLoss
from agentgrad.core.text import content_words
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError


DESCRIBED = "described"  # verbal_loss(target=DESCRIBED): the call the loss's words describe
MIN_SHARED = 2  # content words a call's output must share with the loss to take it from the last call (fixed)


def described_call(trace: Trace, text: str, wrong: str | None = None) -> tuple[Any, str]:
    """The call a loss's words describe, and why: with ``wrong``, the latest call whose output holds
    that text; else the call whose output shares the most content words with the loss (at least
    :data:`MIN_SHARED`; the latest of equals), else the last call."""
    calls = trace.calls()
    if wrong:
        holders = [c for c in calls if wrong in c.text]
        if holders:
            return holders[-1], f"its output holds {wrong!r}"
        return calls[-1], "the last call"
    words = content_words(text)
    best, shared = calls[-1], set()
    for c in calls:
        mine = words & content_words(c.text)
        if len(mine) >= max(MIN_SHARED, len(shared)):
            best, shared = c, mine
    if not shared:
        return calls[-1], f"the last call (no output shares {MIN_SHARED} words with the loss)"
    return best, "its output shares the loss's words " + ", ".join(sorted(shared))


def verbal_loss(trace: Trace, text: str, wrong: str | None = None, target: str | int | None = None,
                expected: str | None = None) -> VerbalLoss:
    """A verbal loss for a recorded trace, from words: attached to ``target`` (a node id, or an agent
    name: its last call; :data:`DESCRIBED`: the call the words describe, :func:`described_call`, the
    reason in ``details["target_reason"]``; default the trace's last call, the final answer), and, with ``wrong``, the
    places of that text in the target's output as the loss's spans (what the loss-targeted objective
    differentiates and the string-provenance method follows back). With ``expected`` (the right
    answer, or the right text in place of ``wrong``), the failure-conditioned ``contrast`` objective
    differentiates the produced output against it (``details["expected"]``)."""
    calls = trace.calls()
    if not calls:
        raise ConfigError("the trace has no call node to attach a loss to")
    if not str(text).strip():
        raise ConfigError("the loss is empty: say in words what went wrong")
    reason = None
    if target is None:
        node = calls[-1]
    elif target == DESCRIBED:
        node, reason = described_call(trace, text, wrong)
    elif isinstance(target, int) or str(target).isdigit():
        t = int(target)
        if not 0 <= t < len(trace.nodes) or trace.nodes[t].kind != "call":
            raise ConfigError(f"target {t} is not a call node of the trace (its calls: "
                              f"{', '.join(f'{c.id} {c.name}' for c in calls)[:300]})")
        node = trace.nodes[t]
    else:
        mine = trace.calls(str(target))
        if not mine:
            raise ConfigError(f"no agent {target!r} in the trace; its agents: {', '.join(dict.fromkeys(c.name for c in calls))}")
        node = mine[-1]
    spans: dict[int, list[tuple[int, int]]] = {}
    if wrong:
        found, at = [], node.text.find(wrong)
        while at >= 0:
            found.append((at, at + len(wrong)))
            at = node.text.find(wrong, at + len(wrong))
        if not found:
            raise ConfigError(f"the wrong text {wrong!r} is not in the output of node {node.id} ({node.name}): "
                              f"{node.text[:200]!r}")
        spans[node.id] = found
    if expected is not None and not str(expected).strip():
        raise ConfigError("the expected answer is empty: give the right answer, or leave it out")
    details = {"produced": node.text, **({"wrong": wrong} if wrong else {}),
               **({"expected": str(expected)} if expected is not None else {}),
               **({"target_reason": reason} if reason else {})}
    return VerbalLoss(str(text), [node.id], "generic", details, spans)


READ_ONLY = ("get_", "find_", "list_")
READ_ONLY_TOOLS = ("calculate", "think", "transfer_to_human_agents")
LAST_WORDS = "the run failed its task"


def is_write(tool: str) -> bool:
    """Whether a tau-bench tool changes the database (reads: ``get_*``, ``find_*``, ``list_*``,
    ``calculate``, ``think``, ``transfer_to_human_agents``)."""
    return not tool.startswith(READ_ONLY) and tool not in READ_ONLY_TOOLS


def _numbers(text: str, longest: int) -> list[re.Match[str]]:
    """Standalone numbers of at most ``longest`` digits that are not an id after ``#``."""
    return [m for m in re.finditer(r"(?<![#\w.,])\d+(?:[.,]\d+)?(?![\w])", text)
            if len(re.sub(r"\D", "", m.group())) <= longest]


def record_loss(trace: Trace) -> VerbalLoss | None:
    """A loss located from the run's own record, where the trace carries one (a tau-bench result:
    ``meta["reward_info"]`` and the task's expected actions and outputs, read by the importer); None
    where it does not. Only expected values are read, never an annotator's words (docs/agentrx.md):

    1. the first write call (:func:`is_write`) not among the expected actions: on that call;
    2. else an expected write never made: on the last call;
    3. else an expected output never said: on the first reply to the user stating another number
       (that number the wrong text), else on the last reply to the user;
    4. else on the last call.
    """
    info = trace.meta.get("reward_info")
    task = trace.meta.get("task")
    if not isinstance(info, dict) or not isinstance(task, dict):
        return None
    calls = trace.calls()
    if not calls:
        return None
    expected = [a for a in task.get("actions") or [] if isinstance(a, dict) and is_write(str(a.get("name", "")))]
    want = [(str(a.get("name")), json.dumps(a.get("kwargs") or {}, sort_keys=True)) for a in expected]
    made: list[tuple[str, str]] = []
    for c in calls:
        for tc in c.tool_calls:
            if not is_write(tc.name):
                continue
            key = (tc.name, json.dumps(tc.arguments, sort_keys=True))
            if key not in want:
                return VerbalLoss(f"The agent called {tc.name} with {key[1]}, which the task does not ask for; the "
                                  f"task's writes: {want or 'none'}.", [c.id], "record",
                                  {"produced": c.text, "rule": "write not expected", "expected": str(want)})
            made.append(key)
    missing = [w for w in want if w not in made]
    if missing:
        c = calls[-1]
        return VerbalLoss(f"The agent never called {missing[0][0]} with {missing[0][1]}, which the task asks for.",
                          [c.id], "record", {"produced": c.text, "rule": "write never made"})
    outputs = ((info.get("info") or {}).get("outputs") or {}) if isinstance(info.get("info"), dict) else {}
    unsaid = [str(v) for v, ok in outputs.items() if ok is False]
    if unsaid:
        v = unsaid[0]
        replies = [c for c in calls if not c.tool_calls and c.text.strip()]
        digits = len(re.sub(r"\D", "", v))
        for c in replies if digits else []:
            found = [m for m in _numbers(c.text, digits + 2) if re.sub(r"\D", "", m.group()) != re.sub(r"\D", "", v)]
            if found:
                return VerbalLoss(f"The user had to be told {v}; the agent said {found[0].group()}.", [c.id], "record",
                                  {"produced": c.text, "wrong": found[0].group(), "expected": v,
                                   "rule": "output stated wrong"}, {c.id: [found[0].span()]})
        c = replies[-1] if replies else calls[-1]
        return VerbalLoss(f"The user had to be told {v}, and never was.", [c.id], "record",
                          {"produced": c.text, "expected": v, "rule": "output never said"})
    c = calls[-1]
    return VerbalLoss(f"{LAST_WORDS}.", [c.id], "record", {"produced": c.text, "rule": "none found"})


ERROR_TEXT = re.compile(r"^\s*(error|exception|traceback)\b", re.IGNORECASE)
RETRIES = 3  # the same tool call this many times in a row of calls: a retry loop (fixed, not tuned)


def node_error(node: Any) -> str:
    """What a node records as gone wrong: an error status or exception of its span, a tool result
    flagged as an error (``is_error``) or whose text is one (starting with Error, Exception, Traceback)."""
    if node.meta.get("error"):
        return str(node.meta["error"])
    if node.kind == "tool" and (node.meta.get("is_error") or ERROR_TEXT.match(node.text or "")):
        return (node.text or "error").strip()
    return ""


def failure_loss(trace: Trace) -> VerbalLoss | None:
    """A loss on a failure the trace shows by itself, the first one in trace order; None where it shows
    none. A failed call takes the loss itself; a failed tool result, the call that asked for it; a
    retry loop (the same tool call, name and arguments, made :data:`RETRIES` times), its first call;
    an agent's or a chain's failed span (no node of its own), that agent's last call before the end."""
    calls = trace.calls()
    if not calls:
        return None
    seen: dict[tuple[str, str], list[int]] = {}
    for node in trace.nodes:
        err = node_error(node)
        if err and node.kind in ("call", "tool"):
            at = node.id if node.kind == "call" else next(
                (p for p in node.parents if trace.nodes[p].kind == "call"), None)
            if at is not None:
                what = f"the call of {node.name}" if node.kind == "call" else f"the tool {node.name} it called"
                return VerbalLoss(f"{what} failed: {err[:300]}", [at], "record",
                                  {"produced": trace.nodes[at].text, "rule": "error shown", "error": err[:1000]})
        for tc in node.tool_calls if node.kind == "call" else []:
            key = (tc.name, json.dumps(tc.arguments, sort_keys=True))
            seen.setdefault(key, []).append(node.id)
            if len(seen[key]) == RETRIES:
                first = seen[key][0]
                return VerbalLoss(f"{node.name} called {tc.name} with {key[1]} {RETRIES} times: a retry loop.",
                                  [first], "record", {"produced": trace.nodes[first].text, "rule": "retry loop"})
    for e in trace.meta.get("errors") or []:
        mine = [c for c in calls if c.name == e.get("agent")] or calls
        c = mine[-1]
        return VerbalLoss(f"{e.get('span_name') or 'a span'} failed: {str(e.get('error'))[:300]}", [c.id], "record",
                          {"produced": c.text, "rule": "error shown", "error": str(e.get("error"))[:1000]})
    return None


def trace_loss(trace: Trace) -> VerbalLoss | None:
    """The loss a trace carries by itself (``agentgrad blame --loss auto``): its run's record of what it
    should have done (:func:`record_loss`), else a failure it shows (:func:`failure_loss`); None where
    it has neither."""
    return record_loss(trace) or failure_loss(trace)
