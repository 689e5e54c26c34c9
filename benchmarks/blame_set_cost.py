"""How long blaming a set of failed traces takes (target: 1,000 traces, model-free methods, under 30 s on 2 cores).

The set is ``agentgrad.testing.chatset``'s: N chat traces in one JSONL file, three in four failed
(a planted fault in the researcher, its tool or the planner), with their expected answers. Timed:
:func:`agentgrad.runs.blame_set.blame_set` into a fresh run directory (import, losses from the
expected answers, every method per trace, ``verdicts.jsonl`` line by line, the blamed traces, the
team verdict, ``blame.json``), then the report (the committed records timed the team verdict's
2,000-resample bootstrap of then; its Wilson intervals cost less); the median of
``--repeat`` runs, per trace too. With ``--scorer smollm2`` (and the default method in
``--methods``) it is the per-trace cost of the gradient methods that docs/blame.md states.

    python benchmarks/blame_set_cost.py --traces 1000
    python benchmarks/blame_set_cost.py --traces 20 --methods gbc:max_l1:targeted:blend,provenance --scorer smollm2

``--json FILE`` writes what it printed (every run's seconds, the counts, the machine's cores and load
average before the run), the record docs/blame-set.md's cost table is printed from with ``--table FILE``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=int, default=1000)
    ap.add_argument("--methods", default="provenance,last", help="comma-separated blame methods")
    ap.add_argument("--scorer", default=None, help="a scorer for the gradient methods (smollm2, a folder)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path, help="write the figures printed to this file")
    ap.add_argument("--table", type=Path, nargs="+", help="print the cost table's rows from these --json files and stop")
    args = ap.parse_args()
    if args.table:
        for path in args.table:
            print(row(read(path)))
        return
    load = os.getloadavg()[0]
    from agentgrad.runs.blame_set import blame_set
    from agentgrad.report.html import write_report
    from agentgrad.testing.chatset import write_set

    sc = None
    if args.scorer:
        from agentgrad.api import load_scorer

        t0 = time.perf_counter()
        sc = load_scorer(args.scorer)
        loaded = time.perf_counter() - t0
        print(f"scorer {args.scorer} loaded in {loaded:.1f} s (not counted below)")
    methods = [m for m in args.methods.split(",") if m]
    blames, reports = [], []
    with tempfile.TemporaryDirectory() as d:
        src, exp = write_set(Path(d), args.traces)
        for r in range(args.repeat):
            out = Path(d) / f"R{r}"
            t0 = time.perf_counter()
            res = blame_set(src, expected=exp, methods=methods, scorer=sc, out=out)
            blames.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            rep = write_report(out)
            reports.append(time.perf_counter() - t0)
    b, rp = statistics.median(blames), statistics.median(reports)
    c = res.team.counts
    top = {m: f"{t.shares[0].agent} {t.shares[0].share:.2f} [{t.shares[0].low:.2f}, {t.shares[0].high:.2f}]"
           for m, t in res.team.methods.items() if t.shares}
    print(f"{args.traces:,} traces ({c['blamed']} blamed, {c['succeeded']} succeeded, {c['malformed']} malformed), "
          f"methods {', '.join(methods)}: blame_set {b:.2f} s ({1000 * b / max(args.traces, 1):.1f} ms a trace), "
          f"report {rp:.2f} s ({rep.bytes / 1e6:.1f} MB); median of {args.repeat}: "
          f"{', '.join(f'{t:.2f}' for t in blames)}")
    print("largest share per method: " + "; ".join(f"{m}: {v}" for m, v in top.items()))
    if args.json:
        rec = {"traces": args.traces, "methods": methods, "scorer": args.scorer, "counts": c, "blame_seconds": blames,
               "report_seconds": reports, "scorer_load_seconds": round(loaded, 3) if sc is not None else None,
               "cores": os.cpu_count(), "load_average_before": round(load, 2)}
        args.json.write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
        print(row(rec))


def read(path: Path) -> dict:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        if not {"traces", "methods", "counts", "blame_seconds", "report_seconds"} <= set(rec):
            raise ValueError
    except (OSError, UnicodeDecodeError, ValueError):
        sys.exit(f"blame_set_cost: {path} is not a record this script wrote with --json")
    return rec


def row(rec: dict) -> str:
    """One row of docs/blame-set.md's cost table from a record."""
    b, n, k = statistics.median(rec["blame_seconds"]), rec["traces"], rec["counts"]["blamed"]
    return (f"| {', '.join(rec['methods'])}{' (scorer ' + rec['scorer'] + ')' if rec.get('scorer') else ''} "
            f"| {n:,} ({k} blamed) | {b:.2f} s for the set ({1000 * b / n:.1f} ms a trace, "
            f"{1000 * b / max(k, 1):.1f} ms a blamed trace), the report {statistics.median(rec['report_seconds']):.2f} s |")


if __name__ == "__main__":
    main()
