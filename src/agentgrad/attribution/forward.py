"""Kept forward passes: one call's pass with its autograd graph, so that another objective of the same
call costs one backward pass (within ``Scorer(graph_bytes=...)``); and a conversation's pass run once in
chunks (:func:`shared_forward`), the forward pass of every call whose rendering is a token prefix of it."""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterator


@dataclass
class ForwardPass:
    """One call's forward pass with gradients, kept with its autograd graph so that every objective
    of the call is one backward pass over it."""

    leaf: Any  # (1, T - start, H) the input embeddings differentiated (requires grad)
    embeds: Any  # (1, T - start, H) their values
    token_lp: Any  # (n_out,) log p of each output token, still in the graph
    start: int  # first position with gradients (the prefix before it came from the prefix cache)
    hit: bool  # whether that prefix cache was kept from an earlier call
    kv: list[tuple[Any, Any]]  # per layer (keys, values), (1, heads, T, dim), detached: the whole call
    seconds: float  # what the forward pass took
    nbytes: int = 0  # what the graph holds (tensors saved for backward, and kv)
    kept: bool = False  # in the scorer's LRU (later backward passes keep the graph)
    offset: int = 0  # gradient rows before this call's start (a call served by a shared pass that starts earlier)


class ForwardCache:
    """Forward passes kept with their graphs, least recently used out first once they hold more than
    ``max_bytes`` together; keyed by (input ids, output range, first differentiated position).

    ``stats``: passes ``kept`` and ``reused``, and the occlusions that started from a kept pass."""

    def __init__(self, max_bytes: int, weights: Any = ()):
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple, ForwardPass] = OrderedDict()  # oldest first
        self.stats = {"kept": 0, "reused": 0, "occlusion_reused": 0, "occlusion_reused_seconds": 0.0}
        self._weights = {p.untyped_storage().data_ptr() for p in weights}  # storages a graph does not own

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: tuple) -> ForwardPass | None:
        fw = self.entries.get(key)
        if fw is not None:
            self.entries.move_to_end(key)
            self.stats["reused"] += 1
        return fw

    def find(self, ids: tuple[int, ...], output_range: tuple[int, int]) -> ForwardPass | None:
        """A kept pass of exactly this call (any start), the newest first."""
        for key in reversed(self.entries):
            if key[0] == ids and key[1] == output_range:
                return self.entries[key]
        return None

    @contextlib.contextmanager
    def measure(self) -> Iterator[dict[int, int]]:
        """Inside it, every tensor that autograd saves for backward (weights aside) is counted:
        storage -> bytes, what keeping the pass's graph holds."""
        import torch

        saved: dict[int, int] = {}

        def pack(t: Any) -> Any:
            st = t.untyped_storage()
            if st.data_ptr() not in self._weights:
                saved[st.data_ptr()] = st.nbytes()
            # detached: an op's own output saved as itself would make a reference cycle through its
            # grad_fn, which a kept (retained) graph never breaks, so an evicted pass would never be freed
            return t.detach()

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield saved

    def add(self, key: tuple, fw: ForwardPass) -> None:
        """Keep ``fw`` when it fits (0 < its bytes <= ``max_bytes``), evicting the oldest as needed."""
        if not 0 < fw.nbytes <= self.max_bytes:
            return
        fw.kept = True
        self.entries[key] = fw
        self.stats["kept"] += 1
        while sum(f.nbytes for f in self.entries.values()) > self.max_bytes:
            self.entries.popitem(last=False)[1].kept = False

    def clear(self) -> None:
        for fw in self.entries.values():
            fw.kept = False
        self.entries.clear()


@dataclass
class SharedPass:
    """A conversation's latest call run forward once, in chunks that end where earlier calls end whose
    renderings are token prefixes of it, kept with its graph (:func:`shared_forward`): the forward pass of
    each of those calls, whose objective's backward pass runs through its own chunks and the ones before."""

    ids: tuple[int, ...]  # the latest call's tokens
    start: int  # the first position differentiated (the prefix cache holds the ones before)
    hit: bool  # whether that prefix cache was kept from an earlier call
    leaves: list[Any]  # per chunk (1, n, H): the differentiated embeddings (each requires grad)
    embeds: Any  # (1, T - start, H) their values
    calls: dict[int, tuple[tuple[int, int], Any]]  # a call's end -> (its output range, log p of each output token)
    ends: list[int]  # each chunk's end
    seconds: list[float]  # the forward pass's time through the end of each chunk
    nbytes: int = 0  # what its graph holds

    def view(self, ids: list[int], output_range: tuple[int, int], start: int) -> ForwardPass | None:
        """The forward pass of the call ``ids`` (its output at ``output_range``, differentiated from
        ``start``), when this pass holds it: its rendering a prefix ending at a chunk's end, the same
        output, differentiated from here or later. Else None. The pass it gives keeps no key/value cache
        (an occlusion of the call runs its own unoccluded pass)."""
        n = len(ids)
        got = self.calls.get(n)
        if got is None or got[0] != tuple(output_range) or start < self.start or self.ids[:n] != tuple(ids):
            return None
        c = self.ends.index(n)
        lo = start - self.start
        return ForwardPass(leaf=self.leaves[:c + 1], embeds=self.embeds[:, lo:n - self.start], token_lp=got[1],
                           start=start, hit=self.hit, kv=[], seconds=self.seconds[c], kept=True, offset=lo)


