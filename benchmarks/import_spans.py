"""How long an OpenInference export of N spans takes to import (target: 10,000 spans <= 5 s on 2 cores).

Two shapes, both written by ``agentgrad.testing.oispans``: ``episodes`` (runs of the LangGraph
supervisor app of the tests, 12 spans each: many short traces) and ``long`` (one trace, an agent
loop whose every model call reads the last 20 replies and a tool result: the message-overlap search
over one long trace). The file is written once; the import (read, decode, trees, mapping, spans) is
timed ``--repeat`` times and the median printed.

    python benchmarks/import_spans.py --spans 10000 --shape episodes
    python benchmarks/import_spans.py --spans 10000 --shape long
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
    args = ap.parse_args()
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
    calls = sum(len(t.calls()) for t in res.traces)
    edges = sum(len(nd.parents) for t in res.traces for nd in t.nodes)
    print(f"{args.shape}: {n:,} spans ({size / 1e6:.1f} MB) -> {len(res.traces):,} trace(s), {calls:,} calls, "
          f"{edges:,} edges, {len(res.broken)} broken; import {statistics.median(times):.2f} s "
          f"(median of {args.repeat}: {', '.join(f'{t:.2f}' for t in times)})")


if __name__ == "__main__":
    main()
