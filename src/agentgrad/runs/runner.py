"""Run a system over many inputs, concurrently, writing each episode as it finishes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agentgrad.core.system import System, wrap_inputs
from agentgrad.core.trace import Trace
from agentgrad.errors import AgentgradError, ConfigError, ServerUnreachableError
from agentgrad.core.files import read_text
from agentgrad.core.redact import redact_text
from agentgrad.models.threads import compute_threads
from agentgrad.runs.rundir import RunDir


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Examples from a JSONL file: one JSON object per non-empty line."""
    path = Path(path)
    lines = read_text(path, "inputs file").splitlines()
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


def input_digest(example: dict[str, Any]) -> str:
    """A short hash of one example's content: a resumed run refuses an id whose input changed."""
    return hashlib.sha256(json.dumps(example, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:16]


@dataclass
class Planned:
    index: int  # line position (for display)
    id: str  # the example's "id", else its position
    name: str  # the trace's file name (safe, unique)
    digest: str


def plan_inputs(examples: list[dict[str, Any]], run_dir: RunDir) -> tuple[list[Planned], set[str]]:
    """Every example with its id and trace file, and the ids already done in ``run_dir``.

    Inputs are matched by id (``"id"``, else the line position), never by position alone: a
    resumed run with reordered or added inputs runs exactly the ones not yet done, and an id whose
    content changed since it was done is refused. Two examples with the same id are refused.
    """
    plan, seen = [], {}
    for i, ex in enumerate(examples):
        ex_id = str(ex["id"]) if "id" in ex else str(i)
        if ex_id in seen:
            raise ConfigError(f"examples {seen[ex_id] + 1} and {i + 1} have the same id {ex_id!r}; ids must be unique")
        seen[ex_id] = i
        name = run_dir.names.claim(ex_id) if "id" in ex else f"{i:05d}"
        plan.append(Planned(i, ex_id, name, input_digest(ex)))
    by_id = {p.id: p for p in plan}
    done: set[str] = set()
    for e in run_dir.events():
        if e.get("event") != "input_done" or str(e.get("id")) not in by_id:
            continue
        p = by_id[str(e["id"])]
        if e.get("input") and e["input"] != p.digest:
            raise ConfigError(f"input {p.id!r} changed since {run_dir.path} ran it; resume with the same inputs, "
                              f"or choose another --out")
        if (run_dir.path / "traces" / f"{p.name}.json").exists():
            done.add(p.id)
    return plan, done


async def run_inputs(
    system: System,
    examples: list[dict[str, Any]],
    run_dir: RunDir,
    concurrency: int = 1,
    on_progress: Callable[[int, str], None] | None = None,
) -> RunSummary:
    """Run ``system`` on every example not yet done in ``run_dir``.

    Each finished episode is saved to ``traces/<id>.json`` (``NNNNN.json`` for examples without an
    id) and logged before the next counts as done, so a crash loses at most the episodes in
    flight; ``RunDir(resume=True)`` continues, matching inputs by id (:func:`plan_inputs`).
    A user-level error in one episode (a prompt too long, a model that keeps failing) is logged
    with its partial trace and the run goes on. A model server that cannot be reached
    (:class:`~agentgrad.errors.ServerUnreachableError`: a wrong URL at the first call, or a server
    that stopped answering for its breaker's time) stops the run instead: no input is started after
    it, the episodes in flight end (they fail at once), the inputs it cut short are not recorded
    (a resumed run runs them), and the error is raised with how much was kept.
    """
    plan, done = plan_inputs(examples, run_dir)
    summary = RunSummary(total=len(examples), skipped=len(done))
    sem = asyncio.Semaphore(max(1, concurrency))
    t0 = time.time()
    run_dir.log("run_started", inputs=len(examples), already_done=len(done))
    stopped: list[ServerUnreachableError] = []

    async def one(p: Planned, example: dict[str, Any]) -> None:
        async with sem:
            if stopped:
                return
            trace = Trace(id=p.id, meta={"index": p.index, "system": system.name})
            started = time.time()
            try:
                with trace:
                    inputs = {k: wrap_inputs(trace, v, k) for k, v in system.select_inputs(example).items()}
                    output = await system.aforward(**inputs)
                trace.meta["output"] = str(output)
                status, error = "input_done", None
            except ServerUnreachableError as e:  # not this input's fault: it is run again on --resume
                stopped.append(e)
                return
            except AgentgradError as e:
                status, error = "input_failed", redact_text(str(e))
                trace.meta["error"] = error
            trace.meta["seconds"] = round(time.time() - started, 3)
            rel = f"traces/{p.name}.json"
            trace.save(run_dir.files.path("traces", f"{p.name}.json"))
            calls = trace.calls()
            summary.calls += len(calls)
            summary.prompt_tokens += sum(n.usage.get("prompt_tokens", 0) for n in calls)
            summary.completion_tokens += sum(n.usage.get("completion_tokens", 0) for n in calls)
            fields: dict[str, Any] = {"index": p.index, "id": p.id, "input": p.digest, "trace": rel}
            if error:
                fields["error"] = error
                summary.failed.append((p.index, error))
            else:
                summary.done += 1
            run_dir.log(status, calls=len(calls), seconds=trace.meta["seconds"], **fields)
            if on_progress:
                on_progress(p.index, status)

    await asyncio.gather(*(one(p, ex) for p, ex in zip(plan, examples) if p.id not in done))
    summary.seconds = round(time.time() - t0, 3)
    if stopped:
        kept = summary.done + summary.skipped
        run_dir.log("run_stopped", error=redact_text(str(stopped[0])), done=summary.done, failed=len(summary.failed),
                    seconds=summary.seconds)
        raise ServerUnreachableError(f"{redact_text(str(stopped[0]))}; the run stopped with {kept} of {summary.total} "
                                     f"inputs done (kept in {run_dir.path}; continue with --resume)")
    run_dir.log("run_finished", done=summary.done, failed=len(summary.failed), seconds=summary.seconds)
    return summary


def run_jobs(jobs: list[Any], fn: Callable[[Any], Any], concurrency: int,
             done: Callable[[Any, Any], None]) -> None:
    """``fn(job)`` for every job, at most ``concurrency`` at once, ``done(job, result)`` in this thread.

    Results are handed over as jobs finish, so each is recorded as soon as it exists; the tensor
    work of the jobs follows the thread layout of :mod:`agentgrad.models.threads`. If a job
    raises, the jobs not yet started are cancelled and the error propagates once the running
    ones have finished (their results are still handed to ``done``).
    """
    if concurrency <= 1:
        with compute_threads(concurrency):  # the same thread count as a concurrent run: the same numbers
            for job in jobs:
                done(job, fn(job))
        return
    from concurrent.futures import ThreadPoolExecutor, as_completed

    error: BaseException | None = None
    with compute_threads(concurrency), ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = {pool.submit(fn, job): job for job in jobs}
        for f in as_completed(futures):
            if f.cancelled():
                continue
            try:
                result = f.result()
            except BaseException as e:  # noqa: BLE001 - re-raised below, after the running jobs end
                if error is None:
                    error = e
                    for other in futures:
                        other.cancel()
                continue
            done(futures[f], result)
    if error is not None:
        raise error
