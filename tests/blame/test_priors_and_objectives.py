"""The trivial priors (first, most_active, position:F) and the failure-conditioned objectives (contrast,
judged), checked against hand-computed picks and independent gradient computations on a tiny model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentgrad.attribution import Scorer
from agentgrad.attribution.contrast import reference_tokens
from agentgrad.attribution.render import VERDICTS, judgment_call, render_call
from agentgrad.blame.backward import VerbalLoss
from agentgrad.benchmarks.planted.bench import Cost
from agentgrad.blame.context import BlameContext, top_tied
from agentgrad.blame.methods import get_blame_method, model_free, select_methods
from agentgrad.blame.outcome import blame_episode
from agentgrad.blame.priors import POSITIONS
from agentgrad.importers.whowhen import whowhen_trace
from conftest import ROOT, run_script
from conftest import pipeline_trace



def log(roles, step=0, agent="A", truth="42", id="t", subset="hand"):
    return whowhen_trace({"question": "What is six times seven?", "ground_truth": truth, "mistake_agent": agent,
                          "mistake_step": str(step),
                          "history": [{"role": r, "content": f"{r} says {i}: the answer is {i}."}
                                      for i, r in enumerate(roles)]}, id, subset)


def blame(name, trace, loss=None, scorer=None):
    loss = loss or VerbalLoss("failed", [trace.calls()[-1].id])
    return get_blame_method(name)(BlameContext(trace, loss, scorer))


# --- priors ---------------------------------------------------------------------------------------
def test_priors_pick_by_order_and_count_alone_and_are_model_free():
    tr = log(["human", "A", "B", "A", "C", "A"])  # nodes: 0 question, 1 human (an input), 2..6 the steps
    assert [n.kind for n in tr.nodes] == ["input", "input", "call", "call", "call", "call", "call"]
    assert blame("first", tr)[0].node == 2  # the first agent other than the user, at its first step
    top = blame("most_active", tr)
    assert (top[0].agent, top[0].node, top[0].score) == ("A", 2, 3.0)  # three steps, the first at node 2
    # floor(F * 4 + 1/2) of the 5 steps: 0, 1, 2 (2.5 rounds up), 3 (3.5 rounds up), 4
    want = {0.0: 2, 0.25: 3, 0.5: 4, 0.75: 5, 1.0: 6}
    assert {f: blame(f"position:{f:g}", tr)[0].node for f in POSITIONS} == want
    # equal counts tie at the top: each agent at its first step (a benchmark credits 1/ties)
    tied = blame("most_active", log(["B", "A", "A", "B"]))
    assert top_tied(tied, lambda b: (b.agent, b.node)) == [("B", 1), ("A", 2)]
    names = ["first", "most_active"] + [f"position:{f:g}" for f in POSITIONS]
    assert select_methods("first,most_active,position") == names
    assert all(model_free(n) for n in names)
    # they read neither the loss nor a scorer: the same pick whatever the loss says
    other = VerbalLoss("something else entirely", [tr.calls()[1].id])
    assert blame("position:1", tr, other)[0].node == tr.calls()[1].id  # the steps up to the loss's target


# --- the contrastive objective's gradient ------------------------------------------------------------
def two_pass_gradient(model, ids_a, span_a, ids_b, span_b, upto):
    """d/d e_t [mean log p(ids_a[span_a]) - mean log p(ids_b[span_b])] for t < upto, from two separate
    full-sequence passes of plain transformers (the two sequences share their first ``upto`` tokens)."""
    grads, values = [], []
    for ids, (a, b) in ((ids_a, span_a), (ids_b, span_b)):
        x = torch.tensor([ids])
        e = model.get_input_embeddings()(x).detach().requires_grad_(True)  # (1, T, H)
        lp = torch.log_softmax(model(inputs_embeds=e).logits[0].float(), -1)  # (T, V)
        v = lp[torch.arange(a - 1, b - 1), x[0, a:b]].mean()
        v.backward()
        grads.append(e.grad[0, :upto])
        values.append(v.item())
    assert ids_a[:upto] == ids_b[:upto]
    return grads[0] - grads[1], values[0] - values[1]


def assert_weights_from(res, grad, start=0):
    for s in res.sources:
        ref = grad[s.positions]  # (n_S, H)
        for got, want in zip(s.l1, ref.abs().sum(-1).tolist(), strict=True):
            assert got == pytest.approx(want, rel=1e-4, abs=1e-9)


@pytest.mark.parametrize("mode", ["cached", "naive"])
def test_contrast_gradient_equals_two_separate_passes(tiny_llama, mode):
    """Whole output against the reference, and the loss's span against it (the rest of the output kept):
    the scorer's one pass with the continuations on an in-graph cache gives the gradient of two passes."""
    tr = pipeline_trace(tiny_llama)
    node = tr.calls()[-1]
    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    sc = Scorer(str(tiny_llama), mode=mode)
    r = render_call(sc.tokenizer, node)
    o_s, o_e = r.output_range
    for chars in (None, [(1, 4)]):
        res = sc.attribute_node(tr, node, chars, contrast="Paris")
        p, q, g = reference_tokens(sc.tokenizer, r, chars, "Paris")
        if chars is None:
            assert (p, q) == (o_s, o_e) and sc.tokenizer.decode(g) == "Paris"
        else:  # only the named part is replaced; the output before it is shared context
            assert o_s <= p < q <= o_e and (p, q) != (o_s, o_e) and "Paris" in sc.tokenizer.decode(g)
        want, value = two_pass_gradient(model, r.input_ids[:q], (p, q), r.input_ids[:p] + g, (p, p + len(g)), o_s)
        assert res.log_prob == pytest.approx(value, abs=1e-5)
        assert_weights_from(res, want)
    whole = sc.attribute_node(tr, node)
    contrast = sc.attribute_node(tr, node, contrast="Paris")
    assert [s.l1 for s in whole.sources] != [s.l1 for s in contrast.sources]  # another objective, not the same


