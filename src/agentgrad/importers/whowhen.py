"""``whowhen``: the Who&When failure-attribution logs, read from their archive (see :mod:`agentgrad.importers`)."""

from __future__ import annotations

import json
import tarfile
import zlib
from pathlib import Path
from typing import Any, Iterator

from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError
from agentgrad.importers.base import WHOWHEN_SUBSETS, BadRecord, ImportResult, text_field
from agentgrad.importers.groupchat import group_chat_trace

def whowhen_trace(log: Any, id: str, subset: str) -> Trace:
    """One Who&When log as a broadcast trace (:func:`~agentgrad.importers.groupchat.group_chat_trace`
    with the question as node 0 and the log's system prompts), its labels in ``meta["labels"]``."""
    if not isinstance(log, dict):
        raise BadRecord("the log must be an object")
    history = log.get("history")
    if not isinstance(history, list) or not history:
        raise BadRecord("field 'history' must be a non-empty list")
    question = text_field(log.get("question"), "field 'question'")
    try:
        step = int(str(log.get("mistake_step")))
    except ValueError:
        raise BadRecord(f"field 'mistake_step' must be a step number, got {log.get('mistake_step')!r}") from None
    if not 0 <= step < len(history):
        raise BadRecord(f"field 'mistake_step' {step} is outside the history (0-{len(history) - 1})")
    for i, s in enumerate(history):
        if not isinstance(s, dict):
            raise BadRecord(f"history[{i}] must be an object")
        text_field(s.get("content"), f"history[{i}] field 'content'")
    prompts = log.get("system_prompt") if isinstance(log.get("system_prompt"), dict) else {}
    trace = group_chat_trace([{**s, "content": s.get("content") or ""} for s in history], id, question=question,
                             prompts=prompts, imported="whowhen")
    labels = {k: log.get(k) for k in ("mistake_agent", "ground_truth", "question_ID", "level",
                                       "is_correct", "is_corrected") if k in log}
    labels.update(mistake_step=step, mistake_node=step + 1, subset=subset)
    trace.meta["labels"] = labels
    return trace


def _whowhen_members(path: Path) -> Iterator[tuple[str, str, Any]]:
    """(subset, file stem, parsed JSON or the BadRecord that reading it raised) of every log in the archive."""
    if path.is_file() and path.stat().st_size == 0:
        raise ConfigError(f"{path} is empty (0 bytes), so it is not the Who&When archive (who_and_when.tar.gz)")
    try:
        tar = tarfile.open(path)
    except FileNotFoundError:
        raise ConfigError(f"the Who&When archive {path} does not exist") from None
    except (OSError, EOFError, tarfile.TarError, zlib.error):  # EOFError: a gzip stream cut short
        raise ConfigError(f"cannot read the Who&When archive {path}: not a .tar.gz archive (or one cut short)") from None
    with tar:
        try:
            members = tar.getmembers()
        except (OSError, EOFError, tarfile.TarError, zlib.error):  # a gzip stream cut short, a corrupt tar
            raise ConfigError(f"cannot read the Who&When archive {path}: cut short or not a .tar.gz archive") from None
        for m in sorted(members, key=lambda m: m.name):
            parts = m.name.split("/")
            if not m.isfile() or not m.name.endswith(".json") or len(parts) < 2:
                continue
            subset = next((k for k, v in WHOWHEN_SUBSETS.items() if v == parts[-2]), None)
            if subset is None:
                continue
            try:
                yield subset, Path(parts[-1]).stem, json.loads(tar.extractfile(m).read())  # type: ignore[union-attr]
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                yield subset, Path(parts[-1]).stem, BadRecord(f"not JSON ({e})")


def whowhen_archive(data: str | Path | None = None) -> Path:
    from agentgrad.core.data import benchmark_dir

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
            if isinstance(log, BadRecord):
                raise log
            out.traces.append(whowhen_trace(log, f"{sub}-{stem}", sub))
        except BadRecord as e:
            out.broken.append(f"{p}:{WHOWHEN_SUBSETS[sub]}/{stem}.json: {e}")
    return out
