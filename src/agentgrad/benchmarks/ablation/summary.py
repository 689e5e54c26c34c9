"""The ablation's statistics, matched to its design (docs/ablation.md).

Every arm's figure is a **per-question paired delta against the bugged system**: a run's test
result on question q minus the bugged system's on the same q (greedy decoding: the bugged system is
scored once). Deltas are averaged over seeds within a case, then over questions and cases; the 95%
intervals resample cases and questions together (:func:`~agentgrad.benchmarks.stats.crossed_bootstrap`:
every case is asked the same test questions). Every ratio has its raw question counts beside it.

- ``gain``: mean delta; ``fixed`` / ``broken``: question-runs the arm turned from fail to pass and
  from pass to fail, of ``question_runs``.
- ``recovered``: summed deltas over summed damage (clean - bugged, per question), pooled over
  cases: ``net`` questions recovered of ``damage`` questions lost.
- comparisons (``vs``): the paired difference with another arm on the (case, seed) runs both have,
  with its interval, the bootstrap p and the sign test over cases.
- ``of_oracle``: the arm's gain over oracle's, on the runs both have.
- the **verdict**: does blame accuracy predict test gain? Per kept case and blame arm, mean blame
  accuracy and mean gain over seeds; Pearson's r within cases (each case's means taken out) with a
  permutation test that shuffles accuracy across arms within each case
  (:func:`~agentgrad.benchmarks.stats.stratified_permutation_corr`).
"""

from __future__ import annotations

from typing import Any

from agentgrad.benchmarks.stats import crossed_bootstrap, sign_test, stratified_permutation_corr
from agentgrad.core.stats import mean_ci
from agentgrad.errors import ConfigError

NULL_ARMS = ("noop", "random_line")
BASELINES = ("random_line", "noop", "random", "all", "oracle")


def _q(bits: str) -> list[int]:
    return [1 if c == "1" else 0 for c in bits]


def _by_arm(rows: list[dict[str, Any]], kept: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[int, dict]]]:
    out: dict[str, dict[str, dict[int, dict]]] = {}
    for r in rows:
        if r["case"] in kept and r.get("test_q") and len(r["test_q"]) == len(kept[r["case"]]["test_bugged_q"]):
            out.setdefault(r["method"], {}).setdefault(r["case"], {})[r["seed"]] = r
    return out


def _gains(qs: list[list[float]], qb: list[float]) -> list[float]:
    """Per question, the mean over seeds of a case's test results ``qs`` minus the bugged system's ``qb``."""
    return [sum(q[i] for q in qs) / len(qs) - qb[i] for i in range(len(qb))]


def _stat(res: dict[str, Any]) -> list[float]:
    return [res["value"], *res["ci95"]]


def compare(runs_a: dict[str, dict[int, dict]], runs_b: dict[str, dict[int, dict]], resamples: int = 2000) -> dict:
    """Arm a minus arm b on the (case, seed) runs both have, per question: interval, p, sign test over cases,
    and on how many of those runs both gave the same test answers."""
    mat, case_means, same = [], [], 0
    for c in sorted(set(runs_a) & set(runs_b)):
        seeds = sorted(set(runs_a[c]) & set(runs_b[c]))
        if not seeds:
            continue
        same += sum(runs_a[c][s]["test_q"] == runs_b[c][s]["test_q"] for s in seeds)
        qa = [_q(runs_a[c][s]["test_q"]) for s in seeds]
        qb = [_q(runs_b[c][s]["test_q"]) for s in seeds]
        row = [sum(a[i] - b[i] for a, b in zip(qa, qb)) / len(seeds) for i in range(len(qa[0]))]
        mat.append(row)
        case_means.append(sum(row) / len(row))
    if not mat:
        return {"diff": None, "ci95": None, "p": None, "cases": 0}
    res = crossed_bootstrap({"d": mat}, lambda m: m["d"], resamples)
    wins, losses = sum(x > 0 for x in case_means), sum(x < 0 for x in case_means)
    return {"diff": res["value"], "ci95": res["ci95"], "p": res["p"], "cases": len(mat), "wins": wins,
            "losses": losses, "p_sign": sign_test(wins, losses), "same_answers": same}


