"""Published MultiWOZ systems as ``bench multiwoz score`` scores them, beside the standard evaluator's figures.

Scores every predictions file of a folder (the ``predictions/`` folder of Tomiinek/MultiWOZ_Evaluation,
copied anywhere; it is not part of this repository) and prints one markdown row per file: the
standard evaluator's published Inform and Success, ours, and the difference.

    python benchmarks/multiwoz_published.py PREDICTIONS_DIR [--data DIR]

Published figures: the results tables of budzianowski/multiwoz's README.md (commit fe0c8e6,
2025-01-14), to which the standard evaluator's README sends its readers ("Please see the original
MultiWOZ repository for the benchmark results"). Files without states are scored on the data
directory's gold states (MultiWOZ 2.1 labels), the published figures on MultiWOZ 2.2's: their rows
say so. Two rows are repeated with ``--domains``: the published DoTS figures are those of its file
without its ``active_domains`` (estimated from the states), the published SOLOIST figures those of
its file with the domains of its placeholders (the evaluator's ``add_slot_domains.py``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# file stem -> (system as the README names it, its table, published Inform, published Success)
PUBLISHED = {
    "augpt": ("AuGPT", "end-to-end", 76.6, 60.5), "damd": ("DAMD", "end-to-end", 57.9, 47.6),
    "dots": ("DoTS", "end-to-end", 80.4, 68.7), "galaxy-e2e": ("GALAXY", "end-to-end", 85.4, 75.7),
    "labes": ("LABES", "end-to-end", 68.5, 58.1), "mintl": ("MinTL", "end-to-end", 73.7, 65.4),
    "pptod": ("PPTOD", "end-to-end", 83.1, 72.7), "soloist": ("SOLOIST", "end-to-end", 82.3, 72.4),
    "ubar": ("UBAR", "end-to-end", 83.4, 70.3),
    "galaxy-policy": ("GALAXY", "policy", 92.8, 83.5), "hdno": ("HDNO", "policy", 93.3, 83.4),
    "hdsa": ("HDSA", "policy", 87.9, 79.4), "lava": ("LAVA", "policy", 95.9, 93.5),
    "marco": ("MarCo", "policy", 94.5, 87.2), "sfn": ("SFN", "policy", 93.4, 82.3),
    "uniconv": ("UniConv", "policy", 66.7, 58.7),
}
# rows repeated with the active domains the published figures were computed with
AGAIN = {"dots": "states", "soloist": "slots"}


def row(path: Path, data: str | None, domains: str) -> str:
    from agentgrad.benchmarks.multiwoz.score import score_file

    m, _ = score_file(path, data, domains)
    system, table, inform, success = PUBLISHED.get(path.stem, (path.stem, "-", None, None))
    states = "predicted" if m["states"] == "predicted" else "gold 2.1 (published: 2.2)"
    doms = {"file": "file's", "states": "estimated", "slots": "placeholders'"}[m["domains"]]
    ours = f"{m['inform']:.1f} / {m['success']:.1f}"
    if inform is None:
        pub = diff = "-"
    else:
        pub = f"{inform:.1f} / {success:.1f}"
        diff = f"{round(m['inform'], 1) - inform:+.1f} / {round(m['success'], 1) - success:+.1f}"
    option = f" `--domains {domains}`" if domains != "file" else ""
    return (f"| {system}{option} | {table} | `{path.name}` | {m['dialogues']} | {states} | {doms} | {pub} | {ours} "
            f"| {diff} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("predictions", type=Path, help="folder of predictions files (*.json)")
    ap.add_argument("--data", help="data directory (default: AGENTGRAD_DATA_DIR)")
    a = ap.parse_args()
    files = sorted(a.predictions.glob("*.json"))
    if not files:
        sys.exit(f"no *.json file in {a.predictions}")
    t0 = time.time()
    print("| system | table | file | dialogues | states | active domains | published Inform / Success "
          "| ours | ours - published |")
    print("|---|---|---|---:|---|---|---:|---:|---:|")
    for path in files:
        print(row(path, a.data, "file"), flush=True)
        if path.stem in AGAIN:
            print(row(path, a.data, AGAIN[path.stem]), flush=True)
    print(f"\n{len(files)} files in {time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
