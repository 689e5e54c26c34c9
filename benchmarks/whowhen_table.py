"""Print the Who&When table (markdown) from a ``bench whowhen`` folder's per-log records.

    python benchmarks/whowhen_table.py records/whowhen-smollm2/algorithm
    python benchmarks/whowhen_table.py records/whowhen-smollm2/algorithm-occlusion \
        --also records/whowhen-smollm2/algorithm --seconds

    python benchmarks/whowhen_table.py records/whowhen-smollm2/algorithm \
        --union records/whowhen-smollm2/algorithm-window

    python benchmarks/whowhen_table.py records/whowhen-smollm2/hand-judge-nogt \
        --setting records/whowhen-smollm2/hand-judge-structured

``--setting`` pairs every method with itself in another folder, run in the other ground-truth setting
on the same logs (a last table: both figures, the difference, logs won / lost, sign-test p).
``--union`` adds another folder's scored logs, in place of the same logs excluded here (the
windowed run of the logs too long for the first). ``--also`` adds the methods another folder
scored on the same logs, so that methods run apart are compared on one sample. ``--seconds`` adds
each method's own time per log. The seeded ``random`` arm, where it ran, stands beside analytic
chance (one draw of it on these logs: a method below it did worse than a random pick did here,
whatever chance says), and a line after the table names every method below it at each level. Judges
get a column counting the logs where they named nothing: no parsable verdict even after the re-ask,
or a log longer than the judge's context.

The figures are the library's own summary of the records (``summarize_whowhen``: agent and step
accuracy, ties at the top earning 1/ties, 95% Wilson intervals). Where the trivial priors ran
(``first``, ``most_active``, ``position:F``; a folder of them can join with ``--also``), a second
table pairs every method, log by log, with the best prior at each level and with ``provenance``
(difference, its bootstrap interval, logs won / lost, sign-test p). Beside them two baselines read from
the labels alone: always the first step, and where the labelled step and each method's pick lie as
a share of the log's length (median; 1.00 is the last step). Those two need ``last`` among the
methods: its pick is the log's last step, which places the steps among the trace's nodes (a
hand-crafted log's first entry, the human's question, is a node but not a step).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from agentgrad.benchmarks.stats import paired
from agentgrad.core.stats import wilson
from agentgrad.benchmarks.whowhen.bench import priors_table, summarize_whowhen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path, help="a bench whowhen --out folder (logs/*.json)")
    ap.add_argument("--also", type=Path, action="append", default=[],
                    help="another folder whose methods on the same logs join the table (repeatable)")
    ap.add_argument("--union", type=Path, action="append", default=[],
                    help="another folder whose scored logs join the table, replacing this folder's "
                         "excluded records of the same logs (repeatable)")
    ap.add_argument("--seconds", action="store_true", help="add each method's own wall time per log")
    ap.add_argument("--setting", type=Path, help="a folder of the same methods on the same logs in the other "
                                                 "ground-truth setting: each method paired with itself there")
    a = ap.parse_args()
    recs = read(a.folder)
    for other in a.union:
        theirs = scored_by_log(other)
        clash = sorted(r["log"] for r in recs if r["log"] in theirs and not r.get("excluded"))
        if clash:
            raise SystemExit(f"{other} scores logs already scored in {a.folder}: {', '.join(clash)}")
        recs = [theirs.pop(r["log"], r) for r in recs] + list(theirs.values())
    scored = [r for r in recs if not r.get("excluded")]
    if not scored:
        raise SystemExit(f"no scored log in {a.folder}")
    # the methods every scored log has (a resumed run with fewer methods leaves some only in earlier records)
    methods = [x for x in scored[0]["methods"] if all(x in r["methods"] for r in scored)]
    if partial := sorted({x for r in scored for x in r["methods"]} - set(methods)):
        print(f"left out, not on every log: {', '.join(partial)}\n")
    for other in a.also:
        theirs = scored_by_log(other)
        missing = sorted(r["log"] for r in scored if r["log"] not in theirs)
        if missing:
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise SystemExit(f"{other} has no scored record of {', '.join(missing[:5])}{more}: "
                             "--also needs the same logs")
        extra = [m for m in theirs[scored[0]["log"]]["methods"] if m not in methods]
        for r in scored:
            r["methods"].update({m: theirs[r["log"]]["methods"][m] for m in extra})
        methods += extra
    # the node of each log's first step: the steps are the last ``steps`` nodes before the loss
    first_node = {r["log"]: r["methods"]["last"]["top"]["node"] - r["steps"] + 1
                  for r in scored if "last" in r["methods"] and r["methods"]["last"]["top"]}

    def place(r: dict, node: int) -> float | None:
        return (node - first_node[r["log"]] + 1) / r["steps"] if r["log"] in first_node else None
    m = summarize_whowhen(recs, methods)["groups"]["all"]
    n = m["n"]
    took = f"{m['seconds_per_log']:.0f} s" if m["seconds_per_log"] is not None else "not recorded"
    print(f"{n} logs scored, {m['excluded']} excluded (longer than the scorer's context), "
          f"{m['windowed']} windowed (calls cut to the steps nearest them that fit); "
          f"mean wall time per log, every method together: {took}\n")
    cols = ["method", "agent", "step", "step within 5", "pick's place in the log (median share)"]
    cols += ["s per log (method alone)"] if a.seconds else []
    # a judge that gave no parsable verdict, or could not read the log, names nothing (counted as wrong)
    judged = any(m["methods"][x]["unparsed"] or m["methods"][x]["unread"] for x in methods)
    cols += ["no verdict: unparsable / unread"] if judged else []
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))

    def row_of(meth: str, label: str) -> str:
        cell = m["methods"][meth]
        places = [p for r in scored if r["methods"][meth]["top"]
                  for p in [place(r, r["methods"][meth]["top"]["node"])] if p is not None]
        row = [label] + [f"{cell[k]['value']:.2f} [{cell[k]['ci95'][0]:.2f}, {cell[k]['ci95'][1]:.2f}]"
                         for k in ("agent", "step")]
        row += [f"{cell['step_within']['5']:.2f}", f"{statistics.median(places):.2f}" if places else "-"]
        row += [f"{cell['seconds']:.0f}"] if a.seconds else []
        row += [f"{cell['unparsed']} / {cell['unread']}" if meth.startswith("judge") else ""] if judged else []
        return "| " + " | ".join(row) + " |"

    for meth in methods:
        if meth != "random":  # printed beside chance: one seeded draw of it
            print(row_of(meth, f"`{meth}`"))
    pad = " |" * (len(cols) - 3)
    print(f"| chance (uniform over the log's steps) | {m['chance']['agent']:.2f} | {m['chance']['step']:.2f} |{pad}")
    if "random" in methods:
        print(row_of("random", "`random` (seeded: one draw of chance, on these logs)"))
    known = [r for r in scored if r["log"] in first_node]
    if known:
        first = sum(r["truth"]["node"] == first_node[r["log"]] for r in known)
        lo, hi = wilson(first, len(known))
        print(f"| the first step, always (from the labels) | | {first / len(known):.2f} [{lo:.2f}, {hi:.2f}] |{pad}")
        print(f"\nlabelled step's place in the log (median share): "
              f"{statistics.median(place(r, r['truth']['node']) for r in known):.2f}")
    below_random(m["methods"], methods)
    paired_rows = priors_table(m["methods"], methods)
    if paired_rows is not None:
        cols, rows = paired_rows
        print("\npaired on the same logs: difference, logs won / lost, two-sided sign-test p "
              "(the best prior at each level chosen on these logs, which favours it)\n")
        print("| method | " + " | ".join(cols) + " |")
        print("|" + "---|" * (len(cols) + 1))
        for row in rows:
            print(f"| `{row[0]}` | " + " | ".join(row[1:]) + " |")
    if a.setting:
        settings_table(a.folder, a.setting, scored, methods)


def below_random(figures: dict, methods: list[str]) -> None:
    """One line after the table: the methods whose agent or step figure is below the seeded ``random``
    arm's on these logs (analytic chance is an expectation; the seeded arm is what a random pick got
    here), or that no ``random`` arm ran, so that only chance stands beside the methods."""
    if "random" not in methods:
        print("\nno seeded random arm ran on these logs: only analytic chance stands beside the methods")
        return
    rand = figures["random"]
    for level in ("agent", "step"):
        below = [f"`{x}` {figures[x][level]['value']:.2f}" for x in methods
                 if x != "random" and figures[x][level]["value"] < rand[level]["value"]]
        print(f"\nbelow the seeded `random` arm at {level} level ({rand[level]['value']:.2f}): "
              + (", ".join(below) if below else "none"))


def setting_of(folder: Path) -> str:
    """``with`` or ``without`` (ground truth), from the folder's ``bench.json``; ``?`` where it does not say."""
    try:
        gt = json.loads((folder / "bench.json").read_text(encoding="utf-8")).get("with_ground_truth")
    except (OSError, ValueError):
        gt = None
    return "?" if gt is None else ("with" if gt else "without")


