"""Does batched attribution pay? Calls of one agent (a shared prefix), one by one vs padded batches.

The model of ``attribution_cost.py`` (Llama-shaped, random, about 120M parameters at 10 layers)
scores N calls that share a P-token prefix (the agent's system prompt, cached once), each with
three sources of 80-120 tokens and a 100-token output: one at a time (``Scorer.attribute_node``'s
path) and in padded batches of 2, 4 and 8 calls (``Scorer.attribute_batch``'s path). Prints the
calls per second of each, and the largest relative difference of the per-token gradients.

    python benchmarks/batch_attribution.py [--device cuda] [--dtype bfloat16] [--calls 8] [--prefix 1000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from attribution_cost import build_model  # noqa: E402  (the same model as the cost benchmark)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--prefix", type=int, default=1000)
    ap.add_argument("--batches", default="2,4,8")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch

    from agentgrad.attribution.render import RenderedCall
    from agentgrad.attribution.scorer import Scorer

    model = build_model(a.device, a.dtype, a.layers)
    rng = random.Random(0)
    prefix = [rng.randrange(32000) for _ in range(a.prefix)]
    calls = []
    for _ in range(a.calls):
        lens = [rng.randint(80, 120) for _ in range(3)]
        ids = prefix + [rng.randrange(32000) for _ in range(sum(lens) + 100)]
        at, ranges = a.prefix, {}
        for s, n in enumerate(lens):
            ranges[s + 1] = [(at, at + n)]
            at += n
        calls.append(RenderedCall(text="", input_ids=ids, output_range=(at, at + 100), source_ranges=ranges))
    scorer = Scorer(tokenizer=None, model=model)
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    scorer.gradients(calls[0])  # the prefix cache, built once as by an earlier call of the agent

    def timed(fn) -> float:
        fn()  # warm-up
        sync()
        best = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            fn()
            sync()
            best.append(time.perf_counter() - t0)
        return sorted(best)[len(best) // 2]

    single = [scorer.gradients(c) for c in calls]
    t1 = timed(lambda: [scorer.gradients(c) for c in calls])
    figures = {"device": a.device, "dtype": a.dtype, "calls": a.calls, "prefix": a.prefix,
               "one_by_one_calls_per_s": round(a.calls / t1, 2)}
    print(f"one by one: {a.calls / t1:.2f} calls/s ({a.device}, {a.dtype}, prefix {a.prefix}, {a.calls} calls)", flush=True)
    for b in (int(x) for x in a.batches.split(",")):
        chunks = [calls[i:i + b] for i in range(0, len(calls), b)]
        run = lambda: [scorer.batch_gradients([(c, a.prefix) for c in ch]) for ch in chunks]  # noqa: E731
        worst = 0.0
        got = [g for ch in run() for g in ch]
        for (g1, *_), (g2, *_) in zip(single, got):
            n1, n2 = g1.float().abs().sum(-1), g2.float().abs().sum(-1)
            worst = max(worst, ((n1 - n2).abs() / n1.clamp_min(1e-12)).max().item())
        t = timed(run)
        figures[f"batch_{b}_calls_per_s"] = round(a.calls / t, 2)
        figures[f"batch_{b}_speedup"] = round(t1 / t, 2)
        print(f"batches of {b}: {a.calls / t:.2f} calls/s, speed-up {t1 / t:.2f}x "
              f"(largest relative difference of a token's gradient L1: {worst:.1e})", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
