"""How typical is the demo? The same demo on several seeds of its training sample.

The demo (``agentgrad demo``: ``examples/lookup`` on SmolLM2-135M-Instruct) runs with
``trainer.seed`` 0 (the demo itself) and the next seeds; the seed orders the training sample, so it
changes which failures each step reads. For every seed the script records whether the run

- **blamed the reader** (the agent whose prompt carries the planted defect) on its failing samples,
- **removed the stale example** (the reader's final prompt no longer holds the ``Example:`` line), and
- **raised the held-out test score** (48 questions no step and no gate read: before -> after).

    python benchmarks/demo_seeds.py --seeds 0,1,2,3,4 --out runs/demo-seeds --json records/demo-seeds/seeds.jsonl

Each seed's run directory is kept under ``--out`` (``--resume`` skips the seeds already in the
JSON-lines file and continues an unfinished run directory). The table is printed from the file:
``python benchmarks/demo_seeds.py --table records/demo-seeds/seeds.jsonl``; one seed's steps (failures,
blame, the edit, the gate) with ``--steps SEED``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

STALE = "Example:"  # the reader's planted defect: a stale example line


def config_for(seed: int, where: Path) -> Path:
    """The demo's optimisation YAML with ``trainer.seed = seed``, beside copies of the files it names."""
    from agentgrad.examples import LOOKUP

    for f in LOOKUP.iterdir():
        if f.is_file():
            shutil.copy(f, where / f.name)
    cfg = yaml.safe_load((LOOKUP / "optimize.yaml").read_text(encoding="utf-8"))
    cfg["trainer"]["seed"] = seed
    out = where / "optimize.yaml"
    out.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return out


def read_run(run: Path, seed: int) -> dict[str, Any]:
    """What one seed's run did, from its run directory (events.jsonl, final.json, prompts/)."""
    events = [json.loads(ln) for ln in (run / "events.jsonl").read_text(encoding="utf-8").splitlines() if ln.strip()]
    final = json.loads((run / "final.json").read_text(encoding="utf-8"))
    first = json.loads((run / "prompts" / "step-0000.json").read_text(encoding="utf-8"))
    blamed = [b for e in events if e["event"] == "sample" for b in e.get("blamed", [])]
    reader_after = final["prompts"].get("reader", "")
    return {"seed": seed, "failures_blamed": len([e for e in events if e["event"] == "sample" and e.get("blamed")]),
            "blamed": {a: blamed.count(a) for a in sorted(set(blamed))},
            "blamed_reader_most": bool(blamed) and max(set(blamed), key=blamed.count) == "reader",
            "stale_removed": STALE in first.get("reader", "") and STALE not in reader_after,
            "changed": sorted(a for a, p in final["prompts"].items() if first.get(a) != p),
            "steps": final["steps"], "accepted": final["accepted"],
            "val_before": next(e.get("val_score") for e in events if e["event"] == "train_started"),
            "val_after": final.get("val_score"), "test_before": final.get("test_before"),
            "test_after": final.get("test_after"), "test_size": final.get("test_size"),
            "test_raised": (final.get("test_after") or 0) > (final.get("test_before") or 0),
            "step_log": [{k: e.get(k) for k in ("step", "failures", "blamed", "updated", "accepted", "val_before",
                                                 "val_after", "notes", "note")}
                         for e in events if e["event"] == "step"]}


