"""The scorer (prefix cache, batches, kept graphs) against the plain reference of
``agentgrad.attribution.gbc``, and both against an independent library (Captum's ``Saliency`` and
``InputXGradient`` on the same embeddings).

Tolerances are those of the cached-equals-naive tests: 1e-4 relative for every token's
``||g_t||_1``, the output's log p and the L1 weights; ``g_t . e_t`` adds terms that nearly cancel,
so its error is measured against the size of the token's gradient (per token) or of the source's
terms (the gxi weights), not against its own near-zero value.
"""

import pytest

from agentgrad import Agent, GraphSystem, Trace
from agentgrad.attribution.gbc import CallGradients, gbc, gradients, source_weights, token_scores
from agentgrad.attribution.render import render_call
from agentgrad.attribution.scorer import Scorer
from agentgrad.core.config import apply_model_override, load_system_config
from agentgrad.examples import PIPELINE
from agentgrad.models.fake import FakeModel
from conftest import smollm2_missing

try:
    import captum.attr as captum_attr
except ImportError as e:  # the optional extra: pip install -e ".[attribution-check]"
    captum_attr, CAPTUM = None, f"captum is not installed ({e}); pip install -e '.[attribution-check]'"
else:
    CAPTUM = ""
SMOLLM2 = smollm2_missing()
needs_captum = pytest.mark.skipif(bool(CAPTUM), reason=f"Captum comparison: {CAPTUM}")
needs_smollm2 = pytest.mark.skipif(bool(SMOLLM2), reason=f"SmolLM2 tests: {SMOLLM2}")

TOL = 1e-4


def pipeline_trace(model_path, question):
    cfg = load_system_config(PIPELINE / "system.yaml")
    apply_model_override(cfg, f"default={model_path}")
    return GraphSystem(cfg).run({"question": question}).trace


def reference_scores(model, r, via_gbc=True):
    """The reference's per-token scores and weights of one rendered call. ``via_gbc=False``: the weights
    from these gradients, as ``gbc`` computes them (its body), not from a second backward pass of ``gbc``
    itself (the tiny-model tests call ``gbc``; on SmolLM2 its second pass costs seconds and is the same)."""
    cg = gradients(model, r.input_ids, r.output_range)
    l1, gxi = token_scores(cg)  # (T,), (T,)
    if not via_gbc:
        return cg, l1, gxi, {src: source_weights(l1, gxi, ranges) for src, ranges in r.source_ranges.items()}
    return cg, l1, gxi, gbc(model, r.input_ids, r.output_range, r.source_ranges)


def assert_matches(res, l1, gxi, weights, log_prob=None, tol=TOL):
    """A scored call (a NodeAttribution) equals the reference's per-token scores and weights."""
    if log_prob is not None:
        assert abs(res.log_prob - log_prob) <= tol * abs(log_prob), (res.log_prob, log_prob)
    assert {s.source for s in res.sources} == set(weights)
    for src in res.sources:
        assert src.positions and len(src.l1) == len(src.positions)
        for t, x, y in zip(src.positions, src.l1, src.gxi, strict=True):
            want_l1, want_gxi = float(l1[t]), float(gxi[t])
            assert abs(x - want_l1) <= tol * want_l1, (src.name, t, x, want_l1)
            assert abs(y - want_gxi) <= tol * want_l1, (src.name, t, y, want_gxi)
        scale = sum(abs(float(gxi[t])) for t in src.positions) / len(src.positions)
        for k, want in weights[src.source].items():
            got = src.weights[k]
            bound = tol * (abs(want) if "l1" in k else max(abs(want), scale))
            assert abs(got - want) <= bound, (src.name, k, got, want)


def test_the_reference_is_the_formula_on_a_hand_made_gradient():
    """source_weights is the four formulas: mean and max over the union of a source's spans."""
    import torch

    g = torch.tensor([[1.0, -2.0], [0.5, 0.5], [-3.0, 1.0], [0.0, 0.0]])  # (T=4, H=2)
    e = torch.tensor([[1.0, 1.0], [2.0, 0.0], [1.0, -1.0], [5.0, 5.0]])  # (T, H)
    l1, gxi = token_scores(CallGradients(g, e, 0.0))
    assert l1.tolist() == [3.0, 1.0, 4.0, 0.0] and gxi.tolist() == [-1.0, 1.0, -4.0, 0.0]
    w = source_weights(l1, gxi, [(0, 2), (1, 3)])  # two overlapping spans: tokens 0, 1, 2 once each
    assert w == {"mean_l1": 8 / 3, "max_l1": 4.0, "mean_gxi": -4 / 3, "max_gxi": 1.0}
    assert source_weights(l1, gxi, []) == dict.fromkeys(w, 0.0)
    with pytest.raises(ValueError, match="output_range"):
        gradients(None, [1, 2, 3], (0, 2))  # the first token has no prediction


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_qwen3"])
def test_the_engine_equals_the_reference_cached_naive_batched_and_single(fixture, request):
    """Every path of the scorer gives the reference's numbers on tiny models: the prefix-cached and
    the naive pass one call at a time, calls batched over a shared prefix, and a kept forward pass
    (its second objective one backward pass)."""
    path = request.getfixturevalue(fixture)
    traces = [pipeline_trace(path, q) for q in ("What is the capital of France?", "What is the sum of 12 and 30?")]
    items = [(tr, n) for tr in traces for n in tr.calls()]
    cached, naive, batched, kept = (Scorer(str(path), mode=m) for m in ("cached", "naive", "cached", "cached"))
    in_batch = batched.attribute_batch(items, 10_000)
    assert batched.cache_stats["hits"] + batched.cache_stats["misses"] > 0  # the batched path ran
    for (tr, node), b in zip(items, in_batch, strict=True):
        r = render_call(cached.tokenizer, node)
        cg, l1, gxi, weights = reference_scores(cached.model, r)
        c = cached.attribute_node(tr, node)
        assert c.prefix_tokens > 0  # the prefix came from the cache: only the rest was differentiated
        for res in (c, naive.attribute_node(tr, node), b):
            assert_matches(res, l1, gxi, weights, cg.log_prob)
        kept.attribute_node(tr, node, keep=True)
        assert_matches(kept.attribute_node(tr, node, keep=True), l1, gxi, weights, cg.log_prob)
    assert cached.cache_stats["hits"] >= 3 and kept.forward_stats["reused"] >= len(items)


