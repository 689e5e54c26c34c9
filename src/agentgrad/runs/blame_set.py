"""Blame a whole set of failed traces: each trace as it is read, then the team-level verdict.

``agentgrad blame FOLDER --expected answers.jsonl`` is :func:`blame_set`. The source is a file of
many traces (chat JSONL, OTLP spans), a folder of trace files, or a run directory (its
``traces/``). Each trace gets its loss from a losses file or an expected-answers file
(:mod:`agentgrad.blame.expected`), or the default loss; it is blamed by
:func:`agentgrad.runs.blame.blame_trace` (one scorer, loaded once, for all), and its
:class:`~agentgrad.blame.team.TraceVerdict` is appended to ``OUT/verdicts.jsonl`` at once, so an
interrupted run resumes (``resume=True``) without redoing a finished trace. A trace that cannot be
read or blamed (broken records, an error that is the trace's own) is recorded as ``malformed`` with
its reason and the rest go on (a bug of agentgrad's as ``error``, or with ``debug`` a traceback); a trace whose output gives the expected answer is ``succeeded``; one
with no loss is ``unblamed``. At the end ``OUT/blame.json`` holds the team verdict
(:func:`~agentgrad.blame.team.team_verdict`) and ``OUT/traces.jsonl`` the blamed traces (one a line,
each verdict naming its line's byte offset), which the report shows.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from agentgrad.blame.expected import LossBook, LossEntry, check_answer, read_book
from agentgrad.blame.losses import verbal_loss
from agentgrad.blame.methods import DEFAULT_METHOD, canonical
from agentgrad.blame.team import TeamVerdict, TraceVerdict, team_verdict, trace_confidence
from agentgrad.core.files import RunFiles, append_line, check_new_output
from agentgrad.importers.phoenix import FETCHED
from agentgrad.core.trace import Trace
from agentgrad.errors import AgentgradError, ConfigError
from agentgrad.importers.base import ImportResult
from agentgrad.importers.spans import import_file
from agentgrad.runs.blame import blame_trace, scorer_for
from agentgrad.runs.stored import VERDICTS_FILE, read_verdicts

VERDICTS = VERDICTS_FILE
TRACES = "traces.jsonl"  # the blamed traces, one agentgrad trace a line (one file: no fsync per trace)
SETTINGS = "blame-set.json"


@dataclass
class BlameSet:
    """The verdict of a set: one :class:`TraceVerdict` per trace (in the order read) and the team's."""

    traces: list[TraceVerdict]
    team: TeamVerdict
    methods: list[str]
    source: str = ""
    out: Path | None = None
    warnings: list[str] = field(default_factory=list)  # bad lines of the losses files, unknown ids, ...
    resumed: int = 0  # traces found finished in verdicts.jsonl and not redone
    seconds: float = 0.0

    def by_status(self, status: str) -> list[TraceVerdict]:
        return [t for t in self.traces if t.status == status]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "blame-set", "source": self.source, "methods": self.methods, "team": self.team.to_dict(),
                "warnings": self.warnings, "resumed": self.resumed, "seconds": self.seconds,
                "skipped": [{"trace": t.trace, "status": t.status, "reason": t.reason}
                            for t in self.traces if t.status != "blamed"],
                "blamed": [{"trace": t.trace, "file": t.file, "offset": t.offset, "loss": t.loss, "wrong": t.wrong, "note": t.note,
                            "target": t.target,
                            "methods": {m: {"agent": v.agent, "repair": v.repair, "node": v.node}
                                        for m, v in t.methods.items()}}
                           for t in self.traces if t.status == "blamed"]}


def trace_files(source: Path, skip: list[Path] | None = None) -> list[Path]:
    """The files of a source: the file itself, a run directory's ``traces/*.json``, or a folder's
    files (not hidden, sorted by name; ``skip``: the losses files, when they lie in it)."""
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise ConfigError(f"{source} does not exist; give a trace file, a folder of trace files or a run directory")
    if (source / "traces").is_dir():
        files = sorted(p for p in (source / "traces").glob("*.json") if p.is_file())
    else:
        gone = {p.resolve() for p in skip or []}
        files = sorted(p for p in source.iterdir() if p.is_file() and not p.name.startswith(".")
                       and p.resolve() not in gone)
    if not files:
        raise ConfigError(f"{source} holds no trace file (a folder of trace files, or a run directory with traces/)")
    return files


