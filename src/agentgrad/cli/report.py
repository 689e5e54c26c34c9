"""``report``: one self-contained HTML page for a run directory or a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from agentgrad.cli._common import app, console, err_console
from agentgrad.cli.options import TRACE_FILE, check_user_file


@app.command()
def report(
    target: Path = typer.Argument(..., help="A run directory (any agentgrad run or benchmark), or a trace JSON file."),
    out: Optional[Path] = typer.Option(None, "--out", help="HTML file to write (default RUN_DIR/report.html, or TRACE.html)."),
    attribution: Optional[Path] = typer.Option(
        None, "--attribution", help="Attribution: the folder agentgrad attribute wrote (run directory), or its file (trace)."),
    episodes: int = typer.Option(20, "--episodes", min=0, help="Episodes shown in full, the worst first."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an --out that is not an agentgrad report."),
) -> None:
    """Write one self-contained HTML page: summary, curves, graphs, token heat maps, prompt history, verdicts."""
    from agentgrad.report.html import write_report

    check_user_file(target, TRACE_FILE + ", or a run directory")
    check_user_file(attribution, "an attribution file (the JSON that agentgrad attribute writes)")
    with console.status("writing the report"):
        res = write_report(target, out, attribution, episodes, overwrite)
    for w in res.warnings[:10]:
        err_console.print(f"[yellow]warning:[/yellow] {w}", markup=True, highlight=False)
    console.print(f"report: {res.path} ({res.bytes / 1e6:.2f} MB; {res.shown} of {res.episodes} episodes in full; "
                  f"{res.seconds:.1f} s)", highlight=False, soft_wrap=True)
