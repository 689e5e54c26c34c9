"""Token-level precision of the planted-fault benchmark: does the gradient's peak lie on the corrupted value?

Per objective: at the loss's call, within the source that carried the corrupted value to it,
whether the highest-scoring token lies inside the corrupted value (``hit1``) and the share of the source's gradient mass (L1) on it (``mass``). A token scores by
the L1 norm of its gradient (what the walk reads), and also, under ``abs_gxi``, by the magnitude of
gradient x input (|g_t . e_t|), which discounts tokens the model leans on whatever they say (a
line's key): chosen on the development seed (10), reported beside L1 on the others; and under
``gxi`` by g_t . e_t with its sign (first order, how much the token raises the objective: under
``contrast``, how much it pushes the wrong value over the expected one; mass: the share of the
positive parts); and under ``l1_content`` and ``abs_gxi_content`` by L1 and |g_t . e_t| with the
peak taken among the tokens that hold a letter or a digit (a space, a newline or a colon holds no
value; the value's own punctuation is skipped too). The last three were added after seeds 11 and 12
were read, so the choice among all of them was made on seed 10 again and is reported on seeds 13 and
14. Under ``l1_word`` and ``abs_gxi_word`` the tokens are grouped into words (split at white space:
``14:30`` is one word of five digit and colon tokens in SmolLM2, ``time:`` one of two) and the word
whose content tokens' scores sum highest is the peak (a hit where most of its content tokens lie in
the value); ``longest_word`` is their model-free control, the word with most content tokens (a value
in digits is long, so length alone often points at it). These three were added after seeds 13 and
14 were read: chosen on seed 10 again, reported on seeds 15 and 16. Under ``l1_value_word`` the
peak word is taken among the words that are not a line's key (:func:`key_flags`: the text before the
line's first colon, where a space or the line's end follows it; a text without such lines has no
key, and the score is ``l1_word``): where a word score
misses, the peak most often lies on the key of the value's own line, the fact found but its name
taken for its value. ``longest_value_word`` is its model-free control. These two were added after
seeds 15 and 16 were read: chosen on seed 10, reported on seeds 17 and 18. Objectives:
``whole``, ``targeted`` (the loss's span) and ``contrast`` (the span against the loss's expected
answer in its place, :mod:`agentgrad.attribution.contrast`: what the wrong value and the right one
share cancels), the last paired with ``targeted`` under each score.
"""

from __future__ import annotations

from typing import Any

from agentgrad.blame.context import BlameContext
from agentgrad.blame.facts import parse_line

TOKEN_OBJECTIVES = ("whole", "targeted", "contrast")  # objectives whose token precision a record keeps
# reported beside the L1 norm (the module docstring); ``longest_word`` uses no model, the word scores' control
TOKEN_SCORES = ("abs_gxi", "gxi", "l1_content", "abs_gxi_content", "l1_word", "abs_gxi_word", "longest_word",
                "l1_value_word", "longest_value_word")
# a word score's pairs in the summary: (key, the score it is paired with); the controls have none
WORD_PAIRS = {"l1_word": (("vs_longest_word", "longest_word"), ("vs_content", "l1_content")),
              "abs_gxi_word": (("vs_longest_word", "longest_word"), ("vs_content", "abs_gxi_content")),
              "l1_value_word": (("vs_longest_value_word", "longest_value_word"), ("vs_word", "l1_word"))}


def has_content(token: str) -> bool:
    """Whether a token holds a letter or a digit (not only spaces, newlines or punctuation)."""
    return any(c.isalnum() for c in token)


def words_of(tokens: list[str]) -> list[int]:
    """The word each token belongs to: a word starts at a token that begins with white space or follows
    one that ends with it; a token of white space alone is a word of its own. SmolLM2 writes every digit
    as a token, so ``14:30`` is five tokens and one word, ``time:`` two tokens and one word."""
    out, w, after_space = [], -1, True
    for t in tokens:
        if after_space or not t or t[0].isspace() or not t.strip():
            w += 1
        out.append(w)
        after_space = not t or t[-1].isspace()
    return out


