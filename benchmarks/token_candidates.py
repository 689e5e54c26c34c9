"""Token scores as candidates: what the choice among them on a development seed was made from.

``dump`` writes, for every planted episode of one seed whose loss has a span, the gradient of the
source that carried the value into the loss's call, per token and objective (``targeted``,
``contrast``): the L1 norm and g.e per token, the token texts and which lie in the value. ``score``
reads such a file and prints the hit@1 of every candidate: the peak token, the peak content token,
and the peak word by the sum, mean or max of its content tokens' scores, under L1 and |g.e|, for
each objective and for their product; then the model-free controls (the longest word, a random
word, a random content token). The word rule is the benchmark's (``word_groups``, ``word_in``).

    python benchmarks/token_candidates.py dump --seed 10 --episodes 25 --out d10.jsonl
    python benchmarks/token_candidates.py score d10.jsonl

Choose on a development seed (10), then report the choice with ``bench blame`` on fresh seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

AGGREGATES: dict[str, Callable[[list[float]], float]] = {"sum": sum, "mean": lambda v: sum(v) / len(v), "max": max}


def dump(seed: int, episodes: int, out: Path, fault: str) -> None:
    from agentgrad.attribution.scorer import Scorer
    from agentgrad.benchmarks.planted import episodes as E
    from agentgrad.benchmarks.planted.bench import carrying_source
    from agentgrad.blame.context import BlameContext
    from agentgrad.cli.blame import resolve_scorer

    with out.open("x", encoding="utf-8") as f:  # a new file, before the model is loaded
        sc = Scorer(str(resolve_scorer("smollm2")), device="cpu", on_too_long="skip")
        for topo in E.TOPOLOGIES:
            for i in range(episodes):
                ep = E.generate(topo, fault, seed * 1_000_003 + i, "eval")  # as bench blame draws them
                ctx = BlameContext(E.without_truth(ep.trace), ep.loss, sc, seed=seed + i)
                rec: dict[str, Any] = {"episode": ep.trace.id, "topology": topo, "transform": ep.truth.get("transform")}
                for obj in ("targeted", "contrast"):
                    found = carrying_source(ctx, ep.truth, obj)  # the benchmark's own view of the token
                    if found is not None:
                        s, rec["tokens"], rec["inside"] = found
                        rec[obj] = {"l1": list(s.l1), "gxi": list(s.gxi)}
                if "tokens" not in rec:
                    continue
                f.write(json.dumps(rec) + "\n")
                f.flush()


def candidates(rec: dict[str, Any]) -> dict[str, float]:
    """Every candidate's hit (1.0 or 0.0) on one episode, and the controls' (expected) hits."""
    from agentgrad.benchmarks.planted.bench import has_content, word_groups, word_in

    tokens, inside = rec["tokens"], rec["inside"]
    content = [has_content(t) for t in tokens]
    groups = word_groups(tokens)
    word_hit = lambda g: word_in(g, inside)  # noqa: E731
    out: dict[str, float] = {}

    def add(name: str, scores: list[float]) -> None:
        out[f"{name}/token"] = float(inside[max(range(len(scores)), key=lambda i: scores[i])])
        among = [i for i in range(len(scores)) if content[i]] or list(range(len(scores)))
        out[f"{name}/content"] = float(inside[max(among, key=lambda i: scores[i])])
        for agg, fn in AGGREGATES.items():
            out[f"{name}/word_{agg}"] = word_hit(max(groups, key=lambda g: fn([scores[i] for i in g])))

    for obj in ("targeted", "contrast"):
        add(f"{obj}/l1", rec[obj]["l1"])
        add(f"{obj}/abs_gxi", [abs(v) for v in rec[obj]["gxi"]])
    for key, name in (("l1", "l1"), ("gxi", "abs_gxi")):  # both objectives at once: the product of the shares
        a, b = ([abs(v) for v in rec[o][key]] for o in ("targeted", "contrast"))
        sa, sb = sum(a) or 1.0, sum(b) or 1.0
        add(f"product/{name}", [x / sa * y / sb for x, y in zip(a, b)])
    out["control/longest_word"] = word_hit(max(groups, key=len))
    out["control/random_word"] = sum(word_hit(g) for g in groups) / len(groups)
    out["control/random_content_token"] = sum(inside[i] for i in range(len(tokens)) if content[i]) / max(sum(content), 1)
    return out


def score(path: Path) -> None:
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    rows = [r for r in rows if "targeted" in r and "contrast" in r]
    if not rows:
        sys.exit(f"token_candidates: {path} holds no episode with both objectives")
    hits: dict[str, list[float]] = {}
    for r in rows:
        for k, v in candidates(r).items():
            hits.setdefault(k, []).append(v)
    print(f"{len(rows)} episodes ({path})\n\n| candidate | hit@1 |\n|---|---|")
    for k in sorted(hits, key=lambda k: (k.startswith("control"), -sum(hits[k]))):
        print(f"| `{k}` | {sum(hits[k]) / len(hits[k]):.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="gradients per token of one seed's episodes (SmolLM2)")
    d.add_argument("--seed", type=int, required=True)
    d.add_argument("--episodes", type=int, default=25, help="per topology")
    d.add_argument("--fault", default="transformed")
    d.add_argument("--out", type=Path, required=True, help="a new JSONL file")
    s = sub.add_parser("score", help="hit@1 of every candidate on a dump")
    s.add_argument("file", type=Path)
    a = ap.parse_args()
    try:
        if a.cmd == "dump":
            dump(a.seed, a.episodes, a.out, a.fault)
        else:
            score(a.file)
    except FileExistsError:
        sys.exit(f"token_candidates: {a.out} exists; give a new --out")
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"token_candidates: cannot read {a.file if a.cmd == 'score' else a.out} ({e})")


if __name__ == "__main__":
    main()
