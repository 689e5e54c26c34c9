"""What both benchmarks share: prompt files, models from the command line, task ranges, run files."""

from __future__ import annotations

import math
import re
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from agentgrad.core.config import SystemConfig, apply_model_override, read_yaml, validate
from agentgrad.errors import ConfigError
from agentgrad.core.model import LanguageModel
from agentgrad.models.registry import create_model
from agentgrad.runs.graph_system import build_agents as build_agents  # the benchmarks' systems build with it


def load_prompts(benchmark: str, system: str, path: str | Path | None = None) -> SystemConfig:
    """A benchmark system's agents, prompts and models: ``path``, else the packaged YAML."""
    if path is None:
        ref = resources.files("agentgrad.benchmarks") / benchmark / "prompts" / f"{system}.yaml"
        if not ref.is_file():
            raise ConfigError(f"{benchmark} has no system {system!r}")
        with resources.as_file(ref) as p:
            return validate(SystemConfig, read_yaml(p), f"{benchmark}/prompts/{system}.yaml")
    return validate(SystemConfig, read_yaml(path), str(path))


def apply_overrides(cfg: SystemConfig, overrides: list[str]) -> None:
    """``--model NAME=VALUE`` (a bare VALUE means ``default=VALUE``)."""
    for o in overrides:
        apply_model_override(cfg, o if "=" in o else f"default={o}")


def create_models(cfg: SystemConfig, names: list[str] | None = None) -> dict[str, LanguageModel]:
    return {n: create_model(n, s.backend, **s.options()) for n, s in cfg.models.items() if names is None or n in names}


def require_agents(cfg: SystemConfig, names: list[str], where: str) -> None:
    missing = [n for n in names if n not in cfg.agents]
    if missing:
        raise ConfigError(f"{where} must define agent(s) {', '.join(missing)}")


def named_line(text: str, label: str, valid: Any) -> list[str]:
    """The valid names on a ``LABEL: a, b`` line of ``text``, in order, without repeats.

    The label matches case-insensitively (also with a trailing "S"); names are lower-cased with
    "-" read as "_"; unknown names (and "none") are dropped.
    """
    m = re.search(rf"{label}S?\s*:\s*(.*)", text, flags=re.IGNORECASE)
    if not m:
        return []
    names = [n.strip().lower().replace("-", "_") for n in re.split(r"[,;\s]+", m.group(1))]
    return list(dict.fromkeys(n for n in names if n in valid))


def parse_range(spec: str | None, n: int) -> list[int]:
    """``"0-9,12"`` -> [0..9, 12], each checked against ``n`` items; ``None`` -> all."""
    if spec is None or spec == "all":
        return list(range(n))
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                if b < a:
                    raise ConfigError(f"--tasks range {part!r} is empty (its end comes before its start); "
                                      f"write it as {b}-{a}")
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise ConfigError(f"--tasks takes indices and ranges like 0-9,12; got {spec!r}") from None
    bad = [i for i in out if not 0 <= i < n]
    if bad:
        raise ConfigError(f"task index {bad[0]} is out of range (the split has {n} tasks: 0-{n - 1})")
    if not out:
        raise ConfigError(f"--tasks {spec!r} selects no task")
    return list(dict.fromkeys(out))


def pass_hat_k(successes: dict[Any, list[bool]]) -> dict[int, float]:
    """pass^k as tau-bench defines it: the mean over tasks of C(c, k) / C(n, k), k = 1..n.

    ``c`` is a task's number of successful trials out of ``n``; every task needs the same ``n``.
    """
    if not successes:
        return {}
    n = min(len(v) for v in successes.values())
    return {k: sum(math.comb(sum(v[:n]), k) / math.comb(n, k) for v in successes.values()) / len(successes)
            for k in range(1, n + 1)}



def make_optimizer(value: str | None, kind: str = "verbal", max_chars: int = 24000, max_new_tokens: int = 4096) -> Any:
    """The ``kind`` optimizer (verbal or target) on the model ``value`` (as ``--model`` takes it),
    else without an LLM (deterministic prompt edits, scripted targets)."""
    from agentgrad.core.config import model_spec_from_value
    from agentgrad.optim.targets import optimizer_for

    model = None
    if value:
        spec = model_spec_from_value(value)
        model = create_model("optimizer", spec.backend, **spec.options())
    return optimizer_for(kind, model, max_chars=max_chars, max_new_tokens=max_new_tokens)


def train_then_evaluate(task: Any, models: dict[str, LanguageModel], out: Path, resume: bool, method: str,
                        trainer_cfg: Any, scorer: str | None, optimizer: str | None, digest: str,
                        config: dict[str, Any], evaluate: Callable[[Any, dict[str, str]], dict[str, Any]],
                        on_event: Callable[[dict[str, Any]], None] | None = None,
                        optimizer_kind: str = "verbal", concurrency: int = 1) -> dict[str, Any]:
    """A benchmark's optimisation protocol: train into ``out/train``, evaluate the final prompts into ``out/eval``.

    ``evaluate(run_dir, prompts)`` runs the benchmark's evaluation with those prompts. Both stages
    resume (``resume=True``); ``out/result.json`` holds the training summary and the metrics.
    """
    from agentgrad.blame.methods import canonical
    from agentgrad.core.files import RunFiles
    from agentgrad.attribution.factory import make_scorer
    from agentgrad.optim.trainer import Trainer
    from agentgrad.runs.rundir import RunDir

    if canonical(method).startswith("judge:"):  # an unknown blame method fails here too, before anything is written
        raise ConfigError(f"{method} needs a judge model; the benchmarks' optimize commands take none (use "
                          f"agentgrad optimize with scorer.judge)")
    optim = make_optimizer(optimizer, optimizer_kind)  # an unknown kind fails before anything is written
    train_dir = RunDir(out / "train", resume=resume and (out / "train" / "events.jsonl").exists())
    train_dir.started(digest)
    train_dir.write_config(config | {"method": method, "scorer": scorer, "optimizer": optimizer,
                                     "optimizer_kind": optimizer_kind})
    sc = make_scorer(scorer or models.get("default"), on_too_long="skip",
                     hint="give --scorer PATH_OR_ID, a white-box model to attribute with")
    trainer = Trainer(task, sc, optim, trainer_cfg, train_dir, method, 1,
                      16, digest, on_event, concurrency)
    final = trainer.fit()
    eval_dir = RunDir(out / "eval", resume=resume and (out / "eval" / "events.jsonl").exists())
    eval_dir.started(digest)
    eval_dir.write_config(config | {"prompts": "train/final.json"})
    metrics = evaluate(eval_dir, final["prompts"])
    result = {"train": {k: final[k] for k in ("train_score", "steps", "accepted", "rejected")}, "eval": metrics}
    RunFiles(out).write_json("result.json", data=result)
    return result