def word_groups(tokens: list[str]) -> list[list[int]]:
    """The positions of each word's content tokens (:func:`has_content`), words by :func:`words_of`,
    in order; a word with no letter or digit is left out."""
    groups: dict[int, list[int]] = {}
    for i, w in enumerate(words_of(tokens)):
        if has_content(tokens[i]):
            groups.setdefault(w, []).append(i)
    return list(groups.values())


def word_in(group: list[int], inside: list[bool]) -> float:
    """Whether most of a word's content tokens lie inside the value (1.0 or 0.0)."""
    return float(2 * sum(inside[i] for i in group) > len(group))


def token_line_starts(tokens: list[str]) -> tuple[str, list[int], list[int]]:
    """The tokens' text, where each token's text starts past its leading white space, and the line
    (counted from 0) each starts on: a token ``"\nbank"`` starts on the line its newline opens."""
    starts, lines, at, line = [], [], 0, 0
    for t in tokens:
        lead = len(t) - len(t.lstrip())
        starts.append(at + lead)
        lines.append(line + t.count("\n", 0, lead))
        at, line = at + len(t), line + t.count("\n")
    return "".join(tokens), starts, lines


def key_flags(tokens: list[str], groups: list[list[int]]) -> list[bool]:
    """For each word (a group of :func:`word_groups`), whether it lies in a line's key: the text from
    the line's start to the separator of its key (the walk's key parser,
    :func:`~agentgrad.blame.facts.parse_line`, the value possibly empty), where a space, a tab or the
    line's end follows a colon separator (``coin: calm valley``, ``phone number: 5``, ``time:`` as one
    token; not ``at 14:30``, whose colon a digit follows; a line whose first colon is not a key's has
    none)."""
    text, starts, _ = token_line_starts(tokens)
    out = []
    for g in groups:
        a = starts[g[0]]
        lo = text.rfind("\n", 0, a) + 1
        hi = text.find("\n", lo)
        hi = len(text) if hi < 0 else hi
        k = parse_line(text, lo, hi)
        sep = k.key_end if k is not None else -1
        # the benchmark's key is a colon's that white space (or the line's end) follows
        out.append(k is not None and text[sep] == ":" and (sep + 1 == hi or text[sep + 1] in " \t\r") and a < sep)
    return out


def is_key(tokens: list[str], group: list[int]) -> bool:
    """Whether one word lies in a line's key (:func:`key_flags`)."""
    return key_flags(tokens, [group])[0]


def value_groups(tokens: list[str], groups: list[list[int]]) -> list[list[int]]:
    """The words that are not keys (:func:`key_flags`); every word where all are keys."""
    return [g for g, k in zip(groups, key_flags(tokens, groups)) if not k] or groups


def word_hit(scores: list[float], inside: list[bool], tokens: list[str],
              groups: list[list[int]] | None = None) -> dict[str, float]:
    """hit@1 by word: each word (:func:`word_groups` of ``tokens``, or ``groups`` where given) scored
    by the sum of its content tokens' scores; a hit where the top word is in the value (:func:`word_in`;
    the first of ties). The mass share is the tokens' (:func:`hit_and_mass`)."""
    out = hit_and_mass(scores, inside)
    groups = word_groups(tokens) if groups is None else groups
    if groups:
        out["hit1"] = word_in(max(groups, key=lambda g: sum(scores[i] for i in g)), inside)
    return out


def longest_word_hit(inside: list[bool], tokens: list[str], groups: list[list[int]] | None = None) -> float:
    """The model-free control of the word scores: hit@1 of the word with most content tokens (the
    first of ties). A value written in digits is many tokens, so length alone points at it often."""
    return word_hit([1.0 if has_content(t) else 0.0 for t in tokens], inside, tokens, groups)["hit1"]


