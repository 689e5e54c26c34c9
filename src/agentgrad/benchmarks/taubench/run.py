"""``agentgrad bench taubench evaluate`` and ``optimize``: conversations, rewards, pass^k, the paper's protocol.

A run directory holds ``config.yaml``, ``events.jsonl`` (one ``episode`` record per finished
conversation, written durably), ``traces/<split>-<index>-t<trial>.json`` and ``metrics.json``.
An interrupted evaluation resumes with ``--resume``: finished conversations are not run again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agentgrad.blame.backward import VerbalLoss
from agentgrad.benchmarks.common import apply_overrides, create_models, parse_range, pass_hat_k, train_then_evaluate
from agentgrad.runs.runner import run_jobs
from agentgrad.benchmarks.taubench.env import RetailDatabase, RetailTask, load_tasks
from agentgrad.benchmarks.taubench.loss import reward_loss
from agentgrad.benchmarks.taubench.system import (RetailOutcome, RetailSystem, build_system, load_retail_config,
                                                  read_policy)
from agentgrad.benchmarks.taubench.user import UserSimulator, load_user_rules
from agentgrad.core.config import SystemConfig, model_spec_from_value
from agentgrad.core.trace import Trace, write_json_atomic
from agentgrad.errors import ConfigError
from agentgrad.core.model import GenerationSettings
from agentgrad.optim.config import TrainerConfig
from agentgrad.optim.tasks import Score
from agentgrad.optim.trainer import set_prompts
from agentgrad.runs.rundir import RunDir


@dataclass
class TauOptions:
    """Everything that determines a tau-bench run."""

    system: str = "multi"
    prompts: str | None = None  # a prompts YAML instead of the packaged one
    models: list[str] = field(default_factory=list)  # --model NAME=VALUE
    user_model: str | None = None
    user_temperature: float | None = None  # unset: the server's default, as in tau-bench
    split: str = "test"
    tasks: str | None = None  # "0-9,12"
    trials: int = 1
    max_steps: int = 30  # tau-bench's agent loop
    data: str | None = None

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.__dict__, sort_keys=True).encode()).hexdigest()[:16]


class TauSetup:
    """The configuration, models, database and system of a run (models are loaded once)."""

    def __init__(self, opts: TauOptions):
        self.opts = opts
        self.cfg: SystemConfig = load_retail_config(opts.system, opts.prompts, read_policy(opts.data))
        apply_overrides(self.cfg, opts.models)
        if opts.user_model:
            self.cfg.models["user"] = model_spec_from_value(opts.user_model, self.cfg.models.get("user"))
        if "user" not in self.cfg.models:
            raise ConfigError("the prompts file defines no 'user' model; add one or pass --user-model")
        self.database = RetailDatabase(opts.data)
        self.user_rules = load_user_rules(opts.data)
        self.models = create_models(self.cfg)
        self.system = self.build()

    def make_user(self, seed: int = 0) -> UserSimulator:
        """The customer of one conversation. As in tau-bench, its temperature is the server's default
        unless ``--user-temperature`` sets it, with no seed and no length cap of our own, so repeated
        trials differ; with a temperature of 0, the trial number seeds it."""
        t = self.opts.user_temperature
        settings = GenerationSettings(temperature=t, max_new_tokens=None, seed=seed if t == 0 else None)
        return UserSimulator(self.models["user"], self.user_rules, settings)

    def build(self) -> RetailSystem:
        return build_system(self.opts.system, self.cfg, self.models, self.make_user, self.database, self.opts.max_steps)


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean action, output and overall reward, and pass^k, over finished episodes."""
    n = len(records)
    by_task: dict[str, list[bool]] = {}
    for r in sorted(records, key=lambda r: r["trial"]):
        by_task.setdefault(f"{r['split']}-{r['index']}", []).append(r["reward"]["reward"] >= 1.0)
    mean = lambda key: sum(r["reward"][key] for r in records) / n if n else 0.0  # noqa: E731
    return {
        "episodes": n,
        "tasks": len(by_task),
        "action_reward": mean("actions"),
        "output_reward": mean("outputs"),
        "reward": mean("reward"),
        "pass_hat_k": {str(k): v for k, v in pass_hat_k(by_task).items()},
        "ended_by": {e: sum(r["ended_by"] == e for r in records) for e in sorted({r["ended_by"] for r in records})},
        "first_error": next((r["error"] for r in records if r.get("error")), None),
        "per_task": {t: [int(x) for x in v] for t, v in by_task.items()},
    }