def test_judged_call_keeps_the_sources_and_its_gradient_equals_two_separate_passes(tiny_llama):
    tr = pipeline_trace(tiny_llama)
    node = tr.calls()[-1]
    judged = judgment_call(node, "The answer should be Paris.")
    assert judged.spans == node.spans and judged.text == VERDICTS[0]
    assert "The answer should be Paris." in judged.messages[-1]["content"]
    assert judged.messages[-2] == {"role": "assistant", "content": node.text}
    sc = Scorer(str(tiny_llama))
    r, rj = render_call(sc.tokenizer, node), render_call(sc.tokenizer, judged)
    o_s = r.output_range[0]
    assert rj.input_ids[:o_s] == r.input_ids[:o_s] and rj.source_ranges == r.source_ranges  # same source tokens
    res = sc.attribute_node(tr, judged, contrast=VERDICTS[1])
    no = render_call(sc.tokenizer, replace(judged, text=VERDICTS[1]))
    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    want, value = two_pass_gradient(model, rj.input_ids, rj.output_range, no.input_ids, no.output_range,
                                    rj.output_range[0])
    assert res.log_prob == pytest.approx(value, abs=1e-5)
    assert_weights_from(res, want)


# --- the objectives in the blame context --------------------------------------------------------------
def test_failure_objectives_in_the_walk_fall_back_share_caches_and_reset(tiny_llama):
    tr = pipeline_trace(tiny_llama)
    final = tr.calls()[-1].id
    sc = Scorer(str(tiny_llama))
    with_answer = VerbalLoss("wrong city", [final], "generic", {"expected": "Paris"})
    without = VerbalLoss("wrong city", [final])
    ctx = BlameContext(tr, with_answer, sc)
    get_blame_method("gbc:max_l1:contrast:path")(ctx)
    get_blame_method("gbc:max_l1:judged:path")(ctx)
    assert ctx.objective == "whole"  # a walk tells attribute its objective; the context never changes
    keys = {k for k in ctx._cache if k[0] == "gradient blame"}
    assert ("gradient blame", final, (), "contrast") in keys and ("gradient blame", final, (), "judged") in keys
    assert not ctx.whole_attributions()  # the failure-conditioned passes are not whole-output ones
    contrast = ctx._cache[("gradient blame", final, (), "contrast")][0]
    want = sc.attribute_node(tr, tr.nodes[final], contrast="Paris")
    assert [s.l1 for s in contrast.sources] == [s.l1 for s in want.sources]
    # without an expected answer the contrast is the whole output (the same pass, the same ranking)
    bare = BlameContext(tr, without, sc)
    assert blame_episode("gbc:max_l1:contrast:maxw", tr, without, sc).ranking == \
        blame_episode("gbc:max_l1:whole:maxw", tr, without, sc).ranking
    get_blame_method("gbc:max_l1:contrast:maxw")(bare)
    assert {k for k in bare._cache if k[0] == "gradient blame"} == {
        k for k in bare._cache if k[0] == "gradient blame" and len(k) == 3}
    # the judged objective reads the loss's text: another loss, another gradient
    other = BlameContext(tr, VerbalLoss("the plan was wrong", [final]), sc)
    a = other.attribute(final, None, "judged")
    assert other.objective == "whole"
    with BlameContext(tr, without, sc).objective_of("judged") as c:
        b = c.attribute(final, None)
    assert [s.l1 for s in a.sources] != [s.l1 for s in b.sources]
    out = blame_episode("gbc:mean_l1:judged:earliest", tr, with_answer, sc)
    assert out.blamed and out.trajectories


