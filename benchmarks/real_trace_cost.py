"""What blaming a real conversation costs: AgentRx's failed tau-bench runs, each blamed with the default
method as ``agentgrad blame FILE`` does, against one forward and backward pass over the whole
conversation measured in the same process (the unit the cost is stated in).

    python benchmarks/real_trace_cost.py --out records/real-trace-cost/smollm2.jsonl [--quick] [--resume]
    python benchmarks/real_trace_cost.py --window 4096 --out records/real-trace-cost/smollm2-window4096.jsonl
    python benchmarks/real_trace_cost.py --table records/real-trace-cost/smollm2.jsonl

Per run (one JSON line, appended as it finishes): its messages, calls and the whole conversation's
tokens; for each loss (``last``: on the final call; ``located``: where the run's record says,
``--loss auto``) the calls the blame scored, its wall and CPU seconds, and the ratio of its wall time
to the reference pass's. The peak extra memory (sampled RSS) is kept too, but not printed: in one
process the allocator keeps what an earlier pass freed, so only a run's first figure means anything;
``--memory`` measures each phase's peak in a process of its own instead:

    python benchmarks/real_trace_cost.py --memory --out records/real-trace-cost/smollm2-memory.jsonl --runs 2,3,4
    python benchmarks/real_trace_cost.py --memory --table records/real-trace-cost/smollm2-memory.jsonl

``--quick``: the first 3 runs (by id). The scorer is SmolLM2-135M-Instruct, fp32, on the CPU; run it
alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attribution_cost import PeakMemory  # noqa: E402  (the benchmarks' sampled-RSS meter)


SMOLLM2_CONTEXT = 8192  # the scorer's context, for records written before they kept it


def reference_pass(scorer, trace) -> dict:
    """One forward and one backward pass over the whole conversation (the final call rendered with its
    output): the reference's plain gradients (:func:`agentgrad.attribution.gbc.gradients`)."""
    from agentgrad.attribution.gbc import gradients
    from agentgrad.attribution.render import render_call

    r = render_call(scorer.tokenizer, trace.calls()[-1])
    t0, c0 = time.perf_counter(), time.process_time()
    with PeakMemory("cpu") as mem:
        gradients(scorer.model, r.input_ids, r.output_range)
    return {"tokens": len(r.input_ids), "seconds": round(time.perf_counter() - t0, 2),
            "cpu_seconds": round(time.process_time() - c0, 2), "peak_mb": round(mem.peak / 2**20)}


def blame_cost(scorer, trace, loss, window: int | None = None) -> dict:
    """One blame's cost: ``window`` None is the exact path (every call whole, ``--window 0``); a number,
    ``agentgrad blame``'s windowed default (``--window 4096``)."""
    from agentgrad.runs.blame import blame_trace

    scorer.clear_cache()  # each blame starts cold: no prefix or forward pass kept from another
    t0, c0 = time.perf_counter(), time.process_time()
    with PeakMemory("cpu") as mem:
        tv = blame_trace(trace, loss, None, scorer, window=window)
    verdict = next(iter(tv.methods.values()))
    return {"target": loss.targets[0], "scored": len(tv.attribution.nodes) if tv.attribution else 0,
            "seconds": round(time.perf_counter() - t0, 2), "cpu_seconds": round(time.process_time() - c0, 2),
            "peak_mb": round(mem.peak / 2**20), "blamed": verdict.node}


def run(out: Path, quick: bool, resume: bool, window: int | None = None) -> None:
    from agentgrad.attribution.factory import make_scorer
    from agentgrad.benchmarks.agentrx.bench import losses
    from agentgrad.benchmarks.agentrx.data import load_runs

    done = set()
    if out.exists():
        if not resume:
            sys.exit(f"real_trace_cost: {out} exists; pass --resume to go on, or another --out")
        done = {json.loads(x)["run"] for x in out.read_text().splitlines() if x.strip().endswith("}")}
    runs = sorted((r for r in load_runs(("tau",))[0]), key=lambda r: int(r.trace.id) if r.trace.id.isdigit() else 0)
    runs = runs[:3] if quick else runs
    scorer = make_scorer("smollm2", on_too_long="skip")
    out.parent.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(runs, 1):
        if r.trace.id in done:
            continue
        ref = reference_pass(scorer, r.trace)
        rec = {"run": r.trace.id, "messages": len(r.trace.nodes), "calls": len(r.trace.calls()), "reference": ref,
               "scorer": "smollm2 fp32 cpu", "max_context": scorer.max_context, "losses": {}}
        if window:
            rec["window"] = window
        for setting, loss in losses(r).items():
            c = blame_cost(scorer, r.trace, loss, window)
            c["ratio"] = round(c["seconds"] / ref["seconds"], 2) if ref["seconds"] else None
            rec["losses"][setting] = c
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"[{i}/{len(runs)}] run {r.trace.id}: {ref['tokens']} tokens, pass {ref['seconds']} s; "
              + ", ".join(f"{k}: {v['scored']} calls scored, {v['seconds']} s ({v['ratio']}x)"
                          for k, v in rec["losses"].items()), flush=True)


PHASES = ("load", "reference", "last", "located")  # --memory: each in a process of its own


