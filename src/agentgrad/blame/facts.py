"""Fact readers: what counts as a fact in an agent's text, for the walks that follow a wrong value.

A walk that follows the text a loss names as wrong (``stop``, ``carry``, ``follow``, ``origin``,
``blend``, ``top2``, ``provenance:key``) asks a reader where a fact is: the key a value is stated
under (:meth:`FactReader.key_at`, :meth:`FactReader.key_span`), whether a token is the cue of a value
(:meth:`FactReader.cue_before`) and the unit of text a token stands for (:meth:`FactReader.unit`).

- ``lines``: ``key: value`` lines (``key = value``, ``"key": "value",``; :func:`line_key`); off such a
  line the fact is the line;
- ``prose``: sentences; a ``key: value`` line among them (a tool's record, a form) is still one fact;
- ``json``: JSON fields (``"key": value``, compact or not); text outside them is read as ``lines``.

A method's name chooses one (``NAME@prose``); otherwise :func:`detect_reader` reads the trace's
calls. The outcome of a blame names the reader (:class:`~agentgrad.blame.verdict.Verdict`).
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from agentgrad.errors import ConfigError

Region = Any  # character ranges of a text: ((start, end), ...)


def occurrences(text: str, needle: str, whole: bool = False) -> list[tuple[int, int]]:
    """Where ``needle`` occurs in ``text``; ``whole``: only where it is not part of a longer word or
    number (``7 km`` does not occur in ``17 km`` or ``1.7 km``, nor ``cat`` in ``cats``)."""
    out, at = [], text.find(needle)
    while at >= 0 and needle:
        end = at + len(needle)
        if not whole or not (joined(text[:at], needle) or joined(text[end:][::-1], needle[::-1])):
            out.append((at, end))
        at = text.find(needle, at + 1)
    return out


def joined(before: str, needle: str) -> bool:
    """Whether ``needle`` placed right after ``before`` continues a word or number there: a letter or
    digit on both sides, or a digit, a decimal point or comma and a digit across the edge (``1.|7``,
    ``7|.5``). Read backwards for the needle's end."""
    if not before:
        return False
    a, b = before[-1], needle[0]
    if a.isalnum() and b.isalnum():
        return True
    if a in ".," and b.isdigit():
        return len(before) > 1 and before[-2].isdigit()
    return b in ".," and a.isdigit() and len(needle) > 1 and needle[1].isdigit()


# --- the one key parser ----------------------------------------------------------------------------
# a line's key, its separator and the gap to its value: ``key: value``, ``"key": "value"``,
# ``key=value``; a colon between digits is a clock time's ("we have 15:30"), not a key's
KEY_LINE = re.compile(r"""[ \t{\[(,]*["']?[^\n:="']{1,40}["']?[ \t]*(?P<sep>=|:(?!\d)|(?<!\d):)[ \t]*["']?""")
# between a key and its value on one line: spaces, quotes and one ":" or "=" (``key: value``,
# ``"key": "value"``, ``key=value``); a comma, a bar or a bracket is a list, a row or an array,
# whose neighbouring item is another value, not the cue of this one
KEY_GAP = re.compile(r"""[ \t]*["']?[ \t]*[:=][ \t]*["']?[ \t]*""")
VALUE_TAIL = " \t\"',}])"  # what closes a value on its line (quotes, commas, brackets)


class LineKey(NamedTuple):
    key: str  # without the quotes, brackets and separator around it
    key_end: int  # where the separator starts: the key's text is ``text[line start:key_end]``
    value_start: int  # where the value starts (past the separator and the gap)
    value: str  # up to the line's end, without the quotes, commas and brackets that close it


def parse_line(text: str, start: int, end: int) -> LineKey | None:
    """The key of the line ``text[start:end]`` (:data:`KEY_LINE`), its value possibly empty (a key
    that ends its line), or None when the line has no key."""
    m = KEY_LINE.match(text, start, end)
    if m is None:
        return None
    return LineKey(text[start:m.end()].strip(" \t{[(,\"':="), m.start("sep"), m.end(),
                   text[m.end():end].rstrip(VALUE_TAIL))


