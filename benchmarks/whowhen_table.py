"""Print the Who&When table (markdown) from a ``bench whowhen`` folder's per-log records.

    python benchmarks/whowhen_table.py benchmarks/whowhen-smollm2/algorithm

The figures are the library's own summary of the records (``summarize_whowhen``: agent and step
accuracy, ties at the top earning 1/ties, 95% Wilson intervals); beside them two baselines read from
the labels alone: always the first step, and where the labelled step and each method's pick lie as
a share of the log's length (median).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from agentgrad.benchmarks.planted.bench import wilson
from agentgrad.benchmarks.whowhen.bench import summarize_whowhen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path, help="a bench whowhen --out folder (logs/*.json)")
    a = ap.parse_args()
    recs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((a.folder / "logs").glob("*.json"))]
    scored = [r for r in recs if not r.get("excluded")]
    if not scored:
        raise SystemExit(f"no scored log in {a.folder}")
    methods = list(scored[0]["methods"])
    m = summarize_whowhen(recs, methods)["groups"]["all"]
    n = m["n"]
    print(f"{n} logs scored, {m['excluded']} excluded (longer than the scorer's context); "
          f"mean wall time per log, every method together: {m['seconds_per_log']:.0f} s\n")
    print("| method | agent | step | step within 5 | pick's place in the log (median share) |")
    print("|---|---|---|---|---|")
    for meth in methods:
        cell = m["methods"][meth]
        places = [r["methods"][meth]["top"]["node"] / r["steps"] for r in scored if r["methods"][meth]["top"]]
        row = [f"`{meth}`"] + [f"{cell[k]['value']:.2f} [{cell[k]['ci95'][0]:.2f}, {cell[k]['ci95'][1]:.2f}]"
                               for k in ("agent", "step")]
        row += [f"{cell['step_within']['5']:.2f}", f"{statistics.median(places):.2f}" if places else "-"]
        print("| " + " | ".join(row) + " |")
    first = sum(r["truth"]["step"] == 0 for r in scored)
    lo, hi = wilson(first, n)
    print(f"| chance (uniform over the log's steps) | {m['chance']['agent']:.2f} | {m['chance']['step']:.2f} | | |")
    print(f"| the first step, always (from the labels) | | {first / n:.2f} [{lo:.2f}, {hi:.2f}] | | |")
    print(f"\nlabelled step's place in the log (median share): "
          f"{statistics.median(r['truth']['node'] / r['steps'] for r in scored):.2f}")


if __name__ == "__main__":
    main()
