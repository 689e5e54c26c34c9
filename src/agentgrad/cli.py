"""The ``agentgrad`` command: thin wrappers over library calls.

Every user mistake (an :class:`AgentgradError`) is printed as one line and exits non-zero;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Optional

import click
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agentgrad.errors import AgentgradError, ConfigError

app = typer.Typer(
    name="agentgrad",
    help="Find which agent of a multi-agent LLM system is to blame for a failure, and fix its prompt.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
trace_app = typer.Typer(help="Inspect traces.", no_args_is_help=True)
testing_app = typer.Typer(help="Offline helpers: tiny models and a local OpenAI-compatible server.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks of the paper.", no_args_is_help=True)
taubench_app = typer.Typer(help="tau-bench retail: tool use with a simulated customer.", no_args_is_help=True)
multiwoz_app = typer.Typer(help="MultiWOZ: task-oriented dialogue over five domains.", no_args_is_help=True)
data_app = typer.Typer(help="Benchmark data.", no_args_is_help=True)
bench_app.add_typer(taubench_app, name="taubench")
bench_app.add_typer(multiwoz_app, name="multiwoz")
app.add_typer(data_app, name="data")
app.add_typer(bench_app, name="bench")
app.add_typer(trace_app, name="trace")
app.add_typer(testing_app, name="testing")

console = Console()
err_console = Console(stderr=True)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    if debug:
        os.environ["AGENTGRAD_DEBUG"] = "1"


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
    from agentgrad.config import apply_model_override, load_system_config
    from agentgrad.core.graph_system import GraphSystem, topological_levels
    from agentgrad.runs.rundir import RunDir
    from agentgrad.runs.runner import read_jsonl, run_inputs

    cfg = load_system_config(system)
    for o in model:
        apply_model_override(cfg, o)
    topological_levels(cfg)  # graph errors before any model loads
    examples = read_jsonl(inputs)
    run_dir = RunDir(out, resume=resume)
    with console.status("loading models"):
        sys_ = GraphSystem(cfg)
    run_dir.write_config(cfg.model_dump(mode="json"))
    with _progress() as progress:
        task = progress.add_task("episodes", total=len(examples), completed=len(run_dir.done_inputs()))
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
    method: str = typer.Option("mean_l1", "--method", help="Blame method: mean_l1, max_l1, mean_gxi, max_gxi, random, all."),
    out: Path = typer.Option(..., "--out", help="Output JSON (a trace) or directory (a run directory)."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N."),
    dtype: str = typer.Option("float32", "--dtype", help="float32 (default), bfloat16 or float16."),
    top_k: int = typer.Option(1, "--top-k", min=1, help="Incoming edges kept per call."),
    seed: int = typer.Option(0, "--seed", help="Seeds tie-breaking and the random method."),
    naive: bool = typer.Option(False, "--naive", help="Reference path: no prefix cache."),
    on_too_long: str = typer.Option("error", "--on-too-long", help="error, or skip (recorded as skipped)."),
) -> None:
    """Connection weights of every call in a trace (GBC), and the kept edges."""
    from agentgrad.attribution.io import attribute_trace_file, trace_files
    from agentgrad.attribution.scorer import Scorer
    from agentgrad.attribution.weights import get_method
    from agentgrad.core.trace import Trace

    get_method(method)  # an unknown name fails before the model loads
    files = trace_files(target)
    n_calls = sum(len(Trace.load(f).calls()) for f in files)
    with console.status(f"loading scorer {scorer}"):
        sc = Scorer(scorer, dtype=dtype, device=device, mode="naive" if naive else "cached", on_too_long=on_too_long)
    outs = [out] if not target.is_dir() else [out / f.name for f in files]
    with _progress() as progress:
        task = progress.add_task("call nodes", total=n_calls)
        for f, o in zip(files, outs):
            attribute_trace_file(sc, f, o, method, top_k, seed, on_node=lambda r: progress.advance(task))
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

    show_trace(Trace.load(path), console, max_chars)


@testing_app.command("tiny-model")
def tiny_model(
    out_dir: Path = typer.Argument(..., help="Folder to write the model to."),
    arch: str = typer.Option("llama", "--arch", help="llama, qwen3, mistral or gemma."),
    seed: int = typer.Option(0, "--seed"),
    layers: int = typer.Option(2, "--layers", min=1),
    hidden: int = typer.Option(64, "--hidden", min=8),
) -> None:
    """Build a tiny random model with a locally trained tokenizer (offline, seconds)."""
    from agentgrad.testing.tiny import build_tiny_model

    path = build_tiny_model(out_dir, arch=arch, seed=seed, layers=layers, hidden=hidden)
    console.print(f"tiny {arch} model written to {path} (random weights: for tests and demos only)")


@testing_app.command("serve")
def serve(
    model_dir: Path = typer.Argument(..., help="A Hugging Face model folder to answer from."),
    port: int = typer.Option(8000, "--port"),
    fail_rate: float = typer.Option(0.0, "--fail-rate", min=0.0, max=1.0, help="Fraction answered 500/429."),
) -> None:
    """Serve a local model as an OpenAI-compatible endpoint on 127.0.0.1 (for tests)."""
    from agentgrad.models.hf import HFModel
    from agentgrad.testing.server import OpenAICompatServer

    srv = OpenAICompatServer(HFModel(path=str(model_dir)), fail_rate=fail_rate, port=port)
    console.print(f"serving {model_dir} at {srv.base_url} (Ctrl-C to stop)")
    try:
        srv._httpd.serve_forever()
    except KeyboardInterrupt:
        srv.stop()


@app.command()
def optimize(
    config: Path = typer.Argument(..., help="Optimisation YAML (task, system, data, scorer, optimizer, trainer)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory to write."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue this run directory from its checkpoint."),
    model: list[str] = typer.Option([], "--model", help="Override a model: NAME=PATH_OR_ID (repeatable)."),
    method: Optional[str] = typer.Option(None, "--method", help="Override the blame method (e.g. random, all)."),
) -> None:
    """Diagnose failures with gradients and repair the blamed agents' prompts, with checkpoints."""
    from agentgrad.optim.run import run_optimize

    if (out is None) == (resume is None):
        raise ConfigError("give either --out RUN_DIR (a new run) or --resume RUN_DIR (continue one)")
    run_optimize(config, out or resume, resume=resume is not None, overrides=model, method=method, console=console)