def line_key(text: str, start: int, end: int) -> tuple[str, int, str] | None:
    """``(key, where its value starts, the value)`` of the ``key: value`` line ``text[start:end]``,
    the value without the quotes, commas and brackets around it; None when the line has no key and
    value (:func:`parse_line`)."""
    k = parse_line(text, start, end)
    if k is None or k.value_start >= end:
        return None
    return k.key, k.value_start, k.value


def line_bounds(text: str, pos: int) -> tuple[int, int]:
    """The line of ``text`` that ``pos`` lies on: ``(start, end)``, the newline excluded."""
    end = text.find("\n", pos)
    return text.rfind("\n", 0, pos) + 1, len(text) if end < 0 else end


# --- readers -----------------------------------------------------------------------------------------
class FactReader:
    """``lines``: a fact is a ``key: value`` line's value under its key (:func:`line_key`), or a line."""

    name = "lines"

    def key_at(self, text: str, region: Region) -> str | None:
        """The key whose value ``region`` (character ranges of ``text``) lies in, or None (free text,
        or the region is not the value)."""
        if not region:
            return None
        a, b = min(r[0] for r in region), max(r[1] for r in region)
        start, end = line_bounds(text, a)
        line = line_key(text, start, end)
        return line[0] if line is not None and line[1] <= a and b <= end and line[0] else None

    def key_span(self, text: str, key: str) -> tuple[int, int] | None:
        """Where the value of ``key`` lies (characters of ``text``) where it is last stated, or None."""
        found, at = None, 0
        for line in text.split("\n"):
            k = line_key(text, at, at + len(line))
            if k is not None and k[0] == key:
                found = (k[1], k[1] + len(k[2]))
            at += len(line) + 1
        return found

    def key_value(self, text: str, key: str) -> str | None:
        """The value of ``key`` where ``text`` last states it, or None."""
        found = self.key_span(text, key)
        return text[found[0]:found[1]] if found is not None else None

    def held(self, text: str, needle: str, key: str | None, whole: bool = False) -> list[tuple[int, int]]:
        """The occurrences of ``needle`` in ``text``; with a ``key``, those that are that key's value
        (another key's value that reads the same is another fact); ``whole``: :func:`occurrences`."""
        return [o for o in occurrences(text, needle, whole) if key is None or self.key_at(text, (o,)) == key]

    def cue_before(self, text: str, end: int, start: int) -> bool:
        """Whether a token ending at ``end`` is the cue right before an occurrence starting at ``start``:
        only spaces between, or the key of its value (:data:`KEY_GAP` between). The neighbouring
        value of a list, table row or array (``Lyon, snake``, ``| Lyon | snake |``) is not a cue."""
        gap = text[end:start]
        return end <= start and (not gap.strip() or KEY_GAP.fullmatch(gap) is not None)

    def unit(self, text: str, pos: int) -> tuple[int, int]:
        """The unit of text a token at ``pos`` stands for: on a ``key: value`` line the value (a model
        looks a value up by its key, so a gradient on the key points at it), else :meth:`plain_unit`."""
        start, end = line_bounds(text, pos)
        k = parse_line(text, start, end)
        if k is not None and k.value_start < end:
            start = k.value_start
        elif k is None:
            start, end = self.plain_unit(text, pos, start, end)
        while end > start and text[end - 1] in VALUE_TAIL:
            end -= 1
        return (start, end) if end > start else (text.rfind("\n", 0, pos) + 1, max(end, pos + 1))

    def plain_unit(self, text: str, pos: int, start: int, end: int) -> tuple[int, int]:
        """The unit of a token off any ``key: value`` line (``start``, ``end``: its line): the line."""
        return start, end


# a sentence ends at ".", "!" or "?" followed by white space and a capital, a digit or a quote
SENTENCE_END = re.compile(r"""(?<=[.!?])[ \t]+(?=[A-Z0-9"'(])""")


