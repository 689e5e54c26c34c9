"""GBC attribution checked against independent computations.

- the naive full-sequence pass and the prefix-cached pass agree (three architectures);
- the weights equal those of a from-scratch computation on the CLI's JSON (plain transformers);
- the gradient itself matches central finite differences of the objective in float64.
"""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentgrad import Agent, ContextLengthError, RegistryError, Trace
from agentgrad.attribution import AttributionGraph, Scorer
from agentgrad.attribution.render import render_call
from agentgrad.models.kvcache import PrefixCache, rewrap_cache
from agentgrad.cli import main
from agentgrad.models.fake import FakeModel
from agentgrad.models.tiny import build_tiny_model
from agentgrad.examples import PIPELINE
from conftest import pipeline_trace


def tool_trace():
    """A trace with a tool round: the second call reads the input, its own first output and a tool result."""
    model = FakeModel([
        {"text": "Looking it up.", "tool_calls": [{"name": "lookup", "arguments": {"city": "Cambridge"}}]},
        "The Hilton is in the centre.",
    ])
    from agentgrad import Tool

    tool = Tool.from_function(lambda city: f"Hilton, centre, {city}", name="lookup")
    with Trace() as tr:
        q = tr.input("Find me a hotel in Cambridge, please.", name="user")
        ctx = tr.input("The user prefers the centre.", name="memory")
        Agent("worker", "You find hotels with tools.", model, tools=[tool])(q, ctx)
    return tr


def independent_weights(model, input_ids, out_range, token_ranges):
    """Plain transformers, one full gradient pass, the formulas of DESIGN.md."""
    ids = torch.tensor([input_ids])
    e = model.get_input_embeddings()(ids).detach().requires_grad_(True)  # (1, T, H)
    logits = model(inputs_embeds=e).logits[0].float()  # (T, V)
    a, b = out_range
    logp = torch.log_softmax(logits[a - 1 : b - 1], -1)[torch.arange(b - a), ids[0, a:b]].sum()
    logp.backward()
    g = e.grad[0]  # (T, H)
    pos = sorted({t for s, t_end in token_ranges for t in range(s, t_end)})
    l1 = g[pos].abs().sum(-1)
    gxi = (g[pos] * e[0, pos].detach()).sum(-1)
    return {"mean_l1": l1.mean().item(), "max_l1": l1.max().item(), "mean_gxi": gxi.mean().item(),
            "max_gxi": gxi.max().item()}


def close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-6)


def compare_paths(path, attn=None):
    """Worst relative differences (naive vs cached) over two traces; the second reuses the caches."""
    naive = Scorer(str(path), mode="naive", attn_implementation=attn)
    cached = Scorer(str(path), mode="cached", attn_implementation=attn)
    worst = {"grad": 0.0, "l1_weights": 0.0, "gxi_weights": 0.0, "gxi_weights_plain": 0.0}
    for q in ("What is the capital of France?", "What is the sum of 12 and 30?"):
        tr = pipeline_trace(path, q)
        for node in tr.calls():
            r = render_call(naive.tokenizer, node)
            gn, _, _, lpn, _ = naive.gradients(r)
            gc, _, start, lpc, _ = cached.gradients(r)
            assert start > 0 and close(lpn, lpc, 1e-5)
            gn = gn[start:]  # (T - start, H): the naive pass's gradients at the cached pass's positions
            nz = gn.norm(dim=-1) > 0  # the last output token does not affect the objective
            worst["grad"] = max(worst["grad"], ((gn - gc).norm(dim=-1)[nz] / gn.norm(dim=-1)[nz]).max().item())
            a, b = naive.attribute_node(tr, node), cached.attribute_node(tr, node)
            assert a.input_ids == b.input_ids and a.output_token_range == b.output_token_range
            for sa, sb in zip(a.sources, b.sources, strict=True):
                scale = sum(abs(x) for x in sa.gxi) / len(sa.gxi)  # mean |g_t . e_t| of the source
                for k in sa.weights:
                    diff = abs(sa.weights[k] - sb.weights[k])
                    if "l1" in k:
                        worst["l1_weights"] = max(worst["l1_weights"], diff / abs(sa.weights[k]))
                    else:
                        # a signed mean of terms that nearly cancel has no meaningful relative error:
                        # compare against the size of its terms
                        worst["gxi_weights"] = max(worst["gxi_weights"], diff / max(abs(sa.weights[k]), scale))
                        worst["gxi_weights_plain"] = max(worst["gxi_weights_plain"], diff / abs(sa.weights[k]))
    assert cached.cache_stats["hits"] >= 3  # every agent's prefix reused for the second trace
    return worst


