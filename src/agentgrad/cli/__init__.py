"""The ``agentgrad`` command: thin wrappers over library calls, one module per command group.

Every user mistake gets one line and a non-zero exit: an :class:`AgentgradError` (exit 1, or 2
for configuration errors) and a usage error (a missing argument, an unknown option or command, a
value out of range; exit 2). ``--debug`` shows the traceback of an AgentgradError instead.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer
from rich.markup import escape

from agentgrad.cli import blame as _blame  # noqa: F401  (registers bench blame)
from agentgrad.cli import core as _core  # noqa: F401  (registers run, attribute, optimize, demo, ...)
from agentgrad.cli import importing as _importing  # noqa: F401  (registers import)
from agentgrad.cli import report as _report  # noqa: F401  (registers report)
from agentgrad.cli._common import app, bench_app, console, err_console, trace_app
from agentgrad.cli.export import export_app
from agentgrad.cli.multiwoz import data_app, multiwoz_app
from agentgrad.cli.taubench import taubench_app
from agentgrad.cli.testing import testing_app
from agentgrad.errors import AgentgradError
from agentgrad.redact import redact_text

testing_app.command("blame-model")(_blame.blame_model_command)
bench_app.add_typer(taubench_app, name="taubench")
bench_app.add_typer(multiwoz_app, name="multiwoz")
app.add_typer(data_app, name="data")
app.add_typer(bench_app, name="bench")
app.add_typer(trace_app, name="trace")
app.add_typer(export_app, name="export")
app.add_typer(testing_app, name="testing")

__all__ = ["app", "console", "main"]


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    if debug:
        os.environ["AGENTGRAD_DEBUG"] = "1"


def _click_exceptions() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """(usage error, exit, abort) classes of every click the installed typer may raise.

    typer >= 0.26 bundles its own copy of click (``typer._click``) and its own ``Exit``/``Abort``;
    older ones use the click package. All are caught, so a usage error is never a traceback.
    """
    found: dict[str, list[type]] = {"ClickException": [], "Exit": [], "Abort": []}
    for mod in ("typer._click.exceptions", "typer.exceptions", "typer", "click.exceptions"):
        try:
            m = __import__(mod, fromlist=["_"])
        except ImportError:
            continue
        for name, classes in found.items():
            cls = getattr(m, name, None)
            if isinstance(cls, type) and cls not in classes:
                classes.append(cls)
    return tuple(found["ClickException"]), tuple(found["Exit"]), tuple(found["Abort"])


def one_line(msg: str) -> str:
    """``msg`` on one printable line: secrets removed, newlines and control characters escaped."""
    msg = redact_text(msg)
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in msg.strip())


def _usage_line(e: Exception) -> str:
    """One line for a usage error: the message, and where to look for the usage."""
    msg = one_line(e.format_message())  # type: ignore[attr-defined]
    ctx = getattr(e, "ctx", None)
    path = ctx.command_path if ctx is not None else "agentgrad"
    return f"{msg} (see '{path} --help')"


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point: runs the CLI, turning user errors into one line and an exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # our own progress display instead
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    debug = "--debug" in args or os.environ.get("AGENTGRAD_DEBUG") == "1"
    click_error, click_exit, click_abort = _click_exceptions()
    try:
        rc = app(args=args, prog_name="agentgrad", standalone_mode=False)
    except AgentgradError as e:
        if debug:
            raise
        err_console.print("[bold red]error:[/bold red] " + escape(one_line(str(e))), highlight=False,
                          soft_wrap=True)
        return e.exit_code
    except click_exit as e:
        return int(e.exit_code or 0)
    except click_error as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # a group called without a command: its help
            ctx = getattr(e, "ctx", None)
            if ctx is not None:
                console.print(ctx.get_help(), highlight=False, markup=False)
            err_console.print(f"error: missing command (see '{ctx.command_path if ctx else 'agentgrad'} --help')",
                              highlight=False, markup=False)
            return 2
        err_console.print(f"error: {_usage_line(e)}", highlight=False, soft_wrap=True, markup=False)
        return int(getattr(e, "exit_code", 2) or 2)
    except click_abort:
        err_console.print("aborted")
        return 130
    except KeyboardInterrupt:
        err_console.print("interrupted; run again with --resume to continue")
        return 130
    return int(rc) if isinstance(rc, int) else 0
