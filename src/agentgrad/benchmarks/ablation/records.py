"""The ablation's compact records: one JSON line per noise edit, screened case and run.

A benchmark folder holds run directories, the reply memo and long per-step notes; what its figures
need is much less. ``OUT/records.jsonl`` (rewritten after every chunk from ``noise.jsonl``,
``cases.jsonl`` and ``results.jsonl``) keeps that much, each line marked with its ``kind``
(``noise``, ``case``, ``run``) and its prompt set (``prompts``):

- a case line: the screen and, for a kept case, the clean and bugged systems' per-question test
  results (``test_clean_q``, ``test_bugged_q``: strings of 0/1);
- a run line: case, cell (``method``), seed, the accepted edits (``accepted_edits``), the test
  result per question after the budget (``test_q``; its delta against the bugged system is the case
  line's), blame accuracy and the counts the summary reports; the step notes are left out.

:func:`read_records` reads such files back (several may be given: chunks of one grid committed
apart) into what :func:`~agentgrad.benchmarks.ablation.summary.summarize` takes, per prompt set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgrad.benchmarks.ablation.cases import PROMPT_SETS, cases
from agentgrad.benchmarks.ablation.memo import read_rows
from agentgrad.core.files import write_atomic
from agentgrad.errors import ConfigError

DROPPED = ("step_notes", "blame_accuracy_per_step")  # what a run line leaves out


def compact_run(row: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "run", "prompts": row.get("prompts", "short"),
            **{k: v for k, v in row.items() if k not in DROPPED and k != "prompts"}}


def compact_case(row: dict[str, Any], prompts: str) -> dict[str, Any]:
    return {"kind": "case", "prompts": prompts, **row}


def compact_noise(row: dict[str, Any], prompts: str) -> dict[str, Any]:
    return {"kind": "noise", "prompts": prompts, **row}


def records_of(out: Path, prompts: str = "short") -> list[dict[str, Any]]:
    """The compact lines of a benchmark folder, in the order noise, cases, runs."""
    out = Path(out)
    return ([compact_noise(r, prompts) for r in read_rows(out / "noise.jsonl")]
            + [compact_case(r, prompts) for r in read_rows(out / "cases.jsonl")]
            + [compact_run({"prompts": prompts, **r}) for r in read_rows(out / "results.jsonl")])


def write_records(out: Path, prompts: str = "short") -> Path:
    """``OUT/records.jsonl``, written afresh (atomically) from the folder's rows."""
    path = Path(out) / "records.jsonl"
    write_atomic(path, "".join(json.dumps(r) + "\n" for r in records_of(out, prompts)))
    return path


def read_records(paths: list[Path]) -> dict[str, tuple[list[dict], list[dict], list[dict]]]:
    """Per prompt set: ``(case rows, run rows, noise rows)`` of the records files ``paths``. A line
    repeated in a later file (the same case, or the same case, cell and seed) is read once (the
    first); a run of a case no longer generated (a duplicate instance) is left out, as
    :func:`~agentgrad.benchmarks.ablation.grid.load_records` does."""
    out: dict[str, tuple[list[dict], list[dict], list[dict]]] = {}
    seen: set[tuple] = set()
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: no such records file")
        rows = read_rows(path)
        if not rows or any(r.get("kind") not in ("noise", "case", "run") for r in rows):
            raise ConfigError(f"{path} is not a records file of the ablation (lines with kind noise, case or run)")
        for r in rows:
            p = r.get("prompts", "short")
            if p not in PROMPT_SETS:
                raise ConfigError(f"{path}: unknown prompt set {p!r}")
            key = (p, r["kind"], r.get("case"), r.get("method"), r.get("seed"), r.get("agent"), r.get("position"),
                   r.get("line"), r.get("system"))
            if key in seen:
                continue
            seen.add(key)
            group = out.setdefault(p, ([], [], []))
            body = {k: v for k, v in r.items() if k not in ("kind", "prompts")}
            group[{"case": 0, "run": 1, "noise": 2}[r["kind"]]].append(body)
    for p, (case_rows, rows, noise) in out.items():
        known = {c.name for c in cases(prompts=p)}
        case_rows[:] = [r for r in case_rows if r.get("case") in known]
        rows[:] = [r for r in rows if r.get("case") in known]
    return out
