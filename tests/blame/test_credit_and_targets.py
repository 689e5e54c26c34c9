"""Credit (conserved shares, hand-computed on small graphs), its export, and target back-propagation."""

from __future__ import annotations

import json

import pytest

from agentgrad import Agent, Tool, Trace
from agentgrad.attribution.graph import AttributionGraph, Edge
from agentgrad.blame.backward import VerbalLoss
from agentgrad.blame.walk import kept_parents
from agentgrad.cli import main
from agentgrad.blame.credit import credit_records, split_credit
from agentgrad.errors import ConfigError, ModelError
from agentgrad.models.fake import FakeModel
from agentgrad.optim.optimizer import StepInput
from agentgrad.optim.targets import LLMTargetWriter, ScriptedTargetWriter, TargetOptimizer, propagate_targets
from agentgrad.core.agent import Prompt
from agentgrad.examples import PIPELINE

W = ("mean_l1", "max_l1", "mean_gxi", "max_gxi")


def att(nodes, edges, targets, prompts=None, skipped=()):
    """An attribution record by hand: nodes {id: (kind, name)}, edges [(src, dst, w)] (w for every
    weight; a negative w for the signed ones only), prompts {call: w}."""
    rec_nodes = []
    for n, (kind, name) in nodes.items():
        if kind != "call":
            continue
        d = {"node_id": n, "agent": name, "sources": [], "skipped": "x" if n in skipped else None}
        if prompts and n in prompts:
            d["prompt"] = {"weights": {k: prompts[n] for k in W}}
        rec_nodes.append(d)
    es = []
    for s, t, w in edges:
        if w == "tool":
            es.append({"source": s, "target": t, "weights": {k: 1.0 for k in W}, "structural": True})
        else:
            es.append({"source": s, "target": t, "weights": {"mean_l1": abs(w), "max_l1": abs(w), "mean_gxi": w,
                                                              "max_gxi": w}, "structural": False})
    return {"trace_id": "t", "seed": 0, "nodes": rec_nodes,
            "graph": {"nodes": [{"id": n, "kind": k, "name": nm} for n, (k, nm) in nodes.items()], "edges": es},
            "loss": {"text": "wrong", "targets": targets}}


def approx(d):
    return {k: pytest.approx(v, abs=1e-12) for k, v in d.items()}


def test_chain_by_hand():
    # input 0 -> call 1 (prompt 2, source 0: 2) -> call 2 (prompt 1, source 1: 3); loss on 2
    a = att({0: ("input", "q"), 1: ("call", "A"), 2: ("call", "B")}, [(0, 1, 2.0), (1, 2, 3.0)], [2], {1: 2.0, 2: 1.0})
    c = split_credit(a, 1.0)
    # B keeps 1/4 and passes 3/4 to A; A keeps half of that (3/8) and passes 3/8 to the input
    assert c.shares == approx({0: 3 / 8, 1: 3 / 8, 2: 1 / 4})
    assert c.by_agent() == approx({"A": 3 / 8, "B": 1 / 4})
    assert sum(c.shares.values()) == pytest.approx(1.0, abs=1e-12)
    # a total of 0.6 scales every share
    assert split_credit(a, 0.6).shares == approx({0: 0.6 * 3 / 8, 1: 0.6 * 3 / 8, 2: 0.6 / 4})


def test_the_worked_example_of_the_docs():
    """docs/optimisation.md: question n0 -> extractor n1 and planner n2 -> answerer n3, the loss on n3. The
    answerer's prompt weighs 56.3, its sources 70.4 and 65.7: it keeps 56.3 / 192.4 = 0.293 and passes 0.366
    and 0.341; the extractor's prompt weighs 108.3 against 97.0 for the question: it keeps 0.366 x 0.527 =
    0.193 and passes 0.173; the planner's 59.2 against 40.8: it keeps 0.341 x 0.592 = 0.202 and passes 0.139.
    Shares: answerer 0.293, planner 0.202, extractor 0.193, the question 0.312 (sum 1). With --top-k 1:
    answerer 0.444, extractor 0.293, planner 0, the question 0.263."""
    nodes = {0: ("input", "question"), 1: ("call", "extractor"), 2: ("call", "planner"), 3: ("call", "answerer")}
    edges = [(0, 1, 97.0), (0, 2, 40.8), (1, 3, 70.4), (2, 3, 65.7)]
    prompts = {1: 108.3, 2: 59.2, 3: 56.3}
    c = split_credit(att(nodes, edges, [3], prompts), 1.0)
    assert {k: round(v, 3) for k, v in c.shares.items()} == {3: 0.293, 2: 0.202, 1: 0.193, 0: 0.312}
    assert sum(c.shares.values()) == pytest.approx(1.0, abs=1e-12)
    assert [round(100 * c.shares[k]) for k in (3, 2, 1, 0)] == [29, 20, 19, 31]  # per cent, as the page reads them
    top = split_credit(att(nodes, edges, [3], prompts), 1.0, top_k=1)
    assert {k: round(v, 3) for k, v in top.shares.items()} == {3: 0.444, 1: 0.293, 2: 0.0, 0: 0.263}