def compare_arms(case_rows: list[dict[str, Any]], rows: list[dict[str, Any]], a: str, b: str,
                 resamples: int = 2000) -> dict[str, Any]:
    """:func:`compare` of arms ``a`` and ``b`` by name over the kept cases of ``case_rows``."""
    kept = {c["case"]: c for c in case_rows if c.get("kept") and c.get("test_bugged_q")}
    by_arm = _by_arm(rows, kept)
    missing = [m for m in (a, b) if m not in by_arm]
    if missing:
        raise ConfigError(f"no runs of arm {missing[0]!r} here (arms with runs: {', '.join(by_arm) or 'none'})")
    return compare(by_arm[a], by_arm[b], resamples)


def arm_stats(arm: str, runs: dict[str, dict[int, dict]], kept: dict[str, dict[str, Any]],
              by_arm: dict[str, dict[str, dict[int, dict]]], resamples: int = 2000) -> dict[str, Any]:
    flat = [r for c in runs.values() for r in c.values()]
    delta, damage = [], []
    fixed = broken = n_q = net_damage = 0
    systems: dict[str, dict[str, Any]] = {}
    for c in sorted(runs):
        qb, qc = _q(kept[c]["test_bugged_q"]), _q(kept[c]["test_clean_q"])
        qs = [_q(r["test_q"]) for r in runs[c].values()]
        delta.append(_gains(qs, qb))
        damage.append([qc[i] - qb[i] for i in range(len(qb))])
        per = systems.setdefault(kept[c]["system"],
                                 {"d": [], "fixed": 0, "broken": 0, "question_runs": 0})
        per["d"].append(delta[-1])
        for q in qs:
            f, b = sum(a == 1 and b == 0 for a, b in zip(q, qb)), sum(a == 0 and b == 1 for a, b in zip(q, qb))
            fixed, broken, n_q = fixed + f, broken + b, n_q + len(q)
            per["fixed"], per["broken"], per["question_runs"] = per["fixed"] + f, per["broken"] + b, \
                per["question_runs"] + len(q)
            net_damage += sum(qc) - sum(qb)
    gain = crossed_bootstrap({"d": delta}, lambda m: m["d"], resamples)
    by_system = {s: {"cases": len(v["d"]), "gain": _stat(gain if len(systems) == 1 else crossed_bootstrap(
                         {"d": v["d"]}, lambda m: m["d"], resamples)),
                     **{k: v[k] for k in ("fixed", "broken", "question_runs")}} for s, v in sorted(systems.items())}
    rec = crossed_bootstrap({"d": delta, "g": damage}, lambda m: m["d"] / m["g"], resamples)
    col = lambda k: [r[k] for r in flat if r.get(k) is not None]  # noqa: E731
    out = {
        "runs": len(flat), "cases": len(runs), "seeds": sorted({s for c in runs.values() for s in c}),
        "blame_accuracy": list(mean_ci(col("blame_accuracy"))), "blame_precision": list(mean_ci(col("blame_precision"))),
        "test_before": list(mean_ci(col("test_before"))), "test_after": list(mean_ci(col("test_after"))),
        "gain": _stat(gain), "recovered": _stat(rec),
        "fixed": fixed, "broken": broken, "question_runs": n_q, "net": fixed - broken, "damage": net_damage,
        "defect_removed": sum(r["defect_removed"] for r in flat) / len(flat),
        "only_bugged_edited": sum(r["edited"] == [r["bugged_agent"]] for r in flat) / len(flat),
        "accepted_steps": sum(r["accepted"] for r in flat) / len(flat),
        "prompt_growth": list(mean_ci(col("prompt_growth"))),
        "calls": sum(r["calls"] for r in flat) / len(flat), "generated": sum(r["generated"] for r in flat) / len(flat),
        "seconds": sum(r["seconds"] for r in flat) / len(flat), "vs": {}, "by_system": by_system,
    }
    for b in BASELINES:
        if b != arm and b in by_arm:
            out["vs"][b] = compare(runs, by_arm[b], resamples)
    if arm != "oracle" and "oracle" in by_arm:
        share = _share(runs, by_arm["oracle"], kept, resamples)
        if share is not None:
            out["of_oracle"] = share
    return out