@app.command()
def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Run directory to write."),
    model: Optional[str] = typer.Option(
        None, "--model", help="Real weights instead of the tiny random model: a folder or hub id."
    ),
) -> None:
    """The whole loop (run, attribute, backward, optimize, checkpoint) on the pipeline example."""
    from agentgrad.examples import PIPELINE
    from agentgrad.optim.run import run_optimize

    if model is None:
        console.print(
            "[yellow]note:[/yellow] this demo runs on a tiny model with random weights, built here offline: its "
            "answers are noise and nothing is learned; it shows the machinery. For real weights: agentgrad "
            "optimize examples/pipeline/optimize.yaml --out runs/real --model default=Qwen/Qwen3-0.6B (a hub id or "
            "folder); for an LLM optimizer on any OpenAI-compatible server, add it under models: and set "
            "optimizer: {kind: llm, model: NAME}."
        )
    run_optimize(PIPELINE / "optimize.yaml", out, resume=False, overrides=[f"default={model}"] if model else [],
                 method=None, console=console)
    console.print(f"run directory: {out} (traces/, attribution/, prompts/, checkpoint.json, events.jsonl, final.json)")


@taubench_app.command("replay-gold")
def taubench_replay_gold(
    split: str = typer.Option("all", "--split", help="train, dev, test or all."),
    dump_db: Optional[Path] = typer.Option(None, "--dump-db", help="Write each final database as DIR/<split>-<index>.json."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Benchmark data (default: $AGENTGRAD_DATA_DIR)."),
) -> None:
    """Replay every task's gold actions through the environment and print the action reward."""
    from agentgrad.benchmarks.taubench.env import replay_gold

    with console.status(f"replaying the gold actions of split {split}"):
        res = replay_gold(split, data_dir, dump_db)
    console.print(f"tasks: {res['tasks']}  action reward: {res['action_reward']:.4f}  "
                  f"(gold tool calls answered with an error, as in tau-bench: {res['tool_errors']})")
    for t in res["failed"][:20]:
        err_console.print(f"action reward 0: {t['split']} task {t['index']}")
    if res["failed"]:
        raise typer.Exit(1)


def _open_run(out: Path, resume: bool, digest: str, config: dict):
    """A benchmark run directory; a resumed one must have been started with the same options."""
    from agentgrad.runs.rundir import RunDir

    run_dir = RunDir(out, resume=resume)
    if resume:
        old = next((e for e in run_dir.events() if e.get("event") == "started"), None)
        if old and old.get("digest") != digest:
            raise ConfigError(f"{out} was started with other options; resume it with the same ones")
    else:
        run_dir.log("started", digest=digest)
    run_dir.write_config(config)
    return run_dir


def _tau_options(system: str, prompts: Optional[Path], model: list[str], user_model: Optional[str],
                 user_temperature: float, split: str, tasks: Optional[str], trials: int, max_turns: int,
                 data_dir: Optional[Path]):
    from agentgrad.benchmarks.taubench.run import TauOptions

    return TauOptions(system, str(prompts) if prompts else None, list(model), user_model, user_temperature, split,
                      tasks, trials, max_turns, str(data_dir) if data_dir else None)


def _run_progress(label: str, total: int, measure, describe):
    """A progress bar over finished episodes with a running figure: ``measure(record)`` gives
    (numerator, denominator) to accumulate, ``describe(ratio)`` its text."""
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console)
    bar = progress.add_task(label, total=total)
    acc = [0.0, 0.0]

    def on_record(r: dict) -> None:
        num, den = measure(r)
        acc[0], acc[1] = acc[0] + num, acc[1] + den
        progress.update(bar, advance=1, description=f"{label} | {describe(acc[0] / max(acc[1], 1))}")

    return progress, on_record