def child(run_id: str, phase: str) -> None:
    """One phase of one run in this (fresh) process, its peak resident memory printed as JSON: ``load``
    (the scorer and the run loaded, nothing computed: the floor every phase shares), ``reference``, or a
    blame with the ``last`` or ``located`` loss."""
    import resource

    from agentgrad.attribution.factory import make_scorer
    from agentgrad.benchmarks.agentrx.bench import losses
    from agentgrad.benchmarks.agentrx.data import load_runs

    r = next(r for r in load_runs(("tau",))[0] if r.trace.id == run_id)
    scorer = make_scorer("smollm2", on_too_long="skip")
    t0 = time.perf_counter()
    if phase == "reference":
        reference_pass(scorer, r.trace)
    elif phase in ("last", "located"):
        blame_cost(scorer, r.trace, losses(r)[phase])
    print(json.dumps({"phase": phase, "seconds": round(time.perf_counter() - t0, 2),
                      "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))


def memory(out: Path, runs: list[str]) -> None:
    """``--memory``: per run, each phase's peak resident memory in a process of its own (in one process
    the allocator keeps what an earlier phase freed, so only separate processes compare), one line a run."""
    import subprocess

    done = {json.loads(x)["run"] for x in out.read_text().splitlines() if x.strip()} if out.exists() else set()
    out.parent.mkdir(parents=True, exist_ok=True)
    for run_id in runs:
        if run_id in done:
            continue
        rec = {"run": run_id, "scorer": "smollm2 fp32 cpu", "peak_mb": {}}
        for phase in PHASES:
            p = subprocess.run([sys.executable, __file__, "--child", run_id, phase], capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"real_trace_cost: run {run_id}, {phase}: {p.stderr.strip().splitlines()[-1:]}")
            rec["peak_mb"][phase] = json.loads(p.stdout.strip().splitlines()[-1])["peak_mb"]
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"run {run_id}: peak resident MB {rec['peak_mb']}", flush=True)


def memory_table(path: Path) -> None:
    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    print(f"{len(recs)} tau-bench runs of AgentRx, SmolLM2 fp32 on the CPU, each phase in a process of its own: "
          f"peak resident memory (MB), and over the reference pass's")
    print("| run | load | reference | last | located | last / reference | located / reference |")
    print("|---|---|---|---|---|---|---|")
    for r in recs:
        m = r["peak_mb"]
        print(f"| {r['run']} | {m['load']:,} | {m['reference']:,} | {m['last']:,} | {m['located']:,} | "
              f"{m['last'] / m['reference']:.2f} | {m['located'] / m['reference']:.2f} |")


def table(path: Path) -> None:
    try:
        every = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except (OSError, ValueError) as e:
        sys.exit(f"real_trace_cost: cannot read {path} ({e.__class__.__name__})")
    # a conversation longer than the scorer's context: its last call is skipped, not scored (no cost to compare)
    recs = [r for r in every if r["reference"]["tokens"] <= r.get("max_context", SMOLLM2_CONTEXT)]
    long = [r["run"] for r in every if r not in recs]
    windows = {r.get("window") for r in recs}
    if len(windows) > 1:
        sys.exit(f"real_trace_cost: {path} mixes runs with and without a window; give one setting a file")
    window = windows.pop() if windows else None
    print(f"{len(recs)} tau-bench runs of AgentRx, SmolLM2 fp32 on the CPU, "
          + (f"every call read within {window:,} tokens (--window {window})" if window else "the exact path (--window 0)")
          + ": blame's wall time over one forward and backward pass of the whole conversation" + (f"; {len(long)} longer than the scorer's context left out "
                                                       f"(runs {', '.join(long)})" if long else ""))
    print("| loss | runs | median ratio | max ratio | median calls scored |")
    print("|---|---|---|---|---|")
    for setting in ("last", "located"):
        rows = [r["losses"][setting] for r in recs if setting in r["losses"]]
        ratios = [x["ratio"] for x in rows if x["ratio"] is not None]
        print(f"| {setting} | {len(rows)} | {statistics.median(ratios):.2f} | {max(ratios):.2f} | "
              f"{statistics.median(x['scored'] for x in rows):.0f} |")
    print("| run | tokens | pass s | last: calls, s, ratio | located: calls, s, ratio |")
    print("|---|---|---|---|---|")
    for r in recs:
        cells = [f"{r['losses'][k]['scored']}, {r['losses'][k]['seconds']}, {r['losses'][k]['ratio']}"
                 for k in ("last", "located") if k in r["losses"]]
        print(f"| {r['run']} | {r['reference']['tokens']} | {r['reference']['seconds']} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="records JSONL to write (one line per run)")
    ap.add_argument("--table", type=Path, help="print the table of a records file")
    ap.add_argument("--quick", action="store_true", help="the first 3 runs")
    ap.add_argument("--resume", action="store_true", help="go on in --out: runs done are kept")
    ap.add_argument("--window", type=int, default=0, help="read every call within this many tokens, as agentgrad "
                                                          "blame does by default (4096); 0: the exact path")
    ap.add_argument("--memory", action="store_true", help="peak memory of each phase in a process of its own "
                                                          "(--out: its records; --table: print them)")
    ap.add_argument("--runs", default="2,3,4", help="--memory: the runs, by id (comma-separated)")
    ap.add_argument("--child", nargs=2, metavar=("RUN", "PHASE"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.window < 0:
        ap.error("--window takes a number of tokens, or 0 for the exact path")
    if a.child:
        child(*a.child)
    elif a.memory and a.table:
        memory_table(a.table)
    elif a.memory and a.out:
        memory(a.out, [x.strip() for x in a.runs.split(",") if x.strip()])
    elif a.table:
        table(a.table)
    elif a.out:
        run(a.out, a.quick, a.resume, a.window or None)
    else:
        ap.error("give --out (measure) or --table (print)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
