"""A call node rendered for teacher-forced scoring, with every span and the output as token ranges.

The recorded messages plus the recorded output (as the assistant turn) go through the scorer's
chat template. Where each message's content lands in the rendered string is found by rendering
once with unique placeholder contents (our own sentinels) and checking that substituting the real
contents reproduces the real rendering exactly; span offsets then shift by their message's
offset. The string is tokenised once, with offsets, so templates that add a BOS token (or any
other text) shift nothing: character ranges map to token ranges through the offsets.

A reply's tool calls are part of its output. Where the scorer's chat template cannot show tool
calls (it renders an assistant turn the same with and without them, as SmolLM2's does), they are
scored as text instead: one JSON line ``{"name": ..., "arguments": ...}`` per call after the reply's
text, so that a call generated elsewhere (an OpenAI-compatible server) is not an empty output with
zero gradients. The reply's text keeps its characters, so loss spans stay valid.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from agentgrad.core.trace import Node, Trace
from agentgrad.errors import TraceError
from agentgrad.models.hf import render_chat

_PH = "\ue000agentgrad-{}\ue001"  # private-use characters: never in real text or templates


@dataclass
class RenderedCall:
    """A call node as the scorer sees it."""

    text: str  # the rendered conversation, output included
    input_ids: list[int]  # tokens of ``text`` up to the end of the output
    output_range: tuple[int, int]  # [start, end) token indices of the output
    source_ranges: dict[int, list[tuple[int, int]]]  # source node -> token ranges of its spans
    source_chars: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # char ranges in text
    source_at: dict[int, list[int]] = field(default_factory=dict)  # where in the source's text each range starts
    method: str = "placeholder"  # how message offsets were found
    output_char_start: int = 0  # where the output begins in ``text``
    offsets: list[tuple[int, int]] = field(default_factory=list)  # character range of every token
    message_starts: list[int] = field(default_factory=list)  # where each message's content begins in ``text``

    def prompt_tokens(self, node: Node) -> dict[int, tuple[int, int, int]]:
        """The tokens of the call's prompt (its first system message, less any span in it):
        position -> (message, start, end), as :meth:`token_chars`. Empty without a system message."""
        i = next((k for k, m in enumerate(node.messages) if m.get("role") == "system"), None)
        if i is None or i >= len(self.message_starts):
            return {}
        content = node.messages[i].get("content") or ""
        base = self.message_starts[i]
        ends = [e for _, e in self.offsets]
        taken = {t for ranges in self.source_ranges.values() for a, b in ranges for t in range(a, b)}
        first, last = char_to_token_range(self.offsets, ends, base, base + len(content))
        out: dict[int, tuple[int, int, int]] = {}
        for t in range(first, last):
            ca, cb = max(self.offsets[t][0], base), min(self.offsets[t][1], base + len(content))
            if cb > ca and t not in taken:
                out[t] = (i, ca - base, cb - base)
        return out

    def token_chars(self, node: Node, source: int) -> dict[int, tuple[int, int, int]]:
        """Token position -> (message, start, end): the characters of ``node``'s message that the
        token covers within a span of ``source`` (a token that a BPE merge shares with text outside
        the span is clipped to the span)."""
        out: dict[int, tuple[int, int, int]] = {}
        ends = [e for _, e in self.offsets]
        for s in node.spans:
            if s.source != source:
                continue
            base = self.message_starts[s.message]
            a, b = base + s.start, base + s.end
            first, last = char_to_token_range(self.offsets, ends, a, b)
            for t in range(first, last):
                ca, cb = max(self.offsets[t][0], a), min(self.offsets[t][1], b)
                if cb > ca and t not in out:
                    out[t] = (s.message, ca - base, cb - base)
        return out

    def output_tokens_for(self, chars: list[tuple[int, int]]) -> list[int]:
        """Output token positions overlapping the given character ranges of the output text."""
        o_s, o_e = self.output_range
        base = self.output_char_start
        return [t for t in range(o_s, o_e)
                if any(self.offsets[t][0] < base + b and self.offsets[t][1] > base + a for a, b in chars if b > a)]

    @property
    def variable_start(self) -> int:
        """First token that needs a gradient (start of the earliest span), or the output start."""
        starts = [a for ranges in self.source_ranges.values() for a, b in ranges if b > a]
        return min(starts + [self.output_range[0]])


def _assistant(node: Node, content: str) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if node.tool_calls:
        msg["tool_calls"] = [c.to_dict() for c in node.tool_calls]
    return msg


def _offsets_by_placeholder(tok: Any, node: Node) -> tuple[str, list[int], int] | None:
    """(rendered text, start of each message's content, end of the output) or None if not exact."""
    msgs = [dict(m, content=_PH.format(i)) for i, m in enumerate(node.messages)]
    n = len(msgs)
    templ = render_chat(tok, msgs + [_assistant(node, _PH.format(n))], node.tools or None)
    contents = [m.get("content") or "" for m in node.messages] + [node.text]
    out, starts, pos = [], [], 0
    for i, content in enumerate(contents):
        ph = _PH.format(i)
        at = templ.find(ph, pos)
        if at < 0:
            return None
        out.append(templ[pos:at])
        starts.append(sum(map(len, out)))
        out.append(content)
        pos = at + len(ph)
    tail = templ[pos:]
    text = "".join(out) + tail
    real = render_chat(tok, list(node.messages) + [_assistant(node, node.text)], node.tools or None)
    if text != real:
        return None
    # The output ends where the end-of-turn trailer begins: the trailer is what follows the
    # content of a plain assistant message; what lies between (rendered tool calls) is output.
    ref = render_chat(tok, msgs + [{"role": "assistant", "content": _PH.format(n)}], node.tools or None)
    trailer = ref[ref.rfind(_PH.format(n)) + len(_PH.format(n)) :]
    end = len(text) - len(trailer) if node.tool_calls and trailer and tail.endswith(trailer) else starts[-1] + len(node.text)
    return text, starts, end


def _offsets_by_order(tok: Any, node: Node) -> tuple[str, list[int], int]:
    """Fallback for templates that transform placeholders: find each content, in order."""
    text = render_chat(tok, list(node.messages) + [_assistant(node, node.text)], node.tools or None)
    starts, pos = [], 0
    for i, content in enumerate([m.get("content") or "" for m in node.messages] + [node.text]):
        at = text.find(content, pos)
        if at < 0:
            raise TraceError(
                f"node {node.id}: the scorer's chat template changes the text of message {i}; "
                "its spans cannot be located exactly"
            )
        starts.append(at)
        pos = at + len(content)
    return text, starts, starts[-1] + len(node.text)


def char_to_token_range(offsets: list[tuple[int, int]], ends: list[int], a: int, b: int) -> tuple[int, int]:
    """Tokens overlapping characters [a, b) (a token that a BPE merge shares with a neighbour counts)."""
    if b <= a:
        return (0, 0)
    first = bisect.bisect_right(ends, a)  # first token ending after a
    last = first
    while last < len(offsets) and offsets[last][0] < b:
        last += 1
    return (first, last)


def template_drops_tool_calls(tok: Any, node: Node) -> bool:
    """Whether ``tok``'s chat template renders an assistant turn the same with and without its tool calls."""
    probe = [{"role": "user", "content": "?"}]
    return render_chat(tok, probe + [_assistant(node, "")], node.tools or None) == \
        render_chat(tok, probe + [{"role": "assistant", "content": ""}], node.tools or None)


def tool_calls_as_text(node: Node) -> str:
    """The reply's text, then one JSON line per tool call (how a template without tool calls sees them)."""
    lines = [json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False) for c in node.tool_calls]
    return "\n".join(([node.text] if node.text else []) + lines)


