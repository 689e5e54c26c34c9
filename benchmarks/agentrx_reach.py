"""How far back does a Magentic-One log's final output reach? For each log of AgentRx's Magentic-One half,
the calls upstream of its last call along the import's edges (a broadcast: every earlier message) and
along its preferred edges (``--edges addressed``: address, reply and quoted edges,
:func:`agentgrad.importers.groupchat.prefer_addressed`), and how many edges each graph keeps. The graph
alone: no model, no label read but the run's half.

    python benchmarks/agentrx_reach.py --out records/agentrx/reach.json
    python benchmarks/agentrx_reach.py --table records/agentrx/reach.json [--logs]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def measure() -> dict:
    from agentgrad.benchmarks.agentrx.data import load_runs
    from agentgrad.importers.groupchat import prefer_addressed, preferred_edges
    from agentgrad.runs.blame import reach

    runs, broken = load_runs(("magentic",))
    logs = []
    for r in sorted(runs, key=lambda r: r.trace.id):
        tr = r.trace
        ad = prefer_addressed(tr)
        kinds = {k: sum(bool(e[k]) for e in preferred_edges(tr).values()) for k in ("address", "reply", "quoted")}
        logs.append({"run": tr.id, "half": r.half, "calls": len(tr.calls()), "reach_all": reach(tr)[0],
                     "reach_addressed": reach(ad)[0], "edges_all": sum(len(c.parents) for c in tr.calls()),
                     "edges_addressed": sum(len(c.parents) for c in ad.calls()), "calls_with": kinds})
    return {"subset": "magentic", "logs": logs, "broken": broken}


def _summary(rows: list[dict], name: str) -> str:
    share = [r["reach_addressed"] / r["calls"] for r in rows]
    return (f"{name}: {len(rows)} logs, {sum(r['calls'] for r in rows):,} calls; the final output reaches back to every call "
            f"along every edge in {sum(r['reach_all'] == r['calls'] for r in rows)} of {len(rows)}; along the addressed "
            f"edges to a median share of {statistics.median(share):.2f} of the calls (least {min(share):.2f}), all of them "
            f"in {sum(r['reach_addressed'] == r['calls'] for r in rows)}; edges kept {sum(r['edges_addressed'] for r in rows):,} "
            f"of {sum(r['edges_all'] for r in rows):,}")


def table(path: Path, per_log: bool) -> None:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        logs = d["logs"]
        [(r["half"], r["calls"], r["reach_all"], r["reach_addressed"]) for r in logs]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"error: {path} is not a record of benchmarks/agentrx_reach.py ({e.__class__.__name__})")
    if not logs:
        sys.exit(f"error: {path} holds no log")
    print(_summary(logs, "all logs"))
    for h in ("A", "B"):
        rows = [r for r in logs if r["half"] == h]
        if rows:
            print(_summary(rows, f"half {h}"))
    if per_log:
        print("| log | half | calls | reached, every edge | reached, addressed | edges kept |")
        print("|---|---|---|---|---|---|")
        for r in logs:
            print(f"| {r['run'][:8]} | {r['half']} | {r['calls']} | {r['reach_all']} | {r['reach_addressed']} | "
                  f"{r['edges_addressed']:,} of {r['edges_all']:,} |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="write the record here (a new file)")
    p.add_argument("--table", type=Path, help="print the figures of this record and stop")
    p.add_argument("--logs", action="store_true", help="with --table: a row per log")
    a = p.parse_args(argv)
    if a.table:
        return table(a.table, a.logs)
    if a.out is None:
        p.error("give --out FILE (to measure) or --table FILE (to print)")
    if a.out.exists():
        p.error(f"--out {a.out} exists: choose a new file")
    from agentgrad.errors import ConfigError

    try:
        record = measure()
    except ConfigError as e:
        sys.exit(f"error: {e}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"written: {a.out}")


if __name__ == "__main__":
    main()
