"""``agentgrad bench multiwoz evaluate`` and ``optimize``.

A run directory holds ``config.yaml``, ``events.jsonl`` (one ``dialogue`` record per finished
dialogue, written durably: its predictions and scores), ``traces/<dialogue>.json``,
``metrics.json`` and ``predictions.json`` = ``{dialogue_id: [{"turn", "state", "reply",
"response"}]}`` (``response`` is the delexicalised reply that Inform/Success read). An interrupted
evaluation resumes with ``--resume``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agentgrad.blame.backward import VerbalLoss
from agentgrad.benchmarks.common import apply_overrides, create_models, load_prompts, train_then_evaluate
from agentgrad.runs.runner import run_jobs
from agentgrad.benchmarks.data import benchmark_dir
from agentgrad.benchmarks.multiwoz.data import Dialogue, load_dialogues, sample
from agentgrad.benchmarks.multiwoz.db import VenueDB
from agentgrad.benchmarks.multiwoz.evaluator import compare_states, goal_of, inform_success, state_metrics
from agentgrad.benchmarks.multiwoz.loss import dialogue_loss
from agentgrad.benchmarks.multiwoz.system import DialogueOutcome, MultiWOZSystem, build_system
from agentgrad.core.trace import Trace, write_json_atomic
from agentgrad.errors import ConfigError
from agentgrad.optim.config import TrainerConfig
from agentgrad.optim.tasks import Score
from agentgrad.optim.trainer import set_prompts
from agentgrad.runs.rundir import RunDir


@dataclass
class WozOptions:
    """Everything that determines a MultiWOZ run."""

    system: str = "multi"
    prompts: str | None = None
    models: list[str] = field(default_factory=list)
    split: str = "test"
    n: int | None = 100
    seed: int = 42
    data: str | None = None

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.__dict__, sort_keys=True).encode()).hexdigest()[:16]


def load_booked_domains(data: str | Path | None = None) -> dict[str, list[list[str]]]:
    path = benchmark_dir("multiwoz", data) / "meta" / "booked_domains.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None


class WozSetup:
    """Configuration, models, database and system of a run (models are loaded once)."""

    def __init__(self, opts: WozOptions):
        self.opts = opts
        self._splits: dict[str, list[Dialogue]] = {}
        self.cfg = None
        self.models: dict[str, Any] = {}
        if opts.system != "gold":
            self.cfg = load_prompts("multiwoz", opts.system, opts.prompts)
            apply_overrides(self.cfg, opts.models)
        elif opts.models:
            raise ConfigError("--system gold replays the annotations and uses no model; drop --model")
        self.db = VenueDB(opts.data)
        self.booked = load_booked_domains(opts.data)
        if self.cfg is not None:
            self.models = create_models(self.cfg)
        self.system: MultiWOZSystem = build_system(opts.system, self.cfg, self.models, self.db)

    def dialogues(self, split: str | None = None, n: int | None = -1) -> list[Dialogue]:
        """The sampled dialogues of ``split`` (parsed once per setup: parsing a split takes seconds)."""
        split = split or self.opts.split
        if split not in self._splits:
            self._splits[split] = load_dialogues(split, self.opts.data)
        return sample(self._splits[split], self.opts.n if n == -1 else n, self.opts.seed)

    def verdict(self, outcome: DialogueOutcome) -> dict[str, Any]:
        d = outcome.dialogue
        return inform_success(goal_of(d), [t.response for t in outcome.turns], [t.state for t in outcome.turns],
                              self.booked.get(d.id, []), self.db)


def dialogue_record(dialogue: Dialogue, predictions: list[dict[str, Any]], db: VenueDB, booked: list[list[str]],
                    error: str | None = None, verdict: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``dialogue`` record of predicted turns (each with a flat ``state`` and a delexicalised
    ``response``): per-turn comparisons with the gold states, Inform and Success (``verdict``, when
    already computed)."""
    if verdict is None:
        verdict = inform_success(goal_of(dialogue), [t["response"] for t in predictions],
                                 [t["state"] for t in predictions], booked, db)
    turns = []
    for pred, gold in zip(predictions, dialogue.turns):
        c = compare_states(pred["state"], gold.state)
        turns.append(pred | {"gold_state": gold.state, "joint": c["joint"], "fp": c["fp"], "fn": c["fn"]})
    return {"dialogue": dialogue.id, "labels": dialogue.labels, "turns": turns,
            "inform": verdict["inform"], "success": verdict["success"], "match": verdict["match"],
            "provided": verdict["provided"], "error": error}


def score_dialogue(setup: WozSetup, outcome: DialogueOutcome) -> dict[str, Any]:
    """The ``dialogue`` record of a run: predictions, gold states, per-turn comparisons, Inform and Success."""
    d = outcome.dialogue
    return dialogue_record(d, [t.prediction() for t in outcome.turns], setup.db, setup.booked.get(d.id, []),
                           error=outcome.error)


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    pairs = [(t["state"], t["gold_state"]) for r in records for t in r["turns"]]
    n = len(records)
    return {"dialogues": n,
            "inform": 100 * sum(r["inform"] for r in records) / n if n else 0.0,
            "success": 100 * sum(r["success"] for r in records) / n if n else 0.0,
            **state_metrics(pairs),
            "labels": sorted({r["labels"] for r in records}),
            "errors": sum(r["error"] is not None for r in records)}