def prefix_calls(r: Any, others: list[Any], start: int) -> list[tuple[int, tuple[int, int]]]:
    """The chunks a shared pass of the rendered call ``r`` can end at: of the renderings ``others``, those
    that are token prefixes of ``r`` (checked token by token), differentiated from ``start`` or later,
    with an output; as (end, output range), in order, each output predicted after the chunk before it
    ends and before ``r``'s own output starts (every prediction of a call made in its own chunk)."""
    ends = sorted({(len(o.input_ids), tuple(o.output_range)) for o in others
                   if len(o.input_ids) < len(r.input_ids) and o.input_ids == r.input_ids[:len(o.input_ids)]
                   and o.variable_start >= start and o.output_range[1] > o.output_range[0]})
    chosen, last = [], start
    for n, out in ends:
        if last < out[0] and n < r.output_range[0]:
            chosen.append((n, out))
            last = n
    return chosen


def shared_forward(model: Any, ids: Any, start: int, past: Any, calls: list[tuple[int, tuple[int, int]]],
                   checkpoint: bool = False, measure: Any = None) -> SharedPass:
    """One teacher-forced pass over ``ids`` (a conversation's latest call), differentiable from ``start``,
    run in chunks that end at each of ``calls``' ends (a call: its rendering's length and its output range;
    the last one ends at ``len(ids)``), each chunk reading the keys and values of those before it through
    :func:`agentgrad.models.kvcache.chunk_cache`, so that a call's objective is backpropagated only
    through the chunks it sees. The same numbers as each call's own pass (:func:`agentgrad.attribution.gbc.forward`)
    up to kernel rounding. ``past``: the key/value cache of ``ids[:start]``; ``checkpoint``: each chunk's
    layers recomputed in backward (:func:`agentgrad.models.kvcache.layer_checkpoints`); ``measure``: a
    context that yields a dict the saved tensors are counted in (``ForwardCache.measure``)."""
    import torch

    from agentgrad.models.kvcache import cache_kwarg, chunk_cache, layer_checkpoints, layers_kv

    t0 = time.time()
    with torch.no_grad():
        e = model.get_input_embeddings()(ids[start:][None])  # (1, T - start, H)
    n_layers = len(layers_kv(past)) if past is not None else model.config.num_hidden_layers
    pieces: list[list[tuple[Any, Any]]] = [[kv] for kv in layers_kv(past)] if past is not None else [[] for _ in range(n_layers)]
    leaves, out_lp, ends, seconds = [], {}, [], []
    a = start
    with (measure or (lambda: contextlib.nullcontext({})))() as saved:
        for end, (o_s, o_e) in calls:
            if not a < o_s <= o_e <= end:  # the output's first prediction must be made in this chunk
                raise ValueError(f"a call ending at {end} has its output at {o_s}..{o_e}, not in its chunk from {a}")
            leaf = e[:, a - start:end - start].detach().clone().requires_grad_(True)  # (1, end - a, H)
            sink: list[list[tuple[Any, Any]]] = [[] for _ in range(n_layers)]
            cache = chunk_cache(model, pieces, sink)
            with torch.enable_grad(), (layer_checkpoints(model, reads_cache=True) if checkpoint else contextlib.nullcontext()):
                out = model(inputs_embeds=leaf, **{cache_kwarg(model): cache}, use_cache=False,
                            logits_to_keep=end - o_s + 1)  # positions o_s - 1 .. end - 1
                logits = out.logits[0, :o_e - o_s].float()  # (n_out, V): the predictions of y_1 .. y_n
                out_lp[end] = ((o_s, o_e), logits.log_softmax(-1).gather(-1, ids[o_s:o_e][:, None])[:, 0])  # (n_out,)
            pieces = [p + s for p, s in zip(pieces, sink)]
            leaves.append(leaf)
            ends.append(end)
            seconds.append(time.time() - t0)
            a = end
    # what the graph holds: the tensors saved for backward, and every chunk's keys and values (the
    # chunks after it read them)
    for t in (t for p in pieces for kv in (p[1:] if past is not None else p) for t in kv):
        saved.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
    nbytes = sum(saved.values())
    if checkpoint:  # what the checkpoints hold, which the meter does not see: each layer's input
        nbytes += n_layers * e.numel() * e.element_size()
    return SharedPass(tuple(ids.tolist()), start, False, leaves, e, out_lp, ends, seconds, nbytes)
