"""Calls that share a prefix scored in padded batches: one forward and one backward pass for several."""

from __future__ import annotations

import time
from typing import Any

from agentgrad.attribution.records import NodeAttribution
from agentgrad.attribution.render import RenderedCall
from agentgrad.core.trace import Node, Trace
from agentgrad.models.kvcache import cache_kwarg, expand_cache


class BatchMixin:
    """:meth:`attribute_batch` and :meth:`batch_gradients` of :class:`~agentgrad.attribution.scorer.Scorer`."""

    model: Any
    tokenizer: Any
    mode: str
    device: Any

    def attribute_batch(self, items: list[tuple[Trace, Node]], batch_tokens: int) -> list[NodeAttribution]:
        """``attribute_node`` of every (trace, call), several calls per forward and backward pass.

        Calls whose prefix (the tokens before their first span: system prompt, template header) is
        the same share one prefix cache, expanded over a padded batch of their variable parts; a
        batch holds at most ``batch_tokens`` padded variable tokens (a call longer than that runs
        alone). The padding goes between the prefix and each call's tokens, masked, with every real
        token keeping its own position, so each call sees exactly what it sees alone: the results
        equal the one-by-one path up to kernel rounding. The naive mode, calls without a prefix and
        calls with nothing to differentiate take the one-by-one path. Results are in ``items`` order.
        """
        out: list[NodeAttribution | None] = [None] * len(items)
        groups: dict[tuple[int, ...], list[tuple[int, Any, int]]] = {}
        for i, (trace, node) in enumerate(items):
            job = self._prepare(trace, node)
            if isinstance(job, NodeAttribution):
                out[i] = job
                continue
            r, _, _, _, first = job
            start = min(r.variable_start, first if first is not None else r.variable_start)
            if self.mode != "cached" or start == 0 or batch_tokens <= 0:
                out[i] = self._finish(trace, node, job, *self.gradients(r, None, first))
                continue
            groups.setdefault(tuple(r.input_ids[:start]), []).append((i, job, start))
        for members in groups.values():
            members.sort(key=lambda m: len(m[1][0].input_ids))  # similar lengths together: less padding
            batches: list[list[tuple[int, Any, int]]] = [[]]
            for m in members:  # longest last, so a batch's padded size is its count times m's length
                if batches[-1] and (len(batches[-1]) + 1) * (len(m[1][0].input_ids) - m[2]) > batch_tokens:
                    batches.append([])
                batches[-1].append(m)
            for batch in batches:
                t0 = time.time()
                grads = self.batch_gradients([(job[0], start) for _, job, start in batch])
                share = (time.time() - t0) / len(batch)
                for (i, job, _), g in zip(batch, grads):
                    out[i] = self._finish(items[i][0], items[i][1], job, *g, seconds=share)
        return out  # type: ignore[return-value]

    def batch_gradients(self, calls: list[tuple[RenderedCall, int]]) -> list[tuple[Any, Any, int, float, bool]]:
        """:meth:`gradients` of calls sharing the prefix ``input_ids[:start]``, in one pass."""
        import torch

        if len(calls) == 1:
            r, start = calls[0]
            return [self.gradients(r, None, start)]
        start = calls[0][1]
        B = len(calls)
        ids0 = torch.tensor(calls[0][0].input_ids, device=self.device)
        past, hit = self.prefix_cache(ids0[:start])
        expand_cache(past, B)  # the one stored prefix, seen by every row (no copy)
        lens = [len(r.input_ids) - start for r, _ in calls]
        L = max(lens)
        pad = getattr(self.tokenizer, "pad_token_id", None) or 0
        ids = torch.full((B, L), pad, dtype=torch.long, device=self.device)  # (B, L): padding first, then the call
        mask = torch.zeros((B, start + L), dtype=torch.long, device=self.device)  # (B, P + L)
        mask[:, :start] = 1
        pos = torch.full((B, L), start, dtype=torch.long, device=self.device)  # (B, L)
        for b, ((r, _), n) in enumerate(zip(calls, lens)):
            ids[b, L - n:] = torch.tensor(r.input_ids[start:], device=self.device)
            mask[b, start + L - n:] = 1
            pos[b, L - n:] = torch.arange(start, start + n, device=self.device)
        emb = self.model.get_input_embeddings()
        with torch.no_grad():
            e = emb(ids)  # (B, L, H)
        leaf = e.detach().clone().requires_grad_(True)  # (B, L, H)
        n_outs = [r.output_range[1] - r.output_range[0] for r, _ in calls]
        keep = max(n_outs) + 1
        with torch.enable_grad():
            out = self.model(inputs_embeds=leaf, attention_mask=mask, position_ids=pos, **{cache_kwarg(self.model): past},
                             use_cache=True, logits_to_keep=keep)
            logits = out.logits.float()  # (B, keep, V): the last ``keep`` positions of every row
            total = logits.new_zeros(())
            log_probs = []
            for b, ((r, _), n_out) in enumerate(zip(calls, n_outs)):
                o_s, o_e = r.output_range
                # every row ends with its last output token: position t is predicted at row index keep - 1 - (o_e - t)
                rows = logits[b, keep - 1 - n_out : keep - 1]  # (n_out, V)
                lp = rows.log_softmax(-1).gather(-1, torch.tensor(r.input_ids[o_s:o_e], device=self.device)[:, None])[:, 0].sum()
                log_probs.append(lp.item())
                total = total + lp
            (grad,) = torch.autograd.grad(total, leaf)  # (B, L, H)
        return [(grad[b, L - n:], e[b, L - n:], start, log_probs[b], hit) for b, n in enumerate(lens)]

