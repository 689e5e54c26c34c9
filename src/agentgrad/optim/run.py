"""``agentgrad optimize``: build task, scorer and optimizer from a configuration and run the trainer."""

from __future__ import annotations

import time

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentgrad.attribution.factory import make_scorer
from agentgrad.blame.methods import canonical
from agentgrad.core.config import apply_model_override
from agentgrad.runs.graph_system import topological_levels
from agentgrad.errors import ConfigError
from agentgrad.models.registry import create_model
from agentgrad.optim.config import OptimizeConfig, load_optimize_config, resolve_system
from agentgrad.optim.targets import optimizer_for
from agentgrad.optim.tasks import get_task
from agentgrad.optim.trainer import Trainer
from agentgrad.runs.rundir import RunDir, check_run_dir


def build_optimizer(cfg: OptimizeConfig, models: dict[str, Any]) -> Any:
    """kind ``deterministic`` (no LLM), ``llm`` (an LLM rewrites prompts from the verbal loss), or
    ``target`` (target back-propagation; on ``model`` when given, else scripted targets)."""
    oc = cfg.optimizer
    needs_model = oc.kind == "llm" or (oc.kind == "target" and oc.model)
    if needs_model and (not oc.model or oc.model not in models):
        raise ConfigError(f"optimizer.model {oc.model!r} is not a model under models: ({', '.join(models)})")
    model = models[oc.model] if needs_model else None
    return optimizer_for(oc.kind if oc.kind in ("target", "edit") else "verbal", model, oc.max_attempts, oc.max_chars,
                         oc.max_new_tokens)


PROGRESS_EVERY = 30.0  # seconds: the longest a long phase goes without a printed line


def step_line(e: dict[str, Any]) -> str:
    """One optimizer step in plain words: who was blamed, what was rewritten, and what the gate did."""
    blamed = ", ".join(f"{a} (in {n} failed sample{'s' if n != 1 else ''})" for a, n in e["blamed"].items())
    line = f"step {e['step']}: training score {e['train_score']:.2f}; blamed {blamed or 'no agent'}"
    updated = e.get("updated") or []
    if e.get("accepted") is None:
        why = e.get("note") or ("the optimizer changed no prompt" if not updated else "nothing to check")
        return line + f"; no prompt changed ({why})"
    line += f"; rewrote the prompt of {', '.join(updated)}" if updated else "; rewrote no prompt"
    val = (f" (validation {e['val_before']:.2f} -> {e['val_after']:.2f})"
           if e.get("val_after") is not None and e.get("val_before") is not None else "")
    if e["accepted"]:
        return line + f"; accepted: the validation score rose{val}"
    return line + f"; rejected: the validation score did not rise{val}, the prompts were put back"


def run_optimize(config: Path, out: Path, resume: bool, overrides: list[str], method: str | None,
                 console: Console, optimizer_kind: str | None = None, concurrency: int | None = None) -> dict[str, Any]:
    cfg, base = load_optimize_config(config)
    if concurrency is not None:
        cfg.trainer.concurrency = concurrency
    if method:
        cfg.scorer.method = method
    if optimizer_kind == "target":
        cfg.optimizer.kind = "target"
    elif optimizer_kind == "verbal":
        cfg.optimizer.kind = ("llm" if cfg.optimizer.model else "deterministic") if cfg.optimizer.kind == "target" \
            else cfg.optimizer.kind
    elif optimizer_kind is not None:
        raise ConfigError(f"--optimizer takes verbal or target, got {optimizer_kind!r}")
    if canonical(cfg.scorer.method).startswith("judge:") and not cfg.scorer.judge:
        raise ConfigError(f"{cfg.scorer.method} needs a judge model: set scorer.judge to a model under models:")
    sys_cfg = resolve_system(cfg, base)
    for o in overrides:
        apply_model_override(sys_cfg, o)
        cfg.models[o.partition("=")[0]] = sys_cfg.models[o.partition("=")[0]]
    topological_levels(sys_cfg)
    if cfg.scorer.judge and cfg.scorer.judge not in sys_cfg.models:
        raise ConfigError(f"scorer.judge {cfg.scorer.judge!r} is not a model under models: ({', '.join(sys_cfg.models)})")
    check_run_dir(out, resume)  # before models load; a start that fails leaves nothing that blocks a retry
    with console.status("loading models"):
        models = {n: create_model(n, spec.backend, **spec.options()) for n, spec in sys_cfg.models.items()}
    task = get_task(cfg.task)(sys_cfg, {k: base / v for k, v in cfg.data.items()}, models)
    sc = cfg.scorer
    # scorer.path loads a model of its own; else the system's model named scorer.model shares its weights
    scorer = make_scorer(sc.path or models.get(sc.model or ""), dtype=sc.dtype, device=sc.device, mode="cached",
                         on_too_long=sc.on_too_long, prompt_weights=sc.prompt_weights, batch_tokens=sc.batch_tokens,
                         hint="" if sc.path else f"scorer.model {sc.model!r} must name an hf or tiny model of the "
                                                 f"system, or give scorer.path for a separate white-box scorer")
    optimizer = build_optimizer(cfg, models)
    run_dir = RunDir(out, resume=resume)
    run_dir.started(cfg.digest(), "configuration")  # a resumed run with another configuration is refused
    # the run's own config.yaml resumes it: absolute paths, and the system it ran (overrides included)
    run_dir.write_config(cfg.model_copy(update={"resolved_system": sys_cfg}).model_dump(mode="json"))

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console)
    state = {"step": 0, "accepted": 0, "rejected": 0, "score": None, "said": time.monotonic()}

    def on_event(e: dict[str, Any]) -> None:
        if e["event"] == "progress":  # a phase with no sample events: its own count, and a line every 30 s
            progress.update(bar, description=f"{e['phase']}: {e['done']}/{e['total']} questions")
            now = time.monotonic()
            if e["done"] == e["total"] or now - state["said"] >= PROGRESS_EVERY:
                progress.console.print(f"{e['phase']}: {e['done']} of {e['total']} questions run", highlight=False)
                state["said"] = now
            return
        if e["event"] == "resumed":  # the bar counts the samples done before the crash too
            progress.update(bar, completed=e["next_sample"])
        if e["event"] == "sample":
            progress.advance(bar)
        elif e["event"] == "step":
            state["step"] = e["step"]
            state["accepted"] += e.get("accepted") is True
            state["rejected"] += e.get("accepted") is False
            state["score"] = e.get("val_after", e.get("train_score"))
            progress.console.print(step_line(e), highlight=False)
        score = "-" if state["score"] is None else f"{state['score']:.2f}"
        progress.update(bar, description=f"step {state['step']} | score {score} | "
                                         f"accepted {state['accepted']} rejected {state['rejected']}")

    judge = None
    if cfg.scorer.judge:
        from agentgrad.blame.judge import Judge

        judge = Judge(models[cfg.scorer.judge])
    trainer = Trainer(task, scorer, optimizer, cfg.trainer, run_dir, cfg.scorer.method, cfg.scorer.top_k,
                      cfg.scorer.max_paths, cfg.digest(), on_event, judge=judge)
    with progress:
        bar = progress.add_task("samples", total=len(trainer.train))
        final = trainer.fit()
    console.print(
        f"done: {final['steps']} steps, {final['accepted']} accepted, {final['rejected']} rejected; "
        f"train score {final['train_score']:.3f}"
        + (f", validation score {final['val_score']:.3f}" if final["val_score"] is not None else "")
    )
    return final
