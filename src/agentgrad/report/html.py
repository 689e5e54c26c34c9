"""``agentgrad report``: a run directory (or one trace) -> one self-contained HTML page.

The page is offline and self-contained: CSS, JavaScript and SVG inline, no request of any kind
(its Content-Security-Policy allows none, and only the page's own script runs: it is pinned by its
hash, so a script smuggled into run text could not run even if it escaped escaping). All text from a
run is hostile: Jinja2 escapes every string put into HTML, the per-episode data goes in as JSON
with ``<``, ``>``, ``&`` and ``'`` escaped, and the script sets run text only with ``textContent``.

Per-token data is written only for the episodes shown in full (``episodes``, the worst first), so a
1,000-episode run stays small: every other episode is one row of the verdict table.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import re
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment
from markupsafe import Markup

from agentgrad.attribution.weights import WEIGHT_NAMES
from agentgrad.core.trace import Trace
from agentgrad.errors import AgentgradError, ReportError, RunError
from agentgrad.core.files import write_atomic
from agentgrad.report.collect import collect, worst_episodes
from agentgrad.report.episode import episode_view
from agentgrad.report.format import fmt
from agentgrad.report.summaries import ablation_view, blame_table, blamed_table, headline, metrics_shown
from agentgrad.report.team_view import load_trace_at, team_view


@dataclass
class ReportResult:
    path: Path
    bytes: int
    episodes: int  # episodes in the run
    shown: int  # episodes shown in full
    seconds: float
    warnings: list[str]


def _flatten(d: Any, prefix: str = "", out: dict[str, Any] | None = None, depth: int = 0) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``, three levels deep at most (deeper values as JSON)."""
    out = {} if out is None else out
    if isinstance(d, dict) and depth < 3:
        for k, v in d.items():
            _flatten(v, f"{prefix}{k}.", out, depth + 1)
    else:
        out[prefix.rstrip(".")] = d
    return out


# What the keys of a run's files mean, in the words a reader knows (the final figures of an optimisation)
LABELS = {
    "train_score": "training score (mean over the training samples)",
    "val_score": "validation score (the gate's questions, which chose the prompts)",
    "steps": "optimisation steps",
    "accepted": "steps kept by the validation gate",
    "rejected": "steps rejected by the validation gate (prompts put back)",
    "test_before": "held-out test score, starting prompts",
    "test_after": "held-out test score, final prompts",
    "test_size": "held-out test questions (read by no step and no gate)",
}


def kv_table(d: Any) -> Markup:
    """A two-column table of a (nested) dict; long lists are cut; a key of :data:`LABELS` in its words."""
    rows = []
    for k, v in _flatten(d).items():
        k = LABELS.get(k, k)
        if isinstance(v, list) and len(v) > 12:
            v = v[:12] + [f"... {len(v) - 12} more"]
        rows.append(Markup("<tr><td>{}</td><td>{}</td></tr>").format(k, fmt(v)))
    return Markup('<table class="kv">') + Markup("").join(rows) + Markup("</table>")


def word_diff(old: str, new: str) -> list[tuple[str, str]]:
    """(op, text) runs, op in 'same', 'del', 'ins': a diff of ``old`` -> ``new`` by words (whitespace kept)."""
    a, b = re.findall(r"\s+|[^\s]+", old), re.findall(r"\s+|[^\s]+", new)
    out: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(("same", "".join(a[i1:i2])))
        else:
            if i2 > i1:
                out.append(("del", "".join(a[i1:i2])))
            if j2 > j1:
                out.append(("ins", "".join(b[j1:j2])))
    return out


