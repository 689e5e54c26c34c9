"""``bench blame`` (the planted-fault blame benchmark), ``bench whowhen``, ``bench inject``, and ``testing blame-model``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from agentgrad.benchmarks.planted.model import BlameModelConfig
from agentgrad.benchmarks.planted.model import resolve_scorer
from agentgrad.cli._common import _progress, bench_app, console, err_console


@bench_app.command("blame")
def bench_blame(
    out: Path = typer.Option(..., "--out", help="Folder for metrics.json and episodes/ (must be new or empty)."),
    scorer: str = typer.Option("trained", "--scorer", help="trained (built and cached here), smollm2 (the "
                                                          "embedded real model), gguf:FILE, a model folder or "
                                                          "hub id (e.g. Qwen/Qwen3-0.6B), or none (model-free "
                                                          "methods only: no token figures)."),
    episodes: int = typer.Option(200, "--episodes", min=1, help="Episodes per topology and fault kind."),
    topology: str = typer.Option("all", "--topology", help="chain, fanin, manager, broadcast (comma list) or all."),
    faults: str = typer.Option("all", "--faults", help="wrong_value, omitted, tool, decoy, transformed, ignored, "
                               "misroute (manager only) (comma list) or all."),
    methods: str = typer.Option("all", "--methods", help="all, or names/prefixes: gbc:mean_l1, occlusion, random, "
                                                        "all, last, ..."),
    seed: int = typer.Option(0, "--seed", help="Seeds the episodes and tie-breaking."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N (the scorer)."),
    judge: str = typer.Option("", "--judge", help="A model for the judge methods: smollm2, gguf:FILE, a HF "
                                                  "folder, openai:MODEL@URL (any OpenAI-compatible server)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty --out."),
    resume: bool = typer.Option(False, "--resume", help="Continue a stopped benchmark in --out: episodes already "
                                                        "written are read back, not re-run."),
    style: str = typer.Option("lines", "--style", help="How the calls write: lines (key: value) or prose "
                                                       "(sentences in each agent's own words; no misroute)."),
) -> None:
    """Planted-fault episodes with known root causes: how often each blame method names the right agent."""
    from agentgrad.attribution.scorer import Scorer
    from agentgrad.benchmarks.planted import episodes as E
    from agentgrad.benchmarks.planted.bench import run_benchmark
    from agentgrad.benchmarks.planted.prose import STYLES
    from agentgrad.blame.judge import Judge, make_judge
    from agentgrad.blame.methods import needs_scorer, select_methods
    from agentgrad.errors import ConfigError
    from agentgrad.core.files import check_new_output

    topologies = list(E.TOPOLOGIES) if topology == "all" else [t.strip() for t in topology.split(",") if t.strip()]
    kinds = list(E.FAULTS) if faults == "all" else [f.strip() for f in faults.split(",") if f.strip()]
    bad = [t for t in topologies if t not in E.TOPOLOGIES] or [f for f in kinds if f not in E.FAULTS]
    if bad or not topologies or not kinds:
        raise ConfigError(f"unknown topology or fault kind {bad[0] if bad else '(none)'!r}; topologies: "
                          f"{', '.join(E.TOPOLOGIES)}; faults: {', '.join(E.FAULTS)}")
    if style not in STYLES:
        raise ConfigError(f"unknown --style {style!r}; valid: {', '.join(STYLES)}")
    names = select_methods(methods, judge=bool(judge))
    scored = [n for n in names if needs_scorer(n)]
    if scorer == "none" and scored:
        raise ConfigError(f"{scored[0]} needs a white-box model: give --scorer smollm2 (or another), or choose "
                          f"model-free --methods (provenance, provenance:key, random, all, last, ...)")
    if not resume:
        check_new_output(out, overwrite, "dir")
    jm = make_judge(judge) if judge else None
    sc = None
    if scorer != "none":
        with console.status("preparing the scorer (the trained one is built once, a few minutes)"):
            sc = Scorer(str(resolve_scorer(scorer)), device=device, on_too_long="skip")
    total = episodes * sum(E.supports(t, f, style) for t in topologies for f in kinds)
    with _progress() as progress:
        bar = progress.add_task("episodes", total=total)
        metrics = run_benchmark(sc, names, topologies, kinds, episodes, out, seed,
                                on_episode=lambda r: progress.advance(bar), judge=Judge(jm) if jm else None,
                                resume=resume, setup={"scorer": scorer, "judge": judge}, style=style)
    print_blame_table(metrics)
    console.print(f"chance (1/upstream nodes): {metrics['chance_agent_top1']:.3f}; "
                  f"token hit@1: " + ", ".join(f"{o} {v['hit1']['value']:.3f}" for o, v in metrics["token"].items()))
    _print_judge_misses(metrics["groups"]["all"], metrics["episodes"])
    if metrics.get("seconds_per_episode") is not None:
        console.print(f"wall time per episode, the {len(names)} methods together (shared passes counted once): "
                      f"{metrics['seconds_per_episode']:.1f} s")
    console.print(f"written: {out}/metrics.json, {out}/episodes/")


def _print_judge_misses(methods: dict[str, dict[str, Any]], n: int) -> None:
    """A line each for the judge methods that named nothing somewhere: their judge's reply did not
    parse, or the log was longer than the judge's context."""
    for key, what in (("unparsed", "judge replies that did not parse"),
                      ("unread", "logs longer than the judge's context")):
        bad = {m: v[key] for m, v in methods.items() if v.get(key)}
        if bad:
            console.print(f"{what} (counted as wrong): " + ", ".join(f"{m} {c} of {n}" for m, c in bad.items()),
                          markup=False)


