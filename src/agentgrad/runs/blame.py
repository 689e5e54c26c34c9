"""Blame the app you already have: an exported trace file -> every method's verdict, and a run directory.

``agentgrad blame TRACE --loss "..."`` is :func:`blame_file` then :func:`write_blame` then the
report. The file is read by :func:`~agentgrad.importers.spans.import_file` (OpenInference or OTel
GenAI spans as OTLP JSON, chat JSONL, or an agentgrad trace); the verbal loss is attached to the
last call of the trace (the final answer) unless told otherwise, and the text it names as wrong
(``wrong``) is located in that call's output, so that the loss-targeted objective and the
string-provenance baseline have a span. Each method of the blame registry gives its
:class:`~agentgrad.blame.verdict.Verdict`; gradient methods share one scorer and one attribution of
the trace. The result is the trace's :class:`~agentgrad.blame.team.TraceVerdict`, as a set's traces get.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from agentgrad.attribution.factory import make_scorer
from agentgrad.attribution.result import Attribution
from agentgrad.attribution.records import build_graph
from agentgrad.blame.backward import VerbalLoss
from agentgrad.blame.context import BlameContext, Meter
from agentgrad.blame.losses import DESCRIBED, trace_loss, verbal_loss
from agentgrad.blame.methods import DEFAULT_METHOD, WINDOW, canonical, check_expected, edge_rule, needs_scorer
from agentgrad.blame.outcome import blame_episode
from agentgrad.blame.team import TraceVerdict
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError
from agentgrad.importers.spans import import_file


AUTO = "auto"  # --loss auto: the loss the run's own record locates


def reach(trace: Trace) -> tuple[int, int]:
    """``(calls the final output reaches back to, calls)``: the calls upstream of the last call, itself
    included, along the edges the import recovered (a trace whose calls the final output does not reach
    is one whose data flow was not read)."""
    calls = trace.calls()
    if not calls:
        return 0, 0
    up = set(trace.upstream(calls[-1].id))
    return sum(c.id in up for c in calls), len(calls)


def windowed(trace: Trace, scorer: Any, window: int | None = None) -> tuple[Trace, str]:
    """The trace the scorer reads, and what was cut: a call longer than ``window`` tokens (or than the
    scorer's context, if that is shorter) keeps the steps nearest it that fit
    (:func:`~agentgrad.attribution.render.window_call`: a group chat's or a log's oldest blocks, or a
    chat's oldest messages, dropped; its system prompt and task kept), never truncated silently; the rest
    as they are."""
    tok, context = getattr(scorer, "tokenizer", None), getattr(scorer, "max_context", None)
    if scorer is None or tok is None or not context:
        return trace, ""
    limit = min(window, context) if window else context
    from agentgrad.attribution.render import render_call, window_trace

    if all(len(render_call(tok, n).input_ids) <= limit for n in trace.calls()):
        return trace, ""  # the common case: nothing to cut, no copy of the trace
    out = window_trace(tok, trace, limit)
    cut = [n for n in out.calls() if "window" in n.meta]
    if not cut:
        return trace, ""
    still = [n for n in cut if n.meta["window"].get("tokens", 0) > limit]
    within = f"the {limit:,}-token window (--window 0: whole)" if limit < context else f"the scorer's {limit:,} tokens"
    return out, (f"{len(cut)} call(s) longer than {within} read only their latest steps "
                 f"(oldest steps dropped{', the last five' if len(cut) > 5 else ''}: "
                 + ", ".join(f"n{n.id} {n.meta['window']['dropped']} step(s) of its "
                             f"{n.meta['window']['tokens_before']:,} tokens" for n in cut[-5:]) + ")" + (f"; {len(still)} still longer than that (the scorer skips or refuses them, as it is "
                          f"set: on_too_long)" if still else ""))


def blame_record(tv: TraceVerdict) -> dict[str, Any]:
    """``blame.json`` of one blamed trace: the file, the loss, the scorer, every method's verdict, and
    the table's rows (what the report's summary shows)."""
    att = tv.attribution
    return {"source": tv.source, "trace": tv.trace, "loss": tv.verbal.to_dict() if tv.verbal else None,
            "scorer": att.scorer if att is not None else None,
            "methods": {m: v.to_dict() for m, v in tv.methods.items()}, "rows": [v.row() for v in tv.methods.values()],
            **({"reach": dict(zip(("calls", "of"), reach(tv.data)))} if tv.data is not None else {}),
            "broken": tv.broken, "seconds": tv.seconds, **({"note": tv.note} if tv.note else {})}


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
    return make_scorer(scorer)


EDGES = ("all", "addressed")


def check_edges(edges: str) -> None:
    """A one-line :class:`ConfigError` for an ``edges`` value that is not one of :data:`EDGES`."""
    if edges not in EDGES:
        raise ConfigError(f"--edges takes {' or '.join(EDGES)}, not {edges!r}")


def with_edges(trace: Trace, edges: str) -> Trace:
    """``trace`` with the edges ``edges`` names (:data:`EDGES`): ``all`` as imported, ``addressed`` a group
    chat's preferred edges only (:func:`~agentgrad.importers.groupchat.prefer_addressed`)."""
    check_edges(edges)
    if edges == "all":
        return trace
    from agentgrad.importers.base import BadRecord
    from agentgrad.importers.groupchat import prefer_addressed

    try:
        return prefer_addressed(trace)
    except BadRecord as e:
        raise ConfigError(str(e)) from None


def blame_trace(trace: Trace, loss: VerbalLoss, methods: list[str] | None = None, scorer: Any = None,
                seed: int = 0, top_k: int = 1, judge: Any = None,
                on_method: Callable[[str], None] | None = None, attribute_all: bool = False,
                meter: Meter | None = None, window: int | None = WINDOW, edges: str = "all") -> TraceVerdict:
    """Every method's verdict on ``trace`` for ``loss`` (a blamed :class:`TraceVerdict`, which also keeps
    the trace, the loss and the attributions computed in memory); ``scorer`` (a model value or a loaded
    scorer) is loaded only when a method needs gradients. The methods share one context, so a call's
    gradients are taken once for all of them, and only the calls they read are scored (a walk from
    the loss scores the calls it walks through); ``attribute_all`` scores every call first (the whole
    attribution graph for the report, at the price of a backward pass over every call); ``meter`` is
    told of every call scored (a progress display: :class:`~agentgrad.blame.context.Meter`); ``window``:
    the tokens each call is read within (:data:`agentgrad.blame.methods.WINDOW`; None or 0: whole, up to the scorer's context);
    ``edges``: ``all`` (every edge the import found) or ``addressed`` (a group chat's calls keep only their
    address, reply and quoted edges where they have any: :func:`~agentgrad.importers.groupchat.prefer_addressed`)."""
    t0 = time.time()
    names = list(dict.fromkeys(canonical(m) for m in (methods or [DEFAULT_METHOD])))
    check_expected(names, loss.details.get("expected"))
    sc = scorer_for(names, scorer)
    scored_trace, note = windowed(trace, sc, window)
    if edges != "all":
        before = sum(len(n.parents) for n in scored_trace.calls())
        scored_trace = with_edges(scored_trace, edges)
        kept = sum(len(n.parents) for n in scored_trace.calls())
        note = "; ".join(x for x in (note, f"edges: each call's address, reply and quoted edges where it has any "
                                            f"({kept:,} of {before:,} kept; --edges all: every one)") if x)
    ctx = BlameContext(scored_trace, loss, sc, seed, judge, top_k, meter=meter)  # shared: each call's gradients once
    if sc is not None and attribute_all:
        ctx.prime(sc.attribute(scored_trace)[0])
    verdicts = {}
    for m in names:
        if on_method:
            on_method(m)
        verdicts[m] = blame_episode(m, scored_trace, loss, sc, seed=seed, top_k=top_k, judge=judge, context=ctx)
    results = ctx.scored()  # only the calls the methods read were scored (every call with attribute_all)
    graph = build_graph(trace, results) if sc is not None and results else None
    return TraceVerdict(trace.id, "blamed", verdicts, note=note, loss=loss.text, wrong=loss.details.get("wrong"),
                        expected=loss.details.get("expected"), target=loss.targets[0] if loss.targets else None,
                        seconds=round(time.time() - t0, 2), data=trace, verbal=loss,
                        attribution=Attribution(trace, results, graph, sc.describe()) if graph is not None else None,
                        scorer=sc)


def blame_file(path: str | Path, loss: str, wrong: str | None = None, target: str | int | None = DESCRIBED,
               trace_id: str | None = None, methods: list[str] | None = None, scorer: Any = None, seed: int = 0,
               top_k: int = 1, judge: Any = None, on_method: Callable[[str], None] | None = None,
               expected: str | None = None, attribute_all: bool = False, meter: Meter | None = None,
               window: int | None = WINDOW, edges: str = "all") -> TraceVerdict:
    """``agentgrad blame``: import ``path``, build the verbal loss, blame with every method.

    Args:
        loss: what went wrong, in words; ``auto``: the loss the trace carries by itself
            (:func:`~agentgrad.blame.losses.trace_loss`: its run's record, else a failure it shows).
        wrong: the text of the target's output that is wrong (located there: the loss's span).
        target: the call the loss attaches to: a node id, or an agent (its last call); default the
            call the words describe (:func:`~agentgrad.blame.losses.described_call`: the latest holding
            ``wrong``, else the one sharing most of the loss's words, else the last call).
        trace_id: which trace of a file holding several.
        expected: the right answer (or the right text in place of ``wrong``): what the ``contrast``
            objective differentiates the produced output against (``gbc:W:contrast:RULE``).
        edges: ``all`` or ``addressed`` (:func:`with_edges`).
    """
    res = import_file(path)
    if not res.traces:
        first = res.broken[0] if res.broken else "no trace in it"
        more = f" (and {len(res.broken) - 1} more broken record(s))" if len(res.broken) > 1 else ""
        raise ConfigError(f"nothing to blame in {path}: {first}{more}")
    trace = pick_trace(res.traces, trace_id, str(path))
    if loss == AUTO:
        if wrong or target not in (None, DESCRIBED) or expected:
            raise ConfigError("--loss auto takes its target, wrong text and expected value from the run's record; "
                              "drop --wrong, --target and --expected (or write the loss yourself)")
        vl = trace_loss(trace)
        if vl is None:
            raise ConfigError(f"{path} shows no failure by itself (no record of what the run should have done, "
                              f"as a tau-bench result's reward_info; no error status, failed tool or retry loop): "
                              f"say in words what went wrong with --loss TEXT")
    else:
        vl = verbal_loss(trace, loss, wrong=wrong, target=target, expected=expected)
    out = blame_trace(trace, vl, methods, scorer, seed, top_k, judge, on_method, attribute_all, meter, window, edges)
    out.source, out.broken = str(path), res.broken
    return out


def write_blame(tv: TraceVerdict, out: Path, top_k: int = 1, seed: int = 0) -> list[str]:
    """The run directory of a blame: ``traces/ID.json``, ``attribution/ID.json`` (when a scorer ran: the
    weights, the first method's trajectories and the loss, which the report draws) and ``blame.json``."""
    from agentgrad.attribution.io import attribution_record
    from agentgrad.core.files import NameRegistry, RunFiles

    if tv.data is None or tv.verbal is None:
        raise ConfigError("write_blame needs the verdict of blame_trace or blame_file (it keeps the trace and its loss)")
    files = RunFiles(out)
    name = NameRegistry().claim(tv.data.id or "trace")
    written = [f"traces/{name}.json"]
    files.write_json("traces", f"{name}.json", data=tv.data.to_dict())
    first, verdict = next(iter(tv.methods.items()))
    att = tv.attribution
    if att is not None and tv.scorer is not None:
        rec = attribution_record(tv.data, att.nodes, att.graph, tv.scorer, first, top_k, seed,
                                 f"traces/{name}.json", edge_rule(first))
        rec["loss"] = tv.verbal.to_dict()
        rec["trajectories"] = [t.to_dict() for t in verdict.trajectories]
        rec["blame"] = verdict.to_dict()
        files.write_json("attribution", f"{name}.json", data=rec)
        written.append(f"attribution/{name}.json")
    files.write_json("blame.json", data={**blame_record(tv), "file": f"traces/{name}.json"})
    written.append("blame.json")
    return written
