"""GBC blame inside GEPA (gepa-ai/gepa; the optional extra ``agentgrad[gepa]``).

- :class:`GEPAAdapter` lets ``gepa.optimize`` optimise an agentgrad system: a candidate is the map
  agent -> prompt; ``evaluate`` runs the task's episodes with those prompts and records their traces;
  with ``capture_traces`` every failed episode is blamed by the adapter's blame method (any name of
  :mod:`agentgrad.blame.methods`), so that ``make_reflective_dataset`` gives each component, per
  failed episode, that agent's calls on the method's trajectories with the rendered verbal loss
  (GEPA's ``Inputs`` / ``Generated Outputs`` / ``Feedback`` records).
- :class:`GBCComponentSelector` implements GEPA's ``ReflectionComponentSelector``: it returns the
  agents that a blame method (any of :mod:`agentgrad.blame.methods`) names for the failed episodes
  of the minibatch, the ``top_k`` most blamed, and a fallback (GEPA's round robin, all components,
  or none) when nothing is blamed. Pass it as ``gepa.optimize(..., module_selector=...)``.

Checked against gepa 0.1.x: ``GEPAAdapter.evaluate(batch, candidate, capture_traces) ->
EvaluationBatch``, ``make_reflective_dataset(candidate, eval_batch, components_to_update)`` and the
selector's ``__call__(state, trajectories, subsample_scores, candidate_idx, candidate)``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agentgrad.blame.methods import DEFAULT_METHOD
from agentgrad.errors import AgentgradError, ConfigError, ModelError, TraceError
from agentgrad.extras import require


def require_gepa() -> Any:
    return require("gepa", "gepa", "the GEPA integration")


@dataclass
class Rollout:
    """One episode as GEPA carries it (opaque to GEPA): what the selector and the reflective dataset read."""

    example: dict[str, Any]
    score: float
    output: Any = None
    trace: Any = None
    loss: Any = None
    error: str | None = None
    ranking: list[Any] = field(default_factory=list)  # the blame method's (agent, node, score), best first
    trajectories: list[Any] = field(default_factory=list)  # the paths the blame method walked from the loss


class GEPAAdapter:
    """An agentgrad task (its examples, system, metric and loss) as a GEPA adapter.

    Args:
        task: what the trainer takes (:class:`agentgrad.optim.tasks.Task`).
        scorer: the white-box scorer that attributes failed episodes (None: no blame, empty datasets).
        method: the blame method (``gbc:W:OBJ:RULE``, ``occlusion:...``, ``last``, an alias, ...): its
            ranking is the selector's vote, its trajectories the reflective dataset.
        top_k: incoming edges a ``path`` walk keeps per call.
    """

    propose_new_texts = None  # GEPA's own reflective proposal writes the new prompts

    def __init__(self, task: Any, scorer: Any = None, method: str = DEFAULT_METHOD, top_k: int = 1,
                 max_chars: int = 2000):
        from agentgrad.blame.methods import canonical

        require_gepa()
        self.task, self.scorer, self.top_k, self.max_chars = task, scorer, top_k, max_chars
        self.method = canonical(method)  # an unknown method fails here, not mid-optimisation
        self.system = task.build_system()

    def _rollout(self, example: dict[str, Any], capture: bool) -> Rollout:
        from agentgrad.blame.outcome import blame_episode

        try:
            ep = self.system.run(example, id=str(example.get("id", "")))
        except AgentgradError as e:  # one failed episode scores 0, as GEPA asks; the run goes on
            return Rollout(example, 0.0, error=str(e))
        score = self.task.metric(example, ep.output, ep.trace)
        r = Rollout(example, float(score.value), ep.output, ep.trace)
        if capture and not score.passed:
            r.loss = self.task.loss(example, ep.output, ep.trace, score)
            if r.loss is not None and self.scorer is not None:
                try:
                    outcome = blame_episode(self.method, ep.trace, r.loss, self.scorer, top_k=self.top_k)
                    r.ranking, r.trajectories = outcome.ranking, outcome.trajectories
                except (ModelError, TraceError) as e:  # an episode that cannot be blamed (longer than the
                    # scorer's context, ...) keeps its score, gets no vote and no reflective record
                    r.ranking, r.trajectories, r.error = [], [], f"not blamed: {e}"
        return r

    def evaluate(self, batch: list[dict[str, Any]], candidate: dict[str, str], capture_traces: bool = False) -> Any:
        from gepa.core.adapter import EvaluationBatch

        from agentgrad.optim.trainer import set_prompts

        unknown = sorted(set(candidate) - set(self.system.agents()))
        if unknown:
            raise ConfigError(f"the candidate names unknown agent(s) {unknown}; agents: {', '.join(self.system.agents())}")
        try:
            set_prompts(self.system, dict(candidate))
        except ConfigError as e:  # a proposal that drops a protected text cannot run: it scores 0 and
            # GEPA discards it (a reflection model knows nothing of protected spans)
            rollouts = [Rollout(ex, 0.0, error=f"candidate refused: {e}") for ex in batch]
        else:
            rollouts = [self._rollout(ex, capture_traces) for ex in batch]
        return EvaluationBatch(outputs=[r.output for r in rollouts], scores=[r.score for r in rollouts],
                               trajectories=rollouts if capture_traces else None)

    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch: Any,
                                components_to_update: list[str]) -> dict[str, list[dict[str, Any]]]:
        from agentgrad.blame.backward import cut

        out: dict[str, list[dict[str, Any]]] = {c: [] for c in components_to_update}
        for r in eval_batch.trajectories or []:
            if r.loss is None or r.trace is None:
                continue
            on_paths = sorted({n for t in r.trajectories for n in t.nodes})
            path_text = "; ".join(" -> ".join(t.agents) for t in r.trajectories) or "(none)"
            for comp in components_to_update:
                for n in on_paths:
                    node = r.trace.nodes[n]
                    if node.kind != "call" or node.name != comp:
                        continue
                    inputs = "\n\n".join(f"[{m.get('role')}] {m.get('content') or ''}" for m in node.messages[1:])
                    out[comp].append({
                        "Inputs": cut(inputs, self.max_chars),
                        "Generated Outputs": cut(node.text, self.max_chars),
                        "Feedback": cut(f"{r.loss.text}\nThe failure was traced back ({self.method}) along: "
                                        f"{path_text}; this output of {comp} is on that path.", self.max_chars),
                    })
        return out


class GBCComponentSelector:
    """GEPA's ``ReflectionComponentSelector`` by blame: the agents the blame method names for the
    minibatch's failed episodes (each episode's top-ranked agent one vote), the ``top_k`` most voted
    (ties: the candidate's order); when none is blamed, ``fallback``: ``round_robin`` (GEPA's),
    ``all`` or ``none``."""

    def __init__(self, top_k: int = 1, fallback: str = "round_robin"):
        if fallback not in ("round_robin", "all", "none"):
            raise ConfigError(f"fallback must be round_robin, all or none, got {fallback!r}")
        if top_k < 1:
            raise ConfigError("top_k must be at least 1")
        self.top_k, self.fallback = top_k, fallback
        self.history: list[list[str]] = []  # what was returned, call by call

    def __call__(self, state: Any, trajectories: list[Any], subsample_scores: list[float], candidate_idx: int,
                 candidate: dict[str, str]) -> list[str]:
        votes = Counter(self.top_agents(trajectories, candidate))
        order = list(candidate)
        picked = sorted(votes, key=lambda a: (-votes[a], order.index(a)))[: self.top_k]
        if not picked:
            if self.fallback == "all":
                picked = order
            elif self.fallback == "round_robin":
                from gepa.strategies.component_selector import RoundRobinReflectionComponentSelector

                picked = RoundRobinReflectionComponentSelector()(state, trajectories, subsample_scores, candidate_idx,
                                                                 candidate)
        self.history.append(list(picked))
        return picked

    def top_agents(self, trajectories: list[Any], candidate: dict[str, str]) -> list[str]:
        """Each failed episode's most blamed agent among the candidate's components (its vote)."""
        return [a for r in trajectories or [] for a in self.vote(getattr(r, "ranking", None) or [], candidate)]

    @staticmethod
    def vote(ranking: list[Any], candidate: dict[str, str]) -> list[str]:
        """The highest-ranked agent that is one of the candidate's components ([] when none is)."""
        return next(([b.agent] for b in ranking if b.agent in candidate), [])
