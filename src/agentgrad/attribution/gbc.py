"""GBC connection weights of one call, computed plainly: the reference the scorer is tested against.

One teacher-forced pass over the whole call, with gradients, and nothing else: no prefix cache,
no batching, no kept graphs, no logits skipped. For a call whose tokens are ``input_ids`` (the
rendered messages, then the recorded output at ``output_range``) and a source S (its token ranges):

    objective = sum_{i in output} log p(y_i | y_<i)       g_t = d objective / d e_t
    l1_t  = ||g_t||_1                                     gxi_t = g_t . e_t
    mean_l1  = mean_{t in S} l1_t      max_l1  = max_{t in S} l1_t
    mean_gxi = mean_{t in S} gxi_t     max_gxi = max_{t in S} gxi_t

with e_t the input embedding of token t (the embedding layer's output, fed to the model as
``inputs_embeds``). The fast path, :class:`agentgrad.attribution.scorer.Scorer`, must give the same
numbers up to kernel rounding (``tests/test_gbc_reference.py``), as must an independent library
(Captum's ``Saliency`` and ``InputXGradient``). The formulas are the design's "Connection weights";
every line that makes a tensor says its shape (T tokens, H hidden, V vocabulary).

    from agentgrad.attribution.gbc import gbc
    from agentgrad.attribution.render import render_call
    r = render_call(tokenizer, node)
    weights = gbc(model, r.input_ids, r.output_range, r.source_ranges)  # {source: {"mean_l1": ...}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

WEIGHTS = ("mean_l1", "max_l1", "mean_gxi", "max_gxi")


@dataclass
class CallGradients:
    """The gradient of one call's objective at every input position."""

    grads: Any  # (T, H) g_t = d objective / d e_t, float32
    embeds: Any  # (T, H) e_t, the input embeddings
    log_prob: float  # the objective: sum of log p of the output tokens


def gradients(model: Any, input_ids: Sequence[int], output_range: tuple[int, int]) -> CallGradients:
    """``g_t`` for every token of the call, from one forward and one backward pass.

    Args:
        model: a Hugging Face causal LM (any ``forward(inputs_embeds=...)`` returning ``.logits``).
        input_ids: the call's tokens, output included.
        output_range: ``[start, end)`` of the output tokens y in ``input_ids``.
    """
    import torch

    o_s, o_e = output_range
    if not 0 < o_s < o_e <= len(input_ids):
        raise ValueError(f"output_range {output_range} must satisfy 0 < start < end <= {len(input_ids)}")
    device = model.get_input_embeddings().weight.device
    ids = torch.tensor(list(input_ids), device=device)[None]  # (1, T)
    with torch.no_grad():
        e = model.get_input_embeddings()(ids)  # (1, T, H)
    leaf = e.detach().clone().requires_grad_(True)  # (1, T, H): the variable we differentiate by
    with torch.enable_grad():
        logits = model(inputs_embeds=leaf).logits[0].float()  # (T, V): position t predicts token t + 1
        log_p = logits[o_s - 1:o_e - 1].log_softmax(-1)  # (n_out, V): the predictions of y_1 .. y_n
        y = ids[0, o_s:o_e]  # (n_out,): the recorded output tokens
        objective = log_p.gather(-1, y[:, None])[:, 0].sum()  # (): sum_i log p(y_i)
        (g,) = torch.autograd.grad(objective, leaf)  # (1, T, H)
    return CallGradients(g[0], e[0], objective.item())


def token_scores(cg: CallGradients) -> tuple[Any, Any]:
    """Per token: ``(||g_t||_1, g_t . e_t)``, each of shape (T,).

    The sums over the hidden dimension run in float64: ``g . e`` adds terms that largely cancel,
    and its float32 rounding would be as big as the differences the tests look for."""
    g = cg.grads.double()  # (T, H)
    l1 = g.abs().sum(-1)  # (T,)
    gxi = (g * cg.embeds.double()).sum(-1)  # (T,)
    return l1, gxi


def source_weights(l1: Any, gxi: Any, ranges: Sequence[tuple[int, int]]) -> dict[str, float]:
    """The four weights of one source from the per-token scores; ``ranges`` are its token ranges
    (several spans of one source are one set of tokens)."""
    import torch

    positions = sorted({t for a, b in ranges for t in range(a, b)})
    if not positions:
        return {k: 0.0 for k in WEIGHTS}
    at = torch.tensor(positions, device=l1.device)  # (n_S,)
    l1_s, gxi_s = l1[at], gxi[at]  # (n_S,), (n_S,)
    return {"mean_l1": l1_s.mean().item(), "max_l1": l1_s.max().item(),
            "mean_gxi": gxi_s.mean().item(), "max_gxi": gxi_s.max().item()}


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
