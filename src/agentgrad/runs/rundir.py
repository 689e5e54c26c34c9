"""The run directory: resolved config, an append-only events log, one trace per episode."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

import yaml

from agentgrad.config import redacted
from agentgrad.errors import RunError


class RunDir:
    """``RUN_DIR/{config.yaml, events.jsonl, traces/}``; see ../DESIGN.md for the full layout.

    Args:
        path: the folder.
        resume: continue an existing run instead of refusing to touch it.
    """

    def __init__(self, path: str | os.PathLike, resume: bool = False):
        self.path = Path(path)
        exists = self.path.exists() and any(self.path.iterdir()) if self.path.is_dir() else self.path.exists()
        if self.path.exists() and not self.path.is_dir():
            raise RunError(f"{self.path} exists and is not a directory")
        if exists and not resume:
            raise RunError(f"run directory {self.path} is not empty; pass --resume to continue it, or choose another --out")
        if resume and not (self.path / "events.jsonl").exists():
            raise RunError(f"cannot resume {self.path}: it has no events.jsonl")
        (self.path / "traces").mkdir(parents=True, exist_ok=True)

    @property
    def events_path(self) -> Path:
        return self.path / "events.jsonl"

    def trace_path(self, index: int) -> Path:
        return self.path / "traces" / f"{index:05d}.json"

    def write_config(self, config: dict[str, Any]) -> None:
        (self.path / "config.yaml").write_text(yaml.safe_dump(redacted(config), sort_keys=False), encoding="utf-8")

    def log(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one event (a completed unit of work) durably."""
        record = {"time": round(time.time(), 3), "event": event, **fields}
        with open(self.events_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return record

    def events(self) -> Iterator[dict[str, Any]]:
        """Events in order; a line cut short by a crash (the last one) is skipped."""
        if not self.events_path.exists():
            return
        with open(self.events_path, encoding="utf-8") as f:
            for line in f:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue

    def done_inputs(self) -> set[int]:
        """Indices of inputs whose episode finished and whose trace is on disk."""
        return {e["index"] for e in self.events() if e.get("event") == "input_done" and self.trace_path(e["index"]).exists()}