def verdict(by_arm: dict[str, dict[str, dict[int, dict]]], key: str = "blame_accuracy") -> dict[str, Any]:
    """Does ``key`` predict test gain across the blame arms, within cases? (module docstring)"""
    points = []
    for arm, runs in by_arm.items():
        if arm in NULL_ARMS:
            continue
        for c, seeds in runs.items():
            xs = [r[key] for r in seeds.values() if r.get(key) is not None]
            if xs:
                points.append((c, sum(xs) / len(xs), sum(r["gain"] for r in seeds.values()) / len(seeds)))
    return stratified_permutation_corr(points) | {"predictor": key}


def summarize(case_rows: list[dict[str, Any]], rows: list[dict[str, Any]], noise_rows: list[dict[str, Any]],
              resamples: int = 2000) -> dict[str, Any]:
    """Everything the table, the figures and the report show (see the module docstring)."""
    kept = {c["case"]: c for c in case_rows if c.get("kept") and c.get("test_bugged_q")}
    for r in rows:  # rows written before the per-question gain existed
        if r.get("gain") is None and r["case"] in kept:
            r["gain"] = r["test_after"] - kept[r["case"]]["bugged_test"]
    by_arm = _by_arm(rows, kept)
    noise: dict[str, Any] = {}
    for s in sorted({r["system"] for r in noise_rows}):
        ds = [r["delta"] for r in noise_rows if r["system"] == s]
        noise[s] = {"edits": len(ds), "floor": sum(map(abs, ds)) / len(ds), "deltas": ds,
                    "n_screen": next(r["n_screen"] for r in noise_rows if r["system"] == s)}
    families: dict[str, dict[str, list[int]]] = {}
    for c in case_rows:
        f = families.setdefault(c["system"], {}).setdefault(c["defect"], [0, 0])
        f[0] += 1
        f[1] += bool(c.get("kept"))
    methods = {m: arm_stats(m, by_arm[m], kept, by_arm, resamples) for m in by_arm}
    by_case = {c: {m: {"blame_accuracy": (lambda xs: sum(xs) / len(xs) if xs else None)(
                           [r["blame_accuracy"] for r in by_arm[m][c].values() if r.get("blame_accuracy") is not None]),
                       "gain": sum(r["gain"] for r in by_arm[m][c].values()) / len(by_arm[m][c]),
                       "recovered": (sum(r["gain"] for r in by_arm[m][c].values()) / len(by_arm[m][c])
                                     / (kept[c]["clean_test"] - kept[c]["bugged_test"])
                                     if kept[c]["clean_test"] > kept[c]["bugged_test"] else None)}
                   for m in by_arm if c in by_arm[m]} for c in sorted(kept)}
    shown = [{k: v for k, v in c.items() if not k.endswith("_q")} for c in case_rows]
    return {"cases": shown, "kept": sum(bool(c.get("kept")) for c in case_rows),
            "dropped": sum(not c.get("kept") for c in case_rows), "noise": noise, "families": families,
            "methods": methods, "by_case": by_case, "runs": len(rows),
            "verdict": verdict(by_arm) if by_arm else None,
            "verdict_precision": (verdict(by_arm, "blame_precision") if by_arm and any(
                r.get("blame_precision") not in (None, r.get("blame_accuracy")) for r in rows if r["case"] in kept)
                                   else None)}


def _ci(t: Any, digits: int = 2, sign: bool = False) -> str:
    """``[value, low, high]`` as ``value [low, high]``; '-' for none."""
    if not t or t[0] is None or t[0] != t[0]:
        return "-"
    f = f"{{:+.{digits}f}}" if sign else f"{{:.{digits}f}}"
    return f"{f.format(t[0])} [{f.format(t[1])}, {f.format(t[2])}]"


def _vs(v: dict[str, Any] | None) -> str:
    if not v or v.get("diff") is None:
        return "-"
    return f"{v['diff']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}] p={v['p']:.3f} ({v['wins']}/{v['losses']} cases)"


