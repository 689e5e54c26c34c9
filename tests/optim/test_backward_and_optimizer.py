import pytest

from agentgrad import Agent, Trace
from agentgrad.attribution import Scorer
from agentgrad.blame.backward import VerbalLoss, backward, blamed_agents, cut, render_trajectories
from agentgrad.core.agent import Prompt
from agentgrad.core.model import Generation, GenerationSettings
from agentgrad.models.fake import FakeModel
from agentgrad.optim.optimizer import (DeterministicOptimizer, Failure, PromptOptimizer, StepInput, add_warning,
                                      render_feedback)


def diamond_trace():
    """question -> (facts, plan) -> answer; the 'facts' agent writes the wrong fact."""
    model = FakeModel(["The capital of France is Lyon.", "Look up the capital.", "Lyon"])
    with Trace() as tr:
        q = tr.input("What is the capital of France?", name="question")
        facts = Agent("facts", "List facts.", model)(q)
        plan = Agent("plan", "Plan.", model)(q)
        answer = Agent("answer", "Answer.", model, template="Facts: {f}\nPlan: {p}\nQ: {q}")(f=facts, p=plan, q=q)
    loss = VerbalLoss.generic("Paris", str(answer), "wrong capital", targets=[answer.node])
    return tr, loss


@pytest.fixture(scope="module")
def graph_and_loss(tiny_llama):
    tr, loss = diamond_trace()
    loss.attach(tr)
    _, graph = Scorer(str(tiny_llama)).attribute(tr)  # a surrogate white-box scorer for fake generators
    return tr, graph, loss


@pytest.mark.parametrize("method", ["mean_l1", "max_l1", "mean_gxi", "max_gxi"])
def test_gradient_backward_runs_from_inputs_to_the_loss(graph_and_loss, method):
    tr, graph, loss = graph_and_loss
    trajs = backward(graph, loss, top_k=1, method=method)
    assert trajs
    for t in trajs:
        assert tr.nodes[t.nodes[0]].kind == "input"  # starts at an input
        assert t.nodes[-1] == loss.targets[0] and t.agents[-1] == "answer"  # ends at the loss target
        for a, b in zip(t.nodes, t.nodes[1:]):  # every hop is a recorded edge
            assert any(e.source == a and e.target == b for e in graph.edges)
    best = max(graph.incoming(3), key=lambda e: e.weights[method]).source
    assert trajs[0].nodes[-2] == best  # top-1 follows the strongest incoming edge


def test_all_visits_every_predecessor_and_random_is_seeded(graph_and_loss):
    tr, graph, loss = graph_and_loss
    trajs = backward(graph, loss, method="all")
    visited = {n for t in trajs for n in t.nodes}
    assert visited == {0, 1, 2, 3}
    assert sorted(tuple(t.nodes) for t in trajs) == [(0, 1, 3), (0, 2, 3), (0, 3)]
    assert blamed_agents(trajs) == {"facts": 1, "plan": 1, "answer": 3}
    paths = {tuple(backward(graph, loss, method="random", seed=s)[0].nodes) for s in range(40)}
    assert len(paths) > 1  # the path depends on the seed ...
    for s in range(5):  # ... and is the same for the same seed
        assert backward(graph, loss, method="random", seed=s)[0].nodes == backward(graph, loss, method="random", seed=s)[0].nodes
    assert len(backward(graph, loss, method="all", max_paths=2)) == 2  # the cap holds


def test_rendering_cuts_visibly(graph_and_loss):
    tr, graph, loss = graph_and_loss
    text = render_trajectories(tr, backward(graph, loss, method="all"), max_node_chars=12, max_chars=10_000)
    assert "[agent facts]" in text and "LOSS: Expected: Paris" in text
    assert "characters cut]" in text
    short = render_trajectories(tr, backward(graph, loss, method="all"), max_chars=200)
    assert len(short) < 260 and "characters cut]" in short
    assert cut("x" * 1240 + "abc", 3) .count("characters cut") == 1


