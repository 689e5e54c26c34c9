"""Attribution files: per call node, the scored token ids, token ranges, weights and kept edges."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from agentgrad.attribution.graph import AttributionGraph
from agentgrad.attribution.scorer import NodeAttribution, Scorer
from agentgrad.core.trace import Node, Trace, write_json_atomic
from agentgrad.errors import TraceError

SCHEMA = "agentgrad.attribution"
SCHEMA_VERSION = 1


def is_surrogate(node: Node, scorer: Scorer) -> bool:
    """Whether the scorer is another model than the one that generated ``node``."""
    gen = node.model
    if gen.get("backend") != "hf" or not gen.get("path"):
        return True
    a, b = str(gen["path"]), str(scorer.path)
    if os.path.exists(a) and os.path.exists(b):
        return Path(a).resolve() != Path(b).resolve()
    return a != b


def attribution_record(
    trace: Trace,
    results: list[NodeAttribution],
    graph: AttributionGraph,
    scorer: Scorer,
    method: str,
    top_k: int,
    seed: int,
    trace_path: str = "",
    weight: str | None = None,
) -> dict[str, Any]:
    """The JSON document for one attributed trace.

    ``method`` is the blame method recorded (any name of :mod:`agentgrad.blame.methods`); the kept
    edges are the top-k of every call by edge rule ``weight`` (default: ``method``, which must then
    be an edge rule: one of the four weights, ``random`` or ``all``).
    """
    weight = weight or method
    kept = graph.prune(top_k, weight, seed)
    nodes = []
    for res in results:
        node = trace.nodes[res.node_id]
        nodes.append({**res.to_dict(), "generator": node.model, "surrogate": is_surrogate(node, scorer)})
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "trace": trace_path,
        "trace_id": trace.id,
        "scorer": scorer.describe(),
        "method": method,
        "weight": weight,
        "top_k": top_k,
        "seed": seed,
        "nodes": nodes,
        "graph": graph.to_dict(),
        "kept_edges": [e.to_dict() for e in kept.edges],
        "cache_stats": dict(scorer.cache_stats),
    }


def attribute_trace_file(
    scorer: Scorer,
    trace_path: Path,
    out: Path,
    method: str,
    top_k: int = 1,
    seed: int = 0,
    on_node: Callable[[NodeAttribution], None] | None = None,
    weight: str | None = None,
) -> dict[str, Any]:
    trace = Trace.load(trace_path)
    results, graph = scorer.attribute(trace, on_node)
    record = attribution_record(trace, results, graph, scorer, method, top_k, seed, str(trace_path), weight)
    write_json_atomic(out, record)
    return record


def attribute_trace_files(
    scorer: Scorer,
    files: list[Path],
    outs: list[Path],
    method: str,
    top_k: int = 1,
    seed: int = 0,
    on_node: Callable[[NodeAttribution], None] | None = None,
    chunk: int = 64,
    weight: str | None = None,
) -> None:
    """:func:`attribute_trace_file` for each (trace, out); with the scorer's ``batch_tokens`` the
    calls of up to ``chunk`` traces at a time are scored in padded batches across traces (same results)."""
    batch_tokens = scorer.batch_tokens
    if batch_tokens <= 0:
        for f, o in zip(files, outs):
            attribute_trace_file(scorer, f, o, method, top_k, seed, on_node, weight)
        return
    from agentgrad.attribution.scorer import build_graph

    for i in range(0, len(files), chunk):
        traces = [Trace.load(f) for f in files[i : i + chunk]]
        items = [(tr, n) for tr in traces for n in tr.calls()]
        results = scorer.attribute_batch(items, batch_tokens)
        at = 0
        for tr, f, o in zip(traces, files[i : i + chunk], outs[i : i + chunk]):
            mine = results[at : at + len(tr.calls())]
            at += len(mine)
            for res in mine:
                if on_node:
                    on_node(res)
            write_json_atomic(o, attribution_record(tr, mine, build_graph(tr, mine), scorer, method, top_k, seed, str(f),
                                                       weight))


def trace_files(target: Path) -> list[Path]:
    """The traces of a run directory (``traces/*.json``), or the one trace file given."""
    if target.is_dir():
        files = sorted((target / "traces").glob("*.json"))
        if not files:
            raise TraceError(f"{target} holds no traces/*.json; is it a run directory?")
        return files
    if not target.exists():
        raise TraceError(f"{target} does not exist (give a trace file or a run directory)")
    return [target]
