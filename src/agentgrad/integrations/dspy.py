"""A DSPy program run as an agentgrad trace (the optional extra ``agentgrad[dspy]``).

``trace_dspy(program, **inputs)`` runs a ``dspy.Module`` with :class:`DSPyTracer` among DSPy's
callbacks and returns ``(prediction, Trace)``: every predictor call is a ``call`` node named after the
predictor (``named_predictors()``), with the exact messages DSPy's adapter sent (``on_adapter_format_end``).
Its output is the value of its output field, which is what later predictors read (the LM's raw
completion, with the adapter's field markers, is kept in ``meta["completion"]``); a predictor with
several output fields keeps the raw completion as its output. ``attribute``, ``report`` and the blame
methods then work on DSPy programs unchanged.

Provenance: DSPy does not expose which earlier output a predictor's input came from, so it is
recovered by exact string match: an input field whose value equals an output field of an earlier
predictor call comes from that call (the latest such call); any other input value is an ``input``
node (one per distinct field and value). Spans are located in the formatted user message: the value
where the adapter placed it, after its field marker (``[[ ## field ## ]]``) when there is one, else
its first occurrence. A value that does not appear verbatim in the message (an adapter that reformats
it), or that is one field of a multi-field output, gets no span: the call keeps that source as a
parent only.
"""

from __future__ import annotations

from typing import Any, Callable

from agentgrad.blame.backward import VerbalLoss
from agentgrad.blame.methods import DEFAULT_METHOD
from agentgrad.core.trace import Node, Span, Trace
from agentgrad.errors import ConfigError, ModelError, TraceError
from agentgrad.extras import require
from agentgrad.integrations.gepa import GBCComponentSelector


def require_dspy() -> Any:
    return require("dspy", "dspy", "the DSPy integration")


def _text(v: Any) -> str:
    return v if isinstance(v, str) else str(v)


def _locate(content: str, field: str, value: str) -> tuple[int, int] | None:
    if not value:
        return None
    marker = f"[[ ## {field} ## ]]"
    at = content.find(marker)
    start = content.find(value, at + len(marker)) if at >= 0 else -1
    if start < 0:
        start = content.find(value)
    return (start, start + len(value)) if start >= 0 else None


class _Recorder:
    """Builds the trace from predictor calls, one at a time: the one place that turns a call's inputs,
    messages and outputs into a node (exact-match provenance, spans), for the live tracer and for
    traces DSPy already recorded (``dspy.GEPA``'s trajectories)."""

    def __init__(self, trace_id: str = ""):
        self.trace = Trace(id=trace_id)
        self._by_value: dict[str, int] = {}  # output value -> the latest call node that produced it
        self._inputs: dict[tuple[str, str], int] = {}  # (field, value) -> input node
        self._whole: dict[int, bool] = {}  # call node -> whether its output is exactly one field's value

    def add_call(self, name: str, inputs: dict[str, Any], messages: list[dict[str, Any]],
                 values: dict[str, Any], completion: str | None) -> Node:
        msgs = [dict(m) for m in messages]
        user = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=len(msgs) - 1)
        content = msgs[user].get("content") if isinstance(msgs[user].get("content"), str) else ""
        spans, parents = [], set()
        for field, value in inputs.items():
            text = _text(value)
            src = self._by_value.get(text)
            if src is None:
                key = (field, text)
                if key not in self._inputs:
                    self._inputs[key] = self.trace.add(Node(id=-1, kind="input", name=field, text=text)).id
                src = self._inputs[key]
            parents.add(src)
            if not self._whole.get(src, True):  # a part of a multi-field output: no exact span
                continue
            where = _locate(content, field, text)
            if where is not None and not any(s.start < where[1] and where[0] < s.end for s in spans):
                spans.append(Span(src, user, *where))
        single = len(values) == 1 and next(iter(values.values())) is not None
        # one output field: the node's output is its value (what later predictors read, so spans from
        # it are exact); several: the raw completion, and readers get the node as a parent only
        text = _text(next(iter(values.values()))) if single else (completion or "")
        node = self.trace.add(Node(id=-1, kind="call", name=name, text=text, messages=msgs,
                                   spans=sorted(spans, key=lambda s: s.start), parents=sorted(parents),
                                   model={"backend": "dspy"}, meta={"completion": completion, "fields": list(values)}))
        for value in values.values():
            if value is not None:
                self._by_value[_text(value)] = node.id
        self._whole[node.id] = single
        return node


