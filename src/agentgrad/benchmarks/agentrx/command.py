"""``bench agentrx`` as one library call: options checked before the data is read or a model loads,
the labelled runs read, the methods run (resumable), the summary written to ``OUT/summary.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from agentgrad.benchmarks.agentrx.bench import MODEL_FREE, RECORDS, run_agentrx, summary
from agentgrad.benchmarks.agentrx.data import SUBSETS, load_runs
from agentgrad.blame.methods import DEFAULT_METHOD, needs_scorer, select_methods
from agentgrad.core.files import RunFiles, check_new_output
from agentgrad.errors import ConfigError
from agentgrad.runs.blame import check_edges


def agentrx_benchmark(out: Path, subsets: str = "all", methods: str = "", scorer: str | None = None,
                      data: str | Path | None = None, resume: bool = False, overwrite: bool = False, seed: int = 0,
                      device: str = "cpu", losses: str = "all", on_start: Callable[[int], None] | None = None,
                      on_run: Callable[[dict[str, Any]], None] | None = None,
                      on_method: Callable[[str, str, str], None] | None = None, dtype: str = "float32",
                      window: int | None = None, edges: str = "all", half: str = "all",
                      calls_in_history: bool = False) -> dict[str, Any]:
    """The AgentRx benchmark into ``out``; returns its summary (:func:`~agentgrad.benchmarks.agentrx.bench.summary`).

    ``methods``: a comma list of registry names and prefixes (default: the priors and provenance, and
    with a ``scorer`` the default GBC method too); ``subsets``: ``tau``, ``magentic`` or ``all``;
    ``losses``: the loss settings run (``last``, ``located``, comma list, or ``all``); ``dtype``: the
    scorer's weights (``bfloat16``: a measured approximation of the float32 default); ``window``: another,
    each call read only as far back as that many tokens, and ``edges`` (``addressed``: a group chat's preferred
    edges only) (:func:`~agentgrad.benchmarks.agentrx.bench.run_agentrx`); ``half``: ``A``, ``B`` or ``all``
    (the runs of one half only, docs/agentrx.md); ``calls_in_history``: every method reads earlier tool calls in
    each call's history (:func:`~agentgrad.attribution.render.calls_in_history`)."""
    chosen = tuple(SUBSETS) if subsets == "all" else tuple(s.strip() for s in subsets.split(",") if s.strip())
    bad = [s for s in chosen if s not in SUBSETS]
    if bad or not chosen:
        raise ConfigError(f"--subset takes {', '.join(SUBSETS)} (comma list) or all, got {subsets!r}")
    settings = None if losses == "all" else tuple(x.strip() for x in losses.split(",") if x.strip())
    if settings is not None and (not settings or set(settings) - {"last", "located"}):
        raise ConfigError(f"--loss takes last, located (comma list) or all, got {losses!r}")
    check_edges(edges)
    if edges != "all" and "tau" in chosen:
        raise ConfigError("--edges addressed reads a group chat's addresses: use it with --subset magentic")
    if calls_in_history and not scorer:
        raise ConfigError("--calls-in-history changes what a white-box scorer reads: use it with --scorer")
    if half not in ("A", "B", "all"):
        raise ConfigError(f"--half takes A, B or all, not {half!r}")
    names = select_methods(methods or ",".join([*MODEL_FREE, *([DEFAULT_METHOD] if scorer else [])]), exact=True)
    if any(needs_scorer(m) for m in names) and not scorer:
        raise ConfigError(f"{', '.join(m for m in names if needs_scorer(m))} need(s) a white-box scorer: --scorer smollm2")
    if (out / RECORDS).is_file() and not (resume or overwrite):
        raise ConfigError(f"--out {out} holds an AgentRx run ({RECORDS}): pass --resume to go on (the runs scored "
                          f"are kept), --overwrite to start again, or choose another --out")
    check_new_output(out, resume or overwrite, "dir")
    runs, broken = load_runs(chosen, data)
    runs = [r for r in runs if half in ("all", r.half)]
    if not runs:
        raise ConfigError("no labelled AgentRx run was read" + (f": {broken[0]}" if broken else ""))
    sc = None
    if scorer and any(needs_scorer(m) for m in names):
        from agentgrad.attribution.factory import make_scorer

        sc = make_scorer(scorer, device=device, dtype=dtype, on_too_long="skip")
    if overwrite and not resume:
        RunFiles(out).write_text(RECORDS, text="")  # --overwrite: this benchmark's records start again
    if on_start:
        on_start(len(runs))
    records = run_agentrx(runs, names, out, sc, resume=resume, seed=seed, on_run=on_run, on_method=on_method,
                          settings=settings, window=window, edges=edges, calls_in_history=calls_in_history)
    cpu = {m: round(sum(float(r["methods"].get(m, {}).get("cpu_seconds", 0.0)) for r in records), 3) for m in names}
    result = {"methods": names, "subsets": list(chosen), "scorer": sc.describe() if sc is not None else None,
              "broken": broken, "cpu_seconds": cpu, "summary": summary(records)}
    RunFiles(out).write_json("summary.json", data=result)
    return result