def settings_table(folder: Path, other: Path, scored: list[dict], methods: list[str]) -> None:
    """Each method of ``scored`` paired, log by log, with the same method in ``other`` (the other setting)."""
    theirs = scored_by_log(other)
    logs = [r for r in scored if r["log"] in theirs]
    both = [m for m in methods if logs and all(m in theirs[r["log"]]["methods"] for r in logs)]
    if not both:
        raise SystemExit(f"{other} shares no method on the same logs with {folder}")
    here, there = setting_of(folder), setting_of(other)
    print(f"\neach method in the two settings, paired on the {len(logs)} logs both scored "
          f"({folder.name}: {here} ground truth; {other.name}: {there})\n")
    print(f"| method | agent, {here} | agent, {there} | difference, won / lost, p | step, {here} | step, {there} | "
          "difference, won / lost, p |")
    print("|---|---|---|---|---|---|---|")
    for m in both:
        row = [f"`{m}`"]
        for level in ("agent", "step"):
            a = [r["methods"][m][level] for r in logs]
            b = [theirs[r["log"]]["methods"][m][level] for r in logs]
            d = paired(a, b)
            row += [f"{sum(a) / len(a):.2f}", f"{sum(b) / len(b):.2f}",
                    f"{d['diff']:+.3f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}] {d['wins']}/{d['losses']} p={d['p']:.2g}"]
        print("| " + " | ".join(row) + " |")


def read(folder: Path) -> list[dict]:
    """The per-log records of a ``bench whowhen --out`` folder; a file that is not one stops with
    one line naming it."""
    recs = []
    for p in sorted((folder / "logs").glob("*.json")):
        try:
            r = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise SystemExit(f"{p}: not a readable bench whowhen record ({e.__class__.__name__})") from None
        if not isinstance(r, dict) or not isinstance(r.get("log"), str) or \
                not (r.get("excluded") or isinstance(r.get("methods"), dict)):
            raise SystemExit(f"{p}: not a bench whowhen record (no log id or methods)")
        recs.append(r)
    return recs


def scored_by_log(folder: Path) -> dict[str, dict]:
    """The scored (not excluded) records of a folder by log id; none stops with one line."""
    theirs = {r["log"]: r for r in read(folder) if not r.get("excluded")}
    if not theirs:
        raise SystemExit(f"no scored log in {folder}")
    return theirs


if __name__ == "__main__":
    main()