def evaluate(setup: TauSetup, run_dir: RunDir, on_episode: Callable[[dict[str, Any]], None] | None = None,
             prompts: dict[str, str] | None = None, concurrency: int = 1) -> dict[str, Any]:
    """Run every (task, trial) not yet in ``run_dir`` and write ``metrics.json``.

    Up to ``concurrency`` conversations run at once (each has its own database, customer and
    conversation state); each is recorded as soon as it ends, so an interrupted run resumes.
    """
    opts = setup.opts
    tasks = load_tasks(opts.split, opts.data)
    chosen = [tasks[i] for i in parse_range(opts.tasks, len(tasks))]
    if prompts:
        set_prompts(setup.system, prompts)
    done = {(e["index"], e["trial"]) for e in run_dir.events() if e.get("event") == "episode"}
    jobs = [(trial, task) for trial in range(opts.trials) for task in chosen if (task.index, trial) not in done]

    def run(job: tuple[int, RetailTask]) -> RetailOutcome:
        trial, task = job
        sid = f"{task.split}-{task.index}-t{trial}"
        ep = setup.system.run({"task": task, "trial": trial}, id=sid)
        ep.trace.meta["reward"] = ep.output.reward.to_dict()
        ep.trace.save(run_dir.sample_path("traces", sid))  # the trace first, then the record
        return ep.output

    def record(job: tuple[int, RetailTask], outcome: RetailOutcome) -> None:
        trial, task = job
        rec = run_dir.log("episode", trial=trial, trace=f"traces/{task.split}-{task.index}-t{trial}.json",
                          **outcome.to_dict())
        if on_episode:
            on_episode(rec)

    run_jobs(jobs, run, concurrency, record)
    records = [e for e in run_dir.events() if e.get("event") == "episode"]
    metrics = summarize(records) | {"system": opts.system, "split": opts.split, "trials": opts.trials,
                                    "user_temperature": opts.user_temperature, "max_steps": opts.max_steps,
                                    "models": {n: s.model_dump() for n, s in setup.cfg.models.items()}}
    write_json_atomic(run_dir.path / "metrics.json", metrics)
    return metrics


class TauTask:
    """tau-bench retail as a trainer task: train tasks to learn from, dev tasks to validate on."""

    name = "taubench"

    def __init__(self, setup: TauSetup):
        self.setup = setup

    def examples(self, split: str) -> list[dict[str, Any]]:
        split = {"val": "dev"}.get(split, split)
        return [{"id": f"{t.split}-{t.index}", "task": t} for t in load_tasks(split, self.setup.opts.data)]

    def build_system(self) -> RetailSystem:
        return self.setup.system

    def metric(self, example: dict[str, Any], output: Any, trace: Trace) -> Score:
        r = output.reward
        return Score(r.reward, r.reward >= 1.0, r.to_dict() | {"ended_by": output.ended_by})

    def loss(self, example: dict[str, Any], output: Any, trace: Trace, score: Score) -> VerbalLoss | None:
        return reward_loss(trace, output)


def optimize(setup: TauSetup, out: Path, resume: bool, method: str, samples: int = 10, seed: int = 0,
             scorer: str | None = None, optimizer: str | None = None, on_event: Callable | None = None,
             on_episode: Callable | None = None, concurrency: int = 1, optimizer_kind: str = "verbal") -> dict[str, Any]:
    """The paper's protocol: ``samples`` training conversations, a step after each, then evaluation.

    Training goes to ``out/train`` (checkpoints, attribution, prompts per step) and the evaluation of
    the final prompts on ``setup.opts.split`` / ``tasks`` to ``out/eval``; both resume.
    """
    digest = hashlib.sha256(
        f"{setup.opts.digest()}|{method}|{samples}|{seed}|{scorer}|{optimizer}|{optimizer_kind}".encode()).hexdigest()[:16]
    return train_then_evaluate(
        TauTask(setup), setup.models, out, resume, method, TrainerConfig(samples=samples, step_every=1, seed=seed),
        scorer, optimizer, digest, {"benchmark": "taubench", "options": setup.opts.__dict__, "samples": samples,
                                    "seed": seed},
        lambda run_dir, prompts: evaluate(setup, run_dir, on_episode, prompts, concurrency), on_event, optimizer_kind,
        concurrency)
