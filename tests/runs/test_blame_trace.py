"""Blaming one trace scores only the calls its methods read, with the numbers of scoring them all."""

from __future__ import annotations

import pytest

import agentgrad as ag
from agentgrad.attribution.scorer import Scorer
from agentgrad.runs.blame import blame_trace, reach
from conftest import pipeline_trace

METHODS = ["gbc:max_l1:targeted:blend", "gbc:mean_l1:whole:maxw", "provenance"]


def test_only_the_calls_the_methods_read_are_scored_and_the_verdicts_are_the_same(tiny_llama):
    """The default walk scores the loss's call and those it walks through; scoring every call first
    (attribute_all, the old way) changes no verdict and no weight of a call both scored."""
    tr = pipeline_trace(tiny_llama)
    final = tr.calls()[-1]
    word = final.text.split()[0]
    loss = ag.verbal_loss(tr, "the answer is wrong", wrong=word)
    lean = blame_trace(tr, loss, METHODS, Scorer(str(tiny_llama)))
    full = blame_trace(tr, loss, METHODS, Scorer(str(tiny_llama)), attribute_all=True)
    assert {m: v.to_dict() for m, v in lean.methods.items()} == {m: v.to_dict() for m, v in full.methods.items()}
    assert len(full.attribution.nodes) == len(tr.calls())
    scored = {n.node_id: n for n in lean.attribution.nodes}
    assert final.id in scored and len(scored) <= len(tr.calls())
    for n in full.attribution.nodes:  # a call scored both ways, same objective: the same weights (a prefix
        # run in the call's own pass rather than cached first rounds apart, within 1e-5)
        if n.node_id in scored and scored[n.node_id].log_prob == pytest.approx(n.log_prob, rel=1e-5):
            for a, b in zip(scored[n.node_id].sources, n.sources, strict=True):
                assert a.weights == pytest.approx(b.weights, rel=1e-5, abs=1e-6)
    only_strings = blame_trace(tr, loss, ["provenance"], Scorer(str(tiny_llama)))
    assert only_strings.attribution is None  # a model-free method reads no gradient: nothing scored
    assert reach(tr) == (len(tr.calls()), len(tr.calls()))


def test_a_call_longer_than_the_scorers_context_reads_its_latest_steps_and_the_verdict_says_so(tiny_llama):
    """A group chat whose last call is longer than the scorer's context: it keeps the task and the
    steps nearest it that fit (never truncated silently), the blame runs, and the note says what was cut."""
    from agentgrad.importers.groupchat import group_chat_trace

    msgs = [{"role": "human", "content": "Find the population of Lyon."}]
    for i in range(12):
        msgs.append({"role": "Orchestrator (-> WebSurfer)", "content": f"Step {i}: look it up again. " * 6})
        msgs.append({"role": "WebSurfer", "content": f"Page {i} says nothing about it. " * 6})
    msgs.append({"role": "Orchestrator (thought)", "content": "Lyon has 9,999,999 inhabitants."})
    tr = group_chat_trace(msgs, "long")
    loss = ag.verbal_loss(tr, "wrong population", wrong="9,999,999")
    sc = Scorer(str(tiny_llama), max_context=400, on_too_long="skip")
    tv = blame_trace(tr, loss, ["gbc:max_l1:targeted:blend"], sc)
    final = tr.calls()[-1].id
    assert "read only their latest steps" in tv.note and f"n{final} " in tv.note
    assert tv.data is tr and tv.methods["gbc:max_l1:targeted:blend"].agent  # the blame ran on what fits
    scored = {n.node_id: n for n in tv.attribution.nodes}
    assert final in scored and not scored[final].skipped and len(scored[final].input_ids) <= 400


def test_the_default_window_reads_long_calls_within_it_and_zero_reads_them_whole(tiny_llama):
    """``window``: a chat call longer than it keeps its system prompt, task and latest messages (the note
    names the window); ``window=None`` (``--window 0``) reads every call whole, as the scorer's context allows."""
    from agentgrad.importers.spans import log_trace

    msgs = [{"role": "system", "content": "You are the shop's agent."},
            {"role": "user", "content": "How many shirt options are there?"}]
    for i in range(10):
        msgs += [{"role": "assistant", "content": f"Step {i}: I checked page {i} of the catalogue. " * 3},
                 {"role": "user", "content": f"And page {i + 1}?"}]
    msgs.append({"role": "assistant", "content": "There are 11 shirt options."})
    tr = log_trace(msgs, "chat")
    loss = ag.verbal_loss(tr, "wrong count", wrong="11")
    sc = Scorer(str(tiny_llama))
    whole = blame_trace(tr, loss, ["gbc:max_l1:targeted:blend"], sc, window=None)
    cut = blame_trace(tr, loss, ["gbc:max_l1:targeted:blend"], sc, window=256)
    assert whole.note == "" and "256-token window (--window 0: whole)" in cut.note
    lengths = {n.node_id: len(n.input_ids) for n in cut.attribution.nodes}
    assert lengths and max(lengths.values()) <= 256
    assert max(len(n.input_ids) for n in whole.attribution.nodes) > 256
    assert cut.methods["gbc:max_l1:targeted:blend"].agent == "assistant"