@pytest.mark.parametrize("arch", ["llama", "qwen3", "mistral", "gemma"])
def test_cached_equals_naive(arch, tmp_path):
    path = build_tiny_model(tmp_path / arch, arch=arch)
    worst = compare_paths(path)
    assert worst["grad"] <= 1e-4 and worst["l1_weights"] <= 1e-4 and worst["gxi_weights"] <= 1e-4, worst
    exact = compare_paths(path, attn="eager")  # same kernels: the two paths agree bit for bit
    assert max(exact.values()) <= 1e-6, exact


def test_cache_is_never_mutated(tiny_llama):
    sc = Scorer(str(tiny_llama))
    tr = pipeline_trace(tiny_llama)
    sc.attribute(tr)
    key, cache = next(iter(sc.prefixes.entries.items()))
    before = [(l.keys.clone(), l.values.clone()) for l in cache.layers]
    length = cache.get_seq_length()
    assert length == len(key)
    sc.attribute(tr)
    assert cache.get_seq_length() == length
    for (k, v), layer in zip(before, cache.layers):
        assert torch.equal(k, layer.keys) and torch.equal(v, layer.values)
    wrapped = rewrap_cache(cache)
    assert wrapped.layers[0] is not cache.layers[0] and wrapped.layers[0].keys is cache.layers[0].keys


def test_token_ranges_decode_to_source_text(tiny_llama, tiny_qwen3):
    for path in (tiny_llama, tiny_qwen3):
        sc = Scorer(str(path))
        for tr in (pipeline_trace(tiny_llama), tool_trace()):
            results, _ = sc.attribute(tr)
            for res in results:
                node = tr.nodes[res.node_id]
                for src in res.sources:
                    text = tr.nodes[src.source].text
                    for a, b in src.token_ranges:
                        decoded = sc.tokenizer.decode(res.input_ids[a:b])
                        inner = sc.tokenizer.decode(res.input_ids[a + 1 : b - 1]) if b - a > 2 else ""
                        assert inner in text and text in decoded or decoded == text, (decoded, text)
                    # per-token characters (what the report's heat map draws) tile the span exactly
                    chars = src.chars
                    assert len(chars) == len(src.positions) and all(c is not None for c in chars)
                    assert "".join(node.messages[m]["content"][a:b] for m, a, b in chars) == text
                    assert all(b > a for _, a, b in chars)
                o_s, o_e = res.output_token_range
                out_text = sc.tokenizer.decode(res.input_ids[o_s:o_e])
                assert node.text in out_text or out_text in node.text
                if node.tool_calls:  # a call that asked for a tool: its calls are part of the output
                    assert '"city": "Cambridge"' in out_text


def test_bos_template_shifts_nothing(tiny_llama):
    tok = Scorer(str(tiny_llama)).tokenizer
    tr = pipeline_trace(tiny_llama)
    r = render_call(tok, tr.calls()[-1])
    assert r.text.startswith(tok.bos_token) and r.input_ids[0] == tok.bos_token_id
    for src, chars in r.source_chars.items():
        for a, b in chars:
            assert r.text[a:b] == tr.nodes[src].text


def test_tool_results_and_inputs_are_sources(tiny_llama):
    tr = tool_trace()
    results, graph = Scorer(str(tiny_llama)).attribute(tr)
    second = results[1]
    kinds = {s.kind for s in second.sources}
    assert kinds == {"input", "call", "tool"}
    assert {s.name for s in second.sources} >= {"user", "memory", "lookup", "worker"}
    structural = [e for e in graph.edges if e.structural]
    assert [(e.source, e.target) for e in structural] == [(2, 3)]
    kept = graph.prune(1, "mean_l1")
    assert (2, 3) in [(e.source, e.target) for e in kept.edges]


