"""AgentRx's labelled runs as traces, read as a user's files are (docs/agentrx.md).

The tau-bench results (``tau_retail/tau_dataset_failed.json``) and the Magentic-One logs (each
``magentic_dataset/<id>.json`` of the archive, unpacked into a temporary folder and read there) go
through :func:`agentgrad.importers.spans.import_file`, the reader of ``agentgrad blame``. The labels
are the only reader of the ground-truth files: each run's root cause, its agent and its step (the
message index + 1); the annotators' explanations are never read.
"""

from __future__ import annotations

import json
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from agentgrad.core.data import benchmark_dir
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError
from agentgrad.importers.groupchat import agent_key
from agentgrad.importers.spans import import_file

SUBSETS = ("tau", "magentic")
TAU_RESULTS = Path("tau_retail") / "tau_dataset_failed.json"
TAU_LABELS = Path("ground_truth") / "tau_ground_truth.json"
MAGENTIC_ARCHIVE = "magentic_dataset.tar.gz"
MAGENTIC_LABELS = Path("ground_truth") / "magentic_one_ground_truth.json"


@dataclass
class Run:
    """One labelled run: its trace, where the root cause is, and which half it is in."""

    subset: str
    trace: Trace
    agent: str  # the root cause's agent, as agent_key writes it
    message: int  # the root cause's message index (step_number - 1)
    node: int | None  # the trace node of that message (None: a message the trace keeps no node of)
    half: str  # "A" (choice) or "B" (report)

    def to_dict(self) -> dict[str, Any]:
        return {"subset": self.subset, "run": self.trace.id, "agent": self.agent, "message": self.message,
                "node": self.node, "half": self.half}


def _root_causes(path: Path) -> dict[str, tuple[str, int]]:
    """trajectory id -> (failed agent, step number) of each run's root cause (none: left out)."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the AgentRx labels {path}: {e}") from None
    out = {}
    for r in rows if isinstance(rows, list) else []:
        if not isinstance(r, dict):
            continue
        rc = (r.get("root_cause") or {}).get("failure_id") if isinstance(r.get("root_cause"), dict) else None
        hit = [f for f in r.get("failures") or [] if isinstance(f, dict) and str(f.get("failure_id")) == str(rc)]
        if hit and isinstance(hit[0].get("step_number"), int):
            out[str(r.get("trajectory_id"))] = (agent_key(hit[0].get("failed_agent", "")), hit[0]["step_number"])
    return out


def _node_of(trace: Trace, message: int) -> int | None:
    """The node of message ``message`` (importers record it as ``meta["message"]`` or ``meta["step"]``)."""
    for n in trace.nodes:
        if n.meta.get("message", n.meta.get("step")) == message:
            return n.id
    return None


def _halves(runs: list[tuple[Trace, str, int]], subset: str) -> list[Run]:
    ordered = sorted(runs, key=lambda r: r[0].id)
    return [Run(subset, tr, agent, msg, _node_of(tr, msg), "A" if i % 2 == 0 else "B")
            for i, (tr, agent, msg) in enumerate(ordered)]


def _magentic_files(archive: Path) -> Iterator[Path]:
    """The logs of the archive, unpacked into a temporary folder (GAIA-derived: never kept unpacked)."""
    with tempfile.TemporaryDirectory(prefix="agentrx-") as tmp:
        try:
            with tarfile.open(archive) as tar:
                members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".json")
                           and not m.name.endswith("steps_by_id.json") and "/" in m.name and ".." not in m.name]
                tar.extractall(tmp, members=members, filter="data")
        except (OSError, EOFError, tarfile.TarError, zlib.error) as e:
            raise ConfigError(f"cannot read the AgentRx archive {archive}: {e}") from None
        yield from sorted(Path(tmp).rglob("*.json"))


def load_runs(subsets: tuple[str, ...] = SUBSETS, data: str | Path | None = None) -> tuple[list[Run], list[str]]:
    """The labelled runs of ``subsets`` and what could not be read (one line each)."""
    bad = [s for s in subsets if s not in SUBSETS]
    if bad:
        raise ConfigError(f"unknown AgentRx subset {bad[0]!r}; valid: {', '.join(SUBSETS)}")
    root = benchmark_dir("agentrx", data)
    runs: list[Run] = []
    broken: list[str] = []
    if "tau" in subsets:
        labels = _root_causes(root / TAU_LABELS)
        res = import_file(root / TAU_RESULTS)
        broken += res.broken
        found = [(t, *labels[t.id]) for t in res.traces if t.id in labels]
        runs += _halves([(t, a, s - 1) for t, a, s in found], "tau")
    if "magentic" in subsets:
        labels = _root_causes(root / MAGENTIC_LABELS)
        found = []
        for f in _magentic_files(root / MAGENTIC_ARCHIVE):
            if f.stem not in labels:
                continue
            res = import_file(f)
            broken += [b.replace(str(f.parent) + "/", "") for b in res.broken]
            found += [(t, labels[f.stem][0], labels[f.stem][1] - 1) for t in res.traces]
        runs += _halves(found, "magentic")
    return runs, broken
