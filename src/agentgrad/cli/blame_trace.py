"""``blame``: an exported trace file (OpenInference / OTel GenAI spans, chat JSONL, an agentgrad trace) ->
a ranked blame per method and a report (``agentgrad.importers.blame``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agentgrad.blame.methods import DEFAULT_METHOD
from agentgrad.cli._common import app, console


_COLUMNS = ("method", "blamed", "node", "score", "prompts to repair", "next")


def blame_cells(row: dict) -> list[str]:
    """One row of :meth:`TraceBlame.rows` as the table's cells, in the order of ``_COLUMNS``."""
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


@app.command("blame")
def blame_command(
    trace: Path = typer.Argument(..., help="The exported trace: OTLP JSON (OpenInference or OTel GenAI spans; one "
                                           "request or one per line), chat JSONL, or an agentgrad trace."),
    loss: str = typer.Option(..., "--loss", help="What went wrong, in words (the verbal loss)."),
    wrong: Optional[str] = typer.Option(None, "--wrong", help="The wrong text of the final answer (found there: the "
                                                              "loss's span, which targeted methods follow)."),
    expected: Optional[str] = typer.Option(None, "--expected", help="The right answer (or the right text in place "
                                                                    "of --wrong): what the contrast objective "
                                                                    "(gbc:W:contrast:RULE) differentiates the "
                                                                    "produced answer against."),
    target: Optional[str] = typer.Option(None, "--target", help="The call the loss attaches to: a node id or an "
                                                                "agent (its last call); default the last call."),
    trace_id: Optional[str] = typer.Option(None, "--trace", help="Which trace of a file that holds several."),
    method: list[str] = typer.Option([], "--method", help=f"Blame method(s), repeatable or comma-separated, printed "
                                     f"in the order given: any name of bench blame --methods (a name is that method "
                                     f"alone; a prefix such as gbc:max_l1 is its family). Default: two rows, "
                                     f"{DEFAULT_METHOD} and provenance (the string walk that needs no model: a "
                                     f"gradient verdict means something only where they differ)."),
    scorer: str = typer.Option("smollm2", "--scorer", help="White-box scorer for the gradient methods: smollm2, a "
                                                           "folder or hub id, gguf:FILE (a surrogate of the app's model)."),
    judge: str = typer.Option("", "--judge", help="A model for the judge methods (openai:MODEL@URL, smollm2, ...)."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N."),
    dtype: str = typer.Option("float32", "--dtype", help="float32 (default), bfloat16 or float16."),
    top_k: int = typer.Option(1, "--top-k", min=1, help="Incoming edges kept per call by the path walks."),
    seed: int = typer.Option(0, "--seed", help="Seeds tie-breaking and the random method."),
    out: Path = typer.Option(Path("runs/blame"), "--out", help="Run directory for traces/, attribution/, blame.json "
                                                               "and report.html (new or empty)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty --out."),
) -> None:
    """Blame an exported trace of your own app: which agent caused the failure, ranked, with a report."""
    from agentgrad.blame.judge import Judge, make_judge
    from agentgrad.blame.methods import check_expected, select_methods
    from agentgrad.core.files import check_new_output
    from agentgrad.importers.blame import blame_file, write_blame
    from agentgrad.report.html import write_report

    names = select_methods(",".join(method) or f"{DEFAULT_METHOD},provenance", judge=bool(judge), exact=True)
    check_expected(names, expected)  # before a model loads
    check_new_output(out, overwrite, "dir", protect=[trace])
    jm = Judge(make_judge(judge)) if judge else None
    sc = None
    if scorer:
        from agentgrad.api import load_scorer
        from agentgrad.blame.methods import needs_scorer

        if any(needs_scorer(n) for n in names):
            with console.status(f"loading scorer {scorer}"):
                sc = load_scorer(scorer, device=device, dtype=dtype)
    with console.status("blaming") as status:
        tb = blame_file(trace, loss, wrong=wrong, expected=expected, target=target, trace_id=trace_id, methods=names, scorer=sc,
                        seed=seed, top_k=top_k, judge=jm, on_method=lambda m: status.update(f"blaming: {m}"))
    written = write_blame(tb, out, top_k, seed)
    node = tb.trace.nodes[tb.loss.targets[0]]
    console.print(f"trace {tb.trace.id}: {len(tb.trace.calls())} calls of {len({c.name for c in tb.trace.calls()})} "
                  f"agent(s), {sum(n.kind == 'tool' for n in tb.trace.nodes)} tool result(s); loss on n{node.id} "
                  f"({node.name})", highlight=False, markup=False)
    print_blame_rows(tb.rows(), console)
    readers = {m: o.reader for m, o in tb.outcomes.items() if o.reader}  # what a fact is (blame/facts.py)
    if readers:
        console.print("facts read as " + ", ".join(f"{r} by {m}" for m, r in readers.items()), highlight=False, markup=False)
    res = write_report(out, overwrite=overwrite)  # --overwrite: the folder's report.html too
    console.print(f"wrote {', '.join(written)} in {out}; report: {res.path}", highlight=False, markup=False)
