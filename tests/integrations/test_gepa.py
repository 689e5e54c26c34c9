"""GBC blame inside GEPA, against GEPA's real package with scripted models: the adapter runs an
agentgrad system under gepa.optimize, the selector returns the agent a planted failure blames, and
the reflective dataset holds that agent's calls on the GBC trajectory with the verbal loss."""

from __future__ import annotations

import sys

import pytest

from agentgrad import Agent, System
from agentgrad.blame.backward import VerbalLoss
from agentgrad.blame.methods import Blame
from agentgrad.errors import ConfigError
from agentgrad.models.fake import FakeModel
from agentgrad.optim.tasks import Score

from agentgrad.integrations.gepa import GBCComponentSelector, GEPAAdapter

try:
    import gepa
except ImportError:  # each test that needs it is skipped, and counted, with the reason
    gepa = None
needs_gepa = pytest.mark.skipif(gepa is None, reason="gepa tests: GEPA is not installed (pip install -e '.[gepa]')")


class FanIn(System):
    """Two workers read the question; a responder reads both."""

    def __init__(self):
        def answer(msgs, tools):
            system = msgs[0]["content"]
            if system.startswith("w2"):  # the second worker is right once its prompt says to check
                return "fact: 7" if "check" in system else "fact: 9"
            return {"w1": "fact: 7", "resp": "It is 9."}[system.split(":")[0]]

        model = FakeModel(responder=answer)
        self.w1 = Agent("w1", "w1: list the first fact.", model)
        self.w2 = Agent("w2", "w2: list the second fact.", model)
        self.resp = Agent("resp", "resp: answer from the facts.", model)

    def forward(self, question):
        return self.resp(self.w1(question), self.w2(question))


class PlantedTask:
    """Every episode fails; the planted fault is the second worker's output (its node is the loss's target)."""

    name = "planted"

    def examples(self, split):
        return [{"id": f"q{i}", "question": f"What is x{i}?"} for i in range(3)]

    def build_system(self):
        return FanIn()

    def metric(self, example, output, trace):
        ok = next(n.text for n in trace.calls() if n.name == "w2") == "fact: 7"
        return Score(float(ok), ok)

    def loss(self, example, output, trace, score):
        w2 = next(n.id for n in trace.calls() if n.name == "w2")
        return VerbalLoss("The second fact is wrong: x is 7, not 9.", [w2])


@needs_gepa
def test_selector_and_reflective_dataset_on_a_planted_failure(tiny_llama):
    from agentgrad.attribution import Scorer

    task = PlantedTask()
    adapter = GEPAAdapter(task, Scorer(str(tiny_llama)), method="gbc:mean_l1:whole:path")
    seed = {n: a.prompt.text for n, a in adapter.system.agents().items()}
    batch = adapter.evaluate(task.examples("train"), seed, capture_traces=True)
    assert batch.scores == [0.0, 0.0, 0.0] and len(batch.trajectories) == 3
    selector = GBCComponentSelector(top_k=1)
    assert selector(None, batch.trajectories, batch.scores, 0, seed) == ["w2"]
    data = adapter.make_reflective_dataset(seed, batch, ["w2", "w1"])
    assert len(data["w2"]) == 3 and data["w1"] == []  # w1 is not on the path from the loss
    rec = data["w2"][0]
    assert rec["Generated Outputs"] == "fact: 9" and "x is 7, not 9" in rec["Feedback"] and "What is x0?" in rec["Inputs"]
    # without a failure nothing is blamed: the fallback decides
    assert GBCComponentSelector(fallback="all")(None, [], [], 0, seed) == ["w1", "w2", "resp"]
    assert GBCComponentSelector(fallback="none")(None, [], [], 0, seed) == []
    with pytest.raises(ConfigError, match="fallback"):
        GBCComponentSelector(fallback="random")
    with pytest.raises(ConfigError, match="unknown agent"):
        adapter.evaluate(task.examples("train"), {"nobody": "x"})


