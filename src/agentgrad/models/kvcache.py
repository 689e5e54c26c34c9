"""Key/value caches of a local causal LM: the transformers shims and the one prefix cache.

Generation (:mod:`agentgrad.models.batching`: a prompt that starts like one seen before is prefilled
from where they differ) and attribution (:mod:`agentgrad.attribution.scorer`: the tokens before a
call's first span run once without gradients) keep the key/value caches of token prefixes in one
:class:`PrefixCache`. The functions here are the only place that knows how transformers names and
builds a cache (``cache`` or ``past_key_values``, a ``DynamicCache``'s per-layer ``keys`` and
``values``), so that a new transformers release is met once.
"""

from __future__ import annotations

import copy
import inspect
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator

KV = list[tuple[Any, Any]]  # per layer (keys, values), each (B, heads, T, head dim)


def cache_kwarg(model: Any) -> str:
    """The name ``model.forward`` takes a key/value cache under: ``cache`` from transformers 5.24
    (which warns on the old name), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def output_cache(out: Any) -> Any:
    """The key/value cache a forward pass returned, under either transformers name."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def layers_kv(cache: Any) -> KV:
    """A dynamic cache's per-layer (keys, values), the tensors themselves (no copy)."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def dynamic_cache(kv: KV) -> Any:
    """A transformers dynamic cache holding ``kv`` (copied into it, so later updates leave ``kv`` intact)."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=kv)


def growing_cache(kv: KV) -> Any:
    """A dynamic cache holding ``kv`` (copied) whose layers grow in place, for greedy decoding
    (:mod:`agentgrad.models.batching`): each layer keeps room after its positions, ``update`` writes the
    new ones into it and returns views of the filled part, where a dynamic layer concatenates the whole
    cache anew for every token (a copy of every layer's keys and values per step, which grows with the
    positions: on SmolLM2 at 8 rows, one thread, a step took about 0.93 of the time in place at 500 positions
    and 0.78 at 2,000, timed by hand). The views hold the same numbers as the concatenation; the attention
    reads them in place (``tests/models/test_batching.py``: the same logits, bit for bit)."""
    from transformers import DynamicCache

    global _GROWING
    if _GROWING is None:
        from transformers.cache_utils import DynamicLayer

        class GrowingLayer(DynamicLayer):
            """A dynamic cache layer over a buffer with room after its positions (:func:`growing_cache`)."""

            def update(self, key_states, value_states, *args, **kwargs):
                n, t = self.keys.shape[-2], key_states.shape[-2]
                if n + t > self.room_keys.shape[-2]:
                    self.grow(n + t)
                self.room_keys[..., n:n + t, :].copy_(key_states)
                self.room_values[..., n:n + t, :].copy_(value_states)
                self.keys, self.values = self.room_keys[..., :n + t, :], self.room_values[..., :n + t, :]
                return self.keys, self.values

            def grow(self, need: int) -> None:
                """Room for ``need`` positions and a quarter more (at least 64): one copy per so many steps."""
                n, size = self.keys.shape[-2], need + max(64, need // 4)
                self.room_keys = self.keys.new_empty((*self.keys.shape[:-2], size, self.keys.shape[-1]))
                self.room_values = self.values.new_empty((*self.values.shape[:-2], size, self.values.shape[-1]))
                self.room_keys[..., :n, :].copy_(self.keys)
                self.room_values[..., :n, :].copy_(self.values)
                self.keys, self.values = self.room_keys[..., :n, :], self.room_values[..., :n, :]

        _GROWING = GrowingLayer
    cache = DynamicCache(ddp_cache_data=[(k[..., :0, :], v[..., :0, :]) for k, v in kv])  # initialised, empty
    for layer, (k, v) in zip(cache.layers, kv):
        layer.__class__ = _GROWING
        layer.keys, layer.values = k, v
        layer.grow(k.shape[-2])  # the one copy of kv
    return cache


_GROWING: type | None = None


def rewrap_cache(cache: Any) -> Any:
    """A cache object that shares the stored tensors but not the containers that ``update`` rebinds.

    transformers' dynamic cache layers replace their ``keys``/``values`` with new tensors
    (``torch.cat``) on every update; giving each use its own layer objects keeps the stored
    prefix intact without copying a single tensor.
    """
    new = copy.copy(cache)
    new.layers = [copy.copy(layer) for layer in cache.layers]
    return new


def read_only_cache(cache: Any) -> Any | None:
    """A cache that gives the stored prefix to every layer without ever storing what follows: each
    layer's ``update`` returns the prefix's keys and values with the new ones after them and keeps
    nothing. A layer recomputed in the backward pass (:func:`layer_checkpoints`)
    then reads the same prefix as in the forward pass, where a dynamic cache would hold the new positions
    twice. None for a cache that is not plain dynamic layers (nothing here knows how to read it)."""
    from transformers.cache_utils import DynamicLayer

    if not all(type(layer) is DynamicLayer and getattr(layer, "is_initialized", True) for layer in cache.layers):
        return None
    new = rewrap_cache(cache)
    for layer in new.layers:
        layer.__class__ = _read_only_layer()
    return new


def _read_only_layer() -> type:
    global _READ_ONLY
    if _READ_ONLY is None:
        import torch
        from transformers.cache_utils import DynamicLayer

        class ReadOnlyLayer(DynamicLayer):
            """A dynamic cache layer whose ``update`` stores nothing (:func:`read_only_cache`)."""

            def update(self, key_states, value_states, *args, **kwargs):
                return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)

        _READ_ONLY = ReadOnlyLayer
    return _READ_ONLY