def steps_table(rows: list[dict[str, Any]], seed: int) -> str:
    """One seed's steps as its run's events logged them: the failures and whom they blamed, the edit (with the
    gradient share of the line removed), the gate's validation before -> after, kept or rejected."""
    row = next((r for r in rows if r["seed"] == seed), None)
    if row is None or "step_log" not in row:
        raise SystemExit(f"error: no steps recorded for seed {seed} (records written before steps were kept?)")
    lines = ["| step | failures | blamed | edit | validation | gate |", "|---|---|---|---|---|---|"]
    for e in row["step_log"]:
        blamed = ", ".join(f"{a} {n}" for a, n in (e.get("blamed") or {}).items()) or "none"
        edit = "; ".join(e.get("notes") or []) or e.get("note") or "none"
        val = (f"{e['val_before']:.2f} -> {e['val_after']:.2f}" if e.get("val_after") is not None else "-")
        gate = {True: "kept", False: "rejected", None: "no change"}[e.get("accepted")]
        lines.append(f"| {e['step']} | {e['failures']} | {blamed} | {edit} | {val} | {gate} |")
    lines.append(f"\nseed {seed}: held-out test {row['test_before']:.2f} -> {row['test_after']:.2f} on "
                 f"{row['test_size']} questions")
    return "\n".join(lines)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| seed | blamed (samples) | stale example removed | prompts changed | test before -> after |",
             "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["seed"]):
        blamed = ", ".join(f"{a} {n}" for a, n in r["blamed"].items()) or "none"
        lines.append(f"| {r['seed']} | {blamed} | {'yes' if r['stale_removed'] else 'no'} | "
                     f"{', '.join(r['changed']) or 'none'} | {r['test_before']:.3f} -> {r['test_after']:.3f} |")
    n = len(rows)
    lines.append(f"\n{n} seeds: the reader blamed most on {sum(r['blamed_reader_most'] for r in rows)}, the stale "
                 f"example removed on {sum(r['stale_removed'] for r in rows)}, the held-out test score raised on "
                 f"{sum(r['test_raised'] for r in rows)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated trainer seeds (0 is the demo's own)")
    p.add_argument("--out", type=Path, default=Path("runs/demo-seeds"), help="folder of the seeds' run directories")
    p.add_argument("--json", type=Path, help="JSON-lines file of the seeds' results (appended as each ends)")
    p.add_argument("--resume", action="store_true", help="skip seeds already in --json; continue unfinished runs")
    p.add_argument("--table", type=Path, help="print the table of this JSON-lines file and stop")
    p.add_argument("--steps", type=int, metavar="SEED", help="with --table: print this seed's steps instead")
    a = p.parse_args(argv)
    if a.table:
        try:
            rows = [json.loads(ln) for ln in a.table.read_text(encoding="utf-8").splitlines() if ln.strip()]
        except (OSError, ValueError) as e:
            sys.exit(f"error: {a.table} is not a JSON-lines file of demo_seeds.py ({e})")
        print(steps_table(rows, a.steps) if a.steps is not None else table(rows))
        return
    try:
        seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    except ValueError:
        sys.exit(f"error: --seeds takes comma-separated integers, not {a.seeds!r}")
    done: set[int] = set()
    if a.json and a.json.exists():
        if not a.resume:
            sys.exit(f"error: {a.json} exists; pass --resume to skip its seeds, or another --json")
        done = {json.loads(ln)["seed"] for ln in a.json.read_text(encoding="utf-8").splitlines() if ln.strip()}
    from rich.console import Console

    from agentgrad.optim.run import run_optimize

    rows = []
    for seed in seeds:
        if seed in done:
            continue
        run = a.out / f"seed-{seed}"
        resume = a.resume and (run / "checkpoint.json").exists()
        if run.exists() and not resume and any(run.iterdir()):
            sys.exit(f"error: {run} is not empty; pass --resume to continue it, or another --out")
        with tempfile.TemporaryDirectory() as tmp:
            print(f"seed {seed}: {run}", flush=True)
            run_optimize(config_for(seed, Path(tmp)), run, resume=resume, overrides=[], method=None,
                         console=Console(stderr=True, emoji=False))
        row = read_run(run, seed)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if a.json:
            a.json.parent.mkdir(parents=True, exist_ok=True)
            with a.json.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
    if a.json:
        rows = [json.loads(ln) for ln in a.json.read_text(encoding="utf-8").splitlines() if ln.strip()]
    print(table(rows))


if __name__ == "__main__":
    main()
