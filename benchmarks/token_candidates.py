"""Token scores as candidates: what the choice among them on a development seed was made from.

``dump`` writes, for every planted episode of one seed whose loss has a span, the gradient of the
source that carried the value into the loss's call, per token and objective (``targeted``,
``contrast``): the L1 norm and g.e per token, the token texts and which lie in the value. ``score``
reads such a file and prints the hit@1 of every candidate: the peak token, the peak content token,
and the peak word by the sum, mean, max or sum over the root of the count of its content tokens'
scores, among every word or among the words that are not a line's key (``value_word_*``), under L1
and |g.e|, for each objective and for their product; then the model-free controls (the longest
word, the longest word that is not a key, a random word, a random value word, a random content
token). The word and key rules are the benchmark's (``word_groups``, ``word_in``, ``is_key``).
Given several dumps (one per family), ``score`` also prints every candidate per file and
topology, ordered by the worst cell; ``--pair A,B`` pairs two candidates on the same episodes, and
``--explain C`` says where a word candidate's misses lie (on the value's own key, another key, or
another value).

    python benchmarks/token_candidates.py dump --seed 10 --episodes 25 --out d10.jsonl
    python benchmarks/token_candidates.py score d10.jsonl
    python benchmarks/token_candidates.py score d10.jsonl d10-decoy.jsonl   # per family and topology
    python benchmarks/token_candidates.py score d17.jsonl --pair targeted/l1/value_word_sum,control/longest_value_word
    python benchmarks/token_candidates.py score d17.jsonl --interval   # each hit@1 with its 95% Wilson interval

Choose on a development seed (10), then report the choice with ``bench blame`` on fresh seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

# a word's score from its content tokens' scores; ``sqrt`` (the sum over the root of the count) lies between
# the sum, which favours long words, and the mean, which does not
AGGREGATES: dict[str, Callable[[list[float]], float]] = {
    "sum": sum, "mean": lambda v: sum(v) / len(v), "max": max, "sqrt": lambda v: sum(v) / len(v) ** 0.5}


def dump(seed: int, episodes: int, out: Path, fault: str, topologies: list[str] | None = None, style: str = "lines") -> None:
    from agentgrad.attribution.factory import make_scorer
    from agentgrad.benchmarks.planted import episodes as E
    from agentgrad.benchmarks.planted.bench import carrying_source
    from agentgrad.blame.context import BlameContext

    topologies = topologies or list(E.TOPOLOGIES)
    if bad := [t for t in topologies if t not in E.TOPOLOGIES]:
        sys.exit(f"token_candidates: unknown topology {bad[0]!r}; valid: {', '.join(E.TOPOLOGIES)}")
    with out.open("x", encoding="utf-8") as f:  # a new file, before the model is loaded
        sc = make_scorer("smollm2", device="cpu", on_too_long="skip")
        for topo in topologies:
            for i in range(episodes):
                ep = E.generate(topo, fault, seed * 1_000_003 + i, "eval", style=style)  # as bench blame draws them
                ctx = BlameContext(E.without_truth(ep.trace), ep.loss, sc, seed=seed + i)
                rec: dict[str, Any] = {"episode": ep.trace.id, "fault": fault, "topology": topo, "style": style,
                                       "transform": ep.truth.get("transform")}
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
    from agentgrad.benchmarks.planted.bench import has_content, value_groups, word_groups, word_in

    tokens, inside = rec["tokens"], rec["inside"]
    content = [has_content(t) for t in tokens]
    groups = word_groups(tokens)
    values = value_groups(tokens, groups)  # the words that are not keys
    word_hit = lambda g: word_in(g, inside)  # noqa: E731
    out: dict[str, float] = {}

    def add(name: str, scores: list[float]) -> None:
        out[f"{name}/token"] = float(inside[max(range(len(scores)), key=lambda i: scores[i])])
        among = [i for i in range(len(scores)) if content[i]] or list(range(len(scores)))
        out[f"{name}/content"] = float(inside[max(among, key=lambda i: scores[i])])
        for agg, fn in AGGREGATES.items():
            out[f"{name}/word_{agg}"] = word_hit(max(groups, key=lambda g: fn([scores[i] for i in g])))
            out[f"{name}/value_word_{agg}"] = word_hit(max(values, key=lambda g: fn([scores[i] for i in g])))

    for obj in ("targeted", "contrast"):
        add(f"{obj}/l1", rec[obj]["l1"])
        add(f"{obj}/abs_gxi", [abs(v) for v in rec[obj]["gxi"]])
    for key, name in (("l1", "l1"), ("gxi", "abs_gxi")):  # both objectives at once: the product of the shares
        a, b = ([abs(v) for v in rec[o][key]] for o in ("targeted", "contrast"))
        sa, sb = sum(a) or 1.0, sum(b) or 1.0
        add(f"product/{name}", [x / sa * y / sb for x, y in zip(a, b)])
    out["control/longest_word"] = word_hit(max(groups, key=len))
    out["control/random_word"] = sum(word_hit(g) for g in groups) / len(groups)
    out["control/longest_value_word"] = word_hit(max(values, key=len))
    out["control/random_value_word"] = sum(word_hit(g) for g in values) / len(values)
    out["control/random_content_token"] = sum(inside[i] for i in range(len(tokens)) if content[i]) / max(sum(content), 1)
    return out


def miss_kind(rec: dict[str, Any], group: list[int]) -> str:
    """Where a top word that misses the value lies: on the key of the value's own line (``own key``),
    on another line's key (``other key``), or elsewhere (``other value``); keys by the benchmark's
    ``is_key``."""
    from agentgrad.benchmarks.planted.bench import is_key, token_line_starts

    tokens, inside = rec["tokens"], rec["inside"]
    if not is_key(tokens, group):
        return "other value"
    line = token_line_starts(tokens)[2]
    return "own key" if any(inside[i] and line[i] == line[group[0]] for i in range(len(tokens))) else "other key"


def read_dump(path: Path) -> list[dict[str, Any]]:
    """The episodes of a dump that hold both objectives, each checked: tokens, their value mask and
    every objective's scores of one length."""
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        r = json.loads(line)
        if not isinstance(r, dict) or "targeted" not in r or "contrast" not in r:
            continue
        k = len(r.get("tokens") or [])
        if not k or len(r.get("inside") or []) != k or any(
                not isinstance(r[o], dict) or len(r[o].get("l1") or []) != k or len(r[o].get("gxi") or []) != k
                for o in ("targeted", "contrast")):
            raise ValueError(f"line {n} is not an episode of a dump (tokens, inside and scores of one length)")
        rows.append(r)
    if not rows:
        sys.exit(f"token_candidates: {path} holds no episode with both objectives")
    return rows


