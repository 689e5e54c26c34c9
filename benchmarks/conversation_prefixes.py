"""Where could one forward pass serve two calls of a real conversation? For each tau-bench run of AgentRx
whose blame (``records/real-trace-cost/smollm2-window4096.jsonl``: the default method, ``agentgrad
blame``'s window) scored two calls or more, the loss-bearing call and the blamed one are rendered as the
scorer reads them (windowed as blame windows them) and checked token by token: is the earlier call's
rendering (its input and output) a prefix of the later one's, and does each differentiate fewer tokens
than the scorer's checkpointing threshold (a checkpointed pass keeps no graph to share)? Only such a
pair could share a forward pass. Tokenization only: no model pass.

    python benchmarks/conversation_prefixes.py --out records/real-trace-cost/prefixes.json
    python benchmarks/conversation_prefixes.py --table records/real-trace-cost/prefixes.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

COST = Path(__file__).resolve().parent.parent / "records" / "real-trace-cost" / "smollm2-window4096.jsonl"


def measure(cost: Path) -> dict:
    from agentgrad.attribution.factory import make_scorer
    from agentgrad.attribution.render import render_call
    from agentgrad.attribution.scorer import CHECKPOINT_FROM
    from agentgrad.benchmarks.agentrx.data import load_runs
    from agentgrad.runs.blame import windowed

    recs = [json.loads(x) for x in cost.read_text(encoding="utf-8").splitlines() if x.strip()]
    runs = {r.trace.id: r for r in load_runs(("tau",))[0]}
    scorer = make_scorer("smollm2")
    pairs = []
    for rec in recs:
        window = rec.get("window")
        trace, _ = windowed(runs[rec["run"]].trace, scorer, window)
        for loss, got in sorted(rec["losses"].items()):
            if got.get("scored", 0) < 2 or got["blamed"] == got["target"]:
                continue
            early, late = sorted((got["blamed"], got["target"]))
            a, b = (render_call(scorer.tokenizer, trace.nodes[i]) for i in (early, late))
            prefix = b.input_ids[:len(a.input_ids)] == a.input_ids
            small = all(len(r.input_ids) - r.variable_start < CHECKPOINT_FROM for r in (a, b))
            pairs.append({"run": rec["run"], "loss": loss, "calls": [early, late], "scored": got["scored"],
                          "tokens": [len(a.input_ids), len(b.input_ids)], "prefix": prefix,
                          "under_checkpointing": small})
    return {"cost_records": str(cost.name), "runs": len(recs), "window": recs[0].get("window") if recs else None,
            "checkpoint_from": CHECKPOINT_FROM, "pairs": pairs}


def table(path: Path) -> None:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        pairs = d["pairs"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"error: {path} is not a record of benchmarks/conversation_prefixes.py ({e.__class__.__name__})")
    both = [p for p in pairs if p["prefix"] and p["under_checkpointing"]]
    print(f"{d['runs']} tau-bench runs of AgentRx, blamed with the default method within {d['window']:,} tokens: "
          f"{len(pairs)} blames (of the last-call and located losses) scored two calls or more")
    print(f"- the earlier call's rendering a token prefix of the later one's: {sum(p['prefix'] for p in pairs)} of {len(pairs)}")
    print(f"- both differentiating fewer than {d['checkpoint_from']:,} tokens: "
          f"{sum(p['under_checkpointing'] for p in pairs)} of {len(pairs)}")
    print(f"- both, where one forward pass could serve the two: {len(both)} of {len(pairs)}")
    print("| run | loss | calls scored | blamed, loss call | tokens | prefix | under checkpointing |")
    print("|---|---|---|---|---|---|---|")
    for p in pairs:
        print(f"| {p['run']} | {p['loss']} | {p['scored']} | n{p['calls'][0]}, n{p['calls'][1]} | "
              f"{p['tokens'][0]:,}, {p['tokens'][1]:,} | {'yes' if p['prefix'] else 'no'} | "
              f"{'yes' if p['under_checkpointing'] else 'no'} |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="write the record here")
    p.add_argument("--table", type=Path, help="print the table of a record and stop")
    p.add_argument("--cost", type=Path, default=COST, help="the real-trace cost records read (default: %(default)s)")
    a = p.parse_args(argv)
    if a.table:
        return table(a.table)
    if not a.out:
        p.error("give --out FILE (or --table FILE)")
    if a.out.exists():
        p.error(f"--out {a.out} exists: give a new file")
    from agentgrad.errors import AgentgradError

    try:
        record = measure(a.cost)
    except (AgentgradError, OSError) as e:
        sys.exit(f"error: {e}")
    a.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    table(a.out)


if __name__ == "__main__":
    main()
