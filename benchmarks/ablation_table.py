"""Print an ablation folder's table (markdown) for a subset of its runs: some seeds, some systems.

    python benchmarks/ablation_table.py runs/abl47-llm4 --seeds 0
    python benchmarks/ablation_table.py runs/abl47-llm4 --seeds 0 --systems manager --pairs gbc-provenance,gbc-oracle

The figures are the library's own (:func:`agentgrad.benchmarks.ablation.summary.summarize` and
``markdown_table``, what ``bench ablation`` writes to ``OUT/table.md``) over the records
(``cases.jsonl``, ``results.jsonl``, ``noise.jsonl``) restricted to the chosen seeds and systems, so
that arms run on different seeds can be compared on the runs they share. ``--pairs A-B,...`` adds
the paired difference of two arms on the (case, seed) runs both have, with its interval, bootstrap p
and cases won / lost, and how many of those runs gave the same test answers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentgrad.benchmarks.ablation.cases import cases
from agentgrad.benchmarks.ablation.memo import read_rows
from agentgrad.benchmarks.ablation.summary import _by_arm, compare, markdown_table, summarize


def table(out: Path, seeds: list[int] | None = None, systems: list[str] | None = None,
          pairs: list[tuple[str, str]] = (), resamples: int = 2000) -> str:
    if not (out / "results.jsonl").exists():
        raise SystemExit(f"error: {out} is not a `bench ablation` folder (no results.jsonl)")
    known = {c.name for c in cases()}
    case_rows = [r for r in read_rows(out / "cases.jsonl") if r["case"] in known
                 and (not systems or r["system"] in systems)]
    names = {r["case"] for r in case_rows}
    rows = [r for r in read_rows(out / "results.jsonl") if r["case"] in names and (seeds is None or r["seed"] in seeds)]
    noise = [r for r in read_rows(out / "noise.jsonl") if not systems or r["system"] in systems]
    if not rows:
        raise SystemExit(f"error: no runs in {out} for seeds {seeds} and systems {systems}")
    lines = [markdown_table(summarize(case_rows, rows, noise, resamples))]
    kept = {c["case"]: c for c in case_rows if c.get("kept") and c.get("test_bugged_q")}
    by_arm = _by_arm(rows, kept)
    for a, b in pairs:
        if a not in by_arm or b not in by_arm:
            raise SystemExit(f"error: --pairs {a}-{b}: no runs of {a if a not in by_arm else b} in this subset")
        v = compare(by_arm[a], by_arm[b], resamples)
        same = sum(by_arm[a][c][s]["test_q"] == by_arm[b][c][s]["test_q"]
                   for c in by_arm[a] if c in by_arm[b] for s in by_arm[a][c] if s in by_arm[b][c])
        lines.append(f"- {a} - {b}: {v['diff']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}], p {v['p']:.3f}, "
                     f"{v['wins']} cases won / {v['losses']} lost of {v['cases']}; same test answers on {same} runs"
                     if v["diff"] is not None else f"- {a} - {b}: no runs in common")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--seeds", help="comma-separated seeds (default: all)")
    p.add_argument("--systems", help="comma-separated systems (default: all)")
    p.add_argument("--pairs", default="", help="comma-separated A-B arm pairs")
    p.add_argument("--resamples", type=int, default=2000)
    a = p.parse_args(argv)
    try:
        seeds = [int(s) for s in a.seeds.split(",")] if a.seeds else None
    except ValueError:
        raise SystemExit(f"error: --seeds takes comma-separated numbers, got {a.seeds!r}") from None
    pairs = []
    for x in filter(None, a.pairs.split(",")):
        if x.count("-") != 1:
            raise SystemExit(f"error: --pairs takes A-B, got {x!r}")
        pairs.append(tuple(x.split("-")))
    sys.stdout.write(table(a.out, seeds, a.systems.split(",") if a.systems else None, pairs, a.resamples))


if __name__ == "__main__":
    main()
