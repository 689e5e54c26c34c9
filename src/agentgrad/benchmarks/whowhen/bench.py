"""The Who&When failure-attribution benchmark with the same blame methods as the planted-fault one.

Each of the 184 logs (:func:`agentgrad.importers.import_whowhen`) fails its task. A method sees the
trace without its labels and a verbal loss attached to the final step: the question, and with
``with_ground_truth`` the expected answer, in the loss's text and as its ``details["expected"]`` (no
span: the loss cannot point at the wrong tokens, so the ``stop`` rule falls back to ``path``). The
answer reaches a gradient only through a failure-conditioned objective: ``contrast`` differentiates
log p of the produced final message against log p of the answer in its place (without the answer it
is the ``whole`` objective), ``judged`` the scorer's judgment of each call given the loss's text
(which holds the answer in that setting); ``whole`` and ``targeted`` do not read the loss at all, so
their figures are the same in both settings. Its top-ranked blame is scored against the labels:

- agent-level: the top agent is the labelled ``mistake_agent`` (case-insensitive; ties at the top
  earn 1/ties);
- step-level: the top node is the labelled step (``mistake_step``, node ``mistake_step + 1``);
- step-level within ``k`` (``step_within``, k = 1..5, the paper's Table 2): the top node is at most ``k``
  steps from the labelled one (ties at the top earn the share of them that are).

The blamed step of a GBC method is the node its rule ranks first: ``earliest`` the earliest call on
the kept path, ``maxw`` the node whose edge to its successor weighs most, ``path`` every node on the
path, tied. A log longer than the scorer's context is attributed as far as it fits and counted
(``too_long``); with ``exclude_too_long`` it is not scored at all, only counted per subset
(``excluded``: the figures are then those of the logs that fit); with ``window`` a call longer than
the scorer's context keeps only the steps nearest it that fit
(:func:`agentgrad.attribution.render.window_call`), and the log is scored and counted as
``windowed``. The paper's published figures (its Table 1: random and the three
judge protocols with GPT-4o, per subset, with and without ground truth) are stored as data in
``published/whowhen.json`` with their source and returned by :func:`published`; they are not
measured here.

Every method is paired, log by log, with the best of the trivial priors (:mod:`agentgrad.blame.priors`:
``first``, ``most_active``, ``position:F``; the best on the logs compared, per level, which favours
the prior) and with ``provenance`` where they ran (:func:`pair_with_priors`): a figure that does not
beat them has found nothing about the failure.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from agentgrad.blame.backward import VerbalLoss
from agentgrad.benchmarks.planted.bench import Cost, check_setup, top1_credit
from agentgrad.benchmarks.stats import paired
from agentgrad.core.stats import wilson
from agentgrad.benchmarks.whowhen.span import answer_span
from agentgrad.blame.context import Blame, BlameContext, top_tied
from agentgrad.blame.methods import get_blame_method, with_reader
from agentgrad.blame.priors import is_prior
from agentgrad.core.trace import Trace
from agentgrad.core.files import RunFiles
from agentgrad.errors import ConfigError

# The fact reader of the walks that follow the wrong text (agentgrad.blame.facts): every Who&When figure
# was made reading the logs as `key: value` lines, before the readers existed (2026-12-03); detection
# would read most of these logs as prose, whose units differ, so the benchmark keeps `lines`. A method
# named NAME@READER keeps its own reader.
READER = "lines"

DEFAULT_METHODS = ("gbc:mean_l1:whole:earliest,gbc:mean_l1:whole:maxw,gbc:max_l1:whole:maxw,"
                   "gbc:mean_gxi:whole:maxw,occlusion:whole:maxw,temporal,random,all,last,"
                   "provenance,first,most_active,position")

PUBLISHED_FILE = Path(__file__).with_name("published") / "whowhen.json"


def published(with_ground_truth: bool) -> dict[str, Any]:
    """The paper's figures for one setting (published, not measured here): ``methods`` maps a method
    name of this registry to ``{subset: {"agent", "step"}}``; ``source``, ``judge_model``, ``notes`` and
    the abstract's ``best_agent_level`` / ``best_step_level`` come along."""
    table = json.loads(PUBLISHED_FILE.read_text(encoding="utf-8"))  # a fresh copy: callers may change it
    setting = "with_ground_truth" if with_ground_truth else "without_ground_truth"
    return {k: v for k, v in table.items() if k != "methods"} | {
        "setting": setting, "methods": {m: cells[setting] for m, cells in table["methods"].items()}}