def test_direct_rule_ranks_the_loss_calls_own_steps_by_signed_contrast_from_two_separate_passes(tiny_llama):
    """``direct``: no walk; every earlier step of a chat log is a source of the final call, ranked by its
    weight there (signed mean g.e under ``contrast``, computed here from two plain passes); the question
    (an input) is never blamed, the final call comes last, and the whole ranking costs one backward pass."""
    from agentgrad.benchmarks.whowhen.bench import whowhen_loss

    tr = log(["A", "B", "C", "B", "A"], step=2, agent="C", subset="algorithm")
    seen = tr.without_meta("labels")
    final = seen.calls()[-1]
    loss = whowhen_loss(tr, True)
    sc = Scorer(str(tiny_llama))
    cost = Cost()
    ctx = BlameContext(seen, loss, sc, meter=cost)
    ranking = get_blame_method("gbc:mean_gxi:contrast:direct")(ctx)
    assert cost.backward == 1 and ctx.walked == {final.id: [ranking[0].node]}
    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    r = render_call(sc.tokenizer, final)
    p, q, g = reference_tokens(sc.tokenizer, r, None, loss.details["expected"])
    grad, _ = two_pass_gradient(model, r.input_ids[:q], (p, q), r.input_ids[:p] + g, (p, p + len(g)), r.output_range[0])
    emb = model.get_input_embeddings()(torch.tensor(r.input_ids[:r.output_range[0]])).detach()  # (o_s, H)
    pos = {s: [t for a, b in ranges for t in range(a, b)] for s, ranges in r.source_ranges.items()}
    want = {s: (grad[ts] * emb[ts]).sum(-1).mean().item() for s, ts in pos.items()}
    steps = [n.id for n in seen.calls() if n.id != final.id]
    assert sorted(want) == [0, *steps]  # the question and every earlier step are sources of the final call
    assert [b.node for b in ranking] == [*sorted(steps, key=lambda s: -want[s]), final.id]
    assert [b.score for b in ranking] == pytest.approx([1 / (i + 1) for i in range(len(ranking))])
    # the plain objective reads the same pass structure but ranks by how much was read, not its sign
    plain = get_blame_method("gbc:mean_l1:whole:direct")(BlameContext(seen, loss, sc))
    assert {b.node for b in plain} == {*steps, final.id}


