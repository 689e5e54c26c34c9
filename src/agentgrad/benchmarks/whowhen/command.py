"""``bench whowhen`` as one library call: every option checked (a one-line
:class:`~agentgrad.errors.ConfigError` before the logs are read or a model loads), the logs read,
the scorer and judge built, :func:`~agentgrad.benchmarks.whowhen.bench.run_whowhen` run."""

from __future__ import annotations

import re
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

from agentgrad.benchmarks.whowhen.bench import DEFAULT_METHODS, run_whowhen
from agentgrad.errors import ConfigError

ON_TOO_LONG = ("skip", "exclude", "window", "error")


def log_range(value: str, count: int) -> tuple[int, int]:
    """``--logs``: ``N`` (the first N logs) or ``A-B`` (logs A to B, 1-based and inclusive), as (A, B)
    within the ``count`` logs there are; anything else is a one-line :class:`ConfigError`."""
    m = re.fullmatch(r"\s*(?:(\d+)\s*-\s*)?(\d+)\s*", value)
    first, last = (int(m.group(1) or 1), int(m.group(2))) if m else (0, 0)
    if not m or first < 1 or last < first:
        raise ConfigError(f"--logs takes N (the first N logs) or A-B with 1 <= A <= B (logs A to B), got {value!r}")
    if first > count:
        raise ConfigError(f"--logs {value}: the subset has only {count} logs")
    return first, min(last, count)


def whowhen_benchmark(out: Path, subset: str = "all", with_ground_truth: bool = True, methods: str = "",
                      scorer: str | None = None, judge: str = "", on_too_long: str = "skip", device: str = "cpu",
                      archive: Path | None = None, overwrite: bool = False, resume: bool = False,
                      logs: str | None = None, max_context: int | None = None, answer_span: bool = False,
                      on_log: Callable[[dict[str, Any]], None] | None = None,
                      on_start: Callable[[int], None] | None = None, warn: Callable[[str], None] | None = None,
                      status: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """The Who&When benchmark of ``subset`` from ``archive`` (default: the data directory's) into
    ``out``; returns its metrics (``metrics["methods"]``: the methods run, in order).

    ``methods``: ``all`` or a comma list of names and prefixes (default: :data:`DEFAULT_METHODS`, and
    the judge methods with a ``judge``); ``scorer``: a scorer value
    (:func:`~agentgrad.attribution.factory.make_scorer`) for the methods that read one, on
    ``device``, within ``max_context`` tokens; ``on_too_long``: skip, exclude, window or error (what
    a log longer than the scorer's context gets); ``logs``: ``N`` or ``A-B``, the logs of the subset
    run. ``on_start(n)`` is told how many logs there are, ``on_log(record)`` each one's record,
    ``warn(line)`` of logs that could not be read; ``status(text)`` is a context manager for what is
    being prepared."""
    from agentgrad.blame.methods import needs_scorer, select_methods
    from agentgrad.core.files import check_new_output

    if on_too_long not in ON_TOO_LONG:
        raise ConfigError(f"--on-too-long must be skip, exclude, window or error, got {on_too_long!r}")
    if answer_span and not with_ground_truth:
        raise ConfigError("--answer-span locates the answer against the ground truth: drop --without-ground-truth")
    names = select_methods(methods or (DEFAULT_METHODS + (",judge" if judge else "")), judge=bool(judge))
    scored = [n for n in names if needs_scorer(n)]
    if scored and not scorer:
        raise ConfigError(f"{scored[0]} needs a white-box model: add --scorer PATH_OR_HUB_ID "
                          f"(or choose --methods random,all,last,judge)")
    check_new_output(Path(out), overwrite or resume, "dir", protect=[archive] if archive else None)
    if max_context is not None and not scorer:
        raise ConfigError("--max-context sets the white-box scorer's context: give --scorer too")
    from agentgrad.importers import import_whowhen

    with status("reading the Who&When logs") if status else nullcontext():
        res = import_whowhen(archive, subset)
    if res.broken and warn:
        warn(f"{len(res.broken)} log(s) could not be read: {res.broken[0]}")
    first, last = log_range(logs, len(res.traces)) if logs else (1, len(res.traces))
    traces = res.traces[first - 1:last]
    jm = None
    if judge:
        from agentgrad.blame.judge import Judge, make_judge

        jm = Judge(make_judge(judge))
    sc = None
    if scorer:
        from agentgrad.attribution.factory import make_scorer
        from agentgrad.benchmarks.planted import model  # noqa: F401  (registers the scorer value "trained")

        sc = make_scorer(scorer, device=device, max_context=max_context,
                         on_too_long="skip" if on_too_long in ("exclude", "window") else on_too_long)
        if max_context is not None:
            from agentgrad.models.hf import context_length

            if max_context > (full := context_length(sc.model, sc.tokenizer)):
                raise ConfigError(f"--max-context {max_context:,} is longer than the scorer's context "
                                  f"({full:,} tokens)")
    if on_start:
        on_start(len(traces))
    return run_whowhen(traces, names, sc, jm, with_ground_truth, out, on_log=on_log,
                       exclude_too_long=on_too_long in ("exclude", "window") and sc is not None, resume=resume,
                       window=on_too_long == "window" and sc is not None, span=answer_span,
                       setup={"scorer": scorer, "judge": judge, "subset": subset,
                              **({"max_context": max_context} if max_context else {})})
