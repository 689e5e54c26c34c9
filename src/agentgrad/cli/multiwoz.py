"""``bench multiwoz``: evaluate, score, optimize; ``data download``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from agentgrad.cli._common import console, dialogue_progress, open_run, print_woz_metrics, training_printer
from agentgrad.cli.options import (CONCURRENCY, DATA_DIR, METHOD, OPTIMIZER, OPTIMIZER_KIND, RESUME_RUN, SCORER, TAU_MODEL,
                                   TAU_PROMPTS, WOZ_N, WOZ_SEED, WOZ_SYSTEM, check_new_run, check_optimizer_kind,
                                   check_user_file)
from agentgrad.errors import ConfigError

multiwoz_app = typer.Typer(help="MultiWOZ: task-oriented dialogue over five domains.", no_args_is_help=True)
data_app = typer.Typer(help="Benchmark data.", no_args_is_help=True)


@multiwoz_app.command("evaluate")
def multiwoz_evaluate(
    out: Path = typer.Option(..., "--out", help="Run directory to write."),
    system: str = WOZ_SYSTEM,
    prompts: Optional[Path] = TAU_PROMPTS,
    model: list[str] = TAU_MODEL,
    n: int = WOZ_N,
    seed: int = WOZ_SEED,
    split: str = typer.Option("test", "--split", help="test or val."),
    resume: bool = typer.Option(False, "--resume", help="Continue an existing run directory."),
    concurrency: int = CONCURRENCY,
    data_dir: Optional[Path] = DATA_DIR,
) -> None:
    """Run a system over sampled dialogues; print Inform, Success, JGA and slot recall/precision/F1."""
    from agentgrad.benchmarks.multiwoz.run import WozOptions, WozSetup, evaluate

    opts = WozOptions(system, str(prompts) if prompts else None, list(model), split, n, seed,
                      str(data_dir) if data_dir else None)
    with console.status("loading data and models"):
        setup = WozSetup(opts)
        total = len(setup.dialogues())
    run_dir = open_run(out, resume, opts.digest(), {"benchmark": "multiwoz", "options": opts.__dict__})
    progress, on_dialogue = dialogue_progress(total)
    with progress:
        metrics = evaluate(setup, run_dir, on_dialogue, concurrency=concurrency)
    print_woz_metrics(metrics)
    console.print(f"run directory: {out} (metrics.json, predictions.json, events.jsonl, traces/)")


@multiwoz_app.command("score")
def multiwoz_score(
    file: Path = typer.Argument(..., help="Predictions: our predictions.json, or the standard evaluator's input "
                                          "({dialogue_id: [{response, state?, active_domains?}]})."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for metrics.json and dialogues.json (new or empty)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty --out."),
    domains: str = typer.Option("file", "--domains", help="Active domains: file (the file's when every turn has "
                                "them, else estimated from the states, as the standard evaluator does), states "
                                "(always estimated) or slots (from the placeholders' domains: add_slot_domains.py)."),
    data_dir: Optional[Path] = DATA_DIR,
) -> None:
    """Score a predictions file without running anything: Inform, Success, JGA and slot figures."""
    from agentgrad.benchmarks.multiwoz.score import score_file
    from agentgrad.core.files import RunFiles, check_new_output

    check_user_file(file, "predictions JSON (our predictions.json, or the standard evaluator's input)")
    if out is not None:
        check_new_output(out, overwrite, "dir")
    with console.status("scoring"):
        metrics, records = score_file(file, str(data_dir) if data_dir else None, domains)
    print_woz_metrics(metrics)
    if metrics["states"] != "predicted":
        console.print(f"Inform and Success read the {metrics['states']}; no state figures")
    if metrics["short_dialogues"]:
        console.print(f"{metrics['short_dialogues']} dialogue(s) have fewer turns than the data: scored on the "
                      "turns they have")
    if out is not None:
        files = RunFiles(out)
        files.write_json("metrics.json", data=metrics)
        files.write_json("dialogues.json", data={r["dialogue"]: {k: r[k] for k in ("inform", "success", "match",
                                                                                 "provided")} for r in records})
        console.print(f"written: {out}/metrics.json, {out}/dialogues.json")


@multiwoz_app.command("optimize")
def multiwoz_optimize(
    out: Path = typer.Option(..., "--out", help="Run directory to write (train/ and eval/)."),
    system: str = WOZ_SYSTEM,
    prompts: Optional[Path] = TAU_PROMPTS,
    model: list[str] = TAU_MODEL,
    method: str = METHOD,
    samples: int = typer.Option(30, "--samples", min=1, help="Validation dialogues trained on (the paper: 30)."),
    step_every: int = typer.Option(3, "--step-every", min=1, help="An optimizer step every N dialogues (the paper: 3)."),
    train_seed: int = typer.Option(0, "--train-seed", help="Which training dialogues are sampled."),
    scorer: Optional[str] = SCORER,
    optimizer: Optional[str] = OPTIMIZER,
    optimizer_kind: str = OPTIMIZER_KIND,
    n: int = WOZ_N,
    seed: int = WOZ_SEED,
    resume: bool = RESUME_RUN,
    concurrency: int = CONCURRENCY,
    data_dir: Optional[Path] = DATA_DIR,
) -> None:
    """The paper's protocol: train on validation dialogues (a step every 3), then evaluate on the test sample."""
    from agentgrad.benchmarks.multiwoz.run import WozOptions, WozSetup, optimize

    opts = WozOptions(system, str(prompts) if prompts else None, list(model), "test", n, seed,
                      str(data_dir) if data_dir else None)
    check_optimizer_kind(optimizer_kind)
    check_new_run(out, resume)
    with console.status("loading data and models"):
        setup = WozSetup(opts)
        total = len(setup.dialogues())
    on_event = training_printer("JGA", 100.0)

    progress, on_dialogue = dialogue_progress(total)
    with progress:
        result = optimize(setup, out, resume, method, samples, step_every, train_seed, scorer, optimizer, on_event,
                          on_dialogue, concurrency, optimizer_kind)
    t = result["train"]
    console.print(f"training: {t['steps']} steps, {t['accepted']} accepted, train JGA {100 * t['train_score']:.1f}")
    print_woz_metrics(result["eval"])
    console.print(f"run directory: {out} (train/, eval/metrics.json, eval/predictions.json, result.json)")


@data_app.command("download")
def data_download(
    name: str = typer.Argument(..., help="multiwoz24"),
    data_dir: Optional[Path] = DATA_DIR,
) -> None:
    """Fetch a dataset into the data directory (needs network access)."""
    if name != "multiwoz24":
        raise ConfigError(f"unknown dataset {name!r}; valid: multiwoz24")
    from agentgrad.benchmarks.multiwoz.data import download_multiwoz24

    with console.status("downloading MultiWOZ 2.4"):
        dest = download_multiwoz24(data_dir)
    console.print(f"MultiWOZ 2.4 unpacked into {dest}; evaluations now use its labels")


