import asyncio

import pytest

from agentgrad import Agent, ConfigError, Prompt, System, Tool, Trace
from agentgrad.models.fake import FakeModel
from conftest import assert_spans_exact


class Pipeline(System):
    def __init__(self, model):
        self.a = Agent("a", "Extract facts.", model)
        self.b = Agent("b", "Plan.", model)
        self.c = Agent("c", "Answer.", model, template="Facts: {facts}\nPlan: {plan}")

    def forward(self, question):
        return self.c(facts=self.a(question), plan=self.b(question))


def test_calls_record_exact_spans_and_parents():
    model = FakeModel(["fact one", "plan two", "final"])
    ep = Pipeline(model).run({"question": "What?", "unused": "ignored"})
    tr = ep.trace
    assert [n.kind for n in tr] == ["input", "call", "call", "call"]
    assert str(ep.output) == "final" and ep.output.node == 3
    c = tr[3]
    assert c.messages[1]["content"] == "Facts: fact one\nPlan: plan two"
    assert [(s.source, s.start, s.end) for s in c.spans] == [(1, 7, 15), (2, 22, 30)]
    assert c.parents == [1, 2]
    assert tr[1].parents == [0] and tr[1].messages[0] == {"role": "system", "content": "Extract facts."}
    assert assert_spans_exact(tr) == 4
    assert model.requests[2][1]["content"] == "Facts: fact one\nPlan: plan two"


def test_default_layout_labels_several_inputs():
    model = FakeModel(["x", "y"])
    with Trace() as tr:
        q = tr.input("Q?", name="question")
        a = Agent("a", "p", model)(q)
        Agent("b", "p", model)(q, a)
    assert tr[2].messages[1]["content"] == "question:\nQ?\n\na:\nx"
    assert_spans_exact(tr)


def lookup(city: str, limit: int = 3) -> dict:
    """Find hotels in a city."""
    if city == "boom":
        raise RuntimeError("database down")
    return {"city": city, "hotels": ["h1", "h2"][:limit]}


def test_tool_loop_records_tool_nodes_and_result_spans():
    tool = Tool.from_function(lookup)
    assert tool.parameters["required"] == ["city"]
    model = FakeModel(
        [
            {"text": "let me look", "tool_calls": [{"name": "lookup", "arguments": {"city": "Cambridge"}}]},
            {"tool_calls": [{"name": "lookup", "arguments": {"city": "boom"}}, {"name": "nope", "arguments": {}}]},
            {"tool_calls": [{"name": "lookup", "arguments": {}}]},
            "done",
        ]
    )
    with Trace() as tr:
        q = tr.input("find a hotel")
        out = Agent("w", "Use tools.", model, tools=[tool])(q)
    kinds = [n.kind for n in tr]
    assert kinds == ["input", "call", "tool", "call", "tool", "tool", "call", "tool", "call"]
    assert str(out) == "done" and out.calls == [1, 3, 6, 8]
    assert tr[2].text == '{"city": "Cambridge", "hotels": ["h1", "h2"]}' and tr[2].parents == [1]
    assert tr[4].text == "Error: RuntimeError: database down"
    assert tr[5].text.startswith("Error: unknown tool 'nope'")
    assert tr[7].text == "Error: lookup is missing required argument(s): city"
    last = tr[8]
    roles = [m["role"] for m in last.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "tool", "assistant", "tool"]
    assert last.messages[2]["tool_calls"][0]["arguments"] == {"city": "Cambridge"}
    assert {s.source for s in last.spans} == {0, 1, 2, 3, 4, 5, 6, 7}
    assert last.tools[0]["function"]["name"] == "lookup"
    assert_spans_exact(tr)


def test_max_tool_rounds_stops_the_loop():
    model = FakeModel([{"tool_calls": [{"name": "lookup", "arguments": {"city": "c"}}]}], cycle=True)
    with Trace() as tr:
        out = Agent("w", "p", model, tools=[Tool.from_function(lookup)], max_tool_rounds=2)("go")
    assert len(out.calls) == 3
    assert tr[out.node].meta["stopped"] == "max_tool_rounds"


def test_ending_tool_stops_episode():
    end = Tool("transfer", "to a human", {"type": "object", "properties": {}}, lambda: "Transferred", ends_episode=True)
    model = FakeModel([{"tool_calls": [{"name": "transfer", "arguments": {}}]}, "never"])
    with Trace() as tr:
        out = Agent("w", "p", model, tools=[end])("help")
    assert out.ended and tr.meta["ended_by"]["agent"] == "w"
    assert len(model._queue) == 1


def test_parallel_workers_with_asyncio_keep_provenance():
    class Par(System):
        def __init__(self, model):
            self.workers = [Agent(f"w{i}", f"worker {i}", model) for i in range(3)]
            self.r = Agent("r", "respond", model)

        async def aforward(self, question):
            outs = await asyncio.gather(*(w.acall(question) for w in self.workers))
            return await self.r.acall(*outs)

    model = FakeModel(responder=lambda msgs, tools: "reply to " + msgs[0]["content"])
    ep = Par(model).run({"question": "Q"})
    tr = ep.trace
    assert sorted(n.name for n in tr.calls()) == ["r", "w0", "w1", "w2"]
    r = tr.calls("r")[0]
    assert len(r.parents) == 3 and all(tr[p].name.startswith("w") for p in r.parents)
    assert_spans_exact(tr)
    assert set(Par(model).agents()) == {"w0", "w1", "w2", "r"}


def test_multi_turn_history_links_earlier_turns():
    model = FakeModel(responder=lambda msgs, tools: f"reply {len(msgs)}")

    class Chat(System):
        def __init__(self):
            self.bot = Agent("bot", "chat", model)

        def forward(self, history):
            return self.bot.chat([("user" if i % 2 == 0 else "assistant", h) for i, h in enumerate(history)])

    chat = Chat()
    with Trace() as tr:
        history = []
        for turn in ["hi", "book a table", "thanks"]:
            history.append(tr.input(turn, name="user"))
            history.append(chat.forward(history=list(history)))
    last = tr.calls()[-1]
    assert len(last.messages) == 6  # system + 5 turns
    sources = {tr[s.source].kind for s in last.spans}
    assert sources == {"input", "call"}  # earlier replies feed later turns
    assert_spans_exact(tr)


def test_prompt_protected_spans():
    p = Prompt("Be brief. NEVER invent data.", protected=("NEVER invent data.",))
    assert p.missing_protected("Be brief.") == ["NEVER invent data."]
    with pytest.raises(ConfigError):
        p.replace("Be brief.")
    assert str(p.replace("Be very brief. NEVER invent data.")).startswith("Be very")
    with pytest.raises(ConfigError):
        Prompt("abc", protected=("xyz",))


def test_fake_model_runs_out_clearly():
    from agentgrad import ModelError

    with pytest.raises(ModelError, match="ran out"):
        Agent("a", "p", FakeModel([]))("x")