def test_whowhen_ground_truth_reaches_the_gradient_only_through_the_failure_objectives(tiny_llama):
    from agentgrad.benchmarks.whowhen.bench import whowhen_loss

    tr = log(["A", "B", "C"], step=1, agent="B")
    seen = tr.without_meta("labels")
    sc = Scorer(str(tiny_llama))
    final = tr.calls()[-1].id
    gt, nogt = whowhen_loss(tr, True), whowhen_loss(tr, False)
    assert gt.details == {"expected": "42"} and nogt.details == {} and "42" in gt.text
    weights = {}
    for name, loss in (("gt", gt), ("nogt", nogt)):
        for obj in ("whole", "contrast", "judged"):
            with BlameContext(seen, loss, sc).objective_of(obj) as c:
                weights[name, obj] = [s.l1 for s in c.attribute(final, None).sources]
    assert weights["gt", "whole"] == weights["nogt", "whole"]  # the whole output never reads the answer
    assert weights["nogt", "contrast"] == weights["nogt", "whole"]  # no answer: the contrast falls back
    assert weights["gt", "contrast"] != weights["gt", "whole"]
    assert weights["gt", "judged"] != weights["nogt", "judged"]  # the answer is in what the judge reads


def test_whowhen_pairs_every_method_with_the_best_prior_and_provenance(tmp_path, tiny_llama):
    from agentgrad.benchmarks.whowhen.bench import run_whowhen

    traces = [log(r, s, a, id=f"t{i}", subset="algorithm") for i, (r, s, a) in enumerate(
        [(["A", "B", "A"], 0, "A"), (["A", "B", "C", "B"], 1, "B"), (["C", "A", "B"], 2, "B")])]
    methods = ["gbc:mean_l1:contrast:maxw", "first", "most_active", "position:0.5", "position:1", "provenance"]
    m = run_whowhen(traces, methods, scorer=Scorer(str(tiny_llama)), out=tmp_path / "W")
    figs = m["groups"]["all"]["methods"]
    # hand-computed: first names the step of log 0 only; most_active A@1, B@2, then three agents tied
    # (1/3); position:1 the last agent of every log (A, B, B: all right) and the step of log 2 only
    assert figs["first"]["step"]["value"] == pytest.approx(1 / 3)
    assert figs["position:1"]["step"]["value"] == pytest.approx(1 / 3)
    assert figs["position:1"]["agent"]["value"] == 1.0
    assert figs["most_active"]["agent"]["value"] == figs["most_active"]["step"]["value"] == pytest.approx(7 / 9)
    assert figs["first"]["vs_best_prior"]["agent"]["baseline"] == "position:1"  # the best per level
    assert figs["first"]["vs_best_prior"]["step"]["baseline"] == "most_active"
    for name in methods:
        for level in ("agent", "step"):
            d = figs[name]["vs_best_prior"][level]
            assert d["n"] == 3 and 0 <= d["p"] <= 1
            assert d["diff"] == pytest.approx(figs[name][level]["value"] - figs[d["baseline"]][level]["value"])
            assert figs[name]["vs_provenance"][level]["diff"] == pytest.approx(
                figs[name][level]["value"] - figs["provenance"][level]["value"])
    out = run_script(str(ROOT / "benchmarks" / "whowhen_table.py"), str(tmp_path / "W"), check=True).stdout
    assert "paired on the same logs" in out and "| `gbc:mean_l1:contrast:maxw` |" in out
    assert json.loads((tmp_path / "W" / "metrics.json").read_text())["groups"]["algorithm"]["methods"]["first"][
        "vs_best_prior"]["step"]["baseline"] == "most_active"


# --- the answer span of a Who&When log ------------------------------------------------------------
def test_answer_units_skip_code_markers_references_headings_and_failed_runs():
    from agentgrad.benchmarks.whowhen.span import answer_units

    text = "1. First\n2) then [7] add\n```python\nx = 99\n```\nThe total is $1,250.5 or 35%."
    assert [text[a:b] for a, b in answer_units(text, True)] == ["$1,250.5", "35%"]
    assert answer_units("exitcode: 1 (execution failed)\nCode output: line 2", True) == []
    ok = "exitcode: 0 (execution succeeded)\nCode output: 56,583"
    assert [ok[a:b] for a, b in answer_units(ok, True)] == ["0", "56,583"]
    words = 'Steps:\n**Verification Steps:** say "TERMINATE" or **Big Apple Foods** and "Glass Onion"'
    assert [words[a:b] for a, b in answer_units(words, False)] == ["Big Apple Foods", "Glass Onion"]


