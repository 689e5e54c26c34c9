"""The ablation's driver: noise floor, screening and the grid, resumable and run in chunks.

A chunk is one invocation (``--resume`` after the first): it screens the cases of its ``systems`` and
``defects`` not screened yet, then runs the grid's missing (case, arm, seed) runs seed by seed, and
stops starting new work after ``stop_after`` minutes (what it finished is kept: every noise edit,
case and run is one appended line). ``OUT/chunks.jsonl`` records each chunk's wall time (a chunk
cut off by Ctrl-C or a crash too, marked ``interrupted``): their sum is the grid's time. The summary
(:mod:`.summary`) is written after every chunk over everything done so far. ``OUT/records.jsonl``
holds the same work in compact lines (:mod:`.records`: a kept case's per-question clean and bugged
results, one line per run; rewritten after every chunk), what ``benchmarks/ablation_table.py
RECORDS...`` reads.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from agentgrad.benchmarks.ablation.bench import ARMS, CELLS, FACTORIAL, OPTIMIZERS, Ablation
from agentgrad.benchmarks.ablation.cases import ABLATION_SPLITS, DEFECTS, PROMPT_SETS, SYSTEMS, cases
from agentgrad.benchmarks.ablation.figure import write_figures
from agentgrad.benchmarks.ablation.memo import append_row, read_rows
from agentgrad.benchmarks.ablation.records import write_records
from agentgrad.benchmarks.ablation.summary import markdown_table, summarize
from agentgrad.core.trace import write_json_atomic
from agentgrad.errors import ConfigError


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def check_options(systems: list[str] | None, defects: list[str] | None, methods: list[str] | None,
                  optimizer: str, numbers: dict[str, float]) -> None:
    """One-line errors for unknown names and out-of-range numbers, before anything is written."""
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"--optimizer takes {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    for name, value, valid in (("system", systems, SYSTEMS), ("defect", defects, DEFECTS),
                               ("method", methods, [*ARMS, *CELLS])):
        bad = [v for v in value or [] if v not in valid]
        if bad:
            raise ConfigError(f"unknown {name} {bad[0]!r}; valid: {', '.join(valid)}")
    low = [k for k, v in numbers.items() if v is not None and v < 1]
    if low:
        raise ConfigError(f"{', '.join('--' + k.replace('_', '-') for k in low)} must be at least 1")


# what marks a folder as this benchmark's (a folder rebuilt from the committed records has no options.json)
BENCH_FILES = ("options.json", "results.jsonl", "noise.jsonl", "cases.jsonl")


def run_ablation(out: str | Path, *, model: str = "smollm2", systems: list[str] | None = None,
                 defects: list[str] | None = None, methods: list[str] | None = None, seeds: int = 3,
                 optimizer: str = "edit", optimizer_model: str | None = None, steps: int = 2, step_every: int = 4,
                 val_size: int = 50, test_size: int | None = None, concurrency: int = 16, resume: bool = False,
                 noise_edits: int = 8, keep_factor: float = 5.0, wordings: int | tuple[int, int] | None = None,
                 positions: int | None = None, agents: int | None = None, stop_after: float | None = None,
                 screen_only: bool = False, screen_first: int = 40, sizes: dict[str, int] | None = None,
                 prompts: str = "short", log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or continue) the benchmark into ``out``; returns the summary (also ``summary.json``).

    ``systems``, ``defects``, ``methods``, ``seeds``, the instance limits (``wordings``: the first N
    or a pair ``(a, b)`` of indices,
    ``positions``, ``agents``) and ``stop_after`` (minutes) choose this chunk's work; everything else
    is an option of the whole benchmark, and a resumed one must keep it (``prompts`` too: the prompt
    set, ``short`` or ``long``). ``methods`` may name the factorial's cells (``bench.CELLS``);
    ``["factorial"]`` is all of them and ``noop``."""
    out = Path(out)
    methods = methods or list(ARMS)
    if "factorial" in methods:
        methods = list(dict.fromkeys(m for x in methods for m in (FACTORIAL if x == "factorial" else [x])))
    if prompts not in PROMPT_SETS:
        raise ConfigError(f"--prompts takes {', '.join(PROMPT_SETS)}, got {prompts!r}")
    check_options(systems, defects, methods, optimizer, {"seeds": seeds, "steps": steps, "step_every": step_every,
                                              "val_size": val_size, "test_size": test_size,
                                              "concurrency": concurrency, "noise_edits": noise_edits,
                                              "wordings": wordings if not isinstance(wordings, tuple) else None,
                                              "positions": positions, "agents": agents,
                                              "screen_first": screen_first})
    if isinstance(wordings, tuple) and not 0 <= wordings[0] <= wordings[1]:
        raise ConfigError(f"--wordings {wordings[0]}-{wordings[1]}: give A-B with 0 <= A <= B (0 is the first wording)")
    selected = cases(systems, defects, wordings, positions, agents, prompts)
    if not selected:
        raise ConfigError("--wordings selects no defect instance of these families (wording 0 is the first; "
                          "see agentgrad.benchmarks.ablation.defects.WORDINGS)")
    sizes = dict(sizes or ABLATION_SPLITS)
    options = {"model": model, "optimizer": optimizer, "optimizer_model": optimizer_model, "steps": steps,
               "step_every": step_every, "val_size": val_size, "test_size": test_size, "splits": sizes,
               "noise_edits": noise_edits, "keep_factor": keep_factor, "screen_first": screen_first}
    if prompts != "short":  # a folder of the short prompts keeps the options it was written with
        options["prompts"] = prompts
    opt_file = out / "options.json"
    if out.exists() and any(out.iterdir()):
        if not any((out / f).is_file() for f in BENCH_FILES):  # not this benchmark's folder: nothing to resume
            raise ConfigError(f"{out} is not empty and holds no `bench ablation` run (none of "
                              f"{', '.join(BENCH_FILES)}), so there is nothing to resume: choose another --out, "
                              f"or empty that folder")
        if not resume:
            raise ConfigError(f"{out} is not empty: pass --resume to continue the benchmark there, or another --out")
        if opt_file.exists() and json.loads(opt_file.read_text(encoding="utf-8")) != options:
            raise ConfigError(f"{out} was run with other options ({opt_file}); resume with the same ones")
    if keep_factor < 0 or (stop_after is not None and stop_after < 0):
        raise ConfigError("--keep-factor and --stop-after must not be negative")
    if val_size > sizes["val"]:
        raise ConfigError(f"--val-size {val_size} is more than the {sizes['val']} validation questions")
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(opt_file, options)
    (out / "results.jsonl").touch()  # a screen-only chunk too is a benchmark folder the report reads
    (out / "cases.jsonl").touch()  # and so is a chunk stopped while it measures the noise floor
    t_start = time.perf_counter()
    bench = Ablation(out, model, optimizer, optimizer_model, steps, step_every, val_size, concurrency, test_size, log,
                     sizes, prompts)
    over = lambda: stop_after is not None and time.perf_counter() - t_start > stop_after * 60  # noqa: E731
    noise_path, cases_path, results_path = out / "noise.jsonl", out / "cases.jsonl", out / "results.jsonl"
    stopped, runs_done = False, 0

    def record_chunk(**extra: Any) -> float:  # the chunk's wall time, also when it is cut off
        seconds = round(time.perf_counter() - t_start, 1)
        append_row(out / "chunks.jsonl", {"seconds": seconds, "runs": runs_done, "stopped": stopped, **extra,
                                          "systems": systems, "defects": defects, "methods": methods, "seeds": seeds})
        return seconds

    try:
        noise: dict[str, float] = {}
        bases = {r["case"]: r for r in read_rows(cases_path)}
        for case in selected:  # stages 1 and 2: the noise floor (per system, once) and the screen
            if case.name in bases:
                continue
            if case.system not in noise:
                rows = [r for r in read_rows(noise_path) if r["system"] == case.system]
                for edit in bench.noise_edits(case.system, noise_edits)[len(rows):]:
                    if over():
                        break
                    rows.append(bench.noise_row(edit))
                    append_row(noise_path, rows[-1])
                    log(f"noise {case.system}: {edit['agent']} +{edit['line']!r} ({edit['position']}): "
                        f"screen {rows[-1]['screen']:.2f} ({rows[-1]['delta']:+.2f})")
                if len(rows) < noise_edits:
                    stopped = True
                    break
                noise[case.system] = sum(abs(r["delta"]) for r in rows[:noise_edits]) / noise_edits
            if over():
                stopped = True
                break
            bases[case.name] = bench.screen(case, noise[case.system], keep_factor, screen_first)
            append_row(cases_path, bases[case.name])
            b = bases[case.name]
            log(f"{case.name}: screen ({b['n_screen']} questions) clean {b['screen_clean']:.2f}, bugged "
                f"{b['screen_bugged']:.2f} (damage {b['damage_screen']:+.2f}, threshold {b['threshold']:.2f})"
                + (f" -> kept; test clean {b['clean_test']:.2f}, bugged {b['bugged_test']:.2f}" if b["kept"]
                   else " -> dropped"))

        kept = [c for c in selected if c.name in bases and bases[c.name]["kept"]]
        done = {(r["case"], r["method"], r["seed"]) for r in read_rows(results_path)}
        for seed in range(seeds if not (stopped or screen_only) else 0):  # stage 3, seed by seed
            for case in kept:
                for arm in methods:
                    if (case.name, arm, seed) in done:
                        continue
                    if over():
                        stopped = True
                        break
                    row = bench.run_one(case, bases[case.name], arm, seed)
                    append_row(results_path, row)
                    runs_done += 1
                    log(f"  {case.name} {arm:<11} seed {seed}: blame acc {_fmt(row['blame_accuracy'])}, test "
                        f"{row['test_before']:.3f} -> {row['test_after']:.3f}, edited {','.join(row['edited']) or '-'}, "
                        f"{row['seconds']} s")
                if stopped:
                    break
            if stopped:
                break
    except BaseException:  # Ctrl-C or a crash: what it finished is kept, and so is its time
        record_chunk(interrupted=True)
        raise
    seconds = record_chunk()
    if stopped:
        log(f"stopped after {stop_after} min: run again with --resume to continue")
    return finish(out, options, seconds, stopped)