@needs_gepa
def test_an_episode_that_cannot_be_blamed_keeps_its_score_and_gets_no_vote(tiny_llama):
    from agentgrad.attribution import Scorer

    task = PlantedTask()
    adapter = GEPAAdapter(task, Scorer(str(tiny_llama), max_context=16), method="gbc:mean_l1:whole:path")
    seed = {n: a.prompt.text for n, a in adapter.system.agents().items()}
    batch = adapter.evaluate(task.examples("train"), seed, capture_traces=True)
    assert batch.scores == [0.0, 0.0, 0.0]
    assert all(r.error.startswith("not blamed:") and "context" in r.error and not r.ranking for r in batch.trajectories)
    assert GBCComponentSelector(fallback="none")(None, batch.trajectories, batch.scores, 0, seed) == []
    assert adapter.make_reflective_dataset(seed, batch, ["w2"]) == {"w2": []}


@needs_gepa
def test_gepa_optimize_rewrites_only_the_blamed_agent(tiny_llama):
    from agentgrad.attribution import Scorer

    task = PlantedTask()
    adapter = GEPAAdapter(task, Scorer(str(tiny_llama)))
    seed = {n: a.prompt.text for n, a in adapter.system.agents().items()}
    selector = GBCComponentSelector(top_k=1)
    asked = []

    def reflection_lm(prompt):
        asked.append(prompt)
        return "```\nw2: list the second fact; check it against the question.\n```"

    result = gepa.optimize(seed_candidate=seed, trainset=task.examples("train"), valset=task.examples("train"),
                           adapter=adapter, reflection_lm=reflection_lm, module_selector=selector,
                           max_metric_calls=12, reflection_minibatch_size=2, seed=0, display_progress_bar=False)
    assert selector.history and all(h == ["w2"] for h in selector.history)
    assert asked and "x is 7, not 9" in asked[0]  # the verbal loss reached GEPA's reflection prompt
    proposed = [c for c in result.candidates if c != seed]
    assert proposed and all(c["w1"] == seed["w1"] and c["resp"] == seed["resp"] and c["w2"] != seed["w2"]
                            for c in proposed)
    assert result.best_candidate["w2"].endswith("check it against the question.")  # and it fixed the fault


def test_missing_extra_is_one_line(monkeypatch):
    from agentgrad.integrations import gepa as G

    monkeypatch.setitem(sys.modules, "gepa", None)
    with pytest.raises(ConfigError, match=r"pip install 'agentgrad\[gepa\]'"):
        G.require_gepa()


def test_blame_votes_and_ties():
    class R:
        def __init__(self, *agents):
            self.ranking = [Blame(a, i, 1.0) for i, a in enumerate(agents)]

    cand = {"a": "", "b": "", "c": ""}
    sel = GBCComponentSelector(top_k=2)
    assert sel(None, [R("b"), R("c", "a"), R("b"), R("zz")], [], 0, cand) == ["b", "c"]
    assert GBCComponentSelector(top_k=1)(None, [R("c"), R("a")], [], 0, cand) == ["a"]  # a tie: the candidate's order


@pytest.mark.slow
@needs_gepa
def test_the_gepa_example_runs_both_selectors_on_the_tiny_model():
    """examples/gepa/compare.py end to end on the pipeline (tiny model; a scripted reflection model)."""
    import importlib.util

    from agentgrad.examples import PIPELINE

    spec = importlib.util.spec_from_file_location("compare", PIPELINE.parent / "gepa" / "compare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = [mod.run(s, "default=tiny", lambda prompt: "```\nAnswer with the answer only.\n```", 8, 0)
            for s in ("round_robin", "gbc")]
    assert [r["selector"] for r in rows] == ["round_robin", "gbc"]
    assert rows[1]["selected"] and all(len(h) == 1 for h in rows[1]["selected"])  # one blamed agent per reflection
