"""Print an ablation folder's table (markdown) for a subset of its runs: some seeds, some systems.

    python benchmarks/ablation_table.py runs/abl47-llm4 --seeds 0
    python benchmarks/ablation_table.py runs/abl47-llm4 --seeds 0 --systems manager --pairs gbc-provenance,gbc-oracle
    python benchmarks/ablation_table.py runs/abl47w-llm --seeds 0 --case-list records/ablation-smollm2/abl47w-confirmatory-cases.txt
    python benchmarks/ablation_table.py records/ablation-smollm2/factorial-results.jsonl --pairs gbc/grad-gbc/string
    python benchmarks/ablation_table.py records/ablation-smollm2/abl47w-llm-results.jsonl \
        --cases records/ablation-smollm2/abl47w-cases.jsonl --noise records/ablation-smollm2/abl47w-noise.jsonl --seeds 0

The figures are the library's own (``load_records``, ``summarize`` and ``markdown_table``: what
``bench ablation`` writes to ``OUT/table.md``) over the records restricted to the chosen seeds and
systems (``--case-list FILE``: the cases named in FILE, one per line, ``#`` comments; a pre-registered
set; ``--blind`` withholds the verdict on blame against gain until such a set is complete), so that
arms run on different seeds can be compared on the runs they share. ``--pairs
A-B,...`` adds the paired difference of two arms on the (case, seed) runs both have
(``compare_arms``): its interval, bootstrap p, the smallest difference it could detect (``detectable``),
cases won / lost, and how many of those runs gave the same test answers.

Instead of a folder, one or more compact records files (``OUT/records.jsonl`` of a grid, or the
committed copies of its chunks; :mod:`agentgrad.benchmarks.ablation.records`) give the same figures
from their lines alone, one table per prompt set. A pair ``A-B`` of cell names splits at the ``-``
between two arm names (``gbc/grad-random/random_line``).

A folder's three files kept apart (the committed copies of ``results.jsonl``, ``cases.jsonl`` and
``noise.jsonl``): the results file with ``--cases FILE --noise FILE`` gives the figures the folder
gives, read as the folder is read (no run folder to rebuild by hand).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from agentgrad.benchmarks.ablation.grid import load_records
from agentgrad.benchmarks.ablation.records import read_records
from agentgrad.benchmarks.ablation.summary import (compare_arms, detectable, factorial_markdown, markdown_table,
                                                   summarize)
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


def _restrict(group: tuple[list, list, list], seeds: list[int] | None, systems: list[str] | None,
              names: list[str] | None) -> tuple[list, list, list]:
    """A records group restricted as :func:`load_records` restricts a folder."""
    case_rows, rows, noise = group
    if names is not None:
        unknown = sorted(set(names) - {r["case"] for r in case_rows})
        if unknown:
            raise AgentgradError(f"{unknown[0]!r} is not a case of these records ({len(unknown)} such names)")
    keep = lambda r: (not systems or r.get("system") in systems) and (names is None or r.get("case") in names)  # noqa: E731
    case_rows = [r for r in case_rows if keep(r)]
    rows = [r for r in rows if keep(r) and (seeds is None or r.get("seed") in seeds)]
    kept = {r["system"] for r in case_rows}
    return case_rows, rows, [r for r in noise if r.get("system") in kept]


def records_table(paths: list[Path], seeds: list[int] | None = None, systems: list[str] | None = None,
                  pairs: list[tuple[str, str]] = (), resamples: int = 2000, names: list[str] | None = None,
                  blind: bool = False) -> str:
    """:func:`table` of compact records files: one table per prompt set in them."""
    groups = read_records(paths)
    parts = []
    for prompts, group in sorted(groups.items()):
        parts.append(f"## Prompt set: {prompts}\n\n" + _table(*_restrict(group, seeds, systems, names), pairs=pairs,
                                                           resamples=resamples, blind=blind,
                                                           where=f"{prompts} prompts of the records"))
    return "\n".join(parts)


def table(out: Path, seeds: list[int] | None = None, systems: list[str] | None = None,
          pairs: list[tuple[str, str]] = (), resamples: int = 2000, names: list[str] | None = None,
          blind: bool = False) -> str:
    case_rows, rows, noise = load_records(out, seeds, systems, names)
    return _table(case_rows, rows, noise, pairs=pairs, resamples=resamples, blind=blind, where=str(out),
                  seeds=seeds, systems=systems, names=names)


def kept_table(results: Path, cases_file: Path, noise_file: Path, seeds: list[int] | None = None,
               systems: list[str] | None = None, pairs: list[tuple[str, str]] = (), resamples: int = 2000,
               names: list[str] | None = None, blind: bool = False) -> str:
    """:func:`table` of a folder whose ``results.jsonl``, ``cases.jsonl`` and ``noise.jsonl`` are kept
    as three files: they are read as that folder (short prompts, the folder's default)."""
    with tempfile.TemporaryDirectory(prefix="ablation-table-") as tmp:
        for src, name in ((results, "results.jsonl"), (cases_file, "cases.jsonl"), (noise_file, "noise.jsonl")):
            if not src.is_file():
                raise AgentgradError(f"{src}: no such file")
            shutil.copyfile(src, Path(tmp) / name)
        return table(Path(tmp), seeds, systems, pairs, resamples, names, blind).replace(tmp, str(results))


def _table(case_rows: list, rows: list, noise: list, *, pairs: list[tuple[str, str]] = (), resamples: int = 2000,
           blind: bool = False, where: str = "", seeds: list[int] | None = None, systems: list[str] | None = None,
           names: list[str] | None = None) -> str:
    if not rows:
        raise AgentgradError(f"no runs in {where} for seeds {seeds or 'all'}, systems {systems or 'all'}"
                             + (f" and the {len(names)} listed cases" if names is not None else ""))
    summary = summarize(case_rows, rows, noise, resamples)
    if blind:  # a pre-registered test is read once: its statistic is not printed before then
        summary.pop("verdict", None)
        summary.pop("verdict_precision", None)
    lines = [markdown_table(summary)]
    fact = factorial_markdown(case_rows, rows, resamples)  # only where the records hold the factorial's cells
    if fact:
        lines.append(fact)
    if blind:
        lines.append("(--blind: the verdict on blame accuracy and precision against test gain is withheld)\n")
    for a, b in pairs:
        v = compare_arms(case_rows, rows, a, b, resamples)
        least = detectable(v["ci95"])
        lines.append(f"- {a} - {b}: {v['diff']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}], p {v['p']:.3f}, "
                     f"smallest detectable {'-' if least is None else f'{least:.3f}'}, {v['wins']} cases won / "
                     f"{v['losses']} lost of {v['cases']}; same test answers on {v['same_answers']} runs"
                     if v["diff"] is not None else f"- {a} - {b}: no runs in common")
    return "\n".join(lines) + "\n"


def _pair(text: str) -> tuple[str, ...]:
    """``A-B`` split at its one ``-``; with several, at the one ``-`` between two arm or cell names
    (``gbc/grad-random/random_line``); anything else is not a pair (a tuple of another length)."""
    from agentgrad.benchmarks.ablation.bench import ARMS, CELLS

    if text.count("-") == 1:
        return tuple(text.split("-"))
    cuts = [(text[:i], text[i + 1:]) for i, c in enumerate(text) if c == "-"]
    known = [c for c in cuts if all(x in ARMS or x in CELLS for x in c)]
    return known[0] if len(known) == 1 else (text,)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, nargs="+", help="a benchmark folder, or records files (.jsonl)")
    p.add_argument("--seeds", help="comma-separated seeds (default: all)")
    p.add_argument("--systems", help="comma-separated systems (default: all)")
    p.add_argument("--pairs", default="", help="comma-separated A-B arm pairs")
    p.add_argument("--case-list", type=Path, help="a file of case names, one per line (# comments)")
    p.add_argument("--blind", action="store_true", help="withhold the verdict (blame vs gain): a pre-registered "
                                                       "test is read once, when its runs are complete")
    p.add_argument("--cases", type=Path, help="with --noise and one results file: a folder's files kept apart "
                                              "(its cases.jsonl; the results file is its results.jsonl)")
    p.add_argument("--noise", type=Path, help="with --cases: the folder's noise.jsonl")
    p.add_argument("--resamples", type=int, default=2000)
    a = p.parse_args(argv)
    try:
        seeds = [int(s) for s in a.seeds.split(",")] if a.seeds else None
    except ValueError:
        p.error(f"--seeds takes comma-separated numbers, got {a.seeds!r}")
    pairs = [_pair(x) for x in filter(None, a.pairs.split(","))]
    if any(len(x) != 2 for x in pairs) or a.resamples < 1:
        p.error("--pairs takes A-B,C-D and --resamples at least 1")
    try:
        names = read_case_list(a.case_list) if a.case_list else None
        systems = a.systems.split(",") if a.systems else None
        if a.cases or a.noise:
            if not (a.cases and a.noise) or len(a.out) != 1 or a.out[0].is_dir():
                p.error("--cases and --noise go together, with one results file (a folder's results.jsonl)")
            sys.stdout.write(kept_table(a.out[0], a.cases, a.noise, seeds, systems, pairs, a.resamples, names, a.blind))
        elif len(a.out) == 1 and a.out[0].is_dir():
            sys.stdout.write(table(a.out[0], seeds, systems, pairs, a.resamples, names, a.blind))
        elif any(o.is_dir() for o in a.out):
            p.error("give one benchmark folder, or records files (not both, not two folders)")
        else:
            sys.stdout.write(records_table(a.out, seeds, systems, pairs, a.resamples, names, a.blind))
    except AgentgradError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
