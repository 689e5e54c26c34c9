"""The run directory: resolved config, an append-only events log, one trace per episode.

Everything goes through :class:`agentgrad.core.files.RunFiles` (confined, atomic writes) and
:mod:`agentgrad.core.redact` (no secret reaches a file).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

import yaml

from agentgrad.errors import ConfigError, RunError
from agentgrad.core.files import NameRegistry, RunFiles, append_line
from agentgrad.core.redact import redacted

# What a run directory holds before any unit of work finished: a failed start leaves only these,
# and a later start may reuse such a folder without --resume.
_START_EVENTS = {"started", "run_started"}


def _never_started(path: Path) -> bool:
    """Whether ``path`` holds only what a start that failed before any work leaves behind."""
    for dirpath, dirs, files in os.walk(path):
        rel = Path(dirpath).relative_to(path)
        if rel.parts and rel.parts[-1] not in ("traces", "train", "eval"):
            return False
        for f in files:
            if f == "config.yaml":
                continue
            if f != "events.jsonl":
                return False
            for line in Path(dirpath, f).read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    if json.loads(line).get("event") not in _START_EVENTS:
                        return False
                except (json.JSONDecodeError, AttributeError):
                    return False
    return True


def check_run_dir(path: str | os.PathLike, resume: bool = False, logs: tuple[str, ...] = ("events.jsonl",)) -> None:
    """The checks of :class:`RunDir` without creating anything (run them before loading models).

    ``logs`` are where a run of this kind keeps its events log (``events.jsonl``; a benchmark
    optimisation's ``train/events.jsonl``): a folder holding one is a run that ``--resume`` continues,
    and only then is ``--resume`` the advice; any other non-empty folder is not a run to resume."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise RunError(f"{p} exists and is not a directory")
    fresh = not p.exists() or not any(p.iterdir()) or _never_started(p)
    if fresh:
        return  # nothing was done yet (resuming is starting)
    is_run = any((p / log).exists() for log in logs)
    if not is_run:
        raise RunError(f"{'cannot resume ' if resume else '--out '}{p}: the folder is not empty and holds no "
                       f"agentgrad run (no {' or '.join(logs)}), so there is nothing to resume; choose another "
                       f"--out, or empty that folder")
    if not resume:
        raise RunError(f"run directory {p} is not empty; pass --resume to continue it, or choose another --out")


class RunDir:
    """``RUN_DIR/{config.yaml, events.jsonl, traces/}``; see ../DESIGN.md for the full layout.

    Args:
        path: the folder.
        resume: continue an existing run instead of refusing to touch it. A folder that holds
            only what a failed start left (no finished unit of work) is reused either way.
    """

    def __init__(self, path: str | os.PathLike, resume: bool = False):
        self.path = Path(path)
        check_run_dir(self.path, resume)
        if self.path.exists() and _never_started(self.path):
            for f in ("config.yaml", "events.jsonl"):  # a failed start's leftovers
                (self.path / f).unlink(missing_ok=True)
        self.files = RunFiles(self.path)
        self.names = NameRegistry()
        (self.path / "traces").mkdir(parents=True, exist_ok=True)
        self.files.clean_temporary()  # what a kill -9 in the middle of a write left

    @property
    def events_path(self) -> Path:
        return self.path / "events.jsonl"

    def sample_path(self, folder: str, sample_id: Any, suffix: str = ".json") -> Path:
        """``folder/<safe name of sample_id><suffix>`` inside the run; see :func:`agentgrad.core.files.safe_name`.

        Two different samples that would share a file are refused (:class:`NameRegistry`).
        """
        return self.files.path(folder, self.names.claim(sample_id) + suffix)

    def write_config(self, config: dict[str, Any]) -> None:
        self.files.write_text("config.yaml", text=yaml.safe_dump(redacted(config), sort_keys=False))

    def log(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one event (a completed unit of work) durably; secrets are removed first."""
        record = {"time": round(time.time(), 3), "event": event, **redacted(fields)}
        append_line(self.events_path, json.dumps(record, ensure_ascii=False), durable=True)
        return record

    def events(self) -> Iterator[dict[str, Any]]:
        """Events in order; a line cut short by a crash (the last one) is skipped."""
        if not self.events_path.exists():
            return
        with open(self.events_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    e = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(e, dict):
                    yield e

    def started(self, digest: str, what: str = "options") -> None:
        """Record the configuration's digest, or check it when resuming: a changed one is refused."""
        old = next((e for e in self.events() if e.get("event") == "started"), None)
        if old is None:
            self.log("started", digest=digest)
        elif old.get("digest") != digest:
            raise ConfigError(f"{self.path} was started with other {what}; resume it with the same ones, "
                           f"or choose another --out")


def kept_summary(path: str | os.PathLike) -> str:
    """One phrase saying what a stopped run left in ``path``; every file there is whole (atomic writes)."""
    from agentgrad.runs.stored import VERDICTS_FILE, StoredRun, read_verdicts

    p = Path(path)
    if not p.is_dir():
        return f"nothing was written to {p} yet"
    if StoredRun(p).has_final() and not (p / "report.html").is_file():  # stopped while writing the report
        return f"the run in {p} is complete but its report.html was not written"
    for run in (StoredRun(p), StoredRun(p / "train")):  # an optimisation, or a benchmark's
        try:
            state = run.checkpoint_state()
            pending = run.pending_count()  # samples of the unfinished step
            more = (f" and {pending} finished sample(s) of the next step, which --resume does not run again"
                    if pending else "")
            return f"{p} keeps the checkpoint after step {state['step']} ({state['next_sample']} samples done){more}"
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if (p / VERDICTS_FILE).is_file():  # a blamed set: one verdict per finished trace
        return f"{p} keeps {len(read_verdicts(p / VERDICTS_FILE))} finished trace(s)"
    # a benchmark writes one record per episode (episodes/) beside its trace (traces/): count each once
    episodes = sum(1 for _ in p.glob("**/episodes/*.json")) or sum(1 for _ in p.glob("**/traces/*.json"))
    if episodes:
        return f"{p} keeps {episodes} finished episode(s)"
    logs = sum(1 for _ in p.glob("logs/*.json"))  # bench whowhen: one record per log
    if logs:
        return f"{p} keeps {logs} finished log(s)"
    return f"{p} keeps {sum(1 for _ in p.glob('*.json'))} finished file(s)"
