"""The benchmark commands' printed tables: blame per method with intervals, the injected faults'
propagation, the Who&When figures beside the published ones."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from agentgrad.cli._common import console


def print_judge_misses(methods: dict[str, dict[str, Any]], n: int) -> None:
    """A line each for the judge methods that named nothing somewhere: their judge's reply did not
    parse, or the log was longer than the judge's context."""
    for key, what in (("unparsed", "judge replies that did not parse"),
                      ("unread", "logs longer than the judge's context")):
        bad = {m: v[key] for m, v in methods.items() if v.get(key)}
        if bad:
            console.print(f"{what} (counted as wrong): " + ", ".join(f"{m} {c} of {n}" for m, c in bad.items()),
                          markup=False)


def print_wide(table: Table) -> None:
    """A table wide enough for every column, also when the output is a log file (80 columns by default)."""
    from rich.console import Console

    Console(width=max(console.width, 150), emoji=False).print(table)


def methods_table(title: str, columns: list[str]) -> Table:
    """A table with a method column, then right-aligned figure columns."""
    table = Table(title=title)
    table.add_column("method", no_wrap=True)
    for c in columns:
        table.add_column(c, justify="right")
    return table


def print_blame_table(metrics: dict, by: tuple[str, ...] = ("topology", "fault")) -> None:
    """Agent-level top-1 per method: overall with its 95% interval, then per group of the fields ``by``
    (by topology and fault kind for ``bench blame``)."""
    groups = metrics["groups"]
    table = Table(title=f"agent-level top-1, {metrics['episodes']} episodes (all: 95% CI; the rest in metrics.json)")
    table.add_column("method", no_wrap=True)
    table.add_column("all", justify="right", no_wrap=True)
    cols = [g for field in by for g in sorted(g for g in groups if g.startswith(field + "=") and "," not in g)]
    for c in cols:
        table.add_column(c.split("=")[-1] if len(by) <= 2 else c, justify="right")
    paired = "vs_best_free" in groups["all"][metrics["methods"][0]]
    if paired:  # every figure beside the best model-free method of these episodes, paired
        table.add_column("vs best model-free", justify="right", no_wrap=True)
    table.add_column("s/ep", justify="right")
    generated = any(groups["all"][m].get("generations") for m in metrics["methods"])
    if generated:  # the replay method's cost
        table.add_column("gen/ep", justify="right")
    for m in metrics["methods"]:
        v = groups["all"][m]["agent_top1"]
        row = [m, f"{v['value']:.2f} [{v['ci95'][0]:.2f},{v['ci95'][1]:.2f}]"]
        row += [f"{groups[c][m]['agent_top1']['value']:.2f}" for c in cols]
        if paired:
            d = groups["all"][m]["vs_best_free"]
            row.append(f"{d['diff']:+.2f} [{d['ci95'][0]:+.2f},{d['ci95'][1]:+.2f}] {d['baseline']}")
        row.append(f"{groups['all'][m]['seconds']:.3f}")
        if generated:
            row.append(f"{groups['all'][m].get('generations', 0):.1f}")
        table.add_row(*row)
    print_wide(table)


def print_propagation(metrics: dict) -> None:
    """How many injections changed the final answer from right to wrong, per kind and per position."""
    prop = metrics["propagation"]
    table = Table(title="injections that propagated (the final answer went from right to wrong)")
    for c in ("group", "injected", "propagated", "share [95% CI]", "unchanged"):
        table.add_column(c, justify="left" if c == "group" else "right")
    keys = ["all"] + [g for field in ("kind", "system") for g in sorted(prop) if g.startswith(field + "=") and
                      "," not in g] + sorted(g for g in prop if g.startswith("system=") and ",position=" in g)
    for g in keys:
        v = prop[g]
        table.add_row(g, str(v["injected"]), str(v["propagated"]),
                      f"{v['share']:.2f} [{v['ci95'][0]:.2f},{v['ci95'][1]:.2f}]", str(v["unchanged"]))
    print_wide(table)