def _prompt_history(part: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    steps = {s.get("step"): s for s in part["steps"]}
    history: dict[str, list[dict[str, Any]]] = {}
    prev: dict[str, str] = {}
    for v in part["prompts"]:
        s = steps.get(v["step"])
        info = ""
        if s:
            blamed = ", ".join(f"{a} ×{n}" for a, n in (s.get("blamed") or {}).items())
            info = (f"train score {fmt(s.get('train_score'))}, blamed {blamed or 'none'}, "
                    f"validation {fmt(s.get('val_before'))} → {fmt(s.get('val_after'))}")
        elif v["step"] == 0:
            info = "initial prompts"
        for agent, text in v["prompts"].items():
            old = prev.get(agent)
            history.setdefault(agent, []).append({
                "step": v["step"], "info": info, "changed": old is not None and old != text,
                "diff": word_diff(old, text) if old is not None else [("same", text)]})
            prev[agent] = text
    return history


def _chart(part: dict[str, Any]) -> dict[str, Any] | None:
    samples = [s for s in part["samples"] if isinstance(s.get("score"), (int, float))]
    if not samples:
        return None
    w, h, n = 760, 220, len(samples)
    vals = [float(s["score"]) for s in samples]
    steps = [s for s in part["steps"] if isinstance(s.get("val_after"), (int, float))]
    allv = vals + [float(s["val_after"]) for s in steps] + ([float(part["val_start"])] if isinstance(part.get("val_start"), (int, float)) else [])
    lo, hi = min(0.0, min(allv)), max(1.0, max(allv))

    def xy(i: float, v: float) -> tuple[float, float]:
        return (round(40 + (w - 60) * (i / max(n - 1, 1)), 1), round(10 + (h - 35) * (1 - (v - lo) / (hi - lo or 1)), 1))

    window = max(1, min(10, n // 3 or 1))
    avg = [xy(i, sum(vals[max(0, i - window + 1): i + 1]) / len(vals[max(0, i - window + 1): i + 1])) for i in range(n)]
    step_pts, val = [], []
    if isinstance(part.get("val_start"), (int, float)):
        val.append(xy(0, float(part["val_start"])))
    per = max(1, round(n / max(len(part["steps"]), 1)))  # a step follows every ``per`` samples
    for k, s in enumerate(part["steps"]):
        i = min(n - 1, (k + 1) * per - 1)
        v = s.get("val_after")
        if isinstance(v, (int, float)):
            x, y = xy(i, float(v))
            val.append((x, y))
            step_pts.append({"x": x, "y": y, "step": s.get("step"), "accepted": s.get("accepted"), "val": fmt(v)})
    return {"w": w, "h": h, "n": n, "window": window, "ymin": fmt(lo), "ymax": fmt(hi),
            "points": [(*xy(i, v), i + 1, fmt(v)) for i, v in enumerate(vals)],
            "avg": " ".join(f"{x},{y}" for x, y in avg) if n > 1 else "",
            "val": " ".join(f"{x},{y}" for x, y in val) if len(val) > 1 else "", "steps": step_pts}


def _final_summary(final: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in final.items() if k not in ("prompts", "train_scores")}


def _trace_summary(trace: Trace) -> dict[str, Any]:
    """What an episode without a verdict (an imported trace) is made of, for its row."""
    calls = trace.calls()
    return {"calls": len(calls), "agents": ", ".join(dict.fromkeys(c.name for c in calls)) or None,
            "tools": sum(n.kind == "tool" for n in trace.nodes) or None,
            "inputs": sum(n.kind == "input" for n in trace.nodes) or None,
            "imported": trace.meta.get("imported")}


def _summary(e: dict[str, Any]) -> str:
    if e.get("truth"):
        right = sum(1 for p in e["picks"].values() if p["right"] >= 1)
        return (f"{e.get('topology') or ''} {e.get('fault') or ''}: {right}/{len(e['picks'])} methods name "
                f"{e['truth'].get('agent')}").strip()
    v = {**(e.get("made_of") or {}), **(e.get("verdict") or {})}
    bits = [f"{k} {fmt(x)}" for k, x in v.items()
            if k not in ("dialogue", "task", "sample", "domains") and x not in (None, "", [], {})]
    return ("failed: " if e.get("failed") else "") + ", ".join(bits)[:200]


def _verdict_tables(data: dict[str, Any], links: dict[tuple[str, str], int]) -> list[dict[str, Any]]:
    tables = []
    for p in data["parts"]:
        if p["kind"] in ("multiwoz", "taubench"):
            rows = [e for e in p["episodes"] if e.get("verdict")]
            columns = [c for c in (rows[0]["verdict"] if rows else {}) if c not in ("dialogue", "task")]
            tables.append({"title": f"{'MultiWOZ dialogues' if p['kind'] == 'multiwoz' else 'tau-bench tasks'}"
                                    f"{' (' + p['label'] + ')' if p['label'] else ''}", "columns": columns,
                           "rows": [{"id": e["verdict"].get("dialogue") or e["verdict"].get("task") or e["file"],
                                     "cells": e["verdict"], "failed": e.get("failed"),
                                     "link": links.get((e["part"], e["file"]))} for e in rows]})
        elif p["kind"] in ("blame", "whowhen"):
            methods = p.get("methods") or []
            tables.append({"title": "episodes" if p["kind"] == "blame" else "Who&When logs",
                           "columns": ["truth", *methods],
                           "rows": [{"id": e["id"], "failed": e["failed"], "link": links.get((e["part"], e["file"])),
                                     "cells": {"truth": (e.get("truth") or {}).get("agent"),
                                               **{m: f"{e['picks'][m]['agent']} ({'right' if e['picks'][m]['right'] >= 1 else 'wrong'})"
                                                  for m in methods}}} for e in p["episodes"]]})
    return tables


def _load_episode(e: dict[str, Any], warnings: list[str]) -> dict[str, Any] | None:
    try:
        trace = (load_trace_at(e["trace_path"], e["trace_offset"]) if e.get("trace_offset") is not None
                 else Trace.load(e["trace_path"]))
    except AgentgradError as err:
        warnings.append(f"{e['trace_path']}: {err}")
        return None
    att = None
    if e.get("attribution_path"):
        try:
            att = json.loads(Path(e["attribution_path"]).read_text(encoding="utf-8"))
            if not isinstance(att, dict) or att.get("schema") != "agentgrad.attribution":
                raise ValueError("not an agentgrad attribution file")
        except (OSError, ValueError) as err:
            warnings.append(f"{e['attribution_path']}: cannot be read ({err})")
            att = None
    view = episode_view(trace, att, e.get("loss"))
    labels = {str(n["id"]): n["label"] for n in view["nodes"]}
    nodes, strings = view.pop("data")
    return {**e, "id": e.get("id") or trace.id or e["file"], "view": view, "attributed": att is not None,
            "made_of": _trace_summary(trace) if not e.get("verdict") or "blamed" in e["verdict"] else None,
            "payload": {"nodes": nodes, "strings": strings, "labels": labels}}


def _environment() -> Environment:
    env = Environment(autoescape=True, trim_blocks=False, lstrip_blocks=False)
    env.globals.update(fmt=fmt, kv_table=kv_table)
    return env


def _static(name: str) -> str:
    return resources.files("agentgrad.report").joinpath(name).read_text(encoding="utf-8")


def render_report(target: Path, attribution: Path | None = None, episodes: int = 20) -> tuple[str, dict[str, Any]]:
    """The HTML page of ``target`` and what went into it."""
    from agentgrad import __version__

    if episodes < 0:
        raise ReportError("--episodes must be 0 or more")
    data = collect(target, attribution)
    warnings = data["warnings"]
    chosen = worst_episodes(data, episodes)
    shown = [x for x in (_load_episode(e, warnings) for e in chosen) if x is not None]
    if data["kind"] == "trace" and (not shown or (attribution is not None and not shown[0]["attributed"])):
        # one trace asked for by name: an unreadable trace or attribution is an error, not a warning
        raise ReportError(warnings[-1] if warnings else f"{target}: nothing to show")
    for e in shown:
        e["summary"] = _summary(e)
    links = {(e["part"], e["file"]): i for i, e in enumerate(shown)}
    parts = []
    history: dict[str, list[dict[str, Any]]] = {}
    for p in data["parts"]:
        parts.append({**p, "metrics": metrics_shown(p), "chart": _chart(p), "blame_table": blame_table(p),
                      "blamed_table": blamed_table(p), "ablation": ablation_view(p), "team": team_view(p, links),
                      "final_summary": _final_summary(p["final"]) if isinstance(p.get("final"), dict) else None})
        if p["prompts"]:
            history.update(_prompt_history(p))
    first = next((h for h in (headline(p) for p in data["parts"]) if h), None)
    n_episodes = sum(len(p["episodes"]) for p in data["parts"])
    script = _static("static/report.js")
    kinds = {"optimisation": "optimisation run", "multiwoz": "MultiWOZ evaluation", "taubench": "tau-bench evaluation",
             "run": "run", "trace": "one trace", "imported": "imported logs",
             "blamed": "blame of an exported trace (agentgrad blame)", "blame-set": "blame of a set of traces (agentgrad blame with --expected or --losses)", "blame": "planted-fault blame benchmark",
             "whowhen": "Who&When blame benchmark", "ablation": "prompt-bug ablation (does better blame give better prompts?)", "optimisation+multiwoz": "MultiWOZ optimisation (train and eval)",
             "optimisation+taubench": "tau-bench optimisation (train and eval)"}
    html = _environment().from_string(_static("templates/report.html.j2")).render(
        title=f"agentgrad report: {target.name}", target=str(target), kind_text=kinds.get(data["kind"], data["kind"]),
        headline=first,
        generated=time.strftime("%Y-%m-%d %H:%M"), version=__version__, n_episodes=n_episodes, shown=shown,
        has_parts=any(e["part"] for e in shown), parts=parts, result=data["result"], warnings=warnings,
        prompt_history=history, verdicts=_verdict_tables(data, links), weights=WEIGHT_NAMES,
        default_weight=next((e["view"]["weight"] for e in shown if e["view"].get("weight") in WEIGHT_NAMES), "mean_l1"),
        css=Markup(_static("static/report.css")), script=Markup(script),
        script_hash="sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode())
    return html, {"episodes": n_episodes, "shown": len(shown), "warnings": warnings}


def write_report(target: Path, out: Path | None = None, attribution: Path | None = None, episodes: int = 20,
                 overwrite: bool = False) -> ReportResult:
    """Write the report of ``target`` to ``out`` (default ``RUN_DIR/report.html``, or ``TRACE.html``).

    An existing ``out`` is replaced only when it is a report (an HTML file agentgrad wrote) or
    ``overwrite``; nothing the run wrote is ever replaced.
    """
    t0 = time.time()
    target = Path(target)
    if out is None:
        out = target / "report.html" if target.is_dir() else target.with_suffix(".html")
    out = Path(out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise ReportError(f"--out {out}: give a file name ending in .html")
    if out.is_dir():
        raise RunError(f"--out {out} is a directory; give a file name ending in .html")
    if out.exists() and not overwrite and not _is_report(out):
        raise RunError(f"{out} exists and is not an agentgrad report; move it away, or replace it: agentgrad "
                       f"report {target} --out {out} --overwrite")
    html, info = render_report(target, attribution, episodes)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, html)
    return ReportResult(out, out.stat().st_size, info["episodes"], info["shown"], round(time.time() - t0, 2),
                        info["warnings"])


def _is_report(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "<title>agentgrad report:" in f.read(4096)
    except OSError:
        return False


__all__ = ["ReportResult", "render_report", "write_report", "word_diff"]