TOLERANCES = (1, 2, 3, 4, 5)


def step_within(ranking: list[Blame], truth_node: int) -> dict[str, float]:
    """For each tolerance k, the share of the top-scored nodes at most k steps from ``truth_node``."""
    top = top_tied(ranking, lambda b: b.node)
    return {str(k): sum(abs(n - truth_node) <= k for n in top) / max(len(top), 1) for k in TOLERANCES}


def whowhen_loss(trace: Trace, with_ground_truth: bool, span: bool = False) -> VerbalLoss:
    """The verbal loss of a failed log, attached to its last call; with ``with_ground_truth`` the answer
    is in its text and its ``details["expected"]`` (what the ``contrast`` objective puts in place of
    the final message). With ``span`` (and the answer) the loss targets the call that states a wrong
    answer, with that answer's characters as its span (:func:`~agentgrad.benchmarks.whowhen.span.answer_span`;
    ``details["span_text"]``), where one is found."""
    labels = trace.meta.get("labels", {})
    question = trace.nodes[0].text.strip()
    text = f"The team did not solve the task. The task was: {question}"
    details = {}
    if with_ground_truth and labels.get("ground_truth") not in (None, ""):
        text += f" The correct answer is: {labels['ground_truth']}."
        details["expected"] = str(labels["ground_truth"])
    if span and "expected" in details and (found := answer_span(trace, details["expected"])) is not None:
        return VerbalLoss(text + f" The team answered: {found.text}.", [found.node], "whowhen",
                          details | {"span_text": found.text}, {found.node: [(found.start, found.end)]})
    final = trace.calls()[-1].id
    return VerbalLoss(text, [final], "whowhen", details)


def longest_call(scorer: Any, trace: Trace) -> int:
    """The tokens of the trace's longest call as the scorer renders it (its prompt and output)."""
    from agentgrad.attribution.render import render_call

    return max((len(render_call(scorer.tokenizer, n).input_ids) for n in trace.calls()), default=0)


