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

from typing import Any

from agentgrad.core.trace import Node, Span, Trace
from agentgrad.extras import require


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


def make_tracer(program: Any = None) -> Any:
    """A DSPy callback that records predictor calls into ``tracer.trace`` (a new one with ``reset``)."""
    dspy = require_dspy()
    from dspy.utils.callback import BaseCallback

    names = {id(p): n for n, p in program.named_predictors()} if program is not None else {}

    class DSPyTracer(BaseCallback):
        def __init__(self) -> None:
            self.reset()

        def reset(self, trace_id: str = "") -> None:
            self.trace = Trace(id=trace_id)
            self._open: list[dict[str, Any]] = []  # predictor calls in progress, innermost last
            self._by_value: dict[str, int] = {}  # output value -> the latest call node that produced it
            self._inputs: dict[tuple[str, str], int] = {}  # (field, value) -> input node
            self._whole: dict[int, bool] = {}  # call node -> whether its output is exactly one field's value

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
            msgs = rec["messages"]
            user = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=len(msgs) - 1)
            content = msgs[user].get("content") if isinstance(msgs[user].get("content"), str) else ""
            spans, parents = [], set()
            for field, value in rec["inputs"].items():
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
            values = {f: getattr(outputs, f, None) for f in rec["outputs"]} if outputs is not None else {}
            single = len(values) == 1 and next(iter(values.values())) is not None
            # one output field: the node's output is its value (what later predictors read, so spans from
            # it are exact); several: the raw completion, and readers get the node as a parent only
            text = _text(next(iter(values.values()))) if single else (rec["completion"] or "")
            node = self.trace.add(Node(id=-1, kind="call", name=rec["name"], text=text, messages=msgs,
                                       spans=sorted(spans, key=lambda s: s.start), parents=sorted(parents),
                                       model={"backend": "dspy"},
                                       meta={"completion": rec["completion"], "fields": list(values)}))
            for value in values.values():
                if value is not None:
                    self._by_value[_text(value)] = node.id
            self._whole[node.id] = single

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