def markdown_table(summary: dict[str, Any]) -> str:
    """The noise floor, the screen, the arms with their intervals and counts, the verdict, per case."""
    out = ["### Noise floor (neutral one-line edits, screening split)", "",
           "| system | edits | mean abs change | changes |", "|---|---|---|---|"]
    for s, n in summary["noise"].items():
        out.append(f"| {s} | {n['edits']} | {n['floor']:.3f} ({n['floor'] * n['n_screen']:.1f} of {n['n_screen']} "
                   f"questions) | {', '.join(f'{d:+.2f}' for d in n['deltas'])} |")
    out += ["", "### Screening: kept / candidate instances per family", "",
            "| system | " + " | ".join(sorted({f for v in summary["families"].values() for f in v})) + " |"]
    fams = sorted({f for v in summary["families"].values() for f in v})
    out.append("|---|" + "---|" * len(fams))
    for s, v in summary["families"].items():
        out.append(f"| {s} | " + " | ".join(f"{v[f][1]} / {v[f][0]}" if f in v else "-" for f in fams) + " |")
    kept = sum(x[1] for v in summary["families"].values() for x in v.values())
    tried = sum(x[0] for v in summary["families"].values() for x in v.values())
    out += ["", f"kept {kept} of {tried} candidate instances in all"]
    out += ["", "| kept case | bugged agent | screen clean -> bugged (damage, threshold) | test clean -> bugged "
                "(questions) |", "|---|---|---|---|"]
    for c in summary["cases"]:
        if c.get("kept"):
            n = c.get("n_test") or 0
            out.append(f"| {c['case']} | {c['bugged_agent']} | {c['screen_clean']:.2f} -> {c['screen_bugged']:.2f} "
                       f"({c['damage_screen']:+.2f}, {c['threshold']:.2f}) | {c['clean_test']:.3f} -> "
                       f"{c['bugged_test']:.3f} ({round(c['clean_test'] * n)} -> {round(c['bugged_test'] * n)} of {n}) |")
    out += ["", "### Arms: test gain against the bugged system (per-question paired deltas; 95% intervals over "
                "cases and questions)", "",
            "| arm | runs (cases x seeds) | blame accuracy | test gain | fixed / broken of question-runs | "
            "recovered damage (net / lost questions) | vs random_line | vs random | vs all | of oracle's gain | "
            "defect removed | only bugged agent edited | accepted steps per run | calls asked / generated | s per run |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m, s in summary["methods"].items():
        out.append(f"| {m} | {s['runs']} ({s['cases']} x {len(s['seeds'])}) | {_ci(s['blame_accuracy'])} | "
                   f"{_ci(s['gain'], 3, True)} | {s['fixed']} / {s['broken']} of {s['question_runs']} | "
                   f"{_ci(s['recovered'])} ({s['net']} / {s['damage']}) | {_vs(s['vs'].get('random_line'))} | "
                   f"{_vs(s['vs'].get('random'))} | {_vs(s['vs'].get('all'))} | {_ci(s.get('of_oracle'))} | "
                   f"{s['defect_removed']:.2f} | {s['only_bugged_edited']:.2f} | {s['accepted_steps']:.2f} | "
                   f"{s['calls']:.0f} / {s['generated']:.0f} | {s['seconds']:.0f} |")
    if summary["methods"]:
        out += ["", f"{sum(s['runs'] for s in summary['methods'].values())} runs of "
                    f"{len(summary['methods'])} arms on {max(s['cases'] for s in summary['methods'].values())} cases"]
    systems = sorted({k for s in summary["methods"].values() for k in s.get("by_system", {})})
    if len(systems) > 1:
        out += ["", "### Per system: test gain [95% interval] (cases; fixed / broken of question-runs)", "",
                "| arm | " + " | ".join(systems) + " |", "|---|" + "---|" * len(systems)]
        for m, s in summary["methods"].items():
            cells = [(lambda v: "-" if v is None else f"{_ci(v['gain'], 3, True)} ({v['cases']}; {v['fixed']} / "
                      f"{v['broken']} of {v['question_runs']})")(s.get("by_system", {}).get(k)) for k in systems]
            out.append(f"| {m} | " + " | ".join(cells) + " |")
    for key in ("verdict", "verdict_precision"):
        v = summary.get(key)
        if v:
            out += ["", f"**Does {v['predictor'].replace('_', ' ')} predict test gain?** Within-case Pearson r = "
                        f"{v['r']:.3f} over {v['points']} (case, blame arm) means in {v['strata']} cases, slope "
                        f"{v['slope']:+.3f} gain per unit; permutation p = {v['p']:.4f} (shuffled within cases)."]
    if summary.get("verdict") and not summary.get("verdict_precision"):
        out += ["", "Blame precision is not recorded, or equals blame accuracy on every run (each failure was blamed "
                    "on one agent): the verdict on precision is the one above."]
    arms = list(summary["methods"])
    if summary["by_case"] and arms:
        out += ["", "### Per case: mean test gain (blame accuracy)", "", "| case | " + " | ".join(arms) + " |",
                "|---|" + "---|" * len(arms)]
        for c, v in summary["by_case"].items():
            cells = []
            for m in arms:
                x = v.get(m)
                cells.append("-" if not x else f"{x['gain']:+.3f}" + (f" ({x['blame_accuracy']:.2f})"
                                                                    if x["blame_accuracy"] is not None else ""))
            out.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


# --- the factorial (pre-registered in docs/ablation-factorial.md) ------------------------
FACTORIAL_AGENTS = ("gbc", "provenance", "random", "oracle")
FACTORIAL_LINES = ("grad", "string", "random_line")
# (label, a, b): each read as a - b, paired per question against the bugged system
CONTRASTS = [("a", "gbc/grad", "random/random_line"), ("b", "gbc/grad", "gbc/random_line"),
             ("c", "gbc/grad", "random/grad"), ("d", "gbc/grad", "gbc/string"),
             ("e", "gbc/grad", "provenance/grad"), ("f", "gbc/grad", "oracle/grad")]


DETECTABLE = (1.959964 + 0.841621) / 1.959964  # z(0.975) + z(0.80), over z(0.975)


def detectable(ci95: list[float] | None) -> float | None:
    """The smallest difference a contrast with this 95% interval would find at p < 0.05 (two-sided) 4 times
    in 5 (power 0.8): (z(0.975) + z(0.8)) standard errors, the standard error read off the interval as half
    its width over z(0.975) (the normal approximation of the bootstrap's spread); None without an interval."""
    if not ci95 or any(x is None or x != x for x in ci95):
        return None
    return DETECTABLE * (ci95[1] - ci95[0]) / 2


def share_of(case_rows: list[dict[str, Any]], rows: list[dict[str, Any]], a: str, b: str,
             resamples: int = 2000) -> list[float] | None:
    """Arm ``a``'s test gain as a share of arm ``b``'s (``gbc/grad`` of ``oracle/grad``: the factorial's
    moonshot) on the (case, seed) runs both have, per question against the bugged system, with the crossed
    bootstrap's interval; None where they share no run."""
    kept = {c["case"]: c for c in case_rows if c.get("kept") and c.get("test_bugged_q")}
    by_arm = _by_arm(rows, kept)
    return _share(by_arm.get(a, {}), by_arm.get(b, {}), kept, resamples)


def _share(ra: dict[str, dict[int, dict]], rb: dict[str, dict[int, dict]], kept: dict[str, dict[str, Any]],
           resamples: int) -> list[float] | None:
    """:func:`share_of` on two arms' runs (case -> seed -> run)."""
    mats: dict[str, list[list[float]]] = {"a": [], "b": []}
    for c in sorted(set(ra) & set(rb)):
        seeds = sorted(set(ra[c]) & set(rb[c]))
        if not seeds:
            continue
        qb = _q(kept[c]["test_bugged_q"])
        for key, runs in (("a", ra[c]), ("b", rb[c])):
            mats[key].append(_gains([_q(runs[s]["test_q"]) for s in seeds], qb))
    if not mats["a"]:
        return None
    return _stat(crossed_bootstrap(mats, lambda m: m["a"] / m["b"], resamples))


def discordant(case_rows: list[dict[str, Any]], rows: list[dict[str, Any]], a: str, b: str) -> tuple[int, int, int]:
    """Raw counts of a contrast: question-runs (case, seed, question) on the runs both arms have where
    ``a`` passes and ``b`` fails, the reverse, and all of them."""
    kept = {c["case"]: c for c in case_rows if c.get("kept") and c.get("test_bugged_q")}
    by_arm = _by_arm(rows, kept)
    ra, rb = by_arm.get(a, {}), by_arm.get(b, {})
    ab = ba = n = 0
    for c in set(ra) & set(rb):
        for s in set(ra[c]) & set(rb[c]):
            qa, qb = ra[c][s]["test_q"], rb[c][s]["test_q"]
            ab += sum(x == "1" and y == "0" for x, y in zip(qa, qb))
            ba += sum(x == "0" and y == "1" for x, y in zip(qa, qb))
            n += len(qa)
    return ab, ba, n


def factorial_markdown(case_rows: list[dict[str, Any]], rows: list[dict[str, Any]], resamples: int = 2000) -> str:
    """The factorial as a table (which agent x which line: test gain and its counts) and the
    pre-registered contrasts (a)-(f) with their raw counts; '' when no cell has runs."""
    kept = {c["case"]: c for c in case_rows if c.get("kept") and c.get("test_bugged_q")}
    by_arm = _by_arm(rows, kept)
    cells = {f"{a}/{line}" for a in FACTORIAL_AGENTS for line in FACTORIAL_LINES}
    if not cells & set(by_arm):
        return ""
    out = ["### Factorial: which agent x which line (one operator: the line removed); test gain [95% interval] "
           "(runs; fixed / broken of question-runs)", "",
           "| agent \\ line | " + " | ".join(FACTORIAL_LINES) + " |", "|---|" + "---|" * len(FACTORIAL_LINES)]
    stats = {}
    for arm in sorted(cells & set(by_arm)) + (["noop"] if "noop" in by_arm else []):
        stats[arm] = arm_stats(arm, by_arm[arm], kept, {}, resamples)
    for a in FACTORIAL_AGENTS:
        cell = []
        for line in FACTORIAL_LINES:
            s = stats.get(f"{a}/{line}")
            cell.append("-" if s is None else f"{_ci(s['gain'], 3, True)} ({s['runs']}; {s['fixed']} / {s['broken']} "
                                              f"of {s['question_runs']})")
        out.append(f"| {a} | " + " | ".join(cell) + " |")
    if "noop" in stats:
        s = stats["noop"]
        out += ["", f"noop: {_ci(s['gain'], 3, True)} ({s['runs']} runs; {s['fixed']} / {s['broken']} of "
                    f"{s['question_runs']})"]
    out += ["", "### Pre-registered contrasts (a - b, paired per question on the runs both have; crossed bootstrap "
                "over cases and questions; p two-sided, decided at 0.05)", "",
            "| | a | b | difference [95% interval] | p | smallest detectable | cases won / lost of (sign test's "
            "smallest p) | question-runs a>b / b>a of | same test answers (runs) |", "|---|---|---|---|---|---|---|---|---|"]
    for label, a, b in CONTRASTS:
        if a not in by_arm or b not in by_arm:
            out.append(f"| ({label}) | {a} | {b} | no runs | | | | | |")
            continue
        v = compare(by_arm[a], by_arm[b], resamples)
        ab, ba, n = discordant(case_rows, rows, a, b)
        if v["diff"] is None:
            out.append(f"| ({label}) | {a} | {b} | no runs in common | | | | | |")
            continue
        least = detectable(v["ci95"])
        out.append(f"| ({label}) | {a} | {b} | {v['diff']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}] | "
                   f"{v['p']:.3f} | {'-' if least is None else f'{least:.3f}'} | {v['wins']} / {v['losses']} of "
                   f"{v['cases']} ({min(1.0, 2 * 0.5 ** v['cases']):.3f}) | {ab} / {ba} of {n} | {v['same_answers']} |")
    share = _share(by_arm.get("gbc/grad", {}), by_arm.get("oracle/grad", {}), kept, resamples)
    if share is not None:
        out += ["", f"gbc/grad's gain as a share of oracle/grad's (the moonshot asks at least 0.8): "
                    f"{_ci(share, 2)} on the runs both have"]
    out += ["", "Smallest detectable: the difference the test finds at p < 0.05 with power 0.8, (z(0.975) + z(0.8)) "
                "standard errors, each read off the interval as its half-width over z(0.975); the sign test over "
                "cases cannot reach p < 0.05 where its smallest p is above it."]
    return "\n".join(out) + "\n"
