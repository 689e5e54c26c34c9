"""``bench agentrx``: every method on AgentRx's labelled real runs, scored against the root cause.

Each run (:mod:`.data`) is blamed under each loss setting of its subset (Magentic-One: ``last``;
tau-bench: ``last`` and ``located``, :func:`losses`) by every method; the top-ranked node's agent
and message are scored against the label (ties share the credit). One JSON line per (run, setting)
is appended to ``OUT/records.jsonl`` as it finishes, so a killed run resumes where it stopped
(``resume``). :func:`summary` gives the figures: per subset, setting and half, each method's
agent- and step-level accuracy, the best prior chosen on half A, and on half B every method's
paired difference from it (docs/agentrx.md).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from agentgrad.benchmarks.agentrx.data import Run, agent_key
from agentgrad.benchmarks.stats import paired
from agentgrad.blame.backward import VerbalLoss
from agentgrad.blame.context import Blame, BlameContext, top_tied
from agentgrad.blame.losses import record_loss
from agentgrad.blame.outcome import blame_episode
from agentgrad.core.files import RunFiles, append_line
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError

PRIORS = ("first", "last", "position:0.5", "random", "most_active")
MODEL_FREE = (*PRIORS, "provenance")
SETTINGS = {"tau": ("last", "located"), "magentic": ("last",)}
RECORDS = "records.jsonl"
FINAL_WORDS = "the team's final answer is wrong"


def losses(run: Run) -> dict[str, VerbalLoss]:
    """The loss of each setting of a run: ``last`` on the final call; ``located`` (tau-bench) from the
    run's own record (:func:`~agentgrad.blame.losses.record_loss`), the ``last`` loss where it has none."""
    final = run.trace.calls()[-1]
    last = VerbalLoss(FINAL_WORDS, [final.id], "record", {"produced": final.text, "rule": "last call"})
    out = {"last": last}
    if "located" in SETTINGS[run.subset]:
        out["located"] = record_loss(run.trace) or last
    return out


def message_of(trace: Trace, node: int) -> int | None:
    meta = trace.nodes[node].meta
    return meta.get("message", meta.get("step"))


def agent_of(trace: Trace, node: int) -> str:
    """The agent a node's blame names: a call's agent, a tool result's caller, an input's speaker."""
    n = trace.nodes[node]
    if n.kind == "tool":
        callers = [trace.nodes[p].name for p in n.parents if trace.nodes[p].kind == "call"]
        return agent_key(callers[0] if callers else n.name)
    return agent_key(n.name)


def score(trace: Trace, ranking: list[Blame], run: Run) -> dict[str, Any]:
    """Agent- and step-level credit of a ranking (1/ties where the truth is among the top-tied)."""
    agents = top_tied(ranking, lambda b: agent_of(trace, b.node))
    steps = top_tied(ranking, lambda b: message_of(trace, b.node))
    return {"agent": (1.0 / len(agents)) if run.agent in agents else 0.0,
            "step": (1.0 / len(steps)) if run.message in steps else 0.0,
            "top": top_tied(ranking, lambda b: b.node)[:5]}


