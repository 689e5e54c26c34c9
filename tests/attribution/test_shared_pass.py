"""One forward pass shared by a conversation's calls (``Scorer(share_passes=True)``): a checkpointed call
runs forward in chunks that end where the earlier calls end whose renderings are token prefixes of it,
and serves each of them. Every call's per-token gradients, log-probability and weights are those of its
own pass (to 1e-5 relative), for the whole output and a targeted objective, on Llama and Qwen3 shapes; a
call that is no prefix, or a pass too big to keep, changes nothing; a blame's verdicts are the same."""

import os
from pathlib import Path

import pytest

from agentgrad.attribution.scorer import Scorer
from agentgrad.importers.chat import chat_trace
from conftest import pipeline_trace


def conversation(turns: int = 5):
    msgs = [{"role": "system", "content": "You are a retail agent. Follow the policy."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Question {i}: how many shirts come in size {i}? Please say."})
        msgs.append({"role": "assistant", "content": f"There are {3 * i + 2} shirts in size {i}, in blue and red."})
    return chat_trace(msgs, "conversation")


def close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def assert_same(a, b):
    assert a.node_id == b.node_id and a.input_ids == b.input_ids and a.prefix_tokens == b.prefix_tokens
    assert close(a.log_prob, b.log_prob, 1e-5)
    for sa, sb in zip(a.sources, b.sources, strict=True):
        assert sa.positions == sb.positions
        for x, y in zip(sa.l1, sb.l1, strict=True):
            assert close(x, y, 1e-5), (x, y)
        for x, y, g in zip(sa.gxi, sb.gxi, sa.l1, strict=True):  # g.e against the size of the gradient
            assert abs(x - y) <= 1e-5 * g, (x, y, g)


def score_latest_first(scorer, trace):
    """Every call, the latest first (as a blame walks back), then a targeted objective of an early one."""
    calls = trace.calls()
    out = [scorer.attribute_node(trace, n, keep=True) for n in reversed(calls)]
    out.append(scorer.attribute_node(trace, calls[1], [(0, 9)], keep=True))
    return out


@pytest.mark.parametrize("arch,attn", [("tiny_llama", None), ("tiny_llama", "eager"), ("tiny_qwen3", None)])
def test_a_shared_pass_gives_every_call_its_own_numbers(arch, attn, request):
    path, tr = str(request.getfixturevalue(arch)), conversation()
    alone = Scorer(path, checkpoint_from=1, share_passes=False, attn_implementation=attn)
    shared = Scorer(path, checkpoint_from=1, attn_implementation=attn)
    want, got = score_latest_first(alone, tr), score_latest_first(shared, tr)
    for a, b in zip(want, got, strict=True):
        assert_same(a, b)
    n = len(tr.calls())
    # one pass, run by the latest call, served every earlier one and the second objective
    assert shared.forward_stats["shared"] == 1 and shared.forward_stats["shared_served"] == n
    assert alone.forward_stats["shared"] == 0 and len(shared.shared.ends) == n
    assert 0 < shared.shared.nbytes <= shared.graph_bytes


def test_only_calls_that_are_token_prefixes_are_served(tiny_llama):
    """A pipeline's calls (each its own system prompt) are no prefixes of one another: nothing is shared.
    A conversation whose latest call is not checkpointed runs as before."""
    tr = pipeline_trace(tiny_llama)
    sc = Scorer(str(tiny_llama), checkpoint_from=1)
    for n in reversed(tr.calls()):
        sc.attribute_node(tr, n, keep=True)
    assert sc.forward_stats["shared"] == 0
    sc = Scorer(str(tiny_llama))  # checkpointing from 4,096 tokens: this conversation is far below
    score_latest_first(sc, conversation())
    assert sc.forward_stats["shared"] == 0 and sc.forward_stats["kept"] > 0


def test_a_shared_pass_too_big_to_keep_serves_its_own_call_only(tiny_llama):
    tr = conversation(3)
    want = score_latest_first(Scorer(str(tiny_llama), checkpoint_from=1, share_passes=False), tr)
    sc = Scorer(str(tiny_llama), checkpoint_from=1, graph_bytes=1)
    got = score_latest_first(sc, tr)
    for a, b in zip(want, got, strict=True):
        assert_same(a, b)
    assert sc.shared is None and sc.forward_stats["shared_served"] == 0


def test_the_prefix_cache_is_read_never_written(tiny_llama):
    sc = Scorer(str(tiny_llama), checkpoint_from=1)
    tr = conversation(3)
    score_latest_first(sc, tr)
    assert sc.forward_stats["shared"] == 1
    lengths = {len(k) for k in sc.prefixes.entries}
    for key, cache in sc.prefixes.entries.items():
        assert all(layer.keys.shape[-2] == len(key) for layer in cache.layers)
    assert lengths == {sc.shared.start}


def test_a_blame_with_a_shared_pass_gives_the_same_verdicts(tiny_llama):
    from agentgrad.blame.losses import verbal_loss
    from agentgrad.runs.blame import blame_trace

    tr = conversation()
    loss = verbal_loss(tr, "the agent said the wrong number of shirts")
    methods = ["gbc:max_l1:whole:top2", "gbc:max_l1:targeted:blend", "provenance"]
    got = {}
    for share in (False, True):
        sc = Scorer(str(tiny_llama), checkpoint_from=1, share_passes=share)
        tv = blame_trace(tr, loss, methods, sc)
        got[share] = (tv, sc.forward_stats["shared"])
    (a, _), (b, passes) = got[False], got[True]
    assert passes == 1  # the loss-bearing call ran as a shared pass (what it serves: the tests above)
    assert {m: v.node for m, v in a.methods.items()} == {m: v.node for m, v in b.methods.items()}
    for x, y in zip(a.attribution.nodes, b.attribution.nodes, strict=True):
        assert_same(x, y)


WHOWHEN = Path(os.environ.get("AGENTGRAD_DATA_DIR", "data")) / "whowhen" / "who_and_when.tar.gz"


@pytest.mark.skipif(not WHOWHEN.is_file(), reason="Who&When archive not found (set AGENTGRAD_DATA_DIR)")
def test_who_and_when_shares_nothing_so_its_figures_stand(tiny_llama):
    """Who&When's logs give each call its history as one message (``[Agent] text`` blocks), so an earlier
    call's rendering, which ends with its own reply as the assistant's turn, is never a token prefix of a
    later one's: no shared pass, the same computation as before, and every committed Who&When figure stands."""
    from agentgrad.attribution.forward import prefix_calls
    from agentgrad.attribution.render import render_call
    from agentgrad.importers import import_whowhen

    sc = Scorer(str(tiny_llama))
    checked = 0
    for tr in import_whowhen(WHOWHEN, "hand").traces[:2]:
        rs = [render_call(sc.tokenizer, n) for n in tr.calls()]
        for i, r in enumerate(rs):
            assert prefix_calls(r, rs[:i] + rs[i + 1:], r.variable_start) == []
            checked += 1
    assert checked > 30
