"""GEPA on the pipeline example, choosing which agent to rewrite round-robin (GEPA's default) or by
GBC blame (agentgrad's selector): same seed, same data, same budget of metric calls.

    python examples/gepa/compare.py                       # offline: tiny random model, test server
    python examples/gepa/compare.py --model default=Qwen/Qwen3-0.6B --reflection openai:gpt-4o-mini

Offline, the agents are a tiny random model and the reflection model is the same tiny model behind
the project's OpenAI-compatible test server: it runs end to end, and its figures mean nothing. With
real models (``--model``: the agents, also the white-box scorer; ``--reflection``: any model as
``--model`` takes it) it is the comparison. Needs ``pip install 'agentgrad[gepa]'``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any


def run(selector_name: str, model: str, reflection: Any, budget: int, seed: int) -> dict[str, Any]:
    import gepa

    from agentgrad.attribution.factory import make_scorer
    from agentgrad.core.config import apply_model_override, load_system_config
    from agentgrad.examples import PIPELINE
    from agentgrad.integrations.gepa import GBCComponentSelector, GEPAAdapter
    from agentgrad.models.hf import HFModel
    from agentgrad.models.registry import create_model
    from agentgrad.optim.tasks import get_task

    cfg = load_system_config(PIPELINE / "system.yaml")
    apply_model_override(cfg, model)
    models = {n: create_model(n, s.backend, **s.options()) for n, s in cfg.models.items()}
    task = get_task("pipeline")(cfg, {"train": PIPELINE / "train.jsonl", "val": PIPELINE / "val.jsonl"}, models)
    hf = next(m for m in models.values() if isinstance(m, HFModel))
    adapter = GEPAAdapter(task, make_scorer(hf, on_too_long="skip"))  # the agents' weights, shared
    seed_candidate = {n: a.prompt.text for n, a in adapter.system.agents().items()}
    selector = GBCComponentSelector(top_k=1) if selector_name == "gbc" else "round_robin"
    result = gepa.optimize(seed_candidate=seed_candidate, trainset=task.examples("train"), valset=task.examples("val"),
                           adapter=adapter, reflection_lm=reflection, module_selector=selector,
                           max_metric_calls=budget, reflection_minibatch_size=3, seed=seed, display_progress_bar=False)
    best = result.best_candidate
    return {"selector": selector_name, "best_val_score": max(result.val_aggregate_scores),
            "candidates": len(result.candidates),
            "changed_agents": sorted(n for n in best if best[n] != seed_candidate[n]),
            "selected": getattr(selector, "history", None)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default=tiny", help="the agents' model, NAME=VALUE as agentgrad takes it")
    ap.add_argument("--reflection", help="the reflection model (default: the tiny model behind the test server)")
    ap.add_argument("--budget", type=int, default=24, help="metric calls per run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write the comparison as JSON")
    a = ap.parse_args()
    from agentgrad.core.config import model_spec_from_value
    from agentgrad.core.model import GenerationSettings
    from agentgrad.models.registry import create_model
    from agentgrad.integrations.gepa import require_gepa

    require_gepa()
    server = None
    if a.reflection:
        spec = model_spec_from_value(a.reflection)
        lm = create_model("reflection", spec.backend, **spec.options())
    else:
        from agentgrad.models.hf import HFModel
        from agentgrad.models.tiny import build_tiny_model
        from agentgrad.models.serve import OpenAICompatServer

        tiny = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny")
        server = OpenAICompatServer(HFModel(path=str(tiny), max_context=32768)).start()
        lm = create_model("reflection", "openai", model="tiny", base_url=server.base_url, api_key="unused")

    def reflection(prompt: Any) -> str:
        msgs = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        return lm.generate(msgs, None, GenerationSettings(max_new_tokens=256)).text

    try:
        rows = [run(s, a.model, reflection, a.budget, a.seed) for s in ("round_robin", "gbc")]
    finally:
        if server is not None:
            server.stop()
    for r in rows:
        print(f"{r['selector']:>12}: best validation score {r['best_val_score']:.3f}, {r['candidates']} candidates, "
              f"changed {', '.join(r['changed_agents']) or 'nothing'}")
    if not a.reflection:
        print("(tiny random models: the run shows the machinery; the figures mean nothing)")
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
