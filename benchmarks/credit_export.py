"""Does ``agentgrad export credit`` stream? Peak memory of exporting 100 and 1,000 attributed episodes.

It runs the demo once (9 attributed episodes of the pipeline, with prompt weights), then builds runs
of N episodes from copies of those (each copy a new episode id: trace, attribution file and sample
event), and exports each with ``tracemalloc`` on. Constant memory means the peak does not grow with N.

    python benchmarks/credit_export.py [--sizes 100,1000] [--json FILE]

Prints one line per figure, e.g. ``peak memory exporting 1000 episodes: 0.41 MB (jsonl)``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path


def build(src: Path, dst: Path, n: int) -> None:
    (dst / "traces").mkdir(parents=True)
    (dst / "attribution").mkdir()
    traces = sorted((src / "attribution").glob("*.json"))
    scores = {}
    for line in (src / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "sample":
            scores[e["sample"]] = e["score"]
    events = []
    for i in range(n):
        f = traces[i % len(traces)]
        eid = f"{f.stem}-copy{i}"
        trace = json.loads((src / "traces" / f.name).read_text())
        trace["id"] = eid
        (dst / "traces" / f"{eid}.json").write_text(json.dumps(trace))
        att = json.loads(f.read_text())
        att["trace"], att["trace_id"] = f"traces/{eid}.json", eid
        att.setdefault("score", scores.get(f.stem, 0.0))
        (dst / "attribution" / f"{eid}.json").write_text(json.dumps(att))
        events.append(json.dumps({"event": "sample", "sample": eid, "score": scores.get(f.stem, 0.0)}))
    (dst / "events.jsonl").write_text("\n".join(events) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    from agentgrad.cli import main as cli
    from agentgrad.blame.credit import export_credit

    tmp = Path(tempfile.mkdtemp())
    figures = {}
    try:
        demo = tmp / "demo"
        if cli(["demo", "--out", str(demo)]) != 0:
            raise SystemExit("the demo failed")
        for n in (int(x) for x in a.sizes.split(",")):
            run = tmp / f"run{n}"
            build(demo, run, n)
            for fmt in ("jsonl", "trl"):
                out = tmp / f"credit-{n}-{fmt}.jsonl"
                tracemalloc.start()
                t0 = time.time()
                res = export_credit(run, out, fmt=fmt, quantity="loss")
                dt = time.time() - t0
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                figures[f"{fmt}_{n}"] = {"peak_mb": round(peak / 1e6, 3), "seconds": round(dt, 2), **res,
                                         "file_mb": round(out.stat().st_size / 1e6, 2)}
                print(f"peak memory exporting {n} episodes: {peak / 1e6:.2f} MB ({fmt}; {res['records']:,} records, "
                      f"{out.stat().st_size / 1e6:.1f} MB written, {dt:.1f} s)", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        a.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