def evaluate(setup: WozSetup, run_dir: RunDir, on_dialogue: Callable[[dict[str, Any]], None] | None = None,
             prompts: dict[str, str] | None = None, concurrency: int = 1) -> dict[str, Any]:
    """Run every sampled dialogue not yet in ``run_dir``; write ``metrics.json`` and ``predictions.json``.

    Up to ``concurrency`` dialogues run at once, the longest (most turns) started first; each is
    recorded as soon as it ends.
    """
    if prompts:
        set_prompts(setup.system, prompts)
    dialogues = setup.dialogues()
    done = {e["dialogue"] for e in run_dir.events() if e.get("event") == "dialogue"}

    def run(d: Dialogue) -> DialogueOutcome:
        ep = setup.system.run({"dialogue": d}, id=d.id)
        ep.trace.save(run_dir.sample_path("traces", d.id))  # the trace first, then the record
        return ep.output

    def record(d: Dialogue, outcome: DialogueOutcome) -> None:
        rec = run_dir.log("dialogue", trace=run_dir.sample_path("traces", d.id).relative_to(run_dir.path).as_posix(),
                          **score_dialogue(setup, outcome))
        if on_dialogue:
            on_dialogue(rec)

    pending = [d for d in dialogues if d.id not in done]
    if concurrency > 1:  # longest first: the run does not end waiting on a long dialogue started last
        pending.sort(key=lambda d: -len(d.turns))
    run_jobs(pending, run, concurrency, record)
    wanted = {d.id for d in dialogues}
    records = [e for e in run_dir.events() if e.get("event") == "dialogue" and e["dialogue"] in wanted]
    o = setup.opts
    metrics = summarize(records) | {"system": o.system, "split": o.split, "n": o.n, "seed": o.seed,
                                    "models": {k: s.model_dump() for k, s in (setup.cfg.models.items() if setup.cfg
                                                                               else [])}}
    write_json_atomic(run_dir.path / "metrics.json", metrics)
    write_json_atomic(run_dir.path / "predictions.json",
                      {r["dialogue"]: [{k: t[k] for k in ("turn", "state", "reply", "response")} for t in r["turns"]]
                       for r in records})
    return metrics


class WozTask:
    """MultiWOZ as a trainer task: the validation split is the training pool (the paper's protocol)."""

    name = "multiwoz"

    def __init__(self, setup: WozSetup):
        self.setup = setup

    def examples(self, split: str) -> list[dict[str, Any]]:
        split = {"train": "val", "val": "val"}.get(split, split)
        return [{"id": d.id, "dialogue": d} for d in load_dialogues(split, self.setup.opts.data)]

    def build_system(self) -> MultiWOZSystem:
        return self.setup.system

    def metric(self, example: dict[str, Any], output: Any, trace: Trace) -> Score:
        verdict = self.setup.verdict(output)
        joint = [compare_states(r.state, g.state)["joint"] for r, g in zip(output.turns, output.dialogue.turns)]
        value = sum(joint) / max(len(joint), 1)
        return Score(value, all(joint) and verdict["success"], {"jga": value, "inform": verdict["inform"],
                                                                  "success": verdict["success"], "verdict": verdict})

    def loss(self, example: dict[str, Any], output: Any, trace: Trace, score: Score) -> VerbalLoss | None:
        return dialogue_loss(output, score.details["verdict"])  # computed once, by metric


def optimize(setup: WozSetup, out: Path, resume: bool, method: str, samples: int = 30, step_every: int = 3,
             seed: int = 0, scorer: str | None = None, optimizer: str | None = None,
             on_event: Callable | None = None, on_dialogue: Callable | None = None,
             concurrency: int = 1, optimizer_kind: str = "verbal") -> dict[str, Any]:
    """The paper's protocol: ``samples`` validation dialogues, a step every ``step_every``, then the test sample."""
    if setup.opts.system == "gold":
        raise ConfigError("the gold system has no prompts to optimise; use --system multi or single")
    digest = hashlib.sha256(
        f"{setup.opts.digest()}|{method}|{samples}|{step_every}|{seed}|{scorer}|{optimizer}|{optimizer_kind}".encode()
    ).hexdigest()[:16]
    return train_then_evaluate(
        WozTask(setup), setup.models, out, resume, method,
        TrainerConfig(samples=samples, step_every=step_every, seed=seed), scorer, optimizer, digest,
        {"benchmark": "multiwoz", "options": setup.opts.__dict__, "samples": samples, "step_every": step_every,
         "seed": seed},
        lambda run_dir, prompts: evaluate(setup, run_dir, on_dialogue, prompts, concurrency), on_event, optimizer_kind,
        concurrency)
