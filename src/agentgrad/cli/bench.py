"""``bench blame`` (the planted-fault blame benchmark), ``bench whowhen``, ``bench ablation`` and
``bench inject``: options parsed by :mod:`agentgrad.cli.options`, the benchmark's library call, its tables
(:mod:`agentgrad.cli.tables`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import typer

from agentgrad.blame.methods import registry_grammar
from agentgrad.cli import options
from agentgrad.cli._common import bench_app, console, err_console, progress_bar
from agentgrad.cli.options import DEVICE, DTYPE, JUDGE
from agentgrad.cli.tables import print_blame_table, print_judge_misses, print_propagation, print_whowhen


def started_on_demand(label: str) -> tuple[Any, Callable[..., None], Callable[[Any], None]]:
    """A progress display that shows once the library says the work starts (after a spinner of its
    own, say, while a model loads): (the display, ``on_start(total=None)``, ``advance(record)``)."""
    progress = progress_bar()
    bar = progress.add_task(label, total=None, start=False)  # its clock starts with the work

    def on_start(total: Optional[int] = None) -> None:
        progress.update(bar, total=total)
        progress.start_task(bar)
        progress.start()

    return progress, on_start, lambda record: progress.advance(bar)


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
    methods: str = typer.Option("all", "--methods", help="all, or names/prefixes of the registry: "
                                                        f"{registry_grammar()} (docs/blame.md)"),
    seed: int = typer.Option(0, "--seed", help="Seeds the episodes and tie-breaking."),
    device: str = DEVICE,
    judge: str = JUDGE,
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty --out."),
    resume: bool = typer.Option(False, "--resume", help="Continue a stopped benchmark in --out: episodes already "
                                                        "written are read back, not re-run."),
    style: str = typer.Option("lines", "--style", help="How the calls write: lines (key: value) or prose "
                                                       "(sentences in each agent's own words; no misroute)."),
) -> None:
    """Planted-fault episodes with known root causes: how often each blame method names the right agent."""
    from agentgrad.benchmarks.planted import episodes as E
    from agentgrad.benchmarks.planted.bench import run_benchmark

    names = options.method_names(methods, judge=bool(judge))
    progress, on_start, advance = started_on_demand("episodes")
    try:
        metrics = run_benchmark(options.scorer_value(scorer), names, options.names(topology, E.TOPOLOGIES),
                                options.names(faults, E.FAULTS), episodes, out, seed, on_episode=advance,
                                judge=judge, resume=resume, setup={"scorer": scorer, "judge": judge}, style=style,
                                overwrite=overwrite, device=device, on_start=on_start, status=console.status)
    finally:
        progress.stop()
    print_blame_table(metrics)
    console.print(f"chance (1/upstream nodes): {metrics['chance_agent_top1']:.3f}; "
                  f"token hit@1: " + ", ".join(f"{o} {v['hit1']['value']:.3f}" for o, v in metrics["token"].items()))
    print_judge_misses(metrics["groups"]["all"], metrics["episodes"])
    if metrics.get("seconds_per_episode") is not None:
        console.print(f"wall time per episode, the {len(names)} methods together (shared passes counted once): "
                      f"{metrics['seconds_per_episode']:.1f} s")
    console.print(f"written: {out}/metrics.json, {out}/episodes/")


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
    judge: str = JUDGE,
    on_too_long: str = typer.Option("skip", "--on-too-long", help="skip (attribute what fits, count the log), "
                                                                  "exclude (score only the logs that fit the "
                                                                  "scorer's context, count the others), window "
                                                                  "(a long call keeps the steps nearest it that "
                                                                  "fit) or error."),
    device: str = DEVICE,
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
    from agentgrad.benchmarks.whowhen.command import whowhen_benchmark

    progress, on_start, advance = started_on_demand("logs")
    try:
        m = whowhen_benchmark(out, subset, with_ground_truth, methods, scorer, judge, on_too_long, device, archive,
                              overwrite, resume, logs, max_context, answer_span, on_log=advance, on_start=on_start,
                              warn=lambda line: err_console.print(line, markup=False), status=console.status)
    finally:
        progress.stop()
    print_whowhen(m, m["methods"], with_ground_truth)
    console.print(f"written: {out}/metrics.json, {out}/logs/")


@bench_app.command("agentrx")
def bench_agentrx(
    out: Path = typer.Option(..., "--out", help="Folder for records.jsonl (a line per run and loss, written as each "
                                                "finishes) and summary.json (must be new or empty)."),
    subset: str = typer.Option("all", "--subset", help="tau, magentic (comma list) or all."),
    methods: str = typer.Option("", "--methods", help="Registry names/prefixes (default: the priors first, last, "
                                                      "position:0.5, random, most_active and provenance; with "
                                                      "--scorer the default GBC method too)."),
    scorer: Optional[str] = typer.Option(None, "--scorer", help="White-box scorer for gradient methods: smollm2, "
                                                               "a HF folder or hub id (none: model-free only)."),
    data_dir: Optional[Path] = options.DATA_DIR,
    device: str = DEVICE,
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty --out (its records start again)."),
    resume: bool = typer.Option(False, "--resume", help="Go on in --out: runs already scored are kept."),
    seed: int = typer.Option(0, "--seed", help="Seeds the random prior and tie-breaking."),
    loss: str = typer.Option("all", "--loss", help="The loss settings run: last (on the final call), located "
                                                   "(tau-bench: where the run's record says), comma list, or all."),
    dtype: str = DTYPE,
    window: Optional[int] = typer.Option(None, "--window", min=256, help="A measured approximation: every call "
                                                                         "longer than this many tokens reads only "
                                                                         "its latest steps that fit."),
    edges: str = typer.Option("all", "--edges", help="all, or addressed: each Magentic-One call keeps only "
                                                     "its address, reply and quoted edges where it has any."),
    half: str = typer.Option("all", "--half", help="A (where choices are made), B (the report half) or all."),
    calls_in_history: bool = typer.Option(False, "--calls-in-history", help="Earlier tool calls written into each "
                                                                            "call's history, as the scorer reads them."),
) -> None:
    """AgentRx: labelled real failed runs (tau-bench, Magentic-One); each method's agent and step accuracy
    beside the priors, as paired differences on the report half (docs/agentrx.md)."""
    from agentgrad.benchmarks.agentrx.command import agentrx_benchmark
    from agentgrad.cli.tables import print_agentrx

    progress, on_start, advance = started_on_demand("runs")
    seen: set[tuple[str, str]] = set()

    def on_run(r: dict) -> None:  # one step a run, whichever of its losses finishes first
        if (r["subset"], r["run"]) not in seen:
            seen.add((r["subset"], r["run"]))
            advance(r)

    try:
        res = agentrx_benchmark(out, subset, methods, scorer, data_dir, resume, overwrite, seed, device, loss,
                                on_start=lambda n: on_start(n), on_run=on_run, dtype=dtype, window=window, edges=edges, half=half,
                                calls_in_history=calls_in_history)
    finally:
        progress.stop()
    print_agentrx(res["summary"], console)
    console.print("CPU seconds per method: " + ", ".join(f"{m} {s:.1f}" for m, s in res["cpu_seconds"].items()), markup=False,
                  highlight=False, soft_wrap=True)
    console.print(f"written: {out}/records.jsonl, {out}/summary.json", markup=False, highlight=False, soft_wrap=True)


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
    from agentgrad.benchmarks.ablation.grid import ablation_benchmark
    from agentgrad.benchmarks.ablation.summary import markdown_table

    summary, report = ablation_benchmark(
        out, model=model, systems=options.names(systems, SYSTEMS), defects=options.names(defects, DEFECTS),
        methods=options.names(methods, ARMS), seeds=seeds, optimizer=optimizer,
        optimizer_model=optimizer_model or None, steps=steps, step_every=step_every, val_size=val_size,
        test_size=test_size or None, noise_edits=noise_edits, keep_factor=keep_factor, screen_first=screen_first,
        wordings=options.wording_range(wordings), positions=positions or None, agents=agents or None,
        concurrency=concurrency, stop_after=stop_after or None, screen_only=screen_only, resume=resume,
        prompts=prompts, log=lambda s: console.print(s, markup=False, highlight=False))
    console.print(markdown_table(summary), markup=False, highlight=False)
    console.print(f"{summary['kept']} cases kept, {summary['dropped']} dropped (damage on the screening split under "
                  f"{keep_factor:g}x the noise floor); {summary['runs']} runs; {summary['seconds_this_run']:.0f} s "
                  f"this chunk, {summary['seconds_total']:.0f} s over {summary['chunks']} chunks"
                  + ("; stopped early: --resume continues" if summary["stopped"] else "")
                  + f"; written: {out}/table.md, {out}/steps.svg, {out}/blame-vs-gain.svg, {report}",
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
    judge: str = JUDGE,
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
    from agentgrad.benchmarks.inject.bench import run_inject
    from agentgrad.benchmarks.inject.corrupt import KINDS

    names = options.method_names(methods, judge=bool(judge), replay=replays > 0)
    t0 = time.perf_counter()
    progress, on_start, advance = started_on_demand("injections")
    try:
        m = run_inject(model, None, names, options.names(systems, SYSTEMS), options.names(kinds, KINDS),
                       questions or None, out, seed, judge, resume, split, setup={"model": model, "judge": judge},
                       on_episode=advance, replays=replays or 1, status=console.status, on_start=on_start)
    finally:
        progress.stop()
    clean = ", ".join(f"{s} {c['right']}/{c['runs']}" for s, c in m["clean"].items())
    console.print(f"clean runs with the right answer (kept): {clean}", markup=False)
    print_propagation(m)
    print_blame_table(m, ("system", "kind", "final"))
    console.print(f"chance (1/upstream calls): {m['chance_agent_top1']:.3f}; 'final=True': injected at the final "
                  f"agent, where 'last' is right by construction", markup=False)
    print_judge_misses(m["groups"]["all"], m["episodes"])
    console.print(f"{time.perf_counter() - t0:.0f} s; written: {out}/metrics.json, {out}/episodes/")
