"""Print the README's blame tables (markdown) from a ``bench blame`` metrics.json.

    python benchmarks/blame_table.py runs/blame/metrics.json [--methods a,b] [--compact] [--save small.json]
        [--keep records.jsonl]
    python benchmarks/blame_table.py records.jsonl ...   # the same tables from kept records
    python benchmarks/blame_table.py records.jsonl --join free.jsonl   # with another run's methods, paired
    python benchmarks/blame_table.py runs/blame/metrics.json --pair A,B   # A against B, paired, per family
    python benchmarks/blame_table.py records.jsonl --token-pair contrast:l1_word,targeted:longest_word
    python benchmarks/blame_table.py new.jsonl --join old.jsonl --join-suffix before --pair M,M@before
        # a method against itself in a run before a change (the joined methods named METHOD@before)

Figures are agent-level top-1 (ties at the top earn 1/ties). For every fault family present: one
table, a row per method, a column per topology, each cell the figure and its paired difference with
``provenance`` (the string walk, no model) on the same episodes with the sign test's p; then the
family over every topology with its 95% Wilson interval, the paired difference with its bootstrap
interval, and the best model-free method of those episodes. Token-level hit@1 (targeted objective)
per family where the loss has a span. ``--save`` keeps a small copy (agent top-1 and the paired
figures per group, token precision, cost), which the script reads back in place of a metrics.json
(``records/blame-results-cpu-2core.json``: its tables and token hit@1, no pairs). ``--keep``
writes the run's per-episode records, compact (ids, truth, each method's scores and the agents it names at the
top, token precision; no traces or rankings), one JSON line each: the file the repository keeps of a run
(``records/blame-smollm2/``), which this script reads back in place of a metrics.json and summarises with the benchmark's own code. ``--pair A,B`` (repeatable)
prints, per family, method A against method B on the same episodes: the mean difference of agent
top-1 with its bootstrap interval, the episodes won and lost and the sign test's p, over every
topology and per topology (a metrics.json reads the episode records beside it). ``--token-pair A,B``
does the same for token hit@1, each side an ``OBJECTIVE:SCORE`` (``targeted:l1``, the L1 peak the
walk reads; ``contrast:l1_word``; ``targeted:longest_word``, the model-free control).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agentgrad.blame.context import Blame, top_tied

TOPOLOGIES = ("chain", "fanin", "manager", "broadcast")
SCORE_NAMES = (("abs_gxi", "|gradient x input|"), ("gxi", "signed gradient x input"),  # token scores beside L1
               ("l1_content", "L1 among content tokens"), ("abs_gxi_content", "|gradient x input| among content tokens"),
               ("l1_word", "L1 summed over each word"), ("abs_gxi_word", "|gradient x input| summed over each word"),
               ("longest_word", "the longest word (no model)"),
               ("l1_value_word", "L1 summed over each word that is not a key"),
               ("longest_value_word", "the longest word that is not a key (no model)"))
WORD_PAIRS = (("vs_longest_word", "the longest word"), ("vs_content", "its peak content token"),  # a word score's pairs
              ("vs_longest_value_word", "the longest word that is not a key"), ("vs_word", "its word score with keys"))


def _word_pairs(t: dict) -> str:
    """A word score's pairs (against length alone, and its own peak content token), where recorded."""
    return "".join(f"; against {what} {w['diff']:+.2f} [{w['ci95'][0]:+.2f}, {w['ci95'][1]:+.2f}] "
                   f"({w['wins']} won, {w['losses']} lost, p {_p(w['p'])})" for key, what in WORD_PAIRS if (w := t.get(key)))


def _p(p: float) -> str:
    return f"{p:.2f}" if p >= 0.01 else f"{p:.0e}"


def cell(fig: dict) -> str:
    v = fig["agent_top1"]["value"]
    d, b = fig.get("vs_provenance"), fig.get("vs_best_free")
    if d is None:
        return f"{v:.2f}"
    best = "" if b is None or b["baseline"] == "provenance" else f"; {b['diff']:+.2f} vs best, p {_p(b['p'])}"
    return f"{v:.2f} ({d['diff']:+.2f}, p {_p(d['p'])}{best})"


