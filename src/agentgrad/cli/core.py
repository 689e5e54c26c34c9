"""``run``, ``attribute``, ``trace show``, ``optimize``, ``demo``, ``backends``: the core commands."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from agentgrad.blame.methods import DEFAULT_METHOD, registry_grammar
from agentgrad.cli._common import app, console, err_console, progress_bar, trace_app
from agentgrad.cli.options import DEVICE, DTYPE, TRACE_FILE, check_user_file
from agentgrad.errors import ConfigError

@app.command()
def run(
    system: Path = typer.Argument(..., help="System YAML (models, agents, and what feeds each)."),
    inputs: Path = typer.Option(..., "--inputs", help="JSONL file, one example per line."),
    out: Path = typer.Option(..., "--out", help="Run directory to write."),
    model: list[str] = typer.Option([], "--model", help="Override a model: NAME=PATH_OR_ID (repeatable)."),
    concurrency: int = typer.Option(1, "--concurrency", min=1, help="Examples run at once."),
    resume: bool = typer.Option(False, "--resume", help="Continue an existing run directory."),
) -> None:
    """Run a system on every input, writing one trace per input."""
    from agentgrad.core.config import apply_model_override, load_system_config
    from agentgrad.runs.graph_system import GraphSystem, topological_levels
    from agentgrad.runs.rundir import RunDir, check_run_dir
    from agentgrad.runs.runner import plan_inputs, read_jsonl, run_inputs

    check_user_file(system, "a system YAML (models, agents, and what feeds each; examples/*/system.yaml)")
    check_user_file(inputs, "JSONL inputs, one JSON object (an example) per line")
    cfg = load_system_config(system)
    for o in model:
        apply_model_override(cfg, o)
    topological_levels(cfg)  # graph errors before any model loads
    examples = read_jsonl(inputs)
    check_run_dir(out, resume)  # before models load: a failed start leaves nothing that blocks a retry
    with console.status("loading models"):
        sys_ = GraphSystem(cfg)
    run_dir = RunDir(out, resume=resume)
    resolved = cfg.model_dump(mode="json")
    run_dir.started(hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16],
                    "system configuration or models")
    run_dir.write_config(resolved)
    plan, done = plan_inputs(examples, run_dir)
    with progress_bar() as progress:
        task = progress.add_task("episodes", total=len(plan), completed=len(done))
        summary = asyncio.run(
            run_inputs(sys_, examples, run_dir, concurrency, on_progress=lambda i, s: progress.advance(task))
        )
    table = Table(title=f"run {out}", show_header=False)
    for k, v in [
        ("inputs", summary.total),
        ("done now", summary.done),
        ("done before (resumed)", summary.skipped),
        ("failed", len(summary.failed)),
        ("agent calls", summary.calls),
        ("tokens (prompt + completion)", f"{summary.prompt_tokens:,} + {summary.completion_tokens:,}"),
        ("seconds", summary.seconds),
    ]:
        table.add_row(k, str(v))
    console.print(table)
    for index, error in summary.failed[:10]:
        err_console.print(f"input {index} failed: {error}")
    if summary.failed:
        raise typer.Exit(1)


@app.command()
def attribute(
    target: Path = typer.Argument(..., help="A trace JSON file, or a run directory (all of traces/)."),
    scorer: str = typer.Option(..., "--scorer", help="White-box scorer: Hugging Face folder or hub id."),
    method: str = typer.Option(DEFAULT_METHOD, "--method", help=f"Blame method: a name of the registry ({registry_grammar()}) "
                               "or an alias (mean_l1, ...); "
                               "the kept edges are the top-k by its weight (docs/blame.md)."),
    out: Path = typer.Option(..., "--out", help="Output JSON (a trace) or directory (a run directory)."),
    device: str = DEVICE,
    dtype: str = DTYPE,
    top_k: int = typer.Option(1, "--top-k", min=1, help="Incoming edges kept per call."),
    seed: int = typer.Option(0, "--seed", help="Seeds tie-breaking and the random method."),
    naive: bool = typer.Option(False, "--naive", help="Reference path: no prefix cache."),
    on_too_long: str = typer.Option("error", "--on-too-long", help="error, or skip (recorded as skipped)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out (never the traces read)."),
    prompt_weights: bool = typer.Option(False, "--prompt-weights",
                                        help="Also score each call's own prompt like a source (for credit)."),
    batch_tokens: int = typer.Option(0, "--batch-tokens", min=0,
                                     help="Score calls that share a prefix in padded batches of this many tokens (0: one by one)."),
    workers: int = typer.Option(1, "--workers", min=1, help="Scorers attributing traces at once, on Ray (agentgrad[ray])."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="A running Ray cluster (default: a local one)."),
    resume: bool = typer.Option(False, "--resume", help="Continue: keep the attribution files already in --out."),
) -> None:
    """Connection weights of every call in a trace (GBC), and the kept edges."""
    from agentgrad.attribution.factory import make_scorer, scorer_path
    from agentgrad.attribution.io import attribute_trace_files, trace_files
    from agentgrad.blame.methods import edge_rule
    from agentgrad.core.trace import Trace

    from agentgrad.core.files import check_new_output

    distributed = workers > 1 or ray_address is not None
    if distributed:
        from agentgrad.attribution.distributed import check_reachable, require_ray

        require_ray()  # a missing extra fails first, naming the install
        if ray_address:
            check_reachable(ray_address)
    weight = edge_rule(method)  # an unknown name fails before the model loads
    check_user_file(target, TRACE_FILE)
    if on_too_long not in ("error", "skip"):
        raise ConfigError(f"--on-too-long takes error or skip, got {on_too_long!r}")
    files = trace_files(target)
    protect = [target / "traces", *files] if target.is_dir() else files
    check_new_output(out, overwrite or (resume and target.is_dir()), "dir" if target.is_dir() else "file", protect)
    outs = [out] if not target.is_dir() else [out / f.name for f in files]
    if resume:  # an attribution file exists only complete (atomic writes): those are kept
        todo = [(f, o) for f, o in zip(files, outs) if not o.exists()]
        files, outs = [f for f, _ in todo], [o for _, o in todo]
    n_calls = sum(len(Trace.load(f).calls()) for f in files)  # every trace is valid before anything is written
    kwargs = dict(dtype=dtype, device=device, mode="naive" if naive else "cached", on_too_long=on_too_long,
                  prompt_weights=prompt_weights, batch_tokens=batch_tokens)
    if distributed:
        from agentgrad.attribution.distributed import attribute_on_ray

        with progress_bar() as progress:
            task = progress.add_task(f"traces on {workers} scorer(s)", total=len(files))
            done = attribute_on_ray(files, outs, dict(kwargs, path=scorer_path(scorer)), method, top_k, seed, workers,
                                    ray_address, on_trace=lambda f, rec: progress.advance(task), weight=weight)
        console.print(f"attributed {n_calls} call nodes in {done} trace(s) on {workers} Ray worker(s) -> {out}")
        return
    with console.status(f"loading scorer {scorer}"):
        sc = make_scorer(scorer, **kwargs)
    with progress_bar() as progress:
        task = progress.add_task("call nodes", total=n_calls)
        attribute_trace_files(sc, files, outs, method, top_k, seed, on_node=lambda r: progress.advance(task),
                              weight=weight)
    console.print(
        f"attributed {n_calls} call nodes in {len(files)} trace(s) -> {out}  "
        f"(prefix cache: {sc.cache_stats['hits']} hits, {sc.cache_stats['misses']} misses)"
    )


@trace_app.command("show")
def trace_show(
    path: Path = typer.Argument(..., help="A trace JSON file."),
    max_chars: int = typer.Option(2000, "--max-chars", help="Cut longer texts in the view (0: never)."),
) -> None:
    """Print the calls of a trace, their inputs with spans marked, and outputs."""
    from agentgrad.core.trace import Trace
    from agentgrad.report.trace_view import show_trace

    check_user_file(path, TRACE_FILE)
    show_trace(Trace.load(path), console, max_chars)


def _optimize_and_report(config: Path, out: Path, resume: bool, **options) -> None:
    """One optimisation run into ``out`` (new, or resumed from its checkpoint), then its report; a
    resumed run that had already finished only writes the report again (say, one a Ctrl-C stopped)."""
    from agentgrad.optim.run import run_optimize
    from agentgrad.report.html import write_report

    run_optimize(config, out, resume=resume, console=console, **options)
    console.print(f"run directory: {out} (traces/, attribution/, prompts/, checkpoint.json, events.jsonl, final.json)", soft_wrap=True)
    res = write_report(out)
    console.print(f"report: {res.path} ({res.bytes / 1e6:.2f} MB): open it in a browser", highlight=False, soft_wrap=True)


@app.command()
def optimize(
    config: Path = typer.Argument(..., help="Optimisation YAML (task, system, data, scorer, optimizer, trainer), "
                                            "or a run's own RUN_DIR/config.yaml."),
    out: Path = typer.Option(..., "--out", help="Run directory to write."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its checkpoint."),
    model: list[str] = typer.Option([], "--model", help="Override a model: NAME=PATH_OR_ID (repeatable)."),
    method: Optional[str] = typer.Option(None, "--method", help="Override the blame method (scorer.method: any name "
                                                                "of bench blame --methods, e.g. random, all)."),
    optimizer: Optional[str] = typer.Option(None, "--optimizer", help="Override the optimizer: verbal or target."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1,
                                              help="Episodes of a step run at once (trainer.concurrency)."),
) -> None:
    """Diagnose failures with gradients and repair the blamed agents' prompts, with checkpoints."""
    check_user_file(config, "an optimisation YAML (task, system, data, scorer, optimizer, trainer; "
                            "examples/*/optimize.yaml)")
    _optimize_and_report(config, out, resume, overrides=model, method=method, optimizer_kind=optimizer,
                         concurrency=concurrency)


@app.command()
def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Run directory to write."),
    tiny: bool = typer.Option(False, "--tiny", help="The fastest smoke run: the pipeline example on a tiny random "
                                                    "model built offline (it learns nothing)."),
    model: Optional[str] = typer.Option(
        None, "--model", help="Another model than the embedded SmolLM2: a folder, hub id, gguf:FILE, openai:MODEL@URL."
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue the demo in --out from its checkpoint."),
) -> None:
    """The whole loop on a real model: a team with one faulty prompt; blame it with gradients, fix only it."""
    from agentgrad.examples.demo import run_demo

    if tiny and model:
        raise ConfigError("--tiny and --model exclude each other: --tiny is the tiny random model")
    run_demo(out, tiny=tiny, model=model, resume=resume, console=console)


@app.command("backends")
def backends() -> None:
    """List the model backends."""
    from agentgrad.models.registry import list_backends

    for b in list_backends():
        console.print(b)


