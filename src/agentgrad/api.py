"""The verbs of ``import agentgrad as ag``: load a model, load and run a system, attribute, blame, optimize.

    import agentgrad as ag
    model = ag.load_model("smollm2")                      # a hub id, folder, gguf:FILE, openai:MODEL@URL, ...
    system = ag.load_system("examples/lookup/system.yaml", model=model)
    episode = system.run({"record": "Name: Alice. City: Lyon. Pet: cat.", "question": "What is Alice's city?"})
    loss = ag.VerbalLoss.generic("Lyon", str(episode.output), "the answer must name the city", [episode.output.node])
    ranking = ag.blame(episode.trace, loss, scorer=model)  # [Blame(agent, node, score)], best first

A trace from elsewhere (an imported log: ``agentgrad.importers.import_file``, or ``ag.Trace.load``)
gets its loss from words: ``ag.verbal_loss(trace, "the answer names the wrong city", wrong="Lyon")``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgrad.attribution.result import Attribution
from agentgrad.blame.backward import VerbalLoss
from agentgrad.blame.context import Blame
from agentgrad.blame.losses import verbal_loss
from agentgrad.blame.methods import DEFAULT_METHOD as DEFAULT_BLAME
from agentgrad.core.model import LanguageModel
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError

if TYPE_CHECKING:
    from agentgrad.runs.graph_system import GraphSystem

__all__ = ["OptimizeResult", "attribute", "blame", "load_model", "load_scorer", "load_system", "optimize",
           "verbal_loss"]



def load_model(value: str, name: str = "default", **options: Any) -> LanguageModel:
    """A model from one value, as ``--model`` takes it: ``smollm2`` (embedded), ``gguf:FILE``, a folder
    or hub id (transformers), ``openai:MODEL@URL`` (any OpenAI-compatible server), ``tiny``."""
    from agentgrad.core.config import model_spec_from_value
    from agentgrad.models.registry import create_model

    spec = model_spec_from_value(value)
    return create_model(name, spec.backend, **(spec.options() | options))


def load_system(path: str | Path, model: LanguageModel | str | None = None) -> "GraphSystem":
    """A declared system (YAML); ``model`` (a loaded model or a model value) replaces every model it names."""
    from agentgrad.core.config import load_system_config
    from agentgrad.runs.graph_system import GraphSystem

    cfg = load_system_config(path)
    if model is None:
        return GraphSystem(cfg)
    m = load_model(model) if isinstance(model, str) else model
    return GraphSystem(cfg, {name: m for name in cfg.models})


def load_scorer(model: Any, **options: Any) -> Any:
    """A white-box scorer from a loaded local model (its weights are shared, not loaded again), a model
    value (smollm2, a folder or hub id, gguf:FILE, tiny), or a scorer (returned as it is); ``options``:
    ``device``, ``dtype`` and the Scorer's (:func:`agentgrad.attribution.factory.make_scorer`)."""
    from agentgrad.attribution.factory import make_scorer

    return make_scorer(model, **options)


def attribute(trace: Trace, scorer: Any) -> Attribution:
    """GBC attribution of every call of ``trace``: gradients per source and the weighted graph."""
    sc = load_scorer(scorer)
    nodes, graph = sc.attribute(trace)
    return Attribution(trace, nodes, graph, sc.describe())


def blame(trace: Trace, loss: VerbalLoss, method: str = DEFAULT_BLAME, scorer: Any = None, judge: Any = None,
          seed: int = 0) -> list[Blame]:
    """The agents to blame for ``loss``, best first: ``[Blame(agent, node, score)]`` by any method of the
    blame registry (``agentgrad.blame.methods.list_blame_methods()``; docs/blame.md)."""
    from agentgrad.blame.methods import canonical, check_expected, needs_scorer
    from agentgrad.blame.outcome import blame_episode

    name = canonical(method)  # an unknown name fails here, listing the valid ones
    check_expected([name], loss.details.get("expected"))
    sc = load_scorer(scorer) if scorer is not None else None
    if sc is None and needs_scorer(name):
        raise ConfigError(f"blame method {method!r} needs a white-box scorer: pass scorer=MODEL")
    for t in loss.targets:
        if not 0 <= t < len(trace.nodes):
            raise ConfigError(f"the loss targets node {t}, which the trace does not have")
    return blame_episode(name, trace, loss, sc, seed=seed, judge=judge).ranking


@dataclass
class OptimizeResult:
    """What :func:`optimize` returns: the final prompts and scores of a run (also ``OUT/final.json``)."""

    out: Path
    prompts: dict[str, str]
    train_score: float
    val_score: float | None
    steps: int
    accepted: int
    rejected: int
    train_scores: dict[str, float] = field(default_factory=dict)
    test_before: float | None = None  # the held-out test split (trainer.test), when the run has one
    test_after: float | None = None
    test_size: int | None = None

    @classmethod
    def from_final(cls, out: Path, final: dict[str, Any]) -> "OptimizeResult":
        return cls(out, dict(final["prompts"]), float(final["train_score"]), final.get("val_score"), int(final["steps"]),
                   int(final["accepted"]), int(final["rejected"]), dict(final.get("train_scores") or {}),
                   final.get("test_before"), final.get("test_after"), final.get("test_size"))

    def to_dict(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}


def optimize(config: str | Path, out: str | Path, resume: bool = False, models: list[str] | None = None,
             method: str | None = None, console: Any = None) -> OptimizeResult:
    """``agentgrad optimize``: run the optimisation loop of a YAML configuration into a run directory."""
    from rich.console import Console

    from agentgrad.optim.run import run_optimize

    final = run_optimize(Path(config), Path(out), resume=resume, overrides=models or [], method=method,
                         console=console or Console(emoji=False))
    return OptimizeResult.from_final(Path(out), final)