def _episode_progress(total: int):
    return _run_progress("conversations", total, lambda r: (r["reward"]["reward"], 1), lambda x: f"mean reward {x:.2f}")


def _training_printer(figure: str, scale: float):
    """Prints each training sample's score (as ``figure``, times ``scale``) and each step's updates."""

    def on_event(e: dict) -> None:
        if e["event"] == "sample":
            console.print(f"train {e['sample']}: {figure} {scale * e['score']:.2f}, "
                          f"blamed {', '.join(e['blamed']) or 'none'}")
        elif e["event"] == "step":
            console.print(f"step {e['step']}: updated {', '.join(e.get('updated', [])) or 'none'}")

    return on_event


def _check_new_run(out: Path, resume: bool) -> None:
    if (out / "train").exists() and not resume:
        raise ConfigError(f"{out} already holds a run; pass --resume to continue it, or choose another --out")


def _print_tau_metrics(m: dict) -> None:
    table = Table(title=f"tau-bench retail, {m['system']} system, split {m['split']}")
    for col in ("episodes", "action reward", "output reward", "reward", *[f"pass^{k}" for k in m["pass_hat_k"]]):
        table.add_column(col, justify="right")
    table.add_row(str(m["episodes"]), f"{m['action_reward']:.3f}", f"{m['output_reward']:.3f}", f"{m['reward']:.3f}",
                  *[f"{v:.3f}" for v in m["pass_hat_k"].values()])
    console.print(table)


