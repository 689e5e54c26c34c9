"""What a scorer can do, as typed protocols: what blame methods, the trainer and the CLI may ask of one.

:class:`~agentgrad.attribution.scorer.Scorer` satisfies all three; a stand-in (a test's ideal
copier, a judge-backed scorer) need only satisfy :class:`AttributionScorer`. The two optional
keyword arguments of ``attribute_node`` (``keep``: keep the forward pass for another objective;
``contrast``: the contrastive objective) cannot be told apart by ``isinstance`` (a protocol checks
that members exist, not their signatures), so :func:`capabilities` names them::

    if "keep" in capabilities(scorer):
        scorer.attribute_node(trace, node, keep=True)
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agentgrad.attribution.graph import AttributionGraph
    from agentgrad.attribution.render import RenderedCall
    from agentgrad.attribution.records import NodeAttribution
    from agentgrad.core.trace import Node, Trace

CAPABILITIES = ("keep", "contrast", "occlusion", "batch")


@runtime_checkable
class AttributionScorer(Protocol):
    """Scores recorded calls: per-source connection weights of each call, and its output's log p."""

    tokenizer: Any
    path: Any
    cache_stats: dict[str, int]

    def describe(self) -> dict[str, Any]: ...

    def attribute(self, trace: Trace, on_node: Callable[[NodeAttribution], None] | None = None
                  ) -> tuple[list[NodeAttribution], AttributionGraph]: ...

    def attribute_node(self, trace: Trace, node: Node,
                       target_chars: list[tuple[int, int]] | None = None) -> NodeAttribution: ...

    def output_logprobs(self, node: Node) -> tuple[RenderedCall, list[float]] | None: ...


@runtime_checkable
class OcclusionScorer(AttributionScorer, Protocol):
    """Also scores a call's sources by occlusion (each replaced by a filler, no gradients)."""

    def occlusion_vectors(self, trace: Trace, node: Node, filler: str = " ") -> Any: ...

    def occlusion_weights(self, vectors: Any, target_chars: list[tuple[int, int]] | None = None
                          ) -> dict[int, float]: ...


@runtime_checkable
class GradientScorer(OcclusionScorer, Protocol):
    """A white-box scorer: keeps forward passes, takes the contrastive objective, batches calls."""

    max_context: int
    forward_stats: dict[str, Any]

    def attribute_node(self, trace: Trace, node: Node, target_chars: list[tuple[int, int]] | None = None,
                       keep: bool = False, contrast: str | None = None) -> NodeAttribution: ...

    def attribute_batch(self, items: list[tuple[Trace, Node]], batch_tokens: int) -> list[NodeAttribution]: ...

    def prefix_cache(self, prefix: Any) -> tuple[Any, bool]: ...


def capabilities(scorer: Any) -> frozenset[str]:
    """What ``scorer`` can do beyond :class:`AttributionScorer`, of :data:`CAPABILITIES`: its
    declared ``capabilities`` where it has them, else read from what it has (the keyword arguments
    of its ``attribute_node``, its occlusion and batch methods). Empty for None."""
    if scorer is None:
        return frozenset()
    declared = getattr(type(scorer), "capabilities", None)
    if isinstance(declared, frozenset):
        return declared
    found = set()
    params = inspect.signature(scorer.attribute_node).parameters if hasattr(scorer, "attribute_node") else {}
    found.update(p for p in ("keep", "contrast") if p in params)
    if isinstance(scorer, OcclusionScorer):
        found.add("occlusion")
    if callable(getattr(scorer, "attribute_batch", None)):
        found.add("batch")
    return frozenset(found)