def test_fan_in_with_and_without_prompt_weights():
    nodes = {0: ("input", "q"), 1: ("call", "w1"), 2: ("call", "w2"), 3: ("call", "w3"), 4: ("call", "resp")}
    edges = [(0, 1, 1.0), (0, 2, 1.0), (0, 3, 1.0), (1, 4, 1.0), (2, 4, 2.0), (3, 4, 1.0)]
    # no prompt weights: the responder keeps self_share (0.5) and passes the rest by 1:2:1; workers
    # (no prompt weight either) keep half and pass half to the input
    c = split_credit(att(nodes, edges, [4]), 2.0, self_share=0.5)
    assert c.shares == approx({4: 1.0, 1: 0.125, 2: 0.25, 3: 0.125, 0: 0.5})
    # self_share 0: everything flows to the input
    assert split_credit(att(nodes, edges, [4]), 2.0).shares == approx({4: 0.0, 1: 0.0, 2: 0.0, 3: 0.0, 0: 2.0})
    # top-1: only the strongest source (w2) gets the responder's credit
    c = split_credit(att(nodes, edges, [4], {4: 2.0, 1: 0.0, 2: 0.0, 3: 0.0}), 1.0, top_k=1)
    assert c.shares == approx({4: 0.5, 2: 0.0, 0: 0.5, 1: 0.0, 3: 0.0})


def test_ties_top_k_and_all_edges():
    nodes = {0: ("input", "a"), 1: ("input", "b"), 2: ("call", "C")}
    a = att(nodes, [(0, 2, 1.0), (1, 2, 1.0)], [2])
    assert split_credit(a, 1.0).shares == approx({0: 0.5, 1: 0.5, 2: 0.0})  # all edges: equal parts
    picks = set()
    for seed in range(8):  # top-1 of a tie: one of the two, the one the seeded pruning keeps
        s = split_credit(a, 1.0, top_k=1, seed=seed).shares
        assert sorted(s.values()) == [0.0, 0.0, 1.0]
        kept = AttributionGraph.from_dict(a["graph"]).prune(1, "mean_l1", seed).edges[0].source
        assert s[kept] == 1.0
        picks.add(kept)
    assert picks == {0, 1}


def test_tools_pass_or_keep_and_multiple_targets():
    # call 1 asks tool 2; call 3 reads the input and the tool's result; the loss attaches to 1 and 3
    nodes = {0: ("input", "q"), 1: ("call", "A"), 2: ("tool", "lookup"), 3: ("call", "B")}
    edges = [(0, 1, 1.0), (1, 2, "tool"), (0, 3, 1.0), (2, 3, 3.0)]
    a = att(nodes, edges, [1, 3], {1: 1.0, 3: 0.0})
    c = split_credit(a, 1.0)
    # B: 0.5, passes 1/8 to input, 3/8 to the tool, which passes it to A (0.5 + 3/8): A keeps half
    assert c.shares == approx({3: 0.0, 2: 0.0, 1: 0.4375, 0: 0.125 + 0.4375})
    k = split_credit(a, 1.0, tools="keep").shares
    assert k == approx({3: 0.0, 2: 0.375, 1: 0.25, 0: 0.375})
    assert sum(k.values()) == pytest.approx(1.0, abs=1e-12)