@pytest.mark.parametrize("unit,truth,wrong", [
    ("732,050", "736455", True), ("736,455", "736455", False), ("31.666", "31.67", False),
    ("31.6", "31.67", True), ("$55", "$55", False), ("1148", "1148 sqft", False), ("35.00%", "31.67", True),
    ("Glass Onion", "Glass Onion: A Knives Out Mystery", False), ("Infamous (2006)", "Glass Onion", True),
    ("the mcdonald's", "McDonald's", False), ("TERMINATE", "McDonald's", True)])
def test_a_unit_disagrees_with_the_truth_at_its_precision_or_by_its_words(unit, truth, wrong):
    from agentgrad.benchmarks.whowhen.span import disagrees

    assert disagrees(unit, truth) is wrong


def test_answer_span_reads_back_from_the_end_over_three_messages_and_the_loss_targets_it():
    from agentgrad.benchmarks.whowhen.bench import whowhen_loss
    from agentgrad.benchmarks.whowhen.span import answer_span

    msgs = ["The answer might be 40 or 42.", "I computed 41, then 44.", "Checked: 42.", "TERMINATE"]
    tr = whowhen_trace({"question": "q?", "ground_truth": "42", "mistake_agent": "B", "mistake_step": "1",
                        "history": [{"role": r, "content": c} for r, c in zip("ABCA", msgs)]}, "t", "hand")
    calls = tr.calls()
    s = answer_span(tr, "42")  # "TERMINATE" says nothing; C's 42 agrees; B's last wrong number is 44
    assert (s.node, s.text) == (calls[1].id, "44") and calls[1].text[s.start:s.end] == "44"
    assert answer_span(tr, "44").text == "42"  # C states 42 against a truth of 44
    assert answer_span(tr, "") is None
    far = whowhen_trace({"question": "q?", "ground_truth": "7", "mistake_agent": "A", "mistake_step": "0",
                         "history": [{"role": r, "content": c} for r, c in
                                     zip("ABCD", ["It is 9.", "Fine.", "Agreed, done.", "Yes."])]}, "f", "hand")
    assert answer_span(far, "7") is None  # the wrong 9 lies four messages back: beyond MAX_MESSAGES
    loss = whowhen_loss(tr, True, span=True)
    assert loss.targets == [calls[1].id] and loss.spans == {calls[1].id: [(s.start, s.end)]}
    assert loss.details == {"expected": "42", "span_text": "44"} and "The team answered: 44." in loss.text
    assert whowhen_loss(tr, False, span=True).spans == {}  # no ground truth: nothing to locate against
    assert whowhen_loss(far, True, span=True).targets == [far.calls()[-1].id]  # not found: the final call


def test_whowhen_answer_span_run_records_what_it_found_and_the_string_walk_follows_it(tmp_path):
    from agentgrad.benchmarks.whowhen.bench import run_whowhen

    def mk(i, msgs, agent, step):
        return whowhen_trace({"question": "q?", "ground_truth": "42", "mistake_agent": agent, "mistake_step": str(step),
                              "history": [{"role": r, "content": c} for r, c in zip("ABCD", msgs)]}, f"t{i}", "algorithm")
    traces = [mk(0, ["Start.", "It is 17.", "So 17, as B said.", "TERMINATE"], "B", 1),  # 17 first said by B
              mk(1, ["Fine.", "Fine.", "Fine.", "Fine."], "A", 0)]  # nothing to locate
    m = run_whowhen(traces, ["provenance", "last", "first"], out=tmp_path / "W", span=True)
    recs = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "W" / "logs").glob("*.json")}
    assert recs["t0"]["span"] == {"node": traces[0].calls()[2].id, "text": "17"} and recs["t1"]["span"] is None
    assert recs["t0"]["methods"]["provenance"]["step"] == 1.0  # walked back to B, who said it first
    assert recs["t0"]["methods"]["last"]["top"]["node"] == traces[0].calls()[2].id  # the located call
    assert m["groups"]["all"]["span"] == {"found": 1, "truth_after": 0}
    assert json.loads((tmp_path / "W" / "bench.json").read_text())["span"] is True
    with pytest.raises(Exception, match="ground truth"):
        run_whowhen(traces, ["first"], with_ground_truth=False, span=True)