def make_tracer(program: Any = None) -> Any:
    """A DSPy callback that records predictor calls into ``tracer.trace`` (a new one with ``reset``)."""
    dspy = require_dspy()
    from dspy.utils.callback import BaseCallback

    names = {id(p): n for n, p in program.named_predictors()} if program is not None else {}

    class DSPyTracer(BaseCallback):
        def __init__(self) -> None:
            self.reset()

        def reset(self, trace_id: str = "") -> None:
            self._rec = _Recorder(trace_id)
            self._open: list[dict[str, Any]] = []  # predictor calls in progress, innermost last

        @property
        def trace(self) -> Trace:
            return self._rec.trace

        def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
            if isinstance(instance, dspy.Predict):
                name = names.get(id(instance)) or getattr(instance.signature, "__name__", "predict")
                self._open.append({"id": call_id, "name": name, "inputs": dict(inputs.get("kwargs") or {}),
                                   "messages": None, "completion": None, "outputs": instance.signature.output_fields})

        def on_adapter_format_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
            if self._open and isinstance(outputs, list) and self._open[-1]["messages"] is None:
                self._open[-1]["messages"] = [dict(m) for m in outputs]

        def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
            if self._open and outputs:
                first = outputs[0]
                self._open[-1]["completion"] = first.get("text") if isinstance(first, dict) else _text(first)

        def on_module_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
            if not self._open or self._open[-1]["id"] != call_id:
                return
            rec = self._open.pop()
            if exception is not None or rec["messages"] is None:
                return
            values = {f: getattr(outputs, f, None) for f in rec["outputs"]} if outputs is not None else {}
            self._rec.add_call(rec["name"], rec["inputs"], rec["messages"], values, rec["completion"])

    return DSPyTracer()


def trace_dspy(program: Any, trace_id: str = "", **inputs: Any) -> tuple[Any, Trace]:
    """Run ``program(**inputs)`` with the tracer among DSPy's callbacks; returns (prediction, Trace)."""
    dspy = require_dspy()
    tracer = make_tracer(program)
    tracer.reset(trace_id)
    callbacks = list(dspy.settings.get("callbacks") or []) + [tracer]
    with dspy.context(callbacks=callbacks):
        prediction = program(**inputs)
    tracer.trace.validate()
    return prediction, tracer.trace


def _namer(program: Any, candidate: dict[str, str] | None) -> Callable[[Any], str]:
    """Names the predictor objects of a recorded DSPy trace after ``program.named_predictors()``.

    The predictors in ``dspy.GEPA``'s trajectories belong to a copy of the program built from the
    candidate, so they are matched by signature: the same input and output fields and the
    candidate's instruction for that name (DSPy's own reflective dataset matches by signature
    too). Predictors that share both (two copies of one signature) are told apart by object: the
    first distinct object met takes the first such name in ``named_predictors()`` order, and so on.
    """
    named = list(program.named_predictors())
    candidate = candidate or {}
    taken: dict[int, str] = {}

    def same(name: str, p: Any, pred: Any) -> bool:
        a, b = p.signature, pred.signature
        return (list(a.input_fields) == list(b.input_fields) and list(a.output_fields) == list(b.output_fields)
                and b.instructions == candidate.get(name, a.instructions))

    def name_of(pred: Any) -> str:
        if id(pred) not in taken:
            direct = [n for n, p in named if p is pred]
            matches = direct or [n for n, p in named if same(n, p, pred)]
            free = [n for n in matches if n not in taken.values()]
            taken[id(pred)] = (free or matches or [getattr(pred.signature, "__name__", "predict")])[0]
        return taken[id(pred)]

    return name_of


def trace_from_dspy(steps: list[Any], program: Any, candidate: dict[str, str] | None = None,
                    adapter: Any = None, trace_id: str = "") -> Trace:
    """An agentgrad trace from the predictor calls DSPy recorded (``dspy.settings.trace`` entries,
    ``dspy.GEPA``'s ``trajectory["trace"]``): a list of ``(predictor, inputs, outputs)``.

    Each call's messages are what ``adapter`` (DSPy's configured one, else ``ChatAdapter``) formats
    for that predictor's signature, demos and inputs, so the trace equals what :func:`trace_dspy`
    records live for the same run; names, provenance and spans as there (see :func:`_namer`).
    """
    dspy = require_dspy()
    adapter = adapter or dspy.settings.adapter or dspy.ChatAdapter()
    name_of, rec = _namer(program, candidate), _Recorder(trace_id)
    for pred, inputs, outputs in steps:
        sig = pred.signature
        messages = adapter.format(sig, list(getattr(pred, "demos", []) or []), dict(inputs))
        values = {f: getattr(outputs, f, None) for f in sig.output_fields}
        rec.add_call(name_of(pred), dict(inputs), messages, values, None)  # DSPy keeps no raw completion
    rec.trace.validate()
    return rec.trace


