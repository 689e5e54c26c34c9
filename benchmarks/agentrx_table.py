"""The AgentRx tables from committed records: each method's agent- and step-level accuracy on both
halves, and on the report half (B) its paired difference from the best prior of half A (docs/agentrx.md).

    python benchmarks/agentrx_table.py records/agentrx/model-free/records.jsonl [MORE.jsonl ...]

Several files are read as one set of records (a later line for the same run and loss replaces an
earlier one's methods it names), so a scorer's run can be added beside the model-free one.

    python benchmarks/agentrx_table.py BASE.jsonl --compare OTHER.jsonl [--compare ...]

prints a measured approximation (bf16, a window) against the exact records of the same runs: paired
differences on half B and the ratio of CPU seconds (docs/agentrx.md).

    python benchmarks/agentrx_table.py RECORDS.jsonl ... --loss-pair located,last

prints, per method recorded under both loss settings, its accuracy under each per half and on half B
the paired difference (the first setting minus the second) at step and agent level.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def read(paths: list[Path]) -> list[dict]:
    recs: dict[tuple, dict] = {}
    for p in paths:
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            sys.exit(f"agentrx_table: cannot read {p} ({e.__class__.__name__}); give a bench agentrx records.jsonl")
        for n, line in enumerate(lines, 1):
            try:
                r = json.loads(line)
                key = (r["subset"], r["run"], r["loss"])
                methods = dict(r["methods"])
            except (ValueError, KeyError, TypeError):
                sys.exit(f"agentrx_table: {p}:{n} is not a bench agentrx record")
            if key in recs:
                recs[key]["methods"].update(methods)
            else:
                recs[key] = r
    if not recs:
        sys.exit("agentrx_table: no record in " + ", ".join(map(str, paths)))
    return list(recs.values())


def paired_levels(pairs: list[tuple[dict, dict]]) -> str:
    """The paired difference (first - second of each pair of method records) at step and agent level."""
    from agentgrad.benchmarks.stats import paired

    d = {lvl: paired([x[lvl] for x, _ in pairs], [y[lvl] for _, y in pairs]) for lvl in ("step", "agent")}
    return ", ".join(f"{lvl} {p['diff']:+.2f} [{p['ci95'][0]:+.2f}, {p['ci95'][1]:+.2f}] ({p['wins']} won, "
                     f"{p['losses']} lost, p {p['p']:.2f})" for lvl, p in d.items())


def compare(base: list[dict], other: list[dict], label: str) -> str:
    """Each method both files ran, ``other`` against ``base`` on the same runs and loss: per half its
    accuracy under both, and on half B the paired difference (other - base) at step and agent level, and
    the ratio of CPU seconds (a measured approximation against the exact path)."""
    by = {(r["subset"], r["run"], r["loss"]): r for r in base}
    pairs = [(by[k], r) for r in other if (k := (r["subset"], r["run"], r["loss"])) in by]
    if not pairs:
        sys.exit("agentrx_table: --compare: the two files share no run and loss")
    out = []
    for m in sorted({m for _, o in pairs for m in o["methods"]}):
        rows = [(b, o) for b, o in pairs if m in b["methods"] and m in o["methods"]]
        for h in ("A", "B"):
            hr = [(b["methods"][m], o["methods"][m]) for b, o in rows if b["half"] == h]
            if not hr:
                continue
            cpu_b, cpu_o = sum(x["cpu_seconds"] for x, _ in hr), sum(y["cpu_seconds"] for _, y in hr)
            line = (f"{label}, {m}, half {h}: {len(hr)} runs; step {sum(x['step'] for x, _ in hr) / len(hr):.2f} -> "
                    f"{sum(y['step'] for _, y in hr) / len(hr):.2f}, agent {sum(x['agent'] for x, _ in hr) / len(hr):.2f} -> "
                    f"{sum(y['agent'] for _, y in hr) / len(hr):.2f}; CPU s {cpu_b:.0f} -> {cpu_o:.0f} (ratio {cpu_o / cpu_b:.2f})")
            if h == "B":
                line += "; " + paired_levels([(y, x) for x, y in hr])
            out.append(line)
    return "\n".join(out)


def loss_pair(recs: list[dict], first: str, second: str) -> str:
    """Each method recorded under both loss settings on the same runs: per half its accuracy under
    each, and on half B the paired difference (first - second) at step and agent level."""
    by = {(r["subset"], r["run"]): r for r in recs if r["loss"] == second}
    pairs = [(r, by[k]) for r in recs if r["loss"] == first and (k := (r["subset"], r["run"])) in by]
    if not pairs:
        sys.exit(f"agentrx_table: --loss-pair: no run is recorded under both {first} and {second}")
    out = []
    for m in sorted({m for a, b in pairs for m in a["methods"] if m in b["methods"]}):
        for h in ("A", "B"):
            hr = [(a["methods"][m], b["methods"][m]) for a, b in pairs if a["half"] == h and m in a["methods"] and m in b["methods"]]
            if not hr:
                continue
            line = (f"{m}, {first} against {second}, half {h}: {len(hr)} runs; step {sum(x['step'] for x, _ in hr) / len(hr):.2f} "
                    f"vs {sum(y['step'] for _, y in hr) / len(hr):.2f}, agent {sum(x['agent'] for x, _ in hr) / len(hr):.2f} vs "
                    f"{sum(y['agent'] for _, y in hr) / len(hr):.2f}")
            if h == "B":
                line += "; " + paired_levels(hr)
            out.append(line)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records", nargs="+", type=Path, help="records.jsonl of bench agentrx")
    ap.add_argument("--compare", type=Path, action="append", default=[], metavar="FILE",
                    help="records of the same runs under another setting (bf16, a window): each against the "
                         "first records file, paired on the same runs (repeatable)")
    ap.add_argument("--loss-pair", metavar="FIRST,SECOND",
                    help="each method under two loss settings (located, last) on the same runs, paired on half B")
    a = ap.parse_args(argv)
    if a.loss_pair:
        first, _, second = a.loss_pair.partition(",")
        if not first or not second:
            sys.exit("agentrx_table: --loss-pair takes two loss settings joined by a comma: --loss-pair located,last")
        print(loss_pair(read(a.records), first, second))
        return 0
    if a.compare:
        base = read(a.records)
        for f in a.compare:
            print(compare(base, read([f]), f.parent.name))
        return 0
    from agentgrad.benchmarks.agentrx.bench import markdown, summary

    records = read(a.records)
    print(markdown(summary(records)), end="")
    cpu: dict[str, float] = {}
    for r in records:
        for m, v in r["methods"].items():
            if "cpu_seconds" in v:
                cpu[m] = cpu.get(m, 0.0) + v["cpu_seconds"]
    if any(cpu.values()):  # the scorer's methods: what they cost, summed over every run of the records
        print("\nCPU seconds, all runs: " + ", ".join(f"{m} {c:,.0f}" for m, c in cpu.items() if c > 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