def _broken(path: Path, msg: str) -> tuple[str, str]:
    """``(key, reason)`` of a broken record as the importers report it (``FILE:LINE: what`` or
    ``FILE: trace ID: what``)."""
    rest = msg[len(str(path)):] if msg.startswith(str(path)) else f": {msg}"
    m = re.match(r":(\d+): ", rest)
    if m:
        return f"{path.name}:{m.group(1)}", rest[m.end():]
    m = re.match(r": trace (\S+): ", rest)
    if m:
        return m.group(1), rest[m.end():]
    return path.name, rest.lstrip(": ")


def read_set(files: list[Path], first: ImportResult | None = None) -> Iterator[tuple[str, Trace | None, str, str]]:
    """``(key, trace, source file, why broken)`` for every trace of ``files``, file by file (``first``:
    the first file, imported already); a trace or file that could not be imported comes with
    ``trace`` None and its reason. A key is the trace's id, or ``FILE:ID`` where an earlier file of
    the set had that id already."""
    seen: set[str] = set()
    for i, p in enumerate(files):
        try:
            res = first if i == 0 and first is not None else import_file(p)
        except AgentgradError as e:  # not a trace file, a corrupt agentgrad trace, ...
            yield p.name, None, str(p), str(e)
            continue
        for msg in res.broken:
            key, why = _broken(p, msg)
            yield key, None, str(p), why
        for t in res.traces:
            key = t.id or p.stem
            if key in seen:
                key = f"{p.name}:{key}"
            seen.add(key)
            yield key, t, str(p), ""


def book_of(value: Any, kind: str) -> LossBook | None:
    """A losses or expected-answers book from a file path, a book, or a mapping ``{trace id: text}``
    (for losses the text is the loss, or a dict with ``loss``, ``wrong``, ``expected``)."""
    if value is None or isinstance(value, LossBook):
        return value
    if isinstance(value, Mapping):
        book = LossBook(f"<{kind}>")
        for n, (k, v) in enumerate(value.items(), 1):
            d = dict(v) if isinstance(v, Mapping) else ({"expected": v} if kind == "expected" else {"loss": v})
            book.by_trace[str(k)] = LossEntry(n, trace=str(k), **{f: (str(d[f]) if d.get(f) is not None else None)
                                                                  for f in ("loss", "wrong", "expected")})
        return book
    return read_book(value, kind)


@dataclass
class _Plan:
    status: str
    reason: str = ""
    loss: str | None = None
    wrong: str | None = None
    expected: str | None = None
    note: str = ""


def plan_loss(trace: Trace, key: str, books: list[LossBook], loss: str | None, wrong: str | None) -> _Plan:
    """What to blame ``trace`` for: its entry of the first book that has one, else the default loss."""
    found = [b.find(trace, key) for b in books]  # every book's entry is used (none is reported as unknown)
    entry = next((e for e in found if e is not None), None)
    if entry is None:
        if loss:
            return _Plan("blamed", loss=loss, wrong=wrong)
        return _Plan("unblamed", "no loss for it: neither its id nor its first input is in "
                     + (" or ".join(b.source for b in books) or "any losses file") + " (and no default loss)")
    if entry.loss:
        return _Plan("blamed", loss=entry.loss, wrong=entry.wrong, expected=entry.expected)
    calls = trace.calls()
    given = " ".join(n.text for n in trace.nodes if n.kind == "input")  # the task's own ids are not wrong
    c = check_answer(entry.expected or "", calls[-1].text if calls else "", given)
    if c.success:
        return _Plan("succeeded", c.note, expected=entry.expected)
    return _Plan("blamed", loss=c.loss, wrong=c.wrong, expected=entry.expected, note=c.note)


def _append(path: Path, line: str) -> int:
    """:func:`append_line` of ``line`` to ``path``; returns the byte offset where the line starts (after
    the newline ``append_line`` puts first where a killed process left a line unfinished)."""
    at = path.stat().st_size if path.exists() else 0
    if at:
        with open(path, "rb") as f:
            f.seek(at - 1)
            at += f.read(1) != b"\n"
    append_line(path, line)
    return at


