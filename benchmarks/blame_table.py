"""Print the README's blame-quality tables (markdown) from a ``bench blame`` metrics.json.

    python benchmarks/blame_table.py runs/blame/metrics.json [--save benchmarks/blame-results-cpu-2core.json]

Figures are agent-level top-1 (ties at the top earn 1/ties); the 95% Wilson interval is given for
the overall figure. ``--save`` keeps a small copy (agent top-1 per group, token precision, cost).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TOPOLOGIES = ("chain", "fanin", "manager", "broadcast")
FAULTS = ("wrong_value", "omitted", "tool")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("metrics", type=Path)
    ap.add_argument("--save", type=Path)
    ap.add_argument("--methods", default="", help="comma list (default: every method)")
    a = ap.parse_args()
    m = json.loads(a.metrics.read_text())
    g = m["groups"]
    methods = [x for x in a.methods.split(",") if x] or m["methods"]
    n_cell = g[f"topology={TOPOLOGIES[0]},fault={FAULTS[0]}"][methods[0]]["n"]
    print(f"Wrong-value faults by topology, and every fault kind ({n_cell} episodes per cell; chance "
          f"{m['chance_agent_top1']:.2f}):\n")
    head = ["method", "all (95% CI)"] + [f"{t} wrong" for t in TOPOLOGIES] + list(FAULTS) + ["node", "top-3", "passes/ep"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for meth in methods:
        al = g["all"][meth]
        row = [f"`{meth}`", f"{al['agent_top1']['value']:.2f} [{al['agent_top1']['ci95'][0]:.2f}, "
                            f"{al['agent_top1']['ci95'][1]:.2f}]"]
        row += [f"{g[f'topology={t},fault=wrong_value'][meth]['agent_top1']['value']:.2f}" for t in TOPOLOGIES]
        row += [f"{g[f'fault={f}'][meth]['agent_top1']['value']:.2f}" for f in FAULTS]
        row += [f"{al['node_top1']['value']:.2f}", f"{al['agent_top3']['value']:.2f}",
                f"{al['backward']:.1f} b + {al['forward']:.1f} f"]
        print("| " + " | ".join(row) + " |")
    tok = m["token"]
    print("\nToken-level precision (" + ", ".join(
        f"{o}: hit@1 {v['hit1']['value']:.3f} [{v['hit1']['ci95'][0]:.3f}, {v['hit1']['ci95'][1]:.3f}], "
        f"mass {v['mass']:.3f}, n {v['n']}" for o, v in tok.items()) + ")")
    if a.save:
        small = {"episodes": m["episodes"], "chance_agent_top1": m["chance_agent_top1"], "token": tok,
                 "agent_top1": {grp: {meth: v[meth]["agent_top1"] for meth in m["methods"]} for grp, v in g.items()},
                 "cost": {meth: {k: g["all"][meth][k] for k in ("seconds", "backward", "forward")}
                          for meth in m["methods"]}}
        a.save.write_text(json.dumps(small, indent=1))


if __name__ == "__main__":
    main()
