"""``blame``: an exported trace file (OpenInference / OTel GenAI spans, chat JSONL, an agentgrad trace) ->
a ranked blame per method and a report (``agentgrad.runs.blame``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agentgrad.blame.context import Meter
from agentgrad.blame.losses import DESCRIBED
from agentgrad.blame.methods import DEFAULT_METHOD, WINDOW
from agentgrad.cli._common import app, console, err_console
from agentgrad.cli.options import DEVICE, DTYPE, JUDGE


_COLUMNS = ("method", "blamed", "node", "score", "prompts to repair", "next")


def blame_cells(row: dict) -> list[str]:
    """One verdict's :meth:`~agentgrad.blame.verdict.Verdict.row` as the table's cells, in the order of ``_COLUMNS``."""
    return [str(row["method"]), str(row["agent"] or "-"),
            f"n{row['node']} {row['kind']}" if row["node"] is not None else "-",
            f"{row['score']:.4g}" if row["score"] is not None else "-", ", ".join(row["repair"]) or "-",
            row["next"] or "-"]


def print_blame_rows(rows: list[dict], con: Console) -> None:
    """The verdicts, best first, one per method: a table where every cell fits whole at the console's
    width, else one record per method (``method``, then a line per field), so that no agent, node
    or prompt to repair is ever cut short, whatever the width (a narrow terminal, a pipe, a log)."""
    cells = [blame_cells(r) for r in rows]
    widths = [max([len(c[i]) for c in cells] + [len(col)]) for i, col in enumerate(_COLUMNS)]
    if sum(widths) + 3 * len(widths) + 1 <= con.width:  # the cells, their padding and the borders
        table = Table(title="blame (best first)")
        for col in _COLUMNS:
            table.add_column(col, no_wrap=True)
        for c in cells:
            table.add_row(*(Text(v) for v in c))  # run text, never markup
        con.print(table, markup=False, highlight=False)
        return
    con.print("blame (best first), one method at a time:", markup=False, highlight=False)
    pad = max(len(col) for col in _COLUMNS[1:])
    for c in cells:
        con.print(c[0], markup=False, highlight=False, soft_wrap=True)
        for col, v in zip(_COLUMNS[1:], c[1:]):
            con.print(f"  {col + ':':<{pad + 1}} {v}", markup=False, highlight=False, soft_wrap=True)


class CallProgress(Meter):
    """The calls a blame scores, shown on stderr as they finish (method, calls scored, the last call's
    seconds, elapsed time); nothing where stderr is not a terminal or with ``--quiet``. The calls a
    walk will score are not known before it walks, so it counts up rather than down."""

    def __init__(self, quiet: bool = False):
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.on = not quiet and err_console.is_terminal
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=err_console, transient=True, disable=not self.on)
        self.task = self.progress.add_task("blaming", total=None)
        self.name, self.calls, self.last = "", 0, 0.0

    def __enter__(self) -> "CallProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def _show(self) -> None:
        self.progress.update(self.task, description=f"blaming with {self.name}: {self.calls} call(s) scored"
                             + (f", the last in {self.last:.1f} s" if self.calls else ""))

    def method(self, name: str) -> None:
        self.name = name
        self._show()

    def computed(self, what: str, node: object, seconds: float) -> None:
        if what == "gradient blame":
            self.calls, self.last = self.calls + 1, seconds
            self._show()


@app.command("blame")
def blame_command(
    trace: Optional[Path] = typer.Argument(None, help="The exported trace: OTLP JSON (OpenInference or OTel GenAI "
                                                      "spans; one request or one per line), span rows (Phoenix's "
                                                      "span export, JSONL or parquet; flat rows), a chat or "
                                                      "group-chat message log, or an agentgrad trace. A set: a file "
                                                      "of many traces, a folder of trace files or a run directory, "
                                                      "with --losses FILE or --expected FILE. Or none, with --phoenix."),
    phoenix: Optional[str] = typer.Option(None, "--phoenix", help="Read the spans from a running Arize Phoenix "
                                                                  "server at this URL (its client: pip install "
                                                                  "'agentgrad[phoenix]'); they are written to "
                                                                  "OUT/phoenix-spans.jsonl and blamed from there."),
    project: str = typer.Option("default", "--project", help="The Phoenix project whose spans --phoenix reads."),
    loss: Optional[str] = typer.Option(None, "--loss", help="What went wrong, in words (the verbal loss); required "
                                                            "for one trace; auto: the loss the trace carries by "
                                                            "itself (a tau-bench result's reward_info: the first "
                                                            "unexpected write, the reply that stated a wrong value; "
                                                            "else an error status, a failed tool, a retry loop). "
                                                            "For a set: the loss of every trace the "
                                                            "--losses/--expected file does not name (without one, "
                                                            "those are skipped)."),
    wrong: Optional[str] = typer.Option(None, "--wrong", help="The wrong text of the final answer (found there: the "
                                                              "loss's span, which targeted methods follow)."),
    expected: Optional[str] = typer.Option(None, "--expected", help="The right answer (or the right text in place "
                                                                    "of --wrong): what the contrast objective "
                                                                    "(gbc:W:contrast:RULE) differentiates the "
                                                                    "produced answer against. A value that names an "
                                                                    "existing file is an expected-answers file "
                                                                    "(JSONL: {\"trace\": ID, \"expected\": TEXT} or "
                                                                    "{\"input\": TEXT, \"expected\": TEXT}): the set "
                                                                    "is blamed, each loss written from its answer."),
    losses: Optional[Path] = typer.Option(None, "--losses", help="A losses file for a set (JSONL: {\"trace\": ID, "
                                                                 "\"loss\": TEXT, \"wrong\": TEXT?, \"expected\": "
                                                                 "TEXT?})."),
    target: Optional[str] = typer.Option(None, "--target", help="The call the loss attaches to: a node id or an "
                                                                "agent (its last call); default the call the "
                                                                "words describe: the latest whose output holds "
                                                                "--wrong, else the one sharing most of the loss's "
                                                                "words, else the last call."),
    trace_id: Optional[str] = typer.Option(None, "--trace", help="Which trace of a file that holds several."),
    method: list[str] = typer.Option([], "--method", help=f"Blame method(s), repeatable or comma-separated, printed "
                                     f"in the order given: any name of bench blame --methods (a name is that method "
                                     f"alone; a prefix such as gbc:max_l1 is its family). Default: two rows, "
                                     f"{DEFAULT_METHOD} and provenance (the string walk that needs no model: a "
                                     f"gradient verdict means something only where they differ)."),
    scorer: str = typer.Option("smollm2", "--scorer", help="White-box scorer for the gradient methods: smollm2, a "
                                                           "folder or hub id, gguf:FILE (a surrogate of the app's model)."),
    judge: str = JUDGE,
    device: str = DEVICE,
    dtype: str = DTYPE,
    top_k: int = typer.Option(1, "--top-k", min=1, help="Incoming edges kept per call by the path walks."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display on stderr (none either where stderr "
                                                      "is not a terminal)."),
    window: int = typer.Option(WINDOW, "--window", min=0, help="Read each call within this many tokens: its system "
                                                             "prompt, its task and the latest steps that fit (the "
                                                             "same accuracy on AgentRx at 0.75 of the CPU: "
                                                             "docs/agentrx.md); 0: whole, up to the scorer's context."),
    edges: str = typer.Option("all", "--edges", help="all: every edge the import found (a group chat: every "
                                                     "earlier message); addressed: a group chat's calls keep "
                                                     "only the instruction they answer, the reply to their "
                                                     "own, what they quote (and their own last step, tools and "
                                                     "the task) where they have any (docs/agentrx.md)."),
    all_calls: bool = typer.Option(False, "--all-calls", help="Score every call first (the report's whole "
                                                               "attribution graph); by default only the calls "
                                                               "the methods read are scored."),
    seed: int = typer.Option(0, "--seed", help="Seeds tie-breaking and the random method."),
    out: Path = typer.Option(Path("runs/blame"), "--out", help="Run directory for traces/, attribution/, blame.json "
                                                               "(a set: verdicts.jsonl and traces.jsonl) and "
                                                               "report.html (new or empty)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty --out."),
    resume: bool = typer.Option(False, "--resume", help="A set: go on in --out, skipping the traces its "
                                                        "verdicts.jsonl holds (one trace: blame it again there)."),
) -> None:
    """Blame an exported trace of your own app, or a set of them: which agent caused the failures, ranked, with a report."""
    from agentgrad.blame.judge import Judge, make_judge
    from agentgrad.blame.methods import check_expected, select_methods
    from agentgrad.core.files import check_new_output
    from agentgrad.errors import ConfigError, RunError
    from agentgrad.runs.blame import blame_file, write_blame
    from agentgrad.report.html import write_report

    if (trace is None) == (phoenix is None):
        raise ConfigError("give the trace file or folder to blame, or --phoenix URL --project NAME (one of them)"
                          if trace is None else f"give {trace} or --phoenix {phoenix}, not both")
    from agentgrad.importers.phoenix import FETCHED

    fetched = out / FETCHED if phoenix is not None else None
    trace = fetched if fetched is not None else trace
    answers = Path(expected) if expected and Path(expected).is_file() else None
    is_set = trace.is_dir() or losses is not None or answers is not None
    names = select_methods(",".join(method) or f"{DEFAULT_METHOD},provenance", judge=bool(judge), exact=True)
    from agentgrad.runs.blame import check_edges

    check_edges(edges)
    if is_set and edges != "all":
        raise ConfigError("--edges addressed blames one group chat at a time; give one trace file, or drop --edges")
    if is_set:
        if trace_id is not None or target is not None:
            raise ConfigError(f"{'--trace' if trace_id is not None else '--target'} is for one trace; a set is "
                              f"blamed whole, each loss on its final answer (drop the option)")
        if wrong and not loss:
            raise ConfigError("--wrong goes with --loss (the default loss of a set); give --loss too, or drop --wrong")
        check_expected(names, "given" if answers is not None or losses is not None else None)
        if losses is None and answers is None and not loss:
            raise ConfigError(f"{trace} is a folder: say what went wrong with --losses FILE, --expected FILE or "
                              f"--loss TEXT")
        from agentgrad.runs.blame_set import book_of

        books = (book_of(losses, "losses"), book_of(answers, "expected"))  # a bad file: its one line, before a model loads
    else:
        if loss is None:
            raise ConfigError("--loss is required for one trace: say in words what went wrong (or blame a set: "
                              "--losses FILE or --expected FILE)")
        check_expected(names, expected)  # before a model loads
    protect = [*([] if fetched else [trace]), *(p for p in (losses, answers) if p is not None)]
    if resume and not overwrite and out.is_dir() and any(out.iterdir()) and not (out / "blame.json").is_file() \
            and not (out / "verdicts.jsonl").is_file():
        raise RunError(f"--out {out} holds no blame to resume; choose another --out (or --overwrite to write there)")
    if is_set and not (overwrite or resume) and (out / "verdicts.jsonl").is_file():
        raise RunError(f"--out {out} holds the blame of a set: pass --resume to go on (the finished traces are "
                       f"not redone), --overwrite to start again, or choose another --out")
    check_new_output(out, overwrite or resume, "dir", protect=protect)
    if fetched is not None and not (resume and fetched.is_file()):  # --resume blames the spans it fetched before
        from agentgrad.importers.phoenix import fetch_phoenix

        with console.status(f"reading project {project!r} from Phoenix at {phoenix}"):
            fetch_phoenix(phoenix, project, fetched)
    jm = Judge(make_judge(judge)) if judge else None
    sc = None
    if scorer:
        from agentgrad.api import load_scorer
        from agentgrad.blame.methods import needs_scorer

        if any(needs_scorer(n) for n in names):
            with console.status(f"loading scorer {scorer}"):
                sc = load_scorer(scorer, device=device, dtype=dtype, on_too_long="skip")  # the verdict says what
    if is_set:
        from agentgrad.cli.blame_set import run_set

        run_set(trace, *books, loss, wrong, names, sc, jm, out, resume, overwrite, seed, top_k, console)
        return
    shown = CallProgress(quiet)
    with shown:
        tv = blame_file(trace, loss, wrong=wrong, expected=expected, target=DESCRIBED if target is None else target,
                        trace_id=trace_id, methods=names, scorer=sc, seed=seed, top_k=top_k, judge=jm,
                        on_method=shown.method, attribute_all=all_calls, meter=shown, window=window or None,
                        edges=edges)
    written = write_blame(tv, out, top_k, seed)
    tr = tv.data
    node = tr.nodes[tv.verbal.targets[0]]
    console.print(f"trace {tr.id}: {len(tr.calls())} calls of {len({c.name for c in tr.calls()})} "
                  f"agent(s), {sum(n.kind == 'tool' for n in tr.nodes)} tool result(s); loss on n{node.id} "
                  f"({node.name})" + (f", from the run's record: {tv.verbal.text}" if tv.verbal.kind == "record" else
                                      f": {tv.verbal.details['target_reason']}" if tv.verbal.details.get("target_reason")
                                      else ""),
                  highlight=False, markup=False)
    from agentgrad.runs.blame import reach, with_edges

    k, n = reach(tr)
    along = "" if edges == "all" else f" ({reach(with_edges(tr, edges))[0]} along the {edges} edges)"
    console.print(f"the final output reaches back to {k} of {n} calls{along}", highlight=False, markup=False)
    if tv.note:
        console.print(tv.note, highlight=False, markup=False)
    print_blame_rows([v.row() for v in tv.methods.values()], console)
    from agentgrad.blame.confidence import confidence, short_line, trace_kind

    console.print(short_line(confidence(tv.methods, kind=trace_kind(tr))), highlight=False, markup=False)
    readers = {m: v.reader for m, v in tv.methods.items() if v.reader}  # what a fact is (blame/facts.py)
    if readers:
        console.print("facts read as " + ", ".join(f"{r} by {m}" for m, r in readers.items()), highlight=False, markup=False)
    res = write_report(out, overwrite=overwrite or resume)  # --overwrite: the folder's report.html too
    console.print(f"wrote {', '.join(written)} in {out}; report: {res.path}", highlight=False, markup=False,
                  soft_wrap=True)  # a path is never folded: it is copied
