"""``agentgrad demo``: the whole loop on a real model, told with the run's own text.

The system (``examples/lookup``) is a two-agent team on SmolLM2-135M-Instruct: a reader looks a
value up in a customer record, an answerer writes the final answer from the reader's note. The
reader's prompt carries a planted defect (a stale example whose answer names the wrong field). The
run attributes every failed episode with gradients, blames agents with the registry's default
rule, removes from each blamed prompt the line its gradients point at (the edit optimizer), and
keeps a step only if the held-out validation score rises. ``tiny=True`` runs the pipeline example
on a tiny random network instead: the fastest smoke run, which learns nothing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from agentgrad.examples import LOOKUP, PIPELINE
from agentgrad.runs.stored import StoredRun


def run_demo(out: Path, *, tiny: bool = False, model: str | None = None, resume: bool = False,
             console: Console | None = None, config: Path | None = None) -> dict[str, Any]:
    """Run the demo into ``out`` (``resume``: continue it) and return its summary (also printed).
    ``config``: another optimisation YAML in the place of the demo's own (a copy of ``examples/lookup``
    with other split sizes or another seed), told and summarised the same way."""
    from agentgrad.optim.run import run_optimize

    from agentgrad.runs.rundir import check_run_dir

    console = console or Console(emoji=False)
    check_run_dir(out, resume)  # a bad --out is one line, before the banner
    example = PIPELINE if tiny else LOOKUP
    overrides = [f"default={model}"] if model else (["default=tiny"] if tiny else [])
    if tiny:
        console.print("[yellow]note:[/yellow] --tiny runs on a tiny model with random weights, built here offline: its "
                      "answers are noise and nothing is learned; it shows the machinery.")
    else:
        console.print(f"agentgrad demo: a reader and an answerer answer questions about customer records on "
                      f"{model or 'SmolLM2-135M-Instruct (smollm2)'}; the reader's prompt carries a planted defect.")
    t0 = time.time()
    final = run_optimize(config or example / "optimize.yaml", out, resume=resume, overrides=overrides, method=None,
                         console=console)
    summary = summarize(out)
    summary["seconds"] = round(time.time() - t0, 1)
    show(summary, console)
    from agentgrad.report.html import write_report

    console.print(f"run directory: {out} (traces/, attribution/, prompts/, checkpoint.json, events.jsonl, final.json)", soft_wrap=True)
    res = write_report(out)
    console.print(f"report: {res.path} ({res.bytes / 1e6:.2f} MB): open it in a browser", highlight=False, soft_wrap=True)
    return summary | {"final": final}


def _events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines() if line.strip()]


def summarize(out: Path) -> dict[str, Any]:
    """What the demo shows, read back from its run directory: a failing episode and its blame, each
    edited prompt before and after, and the validation score before and after."""
    events = _events(out)
    started = next(e for e in events if e["event"] == "train_started")
    run = StoredRun(out)
    final, before = run.final(), run.prompts(0)
    changed = {a: (before[a], p) for a, p in final["prompts"].items() if before.get(a) != p}
    edits = [n for e in events if e["event"] == "step" and e.get("accepted") for n in e.get("notes", [])]
    rejected = [n for e in events if e["event"] == "step" and e.get("accepted") is False for n in e.get("notes", [])]
    failing = None
    for path in sorted((out / "attribution").glob("*.json")):
        rec = json.loads(path.read_text())
        trace = json.loads((out / rec["trace"]).read_text())
        calls = [n for n in trace["nodes"] if n["kind"] == "call"]
        last = next((n for n in rec["nodes"] if n["node_id"] == rec["loss"]["targets"][0]), None)
        failing = {
            "sample": path.stem,
            "inputs": {n["name"]: n["output"]["text"] for n in trace["nodes"] if n["kind"] == "input"},
            "calls": [(n["name"], n["output"]["text"]) for n in calls],
            "loss": rec["loss"]["text"],
            "blamed": next((e.get("blamed", []) for e in events if e["event"] == "sample"
                            and e.get("sample") == rec.get("trace_id", path.stem)), []),
            "weights": {s["name"]: s["weights"]["max_l1"] for s in (last or {}).get("sources", [])},
        }
        break
    return {"val_before": started.get("val_score"), "val_after": final.get("val_score"), "changed": changed,
            "edits": edits, "rejected": rejected, "failing": failing, "steps": final["steps"],
            "accepted": final["accepted"], "test_before": final.get("test_before"),
            "test_after": final.get("test_after"), "test_size": final.get("test_size")}


def plain(note: str) -> str:
    """An optimizer's note as a reader of the demo says it."""
    agent, sep, rest = note.partition(": ")
    if sep and rest == "Warning bullets (no sentence to remove)":
        return f"{agent}: no line of its prompt was left to remove, so a Warning section listing the failures was added"
    return note


def show(s: dict[str, Any], console: Console) -> None:
    f = s["failing"]
    if f:
        console.print(f"\n[bold]A failing episode[/bold] ({f['sample']}):", highlight=False)
        for k, v in f["inputs"].items():
            console.print(f"  {k}: {v}", highlight=False, markup=False)
        for name, text in f["calls"]:
            console.print(f"  {name} wrote: {text!r}", highlight=False, markup=False)
        console.print(f"  loss: {' '.join(f['loss'].split())}", highlight=False, markup=False)
        w = ", ".join(f"{k} {v:.1f}" for k, v in sorted(f["weights"].items(), key=lambda kv: -kv[1]))
        console.print(f"  blamed: {', '.join(f['blamed']) or 'none'}"
                      + (f" (connection weights into the last call, max_l1: {w})" if w else ""), highlight=False)
    for note in s["edits"]:
        console.print(f"[green]accepted[/green] (the validation score rose): {plain(note)}", highlight=False, markup=True)
    for note in s["rejected"]:
        console.print(f"[yellow]rejected[/yellow] (the validation score did not rise; the prompt was put back): "
                      f"{plain(note)}", highlight=False)
    for agent, (old, new) in s["changed"].items():
        console.print(f"\n[bold]{agent}'s prompt[/bold], before:", highlight=False)
        console.print(old.rstrip(), highlight=False, markup=False)
        console.print("after:", highlight=False)
        console.print(new.rstrip(), highlight=False, markup=False)
    if not s["changed"]:
        console.print("\nno prompt changed: no step passed the validation gate", highlight=False)
    vb, va = s["val_before"], s["val_after"]
    if vb is not None and va is not None:
        console.print(f"\nvalidation (the gate's questions, which chose the prompts): {vb:.2f} -> {va:.2f}; "
                      f"{s['steps']} steps, {s['accepted']} kept; {s.get('seconds', 0):.0f} s", highlight=False)
    if s.get("test_before") is not None and s.get("test_after") is not None:  # what to report: unseen questions
        console.print(f"test ({s['test_size']} held-out questions no step and no gate read): {s['test_before']:.2f} "
                      f"-> {s['test_after']:.2f}", highlight=False)
