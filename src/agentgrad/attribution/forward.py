"""Kept forward passes: one call's pass with its autograd graph, so that another objective of the same
call costs one backward pass (within ``Scorer(graph_bytes=...)``)."""

from __future__ import annotations

import contextlib
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
