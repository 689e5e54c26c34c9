"""Text that remembers where each of its characters came from.

An agent's output, an input of the outside world and a tool's result are all :class:`Text`
values whose segments name the trace node that produced them. Joining, concatenating and
formatting keep the segments, so when a message is rendered for a model the exact character
range of every piece that came from another node is known (a span), without searching strings.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any, Iterable


@dataclass(frozen=True)
class Segment:
    """A run of characters and the node that produced it (``None``: literal text)."""

    text: str
    source: int | None = None


class Text:
    """An immutable string made of segments with provenance.

    ``str(t)`` gives the plain text. ``+`` with a ``str`` or another ``Text`` keeps provenance;
    string methods that return new strings (``t.lower()``) return plain ``str`` on purpose, since
    the result no longer maps character for character to its sources.
    """

    __slots__ = ("segments",)

    def __init__(self, value: "str | Text | Iterable[Segment]" = "", source: int | None = None):
        if isinstance(value, Text):
            segs = value.segments
        elif isinstance(value, str):
            segs = (Segment(value, source),)
        else:
            segs = tuple(value)
        merged: list[Segment] = []
        for s in segs:
            if merged and merged[-1].source == s.source:
                merged[-1] = Segment(merged[-1].text + s.text, s.source)
            elif s.text or s.source is not None:
                merged.append(s)
        object.__setattr__(self, "segments", tuple(merged))

    def __setattr__(self, name: str, value: Any) -> None:  # immutability, like str
        raise AttributeError("Text is immutable")

    # --- str-like behaviour -------------------------------------------------------------
    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        srcs = sorted({s.source for s in self.segments if s.source is not None})
        return f"Text({self.text!r}, sources={srcs})"

    def __len__(self) -> int:
        return sum(len(s.text) for s in self.segments)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Text):
            return self.segments == other.segments
        if isinstance(other, str):
            return self.text == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)

    def __contains__(self, item: str) -> bool:
        return str(item) in self.text

    def __add__(self, other: "str | Text") -> "Text":
        if not isinstance(other, (str, Text)):
            return NotImplemented
        return Text(self.segments + Text(other).segments)

    def __radd__(self, other: "str | Text") -> "Text":
        if not isinstance(other, (str, Text)):
            return NotImplemented
        return Text(Text(other).segments + self.segments)

    def __getattr__(self, name: str) -> Any:
        # Delegate read-only str methods (strip, lower, startswith, ...); results are plain str.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.text, name)

    # --- provenance ---------------------------------------------------------------------
    @property
    def sources(self) -> list[int]:
        """Node ids that contributed characters, in order of first appearance."""
        out: list[int] = []
        for s in self.segments:
            if s.source is not None and s.source not in out:
                out.append(s.source)
        return out

    def spans(self) -> list[tuple[int, int, int]]:
        """``(source, start, end)`` character ranges of every sourced segment."""
        out, pos = [], 0
        for s in self.segments:
            if s.source is not None:
                out.append((s.source, pos, pos + len(s.text)))
            pos += len(s.text)
        return out

    @classmethod
    def join(cls, sep: "str | Text", items: Iterable["str | Text"]) -> "Text":
        """Like ``sep.join(items)``, keeping every item's provenance."""
        segs: list[Segment] = []
        for i, item in enumerate(items):
            if i:
                segs.extend(Text(sep).segments)
            segs.extend(Text(item).segments)
        return cls(segs)

    @classmethod
    def format(cls, template: str, *args: Any, **kwargs: Any) -> "Text":
        """``template.format(...)`` with ``{name}`` / ``{0}`` fields, keeping provenance.

        Only plain fields are supported (no attribute access, conversion or format spec), so that
        every field maps to its value's characters exactly.
        """
        segs: list[Segment] = []
        auto = 0
        for literal, field, spec, conv in string.Formatter().parse(template):
            if literal:
                segs.append(Segment(literal))
            if field is None:
                continue
            if spec or conv:
                raise ValueError(f"template field {{{field}}} may not use a conversion or format spec")
            if field == "":
                field = str(auto)
                auto += 1
            if field.isdigit():
                value = args[int(field)]
            elif field in kwargs:
                value = kwargs[field]
            else:
                raise KeyError(field)
            segs.extend(as_text(value).segments)
        return cls(segs)


def as_text(value: Any) -> Text:
    """Coerce an agent input to :class:`Text`: lists are joined by newlines."""
    if isinstance(value, Text):
        return value
    if isinstance(value, str):
        return Text(value)
    if isinstance(value, (list, tuple)):
        return Text.join("\n", [as_text(v) for v in value])
    return Text(str(value))


# words too common to say that two texts share anything (a prompt's line and an output, a loss and an output)
STOPWORDS = frozenset("a an and are as at be by for from in is it its of on or that the this to with you your "
                      "i me my we our".split())


def content_words(text: str) -> set[str]:
    """The lower-cased words of ``text`` (letters and digits), stop words left out."""
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS}