def _fields(obj: Any, names: list[str]) -> str:
    return "; ".join(f"{n}: {_text(getattr(obj, n, None) if not isinstance(obj, dict) else obj.get(n))}"
                     for n in names)


def dspy_loss(trace: Trace, example: Any, prediction: Any, score: Any) -> VerbalLoss:
    """The verbal loss of a failed DSPy episode, attached to its last predictor call: the example's
    labels as expected, the prediction's fields as produced, and the metric's feedback (a
    ``ScoreWithFeedback``'s ``feedback``) or its score as the explanation."""
    calls = trace.calls()
    if not calls:
        raise ConfigError("the DSPy trajectory has no predictor call to attach a loss to")
    labels = list(example.labels().keys()) if hasattr(example, "labels") else []
    feedback = getattr(score, "feedback", None) if not isinstance(score, (int, float)) else None
    value = getattr(score, "score", score)
    explanation = feedback or f"the metric scored this answer {value}"
    return VerbalLoss.generic(_fields(example, labels) or "(no labels)", _fields(prediction, labels) or
                              _text(prediction), explanation, [calls[-1].id])


class DSPyGBCSelector(GBCComponentSelector):
    """The GBC component selector for ``dspy.GEPA(component_selector=...)``.

    DSPy hands the selector its own trajectories (``example``, ``prediction``, ``trace`` of
    ``(predictor, inputs, outputs)``, ``score``); every one scoring below ``threshold`` becomes an
    agentgrad trace (:func:`trace_from_dspy`) with its verbal loss (:func:`dspy_loss`), the blame
    method ranks its predictors with the white-box ``scorer``, and the most blamed predictor names
    are returned (votes, ``top_k``, ``fallback`` as :class:`GBCComponentSelector`). A trajectory
    that cannot be blamed (a call longer than the scorer's context, ...) gets no vote and is listed
    in ``skipped`` with the reason; the optimisation goes on.
    """

    def __init__(self, program: Any, scorer: Any, method: str = DEFAULT_METHOD, top_k: int = 1,
                 fallback: str = "round_robin", threshold: float = 1.0, adapter: Any = None):
        from agentgrad.blame.methods import canonical, get_blame_method, needs_scorer

        require_dspy()
        super().__init__(top_k, fallback)
        self.program, self.scorer, self.threshold, self.adapter = program, scorer, threshold, adapter
        self.method = canonical(method)  # an unknown method fails here
        self.blame = get_blame_method(self.method)
        if scorer is None and needs_scorer(method):
            raise ConfigError(f"blame method {method} needs a white-box scorer (agentgrad.attribution.Scorer)")
        self.rankings: list[list[Any]] = []  # per failed trajectory seen, its ranking (for inspection)
        self.skipped: list[tuple[int, str]] = []  # (trajectory index, why) of trajectories that could not be blamed

    def top_agents(self, trajectories: list[Any], candidate: dict[str, str]) -> list[str]:
        from agentgrad.blame.context import BlameContext

        out = []
        for i, t in enumerate(trajectories or []):
            score = t.get("score")
            value = getattr(score, "score", score)
            if value is None or float(value) >= self.threshold or not t.get("trace"):
                continue
            try:  # one trajectory that cannot be blamed (longer than the scorer's context, ...) does not
                # end the optimisation: it is counted in ``skipped`` and gets no vote
                trace = trace_from_dspy(t["trace"], self.program, candidate, self.adapter, f"dspy-{i}")
                loss = dspy_loss(trace, t.get("example"), t.get("prediction"), score)
                ranking = self.blame(BlameContext(trace, loss, self.scorer))
            except (ModelError, TraceError) as e:
                self.skipped.append((i, str(e)))
                continue
            self.rankings.append(ranking)
            out += self.vote(ranking, candidate)
        return out