def test_whowhen_table_leaves_out_a_method_that_only_some_logs_have(tmp_path):
    from agentgrad.benchmarks.whowhen.bench import run_whowhen

    traces = [log(["A", "B", "A"], 0, "A", id="t0", subset="algorithm"), log(["B", "A"], 1, "A", id="t1", subset="algorithm")]
    run_whowhen(traces[:1], ["first", "last", "random"], out=tmp_path / "W")  # a first chunk with one method more
    run_whowhen(traces, ["first", "last"], out=tmp_path / "W", resume=True)
    out = run_script(str(ROOT / "benchmarks" / "whowhen_table.py"), str(tmp_path / "W"), check=True).stdout
    assert "left out, not on every log: random" in out and "2 logs scored" in out
    assert "| `first` | 0.50" in out and "`random`" not in out.split("left out")[1]  # t0 right, t1 wrong (B spoke first)
    assert "no seeded random arm ran on these logs: only analytic chance" in out


def test_whowhen_table_prints_the_seeded_random_arm_beside_chance_and_names_who_is_below_it(tmp_path):
    from agentgrad.benchmarks.whowhen.bench import run_whowhen

    traces = [log(["A", "B", "A"], 0, "A", id="t0", subset="algorithm"), log(["B", "A"], 1, "A", id="t1", subset="algorithm")]
    run_whowhen(traces, ["first", "last", "random"], out=tmp_path / "W")
    for rec in (tmp_path / "W" / "logs").glob("*.json"):  # the seeded draw made right at the agent, by hand
        r = json.loads(rec.read_text())
        r["methods"]["random"].update(agent=1.0, step=0.0)
        rec.write_text(json.dumps(r))
    out = run_script(str(ROOT / "benchmarks" / "whowhen_table.py"), str(tmp_path / "W"), check=True).stdout
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("| chance"))
    assert lines[at + 1].startswith("| `random` (seeded: one draw of chance, on these logs) | 1.00 ")
    table = out.split("paired on the same logs")[0]  # the first table: random beside chance, not among the methods
    assert sum(line.startswith("| `random`") for line in table.splitlines()) == 1
    # first: right on t0 only (0.50 agent, 0.50 step: the labelled step of t0 is the first); last: A spoke last in both
    assert "below the seeded `random` arm at agent level (1.00): `first` 0.50\n" in out
    assert "below the seeded `random` arm at step level (0.00): none" in out


def test_whowhen_table_pairs_each_method_with_itself_in_the_other_setting(tmp_path):
    from agentgrad.benchmarks.whowhen.bench import run_whowhen

    traces = [log(["A", "B", "A"], 0, "A", id="t0", subset="algorithm"), log(["B", "A"], 0, "B", id="t1", subset="algorithm")]
    run_whowhen(traces, ["first", "last"], out=tmp_path / "W")  # with the ground truth (the default)
    run_whowhen(traces, ["first", "last"], with_ground_truth=False, out=tmp_path / "V")
    rec = tmp_path / "V" / "logs" / "t0.json"  # the other setting's `first` made wrong on t0, by hand
    r = json.loads(rec.read_text())
    r["methods"]["first"].update(agent=0.0, step=0.0)
    rec.write_text(json.dumps(r))
    out = run_script(str(ROOT / "benchmarks" / "whowhen_table.py"), str(tmp_path / "V"),
                          "--setting", str(tmp_path / "W"), check=True).stdout
    table = out.split("each method in the two settings")[1]
    assert "paired on the 2 logs both scored (V: without ground truth; W: with)" in table
    # first is right on both logs with the truth (A, then B spoke first), on t1 only without it
    assert "| `first` | 0.50 | 1.00 | -0.500 [-1.00, +0.00] 0/1 p=1 | 0.50 | 1.00 | -0.500" in table
    # last: A spoke last in both logs, right on t0 only; the labelled steps are both the first
    assert "| `last` | 0.50 | 0.50 | +0.000 [+0.00, +0.00] 0/0 p=1 | 0.00 | 0.00 |" in table
    bad = run_script(str(ROOT / "benchmarks" / "whowhen_table.py"), str(tmp_path / "V"),
                          "--setting", str(tmp_path / "nothing"))
    assert bad.returncode != 0 and "no scored log" in bad.stderr