def test_signed_weights_and_skipped_calls():
    nodes = {0: ("input", "a"), 1: ("input", "b"), 2: ("call", "C")}
    a = att(nodes, [(0, 2, 3.0), (1, 2, -1.0)], [2])
    s = split_credit(a, 1.0, weight="mean_gxi", signed=True).shares
    assert s == approx({0: 1.5, 1: -0.5, 2: 0.0})  # a source that pushed against gets a negative share
    assert split_credit(a, 1.0, weight="mean_gxi").shares == approx({0: 0.75, 1: 0.25, 2: 0.0})
    cancel = att(nodes, [(0, 2, 1.0), (1, 2, -1.0)], [2])  # signed weights summing to 0: split by |w|
    assert split_credit(cancel, 1.0, weight="mean_gxi", signed=True).shares == approx({0: 0.5, 1: 0.5, 2: 0.0})
    zero = att(nodes, [(0, 2, 0.0), (1, 2, 0.0)], [2], {2: 0.0})  # every weight zero: equal parts
    assert split_credit(zero, 1.0).shares == approx({0: 1 / 3, 1: 1 / 3, 2: 1 / 3})
    skipped = att(nodes, [(0, 2, 1.0)], [2], skipped=(2,))  # not attributed: keeps everything
    assert split_credit(skipped, 1.0).shares == approx({0: 0.0, 1: 0.0, 2: 1.0})
    with pytest.raises(ConfigError, match="unknown weight"):
        split_credit(a, 1.0, weight="l2")
    with pytest.raises(ConfigError, match="loss target"):
        split_credit({**a, "loss": {"targets": []}}, 1.0)


@pytest.mark.slow
def test_conservation_on_every_episode_of_a_demo_run(demo_run):
    files = sorted((demo_run / "attribution").glob("*.json"))
    assert len(files) == 9
    checked = 0
    for f in files:
        a = json.loads(f.read_text())
        assert all("prompt" in n for n in a["nodes"])  # the demo scores the agents' own prompts
        for weight in W:
            for top_k in (None, 1):
                for signed in (False, True):
                    for tools in ("pass", "keep"):
                        c = split_credit(a, 0.73, weight=weight, top_k=top_k, signed=signed, tools=tools)
                        assert abs(sum(c.shares.values()) - 0.73) <= 1e-9
                        checked += 1
        c = split_credit(a, 1.0)
        assert all(v >= 0 for v in c.shares.values()) and any(c.shares[n] > 0 for n in c.kept)
    assert checked == 9 * 4 * 2 * 2 * 2


def test_export_credit_jsonl_and_trl(demo_run, tmp_path, capsys):
    out = tmp_path / "credit.jsonl"
    assert main(["export", "credit", str(demo_run), "--out", str(out), "--quantity", "loss"]) == 0
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    by_ep: dict[str, float] = {}
    for r in rows:
        assert r["quantity"] == "loss" and r["total"] == 1.0 and r["kind"] in ("call", "input", "tool")
        by_ep[r["episode"]] = by_ep.get(r["episode"], 0.0) + r["credit"]
        if r["kind"] == "call":
            assert r["messages"][0]["role"] == "system" and r["agent"] in ("extractor", "planner", "answerer")
    assert len(by_ep) == 9 and all(abs(v - 1.0) <= 1e-9 for v in by_ep.values())
    assert rows == list(credit_records(demo_run, quantity="loss"))
    trl = tmp_path / "trl.jsonl"
    assert main(["export", "credit", str(demo_run), "--out", str(trl), "--format", "trl", "--quantity", "loss"]) == 0
    t = [json.loads(l) for l in trl.read_text().splitlines()]
    calls = [r for r in rows if r["kind"] == "call"]
    assert len(t) == len(calls) and set(t[0]) >= {"prompt", "completion", "reward"}
    assert t[0]["prompt"] == calls[0]["messages"] and t[0]["completion"] == [{"role": "assistant", "content": calls[0]["output"]}]
    assert t[0]["reward"] == -calls[0]["credit"]
    # refusals: an existing --out, an unknown format, a run without attribution: one line each
    assert main(["export", "credit", str(demo_run), "--out", str(trl)]) != 0
    assert main(["export", "credit", str(demo_run), "--out", str(tmp_path / "x"), "--format", "csv"]) == 2
    assert main(["export", "credit", str(tmp_path), "--out", str(tmp_path / "y")]) != 0
    err = capsys.readouterr().err
    assert "exists" in err and "--format" in err and "attribution" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


