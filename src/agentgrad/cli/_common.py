"""What the command modules share: the consoles, progress displays and option declarations."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agentgrad.blame.methods import DEFAULT_METHOD
from agentgrad.errors import ConfigError

console = Console(emoji=False)  # a method name such as provenance:key:root is no emoji code
err_console = Console(stderr=True, emoji=False)

app = typer.Typer(
    name="agentgrad",
    help="Find which agent of a multi-agent LLM system is to blame for a failure, and fix its prompt.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
trace_app = typer.Typer(help="Inspect traces.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks: the paper's, and blame quality.", no_args_is_help=True)


TRACE_FILE = "an agentgrad trace (the JSON that agentgrad run, import or blame writes under traces/)"


def check_user_file(path: Optional[Path], expected: str) -> None:
    """A file the user named, looked at before anything loads: an empty, binary or non-UTF-8 file is one
    line that says what the file is and what was ``expected`` ("a system YAML", ...). A missing file
    or a folder is left to the reader, whose error already says so."""
    if path is None or not Path(path).is_file():
        return
    from agentgrad.importers.base import read_user_text

    read_user_text(path, expected)


def check_new_folder(path: Path, overwrite: bool, name: str) -> None:
    """A folder to write that is not ``--out`` (``name``: the option or argument, e.g. ``--dump-db``, ``OUT_DIR``):
    new or empty, unless ``overwrite``; the hint names what the command takes."""
    from agentgrad.errors import RunError

    if path.exists() and not path.is_dir():
        raise RunError(f"{name} {path} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise RunError(f"{name} {path} is not empty; pass --overwrite to write into it, or choose another {name}")


def _open_run(out: Path, resume: bool, digest: str, config: dict):
    """A benchmark run directory; a resumed one must have been started with the same options."""
    from agentgrad.runs.rundir import RunDir

    run_dir = RunDir(out, resume=resume)
    run_dir.started(digest)
    run_dir.write_config(config)
    return run_dir


def _tau_options(system: str, prompts: Optional[Path], model: list[str], user_model: Optional[str],
                 user_temperature: Optional[float], split: str, tasks: Optional[str], trials: int, max_steps: int,
                 data_dir: Optional[Path]):
    from agentgrad.benchmarks.taubench.run import TauOptions

    check_user_file(prompts, "a prompts YAML (each agent's prompt, as the packaged prompts file)")
    return TauOptions(system, str(prompts) if prompts else None, list(model), user_model, user_temperature, split,
                      tasks, trials, max_steps, str(data_dir) if data_dir else None)


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
    """A benchmark optimisation writes train/, eval/ and result.json: never into a folder holding anything else."""
    from agentgrad.runs.rundir import check_run_dir

    check_run_dir(out, resume, logs=("train/events.jsonl", "eval/events.jsonl"))


def _print_tau_metrics(m: dict) -> None:
    table = Table(title=f"tau-bench retail, {m['system']} system, split {m['split']}")
    for col in ("episodes", "action reward", "output reward", "reward", *[f"pass^{k}" for k in m["pass_hat_k"]]):
        table.add_column(col, justify="right")
    table.add_row(str(m["episodes"]), f"{m['action_reward']:.3f}", f"{m['output_reward']:.3f}", f"{m['reward']:.3f}",
                  *[f"{v:.3f}" for v in m["pass_hat_k"].values()])
    console.print(table)
    ended = m.get("ended_by", {})
    console.print("ended by: " + ", ".join(f"{k} {v}" for k, v in ended.items())
                  + " (step_limit and error score 0, as in tau-bench)")
    failed = ended.get("error", 0)
    if m["episodes"] and failed == m["episodes"]:
        from agentgrad.errors import ModelError

        raise ModelError(f"every one of the {failed} conversations failed (first error: {m.get('first_error')}); "
                         f"the figures above are not a result")


_TAU_SYSTEM = typer.Option("multi", "--system", help="multi (the paper's system) or single (baseline).")
_TAU_PROMPTS = typer.Option(None, "--prompts", help="A prompts YAML replacing the packaged one.")
_TAU_MODEL = typer.Option([], "--model", help="NAME=PATH_OR_ID (hf folder/hub id, openai:MODEL@URL, tiny); "
                                              "a bare value sets 'default', the agents' model.")
_TAU_USER = typer.Option(None, "--user-model", help="The simulated customer's model (same forms as --model).")
_TAU_SPLIT = typer.Option("test", "--split", help="train, dev or test.")
_TAU_MAX_STEPS = typer.Option(30, "--max-steps", min=1, help="tau-bench's limit of agent steps (tool calls and "
                                                             "replies) per conversation; reaching it scores 0.")
_TAU_TASKS = typer.Option(None, "--tasks", help="Task indices, e.g. 0-9,12 (default: all).")
_DATA_DIR = typer.Option(None, "--data-dir", help="Benchmark data (default: $AGENTGRAD_DATA_DIR).")
_CONCURRENCY = typer.Option(1, "--concurrency", min=1, help="Episodes evaluated at once (for servers).")
_METHOD = typer.Option(DEFAULT_METHOD, "--method", help="Blame method: any name of bench blame --methods, or an "
                                                        "alias (mean_l1, ...; docs/blame.md).")
_SCORER = typer.Option(None, "--scorer", help="White-box scorer folder or hub id (default: the agents' own model, "
                                              "when local).")
_OPTIMIZER = typer.Option(None, "--optimizer-model", help="LLM that rewrites prompts (same forms as --model; "
                                                          "default: deterministic).")
_OPTIMIZER_KIND = typer.Option("verbal", "--optimizer", help="verbal (the paper's: the loss walked back) or target "
                                                            "(target back-propagation).")


def _check_optimizer_kind(kind: str) -> None:
    from agentgrad.optim.targets import OPTIMIZER_KINDS

    if kind not in OPTIMIZER_KINDS:
        raise ConfigError(f"--optimizer takes {' or '.join(OPTIMIZER_KINDS)}, got {kind!r}")


_RESUME_RUN = typer.Option(False, "--resume", help="Continue an interrupted run.")


def _print_woz_metrics(m: dict) -> None:
    labels = ", ".join(m["labels"]) or "-"
    table = Table(title=f"MultiWOZ ({labels} labels), {m['system']} system, {m['dialogues']} {m['split']} dialogues")
    for col in ("Inform", "Success", "JGA", "Slot Recall", "Slot Precision", "Slot F1"):
        table.add_column(col, justify="right")
    table.add_row(*(f"{m[k]:.2f}" if m[k] is not None else "-"
                    for k in ("inform", "success", "jga", "slot_recall", "slot_precision", "slot_f1")))
    console.print(table)


def _dialogue_progress(total: int):
    return _run_progress("dialogues", total, lambda r: (sum(t["joint"] for t in r["turns"]), len(r["turns"])),
                         lambda x: f"JGA so far {100 * x:.1f}")


_WOZ_SYSTEM = typer.Option("multi", "--system", help="multi (the paper's system), single (baseline) or gold.")
_WOZ_N = typer.Option(100, "--n", min=1, help="Dialogues sampled from the split (the paper: 100).")
_WOZ_SEED = typer.Option(42, "--seed", help="Seed of the dialogue sample (the paper: 42).")


def _progress() -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