def test_weights_match_independent_computation_on_cli_json(tmp_path, tiny_qwen3):
    out = tmp_path / "run"
    assert main(["run", str(PIPELINE / "system.yaml"), "--inputs", str(PIPELINE / "inputs.jsonl"), "--out", str(out),
                 "--model", f"default={tiny_qwen3}"]) == 0
    attr = tmp_path / "attr"
    assert main(["attribute", str(out), "--scorer", str(tiny_qwen3), "--out", str(attr), "--method", "max_l1"]) == 0
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)
    files = sorted(attr.glob("*.json"))
    assert len(files) == 4
    checked = 0
    for f in files:
        d = json.loads(f.read_text())
        assert d["method"] == "max_l1" and d["scorer"]["dtype"] == "float32"
        for node in d["nodes"]:
            assert node["surrogate"] is False
            for src in node["sources"]:
                want = independent_weights(model, node["input_ids"], node["output_token_range"], src["token_ranges"])
                for k, v in want.items():
                    assert close(src["weights"][k], v, 1e-3), (k, src["weights"][k], v)
                    checked += 1
        kept = {(e["target"]) for e in d["kept_edges"]}
        assert kept == {n["node_id"] for n in d["nodes"]}  # one kept incoming edge per call
        for node in d["nodes"]:
            inc = [e for e in d["graph"]["edges"] if e["target"] == node["node_id"]]
            best = max(inc, key=lambda e: e["weights"]["max_l1"])
            assert [e for e in d["kept_edges"] if e["target"] == node["node_id"]][0]["source"] == best["source"]
    assert checked == 4 * 4 * 4  # 4 traces x 4 sources x 4 weights
    # --prompt-weights: each call's own prompt scored like a source, against the same independent pass,
    # and the sources' weights unchanged by the longer gradient region
    attr2 = tmp_path / "attr2"
    assert main(["attribute", str(out), "--scorer", str(tiny_qwen3), "--out", str(attr2), "--prompt-weights"]) == 0
    for f in files:
        d, d2 = json.loads(f.read_text()), json.loads((attr2 / f.name).read_text())
        assert d2["scorer"]["prompt_weights"] is True
        for node, node2 in zip(d["nodes"], d2["nodes"], strict=True):
            p = node2["prompt"]
            assert p["kind"] == "prompt" and p["source"] == node2["node_id"] and len(p["token_scores"]["chars"]) == len(p["token_scores"]["positions"])
            want = independent_weights(model, node2["input_ids"], node2["output_token_range"], p["token_ranges"])
            for k, v in want.items():
                assert close(p["weights"][k], v, 1e-3), (k, p["weights"][k], v)
            for src, src2 in zip(node["sources"], node2["sources"], strict=True):
                for k in ("mean_l1", "max_l1"):
                    assert close(src["weights"][k], src2["weights"][k], 1e-4)


