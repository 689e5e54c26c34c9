"""The AgentRx tables from committed records: each method's agent- and step-level accuracy on both
halves, and on the report half (B) its paired difference from the best prior of half A (docs/agentrx.md).

    python benchmarks/agentrx_table.py records/agentrx/model-free/records.jsonl [MORE.jsonl ...]

Several files are read as one set of records (a later line for the same run and loss replaces an
earlier one's methods it names), so a scorer's run can be added beside the model-free one.
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records", nargs="+", type=Path, help="records.jsonl of bench agentrx")
    a = ap.parse_args(argv)
    from agentgrad.benchmarks.agentrx.bench import markdown, summary

    print(markdown(summary(read(a.records))), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
