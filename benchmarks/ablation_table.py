"""Print an ablation folder's table (markdown) for a subset of its runs: some seeds, some systems.

    python benchmarks/ablation_table.py runs/abl47-llm4 --seeds 0
    python benchmarks/ablation_table.py runs/abl47-llm4 --seeds 0 --systems manager --pairs gbc-provenance,gbc-oracle
    python benchmarks/ablation_table.py runs/abl47w-llm --seeds 0 --case-list benchmarks/ablation-smollm2/abl47w-confirmatory-cases.txt

The figures are the library's own (``load_records``, ``summarize`` and ``markdown_table``: what
``bench ablation`` writes to ``OUT/table.md``) over the records restricted to the chosen seeds and
systems (``--case-list FILE``: the cases named in FILE, one per line, ``#`` comments; a pre-registered
set; ``--blind`` withholds the verdict on blame against gain until such a set is complete), so that
arms run on different seeds can be compared on the runs they share. ``--pairs
A-B,...`` adds the paired difference of two arms on the (case, seed) runs both have
(``compare_arms``): its interval, bootstrap p, cases won / lost, and how many of those runs gave the
same test answers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentgrad.benchmarks.ablation.grid import load_records
from agentgrad.benchmarks.ablation.summary import compare_arms, markdown_table, summarize
from agentgrad.errors import AgentgradError


def read_case_list(path: Path) -> list[str]:
    """The case names of a list file: one per line; blank lines and ``#`` comments ignored."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise AgentgradError(f"--case-list {path}: cannot be read ({e.__class__.__name__})") from None
    names = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    if not any(names):
        raise AgentgradError(f"--case-list {path} names no case")
    return [n for n in names if n]


def table(out: Path, seeds: list[int] | None = None, systems: list[str] | None = None,
          pairs: list[tuple[str, str]] = (), resamples: int = 2000, names: list[str] | None = None,
          blind: bool = False) -> str:
    case_rows, rows, noise = load_records(out, seeds, systems, names)
    if not rows:
        raise AgentgradError(f"no runs in {out} for seeds {seeds or 'all'}, systems {systems or 'all'}"
                             + (f" and the {len(names)} listed cases" if names is not None else ""))
    summary = summarize(case_rows, rows, noise, resamples)
    if blind:  # a pre-registered test is read once: its statistic is not printed before then
        summary.pop("verdict", None)
        summary.pop("verdict_precision", None)
    lines = [markdown_table(summary)]
    if blind:
        lines.append("(--blind: the verdict on blame accuracy and precision against test gain is withheld)\n")
    for a, b in pairs:
        v = compare_arms(case_rows, rows, a, b, resamples)
        lines.append(f"- {a} - {b}: {v['diff']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}], p {v['p']:.3f}, "
                     f"{v['wins']} cases won / {v['losses']} lost of {v['cases']}; same test answers on "
                     f"{v['same_answers']} runs" if v["diff"] is not None else f"- {a} - {b}: no runs in common")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--seeds", help="comma-separated seeds (default: all)")
    p.add_argument("--systems", help="comma-separated systems (default: all)")
    p.add_argument("--pairs", default="", help="comma-separated A-B arm pairs")
    p.add_argument("--case-list", type=Path, help="a file of case names, one per line (# comments)")
    p.add_argument("--blind", action="store_true", help="withhold the verdict (blame vs gain): a pre-registered "
                                                       "test is read once, when its runs are complete")
    p.add_argument("--resamples", type=int, default=2000)
    a = p.parse_args(argv)
    try:
        seeds = [int(s) for s in a.seeds.split(",")] if a.seeds else None
    except ValueError:
        p.error(f"--seeds takes comma-separated numbers, got {a.seeds!r}")
    pairs = [tuple(x.split("-")) for x in filter(None, a.pairs.split(","))]
    if any(len(x) != 2 for x in pairs) or a.resamples < 1:
        p.error("--pairs takes A-B,C-D and --resamples at least 1")
    try:
        names = read_case_list(a.case_list) if a.case_list else None
        sys.stdout.write(table(a.out, seeds, a.systems.split(",") if a.systems else None, pairs, a.resamples, names,
                               a.blind))
    except AgentgradError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
