"""A DSPy program traced into an agentgrad trace: nodes, exact spans, provenance, and attribution on it."""

from __future__ import annotations

import sys

import pytest

from agentgrad.errors import ConfigError

dspy = pytest.importorskip("dspy", reason="dspy tests: DSPy is not installed (pip install -e '.[dspy]')")

from agentgrad.integrations.dspy import trace_dspy  # noqa: E402
from conftest import assert_spans_exact  # noqa: E402


class Prog(dspy.Module):
    def __init__(self):
        super().__init__()
        self.facts = dspy.Predict("question -> facts")
        self.answer = dspy.Predict("question, facts -> answer")

    def forward(self, question):
        f = self.facts(question=question).facts
        return self.answer(question=question, facts=f)


def test_two_predictors_become_call_nodes_with_exact_spans(tiny_llama):
    from dspy.utils.dummies import DummyLM

    from agentgrad.attribution import Scorer

    lm = DummyLM([{"facts": "Paris is the capital of France."}, {"answer": "Paris"}])
    with dspy.context(lm=lm):
        pred, tr = trace_dspy(Prog(), trace_id="q1", question="What is the capital of France?")
    assert pred.answer == "Paris"
    assert [(n.kind, n.name) for n in tr] == [("input", "question"), ("call", "facts"), ("call", "answer")]
    facts, answer = tr.nodes[1], tr.nodes[2]
    assert facts.parents == [0] and answer.parents == [0, 1]  # the facts came from the first predictor
    assert {s.source for s in answer.spans} == {0, 1} and assert_spans_exact(tr) == 3
    assert facts.text == "Paris is the capital of France." and "[[ ## facts ## ]]" in facts.meta["completion"]
    assert facts.messages[0]["role"] == "system"
    assert "[[ ## facts ## ]]" in answer.messages[-1]["content"]  # the exact messages DSPy's adapter sent
    results, graph = Scorer(str(tiny_llama)).attribute(tr)  # attribution works on it unchanged
    assert {(e.source, e.target) for e in graph.edges} == {(0, 1), (0, 2), (1, 2)}
    assert all(not r.skipped for r in results)


def test_missing_extra_is_one_line(monkeypatch):
    from agentgrad.integrations import dspy as D

    monkeypatch.setitem(sys.modules, "dspy", None)
    with pytest.raises(ConfigError, match=r"pip install 'agentgrad\[dspy\]'"):
        D.require_dspy()