# --- targets ------------------------------------------------------------------------------------------
def test_targets_walk_the_kept_edges_through_tools():
    model = FakeModel(["plan: look up", {"text": "", "tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]},
                       "found it", "The answer is 7."])
    tool = Tool.from_function(lambda q: "result 7", name="lookup")
    with Trace(id="e") as tr:
        q = tr.input("what is x?", name="user")
        plan = Agent("planner", "Plan.", model)(q)
        work = Agent("worker", "Work.", model, tools=[tool])(plan)
        Agent("responder", "Answer.", model)(q, work)
    kinds = [n.kind for n in tr]
    assert kinds == ["input", "call", "call", "tool", "call", "call"]
    # the responder (5) reads the worker's final output (4); the worker's second call reads the tool (3)
    edges = [Edge(s, n.id, {k: 1.0 for k in W}) for n in tr for s in n.parents if n.kind == "call"]
    edges += [Edge(2, 3, {k: 1.0 for k in W}, True)]
    graph = AttributionGraph({n.id: {"kind": n.kind, "name": n.name} for n in tr}, edges)
    loss = VerbalLoss("wrong", [5], details={"expected": "8"})
    parents = kept_parents(graph, 3, "mean_l1")
    targets = propagate_targets(tr, parents, loss, ScriptedTargetWriter())
    assert targets[5] == "8"
    assert set(targets) == {5, 4, 2, 1}  # through the tool (3) to the call that asked for it (2)
    assert "responder" in targets[4] and all(t for t in targets.values())
    # an LLM writer: a reply that does not parse is asked again with the reason
    replies = iter(['no json here', '{"target": "eight"}', '{"target": "t4"}', '{"target": "t2"}', '{"target": "t1"}'])
    seen = []
    llm = FakeModel(responder=lambda msgs, tools: (seen.append(msgs), next(replies))[1], structured=False)
    targets = propagate_targets(tr, parents, loss, LLMTargetWriter(llm))
    assert targets == {5: "eight", 4: "t4", 2: "t2", 1: "t1"}
    assert "rejected" in seen[1][-1]["content"] and "lookup" in seen[3][1]["content"]  # the tool named
    bad = FakeModel(responder=lambda m, t: '{"target": ""}', structured=False)
    with pytest.raises(ModelError, match="no usable target"):
        propagate_targets(tr, kept_parents(graph, 1, "mean_l1"), loss, LLMTargetWriter(bad, max_attempts=2))


def test_target_optimizer_updates_from_pairs_and_validates():
    prompts = {"a": Prompt("Do A. KEEP", protected=["KEEP"]), "b": Prompt("Do B.")}
    inp = StepInput(prompts=prompts, tools={}, blamed=["a", "b"], feedback="",
                    pairs={"a": [("wrong a", "right a")]})
    res = TargetOptimizer(ScriptedTargetWriter()).step(inp)
    assert set(res.prompts) == {"a"} and "right a" in res.prompts["a"] and "wrong a" in res.prompts["a"]
    replies = iter(['{"prompts": {"b": "x"}}', '{"prompts": {"a": "Do A."}}', '{"prompts": {"a": "Do A better. KEEP"}}'])
    llm = FakeModel(responder=lambda m, t: next(replies), structured=False)  # a backend that cannot constrain
    res = TargetOptimizer(ScriptedTargetWriter(), llm).step(inp)
    assert res.prompts == {"a": "Do A better. KEEP"} and res.attempts == 3
    assert "not blamed" in res.errors[0] and "protected" in res.errors[1]
    empty = TargetOptimizer(ScriptedTargetWriter()).step(StepInput(prompts, {}, ["a"], "", []))
    assert empty.skipped


@pytest.mark.slow
def test_pipeline_with_the_target_optimizer(tmp_path):
    out = tmp_path / "t"
    assert main(["optimize", str(PIPELINE / "optimize.yaml"), "--out", str(out), "--optimizer", "target"]) == 0
    atts = [json.loads(f.read_text()) for f in sorted((out / "attribution").glob("*.json"))]
    assert atts and all(a["targets"] for a in atts)
    for a in atts:  # the final call's target is the expected answer; every target is on a trajectory
        assert a["targets"][str(a["loss"]["targets"][0])] == a["loss"]["details"]["expected"]
        on_paths = {n for t in a["trajectories"] for n in t["nodes"]}
        assert {int(n) for n in a["targets"]} <= on_paths
    final = json.loads((out / "final.json").read_text())
    assert "Aim for:" in final["prompts"]["answerer"]
    from agentgrad.report.html import render_report

    html, _ = render_report(out)
    assert "hastarget" in html
    assert main(["optimize", str(PIPELINE / "optimize.yaml"), "--out", str(tmp_path / "u"), "--optimizer", "x"]) == 2