# the loss-conditioned objective (``judged``): the scorer, as a judge, reads a call (its inputs and
# its reply), then the verbal loss and this question; the objective contrasts its two answers
JUDGMENT = ("The team's work failed. What went wrong:\n{loss}\n\n"
            "Is the mistake that caused this failure in the conversation above? Answer Yes or No.")
VERDICTS = ("Yes", "No")  # J = mean log p(Yes) - mean log p(No): towards "the mistake is here"


def judgment_call(node: Node, loss_text: str) -> Node:
    """``node`` as a judge reads it: its messages (every span where it was), its reply as an assistant
    turn, then a user turn with the verbal loss and :data:`JUDGMENT`'s question; the output is the
    first of :data:`VERDICTS`. Scored with the second as the contrast
    (:mod:`agentgrad.attribution.contrast`), the gradient with respect to the call's sources says which
    of them make the scorer judge that the mistake is here, given the loss. The messages before the
    reply are unchanged, so the sources' tokens (and the prompt's prefix cache) are the call's own."""
    reply = tool_calls_as_text(node) if node.tool_calls else node.text
    messages = [*node.messages, {"role": "assistant", "content": reply},
                {"role": "user", "content": JUDGMENT.format(loss=loss_text)}]
    return dataclasses.replace(node, messages=messages, text=VERDICTS[0], tool_calls=[],
                               meta={**node.meta, "judged": True})


