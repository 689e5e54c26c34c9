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

The loop reads and writes no file itself: it hands its values (prompts, checkpoints, a stopped
step's finished samples, traces, attribution records, the final results) to the run store
(:class:`agentgrad.runs.store.RunStore`), and puts prompts in the system for an evaluation only
for as long as it runs (:func:`prompts_put`).
"""

from __future__ import annotations

import random
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from agentgrad.attribution.scorer import Scorer
from agentgrad.blame.backward import VerbalLoss
from agentgrad.blame.methods import DEFAULT_METHOD, edge_rule
from agentgrad.blame.outcome import blame_episode
from agentgrad.core.agent import Prompt
from agentgrad.core.system import System
from agentgrad.core.trace import Trace
from agentgrad.errors import AgentgradError, ConfigError, ModelError, ServerUnreachableError, TraceError
from agentgrad.optim.collected import Collected, collect, failure_record
from agentgrad.optim.config import TrainerConfig
from agentgrad.optim.optimizer import Failure, Optimizer, StepInput, TargetSource, render_feedback
from agentgrad.optim.tasks import Task
from agentgrad.runs.checkpoint import rng_state, set_rng_state
from agentgrad.runs.rundir import RunDir
from agentgrad.runs.runner import run_jobs
from agentgrad.runs.store import RunStore


def get_prompts(system: System) -> dict[str, Prompt]:
    return {n: a.prompt for n, a in system.agents().items()}  # type: ignore[misc]


def set_prompts(system: System, prompts: dict[str, str]) -> None:
    agents = system.agents()
    for name, text in prompts.items():
        agents[name].prompt = agents[name].prompt.replace(text)  # type: ignore[union-attr]


@contextmanager
def prompts_put(system: System, prompts: dict[str, str]) -> Iterator[None]:
    """``prompts`` (a name -> text of some agents) in ``system`` for the block, the old ones back after."""
    agents = system.agents()
    old = {n: agents[n].prompt for n in prompts}
    try:
        set_prompts(system, prompts)
        yield
    finally:
        for n, p in old.items():
            agents[n].prompt = p  # type: ignore[assignment]


class Trainer:
    """Runs the optimisation loop of a task into a run directory.

    Args:
        task: dataset, system, metric and losses.
        scorer: the white-box scorer for attribution.
        optimizer: rewrites prompts (LLM or deterministic).
        cfg: samples, step size, seed, validation gate, rendering limits.
        run_dir: where everything is written (through its :class:`RunStore`); ``RunDir(resume=True)``
            to continue a run.
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
        self.task, self.scorer, self.optimizer, self.cfg = task, scorer, optimizer, cfg
        self.store = RunStore(run_dir)
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

    # --- events and prompts -------------------------------------------------------------------
    def log(self, event: str, **fields: Any) -> None:
        record = self.store.log(event, **fields)
        if self.on_event:
            self.on_event(record)

    def prompts(self) -> dict[str, str]:
        """The system's current prompts, by agent."""
        return {n: p.text for n, p in get_prompts(self.system).items()}

    # --- state --------------------------------------------------------------------------------
    def _state(self, next_sample: int, step: int, val_score: float | None, history: list, scores: dict,
               accepted: int, rejected: int) -> dict[str, Any]:
        return {
            "config": self.digest, "next_sample": next_sample, "step": step,
            "prompts": self.prompts(), "val_score": val_score,
            "history": history, "train_scores": scores, "accepted": accepted, "rejected": rejected,
            "rng": rng_state(self.rng),
        }

    def _load(self) -> dict[str, Any] | None:
        state = self.store.checkpoint(self.digest)
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
        self.store.save_trace(sid, ep.trace)
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
        record = failure_record(trace, results, graph, outcome, blame_error, loss, score.value, self.scorer,
                                self.method, self.top_k, seed, self.store.trace_path(sid), self.weight)
        pairs = self._targets(trace, outcome, loss, record)
        self.store.save_attribution(sid, record)
        return collect(sid, trace, loss, outcome, results, pairs, self.cfg.render.max_node_chars,
                       self.cfg.render.max_chars)

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
            kept = self.store.pending(str(ex["id"]))
            if kept is not None and kept.get("logged"):
                continue  # logged before the stop
            self.log(event[0], **event[1])
            if kept is not None:
                self.store.keep_pending(str(ex["id"]), {**kept, "logged": True})
        return [(value, collected) for value, collected, _ in results]

    def _kept_sample(self, example: dict[str, Any], seed: int) -> tuple[float, Collected | None, tuple]:
        """A sample kept from before a stop (the store's pending work: the seeds are drawn again in the
        same order from the checkpoint), else :meth:`_sample`'s run of it, kept until the step's checkpoint."""
        sid = str(example["id"])
        d = self.store.pending(sid)
        if d is not None and d.get("seed") == seed:
            try:
                return d["value"], Collected.from_dict(d["collected"]) if d["collected"] else None, tuple(d["event"])
            except (KeyError, TypeError, ValueError):
                pass
        value, collected, event = self._sample(example, seed)
        self.store.keep_pending(sid, {"seed": seed, "value": value, "logged": False, "event": list(event),
                                      "collected": collected.to_dict() if collected else None})
        return value, collected, event

    def evaluate(self, examples: list[dict[str, Any]], phase: str | None = None,
                 prompts: dict[str, str] | None = None) -> float:
        """Mean metric over ``examples`` (no attribution), concurrently, of the current prompts with
        ``prompts`` (some agents' texts) in place for this evaluation only; ``phase`` names it in the
        progress events (``validation``, ``test, starting prompts``, ...)."""
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

        with prompts_put(self.system, prompts or {}):
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
        accepted, new_val = True, val_score
        if self.cfg.validation:  # the new prompts in place for the gate only; rejected, the old ones stay
            new_val = self.evaluate(self.val, "validation of the new prompts", res.prompts)
            accepted = self.cfg.validation.accepts(val_score or 0.0, new_val)
        if accepted:
            set_prompts(self.system, res.prompts)
        updated = sorted(res.prompts) if accepted else []
        rejected = {} if accepted else {"proposed": dict(res.prompts)}  # a rejected rewrite is kept in the log
        self.log("step", **summary, accepted=accepted, updated=updated, relevant=relevant,
                 update_frequency=len(updated) / max(len(relevant), 1), val_before=val_score, val_after=new_val,
                 attempts=res.attempts, errors=res.errors, notes=res.notes, unconstrained=res.unconstrained,
                 **rejected)
        history.append({"step": step, "agents": sorted(res.prompts), "before": val_score, "after": new_val,
                        "accepted": accepted, "notes": res.notes})
        if accepted:
            self.store.save_prompts(step, self.prompts())
            return True, new_val
        return False, val_score

    # --- the loop ----------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        state = self._load()
        if state is None:
            val_score = self.evaluate(self.val, "validation of the starting prompts") if self.val else None
            state = self._state(0, 0, val_score, [], {}, 0, 0)
            self.store.save_prompts(0, state["prompts"])
            self.store.save_checkpoint(state)
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
            self.store.save_checkpoint(self._state(i, step, val_score, history, scores, accepted, rejected))
            self.store.drop_pending(str(ex["id"]) for ex in batch_examples)
        final = {
            "prompts": self.prompts(),
            "train_scores": scores,
            "train_score": sum(scores.values()) / max(len(scores), 1),
            "val_score": val_score,
            "steps": step,
            "accepted": accepted,
            "rejected": rejected,
        }
        if self.cfg.test:
            final.update(self.test_scores(final["prompts"]))
        self.store.save_final(final)
        self.log("train_finished", steps=step, accepted=accepted, rejected=rejected,
                 train_score=final["train_score"], val_score=val_score,
                 **{k: final[k] for k in ("test_before", "test_after", "test_size") if k in final})
        return final

    def test_scores(self, prompts: dict[str, str]) -> dict[str, Any]:
        """The held-out test split (``trainer.test``), read by nothing that chose a prompt: the
        starting prompts' score (the store's step 0) and the score of ``prompts`` on it."""
        before = self.evaluate(self.test, "held-out test, starting prompts", self.store.prompts(0))
        after = self.evaluate(self.test, "held-out test, final prompts", prompts)
        return {"test_before": before, "test_after": after, "test_size": len(self.test)}
