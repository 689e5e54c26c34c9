"""Which calls of AgentRx's logs are longer than the scorer's context once read through a window: the
calls a gradient walk can read no gradient at (``on_too_long='skip'``), counted without scoring anything.

    python benchmarks/agentrx_lengths.py --subset magentic --scorer smollm2 --window 4096 \
        --out records/agentrx/smollm2-magentic/lengths.json
    python benchmarks/agentrx_lengths.py --table records/agentrx/smollm2-magentic/lengths.json

Only the scorer's tokenizer runs (its weights load, no pass). A walk meets a subset of these calls (the
ones on its way back from the loss), so the count bounds the calls skipped by a run of the bench; runs
made since the bench kept it (its records' ``skipped``) say exactly which.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def measure(subset: str, scorer: str, window: int | None) -> dict:
    from agentgrad.attribution.factory import make_scorer
    from agentgrad.attribution.render import render_call, window_trace
    from agentgrad.benchmarks.agentrx.data import load_runs

    t0 = time.perf_counter()
    runs, _ = load_runs((subset,))
    sc = make_scorer(scorer, on_too_long="skip")
    rows = []
    for run in runs:
        trace = window_trace(sc.tokenizer, run.trace, window) if window else run.trace
        lengths = {n.id: len(render_call(sc.tokenizer, n).input_ids) for n in trace.calls()}
        rows.append({"run": run.trace.id, "half": run.half, "calls": len(lengths),
                     "over": sorted(i for i, k in lengths.items() if k > sc.max_context),
                     "longest": max(lengths.values(), default=0)})
    return {"subset": subset, "scorer": sc.describe()["path"], "max_context": sc.max_context, "window": window,
            "seconds": round(time.perf_counter() - t0, 1), "runs": rows}


def load(path: Path) -> dict:
    """A record this script wrote, or exit with one line that says what is wrong."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        sys.exit(f"agentrx_lengths: cannot read {path} as JSON ({e.__class__.__name__})")
    rows = rec.get("runs") if isinstance(rec, dict) else None
    keys = ("subset", "scorer", "window", "max_context")
    if not isinstance(rows, list) or any(k not in rec for k in keys) or not all(
            isinstance(r, dict) and isinstance(r.get("calls"), int) and isinstance(r.get("over"), list)
            and r.get("half") in ("A", "B") for r in rows):
        sys.exit(f"agentrx_lengths: {path} is not a record of this script (made with --out)")
    return rec


def table(rec: dict) -> str:
    def line(rows: list[dict], label: str) -> str:
        calls = sum(r["calls"] for r in rows)
        over = sum(len(r["over"]) for r in rows)
        logs = sum(bool(r["over"]) for r in rows)
        return (f"{label}: {over} of {calls:,} calls longer than the context ({rec['max_context']:,} tokens) "
                f"after the window, in {logs} of {len(rows)} logs")

    rows = rec["runs"]
    out = [f"{rec['subset']}, scorer {rec['scorer']}, window {rec['window']}:", line(rows, "all logs")]
    out += [line([r for r in rows if r["half"] == h], f"half {h}") for h in ("A", "B")]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subset", default="magentic", choices=("magentic", "tau"))
    ap.add_argument("--scorer", default="smollm2")
    ap.add_argument("--window", type=int, default=4096, help="0: every call whole")
    ap.add_argument("--out", type=Path, help="write the record here")
    ap.add_argument("--table", type=Path, help="print a written record")
    a = ap.parse_args(argv)
    if a.table:
        print(table(load(a.table)))
        return
    if a.window < 0:
        sys.exit("agentrx_lengths: --window takes a number of tokens, or 0 for every call whole")
    if a.out and a.out.exists():
        sys.exit(f"agentrx_lengths: {a.out} exists; give a new file")
    rec = measure(a.subset, a.scorer, a.window or None)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
    print(table(rec))


if __name__ == "__main__":
    main()