def step_input():
    prompts = {"facts": Prompt("List facts. NEVER invent.", ("NEVER invent.",)), "plan": Prompt("Plan."),
               "answer": Prompt("Answer.")}
    loss = VerbalLoss.generic("Paris", "Lyon", "wrong capital", [3])
    failure = Failure("q1", loss, {"facts": "Trajectory 1: ...", "answer": "Trajectory 1: ..."},
                      {"facts": ["The capital of France is Lyon."], "answer": ["Lyon."]})
    return StepInput(prompts=prompts, tools={}, blamed=["facts", "answer"], feedback="Trajectory 1: ...",
                     failures=[failure])


GOOD = '{"prompts": {"facts": "List facts. NEVER invent.\\n## Warning\\n- check capitals (e.g. Lyon)"}}'


@pytest.mark.parametrize(
    "bad,reason",
    [
        ("I think the facts agent should be careful.", "not JSON"),
        ('{"prompts": {"ghost": "x"}}', "unknown agent"),
        ('{"prompts": {"facts": "   "}}', "is empty"),
        ('{"prompts": {"facts": "List facts."}}', "dropped protected text"),
        ('{"prompts": {"plan": "Plan better."}}', "not blamed"),
        ('{"prompts": {"facts": "NEVER invent. ' + "x" * 9000 + '"}}', "the cap is"),
    ],
)
def test_bad_replies_are_rejected_then_retried(bad, reason):
    model = FakeModel([bad, "```json\n" + GOOD + "\n```"], structured=False)  # a backend that cannot constrain
    res = PromptOptimizer(model, max_attempts=3).step(step_input())
    assert not res.skipped and res.attempts == 2 and reason in res.errors[0]
    assert res.prompts == {"facts": "List facts. NEVER invent.\n## Warning\n- check capitals (e.g. Lyon)"}
    retry = model.requests[1][-1]["content"]
    assert reason in retry  # the model is told why


def test_step_skipped_after_n_failures():
    res = PromptOptimizer(FakeModel(["nope"], cycle=True, structured=False), max_attempts=3).step(step_input())
    assert res.skipped and res.prompts == {} and len(res.errors) == 3 and res.unconstrained == 3
    res = PromptOptimizer(FakeModel([]), max_attempts=3).step(step_input())  # the model itself fails
    assert res.skipped and "optimizer model failed" in res.errors[0]


def test_optimizer_prompt_holds_everything():
    inp = step_input()
    inp.history = [{"step": 1, "agents": ["plan"], "before": 0.2, "after": 0.1, "accepted": False}]
    msgs = PromptOptimizer(FakeModel([GOOD])).messages(inp)
    user = msgs[1]["content"]
    for needle in ("## facts", "List facts. NEVER invent.", "Trajectory 1", "facts, answer", "'NEVER invent.'",
                   "Step 1: updated plan; score 0.2 -> 0.1 (rejected)", "## Warning"):
        assert needle in user


def test_deterministic_optimizer_appends_warning_bullets():
    res = DeterministicOptimizer().step(step_input())
    assert set(res.prompts) == {"facts", "answer"}
    facts = res.prompts["facts"]
    assert facts.startswith("List facts. NEVER invent.\n\n## Warning\n- Avoid: Expected: Paris Produced: Lyon")
    assert "(e.g. you wrote 'The capital of France is Lyon.')" in facts
    again = add_warning(facts, ["Avoid: something new"])
    assert again.count("## Warning") == 1 and again.count("- Avoid") == 2
    assert add_warning(again, ["Avoid: something new"]) == again  # no duplicates


def two_failures():
    """A step with two failed samples: q1 blames the planner, q2 the extractor."""
    prompts = {"planner": Prompt("Plan."), "extractor": Prompt("Extract."), "answer": Prompt("Answer.")}
    f1 = Failure("q1", VerbalLoss.generic("Paris", "Lyon", "wrong city", [2]),
                 {"planner": "[agent planner] 'go to Lyon' -> LOSS q1"}, {"planner": ["go to Lyon"]})
    f2 = Failure("q2", VerbalLoss.generic("7", "9", "wrong count", [2]),
                 {"extractor": "[agent extractor] 'count: 9' -> LOSS q2"}, {"extractor": ["count: 9"]})
    blamed = ["extractor", "planner"]
    return StepInput(prompts, {}, blamed, render_feedback([f1, f2], blamed), failures=[f1, f2])


