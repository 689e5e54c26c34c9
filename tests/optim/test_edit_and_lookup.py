"""The lookup task's metric and loss, and the gradient-guided edit optimizer, on hand-worked cases."""

from agentgrad import Agent, Trace
from agentgrad.models.fake import FakeModel
from agentgrad.core.agent import Prompt
from agentgrad.optim.edit import EditOptimizer, sentence_scores, sentences
from agentgrad.optim.optimizer import StepInput
from agentgrad.optim.tasks import LookupTask, get_task

EX = {"id": "r1", "answer": "Lyon", "avoid": ["snake", "blue"]}


def score(text):
    with Trace() as tr:  # the answer as a system returns it: an agent's output that knows its node
        out = Agent("answerer", "You answer.", FakeModel([text]))(tr.input("Record: ...", name="record"))
    task = LookupTask(None, {})
    s = task.metric(EX, out, tr)
    return s, task.loss(EX, out, tr, s)


def test_lookup_metric_by_hand():
    assert get_task("lookup") is LookupTask
    assert score("Lyon.")[0].passed and score("Alice's city is Lyon, in France.")[0].passed
    assert not score("The pet is a snake.")[0].passed  # names another value of the record
    assert not score("Lyon, and her pet is a snake")[0].passed  # the expected value, but another one too
    assert not score("Lyonnais")[0].passed  # a word, not a prefix
    assert not score("Paris")[0].passed


def test_lookup_loss_points_at_the_wrong_value():
    s, loss = score("The pet is a Snake, blue.")
    assert s.details["named"] == ["snake", "blue"]
    text = "The pet is a Snake, blue."
    assert [text[a:b] for a, b in loss.spans[loss.targets[0]]] == ["Snake", "blue"]
    assert "'snake', 'blue'" in loss.text and "Lyon" in loss.text
    s, loss = score("I do not know.")
    assert loss.spans[loss.targets[0]] == [(0, len("I do not know."))]  # nothing named: the whole answer
    assert score("Lyon")[1] is None


def test_parts_are_lines_else_sentences():
    t = "You read a record.\nExample: Name: Zoe. City: Bern. Answer: cow.\n\n"
    assert [t[a:b] for a, b in sentences(t)] == ["You read a record.", "Example: Name: Zoe. City: Bern. Answer: cow."]
    t = "One two. Three four! Five"
    assert [t[a:b] for a, b in sentences(t)] == ["One two.", "Three four!", "Five"]


def test_sentence_scores_by_hand():
    t = "Aa bb.\nCc dd."  # parts: [0, 6) and [7, 13)
    ep1 = [(0, 2, 1.0), (3, 6, 2.0), (7, 9, 4.0)]  # max 4: part scores 0.5 and 1.0
    ep2 = [(0, 2, 3.0), (7, 9, 1.0), (10, 13, 1.5)]  # max 3: 1.0 and 0.5
    assert sentence_scores(t, [ep1, ep2]) == [1.5, 1.5]
    assert sentence_scores(t, [ep1]) == [0.5, 1.0]


def _inp(prompts, scores, history=()):
    return StepInput(prompts={a: Prompt(*p) if isinstance(p, tuple) else Prompt(p) for a, p in prompts.items()},
                     tools={}, blamed=sorted(scores), feedback="", prompt_scores=scores,
                     history=list(history))


def test_edit_removes_the_line_the_gradient_points_at():
    reader = "You read a record.\nExample: the pet is a cow.\n"
    scores = {"reader": [[(0, 18, 1.0), (19, 44, 3.0)], [(0, 18, 2.0), (19, 44, 2.5)]]}
    res = EditOptimizer().step(_inp({"reader": reader, "answerer": "You answer."}, scores))
    assert res.prompts == {"reader": "You read a record.\n"}  # only the blamed agent changes
    # scores: episode 1 (max 3): 1/3 and 1; episode 2 (max 2.5): 0.8 and 1; share 2 / 3.133 = 0.64
    assert res.notes == ["reader: removed 'Example: the pet is a cow.' (gradient share 0.64)"]


def test_edit_skips_protected_rejected_and_last_parts():
    text = "Keep this. Drop this. Maybe this."
    scores = {"a": [[(0, 10, 9.0), (11, 21, 5.0), (22, 33, 1.0)]]}
    res = EditOptimizer().step(_inp({"a": (text, ["Keep this."])}, scores))
    assert res.prompts["a"] == "Keep this. Maybe this.\n"  # the protected sentence stays
    history = [{"accepted": False, "notes": ["a: removed 'Drop this.' (gradient share 0.83)"]}]
    res = EditOptimizer().step(_inp({"a": (text, ["Keep this."])}, scores, history))
    assert res.prompts["a"] == "Keep this. Drop this.\n"  # the rejected edit is not tried again
    res = EditOptimizer().step(_inp({"a": "Only one sentence."}, {"a": [[(0, 18, 1.0)]]}))
    assert res.prompts["a"].startswith("Only one sentence.\n\n## Warning")  # nothing to remove: Warning bullets
    assert res.notes == ["a: Warning bullets (no sentence to remove)"]
