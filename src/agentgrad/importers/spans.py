"""Span files (OTLP JSON) as traces, the convention detected; and any supported file, detected, as traces.

:func:`import_spans` reads an OTLP JSON file (:mod:`agentgrad.importers.otlp`), checks every trace
tree, and maps each trace by OpenInference (:mod:`agentgrad.importers.openinference`) when any span
carries ``openinference.span.kind`` (instrumentors that also write the GenAI attributes are read
the OpenInference way), else by the OTel GenAI conventions (:mod:`agentgrad.importers.otel`).
:func:`import_file` takes whatever a user has: an agentgrad trace, an OTLP export, or a log of messages
(chat JSONL, a group chat of named agents, tau-bench results: :func:`import_messages`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgrad.core.trace import SCHEMA, Trace
from agentgrad.errors import ConfigError
from agentgrad.importers.base import BadRecord, ImportResult, read_user_text
from agentgrad.importers.chat import chat_trace
from agentgrad.importers.groupchat import group_chat_trace, is_group_chat
from agentgrad.importers.openinference import openinference_trace
from agentgrad.importers.otel import otel_trace
from agentgrad.importers.otlp import convention, read_otlp, trace_trees
from agentgrad.importers.rows import is_span_rows, read_parquet, row_spans

CONVENTIONS = ("auto", "openinference", "genai")
SHAPES = ("OTLP JSON ('resourceSpans'), span rows (span_id / context.span_id, nested child_spans or parent ids; "
          "Phoenix's export as JSONL or parquet), an agentgrad trace, or a log of messages: a list, "
          "{\"messages\": [...]}, {\"history\": [...]} or a tau-bench result {\"traj\": [...]}, JSON or JSONL")
ANY_TRACE = f"a trace agentgrad reads: {SHAPES} (docs/importers.md lists the formats)"


def import_spans(path: str | Path, conv: str = "auto") -> ImportResult:
    """The traces of an OTLP JSON file by convention ``conv`` (``auto``, ``openinference`` or ``genai``).

    Broken traces (a tree with a missing parent or a cycle, an LLM span without content, no LLM span)
    are listed in ``broken`` as ``FILE: trace ID: what``; the others are imported.
    """
    if conv not in CONVENTIONS:
        raise ConfigError(f"unknown span convention {conv!r}; valid: {', '.join(CONVENTIONS)}")
    p = Path(path)
    spans, broken = read_otlp(p)
    return spans_result(p, spans, broken, conv)


def spans_result(p: Path, spans: list[Any], broken: list[str], conv: str = "auto") -> ImportResult:
    """The traces of ``spans`` (an OTLP file's or a file of span rows'), by convention ``conv``."""
    if not spans:
        raise ConfigError(f"{p} holds no span that could be read" + (f": {broken[0]}" if broken else ""))
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
    request, or one per line), or a log of messages (:func:`import_messages`: chat JSONL, group chats,
    tau-bench results); another file is a one-line :class:`ConfigError` naming the shapes read."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{p} is a directory; give an exported trace file ({SHAPES})")
    if p.suffix.lower() == ".parquet":  # Phoenix's spans dataframe, written with to_parquet
        return import_rows(p, read_parquet(p))
    text = read_user_text(p, ANY_TRACE)
    head = text[:65536]
    if '"resourceSpans"' in head:
        return import_spans(p)
    if f'"{SCHEMA}"' in head:
        return ImportResult(traces=[Trace.load(p)])
    obj, lines = _records(p, text)
    if is_span_rows(obj):
        return import_rows(p, obj, lines)
    return import_messages(p, text, (obj, lines))


def import_rows(path: str | Path, obj: Any, lines: list[int] | None = None) -> ImportResult:
    """The traces of a file of span rows (:mod:`agentgrad.importers.rows`: flat rows with nested
    ``child_spans`` or parent ids, Phoenix's span export), read as an OTLP file's spans are."""
    p = Path(path)
    spans, broken = [], []
    items = obj if isinstance(obj, list) else [obj]
    for i, rec in enumerate(items):
        for sp in row_spans([rec]):
            if isinstance(sp, BadRecord):
                broken.append(f"{p}:{lines[i] if lines else i + 1}: {sp}")
            else:
                spans.append(sp)
    return spans_result(p, spans, broken)


def _records(p: Path, text: str) -> tuple[Any, list[int] | None]:
    """The file's JSON value, or its JSONL lines' values as a list with their line numbers (a
    ``.jsonl`` file is always read by lines: one log a line, or one message a line)."""
    if p.suffix.lower() != ".jsonl":
        try:
            return json.loads(text), None
        except json.JSONDecodeError:
            pass
    out, lines = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            if not out:
                raise ConfigError(f"{p} is not {ANY_TRACE}: not JSON or JSONL (line {n}: {e.msg})") from None
            out.append(BadRecord(f"not JSON ({e.msg})"))
        lines.append(n)
    return out, lines


def _is_message(x: Any) -> bool:
    return isinstance(x, dict) and any(k in x for k in ("role", "source"))


def _is_log(x: Any) -> bool:
    return isinstance(x, list) or (isinstance(x, dict) and any(isinstance(x.get(k), list)
                                                               for k in ("messages", "history", "traj")))


def _log_of(rec: Any) -> tuple[list[Any], str | None, dict[str, Any]] | None:
    """``(messages, id, extra meta)`` of one log record, or None when it is no log. A list with a
    message in it (and no log) is one log, whatever else it holds: its reader says what is wrong."""
    if isinstance(rec, list) and any(_is_message(m) for m in rec) and not any(_is_log(m) for m in rec):
        return rec, None, {}
    if not isinstance(rec, dict):
        return None
    if isinstance(rec.get("traj"), list):  # a tau-bench result: its trajectory, its outcome kept beside
        info = rec.get("info") if isinstance(rec.get("info"), dict) else {}
        meta = {"imported": "taubench", "task_id": rec.get("task_id"), "reward": rec.get("reward"),
                **{k: info[k] for k in ("task", "reward_info") if k in info}}
        return rec["traj"], str(rec["task_id"]) if rec.get("task_id") is not None else None, meta
    for key in ("messages", "history"):
        if isinstance(rec.get(key), list):
            rid = rec.get("id", rec.get("task_id"))
            return rec[key], str(rid) if rid is not None else None, {}
    return None


def log_trace(messages: list[Any], id: str, meta: dict[str, Any] | None = None) -> Trace:
    """One log as a trace: a group chat (agents named: :func:`group_chat_trace`) or one assistant's chat
    in the OpenAI shape (:func:`chat_trace`), with ``meta`` added to the trace's."""
    if len(messages) < 2:
        raise BadRecord(f"a log of {len(messages)} message(s): nothing upstream of its last message to blame")
    tr = group_chat_trace(messages, id) if is_group_chat(messages) else chat_trace(messages, id)
    tr.meta.update(meta or {})
    return tr


def import_messages(path: str | Path, text: str | None = None, parsed: tuple[Any, list[int] | None] | None = None
                    ) -> ImportResult:
    """The logs of a JSON or JSONL file of messages: one log (a list of messages, ``{"messages": [...]}``,
    ``{"history": [...]}``, a tau-bench result ``{"task_id", "traj", "info"}``, or one message per
    JSONL line) or many (a list or JSONL of such logs). Each log is a trace (:func:`log_trace`);
    a log that cannot be read is in ``broken`` with its position and what is wrong."""
    p = Path(path)
    obj, lines = parsed or _records(p, read_user_text(p, ANY_TRACE) if text is None else text)
    one = _log_of(obj)
    if one is not None:  # one log: the trace is the file's
        logs: list[tuple[int, Any]] = [(0, one)]
    elif isinstance(obj, list) and obj:  # many logs: a JSON list (by position) or JSONL (by line)
        logs = [(lines[i] if lines else i + 1, r if isinstance(r, BadRecord) else _log_of(r)) for i, r in enumerate(obj)]
        if all(x is None for _, x in logs):
            raise ConfigError(f"{p} holds {len(obj)} records but no log: {SHAPES}")
    else:
        raise ConfigError(f"{p} is not {ANY_TRACE}")
    out = ImportResult()
    for n, log in logs:
        try:
            if isinstance(log, BadRecord):
                raise log
            if log is None:
                raise BadRecord(f"not a log ({SHAPES}); the file's other records are")
            messages, rid, meta = log
            out.traces.append(log_trace(messages, rid or (f"line-{n}" if lines else f"{p.stem}-{n}" if n else p.stem),
                                        meta))
        except BadRecord as e:
            out.broken.append(f"{p}:{n}: {e}" if n else f"{p}: {e}")
    return out
