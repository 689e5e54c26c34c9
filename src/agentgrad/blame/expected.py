"""Losses for a set of traces, from a file: hand-written losses, or expected answers compared with the output.

Two JSONL files, one object a line:

- a **losses file**: ``{"trace": ID, "loss": TEXT, "wrong": TEXT?, "expected": TEXT?}``, the loss in
  words, optionally the wrong text of the final answer (its span) and the right answer;
- an **expected-answers file**: ``{"trace": ID, "expected": TEXT}`` or ``{"input": TEXT, "expected":
  TEXT}``, the input matched against the trace's first input (its user message), normalised. A
  losses-file line without ``loss`` is read the same way.

ID is the trace's id as its file names it: a chat line's ``id`` (``line-N`` without one), a span's
trace id, an agentgrad trace's ``id``.

An expected answer is compared with the trace's final output (its last call's text), both
normalised by :func:`tokens` (case, whitespace and punctuation ignored; ``1,234`` and ``1234.0`` are
one number). The trace **succeeded** when every number of the expected answer is among the output's
numbers, or, for an answer without a number, when its words appear in the output in order and
together ("Paris" in "The capital is Paris."). Otherwise the loss reads ``the answer should be
"X"; it says "Y"`` and the differing part of the output is marked as wrong (:func:`wrong_text`):
the first output number that the expected answer lacks, else the last name (a capitalised word
not opening a sentence) it lacks (neither taken from the trace's inputs: an id the question gives), else the output's first run of words that differs from it
(:mod:`difflib`); when the output differs only by leaving something out, nothing can be marked
and the verdict says so.

Hostile input never raises past :func:`read_book`'s one-line errors: a line that is not JSON, not
an object, or lacks its fields, and a second line for the same trace or input, each become one
warning (the first line for a trace is used), and entries naming no trace of the set are listed by
:meth:`LossBook.unused` at the end.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError
from agentgrad.importers.base import read_user_text

_TOKEN = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?|[^\W_]+")
_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
FIELDS = {"trace", "input", "loss", "wrong", "expected"}
EXCERPT = 200


def _canon(tok: str) -> str:
    if _NUMBER.fullmatch(tok):
        v = float(tok.replace(",", ""))
        return str(int(v)) if v.is_integer() else repr(v)
    return tok.lower()


def tokens(text: str) -> list[tuple[str, int, int]]:
    """``(normalised token, start, end)`` of ``text``: words lower-cased, numbers as one value
    (thousands commas and trailing zeros dropped), punctuation and whitespace left out."""
    return [(_canon(m.group()), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def normalise(text: str) -> str:
    return " ".join(t for t, _, _ in tokens(text))


def is_number(tok: str) -> bool:
    return bool(re.fullmatch(r"\d+(?:\.\d+)?", tok))


def matches(expected: str, output: str) -> bool:
    """Does ``output`` give the ``expected`` answer? (see the module docstring)"""
    exp, out = [t for t, _, _ in tokens(expected)], [t for t, _, _ in tokens(output)]
    if not exp:
        return not out
    nums = [t for t in exp if is_number(t)]
    if nums:
        return set(nums) <= {t for t in out if is_number(t)}
    k = len(exp)
    return any(out[i:i + k] == exp for i in range(len(out) - k + 1))


def _sentence_start(text: str, start: int) -> bool:
    before = text[:start].rstrip()
    return not before or before[-1] in ".!?:\n"


def wrong_text(expected: str, output: str, given: str = "") -> str | None:
    """The part of ``output`` that differs from ``expected`` (a substring of ``output``), or None.

    ``given`` is what the task itself said (the trace's inputs): a number or name the output repeats
    from it (an invoice id of the question) is not what the answer got wrong."""
    exp, out = tokens(expected), tokens(output)
    have = {t for t, _, _ in exp} | {t for t, _, _ in tokens(given)}
    runs = [(j1, j2) for op, _, _, j1, j2 in
            difflib.SequenceMatcher(None, [t for t, _, _ in exp], [t for t, _, _ in out], autojunk=False).get_opcodes()
            if op in ("replace", "insert") and j2 > j1]
    if not runs:
        return None
    extra = [o for j1, j2 in runs for o in out[j1:j2] if o[0] not in have]
    number = next((o for o in extra if is_number(o[0])), None)
    if number is not None:
        return output[number[1]:number[2]]
    names = [o for o in extra if output[o[1]].isupper() and not _sentence_start(output, o[1])]
    if names:
        return output[names[-1][1]:names[-1][2]]
    j1, j2 = runs[0]
    return output[out[j1][1]:out[j2 - 1][2]]


def excerpt(text: str, limit: int = EXCERPT) -> str:
    t = " ".join(text.split())
    return t if len(t) <= limit else t[: limit - 1] + "…"


@dataclass
class Check:
    """An expected answer against a final output: success, or the loss and its wrong text."""

    success: bool
    loss: str | None = None
    wrong: str | None = None
    note: str = ""


def check_answer(expected: str, output: str, given: str = "") -> Check:
    """Compare ``expected`` with the final ``output`` (see the module docstring); ``given``: the
    task's own text, whose numbers and names are never marked as wrong (:func:`wrong_text`)."""
    if matches(expected, output):
        return Check(True, note=f"the final output gives the expected answer {excerpt(expected, 80)!r}")
    loss = f'the answer should be "{excerpt(expected)}"; it says "{excerpt(output)}"'
    if not output.strip():
        return Check(False, loss, None, "the final output is empty: no wrong text to mark")
    wrong = wrong_text(expected, output, given)
    if wrong is None:
        missing = [t for t in normalise(expected).split() if t not in set(normalise(output).split())]
        return Check(False, loss, None, f"no differing text in the final output to mark (it leaves out "
                                        f"{excerpt(' '.join(missing), 80)!r}): blamed on the whole answer")
    return Check(False, loss, wrong)


@dataclass
class LossEntry:
    """One line of a losses or expected-answers file."""

    line: int
    trace: str | None = None
    input: str | None = None
    loss: str | None = None
    wrong: str | None = None
    expected: str | None = None


@dataclass
class LossBook:
    """The entries of one losses or expected-answers file, by trace id and by normalised input."""

    source: str
    by_trace: dict[str, LossEntry] = field(default_factory=dict)
    by_input: dict[str, LossEntry] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    used: set[int] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.by_trace) + len(self.by_input)

    def find(self, trace: Trace, key: str | None = None) -> LossEntry | None:
        """The entry for ``trace`` (by ``key``, default its id; else by its first input's text, else by the
        task its importer read as what the app was asked: ``meta["task"]``)."""
        e = self.by_trace.get(key if key is not None else trace.id)
        if e is None and self.by_input:
            first = next((n.text for n in trace.nodes if n.kind == "input"), None)
            if first is not None:
                e = self.by_input.get(normalise(first))
            if e is None and isinstance(trace.meta.get("task"), str):  # the task as the app was given it
                e = self.by_input.get(normalise(trace.meta["task"]))
        if e is not None:
            self.used.add(e.line)
        return e

    def unused(self) -> list[str]:
        """One line per entry that named no trace of the set."""
        out = []
        for e in sorted([*self.by_trace.values(), *self.by_input.values()], key=lambda e: e.line):
            if e.line not in self.used:
                what = f"trace {e.trace!r}" if e.trace is not None else f"input {excerpt(e.input or '', 60)!r}"
                out.append(f"{self.source}:{e.line}: {what} is not in the set (no trace has that "
                           f"{'id' if e.trace is not None else 'first input'}); skipped")
        return out


