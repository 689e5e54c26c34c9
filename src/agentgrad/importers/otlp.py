"""OTLP JSON files: the spans of one file, grouped into trace trees, before any convention is read.

OpenTelemetry's file exporters (the Python SDK's ``opentelemetry-exporter-otlp-json-file``, the
collector's ``file`` exporter) write one export request per line; a hand-made file may hold one
request. Every request of a file is read and its spans pooled, so that a trace whose spans were
exported in several batches (a ``SimpleSpanProcessor`` exports each span alone) is one trace.

A trace tree must be whole: a span naming a parent that is not in the file, or a parent chain that
loops, is a broken trace (reported, not imported), since the agents of its calls and the order of
its steps could not be trusted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgrad.errors import ConfigError
from agentgrad.importers.base import BadRecord, read_user_text

OPENINFERENCE_KIND = "openinference.span.kind"
GENAI_OPERATION = "gen_ai.operation.name"


@dataclass
class OtlpSpan:
    """One span, its attributes decoded into plain Python values."""

    trace_id: str
    span_id: str
    parent: str
    name: str
    start: int
    attrs: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (name, attributes)
    links: list[str] = field(default_factory=list)  # span ids
    error: str = ""  # what went wrong where the span's status is an error or it records an exception

    def failure(self) -> str:
        """The span's error: its status's message, else its exception event's, else ""."""
        for name, a in self.events:
            if name == "exception":
                return str(a.get("exception.message") or a.get("exception.type") or "exception")
        return self.error


