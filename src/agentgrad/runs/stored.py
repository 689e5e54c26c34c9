"""A read-only view of an optimisation run directory's files (the layout of
:mod:`agentgrad.runs.store`): what the report, the demo and the interrupt line read of a run,
without creating, checking or claiming anything there; and :func:`read_verdicts`, the reader of a
blamed set's ``verdicts.jsonl`` (written by :mod:`agentgrad.runs.blame_set`).

:class:`~agentgrad.runs.store.RunStore` (the one write path) reads through this view too, so every
file name of a run lives here and in the checkpoint format (:mod:`agentgrad.runs.checkpoint`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from agentgrad.blame.team import TraceVerdict
from agentgrad.errors import RunError
from agentgrad.runs.checkpoint import CHECKPOINT_FILE, prompts_file

FINAL_FILE = "final.json"
PROMPTS_DIR = "prompts"
PENDING_DIR = "pending"
VERDICTS_FILE = "verdicts.jsonl"  # a blamed set: one TraceVerdict per line, appended as each trace finishes

# told of a file that exists but cannot be read: (its path, the error)
OnUnreadable = Callable[[Path, Exception], None]


class StoredRun:
    """The files of the optimisation run in ``path``, read only."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def read_json(self, *parts: str, unreadable: OnUnreadable | None = None) -> Any:
        """The JSON file at ``path/parts``; None when it does not exist. One that cannot be read is
        told to ``unreadable`` (and gives None), or without it raises :class:`RunError`."""
        path = self.path.joinpath(*parts)
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            if unreadable is None:
                raise RunError(f"cannot read {path}: {e}") from None
            unreadable(path, e)
            return None

    def has_final(self) -> bool:
        return (self.path / FINAL_FILE).is_file()

    def final(self, unreadable: OnUnreadable | None = None) -> Any:
        """``final.json`` (the final prompts and scores), or None when the run has not finished."""
        return self.read_json(FINAL_FILE, unreadable=unreadable)

    def prompts(self, step: int = 0, unreadable: OnUnreadable | None = None) -> Any:
        """The prompts saved after ``step`` (0: the starting ones), or None when there are none."""
        return self.read_json(PROMPTS_DIR, prompts_file(step), unreadable=unreadable)

    def prompt_versions(self, unreadable: OnUnreadable | None = None) -> list[tuple[int, Any]]:
        """``(step, prompts)`` of every ``prompts/step-NNNN.json``, in file order (a file whose name
        has no step is left out; an unreadable one gives None)."""
        folder = self.path / PROMPTS_DIR
        out = []
        for f in sorted(folder.glob("step-*.json")) if folder.is_dir() else []:
            value = self.read_json(PROMPTS_DIR, f.name, unreadable=unreadable)
            try:
                out.append((int(f.stem.split("-")[1]), value))
            except (IndexError, ValueError):
                continue
        return out

    def checkpoint_state(self) -> dict[str, Any] | None:
        """The checkpoint as written (not checked against a format or configuration), or None when
        there is none or it cannot be read."""
        try:
            state = self.read_json(CHECKPOINT_FILE)
        except RunError:
            return None
        return state if isinstance(state, dict) else None

    def pending_count(self) -> int:
        """How many samples of the unfinished step were kept (``pending/``)."""
        return sum(1 for _ in (self.path / PENDING_DIR).glob("*.json"))


def read_verdicts(path: str | os.PathLike) -> dict[str, TraceVerdict]:
    """The verdicts of a blamed set's ``verdicts.jsonl`` at ``path``, by trace (a later line of a
    trace replaces an earlier one; a line cut short by a kill is not one); empty when there is no file."""
    p = Path(path)
    out: dict[str, TraceVerdict] = {}
    if p.exists():
        for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                v = TraceVerdict.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            out[v.trace] = v
    return out
