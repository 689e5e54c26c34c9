"""Tasks: a dataset, a system, a metric and a loss builder, so any user task plugs into the trainer."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from agentgrad.blame.backward import VerbalLoss
from agentgrad.core.config import SystemConfig
from agentgrad.runs.graph_system import GraphSystem
from agentgrad.core.system import System
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError, RegistryError
from agentgrad.runs.runner import read_jsonl


@dataclass
class Score:
    """A metric's verdict on one example."""

    value: float  # in [0, 1]
    passed: bool
    details: dict[str, Any] = field(default_factory=dict)


class Task(Protocol):
    """What the trainer needs from a task."""

    name: str

    def examples(self, split: str) -> list[dict[str, Any]]: ...

    def build_system(self) -> System: ...

    def metric(self, example: dict[str, Any], output: Any, trace: Trace) -> Score: ...

    def loss(self, example: dict[str, Any], output: Any, trace: Trace, score: Score) -> VerbalLoss | None: ...


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, single spaces: the usual exact-match normalisation."""
    text = str(text).lower().translate(str.maketrans("", "", string.punctuation))
    return re.sub(r"\s+", " ", text).strip()


class PipelineTask:
    """A declared system over JSONL splits (``{"id", <inputs>, "answer"}``), scored by exact match."""

    name = "pipeline"

    def __init__(self, system: SystemConfig, data: dict[str, Path], models: dict[str, Any] | None = None):
        self.system_config = system
        self.data = data
        self.models = models

    def examples(self, split: str) -> list[dict[str, Any]]:
        if split not in self.data:
            raise ConfigError(f"task {self.name!r} has no {split!r} split (has: {', '.join(self.data) or 'none'})")
        out = read_jsonl(self.data[split])
        for i, ex in enumerate(out):
            ex.setdefault("id", f"{split}-{i}")
            if "answer" not in ex:
                raise ConfigError(f"{self.data[split]}: example {ex['id']} has no \"answer\" field")
        return out

    def build_system(self) -> System:
        return GraphSystem(self.system_config, self.models)

    def metric(self, example: dict[str, Any], output: Any, trace: Trace) -> Score:
        ok = normalize_answer(str(output)) == normalize_answer(example["answer"])
        return Score(1.0 if ok else 0.0, ok, {"expected": example["answer"], "produced": str(output)})

    def loss(self, example: dict[str, Any], output: Any, trace: Trace, score: Score) -> VerbalLoss | None:
        if score.passed:
            return None
        return VerbalLoss.generic(
            expected=str(example["answer"]),
            produced=str(output),
            explanation="the final answer must match the expected answer exactly (case and punctuation aside)",
            targets=[output.node],
            spans=answer_spans(trace, output.node, str(output)),
        )


def answer_spans(trace: Trace, node: int, produced: str) -> dict[int, list[tuple[int, int]]]:
    """Where the produced (wrong) answer stands in ``node``'s output: the loss span the targeted
    objective and the ``carry`` and ``stop`` rules read (none for an empty answer or one not found)."""
    produced = produced.strip()
    at = trace.nodes[node].text.find(produced) if produced else -1
    return {node: [(at, at + len(produced))]} if at >= 0 else {}


def _words(text: str) -> list[str]:
    return normalize_answer(text).split()


def _contains(words: list[str], value: str) -> bool:
    v = _words(value)
    return bool(v) and any(words[i : i + len(v)] == v for i in range(len(words) - len(v) + 1))


class LookupTask(PipelineTask):
    """Questions about a record: an answer passes when it names the expected value and none of the
    example's ``avoid`` values (the record's other values), in any sentence around them.

    The loss names what was wrong: where the answer names an ``avoid`` value, its occurrences are
    the loss's spans (the loss-targeted objective differentiates those tokens); otherwise the
    whole answer is.
    """

    name = "lookup"

    def metric(self, example: dict[str, Any], output: Any, trace: Trace) -> Score:
        words = _words(str(output))
        wrong = [v for v in example.get("avoid", []) if _contains(words, v)]
        ok = _contains(words, str(example["answer"])) and not wrong
        return Score(1.0 if ok else 0.0, ok, {"expected": example["answer"], "produced": str(output), "named": wrong})

    def loss(self, example: dict[str, Any], output: Any, trace: Trace, score: Score) -> VerbalLoss | None:
        if score.passed:
            return None
        named = score.details.get("named") or []
        text = trace.nodes[output.node].text
        spans = [(m.start(), m.end()) for v in named
                 for m in re.finditer(r"\b" + re.escape(v) + r"\b", text, re.I)] or [(0, len(text))]
        why = (f"the answer names {', '.join(map(repr, named))}, another value of the record" if named
               else "the answer does not name the expected value")
        loss = VerbalLoss.generic(expected=str(example["answer"]), produced=str(output), explanation=why,
                                  targets=[output.node])
        loss.spans = {output.node: sorted(spans)}
        return loss


_TASKS: dict[str, Callable[..., Task]] = {"pipeline": PipelineTask, "lookup": LookupTask}


def register_task(name: str, factory: Callable[..., Task]) -> None:
    _TASKS[name] = factory


def list_tasks() -> list[str]:
    return sorted(_TASKS)


def get_task(name: str) -> Callable[..., Task]:
    try:
        return _TASKS[name]
    except KeyError:
        raise RegistryError(f"unknown task {name!r}; valid: {', '.join(sorted(_TASKS))}") from None