def score(paths: list[Path], explain: str = "", pairs: tuple[str, ...] = (), interval: bool = False) -> None:
    """Print every candidate's hit@1 over all episodes of ``paths``; then, per cell (a file and a
    topology), its hit@1 in each and the worst cell's, the candidates ordered by that minimum (the
    choice rule where a target holds per cell: the best worst cell, then the best mean); with
    ``explain``, where that word candidate's misses lie (:func:`explain_misses`); with ``interval``, the
    first table gives each hit@1 with its 95% Wilson interval."""
    if explain:
        word_candidate(explain)  # bad input before any work
    pair_of = [tuple(x.split(",")) for x in pairs]
    if bad := [x for x, pr in zip(pairs, pair_of) if len(pr) != 2]:
        sys.exit(f"token_candidates: --pair takes two candidates, A,B, not {bad[0]!r}")
    cells: dict[tuple[str, str], dict[str, list[float]]] = {}
    hits: dict[str, list[float]] = {}
    stems = [p.stem for p in paths]
    read = {path: read_dump(path) for path in paths}
    for path, rows in read.items():
        label = path.stem if stems.count(path.stem) == 1 else str(path)  # two files of one name stay apart
        for r in rows:
            cell = cells.setdefault((label, str(r.get("topology"))), {})
            for k, v in candidates(r).items():
                hits.setdefault(k, []).append(v)
                cell.setdefault(k, []).append(v)
    if unknown := [c for pr in pair_of for c in pr if c not in hits]:
        sys.exit(f"token_candidates: --pair: no candidate {unknown[0]!r} (the first table lists them)")
    n = len(next(iter(hits.values())))
    print(f"{n} episodes ({', '.join(map(str, paths))})\n\n| candidate | hit@1 |\n|---|---|")
    mean = {k: sum(v) / len(v) for k, v in hits.items()}
    for k in sorted(hits, key=lambda k: (k.startswith("control"), -mean[k])):
        if interval:
            from agentgrad.core.stats import wilson

            lo, hi = wilson(sum(hits[k]), len(hits[k]))
            print(f"| `{k}` | {mean[k]:.2f} [{lo:.2f}, {hi:.2f}] |")
        else:
            print(f"| `{k}` | {mean[k]:.2f} |")
    names = sorted(cells)
    per = {k: [sum(cells[c][k]) / len(cells[c][k]) for c in names] for k in hits}
    print("\nBy cell (file / topology, episodes), ordered by the worst cell:\n")
    print("| candidate | worst | " + " | ".join(f"{f} / {t} ({len(next(iter(cells[(f, t)].values())))})" for f, t in names) + " |")
    print("|---|---|" + "---|" * len(names))
    for k in sorted(hits, key=lambda k: (k.startswith("control"), -min(per[k]), -mean[k])):
        print(f"| `{k}` | {min(per[k]):.2f} | " + " | ".join(f"{v:.2f}" for v in per[k]) + " |")
    if pair_of:
        from agentgrad.benchmarks.stats import paired

        print("\nPaired, per file (the same episodes):\n\n| A | B | file | episodes | A | B | A - B | won | lost | p |"
              "\n|---|---|---|---|---|---|---|---|---|---|")
        for a, b in pair_of:
            for f in dict.fromkeys(stem for stem, _ in names):
                xa = [v for (stem, _), c in cells.items() if stem == f for v in c[a]]
                xb = [v for (stem, _), c in cells.items() if stem == f for v in c[b]]
                d = paired(xa, xb)
                print(f"| `{a}` | `{b}` | {f} | {d['n']} | {sum(xa) / len(xa):.2f} | {sum(xb) / len(xb):.2f} | "
                      f"{d['diff']:+.2f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}] | {d['wins']} | {d['losses']} | "
                      f"{d['p']:.1g} |")
    if explain:
        explain_misses(read, explain)


