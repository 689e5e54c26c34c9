"""Print the injected-faults tables (markdown) from kept ``bench inject`` episode records.

    python benchmarks/inject_table.py records/inject-smollm2/q12-r1.jsonl \
        --join records/inject-smollm2/q12-key.jsonl \
        --pair gbc:max_l1:targeted:blend,provenance --pair gbc:max_l1:targeted:blend,gbc:max_l1:targeted:carry

The records are one JSON line per injection (ids, system, kind, position, ``final``, status, truth,
and for the propagated ones each method's scores). The script prints what the run kept and what
propagated (the clean runs kept per system are the questions with an injection record: an injection
is only made into a clean run whose answer was right; the share of injections that propagated with its
95% Wilson interval, per kind, at the final agent and upstream), then every method's agent top-1
over the propagated faults (95% Wilson interval, as ``bench inject`` computes it), upstream and at the
final agent, and per ``--pair A,B`` the paired difference of A and B on the same faults
(:func:`agentgrad.benchmarks.stats.paired`: the difference, its bootstrap interval, faults won / lost,
the sign test's p), overall, upstream and at the final agent.

``--keep RUN`` writes the compact records of a ``bench inject`` run folder (its ``episodes/``) to the
file named as RECORDS: per injection its ids, system, kind, position, ``final``, status, truth and
candidates, per method its scores and the agents it names at the top (``top``); no texts, traces or
rankings.

``--join FILE`` adds the methods of another run's records of the same injections (same episode ids
and truth) that the first file does not hold, so that methods run apart are paired on the same
faults; a method in both is the first file's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def read(path: Path) -> list[dict]:
    """The records of one kept file; one that is not such a file stops with one line."""
    try:
        recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, ValueError) as e:
        sys.exit(f"inject_table: {path} is not a readable records file of bench inject ({e.__class__.__name__})")
    if not recs or not all(isinstance(r, dict) and {"episode", "status", "system", "final"} <= set(r) for r in recs):
        sys.exit(f"inject_table: {path} is not a records file of bench inject (each line: episode, status, system, final)")
    return recs


def join(recs: list[dict], other: Path) -> None:
    """Add ``other``'s methods (those not already there) to the propagated records, in place."""
    theirs = {r["episode"]: r for r in read(other)}
    for r in recs:
        o = theirs.get(r["episode"])
        if o is None or o.get("truth") != r.get("truth") or o.get("status") != r.get("status"):
            what = "no record of" if o is None else "another truth or status for"
            sys.exit(f"inject_table: --join: {other} has {what} {r['episode']}: join records of the same injections")
        if r.get("methods"):
            r["methods"] = {**r["methods"], **{m: v for m, v in (o.get("methods") or {}).items() if m not in r["methods"]}}


KEPT = ("episode", "system", "question", "kind", "position", "final", "status", "truth", "candidates")


def keep(run: Path, out: Path) -> None:
    """The run's injection records, compact, one JSON line each (sorted by episode id)."""
    from blame_table import kept_scores

    if out.exists():
        sys.exit(f"inject_table: --keep: {out} exists; name a new file for the kept records")
    files = sorted((run / "episodes").glob("*.json"))
    if not files:
        sys.exit(f"inject_table: --keep: no injection records in {run / 'episodes'}")
    lines = []
    for f in files:
        try:
            r = json.loads(f.read_text(encoding="utf-8"))
            c = {k: r[k] for k in KEPT if k in r}
            methods = dict(r.get("methods") or {})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            sys.exit(f"inject_table: --keep: {f} is not a bench inject injection record ({e})")
        if methods:
            c["methods"] = {m: kept_scores(v) for m, v in methods.items()}
            if None in c["methods"].values():
                sys.exit(f"inject_table: --keep: {f} is not a bench inject injection record (a method without its scores)")
        lines.append(json.dumps(c, sort_keys=True))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"kept {len(lines)} injection records in {out}", file=sys.stderr)