def _print_wide(table: Table) -> None:
    """A table wide enough for every column, also when the output is a log file (80 columns by default)."""
    from rich.console import Console

    Console(width=max(console.width, 150), emoji=False).print(table)


def _methods_table(title: str, columns: list[str]) -> Table:
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
    _print_wide(table)


def blame_model_command(
    out_dir: Path = typer.Argument(..., help="Folder to write the trained scorer to (new or empty)."),
    steps: int = typer.Option(BlameModelConfig.steps, "--steps", min=1,
                              help="Training steps (stops earlier at --max-seconds)."),
    max_seconds: float = typer.Option(BlameModelConfig.max_seconds, "--max-seconds", min=0.0,
                                      help="Training time budget (0: none, steps only: the same result on any "
                                           "machine)."),
    seed: int = typer.Option(0, "--seed"),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty folder."),
) -> None:
    """Train the blame benchmark's scorer offline (a mechanism test, not a model of real LLMs)."""
    from agentgrad.benchmarks.planted.model import train_blame_model
    from agentgrad.cli._common import check_new_folder

    check_new_folder(out_dir, overwrite, "folder")
    cfg = BlameModelConfig(steps=steps, max_seconds=max_seconds or None, seed=seed)
    with console.status("training"):
        rep = train_blame_model(out_dir, cfg)
    console.print(f"trained scorer written to {out_dir}: held-out token accuracy {rep['heldout_token_accuracy']:.4f} "
                  f"after {rep['steps']} steps in {rep['seconds']} s (a mechanism test, not a model of real LLMs)")


def log_range(value: str, count: int) -> tuple[int, int]:
    """``--logs``: ``N`` (the first N logs) or ``A-B`` (logs A to B, 1-based and inclusive), as (A, B)
    within the ``count`` logs there are; anything else is a one-line :class:`ConfigError`."""
    from agentgrad.errors import ConfigError

    m = re.fullmatch(r"\s*(?:(\d+)\s*-\s*)?(\d+)\s*", value)
    first, last = (int(m.group(1) or 1), int(m.group(2))) if m else (0, 0)
    if not m or first < 1 or last < first:
        raise ConfigError(f"--logs takes N (the first N logs) or A-B with 1 <= A <= B (logs A to B), got {value!r}")
    if first > count:
        raise ConfigError(f"--logs {value}: the subset has only {count} logs")
    return first, min(last, count)


