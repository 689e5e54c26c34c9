"""A DSPy program traced into an agentgrad trace: nodes, exact spans, provenance, and attribution on it."""

from __future__ import annotations

import sys

import pytest

from agentgrad.errors import ConfigError

from agentgrad.integrations.dspy import trace_dspy
from conftest import assert_spans_exact

try:
    import dspy
except ImportError:  # each test that needs it is skipped, and counted, with the reason
    dspy = None
needs_dspy = pytest.mark.skipif(dspy is None, reason="dspy tests: DSPy is not installed (pip install -e '.[dspy]')")


if dspy is not None:

    class Prog(dspy.Module):
        """Two predictors: facts, then the answer from the question and the facts."""

        def __init__(self):
            super().__init__()
            self.facts = dspy.Predict("question -> facts")
            self.answer = dspy.Predict("question, facts -> answer")

        def forward(self, question):
            f = self.facts(question=question).facts
            return self.answer(question=question, facts=f)


@needs_dspy
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


def _scripted_lm():
    from dspy.utils.dummies import DummyLM

    # the answer predictor's message holds the facts ("fact:"), the facts predictor's does not
    return DummyLM({"fact:": {"answer": "It is 9."}, "question": {"facts": "fact: 9"}})


def _metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    ok = pred.answer == gold.answer
    return dspy.Prediction(score=float(ok), feedback="right" if ok else f"the answer should be {gold.answer}")


@needs_dspy
def test_recorded_trajectory_rebuilds_the_live_trace():
    """``trace_from_dspy`` on what DSPy recorded equals what the callback tracer recorded live."""
    from agentgrad.integrations.dspy import trace_from_dspy

    prog = Prog()
    with dspy.context(lm=_scripted_lm()):
        _, live = trace_dspy(prog, trace_id="q", question="What is x?")
        with dspy.context(trace=[]):
            prog(question="What is x?")
            steps = list(dspy.settings.trace)
    rebuilt = trace_from_dspy(steps, prog, trace_id="q")
    assert len(rebuilt.nodes) == len(live.nodes) == 3
    for a, b in zip(rebuilt.nodes, live.nodes):
        assert (a.kind, a.name, a.text, a.parents, a.messages, a.spans) == (b.kind, b.name, b.text, b.parents,
                                                                           b.messages, b.spans)
    assert assert_spans_exact(rebuilt) == 3


@needs_dspy
def test_predictors_of_a_copy_are_named_by_signature_and_instruction():
    """dspy.GEPA's trajectories hold predictors of a copy of the program: named by matching signature."""
    from agentgrad.integrations.dspy import trace_from_dspy

    prog = Prog()
    copy = prog.deepcopy()
    copy.facts.signature = copy.facts.signature.with_instructions("List the facts.")
    with dspy.context(lm=_scripted_lm(), trace=[]):
        copy(question="What is x?")
        steps = list(dspy.settings.trace)
    cand = {"facts": "List the facts.", "answer": prog.answer.signature.instructions}
    tr = trace_from_dspy(steps, prog, cand)
    assert [n.name for n in tr.calls()] == ["facts", "answer"]


@needs_dspy
def test_gbc_selector_inside_dspy_gepa(tiny_llama):
    """dspy.GEPA with ``component_selector=DSPyGBCSelector``: the selector picks what the blame method
    ranks first on the live trace of the same run, and GEPA rewrites only the picked predictors."""
    from dspy.utils.dummies import DummyLM

    from agentgrad.attribution import Scorer
    from agentgrad.blame.methods import BlameContext, get_blame_method
    from agentgrad.integrations.dspy import DSPyGBCSelector, dspy_loss

    scorer = Scorer(str(tiny_llama))
    method = "gbc:mean_l1:whole:path"
    prog = Prog()
    train = [dspy.Example(question=f"What is x{i}?", answer="It is 7.").with_inputs("question") for i in range(3)]
    sel = DSPyGBCSelector(prog, scorer, method=method, fallback="none")
    reflection = DummyLM([{"new_instruction": "```\nCheck every fact twice.\n```"}] * 20)
    with dspy.context(lm=_scripted_lm()):
        opt = dspy.GEPA(metric=_metric, reflection_lm=reflection, component_selector=sel, max_metric_calls=12,
                        reflection_minibatch_size=2, seed=0)
        result = opt.compile(prog, trainset=train, valset=train[:1])
        # what the method ranks first on the live trace of the first example, computed independently
        pred, live = trace_dspy(prog, question=train[0].question)
        score = _metric(train[0], pred)
    expected = get_blame_method(method)(BlameContext(live, dspy_loss(live, train[0], pred, score), scorer))[0].agent
    assert sel.history and all(picks == [expected] for picks in sel.history)
    assert sel.rankings and all(r[0].agent == expected for r in sel.rankings)
    changed = {n for n, p in result.named_predictors() if p.signature.instructions != prog.__getattribute__(n)
               .signature.instructions}
    assert changed <= {expected}


@needs_dspy
def test_dspy_selector_bad_input():
    from agentgrad.errors import RegistryError
    from agentgrad.integrations.dspy import DSPyGBCSelector

    with pytest.raises(RegistryError, match="unknown blame method"):
        DSPyGBCSelector(Prog(), None, method="gbc:nope")
    with pytest.raises(ConfigError, match="fallback"):
        DSPyGBCSelector(Prog(), None, fallback="sometimes")
    with pytest.raises(ConfigError, match="needs a white-box scorer"):
        DSPyGBCSelector(Prog(), None)


@needs_dspy
def test_dspy_selector_skips_a_trajectory_it_cannot_blame(tiny_llama):
    """A trajectory longer than the scorer's context gets no vote and is listed; the fallback answers."""
    from agentgrad.attribution import Scorer
    from agentgrad.integrations.dspy import DSPyGBCSelector

    prog = Prog()
    with dspy.context(lm=_scripted_lm(), trace=[]):
        pred = prog(question="What is x?")
        steps = list(dspy.settings.trace)
    gold = dspy.Example(question="What is x?", answer="It is 7.").with_inputs("question")
    traj = {"example": gold, "prediction": pred, "trace": steps, "score": _metric(gold, pred)}
    cand = {n: p.signature.instructions for n, p in prog.named_predictors()}
    sel = DSPyGBCSelector(prog, Scorer(str(tiny_llama), max_context=16), fallback="all")
    assert sel(None, [traj], [0.0], 0, cand) == ["facts", "answer"]
    assert len(sel.skipped) == 1 and "context" in sel.skipped[0][1] and not sel.rankings
