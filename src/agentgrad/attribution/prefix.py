"""The scorer's prefix cache: the no-grad key/value cache of the tokens before a call's first span.

The tokens before the first span (system prompt, tool schemas, template header) need no
gradients: they run once, their key/value cache is kept (least recently used first, within a count
and a byte budget), keyed by the exact prefix token ids (so by agent prompt and scorer), and every
later call of that agent starts from it. Each use gets the cache re-wrapped (:func:`rewrap_cache`),
so the stored tensors are never mutated.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from agentgrad.models.batching import output_cache


def rewrap_cache(cache: Any) -> Any:
    """A cache object that shares the stored tensors but not the containers that ``update`` rebinds.

    transformers' dynamic cache layers replace their ``keys``/``values`` with new tensors
    (``torch.cat``) on every update; giving each use its own layer objects keeps the stored
    prefix intact without copying a single tensor.
    """
    new = copy.copy(cache)
    new.layers = [copy.copy(layer) for layer in cache.layers]
    return new


def cache_nbytes(cache: Any) -> int:
    """What a dynamic cache's keys and values hold, in bytes."""
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


class PrefixCache:
    """Prefix token ids -> their no-grad key/value cache, LRU within ``size`` entries and ``nbytes``
    bytes together (the newest entry is always kept). ``stats`` counts hits and misses."""

    def __init__(self, size: int = 32, nbytes: int = 2 * 2**30):
        self.size, self.nbytes = size, nbytes
        self.entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self.entry_bytes: dict[tuple[int, ...], int] = {}
        self.stats = {"hits": 0, "misses": 0}

    def __contains__(self, key: tuple[int, ...]) -> bool:
        return key in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, model: Any, prefix: Any) -> tuple[Any, bool]:
        """The cache of ``prefix`` (a (P,) tensor of token ids), re-wrapped for one use, and whether
        it was kept from before; on a miss ``model`` runs it once without gradients."""
        import torch

        key = tuple(prefix.tolist())
        if key in self.entries:
            self.entries.move_to_end(key)
            self.stats["hits"] += 1
            return rewrap_cache(self.entries[key]), True
        self.stats["misses"] += 1
        with torch.no_grad():
            out = model(input_ids=prefix[None], use_cache=True, logits_to_keep=1)  # prefix[None]: (1, P)
        cache = output_cache(out)
        self.store(key, cache)
        return rewrap_cache(cache), False

    def keep(self, key: tuple[int, ...], kv: list[tuple[Any, Any]]) -> None:
        """Keep a prefix's cache from per-layer (keys, values) slices of a longer pass (copied),
        counted as a miss (the prefix ran, in that pass)."""
        from transformers import DynamicCache

        self.stats["misses"] += 1
        self.store(key, DynamicCache(ddp_cache_data=[(k.detach().clone(), v.detach().clone()) for k, v in kv]))

    def store(self, key: tuple[int, ...], cache: Any) -> None:
        self.entries[key] = cache
        self.entry_bytes[key] = cache_nbytes(cache)
        while len(self.entries) > 1 and (len(self.entries) > self.size or sum(self.entry_bytes.values()) > self.nbytes):
            old, _ = self.entries.popitem(last=False)
            del self.entry_bytes[old]

    def clear(self) -> None:
        self.entries.clear()
        self.entry_bytes.clear()
