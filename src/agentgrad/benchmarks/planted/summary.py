"""The planted-fault benchmark's summary: every method's figures with 95% intervals, overall and per
group, paired against the model-free baselines, and the token-level precision."""

from __future__ import annotations

from typing import Any

from agentgrad.benchmarks.planted.tokens import TOKEN_OBJECTIVES, TOKEN_SCORES, WORD_PAIRS
from agentgrad.benchmarks.stats import paired
from agentgrad.core.stats import wilson
from agentgrad.blame.methods import model_free
from agentgrad.errors import RegistryError


def _agg(records: list[dict[str, Any]], m: str) -> dict[str, Any]:
    n = len(records)
    out: dict[str, Any] = {"n": n}
    for k in ("agent_top1", "node_top1", "agent_top3"):
        s = sum(r["methods"][m][k] for r in records)
        lo, hi = wilson(s, n)
        out[k] = {"value": s / n if n else 0.0, "ci95": [lo, hi]}
    for k in ("seconds", "backward", "forward", "judge_requests", "generations"):
        out[k] = sum(r["methods"][m].get(k, 0) for r in records) / max(n, 1)
    out["unparsed"] = sum(bool(r["methods"][m].get("unparsed")) for r in records)  # a count, not a mean
    out["unread"] = sum(bool(r["methods"][m].get("unread")) for r in records)  # a count, not a mean
    return out


GROUPS = (("topology",), ("fault",), ("long",), ("topology", "fault"))  # the planted benchmark's groups


def summarize(records: list[dict[str, Any]], methods: list[str],
              group_by: tuple[tuple[str, ...], ...] = GROUPS) -> dict[str, Any]:
    """Overall and per-group figures for every method, and the token-level precision.

    ``group_by`` names the record fields that form the groups: one group per distinct value of each
    tuple of fields, keyed ``field=value[,field=value]`` (``topology=chain,fault=omitted``)."""
    groups: dict[str, list[dict[str, Any]]] = {"all": records}
    for r in records:
        for keys in group_by:
            groups.setdefault(",".join(f"{k}={r[k]}" for k in keys), []).append(r)
    out = {g: {m: _agg(rs, m) for m in methods} for g, rs in groups.items()}
    for g, rs in groups.items():
        pair_with_baselines(rs, methods, out[g])
    timed = [r["seconds"] for r in records if "seconds" in r]
    return {"episodes": len(records), "methods": methods,
            # wall time of an episode with every method at once (what --methods costs), where recorded
            "seconds_per_episode": sum(timed) / len(timed) if timed else None,
            "chance_agent_top1": sum(1 / max(r["candidates"], 1) for r in records) / max(len(records), 1),
            "groups": out, "token": token_summary(records),
            "token_by_group": {g: t for g, rs in groups.items() if g != "all" and (t := token_summary(rs))}}


def token_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Token-level precision (hit@1 with its interval, mass share) per objective, where measured."""
    token: dict[str, Any] = {}
    for obj in TOKEN_OBJECTIVES:
        vals = [r["token"][obj] for r in records if r.get("token") and r["token"].get(obj)]
        if vals:
            token[obj] = precision_summary(vals)
            for score in TOKEN_SCORES:
                both = [v for v in vals if score in v]
                if both:  # and paired with L1's hit on the same episodes
                    token[obj][score] = {**precision_summary([v[score] for v in both]),
                                         "vs_l1": paired([v[score]["hit1"] for v in both], [v["hit1"] for v in both])}
                    for vs, other in WORD_PAIRS.get(score, ()):  # against length alone, and the finer score
                        if all(other in v for v in both):
                            token[obj][score][vs] = paired([v[score]["hit1"] for v in both],
                                                           [v[other]["hit1"] for v in both])
    if "contrast" in token and "targeted" in token:  # the contrast against the targeted objective, per score
        both = [(r["token"]["contrast"], r["token"]["targeted"]) for r in records
                if r.get("token") and r["token"].get("contrast") and r["token"].get("targeted")]
        vs = {"l1": paired([c["hit1"] for c, _ in both], [t["hit1"] for _, t in both])}
        for score in TOKEN_SCORES:
            if all(score in c and score in t for c, t in both):
                vs[score] = paired([c[score]["hit1"] for c, _ in both], [t[score]["hit1"] for _, t in both])
        token["contrast"]["vs_targeted"] = vs
    return token


def precision_summary(vals: list[dict[str, Any]]) -> dict[str, Any]:
    hits = sum(v["hit1"] for v in vals)
    return {"n": len(vals), "hit1": {"value": hits / len(vals), "ci95": list(wilson(hits, len(vals)))},
            "mass": sum(v["mass"] for v in vals) / len(vals)}


def _model_free(name: str) -> bool:
    try:
        return model_free(name)
    except RegistryError:  # a name outside the registry (a summary of hand-made records)
        return False


def pair_with_baselines(records: list[dict[str, Any]], methods: list[str], figures: dict[str, Any]) -> None:
    """Every method's agent top-1 beside the model-free baselines, paired on the same episodes:
    ``vs_provenance`` (where provenance ran) and ``vs_best_free`` (the best model-free method of
    these episodes, chosen on them: generous to the baseline), each the difference, its bootstrap
    interval, the episodes won and lost, and the sign test's p."""
    free = [m for m in methods if _model_free(m)]
    if not free or not records:
        return
    col = {m: [r["methods"][m]["agent_top1"] for r in records] for m in methods}
    best = max(free, key=lambda m: (sum(col[m]), m == "provenance"))
    for m in methods:
        if "provenance" in col:
            figures[m]["vs_provenance"] = paired(col[m], col["provenance"])
        figures[m]["vs_best_free"] = {"baseline": best, **paired(col[m], col[best])}