def test_deterministic_optimizer_gives_each_agent_only_its_own_failures():
    res = DeterministicOptimizer().step(two_failures())
    assert set(res.prompts) == {"planner", "extractor"}
    planner = [line for line in res.prompts["planner"].splitlines() if line.startswith("- ")]
    extractor = [line for line in res.prompts["extractor"].splitlines() if line.startswith("- ")]
    assert planner == ["- Avoid: Expected: Paris Produced: Lyon What is wrong: wrong city (e.g. you wrote 'go to Lyon')"]
    assert extractor == ["- Avoid: Expected: 7 Produced: 9 What is wrong: wrong count (e.g. you wrote 'count: 9')"]


def test_deterministic_optimizer_one_bullet_per_failure_with_its_own_example():
    """Two trajectories of one sample through one agent give one bullet; two samples give two, each
    illustrated by the agent's output in that sample."""
    inp = two_failures()
    f1, f2 = inp.failures
    f2.outputs["planner"], f2.rendered["planner"] = ["go to Nice", "go to Nice"], "[agent planner] 'go to Nice'"
    f1.outputs["planner"] = ["go to Lyon", "go to Lyon"]
    inp.blamed = ["planner"]
    bullets = [line for line in DeterministicOptimizer().step(inp).prompts["planner"].splitlines()
               if line.startswith("- ")]
    assert len(bullets) == len(set(bullets)) == 2
    assert "wrong city" in bullets[0] and "'go to Lyon'" in bullets[0] and "Nice" not in bullets[0]
    assert "wrong count" in bullets[1] and "'go to Nice'" in bullets[1] and "Lyon" not in bullets[1]


def test_llm_optimizer_sees_each_agents_own_trajectories_only():
    user = PromptOptimizer(FakeModel([GOOD])).messages(two_failures())[1]["content"]
    planner = user[user.index("## Failures on trajectories through planner"):]
    extractor = user[user.index("## Failures on trajectories through extractor"):user.index("## Failures on trajectories through planner")]
    assert "Sample q1" in planner and "LOSS q1" in planner and "q2" not in planner
    assert "Sample q2" in extractor and "LOSS q2" in extractor and "q1" not in extractor


def test_a_rewrite_cut_by_the_token_budget_is_asked_again_for_half_the_length():
    """A reply cut by the token budget inside the string (characters of several tokens, escapes) does not
    parse: the next attempt's shape allows half the length."""
    cut_reply = Generation(text='{"prompts": {"facts": "NEVER invent. AI. AI. AI', finish_reason="length")
    model = FakeModel([cut_reply, GOOD], structured=False)
    caps = []
    real = model.generate
    model.generate = lambda m, t, st: (caps.append(st.output.json_schema["properties"]["prompts"]["properties"]), real(m, t, st))[1]
    inp = step_input()
    inp.blamed = ["facts"]
    res = PromptOptimizer(model, max_attempts=3, settings=GenerationSettings(max_new_tokens=256)).step(inp)
    assert not res.skipped and res.attempts == 2 and "not JSON" in res.errors[0]
    assert caps[1]["facts"]["maxLength"] == 128 - 8 - 16 < caps[0]["facts"]["maxLength"] == 256 - 8 - 16
    assert caps[0]["facts"]["pattern"] == caps[1]["facts"]["pattern"]  # the protected span stays required
    # a reply that ended on its own and is wrong in content is asked again at the same length
    model = FakeModel(['{"prompts": {"facts": "List facts."}}', GOOD], structured=False)
    caps.clear()
    model.generate = lambda m, t, st, real=model.generate: (caps.append(st.output.json_schema), real(m, t, st))[1]
    PromptOptimizer(model, max_attempts=3, settings=GenerationSettings(max_new_tokens=256)).step(inp)
    assert caps[0] == caps[1]
