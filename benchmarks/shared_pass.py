"""One forward pass shared by a conversation's calls: the same blame with and without it, paired, on AgentRx's
failed tau-bench runs, on the exact path (every call whole, ``agentgrad blame --window 0``), where a long
call is checkpointed and so can serve the earlier calls whose renderings are token prefixes of it
(``Scorer(share_passes=...)``, :func:`agentgrad.attribution.forward.shared_forward`).

    python benchmarks/shared_pass.py --out records/real-trace-cost/shared-pass.jsonl [--runs 6] [--resume]
    python benchmarks/shared_pass.py --attn eager --runs 2 --out records/real-trace-cost/shared-pass-eager.jsonl
    python benchmarks/shared_pass.py --table records/real-trace-cost/shared-pass.jsonl

Per run (one JSON line, appended as it finishes) and loss (``last``, ``located``, as
``benchmarks/real_trace_cost.py``): each setting's wall and CPU seconds, calls scored, calls served by a
shared pass, the call blamed, and per weight the largest difference between the two settings (the numbers
it must not change; :func:`largest_difference`). The two settings alternate which runs first, run by run.
The runs: the first ``--runs`` by id whose conversation fits the scorer's context. SmolLM2-135M-Instruct,
fp32, on the CPU, with transformers' default attention (sdpa) or ``--attn eager``; run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

WEIGHTS = ("mean_l1", "max_l1", "mean_gxi", "max_gxi")


def blame(scorer, trace, loss, share: bool) -> tuple[dict, dict]:
    """One exact-path blame with the shared pass on or off: its cost and its weights by (call, source)."""
    from agentgrad.runs.blame import blame_trace

    scorer.clear_cache()  # each blame starts cold
    scorer.share_passes = share
    served0, passes0 = scorer.forward_stats["shared_served"], scorer.forward_stats["shared"]
    t0, c0 = time.perf_counter(), time.process_time()
    tv = blame_trace(trace, loss, None, scorer, window=None)
    cost = {"seconds": round(time.perf_counter() - t0, 2), "cpu_seconds": round(time.process_time() - c0, 2),
            "scored": len(tv.attribution.nodes) if tv.attribution else 0,
            "served": scorer.forward_stats["shared_served"] - served0,
            "passes": scorer.forward_stats["shared"] - passes0,
            "blamed": next(iter(tv.methods.values())).node}
    weights = {(n.node_id, s.source): s.weights for n in (tv.attribution.nodes if tv.attribution else [])
               for s in n.sources}
    return cost, weights


def largest_difference(a: dict, b: dict) -> dict | None:
    """Per weight, the largest difference between two blames over the weights both computed (None when
    they share none): relative for ``mean_l1`` and ``max_l1``; for ``mean_gxi`` and ``max_gxi`` (sums of
    g_t . e_t whose terms cancel, so near 0 where the l1 is not) against the size of the gradient, the
    source's ``mean_l1`` or ``max_l1``, as the tests measure a token's g . e."""
    common = [k for k in a if k in b]
    if not common:
        return None
    worst = dict.fromkeys(WEIGHTS, 0.0)
    scale = {"mean_l1": "mean_l1", "max_l1": "max_l1", "mean_gxi": "mean_l1", "max_gxi": "max_l1"}
    for k in common:
        for w in WEIGHTS:
            x, y = a[k][w], b[k][w]
            if x != y:
                size = max(abs(a[k][scale[w]]), abs(b[k][scale[w]]))
                worst[w] = max(worst[w], abs(x - y) / size if size else float("inf"))
    return worst


def run(out: Path, n_runs: int, resume: bool, attn: str | None = None) -> None:
    from agentgrad.attribution.factory import make_scorer
    from agentgrad.attribution.render import render_call
    from agentgrad.benchmarks.agentrx.bench import losses
    from agentgrad.benchmarks.agentrx.data import load_runs

    done = set()
    if out.exists():
        if not resume:
            sys.exit(f"shared_pass: {out} exists; pass --resume to go on, or another --out")
        done = {json.loads(x)["run"] for x in out.read_text().splitlines() if x.strip().endswith("}")}
    scorer = make_scorer("smollm2", on_too_long="skip", attn_implementation=attn)
    runs = sorted((r for r in load_runs(("tau",))[0]), key=lambda r: int(r.trace.id) if r.trace.id.isdigit() else 0)
    runs = [r for r in runs if len(render_call(scorer.tokenizer, r.trace.calls()[-1]).input_ids) <= scorer.max_context]
    runs = runs[:n_runs]
    out.parent.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(runs):
        if r.trace.id in done:
            continue
        rec = {"run": r.trace.id, "calls": len(r.trace.calls()), "scorer": "smollm2 fp32 cpu" + (f" {attn}" if attn else ""),
               "order": "shared first" if i % 2 else "shared last", "losses": {}}
        for setting, loss in losses(r).items():
            got = {}
            for share in ((True, False) if i % 2 else (False, True)):
                got[share] = blame(scorer, r.trace, loss, share)
            (on, w_on), (off, w_off) = got[True], got[False]
            rec["losses"][setting] = {"shared": on, "alone": off, "largest_difference": largest_difference(w_off, w_on),
                                      "same_verdict": on["blamed"] == off["blamed"]}
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"[{i + 1}/{len(runs)}] run {r.trace.id}: " + "; ".join(
            f"{k}: {v['shared']['served']} served, {v['shared']['seconds']} s against {v['alone']['seconds']} s, "
            f"largest differences {v['largest_difference']}" for k, v in rec["losses"].items()), flush=True)


def table(path: Path) -> None:
    try:
        recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
        rows = [(r["run"], k, v) for r in recs for k, v in r["losses"].items()]
        for _, _, v in rows:  # every field the table reads
            [v[x][y] for x in ("shared", "alone") for y in ("seconds", "cpu_seconds", "served", "scored", "blamed")]
            v["largest_difference"], v["same_verdict"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"shared_pass: {path} is not a record of benchmarks/shared_pass.py ({e.__class__.__name__})")
    if not rows:
        sys.exit(f"shared_pass: {path} holds no blame")
    served = [x for x in rows if x[2]["shared"]["served"] > 0]
    # a shared pass ran (records before "passes" was kept: its rounding shows in the weights)
    ran = [x for x in rows if x[2]["shared"].get("passes", int(bool(x[2]["largest_difference"]
                                                                      and max(x[2]["largest_difference"].values()))))]
    plain = [x for x in rows if x not in ran]
    diffs = [x[2]["largest_difference"] for x in rows if x[2]["largest_difference"] is not None]
    worst = {w: max(d[w] for d in diffs) for w in WEIGHTS} if diffs else {}
    scorers = sorted({r["scorer"] for r in recs})
    print(f"{len(recs)} tau-bench runs of AgentRx, scorer {', '.join(scorers)}, the exact path (--window 0): "
          f"{len(rows)} blames, each with and without the shared pass")
    print(f"- the same call blamed: {sum(x[2]['same_verdict'] for x in rows)} of {len(rows)}; the largest difference "
          f"of a weight (relative; g.e against the l1): " + ", ".join(f"{w} {v:.1e}" for w, v in worst.items()))
    for what, some in (("a shared pass ran", ran), ("a shared pass served an earlier call", served),
                       ("none ran (the same computation: the noise)", plain)):
        if some:
            ratios = [x[2]["shared"]["seconds"] / x[2]["alone"]["seconds"] for x in some]
            cpu = [x[2]["shared"]["cpu_seconds"] / x[2]["alone"]["cpu_seconds"] for x in some]
            print(f"- blames where {what}: {len(some)} of {len(rows)}; wall time shared over alone: median "
                  f"{statistics.median(ratios):.2f} (from {min(ratios):.2f} to {max(ratios):.2f}), CPU time "
                  f"{statistics.median(cpu):.2f}")
    print("| run | loss | calls scored | served | blamed | alone s | shared s | ratio | largest difference |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run_id, k, v in rows:
        d = v["largest_difference"]
        print(f"| {run_id} | {k} | {v['alone']['scored']} | {v['shared']['served']} | n{v['alone']['blamed']}"
              f"{'' if v['same_verdict'] else ' / n' + str(v['shared']['blamed'])} | {v['alone']['seconds']} | "
              f"{v['shared']['seconds']} | {v['shared']['seconds'] / v['alone']['seconds']:.2f} | "
              f"{'-' if d is None else f'{max(d.values()):.1e}'} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="records JSONL to write (one line per run)")
    ap.add_argument("--table", type=Path, help="print the table of a records file")
    ap.add_argument("--runs", type=int, default=6, help="how many runs, the first by id (default: %(default)s)")
    ap.add_argument("--resume", action="store_true", help="go on in --out: runs done are kept")
    ap.add_argument("--attn", choices=("eager", "sdpa"), help="the scorer's attention (default: transformers')")
    a = ap.parse_args(argv)
    if a.table:
        return table(a.table)
    if not a.out:
        ap.error("give --out (measure) or --table (print)")
    if a.runs < 1:
        ap.error("--runs takes a positive number")
    from agentgrad.errors import AgentgradError

    try:
        run(a.out, a.runs, a.resume, a.attn)
    except (AgentgradError, OSError) as e:
        sys.exit(f"shared_pass: {e}")


if __name__ == "__main__":
    main()