def run_agentrx(runs: list[Run], methods: list[str], out: Path, scorer: Any = None, resume: bool = False,
                seed: int = 0, on_run: Callable[[dict[str, Any]], None] | None = None,
                on_method: Callable[[str, str, str], None] | None = None,
                settings: tuple[str, ...] | None = None, window: int | None = None,
                edges: str = "all", calls_in_history: bool = False) -> list[dict[str, Any]]:
    """Blame every run under every loss setting of its subset (or those of ``settings``) with
    ``methods``; each (run, setting)'s record is appended to ``out/records.jsonl`` as it finishes.
    ``resume``: the records already there that cover ``methods`` are kept, not run again. ``window``: a
    measured approximation, every call longer than that many tokens reads only its latest steps that
    fit (:func:`~agentgrad.attribution.render.window_trace`, the path a call longer than the scorer's
    context takes); the scores are on the same nodes. ``calls_in_history``: earlier tool calls written into each
    call's history (:func:`~agentgrad.attribution.render.calls_in_history`). ``edges``: ``addressed`` blames
    each Magentic-One log on its preferred edges (:func:`~agentgrad.runs.blame.with_edges`), the scores again on
    the same nodes.
    The trace the methods read is made once per run; its CPU time is the record's ``read_cpu_seconds``
    (until 2026-12-07 every method's ``cpu_seconds`` held it again). Returns every record of the folder."""
    files = RunFiles(out)
    path = files.path(RECORDS)
    done: dict[tuple[str, str, str], dict[str, Any]] = {}
    if path.exists() and path.stat().st_size:
        if not resume:
            raise ConfigError(f"{out} holds an AgentRx run ({RECORDS}): pass --resume to go on, or choose another --out")
        kept = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
                done[(r["subset"], r["run"], r["loss"])] = r
                kept.append(line)
            except (ValueError, KeyError, TypeError):
                continue  # a line a killed run left unfinished: that run is done again
        files.write_text(RECORDS, text="".join(x + "\n" for x in kept))  # without it, so new lines start clean
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for run in runs:
        read, read_cpu = None, 0.0  # the trace the methods read: windowed and on its edges once per run
        for setting, loss in losses(run).items():
            if settings is not None and setting not in settings:
                continue
            key = (run.subset, run.trace.id, setting)
            old = done.get(key)
            if old is not None and set(methods) <= set(old.get("methods", {})):
                records.append(old)
                continue
            rec: dict[str, Any] = {**run.to_dict(), "loss": setting, "target": loss.targets[0],
                                   "target_message": message_of(run.trace, loss.targets[0]),
                                   "rule": loss.details.get("rule"), "methods": {}}
            if edges != "all":
                rec["edges"] = edges
            if calls_in_history:
                rec["calls_in_history"] = True
            if read is None:
                cpu0 = time.process_time()
                read = _read(run.trace, scorer, window, edges, calls_in_history)
                read_cpu = round(time.process_time() - cpu0, 3)
            if read is not run.trace:  # made once per run (the window's tokenization): no method's CPU holds it
                rec["read_cpu_seconds"] = read_cpu
            for m in methods:
                if on_method:
                    on_method(run.trace.id, setting, m)
                t0, cpu0 = time.perf_counter(), time.process_time()
                ctx = BlameContext(read, loss, scorer, seed)
                verdict = blame_episode(m, read, loss, scorer, seed=seed, context=ctx)
                rec["methods"][m] = {**score(run.trace, verdict.ranking, run),
                                     "seconds": round(time.perf_counter() - t0, 3),
                                     "cpu_seconds": round(time.process_time() - cpu0, 3)}
                if scorer is not None:  # the calls the walk needed and could not read (longer than the context)
                    rec["methods"][m]["skipped"] = ctx.skipped_calls()
            append_line(path, json.dumps(rec))
            records.append(rec)
            if on_run:
                on_run(rec)
    return records


def _read(trace: Trace, scorer: Any, window: int | None, edges: str, calls_in_history: bool = False) -> Trace:
    """The trace the methods read: with earlier tool calls in the histories (``calls_in_history``), within ``window``
    tokens (with a scorer), on the ``edges`` asked for."""
    if calls_in_history:
        from agentgrad.attribution.render import calls_in_history as with_calls

        trace = with_calls(trace)
    if window is not None and scorer is not None:
        from agentgrad.attribution.render import window_trace

        trace = window_trace(scorer.tokenizer, trace, window)
    if edges != "all":
        from agentgrad.runs.blame import with_edges

        trace = with_edges(trace, edges)
    return trace


