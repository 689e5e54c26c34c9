"""``agentgrad bench inject``: faults injected into real runs, everything downstream generated again.

The planted-fault benchmark re-scores text no model wrote; here a real model (SmolLM2 by default)
runs the three look-up systems of :mod:`agentgrad.benchmarks.ablation.cases` (``pipeline``,
``fanin``, ``manager``, clean prompts, greedy decoding) on questions about customer records with
exact answers (the test split by default). Per question and system:

1. the clean run; only those whose final answer is right (the ``lookup`` metric passes) are kept;
2. per **position** (every agent call on the path to the final answer, the final agent included)
   and **kind** (:mod:`agentgrad.benchmarks.inject.corrupt`): the episode again, with that agent's
   model replaced by one that returns the corrupted output instead of generating. Every other agent
   runs on the real model, so everything downstream of the injection is generated again;
3. an episode whose final answer went from right to wrong has **propagated**: it is scored. The
   truth is the injected call's node and its agent; the verbal loss is the ``lookup`` task's
   (expected and produced answer; its span is where the final answer names a wrong value: the
   record's other values or another record's value of the same field, else the whole answer);
   every requested blame method of the registry runs on it through one :class:`BlameContext` and
   is scored as ``bench blame`` scores it (:func:`~agentgrad.benchmarks.planted.scoring.score_methods`).
   An episode whose answer stayed right was **absorbed**: counted, not scored. An injection that
   leaves the output as it was (``unchanged``) is counted apart.

Outputs (``OUT``): ``bench.json`` (the setup), ``clean/`` (one record per clean run),
``episodes/`` (one record per injection; the propagated ones hold the methods' scores, as ``bench
blame``'s do), ``traces/`` and ``attribution/`` of the scored episodes, ``metrics.json`` (the methods
by system, kind, position and whether the position is the final agent; the propagation counts).
``--resume`` reads finished clean runs and episodes back.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

from agentgrad.benchmarks.ablation.cases import SYSTEMS, Case, make_splits
from agentgrad.benchmarks.inject.corrupt import KINDS, corrupt, field_values
from agentgrad.benchmarks.planted.records import check_setup, read_back, write_episode
from agentgrad.benchmarks.planted.scoring import Cost, score_methods
from agentgrad.benchmarks.planted.summary import summarize
from agentgrad.core.stats import wilson
from agentgrad.blame.context import BlameContext
from agentgrad.blame.methods import get_blame_method, needs_scorer, with_reader
from agentgrad.core.files import RunFiles
from agentgrad.errors import AgentgradError, ConfigError
from agentgrad.optim.tasks import LookupTask
from agentgrad.runs.graph_system import GraphSystem
from agentgrad.runs.replay import TEMPERATURE, Fixed, Replayer

# The fact reader of the walks that follow the wrong text (agentgrad.blame.facts): every injected-fault figure
# was made reading the logs as `key: value` lines, before the readers existed (2026-12-03); detection
# would read most of these logs as prose, whose units differ, so the benchmark keeps `lines`. A method
# named NAME@READER keeps its own reader.
READER = "lines"

GROUPS = (("system",), ("kind",), ("position",), ("final",), ("system", "kind"), ("system", "position"))
SPLITS = ("train", "val", "test")


Injected = Fixed  # the injected call's model: it returns the corrupted output instead of generating


def lookup_examples(split: str = "test", questions: int | None = None) -> list[dict[str, Any]]:
    """The first ``questions`` examples of ``split``, each with ``wrong_values`` (the other records'
    values of its field that are not its own record's) added to ``avoid``: a final answer that names
    one fails, and the loss's span points at it."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    splits = make_splits()
    every = [ex for rows in splits.values() for ex in rows]
    rows = splits[split]
    if questions is not None and not 1 <= questions <= len(rows):
        raise ConfigError(f"--questions must be between 1 and {len(rows)} (the {split} split's size), got {questions}")
    out = []
    for ex in rows[:questions]:
        own = {v.lower() for v in [ex["answer"], *ex["avoid"]]}
        wrong = [v for v in field_values(every, ex["field"]) if v.lower() not in own]
        out.append({**ex, "wrong_values": wrong, "avoid": [*ex["avoid"], *wrong]})
    return out


def check_options(systems: list[str], kinds: list[str], methods: list[str], split: str = "test",
                  questions: int | None = None, out: Path | None = None, resume: bool = False) -> None:
    """Every option's one-line error, before a model is loaded: unknown systems, kinds, methods or
    split, a question count out of range, a non-empty ``out`` without ``resume``."""
    for what, names, valid in (("system", systems, SYSTEMS), ("injection kind", kinds, KINDS)):
        bad = [n for n in names if n not in valid]
        if bad or not names:
            raise ConfigError(f"unknown {what} {bad[0] if bad else '(none)'!r}; valid: {', '.join(valid)}, all")
    if not methods:
        raise ConfigError("--methods selects no method")
    for m in methods:
        get_blame_method(m)  # an unknown name: a one-line error with the valid ones
    lookup_examples(split, questions)
    if out is not None:
        out = Path(out)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {out} exists and is not a directory")
        if out.exists() and any(out.iterdir()):
            if not (out / "bench.json").is_file():  # not a folder this benchmark wrote: nothing to resume
                raise ConfigError(f"--out {out} is not empty and holds no `bench inject` run (no bench.json), so "
                                  f"there is nothing to resume: choose another --out, or empty that folder")
            if not resume:
                raise ConfigError(f"--out {out} is not empty: pass --resume to continue the benchmark there, or "
                                  f"another --out")


def _read(files: RunFiles | None, *parts: str) -> dict[str, Any] | None:
    if files is None:
        return None
    try:
        return json.loads(files.path(*parts).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def clean_run(system: GraphSystem, task: LookupTask, ex: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The clean episode's record: whether its answer is right, and the positions (each agent call on
    the path to the final answer: agent, node, clean output)."""
    rec: dict[str, Any] = {"run": run_id, "question": ex["id"]}
    try:
        ep = system.run(ex, id=run_id)
    except AgentgradError as e:  # a run that fails (a reply too long for the context, ...) is not kept
        return rec | {"passed": False, "error": str(e), "positions": []}
    score = task.metric(ex, ep.output, ep.trace)
    nodes = ep.trace.upstream(ep.output.node)
    return rec | {"passed": score.passed, "output": str(ep.output),
                  "positions": [{"agent": ep.trace.nodes[n].name, "node": n, "text": ep.trace.nodes[n].text,
                                 "final": n == ep.output.node} for n in nodes if ep.trace.nodes[n].kind == "call"]}


def run_inject(model: Any, scorer: Any, methods: list[str], systems: list[str] | None = None,
               kinds: list[str] | None = None, questions: int | None = None, out: Path | None = None,
               seed: int = 0, judge: Any = None, resume: bool = False, split: str = "test",
               setup: dict[str, Any] | None = None, model_spec: dict[str, Any] | None = None,
               on_episode: Callable[[dict[str, Any]], None] | None = None, replays: int = 3,
               status: Callable[[str], Any] | None = None, on_start: Callable[[], None] | None = None) -> dict[str, Any]:
    """Inject every kind at every position of every clean run that is right; returns the metrics.

    Args:
        model: the agents' model (every agent, also downstream of an injection), or a ``--model``
            value, loaded once the options are checked (:func:`load_model`, with the scorer on its
            weights where a method reads one and ``scorer`` is None).
        scorer: the white-box scorer of the gradient, occlusion and temporal methods (None without).
        methods: blame method names of the registry (see :func:`~agentgrad.blame.methods.select_methods`).
        systems, kinds: subsets of ``SYSTEMS`` and ``KINDS`` (None: all).
        questions: the first N questions of ``split`` (None: all).
        out: the output folder (see the module docstring); it must be new or empty unless ``resume``.
        seed: the wrong values and the methods' tie-breaking.
        judge: the judge of the ``judge:*`` methods (or a model value).
        setup: what produced the figures (the model, the judge), written to ``bench.json`` with the
            seed and split; a resumed run must have the same.
        model_spec: the ``models:`` entry recorded in the systems' configurations (default: the fake backend;
            ``model`` is what runs).
        replays: fresh samples per upstream call of the ``replay`` method (at temperature
            :data:`~agentgrad.runs.replay.TEMPERATURE`, everything downstream generated again).
        status: a context manager for what is being loaded (``console.status``); ``on_start``: told
            when the runs start.
    """
    systems, kinds = list(systems or SYSTEMS), list(kinds or KINDS)
    check_options(systems, kinds, methods, split, questions, out, resume)
    if replays < 1:
        raise ConfigError("--replays must be at least 1")
    if isinstance(model, str) or isinstance(judge, str):
        from agentgrad.blame.judge import Judge, make_judge

        with status(f"loading {model if isinstance(model, str) else 'the judge'}") if status else nullcontext():
            if isinstance(model, str):
                model, found = load_model(model, scorer is None and any(needs_scorer(m) for m in methods))
                scorer = scorer if scorer is not None else found
            if isinstance(judge, str):
                judge = Judge(make_judge(judge)) if judge else None
    if on_start:
        on_start()
    examples = lookup_examples(split, questions)
    fns = {m: get_blame_method(with_reader(m, READER)) for m in methods}  # the benchmark's declared reader
    files = RunFiles(out) if out else None
    setup = {**(setup or {}), "seed": seed, "split": split}
    if "replay" in methods:  # what the replay method's figures depend on
        setup |= {"replays": replays, "replay_temperature": TEMPERATURE}
    if out is not None:
        check_setup(Path(out), setup, resume)
        files.write_json("bench.json", data=setup)  # type: ignore[union-attr]
    clean_runs: list[dict[str, Any]] = []
    injections: list[dict[str, Any]] = []
    for name in systems:
        cfg = Case(name, None).config(model_spec or {"backend": "fake"})
        task = LookupTask(cfg, {}, None)
        for ex in examples:
            run_id = f"{name}-{ex['id']}"
            clean = _read(files, "clean", f"{run_id}.json") if resume else None
            if clean is None:
                clean = clean_run(GraphSystem(cfg, {"default": model}), task, ex, run_id) | {"system": name}
                if files:
                    files.write_json("clean", f"{run_id}.json", data=clean)
            clean_runs.append(clean)
            if not clean["passed"]:
                continue
            for pos in clean["positions"]:
                for kind in kinds:
                    rec = _inject(model, scorer, cfg, task, ex, clean, pos, kind, fns, methods, files, seed,
                                  judge, resume, replays)
                    injections.append(rec)
                    if on_episode:
                        on_episode(rec)
    metrics = summarize_inject(clean_runs, injections, methods)
    if files:
        files.write_json("metrics.json", data=metrics)
    return metrics


def load_model(value: str, scored: bool) -> tuple[Any, Any]:
    """The agents' model from a ``--model`` value (memoised greedy replies: the calls upstream of an
    injection are the clean run's) and, when ``scored`` (a method reads a white-box scorer), the
    scorer on its weights (a local model only)."""
    from agentgrad.attribution.factory import make_scorer
    from agentgrad.benchmarks.ablation.bench import memo_model
    from agentgrad.core.config import model_spec_from_value
    from agentgrad.models.registry import create_model

    spec = model_spec_from_value(value)
    inner = create_model("default", spec.backend, **spec.options())
    scorer = make_scorer(inner, on_too_long="skip",
                         hint=f"--model {value!r} is not a local model: choose methods without a scorer "
                              f"(random, all, last, judge)") if scored else None
    return memo_model(inner), scorer


def _inject(model: Any, scorer: Any, cfg: Any, task: LookupTask, ex: dict[str, Any], clean: dict[str, Any],
            pos: dict[str, Any], kind: str, fns: dict[str, Any], methods: list[str], files: RunFiles | None,
            seed: int, judge: Any, resume: bool, replays: int = 3) -> dict[str, Any]:
    """One injection: read back (``resume``) or run, and score it when it propagated."""
    eid = f"{clean['run']}-{pos['agent']}-{kind}"
    if resume and files:
        done = _read(files, "episodes", f"{eid}.json")
        if done is not None and done.get("status") != "propagated":
            return done
        done = read_back(files, eid, methods, False) if done is not None else None
        if done is not None:
            return done
    text = corrupt(kind, pos["text"], ex, ex["wrong_values"], seed)
    rec: dict[str, Any] = {"episode": eid, "system": clean["system"], "question": ex["id"], "kind": kind,
                           "position": pos["agent"], "final": pos["final"], "clean_output": pos["text"],
                           "injected": text}
    if text == pos["text"]:
        rec["status"] = "unchanged"
    else:
        system = GraphSystem(cfg, {"default": model})
        system.nodes[pos["agent"]].model = Injected(model, text)
        try:
            ep = system.run(ex, id=eid)
        except AgentgradError as e:  # a downstream reply that breaks the run: counted, not scored
            rec |= {"status": "error", "error": str(e)}
        else:
            score = task.metric(ex, ep.output, ep.trace)
            node = next(n.id for n in ep.trace.nodes if n.kind == "call" and n.name == pos["agent"])
            rec |= {"output": str(ep.output), "truth": {"agent": pos["agent"], "node": node},
                    "status": "absorbed" if score.passed else "propagated"}
            if not score.passed:
                loss = task.loss(ex, ep.output, ep.trace, score)
                tie = int(hashlib.sha256(eid.encode()).hexdigest()[:8], 16)  # the same seed whatever is selected
                replayer = Replayer(lambda: GraphSystem(cfg, {"default": model}), ex, ep.trace,
                                    lambda out, trace: task.metric(ex, out, trace).passed, seed, episode=eid)
                ctx = BlameContext(ep.trace, loss, scorer, seed=seed + tie, judge=judge, replayer=replayer,
                                   replays=replays, meter=Cost())
                rec |= {"candidates": len(ctx.upstream()), "methods": score_methods(ctx, fns, pos["agent"], node),
                        "loss": loss.to_dict()}
                if files:
                    write_episode(files, ep.trace, loss, ctx, scorer, seed)
    if files:
        files.write_json("episodes", f"{eid}.json", data=rec)
    return rec


def _share(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Injections that changed the output and ran: how many propagated, with a 95% interval."""
    ran = [r for r in records if r["status"] in ("propagated", "absorbed")]
    k = sum(r["status"] == "propagated" for r in ran)
    return {"injected": len(ran), "propagated": k, "share": k / len(ran) if ran else 0.0,
            "ci95": list(wilson(k, len(ran))),
            "unchanged": sum(r["status"] == "unchanged" for r in records),
            "errors": sum(r["status"] == "error" for r in records)}


def summarize_inject(clean: list[dict[str, Any]], injections: list[dict[str, Any]],
                     methods: list[str]) -> dict[str, Any]:
    """The planted benchmark's summary of the scored (propagated) episodes, grouped by system,
    kind, position and ``final``; the clean runs kept; the propagation share per group."""
    scored = [r for r in injections if r["status"] == "propagated"]
    metrics = summarize(scored, methods, GROUPS)
    metrics.pop("token", None)  # no token-level truth here
    groups: dict[str, list[dict[str, Any]]] = {"all": injections}
    for r in injections:
        for keys in GROUPS:
            groups.setdefault(",".join(f"{k}={r[k]}" for k in keys), []).append(r)
    by_system: dict[str, dict[str, int]] = {}
    for c in clean:
        s = by_system.setdefault(c["system"], {"runs": 0, "right": 0})
        s["runs"] += 1
        s["right"] += bool(c["passed"])
    metrics["clean"] = by_system
    metrics["propagation"] = {g: _share(rs) for g, rs in groups.items()}
    return metrics