def any_value(v: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value."""
    if not isinstance(v, dict):
        return v
    for k in ("stringValue", "boolValue", "doubleValue"):
        if k in v:
            return v[k]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            raise BadRecord(f"intValue {v['intValue']!r} is not an integer") from None
    if "arrayValue" in v:
        return [any_value(x) for x in (v["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in v:
        return attributes((v["kvlistValue"] or {}).get("values") or [])
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def attributes(items: Any) -> dict[str, Any]:
    """OTLP ``KeyValue`` list -> dict."""
    if items is None:
        return {}
    if not isinstance(items, list):
        raise BadRecord("'attributes' must be a list")
    out = {}
    for a in items:
        if not isinstance(a, dict) or "key" not in a:
            raise BadRecord("an attribute needs a 'key'")
        out[str(a["key"])] = any_value(a.get("value"))
    return out


def _spans_of(doc: Any) -> list[OtlpSpan]:
    """The spans of one export request (``resourceSpans``)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
        raise BadRecord("field 'resourceSpans' must be a list")
    out = []
    for rs in doc["resourceSpans"]:
        rs = rs if isinstance(rs, dict) else {}
        for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
            for sp in (ss if isinstance(ss, dict) else {}).get("spans") or []:
                if not isinstance(sp, dict) or not sp.get("spanId") or not sp.get("traceId"):
                    raise BadRecord("every span needs 'traceId' and 'spanId'")
                try:
                    start = int(sp.get("startTimeUnixNano") or 0)
                except (TypeError, ValueError):
                    raise BadRecord(f"span {sp['spanId']}: 'startTimeUnixNano' must be an integer") from None
                events = []
                for e in sp.get("events") or []:
                    if isinstance(e, dict):
                        events.append((str(e.get("name", "")), attributes(e.get("attributes"))))
                links = [str(lk["spanId"]) for lk in sp.get("links") or [] if isinstance(lk, dict) and lk.get("spanId")]
                out.append(OtlpSpan(str(sp["traceId"]), str(sp["spanId"]), str(sp.get("parentSpanId") or ""),
                                    str(sp.get("name") or ""), start, attributes(sp.get("attributes")), events, links,
                                    status_error(sp.get("status"))))
    return out


def status_error(status: Any, message: Any = None) -> str:
    """A span status as an error text ("" unless it is an error): OTLP's ``{"code": 2 or
    "STATUS_CODE_ERROR", "message"}``, or a store's status code (``ERROR``) and message."""
    if isinstance(status, dict):
        status, message = status.get("code"), status.get("message", message)
    if str(status).upper() in ("2", "STATUS_CODE_ERROR", "ERROR"):
        return str(message or "error")
    return ""


def _hint(doc: Any) -> str:
    """What a JSON value that is not an export request looks like (for the one-line error)."""
    if isinstance(doc, dict) and doc.get("schema") == "agentgrad.trace":
        return "it is an agentgrad trace: give it to attribute, report or blame directly"
    if isinstance(doc, list) or (isinstance(doc, dict) and "messages" in doc):
        return "it looks like chat JSONL: use agentgrad import chat"
    if isinstance(doc, dict) and "history" in doc and "question" in doc:
        return "it looks like a Who&When log: use agentgrad import whowhen"
    if isinstance(doc, dict) and ("resourceLogs" in doc or "resourceMetrics" in doc):
        return "it holds OTLP logs or metrics, not spans: export the traces"
    return "an OTLP JSON export holds 'resourceSpans'"


def read_otlp(path: str | Path) -> tuple[list[OtlpSpan], list[str]]:
    """Every span of an OTLP JSON file (one request, or one per line), and the lines that could not be read.

    A file none of whose records is an export request is a :class:`ConfigError` naming what it looks like.
    """
    p = Path(path)
    text = read_user_text(p, "OTLP JSON spans (an export request holding 'resourceSpans', or one per line)")
    try:
        docs: list[tuple[int, Any]] = [(1, json.loads(text))]
    except json.JSONDecodeError:
        docs = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    docs.append((n, json.loads(line)))
                except json.JSONDecodeError as e:
                    docs.append((n, BadRecord(f"not JSON ({e.msg})")))
    if not docs:
        raise ConfigError(f"{p} is empty: no spans to import")
    spans: list[OtlpSpan] = []
    broken: list[str] = []
    requests = 0
    for n, doc in docs:
        try:
            if isinstance(doc, BadRecord):
                raise doc
            got = _spans_of(doc)
            requests += 1
            spans.extend(got)
        except BadRecord as e:
            if isinstance(doc, BadRecord) or isinstance(doc, dict) and "resourceSpans" in doc:
                broken.append(f"{p}:{n}: {e}")
            else:
                broken.append(f"{p}:{n}: not an OTLP export request ({_hint(doc)})")
    if not requests:
        first = next((d for _, d in docs if not isinstance(d, BadRecord)), None)
        what = _hint(first) if first is not None else "no line is JSON"
        raise ConfigError(f"{p} is not an OTLP JSON export of spans: {what}")
    return spans, broken


def trace_trees(spans: list[OtlpSpan]) -> dict[str, list[OtlpSpan] | BadRecord]:
    """trace id -> its spans in start-time order, or the :class:`BadRecord` saying why its tree is broken
    (a parent not in the file, a cycle, a span id used twice)."""
    by_trace: dict[str, list[OtlpSpan]] = {}
    for sp in spans:
        by_trace.setdefault(sp.trace_id, []).append(sp)
    out: dict[str, list[OtlpSpan] | BadRecord] = {}
    for tid, mine in by_trace.items():
        by_id: dict[str, OtlpSpan] = {}
        problem = None
        for sp in mine:
            if sp.span_id in by_id:
                problem = BadRecord(f"span id {sp.span_id} is used by two spans")
                break
            by_id[sp.span_id] = sp
        if problem is None:
            problem = _tree_problem(by_id)
        out[tid] = problem if problem is not None else sorted(mine, key=lambda s: (s.start, s.span_id))
    return out


def _tree_problem(by_id: dict[str, OtlpSpan]) -> BadRecord | None:
    """A missing parent or a cycle among the parent links, else None (each span visited once)."""
    done: set[str] = set()
    for sid in by_id:
        path: list[str] = []
        on_path: set[str] = set()
        at = sid
        while at and at not in done:
            if at in on_path:
                loop = path[path.index(at):] + [at]
                return BadRecord(f"the span tree has a cycle: {' -> '.join(loop)}")
            sp = by_id.get(at)
            if sp is None:
                return BadRecord(f"span {path[-1]} names parent {at}, which is not in the file (a partial export?)")
            path.append(at)
            on_path.add(at)
            at = sp.parent
        done.update(path)
    return None


def convention(spans: list[OtlpSpan]) -> str | None:
    """``openinference`` when any span carries ``openinference.span.kind``, ``genai`` when any carries
    ``gen_ai.operation.name`` (and none the former), else None."""
    genai = False
    for sp in spans:
        if OPENINFERENCE_KIND in sp.attrs:
            return "openinference"
        genai = genai or GENAI_OPERATION in sp.attrs
    return "genai" if genai else None
