"""What the report's Summary says of each kind of run: its first sentence, and the tables of blame
runs (``agentgrad blame``, the blame benchmarks) and of the prompt-bug ablation."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from agentgrad.report.format import fmt


def and_list(words: list[str]) -> str:
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def score_text(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, (int, float)) else "-"


def headline(part: dict[str, Any]) -> str | None:
    """The report's first sentence: who was blamed, what changed, and the held-out score before -> after
    (an optimisation), or what each method blamed (``agentgrad blame``); None for other runs."""
    if part["kind"] == "optimisation":
        counts: dict[str, int] = {}
        for s in part["steps"]:
            for a, n in (s.get("blamed") or {}).items():
                counts[str(a)] = counts.get(str(a), 0) + int(n or 0)
        failures = sum(int(s.get("failures") or 0) for s in part["steps"])
        blamed = sorted(counts, key=lambda a: -counts[a])
        who = (and_list([f"{a} (in {counts[a]} of {failures} failed samples)" for a in blamed[:3]])
               + (f" and {len(blamed) - 3} more" if len(blamed) > 3 else "") if blamed else "no agent")
        first, last = (part["prompts"][0]["prompts"], part["prompts"][-1]["prompts"]) if part["prompts"] else ({}, {})
        final = part["final"] if isinstance(part.get("final"), dict) else {}
        changed = [a for a in last if first.get(a) != last[a]]
        if isinstance(final.get("prompts"), dict):
            changed = [a for a, t in final["prompts"].items() if first.get(a) != t]
        steps = [s for s in part["steps"] if s.get("accepted") is not None]
        kept = sum(s.get("accepted") is True for s in steps)
        what = (f"rewrote the prompt{'s' if len(changed) > 1 else ''} of {and_list(changed)}" if changed
                else "changed no prompt")
        what += f" ({kept} of {len(steps)} proposed edits kept by the validation gate)" if steps else ""
        if isinstance(final.get("test_before"), (int, float)) and isinstance(final.get("test_after"), (int, float)):
            score = (f"held-out test score {score_text(final['test_before'])} → {score_text(final['test_after'])}"
                     + (f" on {final['test_size']} questions no step read" if final.get("test_size") else ""))
        elif isinstance(final.get("val_score"), (int, float)):
            score = (f"validation score {score_text(part.get('val_start'))} → {score_text(final['val_score'])} "
                     f"(no held-out test split in this run)")
        else:
            score = "no final score yet (the run has not finished)"
        return f"Blamed {who}; {what}; {score}."
    if part["kind"] == "blame-set":
        from agentgrad.report.team_view import set_headline

        return set_headline(part)
    if part["kind"] == "blamed" and isinstance(part.get("metrics"), dict):
        rows = part["metrics"].get("blame") or []
        said = []
        for r in rows:
            repair = ", ".join(r.get("repair") or [])
            fix = f"; repair {repair}'s prompt" if repair and repair != r.get("agent") else ""
            said.append(f"{r.get('method')} blames {r.get('agent') or 'nothing'}"
                        + (f" ({r.get('kind')} n{r['node']}{fix})" if r.get("node") is not None else ""))
        loss = part["metrics"].get("loss")
        return (f"For “{loss}”: " if loss else "") + "; ".join(said) + "." if said else None
    return None


def blame_table(part: dict[str, Any]) -> dict[str, Any] | None:
    """The methods side by side: overall figures with 95% intervals, then agent top-1 per group."""
    m = part.get("metrics") or {}
    groups = m.get("groups") or {}
    if part["kind"] == "blame" and "all" in groups:
        per = [g for g in groups if g.startswith(("fault=", "topology=", "system=", "kind=", "final="))
               and "," not in g]  # bench blame's groups, and bench inject's

        def ci(x: dict[str, Any]) -> str:
            lo, hi = x.get("ci95") or (None, None)
            return f"{x['value']:.3f} [{lo:.2f}, {hi:.2f}]" if lo is not None else f"{x['value']:.3f}"

        rows = []
        for meth, g in groups["all"].items():
            rows.append([meth, ci(g["agent_top1"]), ci(g["node_top1"]), fmt(g["agent_top3"]["value"]),
                         *(fmt(groups[k][meth]["agent_top1"]["value"]) for k in per),
                         fmt(g.get("seconds")), fmt(g.get("backward")), fmt(g.get("forward"))])
        return {"n": m.get("episodes"), "chance": m.get("chance_agent_top1"),
                "columns": ["agent top-1 [95% CI]", "node top-1 [95% CI]", "agent top-3",
                            *(f"agent top-1 {k}" for k in per), "seconds", "backward passes", "forward passes"],
                "rows": rows}
    if part["kind"] == "whowhen" and isinstance(groups.get("all"), dict):
        subsets = [g for g in groups if g != "all"]
        g_all = groups["all"]
        rows = [[meth, fmt(v["agent"]["value"]), fmt(v["step"]["value"]),
                 *(fmt(groups[g]["methods"][meth]["agent"]["value"]) for g in subsets)]
                for meth, v in g_all.get("methods", {}).items()]
        pub = m.get("published") if isinstance(m.get("published"), dict) else {}
        for meth, cells in (pub.get("methods") or {}).items():  # the paper's figures, per subset only
            rows.append([f"{meth} (published, {pub.get('judge_model')} judge, not measured here)", fmt(None), fmt(None),
                         *(fmt((cells.get(g) or {}).get("agent")) for g in subsets)])
        return {"n": m.get("logs"), "chance": (g_all.get("chance") or {}).get("agent"),
                "columns": ["agent accuracy", "step accuracy", *(f"agent accuracy {g}" for g in subsets)], "rows": rows}
    return None


def ablation_view(part: dict[str, Any]) -> dict[str, Any] | None:
    """The ablation's cases, its methods side by side (means with 95% intervals) and its two figures."""
    if part["kind"] != "ablation":
        return None
    from agentgrad.report.ablation_figures import curve_svg, scatter_svg

    summary, rows = part["ablation"]["summary"], part["ablation"]["rows"]
    cases = [c for c in summary.get("cases") or [] if isinstance(c, dict)]
    kept = {c.get("case") for c in cases if c.get("kept")}

    def ci(t: Any) -> str:
        return f"{t[0]:.2f} [{t[1]:.2f}, {t[2]:.2f}]" if isinstance(t, list) and len(t) == 3 and t[0] == t[0] else "-"

    methods = [[m, str(s.get("runs")), ci(s.get("blame_accuracy")), ci(s.get("blame_precision")),
                ci(s.get("test_after")), ci(s.get("recovered")), fmt(s.get("defect_removed")),
                fmt(s.get("only_bugged_edited")), fmt((s.get("prompt_growth") or [None])[0]),
                f"{fmt(s.get('calls'))} / {fmt(s.get('generated'))}", fmt(s.get("seconds"))]
               for m, s in (summary.get("methods") or {}).items() if isinstance(s, dict)]
    figures = []
    if rows and kept:
        figures = [Markup(curve_svg(rows, kept)), Markup(scatter_svg(summary.get("by_case") or {}))]
    return {"cases": [[c.get("case"), c.get("bugged_agent"), fmt(c.get("clean_test")), fmt(c.get("bugged_test")),
                       "kept" if c.get("kept") else "dropped (the defect does not hurt)"] for c in cases],
            "methods": methods, "figures": figures, "runs": len(rows), "options": part["ablation"].get("options"),
            "seconds": summary.get("seconds_total")}


def metrics_shown(part: dict[str, Any]) -> Any:
    """The metrics table: for the blame benchmarks, what the methods table does not already show."""
    m = part.get("metrics")
    if part["kind"] in ("blame", "whowhen") and isinstance(m, dict):
        return {k: v for k, v in m.items() if k not in ("groups", "methods", "published")}
    if part["kind"] == "blamed" and isinstance(m, dict):
        return {k: v for k, v in m.items() if k != "blame" and v is not None}
    return m


def blamed_table(part: dict[str, Any]) -> dict[str, Any] | None:
    """``agentgrad blame``'s verdict: one row per method."""
    if part["kind"] != "blamed" or not isinstance(part.get("metrics"), dict):
        return None
    rows = part["metrics"].get("blame") or []
    return {"columns": ["method", "blamed", "node", "score", "prompts to repair", "next"],
            "rows": [[r.get("method"), r.get("agent"), f"n{r['node']} {r.get('kind')}" if r.get("node") is not None
                      else None, r.get("score"), ", ".join(r.get("repair") or []) or None, r.get("next")]
                     for r in rows]}