def captum_scores(model, r):
    """Per-token ``||g_t||_1`` and ``g_t . e_t`` from Captum, on the same embeddings and objective."""
    import torch

    o_s, o_e = r.output_range
    ids = torch.tensor([r.input_ids])  # (1, T)
    y = ids[0, o_s:o_e]  # (n_out,)

    def objective(embeds):  # (1, T, H) -> (1,): sum_i log p(y_i)
        logits = model(inputs_embeds=embeds).logits[0].float()  # (T, V)
        return logits[o_s - 1:o_e - 1].log_softmax(-1).gather(-1, y[:, None]).sum()[None]

    with torch.no_grad():
        e = model.get_input_embeddings()(ids)  # (1, T, H)
    sal = captum_attr.Saliency(objective).attribute(e.clone().requires_grad_(True), abs=True)  # (1, T, H): |g_t|
    ixg = captum_attr.InputXGradient(objective).attribute(e.clone().requires_grad_(True))  # (1, T, H): g_t * e_t
    return sal[0].detach().double().sum(-1), ixg[0].detach().double().sum(-1)  # (T,), (T,)


def check_against_captum(scorer, tr, node, via_gbc=True):
    r = render_call(scorer.tokenizer, node)
    l1, gxi = captum_scores(scorer.model, r)
    weights = {s: source_weights(l1, gxi, ranges) for s, ranges in r.source_ranges.items()}
    _, ref_l1, ref_gxi, ref = reference_scores(scorer.model, r, via_gbc)
    assert_matches(scorer.attribute_node(tr, node), l1, gxi, weights)  # the engine, prefix cached
    for t in range(r.output_range[0]):  # the reference too, at every input token
        assert abs(ref_l1[t] - l1[t]) <= TOL * l1[t] and abs(ref_gxi[t] - gxi[t]) <= TOL * l1[t], t
    for s in ref:
        assert all(abs(ref[s][k] - weights[s][k]) <= TOL * abs(weights[s][k]) for k in ("mean_l1", "max_l1"))


@needs_captum
def test_the_engine_equals_captum_on_a_tiny_model(tiny_llama):
    sc = Scorer(str(tiny_llama))
    tr = pipeline_trace(tiny_llama, "What is the capital of France?")
    for node in tr.calls():
        check_against_captum(sc, tr, node)


def smollm2_trace():
    """A responder reading an input and two workers, under a long prompt (~600 tokens)."""
    model = FakeModel(["Order 0012 holds a blue kettle and a red mug.", "The customer wants a refund.",
                       "Your refund for the blue kettle of order 0012 is on its way, under section 5."])
    policy = "\n".join(f"Rule {i}: when a customer asks about order {i:04d}, check its status and the refund "
                       f"policy of section {i % 7} before answering." for i in range(20))
    with Trace() as tr:
        q = tr.input("Hi, I want my money back for the kettle in order 0012, it leaks.", name="user")
        a = Agent("lookup", "You read orders.", model)(q)
        b = Agent("intent", "You say what the customer wants.", model)(q)
        Agent("responder", "You answer customers.\n" + policy, model)(q, a, b)
    return tr


@pytest.fixture(scope="module")
def smol_scorers(smol):  # the session's one SmolLM2 (conftest)
    return {m: Scorer(tokenizer=smol.tokenizer, model=smol.model, path="smollm2", mode=m) for m in ("cached", "naive")}


@pytest.mark.slow
@needs_smollm2
def test_the_engine_equals_the_reference_on_smollm2(smol_scorers):
    tr = smollm2_trace()
    cached, naive = smol_scorers["cached"], smol_scorers["naive"]
    node = tr.calls()[-1]
    r = render_call(cached.tokenizer, node)
    cg, l1, gxi, weights = reference_scores(cached.model, r, via_gbc=False)
    c = cached.attribute_node(tr, node)
    assert c.prefix_tokens > 400
    for res in (c, naive.attribute_node(tr, node), cached.attribute_batch([(tr, n) for n in tr.calls()], 10_000)[-1]):
        assert_matches(res, l1, gxi, weights, cg.log_prob)


@pytest.mark.slow
@needs_smollm2
@needs_captum
def test_the_engine_equals_captum_on_smollm2(smol_scorers):
    tr = smollm2_trace()
    check_against_captum(smol_scorers["cached"], tr, tr.calls()[-1], via_gbc=False)