def hit_and_mass(scores: list[float], inside: list[bool], among: list[bool] | None = None) -> dict[str, float]:
    """Whether the highest-scoring token (of those ``among`` marks, where given) is inside the value
    (first of ties), and the value's share of the scores (of their positive parts: a signed score's
    negative tokens hold no share; of all tokens, ``among`` or not)."""
    ids = [i for i in range(len(scores)) if among is None or among[i]] or list(range(len(scores)))
    top = max(ids, key=lambda i: scores[i])
    pos = [max(v, 0.0) for v in scores]
    total = sum(pos) or 1.0
    return {"hit1": float(inside[top]), "mass": sum(v for v, i in zip(pos, inside) if i) / total}


def carrying_source(ctx: BlameContext, truth: dict[str, Any], objective: str) -> tuple[Any, list[str], list[bool]] | None:
    """At the loss's call, under ``objective``, the gradient of the source that carried the corrupted
    value into it, its tokens' texts and which of them lie in the value; None where there is no such
    value (a dropped key, or a fault at the loss's call itself) or ``contrast`` cannot apply."""
    path = truth["path"]
    if len(path) < 2 or str(path[-2]) not in truth.get("corrupted", {}) or not ctx.loss.spans:
        return None
    src, node = path[-2], path[-1]
    region = tuple(ctx.loss.spans.get(node, [])) if objective in ("targeted", "contrast") else None
    if objective == "contrast":
        if not ctx.contrasts():  # no expected answer, or a scorer that takes no contrast (a test's stand-in)
            return None
        att = ctx.attribute(node, region, "contrast")
    else:
        att = ctx.attribute(node, region)
    s = next((s for s in att.sources if s.source == src), None)
    if s is None or not s.l1:
        return None
    r = ctx.render(node)
    a, b = truth["corrupted"][str(src)][0]
    base = r.source_chars[src][0][0]
    inside = [r.offsets[p][0] < base + b and r.offsets[p][1] > base + a for p in s.positions]
    return s, [r.text[r.offsets[p][0]:r.offsets[p][1]] for p in s.positions], inside


def token_precision(ctx: BlameContext, truth: dict[str, Any], objective: str) -> dict[str, Any] | None:
    """hit@1 and mass share of the corrupted value in the source that carried it into the loss's call
    (:func:`carrying_source`; None where there is none): by the gradient's L1 norm per token
    (``hit1``, ``mass``), by |gradient x input| (``abs_gxi``), by gradient x input with its sign
    (``gxi``), by L1 and |gradient x input| with the peak taken among the tokens that hold a letter
    or a digit (``l1_content``, ``abs_gxi_content``) or by word (``l1_word``, ``abs_gxi_word``; among
    the words that are not keys, ``l1_value_word``), and by the longest word (``longest_word``,
    ``longest_value_word``, no model)."""
    found = carrying_source(ctx, truth, objective)
    if found is None:
        return None
    s, tokens, inside = found
    content, groups = [has_content(t) for t in tokens], word_groups(tokens)
    out: dict[str, Any] = hit_and_mass(s.l1, inside)
    out["l1_content"] = hit_and_mass(s.l1, inside, content)
    out["l1_word"] = word_hit(list(s.l1), inside, tokens, groups)
    out["longest_word"] = {"hit1": longest_word_hit(inside, tokens, groups), "mass": sum(inside) / len(inside)}  # no model
    values = value_groups(tokens, groups)
    out["l1_value_word"] = word_hit(list(s.l1), inside, tokens, values)
    out["longest_value_word"] = {"hit1": longest_word_hit(inside, tokens, values), "mass": out["longest_word"]["mass"]}
    if len(s.gxi) == len(s.l1):
        out["abs_gxi"] = hit_and_mass([abs(v) for v in s.gxi], inside)
        out["gxi"] = hit_and_mass(list(s.gxi), inside)  # signed: the token that raises the objective most
        out["abs_gxi_content"] = hit_and_mass([abs(v) for v in s.gxi], inside, content)
        out["abs_gxi_word"] = word_hit([abs(v) for v in s.gxi], inside, tokens, groups)
    return out