def word_candidate(name: str) -> tuple[str, str, Callable[[list[float]], float], bool]:
    """``OBJ/SCORE/word_AGG`` or ``OBJ/SCORE/value_word_AGG`` (``contrast/l1/word_sum``) as its
    objective, score, aggregate and whether keys are left out."""
    try:
        obj, key, agg = name.split("/")
        values = agg.startswith("value_word_")
        fn = AGGREGATES[agg.removeprefix("value_").removeprefix("word_")]
        if obj not in ("targeted", "contrast") or key not in ("l1", "abs_gxi") or not agg.removeprefix("value_").startswith("word_"):
            raise ValueError(name)
    except (ValueError, KeyError):
        sys.exit(f"token_candidates: --explain takes a word candidate such as contrast/l1/word_sum or "
                 f"targeted/l1/value_word_sum, not {name!r}")
    return obj, key, fn, values


def explain_misses(read: dict[Path, list[dict[str, Any]]], name: str) -> None:
    """Where the top word of a word candidate (``OBJ/SCORE/word_AGG``) lies when it misses, per file
    (its episodes as :func:`read_dump` read them)."""
    obj, key, fn, values = word_candidate(name)
    from agentgrad.benchmarks.planted.bench import value_groups, word_groups, word_in

    print(f"\nWhere `{name}` misses (its top word):\n\n| file | episodes | misses | own key | other key | other value |\n|---|---|---|---|---|---|")
    for path, rows in read.items():
        kinds = {"own key": 0, "other key": 0, "other value": 0}
        for r in rows:
            scores = [abs(v) for v in r[obj]["gxi"]] if key == "abs_gxi" else r[obj]["l1"]
            groups = word_groups(r["tokens"])
            groups = value_groups(r["tokens"], groups) if values else groups
            top = max(groups, key=lambda g: fn([scores[i] for i in g]))
            if not word_in(top, r["inside"]):
                kinds[miss_kind(r, top)] += 1
        print(f"| {path.stem} | {len(rows)} | {sum(kinds.values())} | " + " | ".join(str(v) for v in kinds.values()) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="gradients per token of one seed's episodes (SmolLM2)")
    d.add_argument("--seed", type=int, required=True)
    d.add_argument("--episodes", type=int, default=25, help="per topology")
    d.add_argument("--fault", default="transformed")
    d.add_argument("--topologies", default="", help="comma-separated (default: every topology)")
    d.add_argument("--style", default="lines", choices=("lines", "prose"), help="how the calls write (bench blame --style)")
    d.add_argument("--out", type=Path, required=True, help="a new JSONL file")
    s = sub.add_parser("score", help="hit@1 of every candidate on a dump")
    s.add_argument("file", type=Path, nargs="+", help="one or more dumps (each a family: a cell is a file and a topology)")
    s.add_argument("--explain", default="", help="a word candidate (contrast/l1/word_sum): where its misses lie")
    s.add_argument("--pair", action="append", default=[], help="A,B: candidate A against B on the same episodes, "
                                                             "per file (repeatable)")
    s.add_argument("--interval", action="store_true", help="each hit@1 of the first table with its 95%% Wilson interval")
    a = ap.parse_args()
    try:
        if a.cmd == "dump":
            dump(a.seed, a.episodes, a.out, a.fault, [t for t in a.topologies.split(",") if t], a.style)
        else:
            score(a.file, a.explain, tuple(a.pair), a.interval)
    except FileExistsError:
        sys.exit(f"token_candidates: {a.out} exists; give a new --out")
    except (OSError, ValueError) as e:  # read_dump checks every record's fields: a KeyError here is a bug
        what = f"cannot read {' '.join(map(str, a.file))}" if a.cmd == "score" else f"dump to {a.out} failed"
        sys.exit(f"token_candidates: {what} ({e})")


if __name__ == "__main__":
    main()
