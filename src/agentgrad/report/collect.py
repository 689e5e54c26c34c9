"""What a report shows, read from whatever a run wrote: one plain ``dict`` per page.

Every kind of run directory the project writes is recognised by the files it holds:

- an optimisation run (``optimize``, ``demo``): ``checkpoint.json`` / ``prompts/`` / ``final.json``;
- a benchmark evaluation (``bench multiwoz|taubench evaluate``): ``metrics.json`` and ``traces/``,
  the per-dialogue / per-task verdicts in ``events.jsonl``;
- a benchmark optimisation (``bench multiwoz|taubench optimize``): ``result.json`` with ``train/``
  (an optimisation run) and ``eval/`` (an evaluation) inside;
- the blame benchmarks (``bench blame``, ``bench whowhen``): ``metrics.json`` with one record per
  episode (``episodes/`` or ``logs/``), and for ``bench blame`` the traces and attribution;
- the prompt-bug ablation (``bench ablation``): ``summary.json``, ``cases.jsonl``, ``results.jsonl``;
- a plain ``run`` (``traces/``), with the attribution written by ``attribute`` beside it
  (``RUN_DIR/attribution/``) or given with ``--attribution``;
- an import (``import``: ``import.json`` beside ``traces/``) and a blame of an exported trace
  (``blame``: ``blame.json``, one row per method, with ``traces/`` and ``attribution/``), or of a
  set of traces (``verdicts.jsonl`` beside ``blame.json``: :mod:`agentgrad.report.team_view`);
- a single trace file, with ``--attribution FILE``.

Nothing here writes; files that cannot be read are reported in ``warnings``, never fatal unless
nothing at all can be shown.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from agentgrad.errors import ReportError
from agentgrad.core.files import safe_name
from agentgrad.core.redact import redacted
from agentgrad.runs.stored import StoredRun

_HIDDEN_EVENT_KEYS = {"time", "event", "trace", "turns", "replies", "actions"}


def _unreadable(path: Path, e: Exception, warnings: list[str]) -> None:
    warnings.append(f"{path.name}: cannot be read ({type(e).__name__}: {str(e)[:200]})")


def _read_json(path: Path, warnings: list[str]) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        _unreadable(path, e, warnings)
        return None


def _events(path: Path) -> list[dict[str, Any]]:
    out = []
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash
            if isinstance(e, dict):
                out.append(e)
    return out


def _config(path: Path, warnings: list[str]) -> str | None:
    f = path / "config.yaml"
    if not f.exists():
        return None
    try:
        return yaml.safe_dump(redacted(yaml.safe_load(f.read_text(encoding="utf-8"))), sort_keys=False)
    except (OSError, yaml.YAMLError) as e:
        warnings.append(f"config.yaml: cannot be read ({type(e).__name__})")
        return None


def _episode_score(kind: str, rec: dict[str, Any]) -> float:
    """One number per episode, lower is worse: what "the worst episodes" are sorted by."""
    if rec.get("error"):
        return -1.0
    if kind == "multiwoz":
        return 0.5 * bool(rec.get("inform")) + 0.5 * bool(rec.get("success"))
    if kind == "taubench":
        r = rec.get("reward")
        return float(r.get("reward", 0.0)) if isinstance(r, dict) else 0.0
    if "score" in rec and isinstance(rec["score"], (int, float)):
        return float(rec["score"])
    return 0.0


def _verdict(kind: str, rec: dict[str, Any]) -> dict[str, Any]:
    """The columns of the per-episode table for one event."""
    if kind == "multiwoz":
        return {"dialogue": rec.get("dialogue"), "inform": rec.get("inform"), "success": rec.get("success"),
                "domains": ", ".join(f"{d}{'' if ok else ' (no match)'}" for d, ok in (rec.get("match") or {}).items()),
                "error": rec.get("error")}
    if kind == "taubench":
        r = rec.get("reward") if isinstance(rec.get("reward"), dict) else {}
        return {"task": f"{rec.get('split')}-{rec.get('index')}", "trial": rec.get("trial"),
                "reward": r.get("reward"), "actions": r.get("actions"), "outputs": r.get("outputs"),
                "ended by": rec.get("ended_by"), "failed": r.get("failed"), "error": rec.get("error")}
    return {k: v for k, v in rec.items() if k not in _HIDDEN_EVENT_KEYS}


def _part(path: Path, label: str, attribution: Path | None, warnings: list[str]) -> dict[str, Any]:
    """One run directory (or the train/eval half of a benchmark optimisation)."""
    events = _events(path / "events.jsonl")
    metrics = _read_json(path / "metrics.json", warnings) if (path / "metrics.json").exists() else None
    if isinstance(metrics, dict) and "system" in metrics and "dialogues" in metrics:
        kind = "multiwoz"
    elif (isinstance(metrics, dict) and "max_steps" in metrics) or any(e.get("event") == "episode" for e in events):
        kind = "taubench"
    elif (path / "checkpoint.json").exists() or (path / "prompts").is_dir() or any(e.get("event") == "step" for e in events):
        kind = "optimisation"
    elif (path / "blame.json").exists():
        kind, metrics = "blamed", _blamed_summary(_read_json(path / "blame.json", warnings))
    elif (path / "import.json").exists():
        kind, metrics = "imported", _imported_summary(_read_json(path / "import.json", warnings))
    else:
        kind = "run"
    att_dir = attribution if attribution is not None else path / "attribution"
    traces = sorted((path / "traces").glob("*.json")) if (path / "traces").is_dir() else []
    by_file = {t.name: t for t in traces}
    episodes: dict[str, dict[str, Any]] = {}
    for e in events:
        name = None
        if isinstance(e.get("trace"), str):
            name = Path(e["trace"]).name
        elif e.get("event") in ("sample", "sample_failed") and "sample" in e:
            name = safe_name(e["sample"]) + ".json"
        if name is None:
            continue
        kind_e = kind if e.get("event") in ("dialogue", "episode") else "optimisation"
        episodes[name] = {"file": name, "part": label, "score": _episode_score(kind_e, e),
                          "verdict": _verdict(kind_e, e), "failed": _failed(kind_e, e)}
    for name in by_file:
        episodes.setdefault(name, {"file": name, "part": label, "score": None, "verdict": {}, "failed": None})
    for name, ep in episodes.items():
        ep["trace_path"] = by_file.get(name)
        a = att_dir / name if att_dir and att_dir.is_dir() else None
        ep["attribution_path"] = a if a is not None and a.exists() else None
    steps = [e for e in events if e.get("event") == "step"]
    samples = [e for e in events if e.get("event") == "sample"]
    run = StoredRun(path)  # an optimisation run's prompt versions and final.json (runs/stored.py)
    unreadable = lambda f, e: _unreadable(f, e, warnings)  # noqa: E731
    prompts = [{"step": step, "prompts": {str(k): str(v) for k, v in p.items()}}
               for step, p in run.prompt_versions(unreadable) if isinstance(p, dict)]
    final = run.final(unreadable)
    start = next((e for e in events if e.get("event") == "train_started"), None)
    if kind == "blamed" and isinstance(metrics, dict):
        rows = metrics.pop("rows", [])
        for ep in episodes.values():
            ep["verdict"] = {"blamed": ", ".join(f"{r.get('agent')} ({r.get('method')})" for r in rows) or None}
            ep["failed"] = True  # a blamed trace is a failure by the user's word
        metrics["blame"] = rows
    return {"label": label, "path": path, "kind": kind, "config": _config(path, warnings), "metrics": metrics,
            "final": final, "steps": steps, "samples": samples, "prompts": prompts,
            "val_start": start.get("val_score") if start else None,
            "episodes": list(episodes.values())}


def _imported_summary(rec: Any) -> dict[str, Any] | None:
    """The Summary of an import: where the traces came from and what was not imported."""
    if not isinstance(rec, dict):
        return None
    broken = rec.get("broken") or []
    return {"imported from": rec.get("source"), "format": rec.get("format"), "traces": len(rec.get("traces") or []),
            "records not imported": len(broken), **({"first not imported": broken[0]} if broken else {})}


def _blamed_summary(rec: Any) -> dict[str, Any] | None:
    """The Summary of ``agentgrad blame``: the file, the loss, the scorer, and one row per method."""
    if not isinstance(rec, dict):
        return None
    loss = rec.get("loss") if isinstance(rec.get("loss"), dict) else {}
    scorer = rec.get("scorer") if isinstance(rec.get("scorer"), dict) else {}
    rows = [r for r in rec.get("rows") or [] if isinstance(r, dict)]
    return {"trace file": rec.get("source"), "trace": rec.get("trace"), "loss": loss.get("text"),
            "loss on node": ", ".join(f"n{t}" for t in loss.get("targets") or []),
            "wrong text": (loss.get("details") or {}).get("wrong"), "scorer": scorer.get("path") or "none",
            "seconds": rec.get("seconds"), "rows": rows}


def _failed(kind: str, rec: dict[str, Any]) -> bool:
    if rec.get("error") or rec.get("event") == "sample_failed":
        return True
    if kind == "multiwoz":
        return not (rec.get("inform") and rec.get("success"))
    if kind == "taubench":
        return _episode_score(kind, rec) < 1.0
    if "passed" in rec:
        return not rec["passed"]
    return False


def _blame_part(path: Path, folder: str, warnings: list[str]) -> dict[str, Any]:
    """A blame benchmark: ``bench blame`` or ``bench inject`` (``episodes/``; an injection that was not
    scored has no ``methods`` and is not shown) or ``bench whowhen`` (``logs/``)."""
    metrics = _read_json(path / "metrics.json", warnings) if (path / "metrics.json").exists() else None
    records = []
    for f in sorted((path / folder).glob("*.json")):
        r = _read_json(f, warnings)
        if isinstance(r, dict) and isinstance(r.get("methods"), dict):
            records.append(r)
    methods = list((metrics or {}).get("methods") or (records[0]["methods"] if records else []))
    episodes = []
    for r in records:
        eid = str(r.get("episode") or r.get("log"))
        agent_key = "agent_top1" if folder == "episodes" else "agent"
        right = sum(float(r["methods"].get(m, {}).get(agent_key, 0)) for m in methods)
        picks = {}
        for m in methods:
            mr = r["methods"].get(m, {})
            top = (mr.get("ranking") or [None])[0] if "ranking" in mr else mr.get("top")
            picks[m] = {"agent": (top or {}).get("agent"), "node": (top or {}).get("node"),
                        "right": float(mr.get(agent_key, 0))}
        name = safe_name(eid) + ".json"
        trace = path / "traces" / name
        att = path / "attribution" / name
        episodes.append({"file": name, "part": "", "id": eid, "score": right / max(len(methods), 1),
                         "failed": right < len(methods), "truth": r.get("truth"),
                         "topology": r.get("topology") or r.get("system") or r.get("subset"),
                         "fault": r.get("fault") or r.get("kind"),
                         "picks": picks, "loss": r.get("loss"),
                         "trace_path": trace if trace.exists() else None,
                         "attribution_path": att if att.exists() else None, "verdict": {}})
    return {"label": "", "path": path, "kind": "blame" if folder == "episodes" else "whowhen",
            "config": _config(path, warnings), "metrics": metrics, "final": None, "steps": [], "samples": [],
            "prompts": [], "val_start": None, "episodes": episodes, "methods": methods,
            "setup": _read_json(path / "bench.json", warnings) if (path / "bench.json").exists() else None}


def _ablation_part(path: Path, warnings: list[str]) -> dict[str, Any]:
    """The prompt-bug ablation: its cases, its per-method summary and one row per (case, method, seed) run."""
    summary = _read_json(path / "summary.json", warnings)
    rows = [r for r in _events(path / "results.jsonl") if "method" in r]
    return {"label": "", "path": path, "kind": "ablation", "config": None, "metrics": None, "final": None,
            "steps": [], "samples": [], "prompts": [], "val_start": None, "episodes": [],
            "ablation": {"summary": summary if isinstance(summary, dict) else {}, "rows": rows,
                         "options": _read_json(path / "options.json", warnings)
                         if (path / "options.json").exists() else None}}


def collect(target: Path, attribution: Path | None = None) -> dict[str, Any]:
    """Everything a report of ``target`` (a run directory or a trace file) shows, without the episodes' contents."""
    warnings: list[str] = []
    if not target.exists():
        raise ReportError(f"{target} does not exist; give a run directory or a trace JSON file")
    if target.is_file():
        if attribution is not None and not attribution.is_file():
            raise ReportError(f"--attribution {attribution} is not a file; with a trace file give its attribution file")
        ep = {"file": target.name, "part": "", "score": None, "verdict": {}, "failed": None,
              "trace_path": target, "attribution_path": attribution}
        part = {"label": "", "path": target.parent, "kind": "trace", "config": None, "metrics": None, "final": None,
                "steps": [], "samples": [], "prompts": [], "val_start": None, "episodes": [ep]}
        return {"target": target, "kind": "trace", "parts": [part], "result": None, "warnings": warnings}
    if attribution is not None and not attribution.is_dir():
        raise ReportError(f"--attribution {attribution} is not a directory; with a run directory give the folder "
                          "that agentgrad attribute wrote")
    if (target / "summary.json").exists() and (target / "results.jsonl").exists() and (target / "cases.jsonl").exists():
        parts = [_ablation_part(target, warnings)]
    elif (target / "bench.json").exists() and (target / "episodes").is_dir():
        parts = [_blame_part(target, "episodes", warnings)]
    elif (target / "logs").is_dir() and (target / "metrics.json").exists():
        parts = [_blame_part(target, "logs", warnings)]
    elif (target / "train").is_dir() or (target / "eval").is_dir():
        parts = [_part(target / p, p, None, warnings) for p in ("train", "eval") if (target / p).is_dir()]
    elif (target / "verdicts.jsonl").exists():  # agentgrad blame of a set (report/team_view.py)
        from agentgrad.report.team_view import set_part

        parts = [set_part(target, warnings)]
    elif (target / "traces").is_dir() or (target / "events.jsonl").exists():
        parts = [_part(target, "", attribution, warnings)]
    else:
        raise ReportError(f"{target} is not a run directory agentgrad wrote (no traces/, events.jsonl, "
                          "metrics.json or episodes/ in it)")
    result = _read_json(target / "result.json", warnings) if (target / "result.json").exists() else None
    kinds = [p["kind"] for p in parts]
    kind = kinds[0] if len(set(kinds)) == 1 else "+".join(kinds)
    return {"target": target, "kind": kind, "parts": parts, "result": result, "warnings": warnings}


def worst_episodes(data: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The ``n`` episodes shown in full: failed first, then the lowest scores, those with a trace only."""
    eps = [e for p in data["parts"] for e in p["episodes"] if e.get("trace_path") is not None]

    def key(e: dict[str, Any]) -> tuple:
        return (not e.get("failed"), e["score"] if e.get("score") is not None else 1.0, e["part"] != "train", e["file"])

    return sorted(eps, key=key)[:n] if n > 0 else []
