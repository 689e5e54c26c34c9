"""The ``agentgrad`` command: thin wrappers over library calls, one module per command group.

Every user mistake gets one line and a non-zero exit: an :class:`AgentgradError` (exit 1, or 2
for configuration errors) and a usage error (a missing argument, an unknown option or command, a
value out of range; exit 2). ``--debug`` shows the traceback of an AgentgradError too (same exit
code). Ctrl-C says in one line what the run kept and the command that continues it (exit 130).
"""

from __future__ import annotations

import itertools
import os
import warnings
import shlex
import sys
import traceback
from typing import Any, Optional

import typer
from rich.markup import escape

from agentgrad.cli import bench as _bench  # noqa: F401  (registers bench blame, whowhen, ablation, inject)
from agentgrad.cli import blame_trace as _blame_trace  # noqa: F401  (registers blame)
from agentgrad.cli import core as _core  # noqa: F401  (registers run, attribute, optimize, demo, ...)
from agentgrad.cli import importing as _importing  # noqa: F401  (registers import)
from agentgrad.cli import report as _report  # noqa: F401  (registers report)
from agentgrad.cli._common import app, bench_app, console, err_console, trace_app
from agentgrad.cli.export import export_app
from agentgrad.cli.multiwoz import data_app, multiwoz_app
from agentgrad.cli.taubench import taubench_app
from agentgrad.cli.testing import testing_app
from agentgrad.errors import AgentgradError
from agentgrad.core.redact import redact_text

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
    """(``--debug`` is read by :func:`main`, which handles the errors.)"""


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


def _flags_untyped(cmd: Any) -> None:
    """Boolean flags (``--help`` included) shown in help without a type: typer 0.29's help shows them as
    ``--debug <bool>``, which invites ``--debug true``, an error."""
    help_opt = cmd.get_help_option(cmd.context_class(cmd, info_name=cmd.name))
    for p in [*cmd.params, *([help_opt] if help_opt is not None else [])]:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""  # typer's help prints the metavar instead of the type when there is one
    for sub in getattr(cmd, "commands", {}).values():
        _flags_untyped(sub)


def _command_of(root: Any, args: list[str]) -> Any:
    """The (sub)command that ``args`` name, or None."""
    cmd, words = root, [a for a in args if not a.startswith("-")]
    while hasattr(cmd, "commands") and words:
        cmd = cmd.commands.get(words.pop(0))
        if cmd is None:
            return None
    return None if hasattr(cmd, "commands") else cmd


def _interrupted(root: Any, args: list[str]) -> str:
    """One line for Ctrl-C: what the run kept, and the command that continues it."""
    from agentgrad.runs.rundir import kept_summary

    cmd = _command_of(root, args)
    params = {o: p for p in getattr(cmd, "params", []) for o in p.opts}
    if "--resume" not in params or "--out" not in params:
        return "interrupted (nothing to continue: the command keeps no partial work)"
    out = next((a.split("=", 1)[1] for a in args if a.startswith("--out=")), None)
    if out is None and "--out" in args[:-1]:
        out = args[args.index("--out") + 1]
    again = list(args)
    if out is None:  # the default folder, named, so that the command to continue says where
        out = str(params["--out"].default)
        again += ["--out", out]
    again += [] if "--resume" in args else ["--resume"]
    return f"interrupted: {kept_summary(out)}; continue with: {shlex.join(['agentgrad', *again])}"


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point: runs the CLI, turning user errors into one line and an exit code.

    ``--debug`` adds the traceback of an AgentgradError; the line and the exit code stay the same.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # our own progress display instead
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from agentgrad.models.threads import configure_process

    try:
        configure_process()  # waiting OpenMP threads spin on an idle machine, sleep beside another job
    except AgentgradError as e:  # a bad AGENTGRAD_THREADS: one line, before anything runs
        err_console.print("[bold red]error:[/bold red] " + escape(one_line(str(e))), highlight=False, soft_wrap=True)
        return e.exit_code
    words = list(itertools.takewhile(lambda a: a.startswith("-"), args))  # the options before the command
    debug = "--debug" in words or os.environ.get("AGENTGRAD_DEBUG") == "1"
    before = os.environ.get("AGENTGRAD_DEBUG")
    if debug:  # what the library reads where a bug would otherwise be recorded and passed over (blame_set)
        os.environ["AGENTGRAD_DEBUG"] = "1"
    if not debug:  # a library's deprecation notice is for us, not for the user reading the one line
        for category in (FutureWarning, DeprecationWarning):
            warnings.filterwarnings("ignore", category=category)
    click_error, click_exit, click_abort = _click_exceptions()
    root = typer.main.get_command(app)
    _flags_untyped(root)
    try:
        rc = root.main(args=args, prog_name="agentgrad", standalone_mode=False)
    except AgentgradError as e:
        if debug:
            err_console.print(traceback.format_exc(), highlight=False, markup=False, soft_wrap=True)
        err_console.print("[bold red]error:[/bold red] " + escape(one_line(str(e))), highlight=False,
                          soft_wrap=True)
        return e.exit_code
    except KeyboardInterrupt:
        rc = 130
    except click_exit as e:
        rc = int(e.exit_code or 0)
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
    except click_abort as e:
        err_console.print(_interrupted(root, args) if isinstance(e.__cause__, KeyboardInterrupt) else "aborted",
                          highlight=False, markup=False, soft_wrap=True)
        return 130
    finally:  # this call's --debug does not outlive it (main is also called in-process)
        if before is None:
            os.environ.pop("AGENTGRAD_DEBUG", None)
        else:
            os.environ["AGENTGRAD_DEBUG"] = before
    if rc == 130:  # Ctrl-C: typer turns it into a silent exit 130 (no command of ours exits 130 itself)
        err_console.print(_interrupted(root, args), highlight=False, markup=False, soft_wrap=True)
    return int(rc) if isinstance(rc, int) else 0