def print_whowhen(m: dict, names: list[str], with_ground_truth: bool) -> None:
    """The Who&When figures per method (agent and step accuracy per subset, with the chance row), the
    paired priors, the logs a judge or the scorer's context left out, and the published figures."""
    from agentgrad.benchmarks.whowhen.bench import priors_table

    groups = [g for g in ("all", "hand", "algorithm") if g in m["groups"]]
    columns = [f"{g} {k}" for g in groups for k in ("agent", "step")]
    table = methods_table(f"Who&When, {m['logs']} logs ({'with' if with_ground_truth else 'without'} ground truth); "
                          f"agent / step accuracy (all: 95% CI)", columns)
    for name in names:
        row = [name]
        for g in groups:
            for k in ("agent", "step"):
                v = m["groups"][g]["methods"][name][k]
                row.append(f"{v['value']:.3f} [{v['ci95'][0]:.2f},{v['ci95'][1]:.2f}]" if g == "all"
                           else f"{v['value']:.3f}")
        table.add_row(*row)
    table.add_row("chance (uniform step)", *[f"{m['groups'][g]['chance'][k]:.3f}" for g in groups
                                             for k in ("agent", "step")])
    print_wide(table)
    if (paired_rows := priors_table(m["groups"]["all"]["methods"], names)) is not None:
        cols, rows = paired_rows
        table = methods_table("paired on the same logs (all): difference [95% CI], logs won / lost, sign-test p; the "
                              "best prior chosen on these logs", cols)
        for row in rows:
            table.add_row(*row)
        print_wide(table)
    print_judge_misses(m["groups"]["all"]["methods"], m["logs"])
    if (sp := m["groups"].get("all", {}).get("span")) is not None:
        console.print(f"answer located (--answer-span) in {sp['found']} of {m['logs']} logs; in {sp['truth_after']} "
                      f"of them the labelled step comes after the located answer", markup=False)
    if m["groups"].get("all", {}).get("windowed"):
        console.print("logs with calls longer than the scorer's context, scored on the steps nearest each call "
                      "that fit: " + ", ".join(f"{g} {m['groups'][g]['windowed']}" for g in groups), markup=False)
    if m["excluded"]:
        console.print("logs longer than the scorer's context, not scored: " + ", ".join(
            f"{g} {m['groups'][g]['excluded']} of {m['groups'][g]['excluded'] + m['groups'][g]['n']}"
            for g in groups), markup=False)
    else:
        console.print(f"logs longer than the scorer's context (attributed as far as they fit): "
                      f"{m['groups']['all']['too_long']}")
    if m["groups"].get("all", {}).get("seconds_per_log") is not None:
        console.print(f"wall time per log, the {len(names)} methods together: {m['groups']['all']['seconds_per_log']:.1f} s")
    pub = m["published"]
    table = methods_table(f"published (not measured here): {pub['judge_model']} as the judge, "
                          f"{pub['setting'].replace('_', ' ')}; agent / step accuracy", columns)
    for name, cells in pub["methods"].items():
        table.add_row(name, *[f"{cells[g][k]:.3f}" if g in cells else "-" for g in groups for k in ("agent", "step")])
    print_wide(table)
    console.print(f"source: {pub['source']} (no figure over all logs is published)", markup=False)
    if "hand" in m["groups"]:  # the paper's Tables 2 and 3 are on the hand-crafted logs
        within = pub["step_within"]
        table = methods_table("hand-crafted logs: step accuracy within k steps of the labelled one",
                              [f"within {k}" for k in range(1, 6)])
        for name in names:
            table.add_row(name, *[f"{v:.3f}" for v in m["groups"]["hand"]["methods"][name]["step_within"].values()])
        for name, cells in within["methods"].items():
            table.add_row(f"{name} (published)", *[f"{v:.3f}" for v in cells.values()])
        print_wide(table)
        console.print(f"published rows: {within['source']}, {pub['judge_model']} as the judge, {within['setting']}",
                      markup=False)
        mean = pub["hand_mean_of_settings"]
        table = methods_table(f"published (not measured here): hand-crafted logs, {mean['setting']}",
                              ["agent", "step", "tokens (its cost column)"])
        for name, cells in mean["methods"].items():
            table.add_row(name, f"{cells['agent']:.3f}", f"{cells['step']:.3f}", f"{cells['tokens']:,}")
        print_wide(table)
        console.print(f"source: {mean['source']}", markup=False)


def print_agentrx(summary: dict[str, Any], con: Any = console) -> None:
    """The AgentRx tables (:func:`agentgrad.benchmarks.agentrx.bench.markdown`), whole at any width."""
    from agentgrad.benchmarks.agentrx.bench import markdown

    con.print(markdown(summary), markup=False, highlight=False, soft_wrap=True)
