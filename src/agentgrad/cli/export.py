"""``export credit``: per-call (and per-input, per-tool) credit of a run, as training data."""

from __future__ import annotations

from pathlib import Path

import typer

from agentgrad.cli._common import console

export_app = typer.Typer(help="Export what a run learned, as data.", no_args_is_help=True)


@export_app.command("credit")
def export_credit(
    run_dir: Path = typer.Argument(..., help="An attributed run directory (optimize, demo, bench ... optimize's train/)."),
    out: Path = typer.Option(..., "--out", help="JSONL file to write."),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl (every node holding credit) or trl (prompt/completion/reward)."),
    quantity: str = typer.Option("score", "--quantity", help="What is split: score, or loss (1 - score)."),
    weight: str = typer.Option("mean_l1", "--weight", help="mean_l1, max_l1, mean_gxi or max_gxi."),
    top_k: int = typer.Option(0, "--top-k", min=0, help="Only the kept top-k edges of each call (0: every edge)."),
    signed: bool = typer.Option(False, "--signed", help="Signed weights (g.e): shares may be negative."),
    self_share: float = typer.Option(0.0, "--self-share", min=0.0, max=1.0,
                                     help="What a call keeps when its prompt was not scored (attribute --prompt-weights)."),
    tools: str = typer.Option("pass", "--tools", help="pass (a tool's credit goes to the call that asked) or keep."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out."),
) -> None:
    """Split each attributed episode's score (or loss) over its calls, inputs and tools; one record per node."""
    from agentgrad.blame.credit import export_credit as run_export

    n = run_export(run_dir, out, fmt=fmt, quantity=quantity, weight=weight, top_k=top_k or None, signed=signed,
                   self_share=self_share, tools=tools, overwrite=overwrite)
    console.print(f"exported {n['records']:,} records from {n['episodes']:,} episodes -> {out}", highlight=False)