KEPT = ("episode", "topology", "fault", "long", "truth", "candidates", "token")
SCORES = ("agent_top1", "node_top1", "agent_top3")


def kept_scores(v: object) -> dict | None:
    """One method's scores as kept, with the agents it names at the top (``top``) where the record
    holds them or its ranking (records written before ``top`` was); None for an entry that is not a
    method's scores."""
    if not isinstance(v, dict) or not set(SCORES) <= set(v):
        return None
    out = {k: v[k] for k in SCORES}
    ranking = v.get("ranking")
    if "top" in v:
        out["top"] = v["top"]
    elif isinstance(ranking, list):
        if not all(isinstance(b, dict) and {"agent", "node", "score"} <= set(b) for b in ranking):
            return None
        out["top"] = top_tied([Blame(b["agent"], b["node"], b["score"]) for b in ranking], lambda b: b.agent)
    return out


def keep(episodes: Path, out: Path) -> None:
    """The run's episode records, compact, one JSON line each (sorted by episode id)."""
    files = sorted(episodes.glob("*.json"))
    if not files:
        sys.exit(f"blame_table: --keep: no episode records in {episodes}")
    lines = []
    for f in files:
        try:
            r = json.loads(f.read_text())
            methods = dict(r["methods"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"blame_table: --keep: {f} is not a bench blame episode record ({e})")
        kept = {m: kept_scores(v) for m, v in methods.items()}
        if None in kept.values():
            sys.exit(f"blame_table: --keep: {f} is not a bench blame episode record (a method without {', '.join(SCORES)})")
        lines.append(json.dumps({**{k: r[k] for k in KEPT if k in r}, "methods": kept}, sort_keys=True))
    try:
        out.write_text("\n".join(lines) + "\n")
    except OSError as e:
        sys.exit(f"blame_table: --keep: cannot write {out} ({e.strerror})")
    print(f"kept {len(lines)} episode records in {out}", file=sys.stderr)


class JoinError(Exception):
    """A ``--join`` file that cannot be joined to the records."""


def read_records(path: Path, join: list[Path] = (), suffix: str = "") -> dict:
    """A kept records.jsonl summarised as ``bench blame`` summarises a run (every method of its first
    record). ``join``: records of other runs on the same episodes (same seed: the generator is
    deterministic), whose methods are added to each episode's, so that every method is paired with
    every other on the same episodes; an episode missing from one, or with another truth, is an error."""
    from agentgrad.benchmarks.planted.bench import summarize

    records = episode_records(path, join, suffix)
    methods = list(dict.fromkeys(m for r in records[:1] for m in r["methods"]))
    if not suffix:
        return summarize(records, methods)
    # ``METHOD@SUFFIX`` reads as a fact reader to the registry; summarised under a name outside it
    # (never a model-free baseline, as a joined run's method was before), then named back
    tag = {m: m.replace(f"@{suffix}", f"#{suffix}") for m in methods}
    back = {v: k for k, v in tag.items()}
    for r in records:
        r["methods"] = {tag.get(m, m): v for m, v in r["methods"].items()}
    out = summarize(records, [tag[m] for m in methods])
    out["methods"] = methods
    out["groups"] = {g: {back.get(m, m): v for m, v in figs.items()} for g, figs in out["groups"].items()}
    return out


def episode_records(path: Path, join: list[Path] = (), suffix: str = "") -> list[dict]:
    """The per-episode records of a kept records.jsonl (with ``join``'s methods added; with ``suffix``,
    each named ``METHOD@SUFFIX``, so that a method can be paired with itself in another run), or of
    the ``episodes/`` folder beside a metrics.json."""
    if path.suffix != ".jsonl":
        return [json.loads(f.read_text()) for f in sorted((path.parent / "episodes").glob("*.json"))]
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for other in join:
        try:
            more = {r["episode"]: r for r in (json.loads(line) for line in other.read_text().splitlines() if line.strip())}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise JoinError(f"{other} is not a records.jsonl of bench blame ({e})") from e
        for r in records:
            o = more.get(r["episode"])
            if o is None or o.get("truth") != r.get("truth"):
                raise JoinError(f"{other} has {'no episode' if o is None else 'another truth for'} {r['episode']}: "
                                "join records of the same seed and episodes")
            named = {(f"{m}@{suffix}" if suffix else m): v for m, v in o["methods"].items()}
            r["methods"] = {**r["methods"], **{m: v for m, v in named.items() if m not in r["methods"]}}
    return records


def from_saved(small: dict) -> dict:
    """A copy written by ``--save`` read back as the summary it was cut from: agent top-1 and its
    paired figures per group and method (no counts, no episode records)."""
    groups = {grp: {meth: (v if "agent_top1" in v else {"agent_top1": v}) for meth, v in figs.items()}
              for grp, figs in small["agent_top1"].items()}
    return {"episodes": small["episodes"], "chance_agent_top1": small["chance_agent_top1"], "saved": True,
            "methods": list(groups["all"]), "groups": groups, "token": small.get("token", {}),
            "token_by_group": small.get("token_by_group", {})}


def method_top1(r: dict, name: str) -> float | None:
    """A record's agent top-1 for method ``name`` (None where it did not run)."""
    m = r.get("methods", {}).get(name)
    return None if m is None else m["agent_top1"]


def token_hit(r: dict, name: str) -> float | None:
    """A record's token hit@1 for ``OBJECTIVE:SCORE`` (``targeted:l1`` is the L1 peak the walk reads;
    ``contrast:l1_word``, ``targeted:longest_word``, ...), None where it was not measured."""
    obj, _, score = name.partition(":")
    t = (r.get("token") or {}).get(obj)
    if not t:
        return None
    return t["hit1"] if score == "l1" else (t.get(score) or {}).get("hit1")


def print_pair(records: list[dict], a: str, b: str, get=method_top1, what: str = "agent top-1",
               flag: str = "--pair") -> None:
    """``a`` against ``b`` (``get``: a record's figure for a name), paired on the episodes that hold
    both, per family and topology."""
    from agentgrad.benchmarks.stats import paired

    both = [r for r in records if get(r, a) is not None and get(r, b) is not None]
    if not both:
        sys.exit(f"blame_table: {flag}: no episode record holds both {a!r} and {b!r}")
    print(f"`{a}` against `{b}` ({what}, paired on the same episodes; bootstrap 95% interval, sign test)\n")
    print("| family | all | " + " | ".join(TOPOLOGIES) + " |")
    print("|" + "---|" * (len(TOPOLOGIES) + 2))
    for fault in dict.fromkeys(r["fault"] for r in both):
        cells = []
        for topo in (None, *TOPOLOGIES):
            rs = [r for r in both if r["fault"] == fault and topo in (None, r["topology"])]
            if not rs:
                cells.append("-")
                continue
            d = paired([get(r, a) for r in rs], [get(r, b) for r in rs])
            cells.append(f"{d['diff']:+.2f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}] ({d['wins']} won, "
                         f"{d['losses']} lost, p {_p(d['p'])}; n {d['n']})" if topo is None
                         else f"{d['diff']:+.2f} ({d['wins']}/{d['losses']})")
        print(f"| {fault} | " + " | ".join(cells) + " |")
    print()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("metrics", type=Path)
    ap.add_argument("--save", type=Path)
    ap.add_argument("--keep", type=Path, help="write the run's episode records, compact, as JSON lines")
    ap.add_argument("--methods", default="", help="comma list (default: every method)")
    ap.add_argument("--compact", action="store_true", help="topology cells hold the figure only (the docs' tables)")
    ap.add_argument("--join", type=Path, action="append", default=[],
                    help="kept records of another run on the same episodes (e.g. model-free methods, --scorer none): "
                         "their methods are added and paired (repeatable; records.jsonl input only)")
    ap.add_argument("--join-suffix", default="", metavar="SUFFIX",
                    help="name the joined runs' methods METHOD@SUFFIX (pair a method with itself in another run, "
                         "e.g. the rule before a change: --pair M,M@before)")
    ap.add_argument("--pair", action="append", default=[], metavar="A,B",
                    help="print method A against method B, paired, per family and topology (repeatable)")
    ap.add_argument("--token-pair", action="append", default=[], metavar="A,B",
                    help="print token hit@1 of OBJECTIVE:SCORE A against B (targeted:l1, contrast:l1_word, "
                         "targeted:longest_word, ...), paired, per family and topology (repeatable)")
    a = ap.parse_args()
    pairs = [tuple(x.split(",")) for x in a.pair]
    if any(len(p) != 2 or not all(p) for p in pairs):
        sys.exit("blame_table: --pair takes two method names joined by a comma: --pair A,B")
    token_pairs = [tuple(x.split(",")) for x in a.token_pair]
    if any(len(p) != 2 or not all(":" in n and all(n.split(":")) for n in p) for p in token_pairs):
        sys.exit("blame_table: --token-pair takes two OBJECTIVE:SCORE names joined by a comma: "
                 "--token-pair contrast:l1_word,targeted:longest_word")
    if a.join_suffix and len(a.join) != 1:
        sys.exit("blame_table: --join-suffix names the methods of one --join file: give exactly one --join")
    if "," in a.join_suffix:
        sys.exit("blame_table: --join-suffix cannot hold a comma (--pair A,B could not name its methods)")
    if a.join and a.metrics.suffix != ".jsonl":
        sys.exit("blame_table: --join adds to kept records: give a records.jsonl (write one with --keep)")
    try:
        m = read_records(a.metrics, a.join, a.join_suffix) if a.metrics.suffix == ".jsonl" else json.loads(a.metrics.read_text())
        m = from_saved(m) if "groups" not in m and "agent_top1" in m else m
        g = m["groups"]
    except JoinError as e:
        sys.exit(f"blame_table: --join: {e}")
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        sys.exit(f"blame_table: {a.metrics} is not a bench blame metrics.json or records.jsonl ({e})")
    if a.keep:
        if a.keep.resolve() == a.metrics.resolve():
            sys.exit(f"blame_table: --keep {a.keep} would overwrite the records it reads; name another file")
        keep(a.metrics.parent / "episodes", a.keep)
    methods = [x for x in a.methods.split(",") if x] or m["methods"]
    missing = [x for x in methods if x not in m["methods"]]
    if missing:
        sys.exit(f"blame_table: {a.metrics} has no method {missing[0]!r}")
    faults = [k.split("=", 1)[1] for k in g if k.startswith("fault=")]
    print(f"{m['episodes']} episodes; chance {m['chance_agent_top1']:.2f}; cells: agent top-1 (paired "
          "difference with `provenance`, sign test p; and with the best model-free method of the cell where "
          "that is another)\n")
    for fault in faults:
        topos = [t for t in TOPOLOGIES if f"topology={t},fault={fault}" in g]
        n = g[f"fault={fault}"][methods[0]].get("n", "?")  # a saved copy keeps no counts
        print(f"### {fault} ({n} episodes: " + ", ".join(
            f"{t} {g[f'topology={t},fault={fault}'][methods[0]].get('n', '?')}" for t in topos) + ")\n")
        head = ["method"] + list(topos) + ["all (95% CI)", "vs provenance (95% CI)", "vs best model-free"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for meth in methods:
            al = g[f"fault={fault}"][meth]
            v = al["agent_top1"]
            row = [f"`{meth}`"] + [f"{g[f'topology={t},fault={fault}'][meth]['agent_top1']['value']:.2f}" if a.compact
                                   else cell(g[f"topology={t},fault={fault}"][meth]) for t in topos]
            row.append(f"{v['value']:.2f} [{v['ci95'][0]:.2f}, {v['ci95'][1]:.2f}]")
            d = al.get("vs_provenance")
            row.append(f"{d['diff']:+.2f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}] ({d['wins']} won, "
                       f"{d['losses']} lost, p {_p(d['p'])})" if d else "")
            b = al.get("vs_best_free")
            row.append(f"{b['diff']:+.2f} vs `{b['baseline']}` (p {_p(b['p'])})" if b else "")
            print("| " + " | ".join(row) + " |")
        tok = m.get("token_by_group", {}).get(f"fault={fault}", {}).get("targeted")
        if tok:
            print(f"\nToken hit@1 (targeted objective, the source that carried the value into the loss's call): "
                  f"{tok['hit1']['value']:.2f} [{tok['hit1']['ci95'][0]:.2f}, {tok['hit1']['ci95'][1]:.2f}], "
                  f"mass {tok['mass']:.2f}, n {tok['n']}")
            for score, name in SCORE_NAMES:  # the token by another score, paired with L1 on the same episodes
                if score in tok:
                    t, d = tok[score], tok[score]["vs_l1"]
                    print(f"By {name}: {t['hit1']['value']:.2f} [{t['hit1']['ci95'][0]:.2f}, "
                          f"{t['hit1']['ci95'][1]:.2f}], mass {t['mass']:.2f}, n {t['n']}; against L1 {d['diff']:+.2f} "
                          f"[{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}] ({d['wins']} won, {d['losses']} lost, p {_p(d['p'])})"
                          + _word_pairs(t))
        con = m.get("token_by_group", {}).get(f"fault={fault}", {}).get("contrast")
        if con:  # the span against the loss's expected answer, paired with the targeted objective per score
            vs = con.get("vs_targeted", {})
            for name, t, d in [("L1", con, vs.get("l1"))] + [(n, con.get(k), vs.get(k)) for k, n in SCORE_NAMES]:
                if t:
                    print(f"Token hit@1, contrast objective (the span against the loss's expected answer), by {name}: "
                          f"{t['hit1']['value']:.2f} [{t['hit1']['ci95'][0]:.2f}, {t['hit1']['ci95'][1]:.2f}], "
                          f"mass {t['mass']:.2f}, n {t['n']}" + (
                              f"; against targeted {d['diff']:+.2f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}] "
                              f"({d['wins']} won, {d['losses']} lost, p {_p(d['p'])})" if d else "") + _word_pairs(t))
        print()
    if m.get("saved"):  # every episode together, and the token figures, of a saved copy
        print("### every episode\n\n| method | all (95% CI) |\n|---|---|")
        for meth in methods:
            v = g["all"][meth]["agent_top1"]
            print(f"| `{meth}` | {v['value']:.2f} [{v['ci95'][0]:.2f}, {v['ci95'][1]:.2f}] |")
        print()
        print("Token hit@1 over every episode, by objective: " + ", ".join(
            f"{obj} {t['hit1']['value']:.3f} [{t['hit1']['ci95'][0]:.3f}, {t['hit1']['ci95'][1]:.3f}] (n {t['n']})"
            for obj, t in m.get("token", {}).items()) + "\n")
    if pairs or token_pairs:
        if m.get("saved"):
            sys.exit(f"blame_table: --pair: {a.metrics} is a saved copy (--save): it keeps no episode records")
        try:
            records = episode_records(a.metrics, a.join, a.join_suffix)
        except (OSError, ValueError, JoinError) as e:
            sys.exit(f"blame_table: --pair: cannot read the episode records of {a.metrics} ({e})")
        for x, y in pairs:
            for name in (x, y):
                if name not in m["methods"]:
                    sys.exit(f"blame_table: --pair: {a.metrics} has no method {name!r}")
            print_pair(records, x, y)
        for x, y in token_pairs:
            print_pair(records, x, y, token_hit, "token hit@1", "--token-pair")
    if a.save:
        small = {"episodes": m["episodes"], "chance_agent_top1": m["chance_agent_top1"], "token": m["token"],
                 "token_by_group": m.get("token_by_group", {}),
                 "agent_top1": {grp: {meth: {k: v[meth][k] for k in ("agent_top1", "vs_provenance", "vs_best_free")
                                             if k in v[meth]} for meth in m["methods"]} for grp, v in g.items()},
                 "cost": {meth: {k: g["all"][meth][k] for k in ("seconds", "backward", "forward")}
                          for meth in m["methods"]}}
        a.save.write_text(json.dumps(small, indent=1))


if __name__ == "__main__":
    main()
