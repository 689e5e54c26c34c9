"""Span rows: what observability tools export when they export spans as table rows, not OTLP requests.

Two shapes, recognised by their keys and read into the same spans as an OTLP file
(:class:`~agentgrad.importers.otlp.OtlpSpan`), so the OpenInference and GenAI mappings read them
unchanged:

- **flat span rows** (a ClickHouse-backed store, Langfuse-like exports): a span is
  ``{trace_id, span_id, parent_span_id, span_name, timestamp, span_attributes}``, the children either
  nested under ``child_spans`` or linked by their parent id; a file holds one trace object
  ``{"spans": [...]}``, a list of them, one per JSONL line, or the span rows themselves;
- **Phoenix's span export** (its spans dataframe written as JSONL or parquet, or the spans its client's
  ``get_spans`` returns): ``context.span_id``, ``context.trace_id``, ``parent_id``, ``name``,
  ``start_time``, ``span_kind`` (the OpenInference kind, which Phoenix keeps out of the attributes),
  ``status_code``, and the attributes either as one ``attributes`` object or as ``attributes.*`` columns.

Attributes may come flattened (``llm.input_messages.0.message.role``, as OTLP writes them) or nested
(``{"llm": {"input_messages": [{"message": {"role": ...}}]}}`` or ``{"llm.input_messages":
[{"message.role": ...}]}``): nested ones are flattened to the OTLP keys, list items by index; the
attributes OpenInference keeps as JSON text (``metadata``, ``llm.invocation_parameters``) stay text.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Iterator

from agentgrad.importers.base import BadRecord
from agentgrad.importers.otlp import OtlpSpan, status_error

JSON_TEXT = ("metadata", "llm.invocation_parameters", "input.value", "output.value", "tool.parameters")
ID_KEYS = ("span_id", "spanId", "context.span_id")


def is_span_row(x: Any) -> bool:
    return isinstance(x, dict) and (any(k in x for k in ID_KEYS) or isinstance(x.get("context"), dict)
                                    and "span_id" in x["context"])


def is_span_rows(obj: Any) -> bool:
    """Whether a file's JSON value (or its JSONL lines as a list) holds span rows."""
    if isinstance(obj, dict):
        return isinstance(obj.get("spans"), list) and any(is_span_row(s) for s in obj["spans"])
    if isinstance(obj, list):
        return any(is_span_row(x) or is_span_rows(x) for x in obj if isinstance(x, dict))
    return False


def flatten(attrs: Any, prefix: str = "") -> dict[str, Any]:
    """Nested attributes as OTLP's flat keys: ``{"a": {"b": [x, {"c": 1}]}}`` -> ``a.b`` = [x] ... (a
    list of scalars stays a list; a list holding objects is indexed: ``a.b.1.c`` = 1)."""
    out: dict[str, Any] = {}
    if isinstance(attrs, dict):
        if prefix in JSON_TEXT:
            return {prefix: json.dumps(attrs, ensure_ascii=False)}
        for k, v in attrs.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(attrs, list) and any(isinstance(x, (dict, list)) for x in attrs):
        for i, v in enumerate(attrs):
            out.update(flatten(v, f"{prefix}.{i}"))
    elif prefix:
        out[prefix] = attrs
    return out


def _time(v: Any) -> int:
    """A start time as nanoseconds: an integer (ns), or an ISO 8601 text."""
    if v is None or v == "":
        return 0
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v)
    try:
        return int(str(v))
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    except ValueError:
        raise BadRecord(f"timestamp {v!r} is neither nanoseconds nor an ISO 8601 time") from None
    return int(t.timestamp() * 1e9)


