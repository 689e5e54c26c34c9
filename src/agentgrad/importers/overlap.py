"""The message-overlap rule: which characters of a call's messages came from which earlier node.

A span exporter records what each LLM call was sent, not where each piece came from. The one thing
an import can rely on is the text itself: a message whose content is an earlier node's output (a
handoff's conversation, a tool result, a worker's reply in a supervisor's history) came from that
node (when several nodes produced the same text, a call's repeated messages of it are matched to
them in order, the last message to the latest node: a conversation's history is chronological), and so, in a prompt a framework composed from a template, does every place where an earlier
output occurs whole. :class:`Produced` records the outputs in trace order and finds them in later
messages, giving exact character ranges (``Span``), the latest producer of a text first.

Containment is matched only for outputs of at least :data:`MIN_CONTAINED` characters that begin and
end at word boundaries of the message (``"Paris"`` is not found inside ``"Parisian"``), and the
matches of one message do not overlap (at each place the longest output wins). Candidates are
looked up by their first :data:`KEY` characters at the word starts of a message, so a message costs
one dictionary probe per word, whatever the number of earlier outputs.
"""

from __future__ import annotations

import re

from agentgrad.core.trace import Span

MIN_CONTAINED = 8
KEY = 8
MIN_FRAGMENT = 24  # a quoted part of an earlier output: at least this many characters (fixed, not tuned)
_STARTS = re.compile(r"(?<![0-9A-Za-z_])(?=\S)")


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


class Produced:
    """The texts that nodes of one trace produced, and the spans they make in later messages."""

    def __init__(self) -> None:
        self.exact: dict[str, int] = {}  # text -> the latest node that produced it
        self.producers: dict[str, list[int]] = {}  # text -> every node that produced it, in order
        self._index: dict[str, list[str]] = {}  # first KEY characters -> texts (longest first)
        self._parts: dict[str, list[tuple[int, str, int]]] = {}  # KEY characters at a word start -> (node, text, at)

    def add(self, node: int, text: str, quotable: bool = True) -> None:
        """Record ``node``'s output; ``quotable``: a later message may quote a part of it (an agent's or
        a tool's output), not only the whole (an input the import made of an unmatched message)."""
        if not text:
            return
        new = text not in self.exact
        self.exact[text] = node
        self.producers.setdefault(text, []).append(node)
        if new and len(text) >= MIN_CONTAINED:
            bucket = self._index.setdefault(text[:KEY], [])
            bucket.append(text)
            bucket.sort(key=len, reverse=True)
        if quotable and len(text) >= MIN_FRAGMENT:
            for m in _STARTS.finditer(text):
                if len(text) - m.start() >= MIN_FRAGMENT:
                    self._parts.setdefault(text[m.start():m.start() + KEY], []).append((node, text, m.start()))

    def whole(self, contents: list[str]) -> list[int | None]:
        """For each message of one call, the node whose output it is whole (None if none): repeated
        texts matched to their producers in order, the last message to the latest producer."""
        out: list[int | None] = [None] * len(contents)
        used: dict[str, int] = {}
        for j in range(len(contents) - 1, -1, -1):
            nodes = self.producers.get(contents[j]) if contents[j] else None
            if nodes:
                k = used.get(contents[j], 0)
                out[j] = nodes[max(len(nodes) - 1 - k, 0)]
                used[contents[j]] = k + 1
        return out

    def fragments(self, content: str, message: int, taken: list[Span]) -> list[Span]:
        """Spans of the places outside ``taken`` where ``content`` quotes a part of an earlier output of
        at least :data:`MIN_FRAGMENT` characters, from a word start to a word end: an output re-rendered
        by a framework (an ``Observation:`` of it, a tool's argument repeated, a truncated or escaped
        copy keeps such runs). At each place the longest quoted run wins, its latest producer first."""
        out: list[Span] = []
        cover = sorted((s.start, s.end) for s in taken)
        covered = 0
        for m in _STARTS.finditer(content):
            i = m.start()
            if i < covered or any(a <= i < b for a, b in cover):
                continue
            best, src, at_of = 0, None, {}
            for node, text, at in reversed(self._parts.get(content[i:i + KEY], ())):
                n = 0
                limit = min(len(text) - at, len(content) - i)
                while n < limit and content[i + n] == text[at + n]:
                    n += 1
                while n and _word(content[i + n - 1]) and i + n < len(content) and _word(content[i + n]):
                    n -= 1  # end at a word end
                if any(a < i + n and i < b for a, b in cover):
                    n = min(a for a, b in cover if a > i) - i if any(a > i for a, b in cover) else n
                if n > best:
                    best, src, at_of = n, node, {node: at}
            if src is not None and best >= MIN_FRAGMENT:
                out.append(Span(src, message, i, i + best, at_of[src]))
                covered = i + best
        return out

    def spans(self, content: str, message: int, whole: int | None = None) -> list[Span]:
        """Spans of ``content`` (message ``message``) on earlier nodes: the whole message when it is one
        node's output (``whole``: that node, from :meth:`whole`), else every place where an earlier
        output occurs whole."""
        src = whole if whole is not None else self.exact.get(content)
        if src is not None:
            return [Span(src, message, 0, len(content))]
        if len(content) < MIN_CONTAINED or not self._index:
            return []
        out: list[Span] = []
        covered = 0
        for m in _STARTS.finditer(content):
            i = m.start()
            if i < covered:
                continue
            bucket = self._index.get(content[i:i + KEY])
            if not bucket:
                continue
            for text in bucket:
                end = i + len(text)
                if content.startswith(text, i) and not (end < len(content) and _word(content[end])
                                                        and _word(text[-1])):
                    out.append(Span(self.exact[text], message, i, end))
                    covered = end
                    break
        return out
