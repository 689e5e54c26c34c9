"""Checkpoints of an optimisation run: the loop's state after each step, and the prompt versions.

A run directory holds ``checkpoint.json`` (what the loop needs to resume: the next sample, the step,
the current prompts, the scores so far and the RNG state) and ``prompts/step-NNNN.json`` (every
accepted version of the prompts). Both are written atomically, so a run killed at any point leaves
the previous checkpoint whole; :func:`read_checkpoint` refuses one written by another version or
for another configuration.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from agentgrad.core.files import write_json_atomic
from agentgrad.errors import RunError

CHECKPOINT_VERSION = 1
CHECKPOINT_FILE = "checkpoint.json"


def checkpoint_path(run_path: str | Path) -> Path:
    return Path(run_path) / CHECKPOINT_FILE


def write_checkpoint(run_path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` (the loop's fields) as the run's checkpoint, stamped with the format version."""
    write_json_atomic(checkpoint_path(run_path), {"version": CHECKPOINT_VERSION, **state})


def read_checkpoint(run_path: str | Path, digest: str | None = None) -> dict[str, Any] | None:
    """The run's checkpoint, or None when there is none; raises :class:`RunError` when it cannot be
    read, has another format version, or was written for another configuration (``digest``)."""
    path = checkpoint_path(run_path)
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise RunError(f"cannot read {path}: {e}") from None
    if state.get("version") != CHECKPOINT_VERSION:
        raise RunError(f"{path} has version {state.get('version')!r}; expected {CHECKPOINT_VERSION}")
    if digest and state.get("config") != digest:
        raise RunError(f"the configuration changed since {Path(run_path)} started; resume with the same one")
    return state


def save_prompts(run_path: str | Path, step: int, prompts: dict[str, str]) -> None:
    """The prompts after ``step`` (0: the initial ones), as ``prompts/step-NNNN.json``."""
    write_json_atomic(Path(run_path) / "prompts" / f"step-{step:04d}.json", prompts)


def rng_state(rng: random.Random) -> dict[str, Any]:
    """``rng``'s state as JSON."""
    version, internal, gauss = rng.getstate()
    return {"python": [version, list(internal), gauss]}


def set_rng_state(rng: random.Random, state: dict[str, Any]) -> None:
    """Restore ``rng`` from :func:`rng_state`'s output."""
    version, internal, gauss = state["python"]
    rng.setstate((version, tuple(internal), gauss))
