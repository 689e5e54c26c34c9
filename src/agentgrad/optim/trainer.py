"""The optimisation loop: run, score, attribute failures, backward, step, gate, checkpoint.

Per sample: run the system, score it with the task's metric, build the loss; for a failure,
attribute the trace (GBC) and blame it with a registry method (:mod:`agentgrad.blame.methods`;
default ``gbc:max_l1:targeted:blend``): the agents tied at the top of its ranking are blamed, and
the paths it walked are the trajectories the optimizer reads. Every ``step_every``
samples: the optimizer rewrites the blamed agents' prompts; an optional validation gate keeps
them only if the validation score does not drop by more than a tolerance; then a checkpoint is
written atomically. With ``trainer.test``, the starting and the final prompts are scored after the
loop on a held-out test split that no step reads (the figure to report: the gate's own validation
questions chose the prompts). A run killed at any point resumes from its last checkpoint and, with
deterministic backends, ends exactly as an uninterrupted run would.
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from agentgrad.attribution.io import attribution_record
from agentgrad.attribution.scorer import Scorer
from agentgrad.blame.backward import Trajectory, VerbalLoss, render_trajectories
from agentgrad.blame.methods import DEFAULT_METHOD, edge_rule
from agentgrad.blame.outcome import blame_episode
from agentgrad.core.agent import Prompt
from agentgrad.core.system import System
from agentgrad.core.files import safe_name, write_json_atomic
from agentgrad.core.trace import Trace
from agentgrad.errors import AgentgradError, ConfigError, ModelError, ServerUnreachableError, TraceError
from agentgrad.optim.config import TrainerConfig
from agentgrad.optim.optimizer import Failure, Optimizer, StepInput, TargetSource, render_feedback
from agentgrad.optim.tasks import Task
from agentgrad.runs.checkpoint import read_checkpoint, rng_state, save_prompts, set_rng_state, write_checkpoint
from agentgrad.runs.rundir import RunDir
from agentgrad.runs.runner import run_jobs


def get_prompts(system: System) -> dict[str, Prompt]:
    return {n: a.prompt for n, a in system.agents().items()}  # type: ignore[misc]


def set_prompts(system: System, prompts: dict[str, str]) -> None:
    agents = system.agents()
    for name, text in prompts.items():
        agents[name].prompt = agents[name].prompt.replace(text)  # type: ignore[union-attr]


@dataclass
class Collected:
    """What one failed sample contributes to the next step."""

    sample: str
    trajectories: list[Trajectory]
    loss: VerbalLoss
    rendered: dict[str, str]  # agent -> this sample's trajectories through it, rendered
    excerpts: dict[str, list[str]]  # agent -> its outputs on this sample's trajectories
    agents: list[str]  # every agent that made a call in the failed episode
    blamed: list[str] = field(default_factory=list)  # the agents the blame method puts at the top
    pairs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # agent -> (output, target)
    # agent -> per call on the failure paths, (start, end, L1) of its prompt's tokens (prompt_weights)
    prompt_scores: dict[str, list[list[tuple[int, int, float]]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"sample": self.sample, "trajectories": [t.to_dict() for t in self.trajectories],
                "loss": self.loss.to_dict(), "rendered": self.rendered, "excerpts": self.excerpts,
                "agents": self.agents, "blamed": self.blamed, "pairs": self.pairs, "prompt_scores": self.prompt_scores}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Collected":
        return cls(d["sample"], [Trajectory(t["nodes"], t["agents"], VerbalLoss.from_dict(t["loss"]))
                                 for t in d["trajectories"]], VerbalLoss.from_dict(d["loss"]), d["rendered"],
                   d["excerpts"], d["agents"], d["blamed"], {a: [tuple(p) for p in ps] for a, ps in d["pairs"].items()},
                   {a: [[tuple(x) for x in c] for c in cs] for a, cs in d["prompt_scores"].items()})


def prompt_scores(results: list[Any], trajectories: list[Trajectory]) -> dict[str, list[list[tuple[int, int, float]]]]:
    """Per agent, for each of its calls on the trajectories: (start, end, L1) of its prompt's tokens
    (characters of the prompt), from attributions scored with ``prompt_weights``; else nothing."""
    by_node = {a.node_id: a for a in results}
    out: dict[str, list[list[tuple[int, int, float]]]] = {}
    for n in dict.fromkeys(n for t in trajectories for n in t.nodes):
        a = by_node.get(n)
        if a is not None and a.prompt is not None and a.prompt.l1:
            out.setdefault(a.agent, []).append([(c[1], c[2], v) for c, v in zip(a.prompt.chars, a.prompt.l1) if c])
    return out


class Trainer:
    """Runs the optimisation loop of a task into a run directory.

    Args:
        task: dataset, system, metric and losses.
        scorer: the white-box scorer for attribution.
        optimizer: rewrites prompts (LLM or deterministic).
        cfg: samples, step size, seed, validation gate, rendering limits.
        run_dir: where everything is written; ``RunDir(resume=True)`` to continue a run.
        method, top_k, max_paths: the blame method (any name of :mod:`agentgrad.blame.methods`), the
            edges its path walks keep per call, and the most trajectories per sample.
        judge: the :class:`~agentgrad.blame.judge.Judge` of the ``judge:*`` methods.
        config_digest: identifies the configuration; a resumed run must have the same.
        on_event: called with every logged event (for progress displays).
    """

    def __init__(self, task: Task, scorer: Scorer, optimizer: Optimizer, cfg: TrainerConfig, run_dir: RunDir,
                 method: str = DEFAULT_METHOD, top_k: int = 1, max_paths: int = 16, config_digest: str = "",
                 on_event: Callable[[dict[str, Any]], None] | None = None, concurrency: int | None = None,
                 judge: Any = None):
        self.task, self.scorer, self.optimizer, self.cfg, self.run_dir = task, scorer, optimizer, cfg, run_dir
        self.concurrency = max(1, concurrency if concurrency is not None else cfg.concurrency)
        self._scorer_lock = threading.Lock()  # one attribution at a time: the scorer's prefix cache is shared
        self.method, self.top_k, self.max_paths, self.judge = method, top_k, max_paths, judge
        self.weight = edge_rule(method)  # an unknown method fails here, before any episode runs
        self.digest = config_digest
        self.on_event = on_event
        self.system = task.build_system()
        self.rng = random.Random(cfg.seed)
        train = task.examples("train")
        order = list(range(len(train)))
        random.Random(cfg.seed).shuffle(order)  # the sample order depends on the seed only
        self.train = [train[i] for i in order[: cfg.samples]]
        self.val = task.examples("val")[: cfg.validation.size] if cfg.validation else []
        self.test = task.examples("test")[: cfg.test.size or None] if cfg.test else []  # a missing split fails here
        seen: dict[str, int] = {}
        for i, ex in enumerate(train):  # two samples with one id would share their files
            sid = str(ex.get("id", "")) if isinstance(ex, dict) else ""
            if sid in seen:
                raise ConfigError(f"training examples {seen[sid] + 1} and {i + 1} have the same id {sid!r}; "
                                  f"give every example a distinct id")
            seen[sid] = i
            run_dir.names.claim(sid)  # refuses two ids that would share a file name
    # --- paths and events -------------------------------------------------------------------
    def log(self, event: str, **fields: Any) -> None:
        record = self.run_dir.log(event, **fields)
        if self.on_event:
            self.on_event(record)

    # --- state --------------------------------------------------------------------------------
    def _state(self, next_sample: int, step: int, val_score: float | None, history: list, scores: dict,
               accepted: int, rejected: int) -> dict[str, Any]:
        return {
            "config": self.digest, "next_sample": next_sample, "step": step,
            "prompts": {n: p.text for n, p in get_prompts(self.system).items()}, "val_score": val_score,
            "history": history, "train_scores": scores, "accepted": accepted, "rejected": rejected,
            "rng": rng_state(self.rng),
        }

    def _load(self) -> dict[str, Any] | None:
        state = read_checkpoint(self.run_dir.path, self.digest)
        if state is None:
            return None
        set_rng_state(self.rng, state["rng"])
        set_prompts(self.system, state["prompts"])
        return state

    # --- one sample -----------------------------------------------------------------------------
    def _sample(self, example: dict[str, Any], seed: int) -> tuple[float, Collected | None, tuple]:
        """One sample, without logging (safe to run in several threads at once: generation runs
        concurrently, attribution one at a time); returns its event for the caller to log in order.
        Run, score, and for a failure: attribute and blame, write targets, keep what the optimizer reads."""
        sid = str(example["id"])
        try:
            ep = self.system.run(example, id=sid)
        except ServerUnreachableError:  # a model server that is not there stops the run (checkpoint kept)
            raise
        except AgentgradError as e:  # a user-level failure of one episode is logged, not fatal
            return 0.0, None, ("sample_failed", {"sample": sid, "error": str(e)})
        score = self.task.metric(example, ep.output, ep.trace)
        loss = self.task.loss(example, ep.output, ep.trace, score)
        collected = self._learn(sid, ep.trace, loss, score, seed) if loss is not None else None
        ep.trace.save(self.run_dir.sample_path("traces", sid))
        return score.value, collected, ("sample", {
            "sample": sid, "score": score.value, "passed": score.passed,
            "blamed": sorted(collected.blamed) if collected else []})

    def _blame(self, trace: Trace, loss: VerbalLoss, seed: int) -> tuple[Any, Any, Any, str | None]:
        """The scorer's attribution of a failed episode and the blame method's outcome (None, with
        the reason, for an episode that cannot be blamed: it teaches nothing)."""
        with self._scorer_lock:  # the scorer's prefix cache (and a judge's state) is shared
            results, graph = self.scorer.attribute(trace)
            try:
                outcome = blame_episode(self.method, trace, loss, self.scorer, results=results, seed=seed,
                                        top_k=self.top_k, max_paths=self.max_paths, judge=self.judge)
                return results, graph, outcome, None
            except (ModelError, TraceError) as e:
                return results, graph, None, str(e)

    def _targets(self, trace: Trace, outcome: Any, loss: VerbalLoss, record: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
        """Target back-propagation along the walked edges, for an optimizer that learns from targets:
        (output, target) pairs per agent, the targets written into ``record``."""
        if not isinstance(self.optimizer, TargetSource) or outcome is None:
            return {}
        try:
            targets = self.optimizer.targets(trace, outcome.parents, loss)
        except AgentgradError as e:  # a target writer that failed: this sample gives no pairs
            targets = {}
            record["targets_error"] = str(e)
        record["targets"] = {str(n): t for n, t in sorted(targets.items())}
        pairs: dict[str, list[tuple[str, str]]] = {}
        for n, t in sorted(targets.items()):
            pairs.setdefault(trace.nodes[n].name, []).append((trace.nodes[n].text, t))
        return pairs

    def _learn(self, sid: str, trace: Trace, loss: VerbalLoss, score: Any, seed: int) -> Collected:
        """What a failed sample teaches: blame, trajectories, targets; its attribution record written."""
        loss.attach(trace)
        results, graph, outcome, blame_error = self._blame(trace, loss, seed)
        trajs = outcome.trajectories if outcome else []
        trace_rel = self.run_dir.sample_path("traces", sid).relative_to(self.run_dir.path).as_posix()
        record = attribution_record(trace, results, graph, self.scorer, self.method, self.top_k, seed,
                                    trace_rel, self.weight)
        record["loss"] = loss.to_dict()
        record["score"] = score.value  # what agentgrad.blame.credit splits
        record["trajectories"] = [t.to_dict() for t in trajs]
        record["blame"] = outcome.to_dict() if outcome else {"method": self.method, "error": blame_error}
        pairs = self._targets(trace, outcome, loss, record)
        write_json_atomic(self.run_dir.sample_path("attribution", sid), record)
        excerpts: dict[str, list[str]] = {}
        for t in trajs:
            for n in t.nodes:
                node = trace.nodes[n]
                if node.kind == "call":
                    excerpts.setdefault(node.name, []).append(node.text)
        rendered = {a: render_trajectories(trace, [t for t in trajs if a in t.agents],
                                           self.cfg.render.max_node_chars, self.cfg.render.max_chars)
                    for a in excerpts}
        return Collected(sid, trajs, loss, rendered, excerpts, sorted({n.name for n in trace.calls()}),
                         outcome.agents if outcome else [], pairs, prompt_scores(results, trajs))

    def _map(self, fn: Callable[[Any], Any], items: list[Any], phase: str | None = None) -> list[Any]:
        """``fn`` over ``items``, ``concurrency`` at a time, results in the items' order; with a ``phase``,
        a transient ``progress`` event (not logged) after each item, for the progress display."""
        out: dict[int, Any] = {}

        def done(job: Any, result: Any) -> None:
            out[job[0]] = result
            if phase and self.on_event:
                self.on_event({"event": "progress", "phase": phase, "done": len(out), "total": len(items)})

        run_jobs(list(enumerate(items)), lambda job: fn(job[1]), self.concurrency, done)
        return [out[i] for i in range(len(items))]

    def run_batch(self, examples: list[dict[str, Any]]) -> list[tuple[float, Collected | None]]:
        """The samples of one step, concurrently; seeds drawn and events logged in sample order, so
        the run is the sequential one whatever the concurrency."""
        seeds = [self.rng.randrange(2**31) for _ in examples]  # drawn for every sample: the sequence never shifts
        results = self._map(lambda job: self._kept_sample(*job), list(zip(examples, seeds)))
        for ex, (value, collected, event) in zip(examples, results):
            d = self._read_pending(ex)
            if d is not None and d.get("logged"):
                continue  # logged before the stop
            self.log(event[0], **event[1])
            if d is not None:
                write_json_atomic(self._pending(ex), {**d, "logged": True})
        return [(value, collected) for value, collected, _ in results]

    # a sample finished before a stop (Ctrl-C during the step's other samples, its optimizer or its
    # validation) is kept in pending/ until the step's checkpoint, and a resumed run reads it back
    # instead of running it again (the seeds are drawn again in the same order from the checkpoint)
    def _pending(self, example: dict[str, Any]) -> Any:
        return self.run_dir.path / "pending" / (safe_name(str(example["id"])) + ".json")

    def _read_pending(self, example: dict[str, Any]) -> dict[str, Any] | None:
        path = self._pending(example)
        try:
            d = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        except (OSError, ValueError):
            return None  # unreadable: the sample runs again
        return d if isinstance(d, dict) else None

    def _kept_sample(self, example: dict[str, Any], seed: int) -> tuple[float, Collected | None, tuple]:
        d = self._read_pending(example)
        if d is not None and d.get("seed") == seed:
            try:
                return d["value"], Collected.from_dict(d["collected"]) if d["collected"] else None, tuple(d["event"])
            except (KeyError, TypeError, ValueError):
                pass
        value, collected, event = self._sample(example, seed)
        write_json_atomic(self._pending(example), {"seed": seed, "value": value, "logged": False, "event": list(event),
                                                   "collected": collected.to_dict() if collected else None})
        return value, collected, event

    def _drop_pending(self, examples: list[dict[str, Any]]) -> None:
        for ex in examples:
            self._pending(ex).unlink(missing_ok=True)

    def evaluate(self, examples: list[dict[str, Any]], phase: str | None = None) -> float:
        """Mean metric of the current prompts over ``examples`` (no attribution), concurrently; ``phase``
        names it in the progress events (``validation``, ``test, starting prompts``, ...)."""
        if not examples:
            return 0.0

        def one(ex: dict[str, Any]) -> float:
            try:
                ep = self.system.run(ex, id=str(ex["id"]))
                return self.task.metric(ex, ep.output, ep.trace).value
            except ServerUnreachableError:
                raise
            except AgentgradError:
                return 0.0

        return sum(self._map(one, examples, phase)) / len(examples)

    # --- one step -------------------------------------------------------------------------------
    def step(self, step: int, batch: list[Collected], scores: list[float], val_score: float | None,
             history: list[dict[str, Any]]) -> tuple[bool | None, float | None]:
        counts: dict[str, int] = {}  # agent -> the failed samples that blame it
        for c in batch:
            for a in c.blamed:
                counts[a] = counts.get(a, 0) + 1
        relevant = sorted({a for c in batch for a in c.agents})  # the paper: updated / relevant agents
        summary: dict[str, Any] = {"step": step, "train_score": sum(scores) / max(len(scores), 1),
                                   "failures": len(batch), "blamed": counts}
        if not batch:
            self.log("step", **summary, accepted=None, updated=[], update_frequency=0.0, note="no failures")
            return None, val_score
        prompts = get_prompts(self.system)
        # each failure stays apart: an agent is shown only the samples whose trajectories it is on
        failures = [Failure(c.sample, c.loss, c.rendered, c.excerpts) for c in batch]
        pairs: dict[str, list[tuple[str, str]]] = {}
        for c in batch:
            for a, ps in c.pairs.items():
                pairs.setdefault(a, []).extend(ps)
        scores: dict[str, list[list[tuple[int, int, float]]]] = {}
        for c in batch:
            for a, ps in c.prompt_scores.items():
                scores.setdefault(a, []).extend(ps)
        blamed = sorted(set(counts) | set(pairs))
        inp = StepInput(prompts=prompts, tools={n: [t.name for t in a.tools] for n, a in self.system.agents().items()},
                        blamed=blamed, feedback=render_feedback(failures, blamed, self.cfg.render.max_chars),
                        failures=failures, history=history[-self.cfg.history:] if self.cfg.history else [],
                        pairs=pairs, prompt_scores=scores)
        res = self.optimizer.step(inp)
        if res.skipped or not res.prompts:
            self.log("step", **summary, accepted=None, updated=[], update_frequency=0.0, skipped=res.skipped,
                     errors=res.errors, unconstrained=res.unconstrained)
            history.append({"step": step, "agents": [], "before": val_score, "after": val_score, "accepted": False})
            return None, val_score
        old = {n: p.text for n, p in prompts.items()}
        set_prompts(self.system, res.prompts)
        accepted, new_val = True, val_score
        if self.cfg.validation:
            new_val = self.evaluate(self.val, "validation of the new prompts")
            accepted = self.cfg.validation.accepts(val_score or 0.0, new_val)
            if not accepted:
                set_prompts(self.system, {n: old[n] for n in res.prompts})  # rejected: the old prompts back
        updated = sorted(res.prompts) if accepted else []
        rejected = {} if accepted else {"proposed": dict(res.prompts)}  # a rejected rewrite is kept in the log
        self.log("step", **summary, accepted=accepted, updated=updated, relevant=relevant,
                 update_frequency=len(updated) / max(len(relevant), 1), val_before=val_score, val_after=new_val,
                 attempts=res.attempts, errors=res.errors, notes=res.notes, unconstrained=res.unconstrained,
                 **rejected)
        history.append({"step": step, "agents": sorted(res.prompts), "before": val_score, "after": new_val,
                        "accepted": accepted, "notes": res.notes})
        if accepted:
            save_prompts(self.run_dir.path, step, {n: p.text for n, p in get_prompts(self.system).items()})
            return True, new_val
        return False, val_score

    # --- the loop ----------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        state = self._load()
        if state is None:
            val_score = self.evaluate(self.val, "validation of the starting prompts") if self.val else None
            state = self._state(0, 0, val_score, [], {}, 0, 0)
            save_prompts(self.run_dir.path, 0, state["prompts"])
            write_checkpoint(self.run_dir.path, state)
            self.log("train_started", samples=len(self.train), step_every=self.cfg.step_every, val_score=val_score)
        else:
            self.log("resumed", next_sample=state["next_sample"], step=state["step"])
        i, step = state["next_sample"], state["step"]
        scores: dict[str, float] = dict(state["train_scores"])
        history, val_score = list(state["history"]), state["val_score"]
        accepted, rejected = state["accepted"], state["rejected"]
        while i < len(self.train):
            batch_examples = self.train[i : i + self.cfg.step_every]
            batch, batch_scores = [], []
            for ex, (value, collected) in zip(batch_examples, self.run_batch(batch_examples)):
                scores[str(ex["id"])] = value
                batch_scores.append(value)
                if collected:
                    batch.append(collected)
            step += 1
            verdict, val_score = self.step(step, batch, batch_scores, val_score, history)
            accepted += verdict is True
            rejected += verdict is False
            i += len(batch_examples)
            write_checkpoint(self.run_dir.path, self._state(i, step, val_score, history, scores, accepted, rejected))
            self._drop_pending(batch_examples)
        final = {
            "prompts": {n: p.text for n, p in get_prompts(self.system).items()},
            "train_scores": scores,
            "train_score": sum(scores.values()) / max(len(scores), 1),
            "val_score": val_score,
            "steps": step,
            "accepted": accepted,
            "rejected": rejected,
        }
        if self.cfg.test:
            final.update(self.test_scores(final["prompts"]))
        write_json_atomic(self.run_dir.path / "final.json", final)
        self.log("train_finished", steps=step, accepted=accepted, rejected=rejected,
                 train_score=final["train_score"], val_score=val_score,
                 **{k: final[k] for k in ("test_before", "test_after", "test_size") if k in final})
        return final

    def test_scores(self, prompts: dict[str, str]) -> dict[str, Any]:
        """The held-out test split (``trainer.test``), read by nothing that chose a prompt: the
        starting prompts' score and the final prompts' score on it."""
        start = json.loads((self.run_dir.path / "prompts" / "step-0000.json").read_text(encoding="utf-8"))
        set_prompts(self.system, start)
        before = self.evaluate(self.test, "held-out test, starting prompts")
        set_prompts(self.system, prompts)
        after = self.evaluate(self.test, "held-out test, final prompts")
        return {"test_before": before, "test_after": after, "test_size": len(self.test)}
