"""``bench taubench``: replay-gold, evaluate, optimize."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from agentgrad.cli._common import console, episode_progress, err_console, open_run, print_tau_metrics, training_printer
from agentgrad.cli.options import (CONCURRENCY, DATA_DIR, METHOD, OPTIMIZER, OPTIMIZER_KIND, RESUME_RUN, SCORER, TAU_MAX_STEPS,
                                   TAU_MODEL, TAU_PROMPTS, TAU_SPLIT, TAU_SYSTEM, TAU_TASKS, TAU_USER, check_new_folder,
                                   check_new_run, check_optimizer_kind, tau_options)

taubench_app = typer.Typer(help="tau-bench retail: tool use with a simulated customer.", no_args_is_help=True)


@taubench_app.command("replay-gold")
def taubench_replay_gold(
    split: str = typer.Option("all", "--split", help="train, dev, test or all."),
    dump_db: Optional[Path] = typer.Option(None, "--dump-db", help="Write each final database as DIR/<split>-<index>.json."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Benchmark data (default: $AGENTGRAD_DATA_DIR)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty --dump-db folder."),
) -> None:
    """Replay every task's gold actions through the environment and print the action reward."""
    from agentgrad.benchmarks.taubench.env import replay_gold
    if dump_db is not None:
        check_new_folder(dump_db, overwrite, "--dump-db")

    with console.status(f"replaying the gold actions of split {split}"):
        res = replay_gold(split, data_dir, dump_db)
    console.print(f"tasks: {res['tasks']}  action reward: {res['action_reward']:.4f}  "
                  f"(gold tool calls answered with an error, as in tau-bench: {res['tool_errors']})")
    for t in res["failed"][:20]:
        err_console.print(f"action reward 0: {t['split']} task {t['index']}")
    if res["failed"]:
        raise typer.Exit(1)


@taubench_app.command("evaluate")
def taubench_evaluate(
    out: Path = typer.Option(..., "--out", help="Run directory to write."),
    system: str = TAU_SYSTEM,
    prompts: Optional[Path] = TAU_PROMPTS,
    model: list[str] = TAU_MODEL,
    user_model: Optional[str] = TAU_USER,
    user_temperature: Optional[float] = typer.Option(None, "--user-temperature", min=0.0,
                                                     help="The customer's temperature (default: unset, the "
                                                          "server's default, as in tau-bench)."),
    split: str = TAU_SPLIT,
    tasks: Optional[str] = TAU_TASKS,
    trials: int = typer.Option(1, "--trials", min=1, help="Runs per task (pass^k for k up to this)."),
    max_steps: int = TAU_MAX_STEPS,
    resume: bool = typer.Option(False, "--resume", help="Continue an existing run directory."),
    concurrency: int = CONCURRENCY,
    data_dir: Optional[Path] = DATA_DIR,
) -> None:
    """Run conversations with a simulated customer; print action, output and overall reward and pass^k."""
    from agentgrad.benchmarks.common import parse_range
    from agentgrad.benchmarks.taubench.env import load_tasks
    from agentgrad.benchmarks.taubench.run import TauSetup, evaluate

    opts = tau_options(system, prompts, model, user_model, user_temperature, split, tasks, trials, max_steps, data_dir)
    n = len(parse_range(tasks, len(load_tasks(split, opts.data))))
    with console.status("loading models"):
        setup = TauSetup(opts)
    run_dir = open_run(out, resume, opts.digest(), {"benchmark": "taubench", "options": opts.__dict__})
    progress, on_episode = episode_progress(n * trials)
    with progress:
        metrics = evaluate(setup, run_dir, on_episode, concurrency=concurrency)
    print_tau_metrics(metrics)
    console.print(f"run directory: {out} (metrics.json, events.jsonl, traces/)")


@taubench_app.command("optimize")
def taubench_optimize(
    out: Path = typer.Option(..., "--out", help="Run directory to write (train/ and eval/)."),
    system: str = TAU_SYSTEM,
    prompts: Optional[Path] = TAU_PROMPTS,
    model: list[str] = TAU_MODEL,
    user_model: Optional[str] = TAU_USER,
    method: str = METHOD,
    samples: int = typer.Option(10, "--samples", min=1, help="Training conversations (the paper: 10)."),
    seed: int = typer.Option(0, "--seed", help="Which training tasks are sampled, and tie-breaking."),
    scorer: Optional[str] = SCORER,
    optimizer: Optional[str] = OPTIMIZER,
    optimizer_kind: str = OPTIMIZER_KIND,
    split: str = TAU_SPLIT,
    tasks: Optional[str] = TAU_TASKS,
    trials: int = typer.Option(1, "--trials", min=1, help="Evaluation runs per task."),
    max_steps: int = TAU_MAX_STEPS,
    resume: bool = RESUME_RUN,
    concurrency: int = CONCURRENCY,
    data_dir: Optional[Path] = DATA_DIR,
) -> None:
    """The paper's protocol: train on sampled training tasks (a step after each conversation), then evaluate."""
    from agentgrad.benchmarks.common import parse_range
    from agentgrad.benchmarks.taubench.env import load_tasks
    from agentgrad.benchmarks.taubench.run import TauSetup, optimize

    check_optimizer_kind(optimizer_kind)
    opts = tau_options(system, prompts, model, user_model, None, split, tasks, trials, max_steps, data_dir)
    n = len(parse_range(tasks, len(load_tasks(split, opts.data))))
    check_new_run(out, resume)
    with console.status("loading models"):
        setup = TauSetup(opts)
    on_event = training_printer("reward", 1.0)

    progress, on_episode = episode_progress(n * trials)
    with progress:
        result = optimize(setup, out, resume, method, samples, seed, scorer, optimizer, on_event, on_episode,
                          concurrency, optimizer_kind)
    t = result["train"]
    console.print(f"training: {t['steps']} steps, {t['accepted']} accepted, train reward {t['train_score']:.3f}")
    print_tau_metrics(result["eval"])
    console.print(f"run directory: {out} (train/, eval/metrics.json, result.json)")