def ablation_benchmark(out: str | Path, **options: Any) -> tuple[dict[str, Any], Path]:
    """``bench ablation`` as one call: :func:`run_ablation` with ``options`` (its options are checked
    there, before a model loads), then the folder's HTML report (``out/report.html``, over everything
    in ``out`` so far); returns (the summary, the report's path)."""
    from agentgrad.report.html import write_report

    summary = run_ablation(out, **options)
    return summary, write_report(Path(out)).path


def load_records(out: Path, seeds: list[int] | None = None, systems: list[str] | None = None,
                 names: list[str] | None = None
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """``(case rows, run rows, noise rows)`` of a benchmark folder, of the chosen seeds, systems and
    case ``names`` (default: all), with the noise floor of the systems those cases are of. A row of an
    instance no longer generated (a duplicate) is left out (of the folder's prompt set)."""
    if not (Path(out) / "results.jsonl").is_file():
        raise ConfigError(f"{out} is not a `bench ablation` folder (no results.jsonl)")
    opt_file = Path(out) / "options.json"
    prompts = (json.loads(opt_file.read_text(encoding="utf-8")).get("prompts", "short") if opt_file.is_file()
               else "short")
    every = cases(prompts=prompts)
    known = {c.name for c in every if not systems or c.system in systems}
    if names is not None:
        unknown = sorted(set(names) - {c.name for c in every})
        if unknown:
            raise ConfigError(f"{unknown[0]!r} is not a case of the benchmark ({len(unknown)} such names)")
        known &= set(names)
    case_rows = [r for r in read_rows(out / "cases.jsonl") if r.get("case") in known]
    rows = [r for r in read_rows(out / "results.jsonl")
            if r.get("case") in known and (seeds is None or r.get("seed") in seeds)]
    kept = {c.system for c in every if c.name in known}  # the noise floor of the systems kept
    noise = [r for r in read_rows(out / "noise.jsonl") if r.get("system") in kept]
    return case_rows, rows, noise


def finish(out: Path, options: dict[str, Any], seconds: float, stopped: bool) -> dict[str, Any]:
    """The summary, table and figures over everything in ``out`` so far."""
    case_rows, rows, noise = load_records(out)
    summary = summarize(case_rows, rows, noise)
    summary["seconds_this_run"] = seconds
    summary["seconds_total"] = round(sum(c["seconds"] for c in read_rows(out / "chunks.jsonl")), 1)
    summary["chunks"] = len(read_rows(out / "chunks.jsonl"))
    summary["stopped"] = stopped
    summary["options"] = options
    write_json_atomic(out / "summary.json", summary)
    (out / "table.md").write_text(markdown_table(summary), encoding="utf-8")
    write_figures(summary, rows, out)
    write_records(out, options.get("prompts", "short"))
    return summary

