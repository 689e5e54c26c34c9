"""One call's forward pass with gradients, as the scorer keeps it (within ``Scorer(graph_bytes=...)``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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


