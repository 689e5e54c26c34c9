"""Run a system over many inputs, concurrently, writing each episode as it finishes."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agentgrad.core.system import System, wrap_inputs
from agentgrad.core.trace import Trace
from agentgrad.errors import AgentgradError, ConfigError
from agentgrad.runs.rundir import RunDir


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Examples from a JSONL file: one JSON object per non-empty line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"inputs file {path} does not exist") from None
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} line {i} is not valid JSON: {e.msg}") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{path} line {i} must be a JSON object, got {type(obj).__name__}")
        out.append(obj)
    if not out:
        raise ConfigError(f"inputs file {path} holds no examples")
    return out


@dataclass
class RunSummary:
    total: int
    done: int = 0
    skipped: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


async def run_inputs(
    system: System,
    examples: list[dict[str, Any]],
    run_dir: RunDir,
    concurrency: int = 1,
    on_progress: Callable[[int, str], None] | None = None,
) -> RunSummary:
    """Run ``system`` on every example not yet done in ``run_dir``.

    Each finished episode is saved to ``traces/NNNNN.json`` and logged before the next counts
    as done, so a crash loses at most the episodes in flight; ``RunDir(resume=True)`` continues.
    A user-level error in one episode (a prompt too long, a model that keeps failing) is logged
    with its partial trace and the run goes on.
    """
    done = run_dir.done_inputs()
    summary = RunSummary(total=len(examples), skipped=len(done))
    sem = asyncio.Semaphore(max(1, concurrency))
    t0 = time.time()
    run_dir.log("run_started", inputs=len(examples), already_done=len(done))

    async def one(index: int, example: dict[str, Any]) -> None:
        async with sem:
            ex_id = str(example.get("id", index))
            trace = Trace(id=ex_id, meta={"index": index, "system": system.name})
            started = time.time()
            try:
                with trace:
                    inputs = {k: wrap_inputs(trace, v, k) for k, v in system._select(example).items()}
                    output = await system.aforward(**inputs)
                trace.meta["output"] = str(output)
                status, error = "input_done", None
            except AgentgradError as e:
                status, error = "input_failed", str(e)
                trace.meta["error"] = error
            trace.meta["seconds"] = round(time.time() - started, 3)
            trace.save(run_dir.trace_path(index))
            calls = trace.calls()
            summary.calls += len(calls)
            summary.prompt_tokens += sum(n.usage.get("prompt_tokens", 0) for n in calls)
            summary.completion_tokens += sum(n.usage.get("completion_tokens", 0) for n in calls)
            fields: dict[str, Any] = {"index": index, "id": ex_id, "trace": str(run_dir.trace_path(index).relative_to(run_dir.path))}
            if error:
                fields["error"] = error
                summary.failed.append((index, error))
            else:
                summary.done += 1
            run_dir.log(status, calls=len(calls), seconds=trace.meta["seconds"], **fields)
            if on_progress:
                on_progress(index, status)

    await asyncio.gather(*(one(i, ex) for i, ex in enumerate(examples) if i not in done))
    summary.seconds = round(time.time() - t0, 3)
    run_dir.log("run_finished", done=summary.done, failed=len(summary.failed), seconds=summary.seconds)
    return summary