_TAU_SYSTEM = typer.Option("multi", "--system", help="multi (the paper's system) or single (baseline).")
_TAU_PROMPTS = typer.Option(None, "--prompts", help="A prompts YAML replacing the packaged one.")
_TAU_MODEL = typer.Option([], "--model", help="NAME=PATH_OR_ID (hf folder/hub id, openai:MODEL@URL, tiny); "
                                              "a bare value sets 'default', the agents' model.")
_TAU_USER = typer.Option(None, "--user-model", help="The simulated customer's model (same forms as --model).")
_TAU_SPLIT = typer.Option("test", "--split", help="train, dev or test.")
_TAU_TASKS = typer.Option(None, "--tasks", help="Task indices, e.g. 0-9,12 (default: all).")
_DATA_DIR = typer.Option(None, "--data-dir", help="Benchmark data (default: $AGENTGRAD_DATA_DIR).")
_CONCURRENCY = typer.Option(1, "--concurrency", min=1, help="Episodes evaluated at once (for servers).")
_METHOD = typer.Option("mean_l1", "--method", help="Blame: mean_l1, max_l1, mean_gxi, max_gxi, random, all.")
_SCORER = typer.Option(None, "--scorer", help="White-box scorer folder or hub id (default: the agents' own model, "
                                              "when local).")
_OPTIMIZER = typer.Option(None, "--optimizer-model", help="LLM that rewrites prompts (same forms as --model; "
                                                          "default: deterministic).")
_RESUME_RUN = typer.Option(False, "--resume", help="Continue an interrupted run.")


@taubench_app.command("evaluate")
def taubench_evaluate(
    out: Path = typer.Option(..., "--out", help="Run directory to write."),
    system: str = _TAU_SYSTEM,
    prompts: Optional[Path] = _TAU_PROMPTS,
    model: list[str] = _TAU_MODEL,
    user_model: Optional[str] = _TAU_USER,
    user_temperature: float = typer.Option(0.0, "--user-temperature", min=0.0, help="The customer's temperature."),
    split: str = _TAU_SPLIT,
    tasks: Optional[str] = _TAU_TASKS,
    trials: int = typer.Option(1, "--trials", min=1, help="Runs per task (pass^k for k up to this)."),
    max_turns: int = typer.Option(30, "--max-turns", min=1, help="Customer messages answered per conversation."),
    resume: bool = typer.Option(False, "--resume", help="Continue an existing run directory."),
    concurrency: int = _CONCURRENCY,
    data_dir: Optional[Path] = _DATA_DIR,
) -> None:
    """Run conversations with a simulated customer; print action, output and overall reward and pass^k."""
    from agentgrad.benchmarks.common import parse_range
    from agentgrad.benchmarks.taubench.env import load_tasks
    from agentgrad.benchmarks.taubench.run import TauSetup, evaluate

    opts = _tau_options(system, prompts, model, user_model, user_temperature, split, tasks, trials, max_turns, data_dir)
    n = len(parse_range(tasks, len(load_tasks(split, opts.data))))
    with console.status("loading models"):
        setup = TauSetup(opts)
    run_dir = _open_run(out, resume, opts.digest(), {"benchmark": "taubench", "options": opts.__dict__})
    progress, on_episode = _episode_progress(n * trials)
    with progress:
        metrics = evaluate(setup, run_dir, on_episode, concurrency=concurrency)
    _print_tau_metrics(metrics)
    console.print(f"run directory: {out} (metrics.json, events.jsonl, traces/)")