def render_call(tok: Any, node: Node) -> RenderedCall:
    """Render ``node`` with ``tok``'s chat template and map its spans and output to tokens."""
    if node.kind != "call":
        raise TraceError(f"node {node.id} is a {node.kind} node; only call nodes are scored")
    if node.tool_calls and template_drops_tool_calls(tok, node):
        node = dataclasses.replace(node, text=tool_calls_as_text(node), tool_calls=[])
    found = _offsets_by_placeholder(tok, node)
    method = "placeholder"
    if found is None:
        found, method = _offsets_by_order(tok, node), "order"
    text, starts, out_end = found
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    ends = [e for _, e in offsets]
    out_start = starts[-1]
    o_s, o_e = char_to_token_range(offsets, ends, out_start, out_end)
    source_ranges: dict[int, list[tuple[int, int]]] = {}
    source_chars: dict[int, list[tuple[int, int]]] = {}
    source_at: dict[int, list[int]] = {}
    for s in node.spans:
        a, b = starts[s.message] + s.start, starts[s.message] + s.end
        source_chars.setdefault(s.source, []).append((a, b))
        source_at.setdefault(s.source, []).append(s.at)
        source_ranges.setdefault(s.source, []).append(char_to_token_range(offsets, ends, a, b))
    return RenderedCall(
        text=text,
        input_ids=list(enc["input_ids"][:o_e]) if o_e > o_s else list(enc["input_ids"]),
        output_range=(o_s, o_e),
        source_ranges=source_ranges,
        source_chars=source_chars,
        source_at=source_at,
        method=method,
        output_char_start=out_start,
        offsets=offsets,
        message_starts=starts[:-1],
    )


def window_call(tok: Any, node: Node, limit: int) -> Node:
    """``node`` cut to ``limit`` tokens by dropping its oldest source blocks: the steps nearest the call
    that fit.

    The message with the most spans (a log's transcript, one block per earlier step, as
    :func:`agentgrad.core.trace.join_blocks` makes it) keeps its first block (the task) and loses the
    blocks after it, oldest first, the fewest that make the rendered call fit. A block is everything
    from the end of the previous span to the end of its own, so its header and separator go with it.
    ``parents`` stay as they were: what the call depended on does not change, only what the scorer
    reads (a dropped step gets no gradient edge from this call; it is still reached through the calls
    after it). ``meta["window"]`` records the blocks dropped and the tokens before and after. A call
    that fits is returned as is; one without such a transcript, a chat of one message a step, drops its
    oldest messages instead (:func:`_window_messages`); one that does not fit
    even with every block but the first dropped comes back with them dropped (still too long: the
    scorer then skips or raises as it is set to)."""
    tokens = len(render_call(tok, node).input_ids)
    if tokens <= limit or not node.spans:
        return node
    counts: dict[int, int] = {}
    for s in node.spans:
        counts[s.message] = counts.get(s.message, 0) + 1
    msg = max(counts, key=lambda m: (counts[m], m))
    mine = sorted((s for s in node.spans if s.message == msg), key=lambda s: s.start)
    if len(mine) < 2 or any(b.start < a.end for a, b in zip(mine, mine[1:])):
        return _window_messages(tok, node, limit, tokens)

    def cut(d: int) -> Node:  # blocks 1..d dropped
        lo, hi = mine[0].end, mine[d].end
        content = node.messages[msg]["content"]
        messages = [dict(m) for m in node.messages]
        messages[msg]["content"] = content[:lo] + content[hi:]
        gone = {id(s) for s in mine[1:d + 1]}
        spans = [s if s.message != msg or s.start < lo else dataclasses.replace(s, start=s.start - (hi - lo),
                                                                               end=s.end - (hi - lo))
                 for s in node.spans if id(s) not in gone]
        return dataclasses.replace(node, messages=messages, spans=spans,
                                   meta={**node.meta, "window": {"dropped": d, "tokens_before": tokens}})

    lo_d, hi_d = 1, len(mine) - 1  # the fewest drops that fit lies in [lo_d, hi_d] (or none fits)
    best = cut(hi_d)
    if (n := len(render_call(tok, best).input_ids)) > limit:
        best.meta["window"]["tokens"] = n
        return best
    while lo_d < hi_d:
        mid = (lo_d + hi_d) // 2
        if len(render_call(tok, cut(mid)).input_ids) <= limit:
            hi_d = mid
        else:
            lo_d = mid + 1
    best = cut(hi_d)
    best.meta["window"]["tokens"] = len(render_call(tok, best).input_ids)
    return best


