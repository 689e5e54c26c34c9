"""The checkpoint format of an optimisation run: the loop's state after each step, and the prompt versions.

A run directory holds ``checkpoint.json`` (what the loop needs to resume: the next sample, the step,
the current prompts, the scores so far and the RNG state) and ``prompts/step-NNNN.json`` (every
accepted version of the prompts). :class:`agentgrad.runs.store.RunStore` reads and writes both
(atomically, so a run killed at any point leaves the previous checkpoint whole); :func:`checked`
refuses a checkpoint written by another version or for another configuration.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from agentgrad.errors import RunError

CHECKPOINT_VERSION = 1
CHECKPOINT_FILE = "checkpoint.json"


def prompts_file(step: int) -> str:
    """The file name of the prompts after ``step`` (0: the initial ones), under ``prompts/``."""
    return f"step-{step:04d}.json"


def stamped(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (the loop's fields) as a checkpoint: stamped with the format version."""
    return {"version": CHECKPOINT_VERSION, **state}


def checked(state: Any, path: Path, run_path: Path, digest: str | None = None) -> dict[str, Any]:
    """``state``, read from ``path``; raises :class:`RunError` when it has another format version
    or was written for another configuration (``digest``)."""
    version = state.get("version") if isinstance(state, dict) else None
    if version != CHECKPOINT_VERSION:
        raise RunError(f"{path} has version {version!r}; expected {CHECKPOINT_VERSION}")
    if digest and state.get("config") != digest:
        raise RunError(f"the configuration changed since {run_path} started; resume with the same one")
    return state


def rng_state(rng: random.Random) -> dict[str, Any]:
    """``rng``'s state as JSON."""
    version, internal, gauss = rng.getstate()
    return {"python": [version, list(internal), gauss]}


def set_rng_state(rng: random.Random, state: dict[str, Any]) -> None:
    """Restore ``rng`` from :func:`rng_state`'s output."""
    version, internal, gauss = state["python"]
    rng.setstate((version, tuple(internal), gauss))