def summary(records: list[dict[str, Any]], resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Per subset and loss setting: each half's accuracies (None for a half with no run, or where a
    method did not run on every run of it: a run of one half only), the best prior of half A (step level,
    then agent level), and on half B each method's paired difference from it at both levels."""
    out: dict[str, Any] = {}
    for subset, setting in sorted({(r["subset"], r["loss"]) for r in records}):
        rows = [r for r in records if r["subset"] == subset and r["loss"] == setting]
        halves = {h: [r for r in rows if r["half"] == h] for h in ("A", "B")}
        named = list(dict.fromkeys(m for r in rows for m in r["methods"]))
        ran = {h: [m for m in named if hs and all(m in r["methods"] for r in hs)] for h, hs in halves.items()}
        methods = [m for m in named if m in ran["A"] or m in ran["B"]]
        acc = {h: {m: {lvl: sum(r["methods"][m][lvl] for r in hs) / len(hs) for lvl in ("agent", "step")}
                   if m in ran[h] else None for m in methods} for h, hs in halves.items()}
        priors = [m for m in ran["A"] if m in PRIORS]
        best = max(priors, key=lambda m: (acc["A"][m]["step"], acc["A"][m]["agent"], -priors.index(m))) \
            if priors else None
        report = halves["B"]
        diffs = {}
        if best in ran["B"]:
            for m in ran["B"]:
                diffs[m] = {lvl: paired([r["methods"][m][lvl] for r in report], [r["methods"][best][lvl] for r in report],
                                        resamples, seed) for lvl in ("agent", "step")}
        out[f"{subset}/{setting}"] = {"runs": {h: sum(r["half"] == h for r in rows) for h in ("A", "B")},
                                      "accuracy": acc, "best_prior": best, "paired": diffs,
                                      "agreement": agreement(rows, [m for m in methods if m in ran["A"] and m in ran["B"]])}
    return out


def agreement(rows: list[dict[str, Any]], methods: list[str]) -> dict[str, Any] | None:
    """The confidence signal measured here: per half, the default method's runs where its top call is
    provenance's (step level) and, in records that keep it, where its top call's agent is provenance's
    (agent level, the signal as ``agentgrad blame`` prints it), with the default's accuracy at both
    levels on each side. None without both methods' top calls."""
    from agentgrad.blame.methods import DEFAULT_METHOD

    pair = (DEFAULT_METHOD, "provenance")
    if any(m not in methods for m in pair) or not all(r["methods"][m].get("top") for r in rows for m in pair):
        return None
    levels = [("step", lambda a, b: a["top"][0] == b["top"][0])]
    if all("top_agent" in r["methods"][m] for r in rows for m in pair):  # records before it kept only the call
        levels.insert(0, ("agent", lambda a, b: a["top_agent"] == b["top_agent"]))
    out: dict[str, Any] = {}
    for h in ("A", "B"):
        half = [r for r in rows if r["half"] == h]
        for level, same in levels:
            sides: dict[str, list[dict[str, Any]]] = {"agree": [], "disagree": []}
            for r in half:
                a, b = r["methods"][DEFAULT_METHOD], r["methods"]["provenance"]
                sides["agree" if same(a, b) else "disagree"].append(a)
            out[f"{h}/{level}"] = {side: {"n": len(xs), "agent": sum(x["agent"] for x in xs),
                                          "step": sum(x["step"] for x in xs)} for side, xs in sides.items()}
    return out


def _pair(p: dict[str, Any]) -> str:
    lo, hi = p["ci95"]
    return f"{p['diff']:+.2f} [{lo:+.2f}, {hi:+.2f}] ({p['wins']}/{p['losses']}, p {p['p']:.2f})"


def markdown(summ: dict[str, Any]) -> str:
    """The summary as markdown tables, one per subset and loss setting: each method's accuracy on both
    halves and, on half B, its paired difference from the best prior of half A (wins/losses, sign test)."""
    out = []
    for group, g in summ.items():
        best = g["best_prior"]
        out += [f"{group}: {g['runs']['A']} runs in half A, {g['runs']['B']} in half B; best prior on A: {best}", "",
                "| method | agent A | step A | agent B | step B | agent B - best prior | step B - best prior |",
                "|---|---|---|---|---|---|---|"]
        for m, acc in g["accuracy"]["A"].items():
            b = g["accuracy"]["B"][m]
            p = g["paired"].get(m)
            cells = [_pair(p["agent"]), _pair(p["step"])] if p and m != best else ["-", "-"]
            a_b = [f"{x[lvl]:.2f}" if x is not None else "-" for x in (acc, b) for lvl in ("agent", "step")]
            out.append(f"| {m} | {' | '.join(a_b)} | {cells[0]} | {cells[1]} |")
        out.append("")
        for key, sides in (g.get("agreement") or {}).items():
            half, level = key.split("/")
            out.append(f"{group}: agreement half {half}, {level} level: " + "; ".join(
                f"{side} {c['n']} runs, default right {c['agent']:.0f} (agent) {c['step']:.0f} (step)"
                for side, c in sides.items()))
        if g.get("agreement"):
            out.append("")
    return "\n".join(out).rstrip() + "\n"