@bench_app.command("whowhen")
def bench_whowhen(
    out: Path = typer.Option(..., "--out", help="Folder for metrics.json and logs/ (must be new or empty)."),
    subset: str = typer.Option("all", "--subset", help="hand, algorithm or all."),
    with_ground_truth: bool = typer.Option(True, "--with-ground-truth/--without-ground-truth",
                                           help="Whether the verbal loss states the expected answer (its text, "
                                                "and the answer the contrast objective differentiates against; "
                                                "compare with the published rows of the same setting)."),
    methods: str = typer.Option("", "--methods", help="Names/prefixes (default: GBC earliest/maxw variants, "
                                                      "occlusion, temporal, random, all, last, provenance and the "
                                                      "priors first, most_active, position; judge with --judge)."),
    scorer: Optional[str] = typer.Option(None, "--scorer", help="White-box scorer for the gradient, occlusion and "
                                                               "temporal methods: smollm2, gguf:FILE, a HF folder "
                                                               "or hub id, trained."),
    judge: str = typer.Option("", "--judge", help="A model for the judge methods: smollm2, gguf:FILE, a HF "
                                                  "folder, openai:MODEL@URL."),
    on_too_long: str = typer.Option("skip", "--on-too-long", help="skip (attribute what fits, count the log), "
                                                                  "exclude (score only the logs that fit the "
                                                                  "scorer's context, count the others), window "
                                                                  "(a long call keeps the steps nearest it that "
                                                                  "fit) or error."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N (the scorer)."),
    archive: Optional[Path] = typer.Option(None, "--archive", help="who_and_when.tar.gz (default: the data "
                                                                   "directory's)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty --out."),
    resume: bool = typer.Option(False, "--resume", help="Continue a stopped run in --out: logs already scored are "
                                                        "read back."),
    logs: Optional[str] = typer.Option(None, "--logs", help="Only the first N logs of the subset, or logs A-B "
                                                            "(1-based, inclusive, in the archive's order); "
                                                            "--resume without it goes on to every log."),
    max_context: Optional[int] = typer.Option(None, "--max-context", min=16,
                                              help="The scorer's context in tokens, below the model's: a cheaper "
                                                   "window; longer calls are handled by --on-too-long."),
    answer_span: bool = typer.Option(False, "--answer-span", help="Locate the wrong answer the log states "
                                                                  "(against the ground truth) and give the loss "
                                                                  "that call and span: the content rules, the "
                                                                  "targeted objective and provenance follow it."),
) -> None:
    """Who&When: which agent and step caused each of 184 real failures, per method, next to the published figures."""
    from agentgrad.attribution.scorer import Scorer
    from agentgrad.blame.judge import Judge, make_judge
    from agentgrad.blame.methods import needs_scorer, select_methods
    from agentgrad.benchmarks.whowhen.bench import DEFAULT_METHODS, priors_table, run_whowhen
    from agentgrad.errors import ConfigError
    from agentgrad.core.files import check_new_output
    from agentgrad.importers import import_whowhen

    if on_too_long not in ("skip", "exclude", "window", "error"):
        raise ConfigError(f"--on-too-long must be skip, exclude, window or error, got {on_too_long!r}")
    if answer_span and not with_ground_truth:
        raise ConfigError("--answer-span locates the answer against the ground truth: drop --without-ground-truth")
    spec = methods or (DEFAULT_METHODS + (",judge" if judge else ""))
    names = select_methods(spec, judge=bool(judge))
    scored = [n for n in names if needs_scorer(n)]
    if scored and not scorer:
        raise ConfigError(f"{scored[0]} needs a white-box model: add --scorer PATH_OR_HUB_ID "
                          f"(or choose --methods random,all,last,judge)")
    check_new_output(out, overwrite or resume, "dir", protect=[archive] if archive else None)
    with console.status("reading the Who&When logs"):
        res = import_whowhen(archive, subset)
    if res.broken:
        err_console.print(f"{len(res.broken)} log(s) could not be read: {res.broken[0]}", markup=False)
    first, last = log_range(logs, len(res.traces)) if logs else (1, len(res.traces))
    traces = res.traces[first - 1:last]
    jm = Judge(make_judge(judge)) if judge else None
    if max_context is not None and not scorer:
        raise ConfigError("--max-context sets the white-box scorer's context: give --scorer too")
    sc = Scorer(str(resolve_scorer(scorer)), device=device, max_context=max_context,
                on_too_long="skip" if on_too_long in ("exclude", "window") else on_too_long) if scorer else None
    if sc is not None and max_context is not None:
        from agentgrad.models.hf import context_length

        if max_context > (full := context_length(sc.model, sc.tokenizer)):
            raise ConfigError(f"--max-context {max_context:,} is longer than the scorer's context ({full:,} tokens)")
    with _progress() as progress:
        bar = progress.add_task("logs", total=len(traces))
        m = run_whowhen(traces, names, sc, jm, with_ground_truth, out, on_log=lambda r: progress.advance(bar),
                        exclude_too_long=on_too_long in ("exclude", "window") and sc is not None, resume=resume,
                        window=on_too_long == "window" and sc is not None, span=answer_span,
                        setup={"scorer": scorer, "judge": judge, "subset": subset,
                               **({"max_context": max_context} if max_context else {})})
    groups = [g for g in ("all", "hand", "algorithm") if g in m["groups"]]
    columns = [f"{g} {k}" for g in groups for k in ("agent", "step")]
    table = _methods_table(f"Who&When, {m['logs']} logs ({'with' if with_ground_truth else 'without'} ground truth); "
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
    _print_wide(table)
    if (paired_rows := priors_table(m["groups"]["all"]["methods"], names)) is not None:
        cols, rows = paired_rows
        table = _methods_table("paired on the same logs (all): difference [95% CI], logs won / lost, sign-test p; the best "
                               "prior chosen on these logs", cols)
        for row in rows:
            table.add_row(*row)
        _print_wide(table)
    _print_judge_misses(m["groups"]["all"]["methods"], m["logs"])
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
    table = _methods_table(f"published (not measured here): {pub['judge_model']} as the judge, "
                           f"{pub['setting'].replace('_', ' ')}; agent / step accuracy", columns)
    for name, cells in pub["methods"].items():
        table.add_row(name, *[f"{cells[g][k]:.3f}" if g in cells else "-" for g in groups for k in ("agent", "step")])
    _print_wide(table)
    console.print(f"source: {pub['source']} (no figure over all logs is published)", markup=False)
    if "hand" in m["groups"]:  # the paper's Tables 2 and 3 are on the hand-crafted logs
        within = pub["step_within"]
        table = _methods_table("hand-crafted logs: step accuracy within k steps of the labelled one",
                               [f"within {k}" for k in range(1, 6)])
        for name in names:
            table.add_row(name, *[f"{v:.3f}" for v in m["groups"]["hand"]["methods"][name]["step_within"].values()])
        for name, cells in within["methods"].items():
            table.add_row(f"{name} (published)", *[f"{v:.3f}" for v in cells.values()])
        _print_wide(table)
        console.print(f"published rows: {within['source']}, {pub['judge_model']} as the judge, {within['setting']}",
                      markup=False)
        mean = pub["hand_mean_of_settings"]
        table = _methods_table(f"published (not measured here): hand-crafted logs, {mean['setting']}",
                               ["agent", "step", "tokens (its cost column)"])
        for name, cells in mean["methods"].items():
            table.add_row(name, f"{cells['agent']:.3f}", f"{cells['step']:.3f}", f"{cells['tokens']:,}")
        _print_wide(table)
        console.print(f"source: {mean['source']}", markup=False)
    console.print(f"written: {out}/metrics.json, {out}/logs/")


def _wording_range(value: str) -> int | tuple[int, int] | None:
    """``--wordings``: N (the first N; 0 all) or A-B (the wordings A to B), else a one-line error."""
    from agentgrad.errors import ConfigError

    lo, dash, hi = value.strip().partition("-")
    try:
        if dash:
            return int(lo), int(hi)
        return int(lo) or None
    except ValueError:
        raise ConfigError(f"--wordings takes N (the first N wordings) or A-B (wordings A to B), got {value!r}") from None


@bench_app.command("ablation")
def bench_ablation(
    out: Path = typer.Option(..., "--out", help="Folder for noise.jsonl, cases.jsonl, results.jsonl, table.md, the "
                                                "figures and one run directory per run (must be new or empty)."),
    model: str = typer.Option("smollm2", "--model", help="The agents' model, also the white-box scorer: smollm2, "
                                                        "gguf:FILE, a HF folder or hub id."),
    systems: str = typer.Option("all", "--systems", help="pipeline, fanin, manager (comma list) or all."),
    defects: str = typer.Option("all", "--defects", help="Defect families: stale_example, forbidden_field, "
                                                        "wrong_item, distractor (comma list) or all."),
    methods: str = typer.Option("all", "--methods", help="Arms: noop, random_line, gbc, paper, provenance, random, "
                                                        "all, oracle (comma list) or all; the factorial's cells "
                                                        "AGENT/LINE (gbc, provenance, random, oracle x grad, "
                                                        "string, random_line), or factorial: the 12 and noop."),
    prompts: str = typer.Option("short", "--prompts", help="The prompt set: short (the one-line prompts) or long "
                                                          "(13-16 lines per agent: role, rules, format, example)."),
    seeds: int = typer.Option(3, "--seeds", help="Seeds per case and arm (0..N-1), run seed by seed."),
    optimizer: str = typer.Option("edit", "--optimizer", help="edit (gradient-guided line removal), deterministic "
                                                             "(Warning bullets) or llm."),
    optimizer_model: str = typer.Option("", "--optimizer-model", help="The llm optimizer's model (default: --model); "
                                                                     "openai:MODEL@URL for a bigger server."),
    steps: int = typer.Option(2, "--steps", help="Optimizer steps per run."),
    step_every: int = typer.Option(4, "--step-every", help="Training samples per step."),
    val_size: int = typer.Option(50, "--val-size", help="Validation questions of the gate (of 50)."),
    test_size: int = typer.Option(0, "--test-size", help="Score the first N test questions only (0: all 200)."),
    noise_edits: int = typer.Option(8, "--noise-edits", help="Neutral one-line edits per system that measure the "
                                                            "noise floor on the screening split."),
    keep_factor: float = typer.Option(5.0, "--keep-factor", help="Keep a case whose screening damage is at least "
                                                                "this many times its system's noise floor."),
    screen_first: int = typer.Option(40, "--screen-first", help="Screen on these first questions of the "
                                                                  "screening split; a case under half the threshold "
                                                                  "there is dropped, the others scored on all 100."),
    wordings: str = typer.Option("0", "--wordings", help="The first N wordings of each family (0: all), or A-B: "
                                                          "the wordings A to B (0 is the first), e.g. those added "
                                                          "after a screen."),
    positions: int = typer.Option(0, "--positions", help="The first N positions of second, first, last (0: all)."),
    agents: int = typer.Option(0, "--agents", help="The first N agents of each family in each system (0: all)."),
    concurrency: int = typer.Option(16, "--concurrency", help="Episodes run at once (greedy calls are batched)."),
    stop_after: float = typer.Option(0, "--stop-after", help="Minutes after which no new work starts (0: none): "
                                                            "run the grid in chunks with --resume."),
    screen_only: bool = typer.Option(False, "--screen-only", help="Measure the noise floor and screen the cases; "
                                                                 "run no arm."),
    resume: bool = typer.Option(False, "--resume", help="Continue a stopped benchmark in --out: finished work is "
                                                        "read back, a run cut off resumes from its checkpoint."),
) -> None:
    """Does better blame give better prompts? Planted prompt defects, screened against a noise floor; the same loop per arm."""
    from agentgrad.benchmarks.ablation.bench import ARMS
    from agentgrad.benchmarks.ablation.cases import DEFECTS, SYSTEMS
    from agentgrad.benchmarks.ablation.grid import run_ablation
    from agentgrad.benchmarks.ablation.summary import markdown_table

    split = lambda v, valid: list(valid) if v == "all" else [x.strip() for x in v.split(",") if x.strip()]  # noqa: E731
    summary = run_ablation(out, model=model, systems=split(systems, SYSTEMS), defects=split(defects, DEFECTS),
                           methods=split(methods, ARMS), seeds=seeds, optimizer=optimizer,
                           optimizer_model=optimizer_model or None, steps=steps, step_every=step_every,
                           val_size=val_size, test_size=test_size or None, noise_edits=noise_edits,
                           keep_factor=keep_factor, screen_first=screen_first, wordings=_wording_range(wordings),
                           positions=positions or None, agents=agents or None, concurrency=concurrency,
                           stop_after=stop_after or None,
                           screen_only=screen_only, resume=resume, prompts=prompts,
                           log=lambda s: console.print(s, markup=False,
                                                                                               highlight=False))
    console.print(markdown_table(summary), markup=False, highlight=False)
    from agentgrad.report.html import write_report

    report = write_report(out)
    console.print(f"{summary['kept']} cases kept, {summary['dropped']} dropped (damage on the screening split under "
                  f"{keep_factor:g}x the noise floor); {summary['runs']} runs; {summary['seconds_this_run']:.0f} s "
                  f"this chunk, {summary['seconds_total']:.0f} s over {summary['chunks']} chunks"
                  + ("; stopped early: --resume continues" if summary["stopped"] else "")
                  + f"; written: {out}/table.md, {out}/steps.svg, {out}/blame-vs-gain.svg, {report.path}",
                  markup=False, highlight=False)


@bench_app.command("inject")
def bench_inject(
    out: Path = typer.Option(..., "--out", help="Folder for metrics.json, clean/ and episodes/ (must be new or "
                                                "empty)."),
    model: str = typer.Option("smollm2", "--model", help="The agents' model, also the white-box scorer: smollm2, "
                                                        "gguf:FILE, a HF folder or hub id, tiny."),
    systems: str = typer.Option("all", "--systems", help="pipeline, fanin, manager (comma list) or all."),
    kinds: str = typer.Option("all", "--kinds", help="wrong_value, dropped, broken_instruction (comma list) or all."),
    questions: int = typer.Option(0, "--questions", help="The first N questions of the split (0: all 24)."),
    split: str = typer.Option("test", "--split", help="train, val or test."),
    methods: str = typer.Option("all", "--methods", help="all (judges with --judge), or names/prefixes: "
                                                        "gbc:max_l1, occlusion, temporal, random, all, last, ..."),
    judge: str = typer.Option("", "--judge", help="A model for the judge methods: smollm2, gguf:FILE, a HF "
                                                  "folder, openai:MODEL@URL."),
    seed: int = typer.Option(0, "--seed", help="Seeds the wrong values and tie-breaking."),
    replays: int = typer.Option(0, "--replays", min=0, help="Fresh samples per upstream call of the replay method "
                                                           "(counterfactual replay; many generations). 0: replay "
                                                           "not run; with N, --methods all includes it."),
    resume: bool = typer.Option(False, "--resume", help="Continue a stopped benchmark in --out: clean runs and "
                                                        "episodes already written are read back."),
) -> None:
    """Faults injected into real runs: one call's output corrupted, the rest generated again; who is blamed."""
    import time

    from agentgrad.benchmarks.ablation.cases import SYSTEMS
    from agentgrad.benchmarks.inject.bench import check_options, load_model, run_inject
    from agentgrad.benchmarks.inject.corrupt import KINDS
    from agentgrad.blame.judge import Judge, make_judge
    from agentgrad.blame.methods import needs_scorer, select_methods

    split_list = lambda v, valid: list(valid) if v == "all" else [x.strip() for x in v.split(",") if x.strip()]  # noqa: E731
    names = select_methods(methods, judge=bool(judge), replay=replays > 0)
    sys_list, kind_list = split_list(systems, SYSTEMS), split_list(kinds, KINDS)
    check_options(sys_list, kind_list, names, split, questions or None, out, resume)
    t0 = time.perf_counter()
    with console.status(f"loading {model}"):
        agents_model, scorer = load_model(model, any(needs_scorer(n) for n in names))
        jm = Judge(make_judge(judge)) if judge else None
    with _progress() as progress:
        bar = progress.add_task("injections", total=None)
        m = run_inject(agents_model, scorer, names, sys_list, kind_list, questions or None, out, seed, jm, resume,
                       split, setup={"model": model, "judge": judge}, on_episode=lambda r: progress.advance(bar),
                       replays=replays or 1)
    clean = ", ".join(f"{s} {c['right']}/{c['runs']}" for s, c in m["clean"].items())
    console.print(f"clean runs with the right answer (kept): {clean}", markup=False)
    print_propagation(m)
    print_blame_table(m, ("system", "kind", "final"))
    console.print(f"chance (1/upstream calls): {m['chance_agent_top1']:.3f}; 'final=True': injected at the final "
                  f"agent, where 'last' is right by construction", markup=False)
    _print_judge_misses(m["groups"]["all"], m["episodes"])
    console.print(f"{time.perf_counter() - t0:.0f} s; written: {out}/metrics.json, {out}/episodes/")


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
    _print_wide(table)