def test_gradient_matches_finite_differences(tmp_path, monkeypatch):
    """g_t . d against central differences of the objective along random directions d, in float64.

    Llama's RMSNorm rounds activations to float32, which makes the objective a staircase at the
    1e-7 level; for this check it is patched to stay in float64 (for the scorer and the finite
    differences alike), so that central differences with eps 1e-6 are exact to about 1e-8.
    """
    from transformers.models.llama import modeling_llama

    def rms_norm_f64(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", rms_norm_f64)
    path = build_tiny_model(tmp_path / "m", arch="llama", hidden=32)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    sc = Scorer(tokenizer=tok, model=model, mode="cached")
    tr = pipeline_trace(path)
    node = tr.calls()[-1]
    res = sc.attribute_node(tr, node)
    r = render_call(tok, node)
    grads, _, start, _, _ = sc.gradients(r)  # (T - start, H)
    ids = torch.tensor([res.input_ids])
    a, b = res.output_token_range

    def objective(e):
        logits = model(inputs_embeds=e).logits[0]
        return torch.log_softmax(logits[a - 1 : b - 1], -1)[torch.arange(b - a), ids[0, a:b]].sum()

    e0 = model.get_input_embeddings()(ids).detach()
    gen = torch.Generator().manual_seed(0)
    eps = 1e-6
    for src in res.sources:
        for t in (src.positions[0], src.positions[len(src.positions) // 2], src.positions[-1]):
            d = torch.randn(e0.shape[-1], generator=gen, dtype=torch.float64)
            with torch.no_grad():
                ep, em = e0.clone(), e0.clone()
                ep[0, t] += eps * d
                em[0, t] -= eps * d
                fd = ((objective(ep) - objective(em)) / (2 * eps)).item()
            analytic = (grads[t - start].double() * d).sum().item()
            assert close(fd, analytic, 1e-5), (t, fd, analytic)
            # the recorded per-token scores are this gradient's
            i = src.positions.index(t)
            assert close(src.l1[i], grads[t - start].abs().sum().item(), 1e-12)
            assert close(src.gxi[i], (grads[t - start].double() * e0[0, t]).sum().item(), 1e-9)


def test_context_limit_error_and_skip(tmp_path):
    path = build_tiny_model(tmp_path / "short", max_context=120)
    tr = pipeline_trace(build_tiny_model(tmp_path / "long"))  # generated with a longer context
    with pytest.raises(ContextLengthError, match=r"node 3 \(agent answerer\) has [\d,]+ tokens; the scorer's context is 120"):
        Scorer(str(path)).attribute(tr)
    results, _ = Scorer(str(path), on_too_long="skip").attribute(tr)
    skipped = [r for r in results if r.skipped]
    assert skipped and all("context is 120" in r.skipped and not r.sources for r in skipped)


def test_surrogate_is_recorded(tmp_path, tiny_llama, tiny_qwen3):
    tr = pipeline_trace(tiny_llama)
    tr.save(tmp_path / "t.json")
    assert main(["attribute", str(tmp_path / "t.json"), "--scorer", str(tiny_qwen3), "--out", str(tmp_path / "a.json")]) == 0
    d = json.loads((tmp_path / "a.json").read_text())
    assert all(n["surrogate"] for n in d["nodes"])
    assert d["nodes"][0]["generator"]["path"] == str(tiny_llama) and d["scorer"]["path"] == str(tiny_qwen3)


def test_edge_rules_and_prune():
    from agentgrad.blame.methods import edge_rule

    with pytest.raises(RegistryError, match="valid: mean_l1, max_l1, mean_gxi, max_gxi, random, all"):
        AttributionGraph({}, []).prune(1, "attention")
    with pytest.raises(RegistryError, match="unknown edge rule 'gbc:max_l1:targeted:carry'"):
        AttributionGraph({0: {}, 1: {}}, []).prune(1, "gbc:max_l1:targeted:carry")
    # a blame method is not an edge rule: the registry says which rule each one walks by
    assert [edge_rule(m) for m in ("gbc:max_l1:targeted:carry", "mean_gxi", "random", "all", "temporal")] == [
        "max_l1", "mean_gxi", "random", "all", "mean_l1"]
    from agentgrad.attribution.graph import Edge

    w = lambda x: {"mean_l1": x, "max_l1": x, "mean_gxi": x, "max_gxi": x}
    g = AttributionGraph({i: {"kind": "call", "name": str(i)} for i in range(5)},
                         [Edge(0, 4, w(1.0)), Edge(1, 4, w(3.0)), Edge(2, 4, w(3.0)), Edge(3, 4, w(0.5))])
    top1 = [e.source for e in g.prune(1, "mean_l1", seed=0).edges]
    assert top1[0] in (1, 2)
    picks = {g.prune(1, "mean_l1", seed=s).edges[0].source for s in range(20)}
    assert picks == {1, 2}  # ties go either way, decided by the seed
    assert g.prune(1, "mean_l1", seed=5).edges == g.prune(1, "mean_l1", seed=5).edges
    assert sorted(e.source for e in g.prune(2, "max_l1").edges) == [1, 2]
    assert len(g.prune(1, "all").edges) == 4
    rand = [g.prune(1, "random", seed=s).edges[0].source for s in range(30)]
    assert len(set(rand)) > 1 and rand == [g.prune(1, "random", seed=s).edges[0].source for s in range(30)]


def test_graph_roundtrip(tmp_path, tiny_llama):
    _, graph = Scorer(str(tiny_llama)).attribute(tool_trace())
    graph.save(tmp_path / "g.json")
    back = AttributionGraph.load(tmp_path / "g.json")
    assert back.to_dict() == graph.to_dict()


def test_cache_bounds_and_checkpointing_refused(tiny_llama):
    sc = Scorer(str(tiny_llama), cache_size=2)
    sc.attribute(pipeline_trace(tiny_llama))  # three agents, three prefixes
    assert type(sc.prefixes) is PrefixCache  # the one prefix cache, generation's too (models/kvcache.py)
    assert len(sc.prefixes) == 2 and sc.cache_stats["misses"] == 3
    tiny_bytes = Scorer(str(tiny_llama), cache_bytes=1)
    tiny_bytes.attribute(pipeline_trace(tiny_llama))
    assert len(tiny_bytes.prefixes) == 1  # the newest is always kept
    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    from agentgrad import ConfigError

    with pytest.raises(ConfigError, match="gradient checkpointing"):
        Scorer(tokenizer=None, model=model)
    Scorer(tokenizer=None, model=model, mode="naive")  # the reference path does not use the cache


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_batched_attribution_equals_one_by_one(arch, tmp_path):
    """Calls sharing a prefix scored in padded batches (across traces): the same per-token gradients
    and weights as one call at a time, to 1e-5 relative (g.e against the size of the gradient)."""
    path = build_tiny_model(tmp_path / arch, arch=arch)
    traces = [pipeline_trace(path, q) for q in ("What is the capital of France?", "What is the sum of 12 and 30?",
                                                "Where does the train to Cambridge leave from, and when?")]
    items = [(tr, n) for tr in traces for n in tr.calls()]
    one = Scorer(str(path))
    want = [one.attribute_node(tr, n) for tr, n in items]
    for budget in (10_000, 60):  # everything that shares a prefix in one batch; and batches of 1-2 calls
        batched = Scorer(str(path), prompt_weights=False)
        got = batched.attribute_batch(items, budget)
        for a, b in zip(want, got, strict=True):
            assert a.node_id == b.node_id and a.input_ids == b.input_ids and a.prefix_tokens == b.prefix_tokens
            assert close(a.log_prob, b.log_prob, 1e-5)
            for sa, sb in zip(a.sources, b.sources, strict=True):
                for x, y in zip(sa.l1, sb.l1, strict=True):  # every token's gradient
                    assert close(x, y, 1e-5), (x, y)
                # g.e is a dot product whose terms cancel: its error is measured against the size of
                # the token's gradient (|g.e| <= ||g||_1 max|e|), not against its own near-zero value
                for x, y, g in zip(sa.gxi, sb.gxi, sa.l1, strict=True):
                    assert abs(x - y) <= 1e-5 * g, (x, y, g)
                for k in ("mean_l1", "max_l1"):
                    assert close(sa.weights[k], sb.weights[k], 1e-5)
    # prompt weights batch too (the prefix is then only the template header)
    pw1, pw2 = Scorer(str(path), prompt_weights=True), Scorer(str(path), prompt_weights=True)
    for (tr, n), b in zip(items, pw2.attribute_batch(items, 10_000), strict=True):
        a = pw1.attribute_node(tr, n)
        assert close(a.prompt.weights["mean_l1"], b.prompt.weights["mean_l1"], 1e-5)


def test_cli_batch_tokens_writes_the_same_attribution(tmp_path, tiny_llama):
    out = tmp_path / "run"
    assert main(["run", str(PIPELINE / "system.yaml"), "--inputs", str(PIPELINE / "inputs.jsonl"), "--out", str(out),
                 "--model", f"default={tiny_llama}"]) == 0
    assert main(["attribute", str(out), "--scorer", str(tiny_llama), "--out", str(tmp_path / "a")]) == 0
    assert main(["attribute", str(out), "--scorer", str(tiny_llama), "--out", str(tmp_path / "b"),
                 "--batch-tokens", "4096"]) == 0
    files = sorted((tmp_path / "a").glob("*.json"))
    assert len(files) == len((PIPELINE / "inputs.jsonl").read_text().splitlines())  # one per input, in both
    assert sorted(p.name for p in (tmp_path / "b").glob("*.json")) == [f.name for f in files]
    for f in files:
        a, b = json.loads(f.read_text()), json.loads((tmp_path / "b" / f.name).read_text())
        assert a["kept_edges"] == b["kept_edges"] or all(
            close(x["weights"]["mean_l1"], y["weights"]["mean_l1"], 1e-5) for x, y in zip(a["kept_edges"], b["kept_edges"], strict=True))
        for na, nb in zip(a["nodes"], b["nodes"], strict=True):
            assert na["input_ids"] == nb["input_ids"]
            for sa, sb in zip(na["sources"], nb["sources"], strict=True):
                assert all(close(sa["weights"][k], sb["weights"][k], 1e-5) for k in ("mean_l1", "max_l1"))


def test_occlusion_equals_one_forward_pass_per_occluded_source(tiny_llama):
    """The batched occlusion weights equal those of a from-scratch loop (plain transformers, one
    unbatched pass per variant); the whole-output and targeted weights come from one batch."""
    tr = tool_trace()
    node = tr.calls()[-1]
    sc = Scorer(str(tiny_llama))
    r = render_call(sc.tokenizer, node)
    o_s, o_e = r.output_range
    assert len(r.source_ranges) >= 3  # the user input, the memory, the first call, the tool result
    model = AutoModelForCausalLM.from_pretrained(str(tiny_llama)).eval()
    fill = sc.tokenizer(" ", add_special_tokens=False)["input_ids"][0]

    def logp(ids, keep):
        with torch.no_grad():
            lp = model(torch.tensor([ids])).logits[0].log_softmax(-1)
        return sum(float(lp[t - 1, ids[t]]) for t in keep)

    region = [(0, 7)]  # "The Hil": only the output tokens that cover it
    for chars in (None, region):
        keep = r.output_tokens_for(chars) if chars else list(range(o_s, o_e))
        assert 0 < len(keep) <= o_e - o_s
        base = logp(r.input_ids, keep)
        want = {}
        for src, ranges in r.source_ranges.items():
            ids = list(r.input_ids)
            for a, b in ranges:
                ids[a:b] = [fill] * (b - a)
            want[src] = base - logp(ids, keep)
        got = sc.occlusion(tr, node, chars)
        assert got.keys() == want.keys()
        for src in want:
            assert got[src] == pytest.approx(want[src], rel=1e-4, abs=1e-4), (chars, src)
    # on a CPU each variant starts from the recorded call's cache where its occlusion starts; the
    # batched path (an accelerator's, or a model whose cache cannot be sliced) gives the same weights,
    # in one batch and in chunks of one variant
    vectors = sc.occlusion_vectors(tr, node)
    sc._plain_kv = False  # as for a model whose cache cannot be sliced
    try:
        batched = sc.occlusion_vectors(tr, node)
        old = sc.model.get_output_embeddings
        sc.model.get_output_embeddings = lambda: torch.nn.Linear(1, 10 ** 9, bias=False, device="meta")
        try:
            chunked = sc.occlusion_vectors(tr, node)
        finally:
            sc.model.get_output_embeddings = old
    finally:
        sc._plain_kv = True
    groups = []
    for size in (1, 3, 100):  # variants one at a time, in threes, all in one group
        sc.occlusion_group = size
        groups.append(sc.occlusion_vectors(tr, node))
    for again in (batched, chunked, *groups):
        assert again[1] == pytest.approx(vectors[1], abs=1e-5)
        assert all(again[2][s] == pytest.approx(vectors[2][s], abs=1e-5) for s in vectors[2])


@pytest.mark.parametrize("mode", ["cached", "naive"])
def test_a_kept_forward_pass_serves_every_objective_and_the_occlusion(tiny_llama, mode):
    """With the forward pass kept (as a blame context asks), a second objective of the same call is
    one backward pass over it, with bitwise the gradients of a pass of its own; the occlusion then
    starts from the kept pass's cache and output log p, with the weights of a pass of its own; the
    bytes kept stay within ``graph_bytes``, and a pass that does not fit is not kept."""
    tr = tool_trace()
    node = tr.calls()[-1]
    fresh = Scorer(str(tiny_llama), mode=mode, graph_bytes=0)
    sc = Scorer(str(tiny_llama), mode=mode)
    region = [(0, 7)]
    for scorer in (fresh, sc):  # the prefix cached in both (a miss runs it in the same pass: rounding apart)
        scorer.attribute_node(tr, node)
    want = [fresh.attribute_node(tr, node, chars) for chars in (None, region)]
    got = [sc.attribute_node(tr, node, chars, keep=True) for chars in (None, region)]
    assert sc.forward_stats["kept"] == 1 and sc.forward_stats["reused"] == 1
    assert fresh.forward_stats["kept"] == 0 and not len(fresh.graphs)
    for a, b in zip(want, got):
        assert a.log_prob == b.log_prob
        for sa, sb in zip(a.sources, b.sources, strict=True):
            assert sa.l1 == sb.l1 and sa.gxi == sb.gxi and sa.weights == sb.weights
    assert got[0].sources[0].l1 != got[1].sources[0].l1  # two objectives, not one answer twice
    # the kept pass's time is counted again for the second objective: each record is its cost alone
    assert got[1].seconds >= sc.kept_forward(render_call(sc.tokenizer, node)).seconds
    occluded = sc.occlusion_vectors(tr, node)
    assert sc.forward_stats["occlusion_reused"] == 1
    alone = fresh.occlusion_vectors(tr, node)
    assert fresh.forward_stats["occlusion_reused"] == 0
    assert occluded[1] == pytest.approx(alone[1], abs=1e-5)
    assert all(occluded[2][s] == pytest.approx(alone[2][s], abs=1e-5) for s in alone[2])
    # the budget: a second call's pass evicts the first when both do not fit, and one too big is not kept
    kept = next(iter(sc.graphs.entries.values()))
    sc.graph_bytes = kept.nbytes + 1
    other = tr.calls()[0]
    sc.attribute_node(tr, other, keep=True)
    assert len(sc.graphs) == 1 and not kept.kept
    assert sum(f.nbytes for f in sc.graphs.entries.values()) <= sc.graph_bytes
    # and an evicted pass is freed: its graph holds no reference cycle that would keep it alive
    import gc
    import weakref

    gone = weakref.ref(kept.leaf)
    del kept
    gc.collect()
    assert gone() is None
    sc.clear_cache()
    sc.graph_bytes = 1
    sc.attribute_node(tr, node, keep=True)
    assert not len(sc.graphs)


def test_attribution_modules_import_no_private_name_and_contrast_does_not_import_the_scorer():
    """No module of agentgrad.attribution imports another module's private name, and the contrastive
    objective reaches the prefix cache through the scorer's public method (no import circle)."""
    import ast
    from pathlib import Path

    import agentgrad.attribution as pkg

    for path in Path(pkg.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentgrad"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, (path.name, node.module, private)
                if path.name == "contrast.py":
                    assert node.module != "agentgrad.attribution.scorer", "contrast.py imports the scorer"
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                assert isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"), (path.name, node.attr)


def test_the_scorer_satisfies_the_protocols_and_a_stand_in_only_the_base(tiny_llama):
    from agentgrad.attribution.protocol import (CAPABILITIES, AttributionScorer, GradientScorer, OcclusionScorer,
                                                capabilities)
    from conftest import IdealScorer

    sc = Scorer(str(tiny_llama))
    assert isinstance(sc, GradientScorer) and isinstance(sc, OcclusionScorer)
    assert capabilities(sc) == set(CAPABILITIES)
    ideal = IdealScorer(sc.tokenizer)  # a stand-in scorer: weights and log p, nothing else
    assert isinstance(ideal, AttributionScorer) and not isinstance(ideal, OcclusionScorer)
    assert capabilities(ideal) == frozenset() and capabilities(None) == frozenset()

    class Keeps(IdealScorer):
        def attribute_node(self, trace, node, target_chars=None, keep=False):
            return super().attribute_node(trace, node, target_chars)

    assert capabilities(Keeps(sc.tokenizer)) == {"keep"}  # read from the signature where not declared
