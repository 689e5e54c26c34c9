"""GBC connection weights of one call: the reference, and the functions the engine is made of.

One teacher-forced pass over the call, with gradients. For a call whose tokens are ``input_ids``
(the rendered messages, then the recorded output at ``output_range``) and a source S (its token
ranges):

    objective = sum_{i in output} log p(y_i | y_<i)       g_t = d objective / d e_t
    l1_t  = ||g_t||_1                                     gxi_t = g_t . e_t
    mean_l1  = mean_{t in S} l1_t      max_l1  = max_{t in S} l1_t
    mean_gxi = mean_{t in S} gxi_t     max_gxi = max_{t in S} gxi_t

with e_t the input embedding of token t (the embedding layer's output, fed to the model as
``inputs_embeds``). The formulas are the design's "Connection weights"; every line that makes a
tensor says its shape (T tokens, H hidden, V vocabulary, P prefix).

The engine (:class:`agentgrad.attribution.scorer.Scorer`) is these functions plus caches: it calls
:func:`forward` from the first position it differentiates, with the prefix before it taken from a
key/value cache (a prefix gets no gradient anyway), then :func:`backward`, :func:`token_scores` and
:func:`connection_weights`. :func:`gbc` is all of it with no cache: ``start=0``, one call at a time.
Tests hold every faster path (prefix cache, batches, kept graphs) to :func:`gbc`, and :func:`gbc`
to an independent library (Captum's ``Saliency`` and ``InputXGradient``).

    from agentgrad.attribution.gbc import gbc
    from agentgrad.attribution.render import render_call
    r = render_call(tokenizer, node)
    weights = gbc(model, r.input_ids, r.output_range, r.source_ranges)  # {source: {"mean_l1": ...}}
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

WEIGHT_NAMES = ("mean_l1", "max_l1", "mean_gxi", "max_gxi")


@dataclass
class Pass:
    """One forward pass with gradients from position ``start`` on."""

    leaf: Any  # (1, T - start, H) e_t for t >= start: the variable differentiated by (requires grad)
    embeds: Any  # (1, T - start, H) the same values, outside the graph
    token_lp: Any  # (n_out,) log p(y_i) of every output token, in the graph
    out: Any  # the model's output (its key/value cache, when asked for)


@dataclass
class CallGradients:
    """The gradient of one call's objective at every input position."""

    grads: Any  # (T, H) g_t = d objective / d e_t, float32
    embeds: Any  # (T, H) e_t, the input embeddings
    log_prob: float  # the objective: sum of log p of the output tokens


def forward(model: Any, ids: Any, output_range: tuple[int, int], start: int = 0, past: Any = None,
            use_cache: bool = False, checkpoint: bool = False) -> Pass:
    """The teacher-forced pass over a call, differentiable in the embeddings of positions ``start`` ..
    T-1. The positions before ``start`` are constants: their key/value cache ``past`` when given,
    else they run in this same pass without gradients. Logits are computed only where they predict
    the output.

    Args:
        model: a Hugging Face causal LM (``forward(inputs_embeds=...)`` returning ``.logits``).
        ids: (T,) the call's tokens, output included (a tensor on the model's device).
        output_range: ``[start, end)`` of the output tokens y in ``ids``.
        start: the first position differentiated (0 < start <= the output's start, or 0).
        past: the key/value cache of ``ids[:start]`` (keyword ``past_key_values`` or ``cache``).
        use_cache: return the pass's key/value cache in ``out``.
        checkpoint: recompute each layer in the backward pass instead of keeping its activations
            (:func:`~agentgrad.models.kvcache.layer_checkpoints`; a ``past`` is read through :func:`~agentgrad.models.kvcache.read_only_cache`);
            ignored with ``use_cache`` or a cache that cannot be read so.
    """
    import torch

    from agentgrad.models.kvcache import cache_kwarg, layer_checkpoints

    o_s, o_e = output_range
    n_out = o_e - o_s
    with torch.no_grad():
        e_all = model.get_input_embeddings()(ids[start if past is not None else 0:][None])  # (1, T or T - start, H)
    e = e_all if past is not None else e_all[:, start:]  # (1, T - start, H)
    leaf = e.detach().clone().requires_grad_(True)  # (1, T - start, H)
    inputs = torch.cat([e_all[:, :start], leaf], 1) if past is None and start > 0 else leaf  # (1, T or T - start, H)
    if checkpoint and not use_cache and past is not None:
        from agentgrad.models.kvcache import read_only_cache

        frozen = read_only_cache(past)
        checkpoint, past = (frozen is not None), (frozen if frozen is not None else past)
    with torch.enable_grad(), (layer_checkpoints(model, reads_cache=past is not None) if checkpoint and not use_cache
                               else nullcontext()):
        out = model(inputs_embeds=inputs, **({cache_kwarg(model): past} if past is not None else {}),
                    use_cache=use_cache, logits_to_keep=n_out + 1)  # positions o_s - 1 .. o_e - 1
        logits = out.logits[0, :-1].float()  # (n_out, V): the predictions of y_1 .. y_n (the last predicts nothing)
        token_lp = logits.log_softmax(-1).gather(-1, ids[o_s:o_e][:, None])[:, 0]  # (n_out,)
    return Pass(leaf, e, token_lp, out)