def share(k: int, n: int) -> str:
    from agentgrad.core.stats import wilson

    lo, hi = wilson(k, n)
    return f"{k} of {n}: {k / n:.2f} [{lo:.2f}, {hi:.2f}]" if n else "0 of 0"


def _p(p: float) -> str:
    return f"{p:.2f}" if p >= 0.01 else f"{p:.0e}"


def main(argv: list[str] | None = None) -> None:
    from agentgrad.benchmarks.stats import paired
    from agentgrad.core.stats import wilson

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records", type=Path, help="a kept records file of bench inject (.jsonl)")
    ap.add_argument("--join", type=Path, action="append", default=[],
                    help="records of another run on the same injections: its other methods are added (repeatable)")
    ap.add_argument("--keep", type=Path, metavar="RUN",
                    help="write the compact records of the bench inject run folder RUN to RECORDS, then print them")
    ap.add_argument("--pair", action="append", default=[], metavar="A,B",
                    help="method A against method B, paired on the same faults (repeatable)")
    a = ap.parse_args(argv)
    pairs = [tuple(x.split(",")) for x in a.pair]
    if any(len(p) != 2 or not all(p) for p in pairs):
        sys.exit("inject_table: --pair takes two method names joined by a comma: --pair A,B")
    if a.keep:
        keep(a.keep, a.records)
    recs = read(a.records)
    for other in a.join:
        join(recs, other)
    ran = [r for r in recs if r["status"] in ("propagated", "absorbed")]
    scored = [r for r in recs if r["status"] == "propagated" and r.get("methods")]
    if not scored:
        sys.exit(f"inject_table: {a.records} holds no propagated injection")
    methods = [m for m in scored[0]["methods"] if all(m in r["methods"] for r in scored)]
    kept = {}
    for r in recs:
        kept.setdefault(r["system"], set()).add(r.get("question"))
    print("clean runs kept (questions with injections): " + ", ".join(f"{s} {len(q)}" for s, q in kept.items())
          + f"; {sum(len(q) for q in kept.values())} in all\n")
    prop = lambda rs: sum(r["status"] == "propagated" for r in rs)  # noqa: E731
    print(f"- propagated: {share(prop(ran), len(ran))}")
    for kind in dict.fromkeys(r["kind"] for r in ran):
        rs = [r for r in ran if r["kind"] == kind]
        print(f"- propagated, {kind}: {share(prop(rs), len(rs))}")
    for label, final in (("at the final agent", True), ("upstream", False)):
        rs = [r for r in ran if bool(r["final"]) is final]
        print(f"- propagated, {label}: {share(prop(rs), len(rs))}")
    up = [r for r in scored if not r["final"]]
    fin = [r for r in scored if r["final"]]
    print(f"\nagent top-1 on the {len(scored)} propagated faults (95% Wilson interval)\n")
    print(f"| method | all {len(scored)} (95% CI) | upstream ({len(up)}) | at the final agent ({len(fin)}) |")
    print("|---|---|---|---|")
    for m in methods:
        cells = []
        for rs in (scored, up, fin):
            s = sum(r["methods"][m]["agent_top1"] for r in rs)
            lo, hi = wilson(s, len(rs))
            cells.append(f"{s / len(rs):.2f} [{lo:.2f}, {hi:.2f}]" if rs else "-")
        print(f"| `{m}` | " + " | ".join(cells) + " |")
    for x, y in pairs:
        for name in (x, y):
            if name not in methods:
                sys.exit(f"inject_table: --pair: the records hold no method {name!r} on every propagated fault")
        print(f"\n`{x}` against `{y}` (agent top-1, paired on the same faults; bootstrap 95% interval, sign test)\n")
        print(f"| all ({len(scored)}) | upstream ({len(up)}) | at the final agent ({len(fin)}) |")
        print("|---|---|---|")
        cells = []
        for rs in (scored, up, fin):
            d = paired([r["methods"][x]["agent_top1"] for r in rs], [r["methods"][y]["agent_top1"] for r in rs])
            cells.append(f"{d['diff']:+.2f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}] ({d['wins']} won, "
                         f"{d['losses']} lost, p {_p(d['p'])})")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