_READ_ONLY: type | None = None


def chunk_cache(model: Any, before: list[list[tuple[Any, Any]]], sink: list[list[tuple[Any, Any]]]) -> Any:
    """The cache one chunk of a pass run in chunks reads (:func:`agentgrad.attribution.forward.shared_forward`):
    layer ``l`` gives the keys and values of the positions before the chunk, ``before[l]`` (pieces in order,
    still in the autograd graph), with the chunk's after them, and stores nothing; the chunk's own keys
    and values are appended to ``sink[l]`` once (a layer recomputed in the backward pass reads the same
    pieces again and appends nothing). For plain dynamic layers only (:func:`plain_kv_cache`)."""
    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    global _CHUNK
    if _CHUNK is None:
        class ChunkLayer(DynamicLayer):
            """A dynamic cache layer over pieces that are not concatenated until a layer reads them."""

            def update(self, key_states, value_states, *args, **kwargs):
                if not self.captured:
                    self.sink.append((key_states, value_states))
                    self.captured = True
                if not self.before:
                    return key_states, value_states
                return (torch.cat([k for k, _ in self.before] + [key_states], dim=-2),
                        torch.cat([v for _, v in self.before] + [value_states], dim=-2))

        _CHUNK = ChunkLayer
    cache = DynamicCache(config=model.config)
    for i, layer in enumerate(cache.layers):
        if type(layer) is not DynamicLayer:
            raise ValueError(f"a chunked pass needs plain dynamic cache layers, not {type(layer).__name__}")
        layer.__class__ = _CHUNK
        layer.before, layer.sink, layer.captured = tuple(before[i]), sink[i], False
        n = sum(k.shape[-2] for k, _ in before[i])
        if before[i]:  # what the mask and the positions read: the length, from a view that holds one number
            k0, v0 = before[i][0]
            layer.keys = k0.new_zeros(()).expand(*k0.shape[:-2], n, k0.shape[-1])
            layer.values = v0.new_zeros(()).expand(*v0.shape[:-2], n, v0.shape[-1])
            layer.is_initialized = True
    return cache


_CHUNK: type | None = None


