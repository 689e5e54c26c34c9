"""What the planted-fault benchmark (and the benchmarks built on it) writes and reads back: the episode
records of a run folder, its setup (``bench.json``), and each episode's trace and attribution."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgrad.blame.context import BlameContext
from agentgrad.core.files import RunFiles
from agentgrad.errors import ConfigError


def write_episode(files: RunFiles, trace: Any, loss: Any, ctx: BlameContext, scorer: Any, seed: int) -> None:
    """The episode's trace (as the methods saw it) and, when a scorer ran, its whole-output
    attribution with the top-1 trajectories, for ``agentgrad report``."""
    from agentgrad.attribution.io import attribution_record
    from agentgrad.attribution.scorer import build_graph
    from agentgrad.blame.backward import backward

    rel = f"traces/{trace.id}.json"
    files.write_json("traces", f"{trace.id}.json", data=trace.to_dict())
    results = ctx.whole_attributions() if scorer is not None else []
    if results:
        graph = build_graph(trace, results)
        att = attribution_record(trace, results, graph, scorer, "mean_l1", 1, seed, rel)
        att["loss"] = loss.to_dict()
        att["trajectories"] = [t.to_dict() for t in backward(graph, loss, 1, "mean_l1", seed)]
        files.write_json("attribution", f"{trace.id}.json", data=att)


def check_setup(out: Path, setup: dict[str, Any], resume: bool) -> None:
    """A resumed run must have the setup (``bench.json``) it was started with."""
    path = out / "bench.json"
    if resume and path.exists():
        old = json.loads(path.read_text())
        if old != setup:
            changed = sorted(k for k in set(old) | set(setup) if old.get(k) != setup.get(k))
            raise ConfigError(f"--resume: {out} was run with a different {', '.join(changed)}; use a new --out")


def read_back(files: RunFiles, episode: str, methods: list[str], token: bool) -> dict[str, Any] | None:
    """A record written by an earlier run, if it covers ``methods`` (and token precision when scored)."""
    path = files.path("episodes", f"{episode}.json")
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not set(methods) <= set(rec.get("methods", {})) or (token and "token" not in rec):
        return None
    rec["methods"] = {m: rec["methods"][m] for m in methods}
    return rec