def _done(files: RunFiles) -> dict[str, TraceVerdict]:
    """The verdicts already in ``verdicts.jsonl`` (a line cut short by a kill is not one)."""
    return read_verdicts(files.path(VERDICTS))


def _settings(files: RunFiles, settings: dict[str, Any], resume: bool) -> None:
    p = files.path(SETTINGS)
    if resume and p.exists():
        try:
            old = json.loads(p.read_text(encoding="utf-8"))
        except ValueError:
            old = {}
        diff = [k for k in ("methods", "seed", "top_k") if k in old and old[k] != settings[k]]
        if diff:
            raise ConfigError(f"{files.root} was blamed with {', '.join(f'{k}={old[k]}' for k in diff)}; resume "
                              f"with the same, or write a new --out")
    files.write_json(SETTINGS, data=settings)


def blame_set(source: str | Path, losses: Any = None, expected: Any = None, methods: list[str] | None = None,
              scorer: Any = None, out: str | Path | None = None, resume: bool = False, *, loss: str | None = None,
              wrong: str | None = None, seed: int = 0, top_k: int = 1, judge: Any = None, overwrite: bool = False,
              progress: Callable[[TraceVerdict, dict[str, int]], None] | None = None,
              debug: bool | None = None) -> BlameSet:
    """Blame every trace of ``source`` and give the team-level verdict.

    Args:
        source: a file of traces (chat JSONL, OTLP JSON), a folder of trace files, or a run directory.
        losses: a losses file (JSONL ``{"trace", "loss", "wrong"?, "expected"?}``), or a mapping
            ``{trace id: loss}``.
        expected: an expected-answers file (JSONL ``{"trace" or "input", "expected"}``), or a mapping
            ``{trace id: expected answer}``; a trace whose final output gives it succeeded.
        methods: blame methods (default: the default method and provenance).
        scorer: a model value or a loaded scorer, loaded once, for the gradient methods.
        out: the run directory (``verdicts.jsonl``, ``blame.json``, ``traces.jsonl``); None writes nothing.
        resume: skip the traces ``out/verdicts.jsonl`` already holds.
        loss, wrong: the default loss (and its wrong text) for the traces the files do not cover;
            with no files, the loss of every trace.
        overwrite: write into a non-empty ``out`` (its earlier verdicts are dropped).
        progress: called after each trace with its verdict and the counts so far.
        debug: a bug of agentgrad's (an error that is not an :class:`AgentgradError`) stops the set
            with its traceback; else that trace is recorded with status ``error`` (counted apart from
            malformed traces) and the set goes on. Default: ``AGENTGRAD_DEBUG=1`` in the environment
            (the CLI's ``--debug`` sets it).

    Returns:
        a :class:`BlameSet`: ``.traces`` (the per-trace verdicts) and ``.team`` (the team verdict).
    """
    t0 = time.time()
    src = Path(source)
    names = list(dict.fromkeys(canonical(m) for m in (methods or [DEFAULT_METHOD, "provenance"])))
    books = [b for b in (book_of(losses, "losses"), book_of(expected, "expected")) if b is not None]
    if not books and not (loss or "").strip():
        raise ConfigError("nothing says what went wrong: give a losses file (--losses FILE, losses=), an "
                          "expected-answers file (--expected FILE, expected=) or a loss for every trace (--loss, loss=)")
    inputs = [Path(b.source) for b in books if not b.source.startswith("<")]  # a file, not a mapping
    files_in = trace_files(src, inputs)
    first = None
    if src.is_file():  # one file: unreadable, or without a single trace, is a one-line error; nothing written
        first = import_file(src)
        if not first.traces:
            more = f" (and {len(first.broken) - 1} more broken record(s))" if len(first.broken) > 1 else ""
            raise ConfigError(f"nothing to blame in {src}: {first.broken[0] if first.broken else 'no trace in it'}{more}")
    sc = scorer_for(names, scorer)
    files = None
    done: dict[str, TraceVerdict] = {}
    if out is not None:
        out = Path(out)
        fetched = src.name == FETCHED and src.parent.resolve() == out.resolve()  # spans blame fetched there itself
        check_new_output(out, overwrite or resume, "dir", protect=[*([] if fetched else [src]), *inputs],
                         own=(FETCHED,) if fetched else ())
        files = RunFiles(out)
        if resume and out.is_dir() and any(out.iterdir()) and not files.path(VERDICTS).exists():
            raise ConfigError(f"--out {out} holds no blame of a set ({VERDICTS}) to resume; choose another --out")
        out.mkdir(parents=True, exist_ok=True)
        files.clean_temporary()
        if resume:
            done = _done(files)
        else:
            files.write_text(VERDICTS, text="")
            files.write_text(TRACES, text="")
        _settings(files, {"source": str(src), "methods": names, "seed": seed, "top_k": top_k,
                          "loss": loss, "wrong": wrong, "books": [b.source for b in books]}, resume)
    verdicts: list[TraceVerdict] = []
    counts = {"blamed": 0, "succeeded": 0, "malformed": 0, "unblamed": 0, "error": 0, "resumed": 0}
    debug = os.environ.get("AGENTGRAD_DEBUG") == "1" if debug is None else debug
    for key, trace, where, broken in read_set(files_in, first):
        if key in done:
            verdicts.append(done[key])
            counts["resumed"] += 1
            for b in books if trace is not None else []:
                b.find(trace, key)  # its entry is used: not reported as naming no trace of the set
            continue
        v = _blame_one(key, trace, where, broken, books, loss, wrong, names, sc, seed, top_k, judge, debug)
        if files is not None and v.status == "blamed" and trace is not None:
            v.file, v.offset = TRACES, _append(files.path(TRACES), json.dumps(trace.to_dict(), ensure_ascii=False))
        if files is not None:
            append_line(files.path(VERDICTS), json.dumps(v.to_dict(), ensure_ascii=False))
        verdicts.append(v)
        counts[v.status] += 1
        if progress:
            progress(v, counts)
    warnings = [w for b in books for w in (*b.warnings, *b.unused())]
    primary = DEFAULT_METHOD if DEFAULT_METHOD in names else names[0]
    team = team_verdict(verdicts, names, primary)
    result = BlameSet(verdicts, team, names, str(src), out, warnings, counts["resumed"], round(time.time() - t0, 2))
    if files is not None:
        files.write_json("blame.json", data=result.to_dict())
    return result


