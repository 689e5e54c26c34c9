"""How far a grid of ``agentgrad bench ablation`` has come, read without reading any result: the cases
screened and kept, the runs finished, the noise edits done, and each chunk's wall time.

A registered grid is read once, when it is complete (docs/ablation-factorial.md). Until then its
progress is what may be said of it: this script opens ``cases.jsonl`` for the screen's verdicts (kept
or not: the screen is part of the design, not a result), counts the lines of ``results.jsonl`` and
``noise.jsonl`` without parsing a gain, and prints ``chunks.jsonl``'s seconds.

    python benchmarks/grid_progress.py records/ablation-smollm2/factorial-long
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()] if path.exists() else []


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("grid", type=Path, help="the grid's --out folder (or its committed copy)")
    a = p.parse_args(argv)
    if not (a.grid / "cases.jsonl").exists() and not (a.grid / "chunks.jsonl").exists():
        raise SystemExit(f"error: {a.grid} holds no cases.jsonl or chunks.jsonl: not a grid folder of bench ablation")
    try:
        cases = [json.loads(ln) for ln in lines(a.grid / "cases.jsonl")]
        chunks = [json.loads(ln) for ln in lines(a.grid / "chunks.jsonl")]
    except ValueError as e:
        raise SystemExit(f"error: {a.grid}: a line that is not JSON ({e})")
    kept = [c for c in cases if c.get("kept")]
    methods = max((len(c.get("methods", [])) for c in chunks), default=0)
    seeds = max((int(c.get("seeds", 1)) for c in chunks), default=1)
    print(f"cases screened: {len(cases)}, kept: {len(kept)}")
    print(f"runs with results: {len(lines(a.grid / 'results.jsonl'))} of {len(kept) * methods * seeds} "
          f"({len(kept)} kept cases x {methods} cells x {seeds} seed(s))")
    print(f"noise edits done: {len(lines(a.grid / 'noise.jsonl'))}")
    total = 0.0
    for i, c in enumerate(chunks, 1):
        total += float(c.get("seconds") or 0)
        print(f"chunk line {i}: {c.get('seconds')} s wall, {c.get('runs')} runs, "
              f"{'stopped' if c.get('stopped') else 'finished'}; {total:.1f} s wall in all to here")
    print(f"chunk lines, in all: {sum(float(c.get('seconds') or 0) for c in chunks):.1f} s wall")


if __name__ == "__main__":
    main()
