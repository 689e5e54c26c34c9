"""How long an OpenInference export of N spans takes to import (target: 10,000 spans <= 5 s on 2 cores).

Two shapes, both written by ``agentgrad.testing.oispans``: ``episodes`` (runs of the LangGraph
supervisor app of the tests, 12 spans each: many short traces) and ``long`` (one trace, an agent
loop whose every model call reads the last 20 replies and a tool result: the message-overlap search
over one long trace). The file is written once; the import (read, decode, trees, mapping, spans) is
timed ``--repeat`` times and the median printed.

    python benchmarks/import_spans.py --spans 10000 --shape episodes
    python benchmarks/import_spans.py --spans 10000 --shape long --json records/import-spans-cpu-2core/long.json
    python benchmarks/import_spans.py --table FILE [FILE ...]     # the lines again, from the --json records
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from agentgrad.importers import import_otel
from agentgrad.testing.oispans import long_export, synthetic_export


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=10_000)
    ap.add_argument("--shape", choices=("episodes", "long"), default="episodes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the figures to this file")
    ap.add_argument("--table", type=Path, nargs="+", help="print the lines of these --json records and stop")
    args = ap.parse_args()
    if args.table:
        for f in args.table:
            print(line(read_record(f)))
        return
    doc = synthetic_export(args.spans)[0] if args.shape == "episodes" else long_export(args.spans)
    n = len(doc["resourceSpans"][0]["scopeSpans"][0]["spans"])
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "spans.json"
        f.write_text(json.dumps(doc))
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            res = import_otel(f)
            times.append(time.perf_counter() - t0)
        size = f.stat().st_size
    rec = {"shape": args.shape, "spans": n, "mb": round(size / 1e6, 1), "traces": len(res.traces),
           "calls": sum(len(t.calls()) for t in res.traces),
           "edges": sum(len(nd.parents) for t in res.traces for nd in t.nodes), "broken": len(res.broken),
           "seconds": [round(t, 3) for t in times]}
    print(line(rec))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")


FIELDS = ("shape", "spans", "mb", "traces", "calls", "edges", "broken", "seconds")


def read_record(f: Path) -> dict:
    """A ``--json`` record of this script, or one line naming what is wrong with the file."""
    try:
        r = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: {f} is not a readable JSON record ({e})")
    if not isinstance(r, dict) or any(k not in r for k in FIELDS) or not r["seconds"]:
        raise SystemExit(f"error: {f} is not a record of benchmarks/import_spans.py (it needs {', '.join(FIELDS)})")
    return r


def line(r: dict) -> str:
    times = r["seconds"]
    return (f"{r['shape']}: {r['spans']:,} spans ({r['mb']:.1f} MB) -> {r['traces']:,} trace(s), {r['calls']:,} calls, "
            f"{r['edges']:,} edges, {r['broken']} broken; import {statistics.median(times):.2f} s "
            f"(median of {len(times)}: {', '.join(f'{t:.2f}' for t in times)})")


if __name__ == "__main__":
    main()
