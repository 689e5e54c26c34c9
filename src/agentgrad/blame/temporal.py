"""Temporal and counterfactual credit: blame methods that score steps without walking GBC edges.

- :func:`temporal`: each step scored by how surprising the loss-relevant content is there given the
  step's inputs (forward passes only);
- :func:`replay`: counterfactual replay, for runs with a checkable outcome: every upstream call
  sampled afresh and what follows generated again (many generations; no scorer).

Registered in :data:`agentgrad.blame.methods.FAMILIES` as ``temporal`` and ``replay``.
"""

from __future__ import annotations

from agentgrad.blame.context import Blame, BlameContext
from agentgrad.blame.facts import occurrences
from agentgrad.blame.follow import SUPPORTED


def temporal(ctx: BlameContext) -> list[Blame]:
    """Temporal credit: score each step by how much the loss-relevant content changes there.

    The loss-relevant content is the text the loss names as wrong (its span in the failing
    output). For every upstream call whose output contains it, the step's score is the surprisal
    of that content given the step's own inputs (the largest, over its occurrences, of the mean
    -log p of its tokens: one forward pass per call): a step that copies the content from a
    source scores low, the step that introduced it scores high. The highest-scoring step is
    blamed; when no call finds the content surprising (every token more likely than 1/2), it came
    in from outside the modelled calls, and the earliest tool or input result holding it is blamed.
    Without a loss span, the failing call is blamed.
    """
    wrong = ctx.wrong_text()
    if wrong is None:
        return [ctx.blame(ctx.target, 1.0)]
    scores: dict[int, float] = {}
    holders = []
    for n in ctx.upstream():
        node = ctx.trace.nodes[n]
        spans = occurrences(node.text, wrong)
        if not spans:
            continue
        holders.append(n)
        if node.kind != "call":
            continue
        scored = ctx.output_logprobs(n)
        if scored is None:
            continue
        r, lps = scored
        o_s = r.output_range[0]
        worst = 0.0
        for a, b in spans:
            toks = r.output_tokens_for([(a, b)])
            if toks:
                worst = max(worst, -sum(lps[t - o_s] for t in toks) / len(toks))
        scores[n] = worst
    ranked = sorted(scores, key=lambda n: -scores[n])
    if ranked and scores[ranked[0]] > SUPPORTED:
        return [ctx.blame(n, scores[n]) for n in ranked]
    outside = [n for n in holders if ctx.trace.nodes[n].kind != "call"]
    if outside:
        return [ctx.blame(outside[0], float("inf"))] + [ctx.blame(n, scores[n]) for n in ranked]
    return [ctx.blame(n, scores[n]) for n in ranked] or [ctx.blame(ctx.target, 1.0)]


def replay(ctx: BlameContext) -> list[Blame]:
    """Counterfactual replay: blame the call whose fresh samples most often make the run right.

    For every upstream call (the loss target included), ``ctx.replays`` runs in which that call's
    output is sampled afresh and every later call that reads it is generated again
    (:meth:`BlameContext.replay`); a call scores the share of its replays whose final answer is
    right. Calls are ranked by that share, and among equal shares the later call first: replaying a
    call generates every call after it again, the faulty one included, so a call that ties with its
    successor is not where the fault entered. When no replay turns the answer right every call
    scores 0. The strongest black-box rival of gradient blame, at the price of
    ``replays x (1 + calls downstream)`` generations per call.
    """
    calls = [n for n in ctx.upstream() if ctx.trace.nodes[n].kind == "call"]
    share = {n: sum(ctx.replay(n, i) for i in range(ctx.replays)) / ctx.replays for n in calls}
    if not any(share.values()):  # no replay helped: nothing is named, every call ties
        return [ctx.blame(n, 0.0) for n in calls]
    ranked = sorted(calls, key=lambda n: (-share[n], -n))
    # a strict order (scores fall by a hair with rank), so that the later of two equal shares is the top-1
    return [ctx.blame(n, share[n] - 1e-9 * i) for i, n in enumerate(ranked)]
