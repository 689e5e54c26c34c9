"""Blame the app you already have: an exported trace file -> a ranked blame per method, and a run directory.

``agentgrad blame TRACE --loss "..."`` is :func:`blame_file` then :func:`write_blame` then the
report. The file is read by :func:`~agentgrad.importers.spans.import_file` (OpenInference or OTel
GenAI spans as OTLP JSON, chat JSONL, or an agentgrad trace); the verbal loss is attached to the
last call of the trace (the final answer) unless told otherwise, and the text it names as wrong
(``wrong``) is located in that call's output, so that the loss-targeted objective and the
string-provenance baseline have a span. Each method of the blame registry ranks the upstream nodes;
gradient methods share one scorer and one attribution of the trace.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agentgrad.api import load_scorer, verbal_loss
from agentgrad.blame.backward import VerbalLoss
from agentgrad.blame.methods import DEFAULT_METHOD, canonical, check_expected, edge_rule, needs_scorer
from agentgrad.blame.outcome import BlameOutcome, blame_episode
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError
from agentgrad.importers.spans import import_file


@dataclass
class TraceBlame:
    """What the methods say about one trace: one :class:`BlameOutcome` per method, and the attribution."""

    trace: Trace
    loss: VerbalLoss
    outcomes: dict[str, BlameOutcome]
    source: str = ""
    scorer: dict[str, Any] | None = None  # the scorer's description
    model: Any = None  # the scorer itself (None when no method needed one)
    results: list[Any] = field(default_factory=list)
    graph: Any = None
    broken: list[str] = field(default_factory=list)  # records of the file that were not imported
    seconds: float = 0.0

    def rows(self) -> list[dict[str, Any]]:
        """One row per method: the top entry, the agents to repair, and the runner-up."""
        out = []
        for m, o in self.outcomes.items():
            top = o.blamed[0] if o.blamed else None
            nxt = next((b for b in o.ranking if top is None or b.node != top.node), None)
            # a tool that a framework node ran itself (no model asked for it) has no calling node: the
            # agent it ran for (recorded at import) is the one to repair
            repair = o.agents or list(dict.fromkeys(
                str(self.trace.nodes[b.node].meta["agent"]) for b in o.blamed
                if self.trace.nodes[b.node].kind == "tool" and self.trace.nodes[b.node].meta.get("agent")))
            out.append({"method": m, "agent": top.agent if top else None, "node": top.node if top else None,
                        "kind": self.trace.nodes[top.node].kind if top else None, "score": top.score if top else None,
                        "repair": repair, "next": f"{nxt.agent} (n{nxt.node})" if nxt else None})
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "trace": self.trace.id, "loss": self.loss.to_dict(), "scorer": self.scorer,
                "methods": {m: o.to_dict() for m, o in self.outcomes.items()}, "rows": self.rows(),
                "broken": self.broken, "seconds": self.seconds}


def pick_trace(traces: list[Trace], trace_id: str | None, source: str) -> Trace:
    """The one trace to blame: the only one, or the one named ``trace_id``."""
    if trace_id is not None:
        for t in traces:
            if t.id == trace_id:
                return t
        raise ConfigError(f"{source} has no trace {trace_id!r}; its traces: {', '.join(t.id for t in traces)[:300]}")
    if len(traces) > 1:
        raise ConfigError(f"{source} holds {len(traces)} traces ({', '.join(t.id for t in traces)[:300]}); "
                          f"pick one with --trace ID, or blame them all with --losses FILE or --expected FILE")
    return traces[0]


def scorer_for(names: list[str], scorer: Any) -> Any:
    """The loaded scorer the methods ``names`` need (None when none reads gradients); a one-line
    error when one does and ``scorer`` is None."""
    if not any(needs_scorer(m) for m in names):
        return None
    if scorer is None:
        raise ConfigError(f"{', '.join(m for m in names if needs_scorer(m))} need(s) a white-box scorer "
                          f"(--scorer smollm2, a folder or hub id); provenance, last, all and random need none")
    return load_scorer(scorer)


def blame_trace(trace: Trace, loss: VerbalLoss, methods: list[str] | None = None, scorer: Any = None,
                seed: int = 0, top_k: int = 1, judge: Any = None,
                on_method: Callable[[str], None] | None = None) -> TraceBlame:
    """Every method's blame of ``trace`` for ``loss``; ``scorer`` (a model value or a loaded scorer) is
    loaded only when a method needs gradients, and the trace is attributed once for all of them."""
    t0 = time.time()
    names = list(dict.fromkeys(canonical(m) for m in (methods or [DEFAULT_METHOD])))
    check_expected(names, loss.details.get("expected"))
    sc = scorer_for(names, scorer)
    results: list[Any] = []
    graph = None
    if sc is not None:
        results, graph = sc.attribute(trace)
    outcomes = {}
    for m in names:
        if on_method:
            on_method(m)
        outcomes[m] = blame_episode(m, trace, loss, sc, results=results or None, seed=seed, top_k=top_k, judge=judge)
    return TraceBlame(trace, loss, outcomes, scorer=sc.describe() if sc is not None else None, model=sc, results=results,
                      graph=graph, seconds=round(time.time() - t0, 2))


def blame_file(path: str | Path, loss: str, wrong: str | None = None, target: str | int | None = None,
               trace_id: str | None = None, methods: list[str] | None = None, scorer: Any = None, seed: int = 0,
               top_k: int = 1, judge: Any = None, on_method: Callable[[str], None] | None = None,
               expected: str | None = None) -> TraceBlame:
    """``agentgrad blame``: import ``path``, build the verbal loss, blame with every method.

    Args:
        loss: what went wrong, in words.
        wrong: the text of the target's output that is wrong (located there: the loss's span).
        target: the call the loss attaches to: a node id, or an agent (its last call); default the
            trace's last call.
        trace_id: which trace of a file holding several.
        expected: the right answer (or the right text in place of ``wrong``): what the ``contrast``
            objective differentiates the produced output against (``gbc:W:contrast:RULE``).
    """
    res = import_file(path)
    if not res.traces:
        first = res.broken[0] if res.broken else "no trace in it"
        more = f" (and {len(res.broken) - 1} more broken record(s))" if len(res.broken) > 1 else ""
        raise ConfigError(f"nothing to blame in {path}: {first}{more}")
    trace = pick_trace(res.traces, trace_id, str(path))
    vl = verbal_loss(trace, loss, wrong=wrong, target=target, expected=expected)
    out = blame_trace(trace, vl, methods, scorer, seed, top_k, judge, on_method)
    out.source, out.broken = str(path), res.broken
    return out


def write_blame(tb: TraceBlame, out: Path, top_k: int = 1, seed: int = 0) -> list[str]:
    """The run directory of a blame: ``traces/ID.json``, ``attribution/ID.json`` (when a scorer ran: the
    weights, the first method's trajectories and the loss, which the report draws) and ``blame.json``."""
    from agentgrad.attribution.io import attribution_record
    from agentgrad.core.files import NameRegistry, RunFiles

    files = RunFiles(out)
    name = NameRegistry().claim(tb.trace.id or "trace")
    written = [f"traces/{name}.json"]
    files.write_json("traces", f"{name}.json", data=tb.trace.to_dict())
    first, outcome = next(iter(tb.outcomes.items()))
    if tb.graph is not None and tb.model is not None:
        rec = attribution_record(tb.trace, tb.results, tb.graph, tb.model, first, top_k, seed,
                                 f"traces/{name}.json", edge_rule(first))
        rec["loss"] = tb.loss.to_dict()
        rec["trajectories"] = [t.to_dict() for t in outcome.trajectories]
        rec["blame"] = outcome.to_dict()
        files.write_json("attribution", f"{name}.json", data=rec)
        written.append(f"attribution/{name}.json")
    files.write_json("blame.json", data={**tb.to_dict(), "file": f"traces/{name}.json"})
    written.append("blame.json")
    return written
