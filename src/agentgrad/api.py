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

from pathlib import Path
from typing import Any

from agentgrad.attribution.result import Attribution
from agentgrad.blame.methods import DEFAULT_METHOD as DEFAULT_BLAME
from agentgrad.blame.backward import VerbalLoss
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError
from agentgrad.core.model import LanguageModel



def load_model(value: str, name: str = "default", **options: Any) -> LanguageModel:
    """A model from one value, as ``--model`` takes it: ``smollm2`` (embedded), ``gguf:FILE``, a folder
    or hub id (transformers), ``openai:MODEL@URL`` (any OpenAI-compatible server), ``tiny``."""
    from agentgrad.core.config import model_spec_from_value
    from agentgrad.models.registry import create_model

    spec = model_spec_from_value(value)
    return create_model(name, spec.backend, **(spec.options() | options))


def load_system(path: str | Path, model: LanguageModel | str | None = None) -> Any:
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


def verbal_loss(trace: Trace, text: str, wrong: str | None = None, target: str | int | None = None,
                expected: str | None = None) -> VerbalLoss:
    """A verbal loss for a recorded trace, from words: attached to ``target`` (a node id, or an agent
    name: its last call; default the trace's last call, the final answer), and, with ``wrong``, the
    places of that text in the target's output as the loss's spans (what the loss-targeted objective
    differentiates and the string-provenance method follows back). With ``expected`` (the right
    answer, or the right text in place of ``wrong``), the failure-conditioned ``contrast`` objective
    differentiates the produced output against it (``details["expected"]``)."""
    calls = trace.calls()
    if not calls:
        raise ConfigError("the trace has no call node to attach a loss to")
    if not str(text).strip():
        raise ConfigError("the loss is empty: say in words what went wrong")
    if target is None:
        node = calls[-1]
    elif isinstance(target, int) or str(target).isdigit():
        t = int(target)
        if not 0 <= t < len(trace.nodes) or trace.nodes[t].kind != "call":
            raise ConfigError(f"target {t} is not a call node of the trace (its calls: "
                              f"{', '.join(f'{c.id} {c.name}' for c in calls)[:300]})")
        node = trace.nodes[t]
    else:
        mine = trace.calls(str(target))
        if not mine:
            raise ConfigError(f"no agent {target!r} in the trace; its agents: {', '.join(dict.fromkeys(c.name for c in calls))}")
        node = mine[-1]
    spans: dict[int, list[tuple[int, int]]] = {}
    if wrong:
        found, at = [], node.text.find(wrong)
        while at >= 0:
            found.append((at, at + len(wrong)))
            at = node.text.find(wrong, at + len(wrong))
        if not found:
            raise ConfigError(f"the wrong text {wrong!r} is not in the output of node {node.id} ({node.name}): "
                              f"{node.text[:200]!r}")
        spans[node.id] = found
    if expected is not None and not str(expected).strip():
        raise ConfigError("the expected answer is empty: give the right answer, or leave it out")
    details = {"produced": node.text, **({"wrong": wrong} if wrong else {}),
               **({"expected": str(expected)} if expected is not None else {})}
    return VerbalLoss(str(text), [node.id], "generic", details, spans)


def blame(trace: Trace, loss: VerbalLoss, method: str = DEFAULT_BLAME, scorer: Any = None, judge: Any = None,
          seed: int = 0) -> list[Any]:
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


def optimize(config: str | Path, out: str | Path, resume: bool = False, models: list[str] | None = None,
             method: str | None = None, console: Any = None) -> dict[str, Any]:
    """``agentgrad optimize``: run the optimisation loop of a YAML configuration into a run directory."""
    from rich.console import Console

    from agentgrad.optim.run import run_optimize

    return run_optimize(Path(config), Path(out), resume=resume, overrides=models or [], method=method,
                        console=console or Console(emoji=False))
