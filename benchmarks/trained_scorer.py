"""The trained scorer of the planted-fault benchmark, trained and checked (minutes: a benchmark, not a test).

    python benchmarks/trained_scorer.py [--episodes 6]

Trains the scorer with the default size and 8,000 steps and no time cap (the learning-rate schedule
runs on steps only, so the model and every figure are the same on a busy machine as on an idle one;
cached under agentgrad's cache folder, so a second run only measures), then checks what the tests
of the first releases checked: held-out token accuracy >= 0.95, and on fan-in, manager and broadcast
wrong values GBC (max L1, targeted, carry) >= 0.8 agent top-1 and 0.5 above random, token hit@1
>= 0.75. Measured on 2 cores: accuracy 0.992; GBC 1.00 on fan-in and manager over 200 episodes
each, token hit@1 0.916. Exit 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from agentgrad.attribution.scorer import Scorer
from agentgrad.benchmarks.planted.bench import run_benchmark
from agentgrad.benchmarks.planted.model import BlameModelConfig, cached_blame_model

MIN_ACCURACY, MIN_GBC, MIN_HIT1 = 0.95, 0.8, 0.75


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=6, help="episodes per topology")
    a = ap.parse_args()
    t0 = time.time()
    cfg = BlameModelConfig(max_seconds=None)
    path = cached_blame_model(cfg)
    rep = json.loads((path / "blame_model.json").read_text())
    m = run_benchmark(Scorer(str(path)), ["gbc:max_l1:targeted:carry", "random"], ["fanin", "manager", "broadcast"],
                      ["wrong_value"], a.episodes)
    g = m["groups"]["all"]
    gbc, rnd = g["gbc:max_l1:targeted:carry"]["agent_top1"]["value"], g["random"]["agent_top1"]["value"]
    hit = m["token"]["targeted"]["hit1"]["value"]
    checks = {"steps, no time cap": rep["steps"] == cfg.steps and rep["time_capped"] is False,
              f"held-out token accuracy {rep['heldout_token_accuracy']:.3f} >= {MIN_ACCURACY}":
                  rep["heldout_token_accuracy"] >= MIN_ACCURACY,
              f"gbc carry {gbc:.2f} >= {MIN_GBC} and > random {rnd:.2f} + 0.5": gbc >= MIN_GBC and gbc > rnd + 0.5,
              f"token hit@1 {hit:.2f} >= {MIN_HIT1}": hit >= MIN_HIT1}
    for what, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
    print(f"{time.time() - t0:.0f} s")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
