"""OpenInference spans written by hand, as OTLP JSON: fixtures for the importer's tests and its benchmark.

:class:`SpanWriter` builds spans the way the OpenInference instrumentors flatten them
(``llm.input_messages.<i>.message.role`` ...); :func:`synthetic_export` makes an export of any size
shaped like the LangGraph supervisor app of the tests (a supervisor, a researcher and an analyst,
the researcher a tool then a model call), with the facts that were true in each episode, so that a
test can compare the import with what "happened".
"""

from __future__ import annotations

import json
import random
from typing import Any


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": str(v)}


def flatten_messages(prefix: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenInference's flattening of a message list: ``prefix.<i>.message.role`` etc."""
    out: dict[str, Any] = {}
    for i, m in enumerate(messages):
        for k, v in m.items():
            if k == "tool_calls":
                for j, c in enumerate(v):
                    base = f"{prefix}.{i}.message.tool_calls.{j}.tool_call"
                    out[f"{base}.id"] = c["id"]
                    out[f"{base}.function.name"] = c["name"]
                    out[f"{base}.function.arguments"] = json.dumps(c.get("arguments", {}))
            elif k == "contents":
                for j, text in enumerate(v):
                    out[f"{prefix}.{i}.message.contents.{j}.message_content.type"] = "text"
                    out[f"{prefix}.{i}.message.contents.{j}.message_content.text"] = text
            else:
                out[f"{prefix}.{i}.message.{k}"] = v
    return out


class SpanWriter:
    """Spans of one or more traces, ids and start times assigned in call order."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self._n = 0

    def span(self, trace: str, parent: str, name: str, attrs: dict[str, Any], span_id: str | None = None) -> str:
        self._n += 1
        sid = span_id or f"{self._n:016x}"
        self.spans.append({"traceId": trace, "spanId": sid, "parentSpanId": parent, "name": name,
                           "startTimeUnixNano": str(1_000_000 * self._n), "endTimeUnixNano": str(1_000_000 * self._n + 1),
                           "attributes": [{"key": k, "value": _value(v)} for k, v in attrs.items()]})
        return sid

    def llm(self, trace: str, parent: str, messages: list[dict[str, Any]], output: str,
            tool_calls: list[dict[str, Any]] | None = None, **attrs: Any) -> str:
        out_msg: dict[str, Any] = {"role": "assistant", "content": output}
        if tool_calls:
            out_msg["tool_calls"] = tool_calls
        a = {"openinference.span.kind": "LLM", "llm.model_name": "smollm2", **flatten_messages("llm.input_messages", messages),
             **flatten_messages("llm.output_messages", [out_msg]), **attrs}
        return self.span(trace, parent, "ChatOpenAI", a)

    def tool(self, trace: str, parent: str, name: str, args: dict[str, Any], result: str, **attrs: Any) -> str:
        return self.span(trace, parent, name, {"openinference.span.kind": "TOOL", "tool.name": name,
                                               "input.value": json.dumps(args), "output.value": result, **attrs})

    def chain(self, trace: str, parent: str, name: str, **attrs: Any) -> str:
        return self.span(trace, parent, name, {"openinference.span.kind": "CHAIN", **attrs})

    def export(self) -> dict[str, Any]:
        return {"resourceSpans": [{"resource": {"attributes": []},
                                   "scopeSpans": [{"scope": {"name": "openinference.instrumentation.langchain"},
                                                   "spans": self.spans}]}]}


def supervisor_episode(w: SpanWriter, trace: str, city: str, population: str) -> dict[str, Any]:
    """One episode of the supervisor app (12 spans); returns what happened.

    The supervisor routes (three model calls); the researcher runs its tool and restates the result;
    the analyst reads the researcher's reply and restates it in thousands; the supervisor's last
    call reads every reply and answers, quoting the researcher's figure."""
    meta = lambda node: json.dumps({"langgraph_node": node, "langgraph_step": 1})  # noqa: E731
    q = f"What is the population of {city}, in thousands?"
    sup_sys = {"role": "system", "content": "You are the supervisor of a researcher and an analyst."}
    root = w.chain(trace, "", "LangGraph")
    history = [{"role": "user", "content": q}]
    did: dict[str, Any] = {"question": q, "calls": [], "tools": []}

    def supervisor(text: str) -> None:
        c = w.chain(trace, root, "supervisor", metadata=meta("supervisor"))
        w.llm(trace, c, [sup_sys, *history], text, metadata=meta("supervisor"))
        history.append({"role": "assistant", "content": text})
        did["calls"].append(("supervisor", text))

    supervisor("The researcher works next.")
    c = w.chain(trace, root, "researcher", metadata=meta("researcher"))
    result = f"The population of {city} is {population}."
    w.tool(trace, c, "city_population", {"city": city}, result, metadata=meta("researcher"))
    reply = f"{city} has {population} inhabitants."
    w.llm(trace, c, [{"role": "system", "content": "You are the researcher."}, {"role": "user", "content": q},
                     {"role": "user", "content": f"Tool result: {result}"}], reply, metadata=meta("researcher"))
    history.append({"role": "assistant", "content": reply})
    did["tools"].append(("city_population", result))
    did["calls"].append(("researcher", reply))
    supervisor("The analyst works next.")
    c = w.chain(trace, root, "analyst", metadata=meta("analyst"))
    thousands = population.split(",")[0]
    analysis = f"That is about {thousands} thousand people."
    w.llm(trace, c, [{"role": "system", "content": "You are the analyst."},
                     {"role": "user", "content": f"The researcher says: {reply}"}], analysis, metadata=meta("analyst"))
    history.append({"role": "assistant", "content": analysis})
    did["calls"].append(("analyst", analysis))
    supervisor(f"{city} has {population} inhabitants, about {thousands} thousand.")
    return did


def synthetic_export(spans: int, seed: int = 0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An export of about ``spans`` spans (episodes of 12), and what happened in each episode."""
    rng = random.Random(seed)
    w = SpanWriter()
    episodes = []
    i = 0
    while len(w.spans) + 12 <= max(spans, 12):
        city = f"City{i}"
        population = f"{rng.randrange(100, 999)},{rng.randrange(100, 999)}"
        episodes.append(supervisor_episode(w, f"{i:032x}", city, population))
        i += 1
    return w.export(), episodes


def long_export(spans: int, window: int = 20) -> dict[str, Any]:
    """One trace of about ``spans`` spans: three agents taking turns, each turn a tool and a model call
    that reads the last ``window`` replies and its tool's result (a long-running agent loop)."""
    w = SpanWriter()
    t = "L" * 32
    root = w.chain(t, "", "LangGraph")
    replies: list[str] = []
    i = 0
    while len(w.spans) + 2 <= max(spans, 3):
        agent = ("planner", "worker", "critic")[i % 3]
        meta = json.dumps({"langgraph_node": agent})
        result = f"Record {i}: value {i * 7919 % 100003} for item {i}."
        w.tool(t, root, "lookup", {"item": i}, result, metadata=meta)
        msgs = [{"role": "system", "content": f"You are the {agent}."},
                *({"role": "assistant", "content": r} for r in replies[-window:]),
                {"role": "user", "content": f"Tool result: {result}"}]
        reply = f"Step {i} by {agent}: item {i} has value {i * 7919 % 100003}."
        w.llm(t, root, msgs, reply, metadata=meta)
        replies.append(reply)
        i += 1
    return w.export()
