"""Print what the per-trace confidence signals are worth (markdown), from the committed benchmark records.

    python benchmarks/confidence_table.py RECORDS... [--part development|report] [--candidates]
        [--json records/confidence/confidence-table.json] [--write-package]

RECORDS are the record files and folders the pre-registration of docs/confidence.md names (the
planted, injected and Who&When records under records/); each is placed in its benchmark and part by
its name, and a benchmark whose files are not all given is left out (said so). Per signal, benchmark
and part: the default's agent top-1 (ties earn 1/ties) when the signal says *agree* and when it
says *disagree*, with counts and 95% Wilson intervals.

The fresh part (registered 2026-12-06: planted seed 20, the inject val split) keeps each method's
top agents (``top``), compared directly, and is what the package quotes for the benchmarks it covers.
The older planted and injected records keep each method's correctness, not the agent it named: two
methods *agree* there when both name the truth (``agent_top1`` 1.0), *disagree* when exactly one
does; when neither does the records cannot say, and the episode counts as an agreement (the
assignment least favourable to the signal) and is counted apart (``unresolved``); beside it, as a
bound, the two accuracies were every unresolved episode a disagreement instead (the other extreme
the records allow). The Who&When
records keep each method's top pick, compared directly (:func:`agentgrad.blame.confidence.agrees`).

``--candidates`` prints, on the development parts, the runner-up candidates' gaps that chose
``RUNNER_UP`` (the rule: docs/confidence.md). ``--json PATH`` writes every figure printed;
``--write-package`` writes the report parts' figures to the library's package file
(``src/agentgrad/blame/confidence.json``), which :func:`agentgrad.blame.confidence.confidence` quotes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agentgrad.core.stats import wilson
from agentgrad.blame.confidence import PACKAGE_FILE, agrees, top_agents

BLEND = "gbc:max_l1:targeted:blend"
FOLLOW = "gbc:max_l1:targeted:follow"
CANDIDATES = ("gbc:max_l1:targeted:carry", FOLLOW, "temporal")
RUNNER_UP = FOLLOW  # chosen on the development parts by the pre-registered rule (docs/confidence.md, 2026-12-03)

KV, PROSE, INJ = "planted, key: value", "planted, prose", "injected faults"
WWA, WWH = "Who&When, algorithm", "Who&When, hand-crafted"
# (benchmark, part, kind, the scorer method, [the records: the first, then those joined to it]);
# the scorer signals' units, then the model-free ones (provenance against last), as pre-registered
SCORED = [
    (KV, "development", "planted", BLEND, ["blame-smollm2/s11-r1-25.jsonl", "blame-smollm2/s11-key-25.jsonl"]),
    (KV, "development", "planted", BLEND, ["blame-smollm2/s11-mi-r1-50.jsonl"]),
    (KV, "report", "planted", BLEND, ["blame-smollm2/s12-r1-25.jsonl", "blame-smollm2/s12-key-25.jsonl"]),
    (KV, "report", "planted", BLEND, ["blame-smollm2/s12-mi-r1-50.jsonl"]),
    (PROSE, "development", "planted", BLEND, ["blame-smollm2/p13-prose-50.jsonl"]),
    (PROSE, "report", "planted", BLEND, ["blame-smollm2/p12-blend-50.jsonl", "blame-smollm2/p12-prose-50.jsonl"]),
    (INJ, "report", "inject", BLEND, ["inject-smollm2/q12-r1.jsonl", "inject-smollm2/q12-key.jsonl"]),
    (WWA, "development", "whowhen", FOLLOW, ["whowhen-smollm2/algorithm-span-dev"]),
    (WWA, "report", "whowhen", FOLLOW, ["whowhen-smollm2/algorithm-follow-heldout"]),
    (WWH, "report", "whowhen", FOLLOW, ["whowhen-smollm2/hand-follow-heldout"]),
]
FREE = [
    (KV, "development", "planted", "provenance", ["blame-smollm2/s11-free-50.jsonl"]),
    (KV, "report", "planted", "provenance", ["blame-smollm2/s12-free-50.jsonl"]),
    (PROSE, "development", "planted", "provenance", ["blame-smollm2/p13-prose-50.jsonl"]),
    (PROSE, "report", "planted", "provenance", ["blame-smollm2/p12-prose-50.jsonl"]),
    (INJ, "report", "inject", "provenance", ["inject-smollm2/q12-r1.jsonl", "inject-smollm2/q12-key.jsonl"]),
    (WWA, "development", "whowhen", "provenance", ["whowhen-smollm2/algorithm-span-dev"]),
    (WWA, "report", "whowhen", "provenance", ["whowhen-smollm2/algorithm-follow-heldout"]),
    (WWH, "report", "whowhen", "provenance", ["whowhen-smollm2/hand-follow-heldout"]),
]
# the re-measurement on data generated after its registration (docs/confidence.md, 2026-12-06): planted
# seed 20 (lines with misroutes joined, prose) and the inject val split at seed 1; each method's top agents
# are recorded, so nothing is unresolved. These are the shipped meanings of the benchmarks they cover.
FRESH = "fresh"
FRESH_RECORDS = {KV: ["confidence-smollm2/f20-key.jsonl", "confidence-smollm2/f20-mi.jsonl"],
                 PROSE: ["confidence-smollm2/f20-prose.jsonl"], INJ: ["confidence-smollm2/inject-val.jsonl"]}
for _bench, _names in FRESH_RECORDS.items():
    _kind = "inject" if _bench == INJ else "planted"
    SCORED += [(_bench, FRESH, _kind, BLEND, [n]) for n in _names]
    FREE += [(_bench, FRESH, _kind, "provenance", [n]) for n in _names]
PARTS = ("development", "report", FRESH)
BENCHMARKS = (KV, PROSE, INJ, WWA, WWH)


def key_of(path: Path) -> str:
    """The name a record goes by in the units above: its folder and its own name."""
    p = path.resolve()
    return f"{p.parent.name}/{p.name}"


def _jsonl(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, ValueError) as e:
        sys.exit(f"confidence_table: {path} is not a readable records file ({e.__class__.__name__})")


def episodes(kind: str, paths: list[Path]) -> list[dict]:
    """One dict per scored episode: ``methods`` {name: {"right": agent top-1, "top": agent or None}}.
    Joined files add the methods the first lacks, on the same episode ids and truth."""
    if kind == "whowhen":
        out = []
        for p in sorted((paths[0] / "logs").glob("*.json")):
            r = json.loads(p.read_text(encoding="utf-8"))
            if r.get("excluded") or r.get("too_long") or not isinstance(r.get("methods"), dict):
                continue
            out.append({"id": r["log"], "methods": {m: {"right": v["agent"], "top": (v.get("top") or {}).get("agent")}
                                                    for m, v in r["methods"].items()}})
        return out
    recs = _jsonl(paths[0])
    for other in paths[1:]:
        theirs = {r["episode"]: r for r in _jsonl(other)}
        for r in recs:
            o = theirs.get(r["episode"])
            if o is None or o.get("truth") != r.get("truth") or o.get("status") != r.get("status"):
                sys.exit(f"confidence_table: {other} does not hold {r['episode']} with the same truth: "
                         "join records of the same episodes")
            if r.get("methods"):
                r["methods"] = {**r["methods"], **{m: v for m, v in (o.get("methods") or {}).items() if m not in r["methods"]}}
    if kind == "inject":
        recs = [r for r in recs if r.get("status") == "propagated" and r.get("methods")]
    return [{"id": r["episode"], "methods": {m: {"right": v["agent_top1"], "top": v.get("top")} for m, v in r["methods"].items()}}
            for r in recs]


def relation(a: dict, b: dict) -> str:
    """``agree``, ``disagree`` or ``unresolved`` (neither names the truth: counted as agreeing)."""
    if a["top"] is not None and b["top"] is not None:
        return "agree" if agrees(top_agents(a["top"]), top_agents(b["top"])) else "disagree"
    ra, rb = a["right"] == 1.0, b["right"] == 1.0
    return "agree" if ra and rb else "disagree" if ra != rb else "unresolved"


def split(eps: list[dict], method: str, partners: list[str]) -> dict | None:
    """The method's accuracy where it agrees with every partner and where it does not, or None when
    a partner is not recorded on every episode (or is the method itself)."""
    if not eps or method in partners or not all(m in e["methods"] for e in eps for m in [method, *partners]):
        return None
    groups: dict[str, list[float]] = {"agree": [], "disagree": []}
    moved: list[float] = []  # the unresolved ones (the default's credit on each)
    for e in eps:
        rel = [relation(e["methods"][method], e["methods"][p]) for p in partners]
        side = "disagree" if "disagree" in rel else "agree"
        groups[side].append(e["methods"][method]["right"])
        if side == "agree" and "unresolved" in rel:
            moved.append(e["methods"][method]["right"])
    out: dict = {"n": len(eps), "unresolved": len(moved)}
    for side, xs in groups.items():
        k = sum(xs)
        out[side] = {"n": len(xs), "right": round(k, 6), "accuracy": round(k / len(xs), 4) if xs else None,
                     "ci95": [round(x, 4) for x in wilson(k, len(xs))] if xs else None}
    # the other extreme: every unresolved episode a disagreement (a bound, not the registered counting)
    na, nd = len(groups["agree"]) - len(moved), len(groups["disagree"]) + len(moved)
    ka, kd = sum(groups["agree"]) - sum(moved), sum(groups["disagree"]) + sum(moved)
    out["bound"] = {"agree": round(ka / na, 4) if na else None, "disagree": round(kd / nd, 4) if nd else None}
    return out


def gap(s: dict) -> float | None:
    if s is None or not s["agree"]["n"] or not s["disagree"]["n"]:
        return None
    return s["agree"]["accuracy"] - s["disagree"]["accuracy"]


def fmt(side: dict) -> str:
    if not side["n"]:
        return "- (n 0)"
    lo, hi = side["ci95"]
    return f"{side['accuracy']:.2f} [{lo:.2f}, {hi:.2f}] (n {side['n']})"


def bound(s: dict) -> str:
    if not s["unresolved"]:
        return "(none)"
    return " / ".join("-" if x is None else f"{x:.2f}" for x in (s["bound"]["agree"], s["bound"]["disagree"]))


def gather(units: list, given: dict[str, Path], part: str | None) -> dict:
    """{(benchmark, part): (method, episodes)} over the units whose records were all given."""
    out: dict = {}
    for bench, p, kind, method, names in units:
        if part and p != part or not all(n in given for n in names):
            continue
        _, eps = out.setdefault((bench, p), (method, []))
        eps.extend(episodes(kind, [given[n] for n in names]))
    return out


def signals(runner_up: str | None) -> list[tuple[str, str, list]]:
    """(signal, its partners' description, [(partners, units)]) as pre-registered."""
    out = [("agree", "`provenance`", [(["provenance"], SCORED)])]
    if runner_up:
        out += [("runner-up", f"`{runner_up}`", [([runner_up], SCORED)]),
                ("both", f"`provenance` and `{runner_up}`", [(["provenance", runner_up], SCORED)])]
    return out + [("model-free", "`last` (the verdict: `provenance`)", [(["last"], FREE)])]


def table(given: dict[str, Path], part: str | None, runner_up: str | None) -> list[dict]:
    rows = []
    for signal, what, [(partners, units)] in signals(runner_up):
        data = gather(units, given, part)
        print(f"\n### {signal}: the verdict agrees with {what}\n")
        print("| benchmark | part | method | episodes | agree | disagree | unresolved (counted as agree) "
              "| were they disagreements: agree / disagree |")
        print("|---|---|---|---|---|---|---|---|")
        for bench in BENCHMARKS:
            for p in PARTS:
                if (bench, p) not in data:
                    continue
                method, eps = data[(bench, p)]
                s = split(eps, method, partners)
                if s is None:
                    print(f"| {bench} | {p} | `{method}` | {len(eps)} | not recorded | | |")
                    continue
                print(f"| {bench} | {p} | `{method}` | {s['n']} | {fmt(s['agree'])} | {fmt(s['disagree'])} | "
                      f"{s['unresolved']} | {bound(s)} |")
                rows.append({"signal": signal, "benchmark": bench, "part": p, "method": method, "partners": partners, **s})
    return rows


def candidates(given: dict[str, Path]) -> None:
    """The runner-up rule on the development parts: each candidate's gap, pooled over the episodes
    where all three are recorded beside the default."""
    data = gather(SCORED, given, "development")
    pool = [e for (bench, p), (method, eps) in data.items() for e in eps
            if all(c in e["methods"] and c != method for c in CANDIDATES) and method in e["methods"]]
    method = BLEND
    print(f"\n### runner-up candidates, development ({len(pool)} episodes where all three are recorded beside `{method}`)\n")
    print("| candidate | agree | disagree | unresolved | gap |")
    print("|---|---|---|---|---|")
    for c in CANDIDATES:
        s = split(pool, method, [c])
        g = gap(s)
        print(f"| `{c}` | {fmt(s['agree'])} | {fmt(s['disagree'])} | {s['unresolved']} | "
              f"{'-' if g is None else f'{g:+.3f}'} |")


def package(rows: list[dict]) -> dict:
    """The figures the library quotes: per signal and benchmark its part measured on fresh data where
    there is one (registered 2026-12-06), else its report part; each labelled with its method and part."""
    out: dict = {"source": "python benchmarks/confidence_table.py (docs/confidence.md)", "signals": {}}
    fresh = {(r["signal"], r["benchmark"]) for r in rows if r["part"] == FRESH}
    for r in rows:
        if r["part"] == "development" or (r["part"] == "report" and (r["signal"], r["benchmark"]) in fresh):
            continue
        out["signals"].setdefault(r["signal"], {"method": r["method"] if r["signal"] == "model-free" else BLEND,
                                                "partners": r["partners"], "benchmarks": {}})
        out["signals"][r["signal"]]["benchmarks"][r["benchmark"]] = {
            "method": r["method"], "part": r["part"], "unresolved": r["unresolved"], "bound": r["bound"],
            **{side: {k: r[side][k] for k in ("n", "accuracy", "ci95")} for side in ("agree", "disagree")}}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", type=Path, help="the record files and folders docs/confidence.md names")
    ap.add_argument("--part", choices=PARTS, help="one part only")
    ap.add_argument("--candidates", action="store_true", help="the runner-up rule's figures on the development parts")
    ap.add_argument("--json", type=Path, help="write every printed figure here")
    ap.add_argument("--write-package", action="store_true", help=f"write the report figures to {PACKAGE_FILE}")
    a = ap.parse_args(argv)
    known = {n for *_, names in SCORED + FREE for n in names}
    given = {}
    for path in a.records:
        if not path.exists():
            sys.exit(f"confidence_table: {path} does not exist")
        if key_of(path) not in known:
            sys.exit(f"confidence_table: {path} is not a record the pre-registration names (docs/confidence.md)")
        given[key_of(path)] = path
    if a.candidates:
        candidates(given)
        return
    missing = sorted(known - set(given))
    if a.write_package and (a.part or missing):
        sys.exit("confidence_table: --write-package takes every record the pre-registration names, both parts")
    if missing:
        print(f"(not given, so their units are left out: {', '.join(missing)})")
    rows = table(given, a.part, RUNNER_UP)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"runner_up": RUNNER_UP, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    if a.write_package:
        PACKAGE_FILE.write_text(json.dumps(package(rows), indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
