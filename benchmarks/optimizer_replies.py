"""Share of parsable and valid LLM-optimizer rewrites with SmolLM2, free and under the rewrite schema.

    python benchmarks/optimizer_replies.py

The first six cases of the prompt-bug ablation (one wording, position and agent per defect family), their
bugged agent blamed, one failure as feedback; one reply per case and mode (256 new tokens, greedy):
free, constrained to the shape alone (``shape``), and constrained to the shape with the protected spans
(``constrained``, what the optimizer asks for).
"""
import json, sys
from agentgrad.benchmarks.ablation.cases import cases
from agentgrad.core.agent import Prompt
from agentgrad.core.model import GenerationSettings
from agentgrad.models.hf import HFModel
from agentgrad.optim.optimizer import (PromptOptimizer, StepInput, parse_reply, protected_in_order, rewrite_schema,
                                       validate_update, UpdateError)

smol = HFModel.shared(name="default", path="smollm2")
picked = [c for c in cases(wordings=1, positions=1, agents=1)][:6]
rows = []
for c in picked:
    cfg = c.config({"backend": "hf", "path": "smollm2"})
    prompts = {n: Prompt(a.prompt, tuple(a.protected or ())) for n, a in cfg.agents.items()}
    inp = StepInput(prompts=prompts, tools={n: [] for n in prompts}, blamed=[c.bugged_agent],
                    feedback=f"## Failures on trajectories through {c.bugged_agent}\nSample 1: the final answer "
                             f"named the wrong field of the record (expected the city, got the pet).")
    opt = PromptOptimizer(smol, max_attempts=1, settings=GenerationSettings(max_new_tokens=256))
    msgs = opt.messages(inp)
    for mode in ("free", "shape", "constrained"):
        schema = {"free": None, "shape": rewrite_schema(inp.blamed, opt.max_chars, 256),
                  "constrained": rewrite_schema(inp.blamed, opt.max_chars, 256, protected_in_order(inp))}[mode]
        st = opt.settings.with_output(schema)
        reply = smol.generate(msgs, None, st).text
        try:
            parsed = parse_reply(reply); parsable = True
        except UpdateError:
            parsed, parsable = None, False
        try:
            validate_update(parsed, inp, opt.max_chars); valid, why = True, ""
        except UpdateError as e:
            valid, why = False, str(e)[:100]
        rows.append({"case": c.name, "mode": mode, "parsable": parsable, "valid": valid, "why": why, "reply": reply[:160]})
        print(json.dumps(rows[-1]), flush=True)
for mode in ("free", "shape", "constrained"):
    r = [x for x in rows if x["mode"] == mode]
    print(mode, "parsable", sum(x["parsable"] for x in r), "of", len(r), "valid", sum(x["valid"] for x in r))