def row_span(row: dict[str, Any], trace_id: str = "", parent: str = "") -> OtlpSpan:
    """One span row as a span (``trace_id`` and ``parent``: given by an enclosing trace or span)."""
    ctx = row.get("context") if isinstance(row.get("context"), dict) else {}
    sid = row.get("span_id") or row.get("spanId") or row.get("context.span_id") or ctx.get("span_id")
    tid = row.get("trace_id") or row.get("traceId") or row.get("context.trace_id") or ctx.get("trace_id") or trace_id
    if not sid or not tid:
        raise BadRecord("every span row needs a span id and a trace id (span_id, trace_id or context.*)")
    par = row.get("parent_span_id", row.get("parent_id", row.get("parentSpanId"))) or parent or ""
    attrs = row.get("span_attributes", row.get("attributes"))
    flat = flatten(attrs) if isinstance(attrs, dict) else {}
    if attrs is not None and not isinstance(attrs, dict):
        raise BadRecord(f"span {sid}: its attributes must be an object")
    # a dataframe's attribute columns: a span without an attribute holds null there (not the attribute)
    flat.update(flatten({k[len("attributes."):]: v for k, v in row.items() if k.startswith("attributes.")
                         and v is not None}))
    for prefix in JSON_TEXT:  # Phoenix returns the JSON it parsed flattened (metadata.langgraph_node): as text again
        inner = {k[len(prefix) + 1:]: flat.pop(k) for k in [k for k in flat if k.startswith(prefix + ".")]}
        if inner and prefix not in flat:
            flat[prefix] = json.dumps(inner, ensure_ascii=False)
        else:
            flat.update({f"{prefix}.{k}": v for k, v in inner.items()})
    if "openinference.span.kind" not in flat and isinstance(row.get("span_kind"), str):
        flat["openinference.span.kind"] = row["span_kind"]  # Phoenix keeps the kind as a column of its own
    events = [(str(e.get("name", "")), flatten(e.get("attributes") or {})) for e in row.get("events") or []
              if isinstance(e, dict)] if isinstance(row.get("events"), list) else []
    start = row.get("timestamp", row.get("start_time", row.get("startTimeUnixNano")))
    error = status_error(row.get("status_code", row.get("status")), row.get("status_message"))
    return OtlpSpan(str(tid), str(sid), str(par), str(row.get("span_name") or row.get("name") or ""), _time(start),
                    flat, events, error=error)


def _walk(row: dict[str, Any], trace_id: str, parent: str) -> Iterator[OtlpSpan]:
    sp = row_span(row, trace_id, parent)
    yield sp
    for child in row.get("child_spans") or []:
        if not isinstance(child, dict):
            raise BadRecord(f"span {sp.span_id}: child_spans must hold span objects")
        yield from _walk(child, sp.trace_id, sp.span_id)


def row_spans(obj: Any) -> Iterator[OtlpSpan | BadRecord]:
    """Every span of a file's rows (a trace object, a list of them, or span rows), nested children
    included; a record that cannot be read is yielded as its :class:`BadRecord`."""
    records = [obj] if isinstance(obj, dict) else obj if isinstance(obj, list) else []
    for rec in records:
        try:
            if isinstance(rec, BadRecord):
                raise rec
            if isinstance(rec, dict) and isinstance(rec.get("spans"), list):
                tid = str(rec.get("trace_id") or rec.get("id") or "")
                for row in rec["spans"]:
                    if not isinstance(row, dict):
                        raise BadRecord("'spans' must hold span objects")
                    yield from _walk(row, tid, "")
            elif is_span_row(rec):
                yield from _walk(rec, "", "")
            else:
                raise BadRecord("not a span row (span_id / context.span_id) nor a trace of them ('spans')")
        except BadRecord as e:
            yield e


def read_parquet(path: Any) -> list[dict[str, Any]]:
    """The rows of a parquet file (Phoenix's spans dataframe written with ``to_parquet``), as dicts."""
    from agentgrad.errors import ConfigError

    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"{path} is parquet: reading it needs pyarrow (pip install pyarrow), or export the spans "
                          f"as JSONL (df.to_json(path, orient='records', lines=True))") from None
    try:
        return pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow raises its own errors for a file that is not parquet, or cut short
        raise ConfigError(f"cannot read {path} as parquet: {str(e).splitlines()[0][:200]}") from None


__all__ = ["flatten", "is_span_rows", "read_parquet", "row_span", "row_spans"]