def _window_messages(tok: Any, node: Node, limit: int, tokens: int) -> Node:
    """A chat call (one message a step: tau-bench's, a chat JSONL's) cut to ``limit`` tokens by dropping
    its oldest messages after the first that is not a system message (the task), the fewest that make it
    fit; the last message always stays. Spans of the dropped messages go, later ones move up. Returned
    as is where there is nothing to drop."""
    keep = [i for i, m in enumerate(node.messages) if m.get("role") in ("system", "developer")]
    first = next((i for i, m in enumerate(node.messages) if i not in keep), None)
    if first is None:
        return node
    droppable = [i for i in range(first + 1, len(node.messages) - 1) if i not in keep]
    if not droppable:
        return node

    def cut(d: int) -> Node:  # the d oldest droppable messages dropped
        gone = set(droppable[:d])
        index = {i: i - sum(g < i for g in gone) for i in range(len(node.messages)) if i not in gone}
        spans = [dataclasses.replace(sp, message=index[sp.message]) for sp in node.spans if sp.message not in gone]
        return dataclasses.replace(node, messages=[dict(m) for i, m in enumerate(node.messages) if i not in gone],
                                   spans=spans, meta={**node.meta, "window": {"dropped": d, "tokens_before": tokens}})

    lo_d, hi_d = 1, len(droppable)
    best = cut(hi_d)
    if (n := len(render_call(tok, best).input_ids)) > limit:
        best.meta["window"]["tokens"] = n
        return best
    while lo_d < hi_d:
        mid = (lo_d + hi_d) // 2
        if len(render_call(tok, cut(mid)).input_ids) <= limit:
            hi_d = mid
        else:
            lo_d = mid + 1
    best = cut(hi_d)
    best.meta["window"]["tokens"] = len(render_call(tok, best).input_ids)
    return best


def window_trace(tok: Any, trace: Trace, limit: int) -> Trace:
    """A copy of ``trace`` whose calls longer than ``limit`` tokens keep only the steps nearest them that
    fit (:func:`window_call`)."""
    out = Trace.from_dict(trace.to_dict())
    out.nodes = [window_call(tok, n, limit) if n.kind == "call" else n for n in out.nodes]
    return out


def calls_in_history(trace: Trace) -> Trace:
    """A copy of ``trace`` whose calls read the tool calls made before them. A chat log's reader records an
    assistant turn that replays an earlier call as the call's text, with a span from the call over all of
    it; where that call made tool calls, the turn's text is empty (or its reply alone), and a template such
    as SmolLM2's, given no calls, renders the turn empty: the calls' names and arguments are then no source
    of any later call. Here each call that made tool calls has as its text its calls written out, one JSON
    line each after its reply (:func:`tool_calls_as_text`: how a template that cannot show them scores its
    output), the turns that replay it hold that text, and their spans cover it. Other turns are left as
    they are (docs/agentrx.md)."""
    out = Trace.from_dict(trace.to_dict())
    made = {n.id: n for n in out.nodes if n.kind == "call" and n.tool_calls}
    texts = {i: tool_calls_as_text(n) for i, n in made.items()}
    nodes = []
    for n in out.nodes:
        if n.kind != "call":
            nodes.append(n)
            continue
        messages, spans = list(n.messages), list(n.spans)
        per_message: dict[int, list[int]] = {}
        for k, s in enumerate(spans):
            per_message.setdefault(s.message, []).append(k)
        for i, ks in per_message.items():  # a turn that one span, from a call that made tool calls, fills whole
            s, m = spans[ks[0]], messages[i]
            content = m.get("content") or ""
            if (len(ks) == 1 and m.get("role") == "assistant" and s.source in made
                    and (s.start, s.end, s.at) == (0, len(content), 0) and content == made[s.source].text):
                messages[i] = {**m, "content": texts[s.source]}
                spans[ks[0]] = dataclasses.replace(s, end=len(texts[s.source]))
        extra = {"text": texts[n.id], "tool_calls": []} if n.id in made else {}
        nodes.append(dataclasses.replace(n, messages=messages, spans=spans, **extra))
    out.nodes = nodes
    return out


def source_windows(r: Any, source: int) -> list[tuple[int, int, int]]:
    """``(start, end, at)`` of each range of ``r.text`` that came from ``source``: its characters
    ``[start, end)`` are the source's text from character ``at`` on."""
    ats = getattr(r, "source_at", {}).get(source) or []
    return [(a, b, ats[i] if i < len(ats) else 0) for i, (a, b) in enumerate(r.source_chars.get(source, []))]
