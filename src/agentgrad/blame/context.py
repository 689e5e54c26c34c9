"""What a blame method sees of one episode (:class:`BlameContext`) and what it returns (:class:`Blame`).

A method sees only what a real run has: the trace (without any generator's truth), the verbal loss
(its text, targets, ``details`` and the ``spans`` of the output it names as wrong) and a scorer. The
context computes the scorer's gradients, occlusions and log-probabilities on demand and caches them,
so that every method run on one episode shares them: one episode's gradients are computed once,
whatever the methods.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from agentgrad.attribution.protocol import capabilities
from agentgrad.blame.backward import VerbalLoss
from agentgrad.blame.facts import FactReader, detect_reader
from agentgrad.blame.judge import steps_of
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError


@dataclass
class Blame:
    """One entry of a ranking: the node blamed, its agent (a tool's or input's name for those), a score."""

    agent: str
    node: int
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "node": self.node, "score": self.score}


def top_tied(ranking: list[Blame], key: Callable[[Blame], Any]) -> list[Any]:
    """The distinct ``key`` values of the blames tied at the top score (none for an empty ranking)."""
    best = max((b.score for b in ranking), default=None)
    return list(dict.fromkeys(key(b) for b in ranking if b.score == best))


class Meter:
    """What the methods of a context use, told as they use it: :meth:`spent` for every pass, replayed
    run and second (each time a method needs it, cached or not, so that a method's cost is what it
    would cost alone), :meth:`named_nothing` for a method that could not name anyone (a judge with no
    parsable reply, or a prompt longer than its context). This one keeps nothing; a harness that
    reports cost passes its own (the benchmarks' :class:`~agentgrad.benchmarks.planted.bench.Cost`)."""

    def spent(self, seconds: float = 0.0, backward: int = 0, forward: int = 0, generations: int = 0) -> None:
        """``seconds`` of scorer (or replayed-run) time, ``backward`` and ``forward`` passes, ``generations``."""

    def named_nothing(self, method: str, why: str) -> None:
        """``method`` named nothing, ``why``: ``unparsed`` (its judge gave no parsable reply) or ``unread``
        (its prompt was longer than the judge's context)."""

    def computed(self, what: str, node: Any, seconds: float) -> None:
        """A new computation finished (``what``: its kind, e.g. ``gradient blame``; ``node``: the call),
        told once, not on a cached use: what a progress display counts."""


class BlameContext:
    """One episode as a method sees it, with attribution cached across methods.

    Args:
        trace, loss: the episode and its verbal loss (a method starts at ``loss.targets[0]``; see
            :meth:`focus` for the others).
        scorer: the white-box scorer (gradient, occlusion and temporal methods).
        seed: seeds tie-breaking and the random control.
        judge: the LLM judge of the ``judge:*`` methods.
        top_k: incoming edges a ``path``, ``earliest`` or ``maxw`` walk keeps per call.
        replayer: for runs with a checkable outcome, ``(node, sample) -> (right, generations)``: the
            run again with that call's output sampled afresh (sample ``sample``) and everything after
            it generated again, whether its final answer is right, and how many generations it took
            (the ``replay`` method; see :class:`~agentgrad.runs.replay.Replayer`).
        replays: fresh samples per upstream call of the ``replay`` method.
        meter: told what the methods use (:class:`Meter`; default: nothing is kept).

    ``walked`` is the parents map (node -> the sources followed) of the last walk a method made;
    methods that do not walk leave it empty. ``objective`` is what :meth:`attribute` differentiates
    when it is not told (``whole`` unless given; a walk tells it its ``OBJ``; :meth:`objective_of`
    gives a view of the context with another). It is never changed.
    """

    def __init__(self, trace: Trace, loss: VerbalLoss, scorer: Any = None, seed: int = 0, judge: Any = None,
                 top_k: int = 1, replayer: Callable[[int, int], tuple[bool, int]] | None = None, replays: int = 3,
                 meter: Meter | None = None, objective: str = "whole"):
        self.trace, self.loss, self.scorer, self.seed, self.judge = trace, loss, scorer, seed, judge
        self.top_k, self.replayer, self.replays = top_k, replayer, replays
        self.meter = meter if meter is not None else Meter()
        self._replayed: dict[tuple[int, int], tuple[bool, float, int]] = {}  # (node, sample) -> (right, seconds, generations)
        self._cache: dict[tuple, tuple[Any, float, int, int]] = {}  # key -> (value, seconds, backward, forward)
        self._render: dict[int, Any] = {}
        self._reader: list[FactReader] = []  # the fact reader detected from the trace, once (see reader)
        self.walked: dict[int, list[int]] = {}
        self.objective = objective

    def focus(self, target: int) -> "BlameContext":
        """The same episode with the loss narrowed to one of its targets (and that target's spans),
        sharing this context's caches."""
        loss = VerbalLoss(self.loss.text, [target], self.loss.kind, self.loss.details,
                          {target: self.loss.spans[target]} if target in self.loss.spans else {})
        return self._view(loss, self.objective)

    def _view(self, loss: VerbalLoss, objective: str) -> "BlameContext":
        ctx = BlameContext(self.trace, loss, self.scorer, self.seed, self.judge, self.top_k, self.replayer,
                           self.replays, self.meter, objective)
        ctx._cache, ctx._render, ctx._replayed, ctx._reader = self._cache, self._render, self._replayed, self._reader
        return ctx

    @contextmanager
    def objective_of(self, objective: str) -> Iterator["BlameContext"]:
        """A view of this context (its caches and meter shared) whose :meth:`attribute` differentiates
        ``objective`` when not told; this context is unchanged."""
        yield self._view(self.loss, objective)

    def _objective_call(self, node: int, region: tuple[tuple[int, int], ...] | None, objective: str) -> Any:
        """``(node scored, its target characters, the contrast text)`` for the failure-conditioned
        objectives, or None where the call's own output is differentiated (``whole``, ``targeted``,
        and ``contrast`` without an expected answer in the loss: it falls back to ``whole``).

        - ``contrast``: the recorded output (the part the loss's span names at its target) against the
          loss's expected answer (``details["expected"]``) at the same position;
        - ``judged``: the scorer reads the call, its reply and the verbal loss, and the objective is
          its "Yes" against its "No" to "is the mistake here" (:func:`~agentgrad.attribution.render.judgment_call`).
        """
        from agentgrad.attribution.render import VERDICTS, judgment_call

        call = self.trace.nodes[node]
        if objective == "contrast":
            expected = self.loss.details.get("expected")
            if expected in (None, ""):
                return None
            chars = region or (tuple(self.loss.spans.get(node, [])) or None)
            return call, chars, str(expected)
        if objective == "judged":
            return judgment_call(call, self.loss.text), None, VERDICTS[1]
        return None

    def prime(self, results: list[Any]) -> None:
        """Whole-output attributions already computed (``Scorer.attribute``), reused by the methods."""
        for r in results:
            self._cache.setdefault(("gradient blame", r.node_id, ()), (r, r.seconds, 1, 0))

    def _cached(self, key: tuple, compute: Callable[[], Any], backward: int, forward: Callable[[Any], int],
                alone: Callable[[Any, float], float] | None = None) -> Any:
        """``compute()`` once per key; every use tells the meter its passes and seconds (``alone(value,
        wall seconds)``: what it would have cost without the passes it shared, the wall time by default)."""
        if key not in self._cache:
            if self.scorer is None:
                raise ConfigError(f"{key[0]} needs a scorer")
            t0 = time.time()
            value = compute()
            wall = time.time() - t0
            self._cache[key] = (value, alone(value, wall) if alone else wall, backward, forward(value))
            self.meter.computed(str(key[0]), key[1] if len(key) > 1 else None, wall)
        value, seconds, b, f = self._cache[key]
        self.meter.spent(seconds, backward=b, forward=f)
        return value

    def too_long(self) -> bool:
        """Whether some call the methods needed was longer than the scorer's context (and skipped)."""
        return bool(self.skipped_calls())

    def skipped_calls(self) -> list[int]:
        """The calls the methods needed that were longer than the scorer's context (and skipped)."""
        return sorted({k[1] for k, v in self._cache.items()
                       if k[0] == "gradient blame" and v[0].skipped and "context" in v[0].skipped})

    def whole_attributions(self) -> list[Any]:
        """The whole-output attributions the methods computed (the paper's objective), in node order."""
        found = {k[1]: v[0] for k, v in self._cache.items() if k[0] == "gradient blame" and not k[2] and len(k) == 3}
        return [found[n] for n in sorted(found)]

    def scored(self) -> list[Any]:
        """One attribution per call the methods scored (its whole-output one where computed, else the
        first computed for it), in node order: what a report draws of a blame that scored only the calls
        its methods read."""
        found: dict[int, Any] = {}
        for k, v in self._cache.items():
            if k[0] == "gradient blame" and len(k) == 3 and hasattr(v[0], "sources"):  # the call's own output
                if k[1] not in found or not k[2]:
                    found[k[1]] = v[0]
        return [found[n] for n in sorted(found)]

    @property
    def reader(self) -> FactReader:
        """The fact reader of the trace's text (:func:`~agentgrad.blame.facts.detect_reader`), read once
        per context (its views share it): what a method that reads facts uses unless told another."""
        if not self._reader:
            self._reader.append(detect_reader(self.trace))
        return self._reader[0]

    @property
    def judge_requests(self) -> int:
        return self.judge.requests if self.judge is not None else 0

    @property
    def target(self) -> int:
        return self.loss.targets[0]

    def wrong_text(self) -> str | None:
        spans = self.loss.spans.get(self.target)
        if not spans:
            return None
        a, b = spans[0]
        return self.trace.nodes[self.target].text[a:b] or None

    def _scorer_takes(self, parameter: str) -> bool:
        """Whether the scorer can do ``parameter`` (``keep``, ``contrast``): its declared capabilities
        (:func:`agentgrad.attribution.protocol.capabilities`)."""
        return parameter in capabilities(self.scorer)

    def contrasts(self) -> bool:
        """Whether the ``contrast`` objective differentiates something of its own here: the loss gives
        an expected answer and the scorer takes a contrast (elsewhere it would be ``whole``, or fail)."""
        return self.loss.details.get("expected") not in (None, "") and self._scorer_takes("contrast")

    def attribute(self, node: int, region: tuple[tuple[int, int], ...] | None, objective: str | None = None) -> Any:
        """The scorer's gradients at a call (one backward pass), for the whole output or ``region``,
        under ``objective`` (default :attr:`objective`; ``contrast`` and ``judged`` differentiate their
        own quantity, :meth:`_objective_call`; ``whole`` and ``targeted``, the call's output).
        The call's forward pass is kept, so another objective of it costs one backward pass and
        its occlusion starts from it (its time is counted for each, as if run alone)."""
        # a scorer that can keep a call's forward pass (the Scorer's ``keep``) is asked to
        keep = {"keep": True} if self._scorer_takes("keep") else {}
        objective = objective or self.objective
        failure = self._objective_call(node, region, objective)
        if failure is not None:  # a failure-conditioned objective: a pass of its own
            if self.scorer is not None and not self._scorer_takes("contrast"):
                raise ConfigError(f"the {objective} objective needs a scorer that takes a contrast (agentgrad's Scorer)")
            scored, chars, text = failure
            return self._cached(("gradient blame", node, region or (), objective),
                                lambda: self.scorer.attribute_node(self.trace, scored, list(chars) if chars else None,
                                                                   contrast=text),
                                1, lambda v: 0)
        return self._cached(("gradient blame", node, region or ()),
                            lambda: self.scorer.attribute_node(self.trace, self.trace.nodes[node],
                                                               list(region) if region else None, **keep),
                            # a kept forward pass reused is counted again (the record's seconds)
                            1, lambda v: 0, lambda v, wall: max(wall, getattr(v, "seconds", 0.0)))

    def occlusion(self, node: int, region: tuple[tuple[int, int], ...] | None) -> dict[int, float]:
        """Occlusion weights of a call's sources (one forward pass, plus one per source: counted so
        for every method, though every objective and region of a call shares one batch of them)."""
        stats = getattr(self.scorer, "forward_stats", {})
        skipped = stats.get("occlusion_reused_seconds", 0.0)
        vectors = self._cached(("occlusion", node), lambda: self.scorer.occlusion_vectors(self.trace, self.trace.nodes[node]),
                               0, lambda v: 0 if v is None else 1 + len(v[2]),
                               # the unoccluded pass it took from a kept gradient pass is counted
                               lambda v, wall: wall + stats.get("occlusion_reused_seconds", 0.0) - skipped)
        if vectors is None:
            return {s: 0.0 for s in self.render(node).source_ranges}
        return self.scorer.occlusion_weights(vectors, list(region) if region else None)

    def output_logprobs(self, node: int) -> Any:
        """(rendering, log p of each output token) of a call; None when it cannot be scored. Where
        the call's occlusion was computed, its unoccluded row is this (no second forward pass; the
        time counted for it is that pass's share of the occlusion's)."""
        occluded = self._cache.get(("occlusion", node))
        if ("temporal credit", node) not in self._cache and occluded is not None and occluded[0] is not None:
            r, base, variants = occluded[0]
            self._cache[("temporal credit", node)] = ((r, list(base)), occluded[1] / (1 + len(variants)), 0, 1)
        return self._cached(("temporal credit", node), lambda: self.scorer.output_logprobs(self.trace.nodes[node]),
                            0, lambda v: 1)

    def replay(self, node: int, sample: int) -> bool:
        """Whether the run, with call ``node`` sampled afresh (sample ``sample``) and everything after it
        generated again, ends right; cached, and told to the meter (its seconds and generations) at each use."""
        if self.replayer is None:
            raise ConfigError("replay needs runs that can be run again with a checkable outcome "
                              "(agentgrad bench inject; Python: BlameContext(..., replayer=...))")
        key = (node, sample)
        if key not in self._replayed:
            t0 = time.time()
            right, generations = self.replayer(node, sample)
            self._replayed[key] = (right, time.time() - t0, generations)
        right, seconds, generations = self._replayed[key]
        self.meter.spent(seconds, generations=generations)
        return right

    def render(self, node: int) -> Any:
        """The scorer's rendering of a call (token offsets, source character ranges), cached."""
        from agentgrad.attribution.render import render_call

        if node not in self._render:
            self._render[node] = render_call(self.scorer.tokenizer, self.trace.nodes[node])
        return self._render[node]

    def upstream(self) -> list[int]:
        """Calls and tools upstream of the loss target (itself included), in trace order."""
        return steps_of(self.trace, self.target)

    def blame(self, node: int, score: float) -> Blame:
        return Blame(self.trace.nodes[node].name, node, score)
