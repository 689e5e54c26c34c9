"""The run store: every file of an optimisation run directory, read and written in one place.

::

    RUN_DIR/
      config.yaml, events.jsonl   the resolved configuration and the events log (RunDir)
      traces/<sample>.json        every training sample's episode
      attribution/<sample>.json   a failed sample's attribution, blame, trajectories and targets
      prompts/step-NNNN.json      every accepted version of the prompts (step 0: the starting ones)
      checkpoint.json             the loop's state after its last step (format: runs/checkpoint.py)
      pending/<sample>.json       a sample of the unfinished step that finished before a stop
      final.json                  the final prompts and scores

Every write goes through :class:`agentgrad.core.files.RunFiles` (confined to the run directory,
atomic) and every sample's file name through the run's :class:`~agentgrad.core.files.NameRegistry`;
the loop (:class:`agentgrad.optim.trainer.Trainer`) hands values to the store and reads none of
these files itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from agentgrad.core.files import write_json_atomic
from agentgrad.core.trace import Trace
from agentgrad.errors import RunError
from agentgrad.runs.checkpoint import CHECKPOINT_FILE, checked, prompts_file, stamped
from agentgrad.runs.rundir import RunDir
from agentgrad.runs.stored import FINAL_FILE, PENDING_DIR, PROMPTS_DIR, StoredRun


class RunStore(StoredRun):
    """The files of the optimisation run in ``run_dir``: written here, read through
    :class:`~agentgrad.runs.stored.StoredRun` (the read-only view the report and the demo use)."""

    def __init__(self, run_dir: RunDir):
        super().__init__(run_dir.path)
        self.run_dir = run_dir
        self.files = run_dir.files

    def log(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one event to the run's log (:meth:`RunDir.log`); returns the record."""
        return self.run_dir.log(event, **fields)

    # --- prompts and checkpoints -------------------------------------------------------------
    def save_prompts(self, step: int, prompts: dict[str, str]) -> None:
        """The prompts after ``step`` (0: the starting ones), as ``prompts/step-NNNN.json``."""
        self.files.write_json(PROMPTS_DIR, prompts_file(step), data=prompts)

    def prompts(self, step: int = 0, unreadable: Any = None) -> dict[str, str]:
        """The prompts saved after ``step`` (0: the starting ones); :class:`RunError` when there are none."""
        prompts = super().prompts(step, unreadable)
        if prompts is None and unreadable is None:
            raise RunError(f"cannot read {self.files.path(PROMPTS_DIR, prompts_file(step))}: the file does not exist")
        return prompts

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        """``state`` (the loop's fields) as the run's checkpoint, stamped with the format version."""
        self.files.write_json(CHECKPOINT_FILE, data=stamped(state))

    def checkpoint(self, digest: str | None = None) -> dict[str, Any] | None:
        """The run's checkpoint, or None when there is none; raises :class:`RunError` when it cannot be
        read, has another format version, or was written for another configuration (``digest``)."""
        path = self.files.path(CHECKPOINT_FILE)
        if not path.exists():
            return None
        return checked(self.read_json(CHECKPOINT_FILE), path, self.path, digest)

    # --- per sample -------------------------------------------------------------------------------
    def trace_path(self, sample: str) -> str:
        """Where ``sample``'s trace is, relative to the run directory (``traces/<name>.json``)."""
        return self.run_dir.sample_path("traces", sample).relative_to(self.path).as_posix()

    def save_trace(self, sample: str, trace: Trace) -> None:
        trace.save(self.run_dir.sample_path("traces", sample))

    def save_attribution(self, sample: str, record: dict[str, Any]) -> None:
        """A failed sample's attribution record (:func:`agentgrad.attribution.io.attribution_record`)."""
        write_json_atomic(self.run_dir.sample_path("attribution", sample), record)

    # a sample finished before a stop (Ctrl-C during the step's other samples, its optimizer or its
    # validation) is kept in pending/ until the step's checkpoint, and a resumed run reads it back
    # instead of running it again
    def _pending(self, sample: str) -> Path:
        return self.run_dir.sample_path(PENDING_DIR, sample)

    def pending(self, sample: str) -> dict[str, Any] | None:
        """What was kept of ``sample`` in the unfinished step; None when nothing (or nothing readable) was."""
        path = self._pending(sample)
        try:
            d = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        except (OSError, ValueError):
            return None  # unreadable: the sample runs again
        return d if isinstance(d, dict) else None

    def keep_pending(self, sample: str, record: dict[str, Any]) -> None:
        write_json_atomic(self._pending(sample), record)

    def drop_pending(self, samples: Iterable[str]) -> None:
        """Forget the kept samples of a step once its checkpoint is written."""
        for s in samples:
            self._pending(s).unlink(missing_ok=True)

    # --- the end ------------------------------------------------------------------------------
    def save_final(self, final: dict[str, Any]) -> None:
        """The final prompts and scores, as ``final.json``."""
        self.files.write_json(FINAL_FILE, data=final)
