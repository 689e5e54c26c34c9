"""The report of a blamed set (``agentgrad blame FOLDER --expected FILE``): the team verdict as a chart,
and every failure one click away.

The traces shown in full are read from ``traces.jsonl`` at their verdicts' byte offsets
(:func:`load_trace_at`). :func:`set_part` reads the run directory (``blame.json``, ``verdicts.jsonl``; a run
stopped before ``blame.json`` was written has its team verdict computed again from the verdicts);
:func:`team_view` lays out what the page draws: per agent and method a bar (the share of the
failures blamed on it) with its 95% interval as a whisker, each agent's name a link to the list of
the failures blamed on it, each failure a link to its episode when that episode is shown in full.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgrad.blame.team import TraceVerdict, team_verdict
from agentgrad.core.trace import Trace
from agentgrad.errors import TraceError
from agentgrad.report.format import fmt

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
SHOWN_SKIPPED = 200  # the skipped traces listed per kind (the rest are counted)


def _verdicts(path: Path, warnings: list[str]) -> list[TraceVerdict]:
    out: dict[str, TraceVerdict] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        try:
            v = TraceVerdict.from_dict(json.loads(line))
        except (ValueError, KeyError, TypeError, AttributeError):
            if line.strip():
                warnings.append(f"{path.name}:{n}: not a verdict (a line cut short?); left out")
            continue
        out[v.trace] = v
    return list(out.values())


def load_trace_at(path: Path, offset: int) -> Trace:
    """The trace on the line of ``path`` (JSONL) that starts at byte ``offset``."""
    where = f"{path.name} at byte {offset}"
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return Trace.from_dict(json.loads(f.readline().decode("utf-8")), where=where)
    except (OSError, ValueError) as e:
        raise TraceError(f"{where}: not a trace ({type(e).__name__})") from None


def set_part(path: Path, warnings: list[str]) -> dict[str, Any]:
    """The part of a report for a blamed set (see the module docstring)."""
    verdicts = _verdicts(path / "verdicts.jsonl", warnings)
    doc: Any = None
    if (path / "blame.json").exists():
        try:
            doc = json.loads((path / "blame.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            warnings.append(f"blame.json: cannot be read ({type(e).__name__})")
    if not isinstance(doc, dict) or not isinstance(doc.get("team"), dict):
        methods = list(dict.fromkeys(m for v in verdicts for m in v.methods))
        doc = {"team": team_verdict(verdicts, methods or None).to_dict(), "warnings": [], "source": None,
               "methods": methods}
        warnings.append("blame.json is missing (the run stopped before the end): the team verdict is computed "
                        "from verdicts.jsonl")
    episodes = []
    for v in verdicts:
        if v.status != "blamed" or not v.file or v.offset is None:
            continue
        trace = path / v.file
        episodes.append({"file": v.trace, "part": "", "id": v.trace, "score": None, "failed": True,
                         "trace_path": trace if trace.is_file() else None, "trace_offset": v.offset,
                         "attribution_path": None,
                         "loss": {"text": v.loss, "targets": [v.target] if v.target is not None else []},
                         "verdict": {"blamed": ", ".join(f"{m.agent} ({name})" for name, m in v.methods.items())}})
    counts = doc["team"].get("counts") or {}
    metrics = {"traces from": doc.get("source"), "methods": ", ".join(doc.get("methods") or []),
               **{k: counts.get(k) for k in ("blamed", "succeeded", "malformed", "unblamed")},
               "warnings about the losses files": len(doc.get("warnings") or []), "seconds": doc.get("seconds")}
    return {"label": "", "path": path, "kind": "blame-set", "config": None, "metrics": metrics, "final": None,
            "steps": [], "samples": [], "prompts": [], "val_start": None, "episodes": episodes,
            "team": doc["team"], "verdicts": verdicts, "set_warnings": list(doc.get("warnings") or [])}


def _chart(team: dict[str, Any], groups: list[str]) -> dict[str, Any]:
    """Bars and whiskers: one row of bars per agent (``groups``), one bar per method."""
    methods = list(team.get("methods") or {})
    w, left, top, bar, gap = 760, 150, 34, 14, 14
    pw = w - left - 30
    rows, y = [], top
    for g, agent in enumerate(groups):
        bars = []
        for j, m in enumerate(methods):
            s = next((x for x in team["methods"][m]["shares"] if x["agent"] == agent), None)
            if s is not None:
                x0 = left + s["low"] * pw
                bars.append({"y": y + j * bar, "w": round(s["share"] * pw, 1), "lo": round(x0, 1),
                             "hi": round(left + s["high"] * pw, 1), "color": COLORS[j % len(COLORS)],
                             "title": f"{m}: {agent} {s['share']:.2f} [{s['low']:.2f}, {s['high']:.2f}] "
                                      f"({fmt(s['failures'])} of {team['methods'][m]['traces']} failures)"})
        rows.append({"agent": agent, "anchor": f"fail-{g}", "y": y, "label_y": y + len(methods) * bar / 2 + 4,
                     "h": len(methods) * bar,
                     "bars": bars})
        y += len(methods) * bar + gap
    ticks = [{"x": round(left + t * pw, 1), "label": f"{t:g}"} for t in (0, 0.25, 0.5, 0.75, 1)]
    legend = [{"x": left + 200 * j, "color": COLORS[j % len(COLORS)], "method": m} for j, m in enumerate(methods)]
    return {"w": w, "h": y + 40, "left": left, "axis_y": y, "rows": rows, "ticks": ticks, "legend": legend,
            "bar": bar - 3}


def team_view(part: dict[str, Any], links: dict[tuple[str, str], int]) -> dict[str, Any] | None:
    """What the page draws of a blamed set (None for another kind of run)."""
    if part["kind"] != "blame-set":
        return None
    team = part["team"]
    primary = team.get("primary")
    verdicts: list[TraceVerdict] = part["verdicts"]
    methods = list(team.get("methods") or {})
    shares = ((team["methods"].get(primary) or {}).get("shares") or []) if primary else []
    groups = [s["agent"] for s in shares]
    groups += [s["agent"] for m in methods for s in team["methods"][m]["shares"] if s["agent"] not in groups]
    groups = list(dict.fromkeys(groups))
    failures: dict[str, list[dict[str, Any]]] = {a: [] for a in groups}
    for v in verdicts:
        if v.status != "blamed":
            continue
        pick = v.methods.get(primary) if primary else None
        agent = (pick.blamed_agents() or ["(nothing)"])[0] if pick else "(nothing)"
        failures.setdefault(agent, []).append({
            "trace": v.trace, "link": links.get(("", v.trace)),
            "wrong": v.wrong, "loss": v.loss, "note": v.note,
            "picks": {m: ", ".join(x.blamed_agents()) or "-" for m, x in v.methods.items()}})
    skipped = []
    for status in ("succeeded", "malformed", "unblamed", "error"):
        these = [v for v in verdicts if v.status == status]
        if these:
            skipped.append({"status": status, "n": len(these), "rows": these[:SHOWN_SKIPPED],
                            "more": max(0, len(these) - SHOWN_SKIPPED)})
    return {"chart": _chart(team, groups) if groups else None, "methods": methods, "primary": primary,
            "repair": team.get("repair") or [], "trajectories": team.get("trajectories") or [],
            "groups": [{"agent": a, "anchor": f"fail-{i}", "rows": failures.get(a, [])} for i, a in enumerate(groups)]
            + [{"agent": a, "anchor": f"fail-x{i}", "rows": r} for i, (a, r) in enumerate(failures.items())
               if a not in groups],
            "skipped": skipped, "warnings": part.get("set_warnings") or [],
            "level": round(100 * float((team.get("interval") or team.get("bootstrap") or {}).get("level", 0.95)))}


def set_headline(part: dict[str, Any]) -> str | None:
    """The report's first sentence for a blamed set: who is blamed for how many failures, and how sure."""
    team = part.get("team") or {}
    primary = team.get("primary")
    counts = team.get("counts") or {}
    if not primary or not counts.get("blamed"):
        return f"Nothing was blamed: {counts.get('malformed', 0)} malformed, {counts.get('unblamed', 0)} without a " \
               f"loss, {counts.get('succeeded', 0)} succeeded."
    said = []
    for m, t in (team.get("methods") or {}).items():
        top = (t.get("shares") or [None])[0]
        if top:
            said.append(f"{m} blames {top['agent']} for {top['share']:.2f} [{top['low']:.2f}, {top['high']:.2f}]")
    repair = team.get("repair") or []
    return (f"Of {counts['blamed']} failed traces ({counts.get('succeeded', 0)} succeeded), " + "; ".join(said)
            + (f" of them; repair {repair[0]}'s prompt first." if repair else " of them."))