def _entry(rec: Any, n: int, kind: str) -> tuple[LossEntry | None, str | None]:
    """A line's entry, or why it is not one."""
    if not isinstance(rec, dict):
        return None, f"not a JSON object (a {type(rec).__name__})"
    vals: dict[str, str | None] = {}
    for k in FIELDS:
        v = rec.get(k)
        if v is not None and not isinstance(v, (str, int, float)) or isinstance(v, bool):
            return None, f"field {k!r} must be a string"
        vals[k] = str(v) if v is not None else None
    if vals["trace"] is None and vals["input"] is None:
        return None, 'names no trace: give "trace": ID (or "input": TEXT, the trace\'s first user message)'
    if not (vals["loss"] or "").strip() and not (vals["expected"] or "").strip():
        need = '"expected": TEXT' if kind == "expected" else '"loss": TEXT (or "expected": TEXT)'
        return None, f"has no {need}"
    return LossEntry(n, **vals), None


def read_book(path: str | Path, kind: str = "losses") -> LossBook:
    """A losses file (``kind="losses"``) or an expected-answers file (``kind="expected"``).

    A file that cannot be read, or holds no usable line, is a one-line :class:`ConfigError`; a bad
    line is one warning (``book.warnings``) and the rest are read."""
    p = Path(path)
    shape = ('JSONL, one {"trace": ID, "expected": TEXT} or {"input": TEXT, "expected": TEXT} a line'
             if kind == "expected" else 'JSONL, one {"trace": ID, "loss": TEXT, "wrong": TEXT?, "expected": TEXT?} a line')
    text = read_user_text(p, f"the {kind} file ({shape})")
    book = LossBook(str(p))
    first_line: dict[tuple[str, str], int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            book.warnings.append(f"{p}:{n}: not JSON ({e.msg}); skipped")
            continue
        entry, why = _entry(rec, n, kind)
        if entry is None:
            book.warnings.append(f"{p}:{n}: {why}; skipped")
            continue
        unknown = sorted(set(rec) - FIELDS)
        if unknown:
            book.warnings.append(f"{p}:{n}: field(s) {', '.join(unknown)} ignored (known: {', '.join(sorted(FIELDS))})")
        key = ("trace", entry.trace) if entry.trace is not None else ("input", normalise(entry.input or ""))
        if key in first_line:
            book.warnings.append(f"{p}:{n}: {key[0]} {excerpt(key[1], 60)!r} again (first on line "
                                 f"{first_line[key]}, which is used); skipped")
            continue
        first_line[key] = n
        (book.by_trace if key[0] == "trace" else book.by_input)[key[1]] = entry
    if not len(book):
        first = book.warnings[0] if book.warnings else f"{p}: no line"
        raise ConfigError(f"the {kind} file {p} holds no usable line ({first}); give {shape}")
    return book