def _blame_one(key: str, trace: Trace | None, where: str, broken: str, books: list[LossBook], loss: str | None,
               wrong: str | None, names: list[str], sc: Any, seed: int, top_k: int, judge: Any,
               debug: bool = False) -> TraceVerdict:
    """One trace's verdict; an error that is the trace's own (an :class:`AgentgradError`) makes it
    ``malformed``, any other (a bug) ``error``, or with ``debug`` stops the set with its traceback."""
    t0 = time.time()
    if trace is None:
        return TraceVerdict(key, "malformed", reason=broken, source=where)
    plan = plan_loss(trace, key, books, loss, wrong)
    v = TraceVerdict(key, plan.status, reason=plan.reason, note=plan.note, source=where, loss=plan.loss,
                     wrong=plan.wrong, expected=plan.expected)
    if plan.status != "blamed":
        return v
    try:
        try:
            vl = verbal_loss(trace, plan.loss or "", wrong=plan.wrong, expected=plan.expected)
        except ConfigError:
            if not plan.wrong or not trace.calls():
                raise
            vl = verbal_loss(trace, plan.loss or "", expected=plan.expected)
            v.wrong, v.note = None, (f"the wrong text {plan.wrong[:80]!r} is not in its final output: blamed on "
                                     f"the whole answer")
        blamed = blame_trace(trace, vl, names, sc, seed, top_k, judge)
    except AgentgradError as e:
        return TraceVerdict(key, "malformed", reason=f"cannot be blamed: {e}", source=where, loss=plan.loss)
    except Exception as e:  # a bug of agentgrad's, not the trace's: counted apart, never hidden as malformed
        if debug:
            raise
        return TraceVerdict(key, "error", reason=f"agentgrad failed on it ({type(e).__name__}: {e}); this is a bug: "
                            f"rerun with --debug for the traceback", source=where, loss=plan.loss)
    v.methods = blamed.methods
    c = trace_confidence(v.methods)
    v.confidence = {k: x for k, x in c.to_dict().items() if k != "measured"} if c.value is not None else None
    v.target = vl.targets[0] if vl.targets else None
    v.seconds = round(time.time() - t0, 3)
    return v


__all__ = ["BlameSet", "blame_set", "plan_loss", "read_set", "trace_files"]
