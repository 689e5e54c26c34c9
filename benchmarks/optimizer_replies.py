"""Share of parsable and valid LLM-optimizer rewrites with SmolLM2, free and under the rewrite schema.

    python benchmarks/optimizer_replies.py --out records/optimizer-replies-smollm2.jsonl
    python benchmarks/optimizer_replies.py --table records/optimizer-replies-smollm2.jsonl

The first six cases of the prompt-bug ablation (one wording, position and agent per defect family), their
bugged agent blamed, one failure as feedback; one reply per case and mode (256 new tokens, greedy):
free, constrained to the shape alone (``shape``), and constrained to the shape with the protected spans
(``constrained``, what the optimizer asks for). ``--out`` writes one JSON line per reply (case, mode,
parsable, valid, why not, the reply's first 160 characters) as it goes; ``--table`` prints the counts
per mode from such a file.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MODES = ("free", "shape", "constrained")


def replies(out: Path) -> None:
    from agentgrad.benchmarks.ablation.cases import cases
    from agentgrad.core.agent import Prompt
    from agentgrad.core.model import GenerationSettings
    from agentgrad.models.hf import HFModel
    from agentgrad.optim.optimizer import (PromptOptimizer, StepInput, UpdateError, parse_reply, protected_in_order,
                                           rewrite_schema, validate_update)

    smol = HFModel.shared(name="default", path="smollm2")
    picked = [c for c in cases(wordings=1, positions=1, agents=1)][:6]
    with open(out, "w", encoding="utf-8") as f:
        for c in picked:
            cfg = c.config({"backend": "hf", "path": "smollm2"})
            prompts = {n: Prompt(a.prompt, tuple(a.protected or ())) for n, a in cfg.agents.items()}
            inp = StepInput(prompts=prompts, tools={n: [] for n in prompts}, blamed=[c.bugged_agent],
                            feedback=f"## Failures on trajectories through {c.bugged_agent}\nSample 1: the final answer "
                                     f"named the wrong field of the record (expected the city, got the pet).")
            opt = PromptOptimizer(smol, max_attempts=1, settings=GenerationSettings(max_new_tokens=256))
            msgs = opt.messages(inp)
            for mode in MODES:
                schema = {"free": None, "shape": rewrite_schema(inp.blamed, opt.max_chars, 256),
                          "constrained": rewrite_schema(inp.blamed, opt.max_chars, 256, protected_in_order(inp))}[mode]
                reply = smol.generate(msgs, None, opt.settings.with_output(schema)).text
                try:
                    parsed, parsable = parse_reply(reply), True
                except UpdateError:
                    parsed, parsable = None, False
                try:
                    validate_update(parsed, inp, opt.max_chars)
                    valid, why = True, ""
                except UpdateError as e:
                    valid, why = False, str(e)[:100]
                row = {"case": c.name, "mode": mode, "parsable": parsable, "valid": valid, "why": why, "reply": reply[:160]}
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(json.dumps(row), flush=True)


def table(path: Path) -> str:
    """The counts per mode of a file ``--out`` wrote."""
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, ValueError) as e:
        sys.exit(f"optimizer_replies: {path} is not a file of replies this script wrote ({e.__class__.__name__})")
    if not rows or not all(isinstance(r, dict) and {"mode", "parsable", "valid"} <= set(r) for r in rows):
        sys.exit(f"optimizer_replies: {path} is not a file of replies this script wrote (each line: mode, parsable, valid)")
    lines = []
    for mode in MODES:
        r = [x for x in rows if x["mode"] == mode]
        lines.append(f"{mode}: parsable {sum(x['parsable'] for x in r)} of {len(r)}, valid {sum(x['valid'] for x in r)} of {len(r)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", type=Path, help="run the cases, one JSON line per reply here, then print the counts")
    g.add_argument("--table", type=Path, help="print the counts per mode of a file --out wrote")
    a = ap.parse_args(argv)
    if a.out:
        if a.out.exists():
            sys.exit(f"optimizer_replies: --out {a.out} exists; name a new file (--table {a.out} prints it)")
        replies(a.out)
    print(table(a.out or a.table))


if __name__ == "__main__":
    main()