def backward(p: Pass, targets: Sequence[int] | None = None, retain: bool = False) -> tuple[Any, float]:
    """``(g (T - start, H), objective)``: the gradient of ``sum log p`` over every output token, or only
    over ``targets`` (indices into the output, 0 its first token: a loss-targeted objective).
    ``retain`` keeps the pass's graph for another objective."""
    import torch

    with torch.enable_grad():
        token_lp = p.token_lp
        if targets is not None:
            token_lp = token_lp[torch.tensor(list(targets), device=token_lp.device)]  # (n_t,)
        objective = token_lp.sum()  # ()
        if isinstance(p.leaf, (list, tuple)):  # a pass run in chunks (forward.shared_forward): one leaf each
            g = torch.cat(torch.autograd.grad(objective, list(p.leaf), retain_graph=retain), 1)  # (1, T - start, H)
        else:
            (g,) = torch.autograd.grad(objective, p.leaf, retain_graph=retain)  # (1, T - start, H)
    return g[0], objective.item()


def gradients(model: Any, input_ids: Sequence[int], output_range: tuple[int, int]) -> CallGradients:
    """``g_t`` for every token of the call, from one forward and one backward pass (no cache).

    Args:
        model: a Hugging Face causal LM.
        input_ids: the call's tokens, output included.
        output_range: ``[start, end)`` of the output tokens y in ``input_ids``.
    """
    import torch

    o_s, o_e = output_range
    if not 0 < o_s < o_e <= len(input_ids):
        raise ValueError(f"output_range {output_range} must satisfy 0 < start < end <= {len(input_ids)}")
    ids = torch.tensor(list(input_ids), device=model.get_input_embeddings().weight.device)  # (T,)
    p = forward(model, ids, output_range)
    g, objective = backward(p)  # (T, H)
    return CallGradients(g, p.embeds[0], objective)


def token_scores(cg: CallGradients | tuple[Any, Any]) -> tuple[Any, Any]:
    """Per token: ``(||g_t||_1, g_t . e_t)``, each of shape (T,), from a call's gradients (or a pair
    ``(grads, embeds)``, each (T, H)).

    The sums over the hidden dimension run in float64: ``g . e`` adds terms that largely cancel,
    and its float32 rounding would be as big as the differences the tests look for."""
    grads, embeds = (cg.grads, cg.embeds) if isinstance(cg, CallGradients) else cg
    g = grads.double()  # (T, H)
    l1 = g.abs().sum(-1)  # (T,)
    gxi = (g * embeds.double()).sum(-1)  # (T,)
    return l1, gxi


def connection_weights(l1: Sequence[float], gxi: Sequence[float]) -> dict[str, float]:
    """The four weights of one source from its tokens' ``||g_t||_1`` and ``g_t . e_t`` (0 for none)."""
    if len(l1) == 0:
        return {k: 0.0 for k in WEIGHT_NAMES}
    n = len(l1)
    return {"mean_l1": float(sum(l1) / n), "max_l1": float(max(l1)),
            "mean_gxi": float(sum(gxi) / n), "max_gxi": float(max(gxi))}


def source_weights(l1: Any, gxi: Any, ranges: Sequence[tuple[int, int]]) -> dict[str, float]:
    """The four weights of one source from the per-token scores ((T,) each); ``ranges`` are its token
    ranges (several spans of one source are one set of tokens)."""
    positions = sorted({t for a, b in ranges for t in range(a, b)})
    return connection_weights([float(l1[t]) for t in positions], [float(gxi[t]) for t in positions])


def gbc(model: Any, input_ids: Sequence[int], output_range: tuple[int, int],
        source_ranges: Mapping[int, Sequence[tuple[int, int]]]) -> dict[int, dict[str, float]]:
    """The four connection weights of every source of one call: ``{source: {weight: value}}``.

    Args:
        model: a Hugging Face causal LM, in eval mode (dropout off); fp32 for meaningful gradients.
        input_ids: the call's tokens, output included (:func:`agentgrad.attribution.render.render_call`).
        output_range: ``[start, end)`` of the output tokens.
        source_ranges: per source (a predecessor node's id), the token ranges of its spans.
    """
    l1, gxi = token_scores(gradients(model, input_ids, output_range))  # (T,), (T,)
    return {src: source_weights(l1, gxi, ranges) for src, ranges in source_ranges.items()}
