"""``agentgrad blame`` of a set of traces: the progress, the team table, the trajectories, what was skipped.

Called by :func:`agentgrad.cli.blame_trace.blame_command` when its TRACE is a folder, or a losses
or expected-answers file is given; everything it does is :func:`agentgrad.runs.blame_set.blame_set`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from agentgrad.blame.team import NOBODY, TeamVerdict, TraceVerdict
from agentgrad.errors import RunError

WHY = {"succeeded": "the final output gives the expected answer", "malformed": "could not be read or blamed",
       "unblamed": "no loss names them"}
SHOWN_WARNINGS = 10


def share_cell(team: TeamVerdict, method: str, agent: str) -> str:
    s = team.methods[method].share(agent) if method in team.methods else None
    return f"{s.share:.2f} [{s.low:.2f}, {s.high:.2f}]" if s is not None else "-"


def team_rows(team: TeamVerdict) -> tuple[list[str], list[list[str]]]:
    """The team table: per agent (repair order first, then the others), its share [95% interval]
    under each method, and its place in the repair order."""
    methods = list(team.methods)
    agents = list(team.repair) + [a for m in methods for a in (s.agent for s in team.methods[m].shares)
                                  if a not in team.repair]
    agents = list(dict.fromkeys(agents))
    level = round(team.level * 100)
    columns = ["agent", *(f"{m} share [{level}%]" for m in methods), "repair"]
    rows = [[a, *(share_cell(team, m, a) for m in methods),
             str(team.repair.index(a) + 1) if a in team.repair else ("-" if a == NOBODY else "")]
            for a in agents]
    return columns, rows


def print_team(team: TeamVerdict, con: Console) -> None:
    """The team table, whole at the console's width, else one block per method (never a cut cell)."""
    columns, rows = team_rows(team)
    n = {m: t.traces for m, t in team.methods.items()}
    title = f"team verdict: share of the failures blamed on each agent ({', '.join(f'{m}: {k}' for m, k in n.items())} traces)"
    widths = [max([len(r[i]) for r in rows] + [len(c)]) for i, c in enumerate(columns)]
    if rows and sum(widths) + 3 * len(widths) + 1 <= con.width:
        table = Table(title=title, title_justify="left")
        for c in columns:
            table.add_column(c, no_wrap=True)
        for r in rows:
            table.add_row(*(Text(v) for v in r))
        con.print(table, markup=False, highlight=False)
    else:
        con.print(title + ", one method at a time:", markup=False, highlight=False, soft_wrap=True)
        for i, m in enumerate(team.methods, 1):
            con.print(m, markup=False, highlight=False, soft_wrap=True)
            for r in rows:
                if r[i] != "-":
                    con.print(f"  {r[0]}: {r[i]}", markup=False, highlight=False, soft_wrap=True)
    if team.repair:
        con.print(f"repair first ({team.primary}): {', '.join(team.repair)}", markup=False, highlight=False,
                  soft_wrap=True)
    a = team.agreement
    if a is not None:
        n = a.agree + a.disagree
        con.print(f"confidence: {a.method} and {a.partner} agree on {a.agree} of {n} blamed trace(s) "
                  f"(what agreement was measured to mean: docs/confidence.md; each trace's signal in verdicts.jsonl)",
                  markup=False, highlight=False, soft_wrap=True)
        said = a.meaning.get(True) or a.meaning.get(False)  # each sentence gives both sides
        if said:
            con.print(f"  measured: {said}", markup=False, highlight=False, soft_wrap=True)
    if team.trajectories:
        con.print(f"most common trajectories ({team.primary}):", markup=False, highlight=False)
        for t in team.trajectories:
            con.print(f"  {' -> '.join(t.agents)}: {t.traces} trace(s)", markup=False, highlight=False, soft_wrap=True)


def print_skipped(traces: list[TraceVerdict], warnings: list[str], out: Path, con: Console) -> None:
    """One line per kind of skipped trace (its count and the first's reason), the traces blamed on
    the whole answer, and the warnings about the losses files (the first few, then a count)."""
    for status in ("succeeded", "malformed", "unblamed"):
        these = [t for t in traces if t.status == status]
        if these and status == "succeeded":
            con.print(f"succeeded: {len(these)} skipped ({WHY[status]})", markup=False, highlight=False)
        elif these:
            first = these[0]
            more = f"; {len(these) - 1} more in {out / 'verdicts.jsonl'}" if len(these) > 1 else ""
            con.print(f"{status}: {len(these)} skipped ({WHY[status]}; first {first.trace}: {first.reason}{more})",
                      markup=False, highlight=False, soft_wrap=True)
    whole = [t for t in traces if t.status == "blamed" and t.note]
    if whole:
        con.print(f"noted: {len(whole)} blamed trace(s) with a note (first {whole[0].trace}: {whole[0].note})",
                  markup=False, highlight=False, soft_wrap=True)
    for w in warnings[:SHOWN_WARNINGS]:
        con.print(f"warning: {w}", markup=False, highlight=False, soft_wrap=True)
    if len(warnings) > SHOWN_WARNINGS:
        con.print(f"warning: {len(warnings) - SHOWN_WARNINGS} more in {out / 'blame.json'}", markup=False,
                  highlight=False)


def run_set(source: Path, losses: Any, expected: Any, loss: str | None, wrong: str | None,
            names: list[str], scorer: Any, judge: Any, out: Path, resume: bool, overwrite: bool, seed: int,
            top_k: int, con: Console) -> None:
    """Blame the set, print what it found, write the report; exit non-zero only when nothing was blamed."""
    from agentgrad.runs.blame_set import blame_set
    from agentgrad.report.html import write_report

    with con.status("blaming the set") as status:
        def progress(v: TraceVerdict, counts: dict[str, int]) -> None:
            done = ", ".join(f"{k} {c}" for k, c in counts.items() if c)
            status.update(f"blaming the set: {done} (last: {v.trace})")

        res = blame_set(source, losses=losses, expected=expected, methods=names, scorer=scorer, out=out,
                        resume=resume, loss=loss, wrong=wrong, seed=seed, top_k=top_k, judge=judge,
                        overwrite=overwrite, progress=progress)
    c = res.team.counts
    con.print(f"{len(res.traces)} trace(s) from {source}: {c['blamed']} blamed, {c['succeeded']} succeeded, "
              f"{c['malformed']} malformed, {c['unblamed']} without a loss"
              + (f", {c['error']} failed on a bug of agentgrad's (--debug: its traceback)" if c.get("error") else "")
              + (f" ({res.resumed} finished before, not redone)" if res.resumed else ""),
              markup=False, highlight=False, soft_wrap=True)
    if c["blamed"]:
        print_team(res.team, con)
    print_skipped(res.traces, res.warnings, out, con)
    rep = write_report(out, overwrite=True)  # out is this command's own run directory (checked above)
    con.print(f"wrote verdicts.jsonl, blame.json and traces.jsonl in {out}; report: {rep.path}", markup=False,
              highlight=False, soft_wrap=True)
    if not c["blamed"] and (c["malformed"] or c["unblamed"] or not res.traces):
        first = next((t for t in res.traces if t.status != "succeeded"), None)
        raise RunError("nothing could be blamed" + (f": {first.trace}: {first.reason}" if first else ": no trace"))
    if not c["blamed"]:
        con.print("every trace gives its expected answer: nothing to blame", markup=False, highlight=False)
