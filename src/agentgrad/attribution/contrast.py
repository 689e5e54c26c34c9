"""The contrastive objective: a call's recorded output against a reference put in its place.

``J = mean log p(y) - mean log p(g)``: ``y`` the recorded output's tokens (or those the loss names as
wrong, from the first to the last of them), ``g`` a reference's tokens at the same position (the
expected answer in place of the whole output, or in place of the named part with the rest of the
output kept before and after it), both given exactly the same input. Its gradient with respect to
the input embeddings points at the inputs that made the produced text beat the reference: the part
of the whole-output gradient that the two share (format, length, what any answer is built from)
cancels. Means, not sums, so that a long produced message does not drown a short reference (with
sums, a 300-token message against a 2-token answer is the whole-output objective).

One forward pass over the input with gradients, kept as a key/value cache that is itself in the
autograd graph; the two continuations (``y`` and ``g``, each only its own tokens) run on that cache,
so the gradient flows through the cached keys and values back to the input: about the cost of the
whole-output objective (one pass over the input, one backward), not two.
"""

from __future__ import annotations

from typing import Any

from agentgrad.errors import ConfigError
from agentgrad.models.kvcache import cache_kwarg, output_cache, rewrap_cache


def reference_tokens(tokenizer: Any, r: Any, target_chars: list[tuple[int, int]] | None,
                     reference: str) -> tuple[int, int, list[int]]:
    """``(p, q, g)``: the output tokens ``[p, q)`` the reference replaces and the reference's tokens.

    Without ``target_chars`` (or when they hit no token) the whole output is replaced by
    ``reference``; with them, the characters from the first range's start to the last range's end,
    inside the tokens they touch (a token the named text shares with its neighbour, such as a
    leading space, keeps that neighbour's characters around the reference)."""
    o_s, o_e = r.output_range
    targets = r.output_tokens_for(target_chars) if target_chars else []
    if not targets:
        text = reference
        p, q = o_s, o_e
    else:
        p, q = min(targets), max(targets) + 1
        base = r.output_char_start
        a, b = base + min(s for s, _ in target_chars), base + max(e for _, e in target_chars)
        lo, hi = r.offsets[p][0], r.offsets[q - 1][1]
        text = r.text[lo:max(lo, a)] + reference + r.text[min(b, hi):hi]
    g = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not g:
        raise ConfigError("the contrastive objective needs a non-empty reference (the loss's expected answer)")
    return p, q, list(g)


def contrast_gradients(scorer: Any, r: Any, start: int, p: int, q: int, g: list[int]) -> tuple[Any, Any, int, float, bool]:
    """The gradient of ``mean log p(tokens [p, q)) - mean log p(g at p)`` at positions ``start`` .. T-1:
    ``(grads (T - start, H), embeddings (T - start, H), start, J, prefix cache hit)``, as the
    scorer's other objectives return them. Only the input (positions before the output) is
    differentiated; the output's rows are zero."""
    import torch

    model = scorer.model
    dev = scorer.device
    ids = torch.tensor(r.input_ids, device=dev)  # (T,)
    o_s = r.output_range[0]
    emb = model.get_input_embeddings()
    past, hit = scorer.prefix_cache(ids[:start]) if start > 0 else (None, False)
    g_ids = torch.tensor(g, device=dev)  # (n_g,)
    with torch.no_grad():
        e = emb(ids[start:][None])  # (1, T - start, H)
        e_g = emb(g_ids[None])  # (1, n_g, H)
    leaf = e[:, :o_s - start].detach().clone().requires_grad_(True)  # (1, o_s - start, H): the input
    kw = cache_kwarg(model)
    with torch.enable_grad():
        shared = torch.cat([leaf, e[:, o_s - start:p - start]], 1)  # (1, p - start, H): input, output before p
        out = model(inputs_embeds=shared, use_cache=True, logits_to_keep=1, **({kw: past} if past is not None else {}))
        head = out.logits[0, -1].float().log_softmax(-1)  # (V,): the prediction of the token at p
        cache = output_cache(out)  # keys and values of every position before p, in the graph

        def mean_lp(embeds: Any, tokens: Any) -> Any:  # (1, n, H), (n,): mean log p of tokens placed at p
            n = tokens.shape[0]
            lp = head[tokens[0]]
            if n > 1:
                o = model(inputs_embeds=embeds[:, :-1], use_cache=True, logits_to_keep=n - 1,
                          **{kw: rewrap_cache(cache)})  # each continuation its own cache
                rest = o.logits[0].float().log_softmax(-1).gather(-1, tokens[1:, None])[:, 0]  # (n - 1,)
                lp = lp + rest.sum()
            return lp / n

        objective = mean_lp(e[:, p - start:q - start], ids[p:q]) - mean_lp(e_g, g_ids)  # ()
        (grad,) = torch.autograd.grad(objective, leaf)  # (1, o_s - start, H)
    full = torch.zeros_like(e[0])  # (T - start, H): the output's rows stay zero (not sources)
    full[:o_s - start] = grad[0]
    return full, e[0], start, objective.item(), hit
