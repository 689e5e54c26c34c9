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
  per line as the SDK's and the collector's file exporters write them), read by OpenInference when
  any span carries ``openinference.span.kind``, else by the GenAI semantic conventions
  (:mod:`agentgrad.importers.spans`; mappings in :mod:`~agentgrad.importers.openinference` and
  :mod:`~agentgrad.importers.otel`); ``openinference``: the same file, OpenInference spans only.
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

from pathlib import Path

from agentgrad.errors import ConfigError
from agentgrad.importers.base import FORMATS, WHOWHEN_SUBSETS, ImportResult
from agentgrad.importers.chat import chat_trace, import_chat
from agentgrad.importers.openinference import openinference_trace
from agentgrad.importers.otel import otel_trace
from agentgrad.importers.spans import import_file, import_spans
from agentgrad.importers.whowhen import import_whowhen, whowhen_archive, whowhen_trace

__all__ = [
    "FORMATS", "WHOWHEN_SUBSETS", "ImportResult", "chat_trace", "import_chat", "import_file", "import_logs",
    "import_openinference", "import_otel", "import_spans", "import_whowhen", "openinference_trace", "otel_trace",
    "whowhen_archive", "whowhen_trace",
]


def import_otel(path: str | Path) -> ImportResult:
    """The traces of an OTLP JSON file, OpenInference or OTel GenAI (detected)."""
    return import_spans(path, "auto")


def import_openinference(path: str | Path) -> ImportResult:
    """The traces of an OTLP JSON file of OpenInference spans."""
    return import_spans(path, "openinference")


def import_logs(fmt: str, src: str | Path | None, subset: str = "all") -> ImportResult:
    """Format ``fmt`` (one of :data:`FORMATS`) read from ``src``: the traces and the records not imported."""
    if fmt == "chat":
        if src is None:
            raise ConfigError("import chat needs a JSONL file")
        return import_chat(src)
    if fmt == "whowhen":
        return import_whowhen(src, subset)
    if fmt in ("otel", "openinference"):
        if src is None:
            raise ConfigError(f"import {fmt} needs an OTLP JSON file")
        return import_spans(src, "auto" if fmt == "otel" else "openinference")
    raise ConfigError(f"unknown log format {fmt!r}; valid: {', '.join(FORMATS)}")
