"""One blame registry for the whole package: every name works wherever a method is named, the old names
are aliases with their old trajectories, and the optimisation loop's default blames the planted agent."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stderr, redirect_stdout

import pytest

from agentgrad import Agent, System, Trace
from agentgrad.attribution import Scorer
from agentgrad.blame.backward import VerbalLoss, backward
from agentgrad.benchmarks.planted import episodes as E
from agentgrad.blame.methods import ALIASES, DEFAULT_METHOD, canonical, edge_rule, select_methods
from agentgrad.blame.outcome import blame_episode
from agentgrad.cli import main
from agentgrad.core.config import validate
from agentgrad.core.system import Episode
from agentgrad.errors import RegistryError
from agentgrad.examples import PIPELINE
from agentgrad.models.fake import FakeModel
from agentgrad.optim.config import OptimizeConfig
from agentgrad.optim.tasks import Score
from conftest import IdealScorer, ROOT

BENCH_NAMES = select_methods("all", judge=True)  # every name `bench blame --methods` accepts


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def diamond():
    """question -> (facts, plan) -> answer; the facts agent writes the wrong fact."""
    model = FakeModel(["The capital of France is Lyon.", "Look up the capital.", "Lyon"])
    with Trace(id="d") as tr:
        q = tr.input("What is the capital of France?", name="question")
        facts = Agent("facts", "List facts.", model)(q)
        plan = Agent("plan", "Plan.", model)(q)
        answer = Agent("answer", "Answer.", model, template="Facts: {f}\nPlan: {p}\nQ: {q}")(f=facts, p=plan, q=q)
    loss = VerbalLoss.generic("Paris", str(answer), "wrong capital", targets=[answer.node], spans={answer.node: [(0, 4)]})
    return tr, loss


def test_every_bench_name_is_a_loop_and_attribute_name_and_an_unknown_one_lists_them():
    from agentgrad.attribution.weights import WEIGHT_NAMES
    from agentgrad.blame.walk import OBJECTIVES, RULES

    gbc = {f"gbc:{w}:{o}:{r}" for w in WEIGHT_NAMES for o in OBJECTIVES for r in (*RULES, "top2")}
    assert gbc <= set(BENCH_NAMES) and DEFAULT_METHOD in BENCH_NAMES and len(BENCH_NAMES) == len(set(BENCH_NAMES))
    assert {"provenance", "temporal", "random", "all", "last", "occlusion:targeted:carry"} <= set(BENCH_NAMES)
    for name in BENCH_NAMES + list(ALIASES):
        cfg = validate(OptimizeConfig, {"system": "s.yaml", "scorer": {"method": name}}, "opt.yaml")
        assert canonical(cfg.scorer.method) in BENCH_NAMES
        assert edge_rule(name) in ("mean_l1", "max_l1", "mean_gxi", "max_gxi", "random", "all")  # attribute's kept edges
    assert OptimizeConfig(system="s.yaml").scorer.method == DEFAULT_METHOD == "gbc:max_l1:targeted:blend"
    with pytest.raises(RegistryError) as e:
        validate(OptimizeConfig, {"system": "s.yaml", "scorer": {"method": "gbc:max_l1:targeted:cary"}}, "opt.yaml")
    msg = str(e.value)
    assert "unknown blame method 'gbc:max_l1:targeted:cary'" in msg and "\n" not in msg
    assert "(did you mean gbc:max_l1:targeted:carry?)" in msg and "mean_l1 = gbc:mean_l1:whole:path" in msg
    # every registry name is in the message: whole, or as its family's pattern with every value of each part
    pattern = re.search(r"gbc:WEIGHT:OBJECTIVE:RULE \((.*?)\)", msg).group(1)
    parts = dict(p.split(": ") for p in pattern.split("; "))
    for n in BENCH_NAMES:
        if n.startswith("gbc:"):
            _, w, o, r = n.split(":")
            assert w in parts["WEIGHT"].split(", ") and o in parts["OBJECTIVE"].split(", ") \
                and r in parts["RULE"].split(", "), n
        elif not n.startswith("occlusion:"):
            assert re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])", msg), n
    assert "occlusion:OBJECTIVE:RULE (OBJECTIVE: whole, targeted; RULE: maxw, stop, carry)" in msg and len(msg) < 1000
    assert select_methods("max_gxi,last") == ["gbc:max_gxi:whole:path", "last"]  # aliases select too


def test_cli_attribute_and_optimize_take_registry_names(tiny_llama, tmp_path):
    tr, _ = diamond()
    tr.save(tmp_path / "t.json")
    rc, _, err = cli("attribute", tmp_path / "t.json", "--scorer", tiny_llama, "--method", DEFAULT_METHOD,
                     "--out", tmp_path / "a.json")
    assert rc == 0, err
    att = json.loads((tmp_path / "a.json").read_text())
    assert att["method"] == DEFAULT_METHOD and att["weight"] == "max_l1"
    from agentgrad.attribution.graph import AttributionGraph

    kept = AttributionGraph.from_dict(att["graph"]).prune(1, "max_l1", 0).edges
    assert att["kept_edges"] == [e.to_dict() for e in kept]
    for command in (["attribute", tmp_path / "t.json", "--scorer", tiny_llama, "--out", tmp_path / "b.json"],
                    ["optimize", PIPELINE / "optimize.yaml", "--out", tmp_path / "R"]):
        rc, _, err = cli(*command, "--method", "gbc:bogus")
        assert rc == 2 and "unknown blame method 'gbc:bogus'" in err and DEFAULT_METHOD in err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "b.json").exists() and not (tmp_path / "R").exists()


@pytest.mark.parametrize("top_k", [1, 2])
def test_old_aliases_give_the_old_trajectories(tiny_llama, top_k):
    tr, loss = diamond()
    loss.attach(tr)
    scorer = Scorer(str(tiny_llama))
    results, graph = scorer.attribute(tr)
    scorer.attribute_node = lambda *a, **k: pytest.fail("the primed whole-output gradients were taken again")
    for alias in ("mean_l1", "max_l1", "mean_gxi", "max_gxi", "all"):
        out = blame_episode(alias, tr, loss, scorer, results=results, top_k=top_k)
        old = backward(graph, loss, top_k, alias)  # the graph walk the loop used before the registry
        assert [t.to_dict() for t in out.trajectories] == [t.to_dict() for t in old], alias
        # every agent on the paths is blamed (the paper's rule), as the loop did before
        assert sorted(out.repair) == sorted({a for t in old for a in t.agents}), alias


class PlantedSystem(System):
    """Runs planted-fault episodes: the trace is the generator's (without its truth); every agent
    name the generator may use is an agent whose prompt the optimizer can rewrite."""

    def __init__(self):
        self.team = {n: Agent(n, f"You are {n}.", FakeModel(["-"])) for n in E.pools("eval")[1]}

    def run(self, example, id=""):
        trace = E.without_truth(E.generate(example["topology"], "wrong_value", example["seed"]).trace)
        trace.id = id
        return Episode(trace.nodes[-1].text, trace)


class PlantedTask:
    name = "planted"

    def __init__(self, n):
        self.rows = [{"id": f"e{i}", "topology": E.TOPOLOGIES[i % 4], "seed": i} for i in range(n)]

    def examples(self, split):
        return self.rows if split == "train" else []

    def build_system(self):
        return PlantedSystem()

    def metric(self, example, output, trace):
        return Score(0.0, False)

    def loss(self, example, output, trace, score):
        return E.generate(example["topology"], "wrong_value", example["seed"]).loss  # with the wrong value's span


@pytest.mark.parametrize("method,exact", [(DEFAULT_METHOD, True), ("mean_l1", False)])
def test_the_loops_default_blames_the_planted_agent(tiny_llama, tmp_path, method, exact):
    from transformers import AutoTokenizer

    from agentgrad.optim.config import TrainerConfig
    from agentgrad.optim.optimizer import DeterministicOptimizer
    from agentgrad.optim.trainer import Trainer
    from agentgrad.runs.rundir import RunDir

    task = PlantedTask(8)
    truth = {r["id"]: E.generate(r["topology"], "wrong_value", r["seed"]).truth["agent"] for r in task.rows}
    trainer = Trainer(task, IdealScorer(AutoTokenizer.from_pretrained(tiny_llama)), DeterministicOptimizer(),
                      TrainerConfig(samples=8, step_every=8), RunDir(tmp_path / "R"), **({} if exact else {"method": method}))
    final = trainer.fit()
    events = [json.loads(line) for line in (tmp_path / "R" / "events.jsonl").read_text().splitlines()]
    blamed = {e["sample"]: e["blamed"] for e in events if e["event"] == "sample"}
    assert len(blamed) == 8
    if exact:  # the default names exactly the planted agent, and the optimizer rewrites only those
        assert blamed == {s: [a] for s, a in truth.items()}
        changed = {a for a, p in final["prompts"].items() if "## Warning" in p}
        assert changed == set(truth.values())
        att = json.loads((tmp_path / "R" / "attribution" / "e0.json").read_text())
        assert att["blame"]["method"] == DEFAULT_METHOD and att["weight"] == "max_l1"
        t = att["trajectories"][0]["nodes"]  # from the planted node to the loss target
        assert t[0] == att["blame"]["blamed"][0]["node"] and t[-1] == att["loss"]["targets"][0]
    else:  # the paper's rule (the old default) blames every agent on the path, tied
        assert sum(len(a) for a in blamed.values()) > len(blamed)


def test_the_registry_is_one_table_and_the_help_the_error_and_the_docs_are_made_from_it():
    """FAMILIES is the registry: every name comes from one row; docs/blame.md's table is the table's
    rendering, `bench blame --help` names every family's pattern, and an unknown walk rule is an error."""
    from pathlib import Path

    from typer.testing import CliRunner

    from agentgrad.blame.methods import FAMILIES, list_blame_methods, registry_markdown
    from agentgrad.blame.walk import walk
    from agentgrad.cli import app

    names = [n for f in FAMILIES for n, _ in f.names()]
    assert names == list_blame_methods() and len(names) == len(set(names)) == 186
    page = (ROOT / "docs" / "blame.md").read_text(encoding="utf-8")
    block = page.split("<!-- registry: made from FAMILIES -->\n", 1)[1].split("\n<!-- /registry -->", 1)[0]
    assert block == registry_markdown(), "docs/blame.md's registry table is stale: paste registry_markdown()"
    res = CliRunner().invoke(app, ["bench", "blame", "--help"], env={"COLUMNS": "400"})
    text = " ".join(res.output.replace("│", " ").split())
    assert "provenance[:VARIANT] (VARIANT: earliest, key, key:root)" in text  # one head, four families
    for f in FAMILIES:
        assert f.pattern in text or f.pattern.startswith("provenance"), f.pattern
    with pytest.raises(RegistryError, match="unknown walk rule 'cary'; valid: earliest, path"):
        walk(None, "max_l1", "cary", "whole")