@contextmanager
def layer_checkpoints(model: Any, reads_cache: bool = False) -> Iterator[bool]:
    """Within it, a pass with gradients keeps only each decoder layer's input and recomputes the layer in
    the backward pass (transformers' gradient checkpointing, non-reentrant), so a long call's activations
    need a layer's worth of memory, not the model's; the gradients are the same numbers. Only the layers
    are put in training mode (their own switch: nothing inside them, a dropout included, changes mode),
    and everything is as it was after. ``reads_cache``: the pass reads a prefix through a cache that stores
    nothing (:func:`read_only_cache`), which transformers is told it may then keep
    (it drops a layer's cache under checkpointing, since a cache that stores would be written twice).
    Yields False, changing nothing, for a model without checkpointable layers."""
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # a transformers without per-layer checkpointing
        yield False
        return
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers or not getattr(model, "supports_gradient_checkpointing", False):
        yield False
        return
    new = hasattr(model, "activation_checkpointing_enable")  # transformers 5.25 renamed gradient_checkpointing_*
    was = bool(getattr(model, "is_activation_checkpointing" if new else "is_gradient_checkpointing", False))
    modes = [m.training for m in layers]
    if not was and new:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    elif not was:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not was and hasattr(model, "disable_input_require_grads"):
        try:  # enabling also hooks the embeddings to need gradients (for frozen trainable models): not here,
            model.disable_input_require_grads()  # where the pass's own embeddings are the leaf differentiated
        except AttributeError:  # no hook was added
            pass
    for m in layers:
        m.training = True
        if reads_cache:
            m._can_checkpoint_with_cache = True  # noqa: SLF001 - transformers' switch for a cache only read
    try:
        yield True
    finally:
        for m, mode in zip(layers, modes):
            m.training = mode
            m.__dict__.pop("_can_checkpoint_with_cache", None)
        if not was:
            (model.activation_checkpointing_disable if new else model.gradient_checkpointing_disable)()


def expand_cache(cache: Any, batch: int) -> None:
    """Make a batch-1 cache (a re-wrapped one: its layers are its own) serve ``batch`` rows without a
    copy: every layer's keys and values expanded to (batch, H, T, D)."""
    for layer in cache.layers:
        layer.keys = layer.keys.expand(batch, *layer.keys.shape[1:])
        layer.values = layer.values.expand(batch, *layer.values.shape[1:])


def cache_nbytes(cache: Any) -> int:
    """What a dynamic cache's keys and values hold, in bytes."""
    return sum(t.numel() * t.element_size() for k, v in layers_kv(cache) for t in (k, v))


def plain_kv_cache(model: Any) -> bool:
    """Whether ``model``'s key/value cache is a plain per-layer store (keys and values of every
    position, no sliding window), which can be sliced by position and merged across rows."""
    try:
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        cache = DynamicCache(config=model.config)
        return bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)
    except Exception:  # an architecture the check cannot build a cache for
        return False


