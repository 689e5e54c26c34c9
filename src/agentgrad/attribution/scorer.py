"""Teacher-forced, gradient-based scoring of recorded calls (GBC connection weights).

For a call node the scorer renders the messages and the recorded output, and computes
``g_t = d/d e_t sum_i log p(y_i)`` for every input token t after the prefix, where e_t is the
input embedding (a detached leaf fed as ``inputs_embeds``) and y the output tokens. Parameters
are frozen, and logits are computed only at the positions that predict the output.

Two paths give the same numbers:
- ``naive``: one gradient pass over the whole sequence (the reference);
- ``cached``: the prefix (tokens before the first span: system prompt, tool schemas, template
  header) runs once without gradients; its key/value cache is kept (LRU, keyed by the exact
  prefix token ids, so by agent prompt and scorer) and reused, re-wrapped per use so that it is
  never mutated. Only the variable part runs with gradients.

A call's forward pass is kept with its autograd graph (LRU, within ``graph_bytes``), so that a
second objective of the same call (the whole output, then the span a loss names) costs one
backward pass, not a forward and a backward; occlusion starts from the kept pass's key/value cache
and output log-probabilities instead of running the unoccluded call again. A long call of a
conversation whose earlier calls render as token prefixes of it runs forward once, in chunks that end
where they end (``share_passes``), and that pass serves each of them: a forward pass less per call.

The same arithmetic without any of this: :mod:`agentgrad.attribution.gbc` (the reference). Beside
this module: ``records``, ``batch``, ``occlusion``, ``forward`` (a kept pass); the prefix cache is
:mod:`agentgrad.models.kvcache`'s, which generation's is too.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Literal

from agentgrad.attribution import gbc
from agentgrad.attribution.batch import BatchMixin
from agentgrad.attribution.contrast import contrast_gradients, reference_tokens
from agentgrad.attribution.forward import ForwardCache, ForwardPass, SharedPass, prefix_calls, shared_forward
from agentgrad.attribution.graph import AttributionGraph
from agentgrad.attribution.occlusion import OcclusionMixin
from agentgrad.attribution.protocol import CAPABILITIES
from agentgrad.attribution.records import NodeAttribution, PreparedCall, SourceAttribution, build_graph, token_runs
from agentgrad.attribution.render import RenderedCall, render_call
from agentgrad.core.trace import Node, Trace
from agentgrad.errors import ConfigError, ContextLengthError
from agentgrad.models.hf import HFModel, HFOptions, context_length, load_tokenizer_and_model
from agentgrad.models.kvcache import PrefixCache, layers_kv, output_cache, plain_kv_cache
from agentgrad.models.threads import follow_load

# differentiated tokens from which a pass recomputes its layers in backward (about 5 GB of fp32 activations
# on SmolLM2-135M; measured: docs/attribution.md)
CHECKPOINT_FROM = 4096


class Scorer(BatchMixin, OcclusionMixin):
    """A white-box Hugging Face causal LM that scores recorded calls.

    Args:
        path: folder or hub id of the scorer model (or pass ``tokenizer`` and ``model``).
        dtype: ``float32`` by default (bf16 gradients drift by percents).
        device: where the scorer runs.
        mode: ``cached`` (prefix cache, the default) or ``naive`` (the reference path).
        on_too_long: ``error`` (default) or ``skip``: a call longer than the scorer's context
            raises, or is recorded as skipped with the reason; never truncated silently.
        cache_size, cache_bytes: how many prefix caches are kept, and how many bytes they may
            hold together (least recently used go first).
        attn_implementation: passed to ``from_pretrained``. With ``eager`` the cached and naive
            paths are bitwise equal; with ``sdpa`` (the default) they differ by kernel rounding
            (about 1e-6 relative per token gradient in fp32).
        prompt_weights: also score each call's own prompt (its system message) like a source, for
            the credit split (:mod:`agentgrad.blame.credit`); its tokens then take gradients too, so the
            prefix cache covers only the template's header.
        batch_tokens: the default of :meth:`attribute`: calls that share a prefix are scored in
            padded batches of at most this many tokens (0: one at a time).
        graph_bytes: how many bytes of forward passes (with their autograd graphs) are kept, so
            that another objective of the same call costs one backward pass (0: none kept); only
            passes asked to be kept (``attribute_node(..., keep=True)``, as a blame context does),
            and none bigger than this.
        checkpoint_from: a pass that differentiates at least this many tokens recomputes each layer
            in its backward pass instead of keeping its activations
            (:func:`agentgrad.models.kvcache.layer_checkpoints`): the same gradients, bit for bit,
            for about a third of the memory and a fifth more time (None: never).
        share_passes: a kept, checkpointed call runs forward in chunks that end where the trace's
            earlier calls end whose renderings are token prefixes of it, and that pass (the newest one,
            within ``graph_bytes``) is each of theirs (:meth:`_shared`): the same numbers up to rounding.
    """

    capabilities: frozenset[str] = frozenset(CAPABILITIES)  # all of them: see agentgrad.attribution.protocol

    def __init__(
        self,
        path: str | None = None,
        *,
        tokenizer: Any = None,
        model: Any = None,
        dtype: str = "float32",
        device: str = "cpu",
        mode: Literal["cached", "naive"] = "cached",
        on_too_long: Literal["error", "skip"] = "error",
        cache_size: int = 32,
        cache_bytes: int = 2 * 2**30,
        max_context: int | None = None,
        attn_implementation: str | None = None,
        prompt_weights: bool = False,
        batch_tokens: int = 0,
        graph_bytes: int = 2**30,
        checkpoint_from: int | None = CHECKPOINT_FROM,
        share_passes: bool = True,
    ):
        if mode not in ("cached", "naive"):
            raise ConfigError(f"scorer mode must be 'cached' or 'naive', got {mode!r}")
        if on_too_long not in ("error", "skip"):
            raise ConfigError(f"on_too_long must be 'error' or 'skip', got {on_too_long!r}")
        if model is None:
            if path is None:
                raise ConfigError("a Scorer needs a model path (or a tokenizer and model)")
            opts = HFOptions(path=path, dtype=dtype, device=device, attn_implementation=attn_implementation)
            tokenizer, model = load_tokenizer_and_model(opts)
        ckpt = getattr(model, "is_activation_checkpointing", None)  # the older name only where it is absent
        if mode == "cached" and (getattr(model, "is_gradient_checkpointing", False) if ckpt is None else ckpt):
            raise ConfigError("gradient checkpointing drops the prefix cache; disable it or use mode='naive'")
        model.eval()
        model.requires_grad_(False)
        self.tokenizer, self.model = tokenizer, model
        self.path = path or getattr(model, "name_or_path", "")
        self.dtype = str(next(model.parameters()).dtype).replace("torch.", "")
        self.mode = mode
        self.on_too_long = on_too_long
        self.max_context = context_length(model, tokenizer, max_context)
        self.prefixes = PrefixCache(cache_bytes, cache_size)  # prefix token ids -> no-grad key/value cache
        self.cache_stats = self.prefixes.stats
        self.prompt_weights = prompt_weights
        self.batch_tokens = batch_tokens
        self.occlusion_group = 2  # occlusion variants per forward pass on a CPU (see _occlusion_from_prefix)
        self._plain_kv = plain_kv_cache(model)
        self.graphs = ForwardCache(graph_bytes, model.parameters())  # (input ids, output range, start) -> kept pass
        self.checkpoint_from = checkpoint_from
        self.share_passes = share_passes
        self.shared: SharedPass | None = None  # the newest conversation pass run in chunks
        self._renders: tuple[Any, dict[int, RenderedCall]] = (None, {})  # (trace, node id -> rendering)
        self.forward_stats = self.graphs.stats
        self.forward_stats.update(shared=0, shared_served=0)

    @classmethod
    def from_model(cls, model: HFModel, **options: Any) -> "Scorer":
        """A scorer on a loaded local model: its weights are shared, not loaded again."""
        return cls(tokenizer=model.tokenizer, model=model.model, path=model.options.path,
                   max_context=model.max_context, **options)

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path), "dtype": self.dtype, "device": str(self.device), "mode": self.mode,
                "max_context": self.max_context, "prompt_weights": self.prompt_weights}

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    # the prefix cache's bounds (entries, bytes), read and set through the scorer
    cache_size = property(lambda self: self.prefixes.max_entries, lambda self, n: setattr(self.prefixes, "max_entries", n))
    cache_bytes = property(lambda self: self.prefixes.max_bytes, lambda self, n: setattr(self.prefixes, "max_bytes", n))
    # the kept forward passes' bound
    graph_bytes = property(lambda self: self.graphs.max_bytes, lambda self, n: setattr(self.graphs, "max_bytes", n))

    # --- one call -------------------------------------------------------------------------
    def attribute_node(self, trace: Trace, node: Node, target_chars: list[tuple[int, int]] | None = None,
                       keep: bool = False, contrast: str | None = None) -> NodeAttribution:
        """Token-level gradients of ``node``'s output with respect to each of its sources.

        The objective is ``sum log p(output tokens)`` (the paper's), or with ``target_chars``
        (character ranges of the output text, e.g. the wrong value a loss names) only the output
        tokens overlapping them: a loss-targeted objective, so that a long correct answer does not
        drown the faulty part. Ranges that hit no token fall back to the whole output.

        ``contrast``: a reference text put in place of the output (or of the part ``target_chars``
        names), and the objective is ``mean log p(output) - mean log p(reference)`` at the same
        position (:mod:`agentgrad.attribution.contrast`); ``log_prob`` is then that difference.

        ``keep``: keep the forward pass with its graph (within ``graph_bytes``), for a caller that
        will ask for another objective of the same call (a blame context does); a kept pass of
        the call is reused whatever ``keep`` says (the contrastive objective runs a pass of its own).
        """
        t0 = time.time()
        job = self._prepare(trace, node, target_chars)
        if isinstance(job, NodeAttribution):
            return job
        r, _, targets, _, first = job
        if contrast is not None:
            start = self._start(r, first)
            p, q, g = reference_tokens(self.tokenizer, r, target_chars, contrast)
            return self._finish(trace, node, job, *contrast_gradients(self, r, start, p, q, g),
                                seconds=time.time() - t0)
        fw, reused = self._forward(r, first, keep, (trace, node))
        grads = self._backward(r, fw, targets or None)
        # a reused forward pass is counted as if run again: the record says what the call costs alone
        return self._finish(trace, node, job, *grads, seconds=time.time() - t0 + (fw.seconds if reused else 0.0))

    def _prepare(self, trace: Trace, node: Node, target_chars: list[tuple[int, int]] | None = None
                 ) -> PreparedCall | NodeAttribution:
        """A call rendered for scoring: ``(rendering, fields, target tokens, prompt tokens, first
        prompt token)``, or its finished :class:`NodeAttribution` when there is nothing to
        differentiate (too long and skipped, an empty output, no sources)."""
        r = render_call(self.tokenizer, node)
        n_tokens = len(r.input_ids)
        base = dict(node_id=node.id, agent=node.name, input_ids=r.input_ids, output_token_range=r.output_range,
                    mode=self.mode, render=r.method)
        if n_tokens > self.max_context:
            msg = (f"node {node.id} (agent {node.name}) has {n_tokens:,} tokens; the scorer's context is "
                   f"{self.max_context:,}")
            if self.on_too_long == "error":
                raise ContextLengthError(msg + " (record it as skipped with on_too_long='skip')")
            return NodeAttribution(sources=[], skipped=msg, **base)
        o_s, o_e = r.output_range
        if o_e <= o_s or not r.source_ranges:
            reason = "empty output" if o_e <= o_s else "no sources"
            sources = [self._source(trace, src, ranges, [], None, None, 0) for src, ranges in r.source_ranges.items()]
            return NodeAttribution(sources=sources, skipped=reason, **base)
        targets = r.output_tokens_for(target_chars) if target_chars else None
        prompt_pos = r.prompt_tokens(node) if self.prompt_weights else {}
        return PreparedCall(r, base, targets, prompt_pos, min(prompt_pos) if prompt_pos else None)

    def _finish(self, trace: Trace, node: Node, job: PreparedCall, grads: Any, embeds: Any, start: int, log_prob: float,
                hit: bool, seconds: float = 0.0) -> NodeAttribution:
        """The weights and per-token scores of a prepared call from its gradients (``seconds``: the
        time spent on it before, added to the record's)."""
        t0 = time.time()
        r, base, _, prompt_pos, _ = job
        l1, gxi = gbc.token_scores((grads, embeds))  # (T - start,) each: grads, embeds (T - start, H) from start on
        sources = [self._source(trace, src, ranges, ranges, l1, gxi, start, r.token_chars(node, src))
                   for src, ranges in r.source_ranges.items()]
        prompt = None
        if prompt_pos:
            pos = sorted(prompt_pos)
            l1v, gxv = [float(l1[t - start]) for t in pos], [float(gxi[t - start]) for t in pos]
            prompt = SourceAttribution(source=node.id, kind="prompt", name=node.name, token_ranges=token_runs(pos),
                                       weights=gbc.connection_weights(l1v, gxv), positions=pos, l1=l1v, gxi=gxv,
                                       chars=[prompt_pos[t] for t in pos])
        return NodeAttribution(
            sources=sources,
            prompt=prompt,
            prefix_tokens=start,
            cache_hit=hit,
            log_prob=float(log_prob),
            seconds=round(time.time() - t0 + seconds, 4),
            **base,
        )

    def _source(self, trace: Trace, src: int, ranges, scored_ranges, l1, gxi, start: int,
                chars: dict[int, tuple[int, int, int]] | None = None) -> SourceAttribution:
        positions = sorted({t for a, b in scored_ranges for t in range(a, b)})
        l1v = [float(l1[t - start]) for t in positions] if l1 is not None else []
        gxv = [float(gxi[t - start]) for t in positions] if gxi is not None else []
        node = trace.nodes[src]
        return SourceAttribution(
            source=src, kind=node.kind, name=node.name, token_ranges=list(ranges),
            weights=gbc.connection_weights(l1v, gxv), positions=positions, l1=l1v, gxi=gxv,
            chars=[(chars or {}).get(t) for t in positions] if l1 is not None else [],
        )

    def gradients(self, r: RenderedCall, targets: list[int] | None = None,
                  first: int | None = None) -> tuple[Any, Any, int, float, bool]:
        """One rendered call's gradients at positions ``start`` .. T-1 (from the first span, or ``first``
        when earlier): ``(grads (T - start, H), embeddings (T - start, H), start, log p, prefix cache
        hit)``; ``targets``: the output tokens of a loss-targeted objective (default: all of them)."""
        return self._backward(r, self._forward(r, first)[0], targets)

    def _start(self, r: RenderedCall, first: int | None = None) -> int:
        """The first position differentiated: the first span's (or ``first``, when earlier); 0 in naive mode."""
        return min(r.variable_start, first if first is not None else r.variable_start) if self.mode == "cached" else 0

    def _forward(self, r: RenderedCall, first: int | None = None, keep: bool = False,
                 call: tuple[Trace, Node] | None = None) -> tuple[ForwardPass, bool]:
        """The call's forward pass with gradients from :meth:`_start` on (:func:`gbc.forward`), and
        whether it was a kept one. With ``keep``, a pass within ``graph_bytes`` is kept with its graph;
        with ``call`` (its trace and node) too, a checkpointed call may run as a shared pass (:meth:`_shared`)."""
        import torch

        start = self._start(r, first)
        key = (tuple(r.input_ids), r.output_range, start)
        kept = self.graphs.get(key)
        if kept is not None:
            return kept, True
        served = self.shared.view(r.input_ids, r.output_range, start) if self.shared is not None else None
        if served is not None:
            self.forward_stats["shared_served"] += 1
            return served, True
        follow_load()  # this thread's count follows the machine's load (the CLI's auto)
        t0 = time.time()
        ids = torch.tensor(r.input_ids, device=self.device)  # (T,)
        # a short prefix not cached yet runs in this pass (no gradient reaches it) and is kept from it
        # a long call recomputes its layers in backward (no cache out of it: its prefix is prefilled apart, and a
        # kept pass keeps only its layers' inputs, small enough to keep)
        checkpoint = self.checkpoint_from is not None and len(r.input_ids) - start >= self.checkpoint_from
        if keep and checkpoint and call is not None and self.share_passes:
            fw = self._shared(r, start, ids, *call)
            if fw is not None:
                return fw, False
        in_pass = keep and self._plain_kv and not checkpoint and self.prefixes.runs_in_pass(r.input_ids[:start], self.device)
        past, hit = self.prefix_cache(ids[:start]) if start > 0 and not in_pass else (None, False)
        with self.graphs.measure() as saved:
            p = gbc.forward(self.model, ids, r.output_range, start, past,
                            use_cache=(past is not None or keep or in_pass) and not checkpoint, checkpoint=checkpoint)
        cache = output_cache(p.out) if keep or in_pass else None
        if in_pass:
            self.prefixes.keep_from_pass(r.input_ids[:start], cache)
        kv = [(k.detach(), v.detach()) for k, v in layers_kv(cache)] if keep and self._plain_kv and cache is not None else []
        for t in (t for pair in kv for t in pair):
            saved.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        nbytes = sum(saved.values())
        if checkpoint:  # what the checkpoints hold, which the meter does not see: each layer's input
            nbytes += getattr(self.model.config, "num_hidden_layers", 1) * p.leaf.numel() * p.leaf.element_size()
        fw = ForwardPass(p.leaf, p.embeds, p.token_lp, start, hit, kv, time.time() - t0, nbytes)
        if keep:
            self.graphs.add(key, fw)
        return fw, False

    def _backward(self, r: RenderedCall, fw: ForwardPass, targets: list[int] | None = None
                  ) -> tuple[Any, Any, int, float, bool]:
        """The gradient of the objective (every output token, or ``targets``) over a forward pass
        (:func:`gbc.backward`): ``(grads (T - start, H), embeddings (T - start, H), start, log p, prefix
        cache hit)``."""
        o_s = r.output_range[0]
        grad, log_prob = gbc.backward(fw, [t - o_s for t in targets] if targets is not None else None, fw.kept)
        return grad[fw.offset:], fw.embeds[0], fw.start, log_prob, fw.hit

    def _shared(self, r: RenderedCall, start: int, ids: Any, trace: Trace, node: Node) -> ForwardPass | None:
        """``node``'s pass run in chunks and kept as :attr:`shared` (:func:`shared_forward`) when calls
        of ``trace`` render as token prefixes of it (:func:`prefix_calls`), and its own pass from it; else None."""
        if self.prompt_weights or not self._plain_kv or self.mode != "cached" or start == 0:
            return None
        renders = self._renders[1] if self._renders[0] is trace else {}  # this trace's renderings, kept
        self._renders = (trace, renders)
        others = [renders.get(o.id) or renders.setdefault(o.id, render_call(self.tokenizer, o))
                  for o in trace.calls() if o.id != node.id]
        chosen = prefix_calls(r, others, start)
        if not chosen:
            return None
        self.shared = None  # the older one goes first
        t0 = time.time()
        past, hit = self.prefix_cache(ids[:start])
        prefill = time.time() - t0
        sp = shared_forward(self.model, ids, start, past, chosen + [(len(r.input_ids), tuple(r.output_range))],
                            checkpoint=True, measure=self.graphs.measure)
        sp.hit, sp.seconds = hit, [s + prefill for s in sp.seconds]
        self.forward_stats["shared"] += 1
        if sp.nbytes <= self.graph_bytes:  # else too big to keep: it serves this call only, as a pass not kept would
            self.shared = sp
        return sp.view(r.input_ids, r.output_range, start)

    def kept_forward(self, r: RenderedCall) -> ForwardPass | None:
        """A kept forward pass of exactly this call (any start), if there is one."""
        return self.graphs.find(tuple(r.input_ids), r.output_range)

    def prefix_cache(self, prefix: Any) -> tuple[Any, bool]:
        """The no-grad key/value cache of ``prefix`` ((P,) token ids), re-wrapped for one use so that
        the kept one is never mutated, and whether it was kept from an earlier call
        (:meth:`agentgrad.models.kvcache.PrefixCache.prefill`); on a miss the model runs it once."""
        return self.prefixes.prefill(self.model, prefix)

    def _output_logprobs(self, ids: list[int], o_s: int, o_e: int) -> Any:
        """log p of tokens ``o_s .. o_e - 1`` of ``ids``, each given the tokens before it (no gradients)."""
        import torch

        x = torch.tensor(ids, device=self.device)[None]  # (1, T)
        with torch.no_grad():
            logits = self.model(input_ids=x, logits_to_keep=o_e - o_s + 1).logits[0, :-1].float()  # (n_out, V)
        return logits.log_softmax(-1).gather(-1, x[0, o_s:o_e][:, None])[:, 0]  # (n_out,)

    def output_logprobs(self, node: Node) -> tuple[RenderedCall, list[float]] | None:
        """The scorer's rendering of a call and the log p of each of its output tokens (one forward
        pass); None when the output is empty or the call exceeds the context."""
        r = render_call(self.tokenizer, node)
        o_s, o_e = r.output_range
        if o_e <= o_s or len(r.input_ids) > self.max_context:
            return None
        return r, [float(v) for v in self._output_logprobs(r.input_ids, o_s, o_e)]

    def clear_cache(self) -> None:
        """Forget the kept prefix caches and forward passes."""
        self.prefixes.clear()
        self.graphs.clear()
        self.shared = None
        self._renders = (None, {})

    # --- a whole trace --------------------------------------------------------------------
    def attribute(
        self, trace: Trace, on_node: Callable[[NodeAttribution], None] | None = None, batch_tokens: int | None = None,
    ) -> tuple[list[NodeAttribution], AttributionGraph]:
        """Score every call node; return the per-node results and the attribution graph.

        ``batch_tokens`` > 0 (default: the scorer's) scores calls that share a prefix in padded
        batches (:meth:`attribute_batch`).
        """
        batch_tokens = self.batch_tokens if batch_tokens is None else batch_tokens
        batched = self.attribute_batch([(trace, n) for n in trace.calls()], batch_tokens) if batch_tokens > 0 else None
        results = []
        for i, node in enumerate(trace.calls()):
            res = batched[i] if batched is not None else self.attribute_node(trace, node)
            results.append(res)
            if on_node:
                on_node(res)
        return results, build_graph(trace, results)