@taubench_app.command("optimize")
def taubench_optimize(
    out: Path = typer.Option(..., "--out", help="Run directory to write (train/ and eval/)."),
    system: str = _TAU_SYSTEM,
    prompts: Optional[Path] = _TAU_PROMPTS,
    model: list[str] = _TAU_MODEL,
    user_model: Optional[str] = _TAU_USER,
    method: str = _METHOD,
    samples: int = typer.Option(10, "--samples", min=1, help="Training conversations (the paper: 10)."),
    seed: int = typer.Option(0, "--seed", help="Which training tasks are sampled, and tie-breaking."),
    scorer: Optional[str] = _SCORER,
    optimizer: Optional[str] = _OPTIMIZER,
    split: str = _TAU_SPLIT,
    tasks: Optional[str] = _TAU_TASKS,
    trials: int = typer.Option(1, "--trials", min=1, help="Evaluation runs per task."),
    max_turns: int = typer.Option(30, "--max-turns", min=1, help="Customer messages answered per conversation."),
    resume: bool = _RESUME_RUN,
    concurrency: int = _CONCURRENCY,
    data_dir: Optional[Path] = _DATA_DIR,
) -> None:
    """The paper's protocol: train on sampled training tasks (a step after each conversation), then evaluate."""
    from agentgrad.benchmarks.common import parse_range
    from agentgrad.benchmarks.taubench.env import load_tasks
    from agentgrad.benchmarks.taubench.run import TauSetup, optimize

    opts = _tau_options(system, prompts, model, user_model, 0.0, split, tasks, trials, max_turns, data_dir)
    n = len(parse_range(tasks, len(load_tasks(split, opts.data))))
    _check_new_run(out, resume)
    with console.status("loading models"):
        setup = TauSetup(opts)
    on_event = _training_printer("reward", 1.0)

    progress, on_episode = _episode_progress(n * trials)
    with progress:
        result = optimize(setup, out, resume, method, samples, seed, scorer, optimizer, on_event, on_episode,
                          concurrency)
    t = result["train"]
    console.print(f"training: {t['steps']} steps, {t['accepted']} accepted, train reward {t['train_score']:.3f}")
    _print_tau_metrics(result["eval"])
    console.print(f"run directory: {out} (train/, eval/metrics.json, result.json)")


def _print_woz_metrics(m: dict) -> None:
    labels = ", ".join(m["labels"]) or "-"
    table = Table(title=f"MultiWOZ ({labels} labels), {m['system']} system, {m['dialogues']} {m['split']} dialogues")
    for col in ("Inform", "Success", "JGA", "Slot Recall", "Slot Precision", "Slot F1"):
        table.add_column(col, justify="right")
    table.add_row(*(f"{m[k]:.2f}" for k in ("inform", "success", "jga", "slot_recall", "slot_precision", "slot_f1")))
    console.print(table)


def _dialogue_progress(total: int):
    return _run_progress("dialogues", total, lambda r: (sum(t["joint"] for t in r["turns"]), len(r["turns"])),
                         lambda x: f"JGA so far {100 * x:.1f}")


_WOZ_SYSTEM = typer.Option("multi", "--system", help="multi (the paper's system), single (baseline) or gold.")
_WOZ_N = typer.Option(100, "--n", min=1, help="Dialogues sampled from the split (the paper: 100).")
_WOZ_SEED = typer.Option(42, "--seed", help="Seed of the dialogue sample (the paper: 42).")


@multiwoz_app.command("evaluate")
def multiwoz_evaluate(
    out: Path = typer.Option(..., "--out", help="Run directory to write."),
    system: str = _WOZ_SYSTEM,
    prompts: Optional[Path] = _TAU_PROMPTS,
    model: list[str] = _TAU_MODEL,
    n: int = _WOZ_N,
    seed: int = _WOZ_SEED,
    split: str = typer.Option("test", "--split", help="test or val."),
    resume: bool = typer.Option(False, "--resume", help="Continue an existing run directory."),
    concurrency: int = _CONCURRENCY,
    data_dir: Optional[Path] = _DATA_DIR,
) -> None:
    """Run a system over sampled dialogues; print Inform, Success, JGA and slot recall/precision/F1."""
    from agentgrad.benchmarks.multiwoz.run import WozOptions, WozSetup, evaluate

    opts = WozOptions(system, str(prompts) if prompts else None, list(model), split, n, seed,
                      str(data_dir) if data_dir else None)
    with console.status("loading data and models"):
        setup = WozSetup(opts)
        total = len(setup.dialogues())
    run_dir = _open_run(out, resume, opts.digest(), {"benchmark": "multiwoz", "options": opts.__dict__})
    progress, on_dialogue = _dialogue_progress(total)
    with progress:
        metrics = evaluate(setup, run_dir, on_dialogue, concurrency=concurrency)
    _print_woz_metrics(metrics)
    console.print(f"run directory: {out} (metrics.json, predictions.json, events.jsonl, traces/)")