class ProseReader(FactReader):
    """``prose``: a fact is a sentence; a ``key: value`` line among them (a record) is read as ``lines``."""

    name = "prose"

    def plain_unit(self, text: str, pos: int, start: int, end: int) -> tuple[int, int]:
        """The sentence of the line ``text[start:end]`` that ``pos`` lies in."""
        for m in SENTENCE_END.finditer(text, start, end):
            if m.start() > pos:
                return start, m.start()
            start = m.end()
        return start, end


# a JSON field: a quoted key, a colon and a string, number, true, false or null
JSON_FIELD = re.compile(r'"(?P<key>(?:[^"\\\n]|\\.){1,40})"[ \t\r\n]*:[ \t\r\n]*'
                        r'(?:"(?P<str>(?:[^"\\\n]|\\.)*)"|(?P<lit>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null))')


class JsonReader(FactReader):
    """``json``: a fact is a JSON field's value under its key (any nesting, compact or not); text
    outside every field is read as ``lines``."""

    name = "json"

    @staticmethod
    def fields(text: str) -> list[tuple[str, int, int, int]]:
        """``(key, where the field starts, where its value starts, where its value ends)`` of every field."""
        out = []
        for m in JSON_FIELD.finditer(text):
            g = "str" if m.group("str") is not None else "lit"
            out.append((m.group("key"), m.start(), m.start(g), m.end(g)))
        return out

    def key_at(self, text: str, region: Region) -> str | None:
        if not region:
            return None
        a, b = min(r[0] for r in region), max(r[1] for r in region)
        hit = next((k for k, _, va, vb in self.fields(text) if va <= a and b <= vb and k), None)
        return hit if hit is not None else super().key_at(text, region)

    def key_span(self, text: str, key: str) -> tuple[int, int] | None:
        found = [(va, vb) for k, _, va, vb in self.fields(text) if k == key]
        return found[-1] if found else super().key_span(text, key)

    def unit(self, text: str, pos: int) -> tuple[int, int]:
        hit = next(((va, vb) for _, fa, va, vb in self.fields(text) if fa <= pos < max(vb, va + 1) and vb > va), None)
        return hit if hit is not None else super().unit(text, pos)


LINES, PROSE, JSON = FactReader(), ProseReader(), JsonReader()
READERS: dict[str, FactReader] = {r.name: r for r in (LINES, PROSE, JSON)}


def get_reader(name: str) -> FactReader:
    """The reader named ``name``; an unknown name is a one-line :class:`ConfigError`."""
    if name not in READERS:
        raise ConfigError(f"unknown fact reader {name!r}; valid: {', '.join(READERS)}")
    return READERS[name]


def _is_json(text: str) -> bool:
    body = text.strip()
    if body.startswith("```"):  # a fenced block: ```json ... ```
        body = body.strip("`").removeprefix("json").strip()
    a, b = body.find("{"), body.rfind("}")
    if a < 0 or b < a:
        return False
    try:
        json.loads(body[a:b + 1])
    except ValueError:
        return False
    return True


def detect_reader(trace: Any) -> FactReader:
    """The reader of the trace's call outputs: ``json`` where most of them hold a JSON object,
    ``lines`` where at least half of their lines are ``key: value`` lines (or there is no call
    text), else ``prose``."""
    texts = [n.text for n in trace.nodes if n.kind == "call" and n.text.strip()]
    if not texts:
        return LINES
    if 2 * sum(_is_json(t) for t in texts) > len(texts):
        return JSON
    lines = [(t, a, a + len(ln)) for t in texts for a, ln in _lines(t) if ln.strip()]
    keyed = sum(line_key(t, a, b) is not None for t, a, b in lines)
    return LINES if 2 * keyed >= len(lines) else PROSE


def _lines(text: str) -> list[tuple[int, str]]:
    out, at = [], 0
    for line in text.split("\n"):
        out.append((at, line))
        at += len(line) + 1
    return out