class PrefixCache:
    """Token prefixes -> their key/value caches (dynamic caches, batch 1), least recently used out
    first once there are more than ``max_entries`` or they hold more than ``max_bytes`` together; the
    newest entry always stays. Nothing stored is ever mutated: :meth:`get` hands out a re-wrapped
    cache, :meth:`longest` slices.

    ``stats`` counts ``hits`` and ``misses`` (of :meth:`get` and :meth:`longest`), ``reused_tokens``
    the tokens that hits saved; :meth:`clear` forgets the entries, not the counts."""

    def __init__(self, max_bytes: int, max_entries: int | None = None, min_tokens: int = 1):
        self.max_bytes, self.max_entries, self.min_tokens = max_bytes, max_entries, min_tokens
        self.entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()  # oldest first
        self.entry_bytes: dict[tuple[int, ...], int] = {}
        self.bytes = 0  # what the entries hold together
        self.stats = {"hits": 0, "misses": 0}
        self.reused_tokens = 0
        # on a CPU a prefix not kept yet of at most this many tokens runs in the call's own pass
        # (:meth:`runs_in_pass`): one forward call, not two (each costs ~0.1 s of overhead on a CPU,
        # whatever its length); on a GPU, or for a long prefix, the backward over it would cost more
        self.merge_tokens = 64

    def __contains__(self, key: tuple[int, ...]) -> bool:
        return key in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def hits(self) -> int:
        return self.stats["hits"]

    def get(self, key: tuple[int, ...]) -> Any | None:
        """The cache of exactly the prefix ``key``, re-wrapped for one use (:func:`rewrap_cache`), or
        None (a miss)."""
        if key not in self.entries:
            self.stats["misses"] += 1
            return None
        self.entries.move_to_end(key)
        self.stats["hits"] += 1
        self.reused_tokens += len(key)
        return rewrap_cache(self.entries[key])

    def prefill(self, model: Any, prefix: Any) -> tuple[Any, bool]:
        """The cache of ``prefix`` (a (P,) tensor of token ids) re-wrapped for one use, and whether it
        was kept from before; on a miss ``model`` runs it once without gradients, and it is kept."""
        import torch

        key = tuple(prefix.tolist())
        cache = self.get(key)
        if cache is not None:
            return cache, True
        with torch.no_grad():
            out = model(input_ids=prefix[None], use_cache=True, logits_to_keep=1)  # prefix[None]: (1, P)
        cache = output_cache(out)
        self.add(key, cache)
        return rewrap_cache(cache), False

    def runs_in_pass(self, prefix: list[int], device: Any) -> bool:
        """Whether ``prefix``, not kept yet, should run in the call's own pass (and be kept from it with
        :meth:`keep_from_pass`) rather than alone first."""
        return 0 < len(prefix) <= self.merge_tokens and device.type == "cpu" and tuple(prefix) not in self.entries

    def keep_from_pass(self, prefix: list[int], cache: Any) -> None:
        """Keep the first ``len(prefix)`` positions of a whole call's cache as ``prefix``'s (detached
        copies), counted as the miss it is."""
        n = len(prefix)
        self.stats["misses"] += 1
        self.add(prefix, [(k[:, :, :n].detach(), v[:, :, :n].detach()) for k, v in layers_kv(cache)])

    def longest(self, ids: list[int]) -> tuple[int, KV | None]:
        """The longest cached prefix of ``ids`` (at least ``min_tokens``, one token short of the
        whole of ``ids`` at most, so that the last position is computed): its length and per-layer
        (K, V) slices (1, H, p, D); ``(0, None)`` when there is none."""
        best, key = 0, None
        for toks in self.entries:
            n = min(len(toks), len(ids) - 1)
            p = 0
            while p < n and toks[p] == ids[p]:
                p += 1
            if p > best:
                best, key = p, toks
        if best < self.min_tokens or key is None:
            self.stats["misses"] += 1
            return 0, None
        self.entries.move_to_end(key)
        self.stats["hits"] += 1
        self.reused_tokens += best
        return best, [(k[:, :, :best], v[:, :, :best]) for k, v in layers_kv(self.entries[key])]

    def add(self, key: tuple[int, ...] | list[int], cache: Any) -> None:
        """Keep ``cache`` (a dynamic cache, or per-layer (K, V) copied into one) as the prefix
        ``key``'s; a key already kept keeps its entry."""
        key = tuple(key)
        if key in self.entries:
            return
        if isinstance(cache, list):
            cache = dynamic_cache(cache)
        self.entries[key] = cache
        self.entry_bytes[key] = cache_nbytes(cache)
        self.bytes += self.entry_bytes[key]
        while len(self.entries) > 1 and ((self.max_entries is not None and len(self.entries) > self.max_entries)
                                         or self.bytes > self.max_bytes):
            old, _ = self.entries.popitem(last=False)
            self.bytes -= self.entry_bytes.pop(old)

    def clear(self) -> None:
        self.entries.clear()
        self.entry_bytes.clear()
        self.bytes = 0