def _read_back(files: RunFiles | None, log: str, methods: list[str]) -> dict[str, Any] | None:
    """A log's record from an earlier run, if it covers ``methods`` (an excluded log's always does)."""
    if files is None:
        return None
    try:
        rec = json.loads(files.path("logs", f"{log}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("log") != log or not isinstance(rec.get("subset"), str):
        return None  # not a record of this log (a stray or edited file): run it again, or leave it out
    if rec.get("excluded"):
        return rec
    if not set(methods) <= set(rec.get("methods", {})):
        return None
    rec["methods"] = {m: rec["methods"][m] for m in methods}
    return rec


def run_whowhen(traces: list[Trace], methods: list[str], scorer: Any = None, judge: Any = None,
                with_ground_truth: bool = True, out: Path | None = None, seed: int = 0,
                on_log: Callable[[dict[str, Any]], None] | None = None, exclude_too_long: bool = False,
                resume: bool = False, setup: dict[str, Any] | None = None, window: bool = False,
                span: bool = False) -> dict[str, Any]:
    """Every method on every log; agent- and step-level accuracy per subset with 95% intervals.

    ``exclude_too_long``: a log whose longest call exceeds the scorer's context is counted, not
    scored; ``window``: its long calls keep the steps nearest them that fit, and it is scored (a
    call too long even with every step dropped is then excluded, or skipped). ``resume``: the
    records of ``out/logs/`` that cover ``methods`` are read back instead of run again (``setup``,
    what produced the figures, must be the earlier run's: ``bench.json``). With ``out``, the figures
    (returned, and written to ``out/metrics.json``) cover every record in ``out/logs/`` that covers
    ``methods``, so a run over some of the logs (``--logs 5-5 --resume``) keeps the folder's summary whole.
    Each method's record holds its scorer seconds (a judge's: the wall time of its requests).
    ``span``: the loss targets the call stating a wrong answer, with its span (:func:`whowhen_loss`);
    each record says what was found (``span``: node and text, or None)."""
    if span and not with_ground_truth:
        raise ConfigError("the answer span is located against the ground truth: use it with the ground truth")
    fns = {m: get_blame_method(with_reader(m, READER)) for m in methods}  # the benchmark's declared reader
    files = RunFiles(out) if out else None
    if out is not None:
        setup = {**(setup or {}), "seed": seed, "with_ground_truth": with_ground_truth,
                 "exclude_too_long": exclude_too_long, **({"window": True} if window else {}),
                 **({"span": True} if span else {})}
        check_setup(Path(out), setup, resume)
        files.write_json("bench.json", data=setup)  # type: ignore[union-attr]
    records = []
    for i, tr in enumerate(traces):
        labels = tr.meta["labels"]
        done = _read_back(files, tr.id, methods) if resume else None
        if done is not None:
            records.append(done)
            if on_log:
                on_log(done)
            continue
        windowed = None
        if window and scorer is not None:
            from agentgrad.attribution.render import window_trace

            tr = window_trace(scorer.tokenizer, tr, scorer.max_context)
            cut = [n.meta["window"] for n in tr.calls() if "window" in n.meta]
            if cut:
                windowed = {"calls": len(cut), "dropped_steps": sum(w["dropped"] for w in cut)}
        if exclude_too_long and scorer is not None:
            tokens = longest_call(scorer, tr)
            if tokens > scorer.max_context:
                rec = {"log": tr.id, "subset": labels["subset"], "excluded": True, "tokens": tokens,
                       **({"windowed": windowed} if windowed else {})}  # too long even windowed
                records.append(rec)
                if files:
                    files.write_json("logs", f"{tr.id}.json", data=rec)
                if on_log:
                    on_log(rec)
                continue
        t_log = time.time()
        seen = tr.without_meta("labels")
        loss = whowhen_loss(tr, with_ground_truth, span)
        cost = Cost()
        ctx = BlameContext(seen, loss, scorer, seed + i, judge, meter=cost)
        upstream = ctx.upstream()
        truth_agent = str(labels["mistake_agent"]).lower()
        rec: dict[str, Any] = {"log": tr.id, "subset": labels["subset"], "truth": {
            "agent": labels["mistake_agent"], "step": labels["mistake_step"], "node": labels["mistake_node"]},
            "steps": len(upstream), "methods": {},
            **({"span": {"node": loss.targets[0], "text": loss.details["span_text"]} if loss.spans else None}
               if span else {}),
            "chance": {"agent": sum(seen.nodes[n].name.lower() == truth_agent for n in upstream) / max(len(upstream), 1),
                       "step": 1 / max(len(upstream), 1)}}
        for m, fn in fns.items():
            s0, j0, t0 = cost.seconds, ctx.judge_requests, time.time()
            u0, r0 = getattr(judge, "unconstrained", 0), getattr(judge, "reasked", 0)
            ranking = fn(ctx)
            rec["methods"][m] = {
                "seconds": round(cost.seconds - s0 + (time.time() - t0 if ctx.judge_requests > j0 else 0), 3),
                "agent": top1_credit(ranking, truth_agent, lambda b: b.agent.lower()),
                "step": top1_credit(ranking, labels["mistake_node"], lambda b: b.node),
                "step_within": step_within(ranking, labels["mistake_node"]),
                "unparsed": m in cost.unparsed,  # a judge that gave no parsable reply (named nothing)
                "unread": m in cost.unread,  # a judge whose prompt was longer than its context (named nothing)
                "top": ranking[0].to_dict() if ranking else None}
            if m.startswith("judge:") and judge is not None:  # replies decoded without the schema; questions re-asked
                rec["methods"][m] |= {"requests": ctx.judge_requests - j0,
                                      "unconstrained": getattr(judge, "unconstrained", 0) - u0,
                                      "reasked": getattr(judge, "reasked", 0) - r0}
        rec["too_long"] = ctx.too_long()
        if windowed:
            rec["windowed"] = windowed
        rec["seconds"] = round(time.time() - t_log, 3)  # every method together, passes shared
        records.append(rec)
        if files:
            files.write_json("logs", f"{tr.id}.json", data=rec)
        if on_log:
            on_log(rec)
    if files:  # the folder's figures: this run's logs and every earlier record there that covers methods
        ran = {r["log"] for r in records}
        for p in sorted(files.path("logs").glob("*.json")) if files.path("logs").is_dir() else []:
            if p.stem not in ran and (rec := _read_back(files, p.stem, methods)) is not None:
                records.append(rec)
    metrics = summarize_whowhen(records, methods) | {"with_ground_truth": with_ground_truth,
                                                      "published": published(with_ground_truth)}
    if files:
        files.write_json("metrics.json", data=metrics)
    return metrics


def summarize_whowhen(records: list[dict[str, Any]], methods: list[str]) -> dict[str, Any]:
    """Per group (all, each subset): the scored logs' figures; ``excluded`` counts the logs left out
    as longer than the scorer's context."""
    groups: dict[str, list[dict[str, Any]]] = {"all": records}
    for r in records:
        groups.setdefault(r["subset"], []).append(r)
    scored = [r for r in records if not r.get("excluded")]
    out: dict[str, Any] = {"logs": len(scored), "excluded": len(records) - len(scored), "methods": methods,
                           "groups": {}}
    for g, all_rs in groups.items():
        rs = [r for r in all_rs if not r.get("excluded")]
        n = len(rs)
        out["groups"][g] = {
            "n": n, "excluded": len(all_rs) - n, "too_long": sum(r["too_long"] for r in rs),
            "windowed": sum("windowed" in r for r in rs),
            # wall time of a log with every method at once, where recorded
            "seconds_per_log": (sum(r["seconds"] for r in rs if "seconds" in r) / sum("seconds" in r for r in rs)
                                if any("seconds" in r for r in rs) else None),
            "chance": {k: sum(r["chance"][k] for r in rs) / max(n, 1) for k in ("agent", "step")},
            "methods": {m: {k: {"value": sum(r["methods"][m][k] for r in rs) / max(n, 1),
                                "ci95": list(wilson(sum(r["methods"][m][k] for r in rs), n))}
                            for k in ("agent", "step")}
                        | {"step_within": {str(t): sum(r["methods"][m]["step_within"][str(t)]
                                                       for r in rs) / max(n, 1) for t in TOLERANCES},
                           "unparsed": sum(bool(r["methods"][m].get("unparsed")) for r in rs),
                           "unread": sum(bool(r["methods"][m].get("unread")) for r in rs),
                           "seconds": sum(r["methods"][m].get("seconds", 0.0) for r in rs) / max(n, 1)}
                        for m in methods}}
        if any("span" in r for r in rs):  # --answer-span: logs with a located answer, and those whose
            # labelled step comes after it (no method that walks back from the span can reach it)
            found = [r for r in rs if r.get("span")]
            out["groups"][g]["span"] = {"found": len(found), "truth_after": sum(
                r["truth"]["node"] > r["span"]["node"] for r in found)}
        pair_with_priors(rs, methods, out["groups"][g]["methods"])
    return out


def pair_with_priors(records: list[dict[str, Any]], methods: list[str], figures: dict[str, Any]) -> None:
    """Every method beside the trivial priors and ``provenance``, paired on the same logs, at agent and
    at step level: ``vs_best_prior[level]`` (the prior with the most credit at that level on these
    logs, named in ``baseline``: chosen on them, so generous to the prior) and
    ``vs_provenance[level]``, each :func:`~agentgrad.benchmarks.stats.paired`'s difference, bootstrap
    interval, logs won and lost and sign-test p. Nothing is added where no prior ran."""
    priors = [m for m in methods if is_prior(m)]
    if not priors or not records:
        return
    for level in ("agent", "step"):
        col = {m: [r["methods"][m][level] for r in records] for m in methods}
        best = max(priors, key=lambda m: (sum(col[m]), -priors.index(m)))
        for m in methods:
            figures[m].setdefault("vs_best_prior", {})[level] = {"baseline": best, **paired(col[m], col[best])}
            if "provenance" in col:
                figures[m].setdefault("vs_provenance", {})[level] = paired(col[m], col["provenance"])


def priors_table(figures: dict[str, Any], names: list[str]) -> tuple[list[str], list[list[str]]] | None:
    """``(columns, rows)`` of every method's paired differences with the best prior and with
    provenance (:func:`pair_with_priors`), each cell ``+0.050 [-0.03, +0.13] 12/7 p=0.36`` (difference,
    its bootstrap interval, logs won / lost, sign-test p); None where no prior ran."""
    first = figures[names[0]]
    if "vs_best_prior" not in first:
        return None
    keys = [k for k in ("vs_best_prior", "vs_provenance") if k in first]
    cols = [f"{level} vs {first[key][level]['baseline'] if key == 'vs_best_prior' else 'provenance'}"
            for key in keys for level in ("agent", "step")]
    rows = [[name] + [f"{d['diff']:+.3f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}] {d['wins']}/{d['losses']} p={d['p']:.2g}"
                      for key in keys for d in (figures[name][key]["agent"], figures[name][key]["step"])]
            for name in names]
    return cols, rows
