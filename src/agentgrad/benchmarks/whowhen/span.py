"""Where a failed Who&When log states its wrong answer: a loss span for logs that have none.

A Who&When log carries no loss span, so the content rules (``carry``, ``stop``, ``follow``), the
``targeted`` objective and the string walk (``provenance``) have no wrong text to follow. With the
task's ground-truth answer, the team's produced answer can be located without a model:

1. the **answer units** of a message: numbers (``$1,234.5``, ``35%``) where the ground truth is a
   number, else phrases set in bold (``**...**``) or double quotes (at most 80 characters); never
   inside a fenced code block (``````...``````); not a list marker (``2.`` or ``2)`` at the start of
   a line) or a reference mark (``[7]``), not a heading (a phrase ending in a colon) nor the word
   ``TERMINATE``; a code-execution reply that failed (``exitcode: N`` with N != 0) holds none;
2. a unit **disagrees** with the ground truth when, for a number, its value differs from the
   ground truth's at the ground truth's precision (``31.666`` agrees with ``31.67``), and for a
   phrase, neither's words contain the other's (case and punctuation aside);
3. the messages are read from the last agent message backwards, over at most ``MAX_MESSAGES``
   messages that say more than ``TERMINATE``; the first that holds a disagreeing unit is the
   loss's target, and its last disagreeing unit is the span.

A log where nothing is found keeps the loss of :func:`~agentgrad.benchmarks.whowhen.bench.whowhen_loss`
(the final call, no span), and is counted. These rules were fixed before any log was scored with
them (the development split is the first 44 algorithm logs by name, as for the other objectives).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentgrad.core.trace import Trace

MAX_MESSAGES = 3  # substantive agent messages read back from the end of the log
MAX_PHRASE = 80

_NUMBER = re.compile(r"(?<![\w.$,])[-+]?\$?\d+(?:,\d{3})*(?:\.\d+)?%?(?![\w,]\d|\w)")
_GT_NUMBER = re.compile(r"^\s*\$?\s*([-+]?\d+(?:,\d{3})*(?:\.(\d+))?)\s*%?\s*[A-Za-z. ]{0,12}$")
_BOLD = re.compile(r"\*\*([^*\n]{1,%d}?)\*\*" % MAX_PHRASE)
_QUOTED = re.compile(r"\"([^\"\n]{2,%d})\"" % MAX_PHRASE)
_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
_EXIT = re.compile(r"^\s*exitcode:\s*(-?\d+)")
_MARKER = re.compile(r"^[ \t]*[-+]?\d+$")  # the text of a line before a number that is a list marker


@dataclass(frozen=True)
class AnswerSpan:
    """The call whose output states the wrong answer, and the characters of that answer in it."""

    node: int
    start: int
    end: int
    text: str


def _number(text: str) -> float | None:
    try:
        return float(text.replace("$", "").replace(",", "").rstrip("%"))
    except ValueError:
        return None


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _contains(outer: list[str], inner: list[str]) -> bool:
    return bool(inner) and any(outer[i:i + len(inner)] == inner for i in range(len(outer) - len(inner) + 1))


def _substantive(text: str) -> bool:
    return bool(text.replace("TERMINATE", "").strip())


def answer_units(text: str, numeric: bool) -> list[tuple[int, int]]:
    """The character ranges of ``text``'s answer units (numbers, or bold and quoted phrases), in order."""
    if (m := _EXIT.match(text)) and int(m.group(1)) != 0:
        return []
    code = [(m.start(), m.end()) for m in _FENCE.finditer(text)]
    if numeric:
        found = [(m.start(), m.end()) for m in _NUMBER.finditer(text)
                 if not (_MARKER.match(text[text.rfind("\n", 0, m.start()) + 1:m.end()])
                         and text[m.end():m.end() + 1] in (".", ")"))
                 and not (text[m.start() - 1:m.start()] == "[" and text[m.end():m.end() + 1] == "]")]
    else:
        found = sorted((m.start(1), m.end(1)) for rx in (_BOLD, _QUOTED) for m in rx.finditer(text)
                       if not m.group(1).rstrip().endswith(":") and m.group(1).strip() != "TERMINATE")
    return [(a, b) for a, b in found if not any(s <= a < e for s, e in code)]


def disagrees(unit: str, truth: str) -> bool:
    """Whether an answer unit states something other than the ground truth (see the module docstring)."""
    if (g := _GT_NUMBER.match(truth)) is not None:
        v, t = _number(unit), _number(g.group(1))
        if v is None or t is None:
            return True
        half = 0.5 * 10 ** -len(g.group(2) or "")
        return abs(v - t) > half + 1e-9 * max(1.0, abs(t))
    u, t = _words(unit), _words(truth)
    return bool(u) and not (_contains(u, t) or _contains(t, u))


def answer_span(trace: Trace, truth: str) -> AnswerSpan | None:
    """Where the log states an answer that is not ``truth`` (None where no such unit is found)."""
    truth = str(truth).strip()
    if not truth:
        return None
    numeric = _GT_NUMBER.match(truth) is not None
    read = 0
    for node in reversed(trace.calls()):
        if not _substantive(node.text):
            continue
        read += 1
        wrong = [(a, b) for a, b in answer_units(node.text, numeric) if disagrees(node.text[a:b], truth)]
        if wrong:
            a, b = wrong[-1]
            return AnswerSpan(node.id, a, b, node.text[a:b])
        if read >= MAX_MESSAGES:
            return None
    return None
