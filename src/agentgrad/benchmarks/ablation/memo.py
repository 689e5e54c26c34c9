"""The ablation's caches: greedy replies and attributions are computed once, results never change.

Greedy decoding makes a reply a function of its request, so a reply is memoised by (messages, tools,
settings) and an attribution by the trace's content. The reply memo is also kept on disk
(``OUT/memo.jsonl``, appended as replies come): a grid run in chunks of an hour, in separate
processes, scores each clean and bugged system once and reuses every reply of an earlier chunk.
With the memo a reply is the one first computed: the same as without it, up to the few-ulp
differences batching can make between two computations of the same greedy reply.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Callable

from agentgrad.attribution.scorer import Scorer
from agentgrad.core.files import append_line
from agentgrad.core.model import Generation, ThreadedAsyncMixin
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file the benchmark appends to; a line a killed process left
    unfinished is skipped (its work is done again), a missing file is empty."""
    if not path.exists():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, IsADirectoryError):
        raise ConfigError(f"{path} is not a JSONL file of the benchmark (not UTF-8 text)") from None
    out = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def append_row(path: Path, row: dict[str, Any]) -> None:
    append_line(path, json.dumps(row))


class MemoModel(ThreadedAsyncMixin):
    """A model whose greedy replies are memoised by request (messages, tools, settings), in memory
    and, with ``path``, on disk; sampled calls pass through. Counts the calls asked and generated."""

    def __init__(self, inner: Any, path: Path | None = None):
        self.inner, self.name = inner, getattr(inner, "name", "model")
        self._cache: dict[str, Generation] = {}
        self._lock = threading.Lock()
        self.asked = self.generated = 0
        self.path = path
        if path is not None:
            for row in read_rows(path):
                if isinstance(row.get("g"), dict) and isinstance(row.get("k"), str):
                    self._cache[row["k"]] = Generation(**row["g"])

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def generate(self, messages, tools, settings):  # type: ignore[no-untyped-def]
        with self._lock:
            self.asked += 1
        if settings.temperature != 0:
            with self._lock:
                self.generated += 1
            return self.inner.generate(messages, tools, settings)
        key = hashlib.sha256(json.dumps([messages, tools, settings.model_dump(mode="json")], sort_keys=True,
                                        default=str).encode()).hexdigest()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return dataclasses.replace(hit)
        out = self.inner.generate(messages, tools, settings)
        with self._lock:
            self._cache[key] = out
            self.generated += 1
            if self.path is not None and not out.tool_calls:  # the look-up systems call no tools
                append_row(self.path, {"k": key, "g": {f.name: getattr(out, f.name) for f in dataclasses.fields(out)
                                                       if f.name != "tool_calls"}})
        return dataclasses.replace(out)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


_MEMOS: dict[tuple[int, str], MemoModel] = {}


def memo_model(inner: Any, path: Path | None = None) -> MemoModel:
    """The process's one memo of ``inner`` per memo file (replies are a function of the request, so
    every benchmark run in a process may share them)."""
    key = (id(inner), str(path))
    if key not in _MEMOS:
        _MEMOS[key] = MemoModel(inner, path)
    return _MEMOS[key]


def trace_key(trace: Trace) -> str:
    """What an attribution of ``trace`` depends on: every node's kind, name, text, parents, messages, spans."""
    return hashlib.sha256(json.dumps(
        [[n.kind, n.name, n.text, n.parents, n.messages, [s.to_dict() for s in n.spans]] for n in trace.nodes],
        sort_keys=True, default=str).encode()).hexdigest()


class MemoScorer:
    """A scorer whose attributions are memoised by the trace's content (``attribute``, and
    ``attribute_node`` with its objective); everything else is the scorer's."""

    def __init__(self, inner: Scorer):
        self.inner = inner
        self._memo: dict[Any, Any] = {}

    def attribute(self, trace: Trace, on_node: Callable | None = None, batch_tokens: int | None = None):  # type: ignore[no-untyped-def]
        key = ("trace", trace_key(trace))
        if key not in self._memo:
            self._memo[key] = self.inner.attribute(trace, on_node, batch_tokens)
        return copy.deepcopy(self._memo[key])

    def attribute_node(self, trace: Trace, node: Any, target_chars: list[tuple[int, int]] | None = None,
                       keep: bool = False):  # type: ignore[no-untyped-def]
        key = ("node", trace_key(trace), node.id, json.dumps(target_chars))
        if key not in self._memo:
            self._memo[key] = self.inner.attribute_node(trace, node, target_chars, keep=keep)
        return copy.deepcopy(self._memo[key])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
