"""The planted-fault blame benchmark: every method on the same episodes, with 95% intervals.

Episodes with a planted fault and a known root cause (:mod:`~agentgrad.benchmarks.planted.episodes`)
are blamed by every method through one :class:`~agentgrad.blame.context.BlameContext` each. What a
method's ranking scores (``agent_top1``, ``node_top1``, ``agent_top3``, its cost) is in
:mod:`~agentgrad.benchmarks.planted.scoring`; the token-level precision (does the gradient's peak lie
on the corrupted value?) in :mod:`~agentgrad.benchmarks.planted.tokens`; what a run folder holds in
:mod:`~agentgrad.benchmarks.planted.records`; the figures per method, overall and per topology, fault
kind and length ratio, in :mod:`~agentgrad.benchmarks.planted.summary`.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

from agentgrad.benchmarks.planted import episodes as E
from agentgrad.benchmarks.planted.prose import STYLES
from agentgrad.benchmarks.planted.records import check_setup, read_back, write_episode
from agentgrad.benchmarks.planted.scoring import Cost, cost_of, score_methods, top1_credit, top3
from agentgrad.benchmarks.planted.summary import GROUPS, pair_with_baselines, summarize, token_summary
from agentgrad.benchmarks.planted.tokens import (
    TOKEN_OBJECTIVES, TOKEN_SCORES, WORD_PAIRS, carrying_source, has_content, is_key, key_flags, longest_word_hit,
    token_line_starts, token_precision, value_groups, word_groups, word_hit, word_in, words_of,
)
from agentgrad.core.stats import wilson
from agentgrad.blame.context import BlameContext
from agentgrad.blame.methods import get_blame_method, needs_scorer
from agentgrad.core.files import RunFiles, check_new_output
from agentgrad.errors import ConfigError

# what the benchmark's figures are read through elsewhere (the injected-fault and Who&When benchmarks,
# the table scripts under benchmarks/, the tests), from where they have always been read
__all__ = [
    "Cost", "GROUPS", "TOKEN_OBJECTIVES", "TOKEN_SCORES", "TRUTH_EXTRAS", "WORD_PAIRS", "carrying_source",
    "check_options", "check_setup", "cost_of", "has_content", "is_key", "key_flags", "longest_word_hit",
    "pair_with_baselines", "read_back", "run_benchmark", "score_methods", "summarize", "token_line_starts",
    "token_precision", "token_summary", "top1_credit", "top3", "value_groups", "word_groups", "word_hit",
    "word_in", "words_of", "write_episode",
]

TRUTH_EXTRAS = ("decoy_later", "transform")  # what a record keeps of a family's truth, for the tables


def check_options(topologies: list[str], faults: list[str], episodes: int, methods: list[str], scored: bool,
                  style: str = "lines", out: Path | None = None, resume: bool = False, overwrite: bool = False) -> None:
    """Every option's one-line :class:`ConfigError`, before a scorer is built or loaded: unknown or no
    topologies and fault kinds, no episode, an unknown style or method, a fault no topology given can
    hold in ``style``, a method that reads a scorer without one (``scored``), a non-empty ``out``
    without ``resume`` or ``overwrite``."""
    if episodes < 1:
        raise ConfigError("--episodes must be at least 1")
    for what, names, valid in (("topology", topologies, E.TOPOLOGIES), ("fault kind", faults, E.FAULTS)):
        bad = [n for n in names if n not in valid]
        if bad or not names:
            raise ConfigError(f"unknown {what} {bad[0] if bad else '(none)'!r}; valid: {', '.join(valid)}, all")
    if style not in STYLES:
        raise ConfigError(f"unknown --style {style!r}; valid: {', '.join(STYLES)}")
    if not any(E.supports(t, f, style) for t in topologies for f in faults):
        raise ConfigError(f"no topology given can hold {', '.join(faults)} in {style} (misroute: manager only, "
                          f"lines only)")
    if not methods:
        raise ConfigError("--methods selects no method")
    for m in methods:
        get_blame_method(m)  # an unknown name: a one-line error with the valid ones
    needs = [m for m in methods if needs_scorer(m)]
    if needs and not scored:
        raise ConfigError(f"{needs[0]} needs a white-box model: give --scorer smollm2 (or another), or choose "
                          f"model-free --methods (provenance, provenance:key, random, all, last, ...)")
    if out is not None and not resume:
        check_new_output(Path(out), overwrite, "dir")


def run_benchmark(scorer: Any, methods: list[str], topologies: list[str], faults: list[str], episodes: int,
                  out: Path | None = None, seed: int = 0,
                  on_episode: Callable[[dict[str, Any]], None] | None = None, judge: Any = None,
                  resume: bool = False, setup: dict[str, Any] | None = None, style: str = "lines",
                  overwrite: bool = False, device: str = "cpu", on_start: Callable[[int], None] | None = None,
                  status: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """``episodes`` episodes per (topology, fault kind), every method on each; returns metrics.

    ``scorer`` is a scorer, None (model-free methods only), or a scorer value (``trained``, smollm2,
    a folder, ...: :func:`~agentgrad.attribution.factory.make_scorer`, on ``device``), built or
    loaded once the options are checked (:func:`check_options`); ``judge`` a judge, None, or a model
    value. With ``out``, every episode's record is written as it finishes (``episodes/ID.json``) and
    ``bench.json`` holds the setup (``setup``: what produced the figures, e.g. the scorer, plus
    the seed); ``out`` must be new or empty unless ``overwrite``, and ``resume`` reads back the
    records of a stopped run with the same setup that cover the requested methods, instead of
    running them again. ``style``: how the calls write (``lines`` or ``prose``,
    :func:`~agentgrad.benchmarks.planted.episodes.generate`). ``status``: a context manager for what
    is being prepared (``console.status``); ``on_start(n)`` is told how many episodes there are.
    """
    check_options(topologies, faults, episodes, methods, scorer is not None, style, out, resume, overwrite)
    cells = [(t, f) for t in topologies for f in faults if E.supports(t, f, style)]
    setup = {**(setup or {}), "seed": seed, **({"style": style} if style != "lines" else {})}
    if out is not None:
        check_setup(Path(out), setup, resume)  # a resumed run's setup, before a scorer is built or loaded
    if isinstance(judge, str):
        from agentgrad.blame.judge import Judge, make_judge

        judge = Judge(make_judge(judge)) if judge else None
    if isinstance(scorer, str):
        from agentgrad.attribution.factory import make_scorer
        from agentgrad.benchmarks.planted import model  # noqa: F401  (registers the scorer value "trained")

        with status("preparing the scorer (the trained one is built once, a few minutes)") if status else nullcontext():
            scorer = make_scorer(scorer, device=device, on_too_long="skip")
    fns = {m: get_blame_method(m) for m in methods}
    files = RunFiles(out) if out else None
    if files:
        files.write_json("bench.json", data=setup)
    if on_start:
        on_start(episodes * len(cells))
    records = []
    for topo, fault in cells:
        for i in range(episodes):
            ep = E.generate(topo, fault, seed * 1_000_003 + i, "eval", style=style)
            done = read_back(files, ep.trace.id, methods, scorer is not None) if resume and files else None
            if done is not None:
                records.append(done)
                if on_episode:
                    on_episode(done)
                continue
            t_ep = time.time()
            trace = E.without_truth(ep.trace)
            ctx = BlameContext(trace, ep.loss, scorer, seed=seed + i, judge=judge, meter=Cost())
            rec: dict[str, Any] = {"episode": ep.trace.id, "topology": topo, "fault": fault, "long": ep.truth["long"],
                                   "truth": {"agent": ep.truth["agent"], "node": ep.truth["node"],
                                             **{k: ep.truth[k] for k in TRUTH_EXTRAS if k in ep.truth}},
                                   "candidates": len(ctx.upstream()), "methods": {}}
            rec["methods"] = score_methods(ctx, fns, ep.truth["agent"], ep.truth["node"])
            if scorer is not None:
                rec["token"] = {o: token_precision(ctx, ep.truth, o) for o in TOKEN_OBJECTIVES}
            rec["loss"] = ep.loss.to_dict()
            rec["seconds"] = round(time.time() - t_ep, 3)  # every method together, passes shared
            records.append(rec)
            if files:
                write_episode(files, trace, ep.loss, ctx, scorer, seed)
                files.write_json("episodes", f"{ep.trace.id}.json", data=rec)
            if on_episode:
                on_episode(rec)
    metrics = summarize(records, methods)
    if files:
        files.write_json("metrics.json", data=metrics)
    return metrics