@multiwoz_app.command("optimize")
def multiwoz_optimize(
    out: Path = typer.Option(..., "--out", help="Run directory to write (train/ and eval/)."),
    system: str = _WOZ_SYSTEM,
    prompts: Optional[Path] = _TAU_PROMPTS,
    model: list[str] = _TAU_MODEL,
    method: str = _METHOD,
    samples: int = typer.Option(30, "--samples", min=1, help="Validation dialogues trained on (the paper: 30)."),
    step_every: int = typer.Option(3, "--step-every", min=1, help="An optimizer step every N dialogues (the paper: 3)."),
    train_seed: int = typer.Option(0, "--train-seed", help="Which training dialogues are sampled."),
    scorer: Optional[str] = _SCORER,
    optimizer: Optional[str] = _OPTIMIZER,
    n: int = _WOZ_N,
    seed: int = _WOZ_SEED,
    resume: bool = _RESUME_RUN,
    concurrency: int = _CONCURRENCY,
    data_dir: Optional[Path] = _DATA_DIR,
) -> None:
    """The paper's protocol: train on validation dialogues (a step every 3), then evaluate on the test sample."""
    from agentgrad.benchmarks.multiwoz.run import WozOptions, WozSetup, optimize

    opts = WozOptions(system, str(prompts) if prompts else None, list(model), "test", n, seed,
                      str(data_dir) if data_dir else None)
    _check_new_run(out, resume)
    with console.status("loading data and models"):
        setup = WozSetup(opts)
        total = len(setup.dialogues())
    on_event = _training_printer("JGA", 100.0)

    progress, on_dialogue = _dialogue_progress(total)
    with progress:
        result = optimize(setup, out, resume, method, samples, step_every, train_seed, scorer, optimizer, on_event,
                          on_dialogue, concurrency)
    t = result["train"]
    console.print(f"training: {t['steps']} steps, {t['accepted']} accepted, train JGA {100 * t['train_score']:.1f}")
    _print_woz_metrics(result["eval"])
    console.print(f"run directory: {out} (train/, eval/metrics.json, eval/predictions.json, result.json)")


@data_app.command("download")
def data_download(
    name: str = typer.Argument(..., help="multiwoz24"),
    data_dir: Optional[Path] = _DATA_DIR,
) -> None:
    """Fetch a dataset into the data directory (needs network access)."""
    if name != "multiwoz24":
        raise ConfigError(f"unknown dataset {name!r}; valid: multiwoz24")
    from agentgrad.benchmarks.multiwoz.data import download_multiwoz24

    with console.status("downloading MultiWOZ 2.4"):
        dest = download_multiwoz24(data_dir)
    console.print(f"MultiWOZ 2.4 unpacked into {dest}; evaluations now use its labels")


@app.command("backends")
def backends() -> None:
    """List the model backends."""
    from agentgrad.models.registry import list_backends

    for b in list_backends():
        console.print(b)


def _progress() -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point: runs the CLI, turning user errors into one line and an exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # our own progress display instead
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    debug = "--debug" in args or os.environ.get("AGENTGRAD_DEBUG") == "1"
    try:
        app(args=args, prog_name="agentgrad", standalone_mode=False)
    except AgentgradError as e:
        if debug:
            raise
        err_console.print(f"[bold red]error:[/bold red] {e}", highlight=False, soft_wrap=True)
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        err_console.print("aborted")
        return 130
    except KeyboardInterrupt:
        err_console.print("interrupted; run again with --resume to continue")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
