"""Span files (OTLP JSON) as traces, the convention detected; and any supported file, detected, as traces.

:func:`import_spans` reads an OTLP JSON file (:mod:`agentgrad.importers.otlp`), checks every trace
tree, and maps each trace by OpenInference (:mod:`agentgrad.importers.openinference`) when any span
carries ``openinference.span.kind`` (instrumentors that also write the GenAI attributes are read
the OpenInference way), else by the OTel GenAI conventions (:mod:`agentgrad.importers.otel`).
:func:`import_file` takes whatever a user has: an agentgrad trace, an OTLP export, or chat JSONL.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentgrad.core.trace import SCHEMA, Trace
from agentgrad.errors import ConfigError
from agentgrad.importers.base import BadRecord, ImportResult, read_user_text
from agentgrad.importers.openinference import openinference_trace
from agentgrad.importers.otel import otel_trace
from agentgrad.importers.otlp import convention, read_otlp, trace_trees

CONVENTIONS = ("auto", "openinference", "genai")
ANY_TRACE = ("a trace agentgrad reads: OTLP JSON ('resourceSpans'), chat JSONL or an agentgrad trace "
             "(docs/importers.md lists the formats)")


def import_spans(path: str | Path, conv: str = "auto") -> ImportResult:
    """The traces of an OTLP JSON file by convention ``conv`` (``auto``, ``openinference`` or ``genai``).

    Broken traces (a tree with a missing parent or a cycle, an LLM span without content, no LLM span)
    are listed in ``broken`` as ``FILE: trace ID: what``; the others are imported.
    """
    if conv not in CONVENTIONS:
        raise ConfigError(f"unknown span convention {conv!r}; valid: {', '.join(CONVENTIONS)}")
    p = Path(path)
    spans, broken = read_otlp(p)
    found = convention(spans)
    if found is None:
        names = ", ".join(dict.fromkeys(sp.name for sp in spans[:50])) or "none"
        raise ConfigError(f"{p}: no span carries openinference.span.kind or gen_ai.operation.name, so it is "
                          f"neither OpenInference nor OTel GenAI (span names: {names[:200]}); instrument the "
                          f"app's LLM calls (docs/importers.md)")
    if conv == "openinference" and found != "openinference":
        raise ConfigError(f"{p}: no span carries openinference.span.kind (its spans follow the OTel GenAI "
                          f"conventions: use agentgrad import otel)")
    use = found if conv == "auto" else conv
    build = openinference_trace if use == "openinference" else otel_trace
    out = ImportResult(broken=list(broken))
    for tid, tree in trace_trees(spans).items():
        try:
            if isinstance(tree, BadRecord):
                raise tree
            out.traces.append(build(tid, tree))
        except BadRecord as e:
            out.broken.append(f"{p}: trace {tid}: {e}")
    return out


def import_file(path: str | Path) -> ImportResult:
    """Whatever ``path`` holds, as traces: an agentgrad trace (read as it is), an OTLP JSON export (one
    request, or one per line), or chat JSONL; another file is a one-line :class:`ConfigError`."""
    from agentgrad.importers.chat import import_chat

    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{p} is a directory; give an exported trace file (OTLP JSON, chat JSONL or an agentgrad trace)")
    head = read_user_text(p, ANY_TRACE)[:65536]
    if '"resourceSpans"' in head:
        return import_spans(p)
    if f'"{SCHEMA}"' in head:
        return ImportResult(traces=[Trace.load(p)])
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    try:
        rec = json.loads(first)
    except json.JSONDecodeError:
        rec = None
    if isinstance(rec, list) or (isinstance(rec, dict) and "messages" in rec):
        return import_chat(p)
    raise ConfigError(f"{p} is not {ANY_TRACE}")
