"""Layer checkpointing for long calls: the backward pass recomputes each decoder layer instead of keeping
its activations. The gradients are the same numbers, bit for bit (with and without a cached prefix, for a
second objective on the same pass), the model is left as it was, and the pass keeps far fewer bytes."""

import pytest
import torch

from agentgrad.attribution import gbc
from agentgrad.attribution.scorer import Scorer
from conftest import pipeline_trace


def _state(model):
    name = "is_activation_checkpointing" if hasattr(model, "activation_checkpointing_enable") else "is_gradient_checkpointing"
    emb = model.get_input_embeddings()(torch.tensor([[5, 6]]))
    return model.training, [m.training for m in model.modules()], getattr(model, name), emb.requires_grad


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen3"])
@pytest.mark.parametrize("start,cached", [(0, False), (12, False), (12, True)])
def test_checkpointed_gradients_are_the_same_numbers(arch, start, cached, request):
    sc = Scorer(str(request.getfixturevalue(arch)))
    before = _state(sc.model)
    ids = torch.randint(5, 200, (64,), generator=torch.Generator().manual_seed(start))
    runs = []
    for checkpoint in (False, True):
        past = sc.prefix_cache(ids[:start])[0] if cached else None
        p = gbc.forward(sc.model, ids, (44, 64), start, past, use_cache=False, checkpoint=checkpoint)
        assert not p.embeds.requires_grad
        g, obj = gbc.backward(p, retain=True)
        g2, obj2 = gbc.backward(p, [0, 5])  # a second objective on the same pass (a targeted one)
        runs.append((g, obj, g2, obj2))
        assert _state(sc.model) == before  # nothing left switched on
    (g, obj, g2, obj2), (h, obj_h, h2, obj_h2) = runs
    assert torch.equal(g, h) and torch.equal(g2, h2) and obj == obj_h and obj2 == obj_h2
    assert g.abs().sum() > 0 and not torch.equal(g, g2)
    if cached:  # the kept prefix cache was read, never written
        again = sc.prefix_cache(ids[:start])[0]
        assert all(k.shape[-2] == start for k, _ in [(layer.keys, layer.values) for layer in again.layers])


def test_a_checkpointed_pass_keeps_fewer_bytes(tiny_llama):
    """What a pass saves for its backward (the scorer's own meter): with checkpointing, each layer's input
    instead of its activations."""
    sc = Scorer(str(tiny_llama))
    ids = torch.randint(5, 200, (256,), generator=torch.Generator().manual_seed(1))
    saved = {}
    for checkpoint in (False, True):
        with sc.graphs.measure() as got:
            gbc.forward(sc.model, ids, (200, 256), 0, None, checkpoint=checkpoint)
        saved[checkpoint] = sum(got.values())
    assert saved[True] * 2 < saved[False], saved


def test_the_scorer_checkpoints_long_calls_and_scores_them_the_same(tiny_llama):
    """``checkpoint_from``: every call of a run scored with checkpointing (from 1 token) gives the weights
    of the scorer that never checkpoints."""
    tr = pipeline_trace(tiny_llama)
    plain = Scorer(str(tiny_llama), checkpoint_from=None).attribute(tr)[0]
    ck = Scorer(str(tiny_llama), checkpoint_from=1).attribute(tr)[0]
    assert [n.to_dict() | {"seconds": 0} for n in plain] == [n.to_dict() | {"seconds": 0} for n in ck]
    assert any(n.sources for n in plain)


def test_a_blame_keeps_a_checkpointed_pass_and_its_verdicts_are_the_same(tiny_llama):
    """In a blame (passes kept for a second objective) every call checkpointed gives the verdicts and the
    scores of the scorer that never checkpoints; the kept passes hold a fraction of the bytes."""
    from agentgrad.blame.losses import verbal_loss
    from agentgrad.runs.blame import blame_trace

    tr = pipeline_trace(tiny_llama)
    loss = verbal_loss(tr, "the answer is wrong")
    methods = ["gbc:max_l1:targeted:blend", "max_l1", "occlusion:targeted:maxw", "provenance"]
    got = {}
    for ck in (None, 1):
        sc = Scorer(str(tiny_llama), checkpoint_from=ck)
        tv = blame_trace(tr, loss, methods, sc)
        got[ck] = ({m: v.to_dict() for m, v in tv.methods.items()}, sum(f.nbytes for f in sc.graphs.entries.values()))
    assert got[None][0] == got[1][0]
    assert 0 < got[1][1] < got[None][1]  # the kept passes: each layer's input, not its activations
