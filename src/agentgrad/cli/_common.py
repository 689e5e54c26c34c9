"""What the command modules share: the consoles, the command groups, progress displays and the printed
benchmark metrics (option types and their parsing: :mod:`agentgrad.cli.options`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

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


def open_run(out: Path, resume: bool, digest: str, config: dict):
    """A benchmark run directory; a resumed one must have been started with the same options."""
    from agentgrad.runs.rundir import RunDir

    run_dir = RunDir(out, resume=resume)
    run_dir.started(digest)
    run_dir.write_config(config)
    return run_dir


def run_progress(label: str, total: int, measure, describe):
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


def episode_progress(total: int):
    return run_progress("conversations", total, lambda r: (r["reward"]["reward"], 1), lambda x: f"mean reward {x:.2f}")


def training_printer(figure: str, scale: float):
    """Prints each training sample's score (as ``figure``, times ``scale``) and each step's updates."""

    def on_event(e: dict) -> None:
        if e["event"] == "sample":
            console.print(f"train {e['sample']}: {figure} {scale * e['score']:.2f}, "
                          f"blamed {', '.join(e['blamed']) or 'none'}")
        elif e["event"] == "step":
            console.print(f"step {e['step']}: updated {', '.join(e.get('updated', [])) or 'none'}")

    return on_event


def print_tau_metrics(m: dict) -> None:
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


def print_woz_metrics(m: dict) -> None:
    labels = ", ".join(m["labels"]) or "-"
    table = Table(title=f"MultiWOZ ({labels} labels), {m['system']} system, {m['dialogues']} {m['split']} dialogues")
    for col in ("Inform", "Success", "JGA", "Slot Recall", "Slot Precision", "Slot F1"):
        table.add_column(col, justify="right")
    table.add_row(*(f"{m[k]:.2f}" if m[k] is not None else "-"
                    for k in ("inform", "success", "jga", "slot_recall", "slot_precision", "slot_f1")))
    console.print(table)


def dialogue_progress(total: int):
    return run_progress("dialogues", total, lambda r: (sum(t["joint"] for t in r["turns"]), len(r["turns"])),
                        lambda x: f"JGA so far {100 * x:.1f}")


def progress_bar() -> Progress:
    """A progress display (description, bar, done of total, time) on the console."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
