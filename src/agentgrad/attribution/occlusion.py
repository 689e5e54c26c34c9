"""Counterfactual occlusion: a call's output log p with each source's tokens replaced by a filler."""

from __future__ import annotations

from typing import Any, Callable

from agentgrad.attribution.forward import ForwardPass
from agentgrad.attribution.render import RenderedCall, render_call
from agentgrad.core.trace import Node, Trace
from agentgrad.models.kvcache import cache_kwarg, dynamic_cache, layers_kv, output_cache


class OcclusionMixin:
    """The occlusion methods of :class:`~agentgrad.attribution.scorer.Scorer` (no gradients)."""

    model: Any
    tokenizer: Any
    device: Any
    max_context: int
    occlusion_group: int  # occlusion variants per forward pass on a CPU (see _occlusion_from_prefix)
    forward_stats: dict[str, Any]
    _plain_kv: bool  # the model's key/value cache can be sliced and expanded
    kept_forward: Callable[[RenderedCall], ForwardPass | None]  # a kept gradient pass of the call

    def occlusion_vectors(self, trace: Trace, node: Node, filler: str = " ") -> Any:
        """The log p of every output token of a call, as recorded and with each source's tokens
        replaced by a neutral filler token (same length): ``(rendering, base, {source: vector})``, or
        None when the output is empty, the call has no source or exceeds the context. The variants
        have one length, so they run as one batch (chunked to bound the logits' memory); no
        gradients. Every objective's occlusion weights are sums over these (:meth:`occlusion`).
        On a CPU each variant starts where its occlusion starts, from the recorded call's cache."""
        r = render_call(self.tokenizer, node)
        o_s, o_e = r.output_range
        if o_e <= o_s or not r.source_ranges or len(r.input_ids) > self.max_context:
            return None
        fill = (self.tokenizer(filler, add_special_tokens=False)["input_ids"] or [self.tokenizer.eos_token_id])[0]
        sources = list(r.source_ranges)
        variants = [list(r.input_ids)]
        for src in sources:
            ids = list(r.input_ids)
            for a, b in r.source_ranges[src]:
                ids[a:b] = [fill] * (b - a)
            variants.append(ids)
        if self.device.type == "cpu" and self._plain_kv:
            rows = self._occlusion_from_prefix(variants, sources, r, o_s, o_e, self.kept_forward(r))
        else:
            rows = self._occlusion_batched(variants, o_s, o_e)
        return r, rows[0], dict(zip(sources, rows[1:]))

    def _occlusion_batched(self, variants: list[list[int]], o_s: int, o_e: int) -> list[list[float]]:
        """Every variant's output log p, the variants as one batch (chunked to bound the logits' memory)."""
        import torch

        vocab = self.model.get_output_embeddings().weight.shape[0]
        per_chunk = max(1, int(256e6 // (4 * (o_e - o_s + 1) * vocab)))  # at most ~256 MB of logits at once
        rows: list[list[float]] = []
        for i in range(0, len(variants), per_chunk):
            x = torch.tensor(variants[i:i + per_chunk], device=self.device)  # (B, T)
            with torch.no_grad():
                logits = self.model(input_ids=x, logits_to_keep=o_e - o_s + 1).logits[:, :-1].float()  # (B, n_out, V)
            lp = logits.log_softmax(-1).gather(-1, x[:, o_s:o_e, None])[..., 0]  # (B, n_out)
            rows.extend(lp.tolist())
        return rows

    def _occlusion_from_prefix(self, variants: list[list[int]], sources: list[int], r: RenderedCall,
                               o_s: int, o_e: int, kept: ForwardPass | None = None) -> list[list[float]]:
        """Every variant's output log p, each computed from its first occluded token on: the tokens
        before it are the recorded call's, whose key/value cache the unoccluded pass leaves (or
        ``kept``, the call's gradient pass, whose cache and output log p are the same up to kernel
        rounding: then the unoccluded call is not run again). On a CPU this is fewer tokens
        through the model than one batch of whole variants (a source late in the prompt costs only
        the tokens after it)."""
        import torch

        keep = o_e - o_s + 1
        x = torch.tensor(variants[0], device=self.device)[None]  # (1, T)

        def logp(logits: Any, ids: Any) -> list[float]:  # (1, n_out + 1, V), (1, n_out)
            return logits[:, :-1].float().log_softmax(-1).gather(-1, ids[..., None])[0, :, 0].tolist()

        if kept is not None and kept.kv:
            self.forward_stats["occlusion_reused"] += 1
            self.forward_stats["occlusion_reused_seconds"] += kept.seconds
            kv = kept.kv  # (1, H, T, D) each
            base = [float(v) for v in kept.token_lp.detach()]
        else:
            with torch.no_grad():
                out = self.model(input_ids=x, use_cache=True, logits_to_keep=keep)
            kv = layers_kv(output_cache(out))  # (1, H, T, D) each
            base = logp(out.logits, x[:, o_s:o_e])
        rows: list[list[float]] = [base] + [[] for _ in sources]
        starts = [min(a for a, _ in r.source_ranges[src]) for src in sources]  # before it, nothing changed
        order = sorted(range(len(sources)), key=lambda i: starts[i])
        for g in (order[i:i + self.occlusion_group] for i in range(0, len(order), self.occlusion_group)):
            start = starts[g[0]]  # the group's earliest occlusion: every row of it is recomputed from there
            xi = torch.tensor([variants[1 + i][start:] for i in g], device=self.device)  # (B, T - start)
            pos = torch.arange(start, len(variants[0]), device=self.device)[None].expand(len(g), -1)  # (B, T - start)
            past = dynamic_cache([(k[:, :, :start].expand(len(g), -1, -1, -1),  # (B, H, start, D) each
                                   v[:, :, :start].expand(len(g), -1, -1, -1)) for k, v in kv]) if start else None
            with torch.no_grad():
                o = self.model(input_ids=xi, position_ids=pos, logits_to_keep=keep, use_cache=past is not None,
                               **({cache_kwarg(self.model): past} if past is not None else {}))
            for j, i in enumerate(g):
                rows[1 + i] = logp(o.logits[j:j + 1], xi[j:j + 1, o_s - start:o_e - start])
        return rows

    @staticmethod
    def occlusion_weights(vectors: Any, target_chars: list[tuple[int, int]] | None = None) -> dict[int, float]:
        """Per source, log p(output) minus log p(output) with the source occluded, from
        :meth:`occlusion_vectors`; with ``target_chars``, only those output tokens count."""
        r, base, occluded = vectors
        o_s, o_e = r.output_range
        targets = (r.output_tokens_for(target_chars) if target_chars else None) or list(range(o_s, o_e))
        keep = [t - o_s for t in targets]
        total = sum(base[i] for i in keep)
        return {src: total - sum(v[i] for i in keep) for src, v in occluded.items()}

    def occlusion(self, trace: Trace, node: Node, target_chars: list[tuple[int, int]] | None = None,
                  filler: str = " ") -> dict[int, float]:
        """Counterfactual occlusion: per source, log p(output) minus log p(output) with the source's
        tokens replaced by a neutral filler token (same length). One batched forward pass of every
        variant, no gradients. With ``target_chars``, only those output tokens are scored (as for
        gradients). Zero weights where the call cannot be scored."""
        vectors = self.occlusion_vectors(trace, node, filler)
        if vectors is None:
            return {s: 0.0 for s in render_call(self.tokenizer, node).source_ranges}
        return self.occlusion_weights(vectors, target_chars)

