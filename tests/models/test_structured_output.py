"""Structured output: one way to ask for a shape (``GenerationSettings.output``), honoured by every
backend. The tiny random models are the strictest check of constrained decoding: left alone they
write noise, so every schema-valid reply below is the mask's doing."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentgrad import Agent, Tool, Trace
from agentgrad.blame.judge import Judge, judge_blame
from agentgrad.benchmarks.planted import episodes as E
from agentgrad.core.model import GenerationSettings, OutputSchema
from agentgrad.errors import OutputSchemaError
from agentgrad.models.fake import FakeModel
from agentgrad.models.hf import HFModel
from agentgrad.models.openai_compat import OpenAIModel
from agentgrad.models.serve import OpenAICompatServer
from agentgrad.optim.optimizer import rewrite_schema
from agentgrad.optim.targets import target_schema

MSGS = [{"role": "system", "content": "You answer in JSON."}, {"role": "user", "content": "Who made the mistake?"}]
VERDICT = OutputSchema(name="verdict", json_schema={
    "type": "object", "additionalProperties": False, "required": ["agent", "step", "reason"],
    "properties": {"agent": {"enum": ["planner", "coder"]}, "step": {"enum": [1, 2, 3]},
                   "reason": {"type": "string", "maxLength": 40}}})
SCHEMAS = [VERDICT, rewrite_schema(["facts", "answer"], 60), target_schema(50),
           rewrite_schema(["facts"], 80, protected={"facts": ["NEVER (ever) invent.", 'Say "no".']}),
           OutputSchema(regex=r"[0-9]{3}-[a-z]{2}"), OutputSchema(choices=["YES", "NO", "MAYBE NOT"])]


@pytest.fixture(scope="module")
def tiny(tiny_llama):
    return HFModel(path=str(tiny_llama))


def test_an_output_schema_is_exactly_one_shape_and_parses_replies():
    with pytest.raises(ValueError, match="exactly one"):
        OutputSchema(regex="a", choices=["a"])
    with pytest.raises(ValueError, match="exactly one"):
        OutputSchema()
    assert VERDICT.parse('{"agent": "coder", "step": 2, "reason": "x"}')["step"] == 2
    assert VERDICT.parse('Here:\n```json\n{"agent": "coder", "step": 2, "reason": "x"}\n```') == {
        "agent": "coder", "step": 2, "reason": "x"}  # an unconstrained reply wrapped in prose
    for bad, why in [('{"agent": "nobody", "step": 2, "reason": ""}', "agent: 'nobody' is not one of"),
                     ('{"agent": "coder", "step": 9, "reason": ""}', "step: 9 is not one of"),
                     ("no json", "not JSON")]:
        with pytest.raises(OutputSchemaError, match=why):
            VERDICT.parse(bad)
    assert OutputSchema(choices=["YES", "NO"]).parse(" NO\n") == "NO"
    with pytest.raises(OutputSchemaError, match="does not match"):
        OutputSchema(regex="[0-9]+").parse("12a")
    s = GenerationSettings()
    assert "output" not in s.record() and s.with_output(VERDICT).record()["output"]["name"] == "verdict"


def test_a_schema_no_backend_can_use_is_a_one_line_error(tiny):
    bad = [OutputSchema(json_schema={"type": "banana"}), OutputSchema(regex="a(")]
    for schema in bad:
        for model in (tiny, FakeModel(["x"])):
            with pytest.raises(OutputSchemaError) as e:
                model.generate(MSGS, None, GenerationSettings(output=schema))
            assert "\n" not in str(e.value)
    # valid JSON Schema that llguidance cannot compile (a reference to nothing): one line from the hf backend
    with pytest.raises(OutputSchemaError, match="cannot be compiled") as e:
        tiny.generate(MSGS, None, GenerationSettings(output=OutputSchema(json_schema={"$ref": "#/$defs/nothing"})))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.name + "-" + s.kind)
def test_the_hf_backend_replies_only_in_the_shape(tiny, schema):
    for temperature in (0.0, 0.9):  # greedy (continuously batched) and seeded sampling (generate)
        gen = tiny.generate(MSGS, None, GenerationSettings(temperature=temperature, max_new_tokens=300, output=schema))
        assert gen.constrained is True and gen.finish_reason == "stop", gen
        schema.parse(gen.text)  # raises if the reply left the shape


@pytest.mark.slow  # over 3 s alone on 2 cores: out of the fast subset
def test_constrained_and_free_rows_batched_give_the_replies_of_one_at_a_time(tiny):
    shapes = [VERDICT, SCHEMAS[2], SCHEMAS[5]]  # short shapes: none can run out of the token budget
    calls = [(f"Question {i}: who?", shapes[i % 3] if i % 2 else None) for i in range(8)]

    def one(call):
        text, schema = call
        msgs = [{"role": "user", "content": text}]
        return tiny.generate(msgs, None, GenerationSettings(max_new_tokens=150, output=schema)).text

    alone = [one(c) for c in calls]
    tiny.batcher.peak_rows = 0
    with ThreadPoolExecutor(8) as ex:
        together = list(ex.map(one, calls))
    assert tiny.batcher.peak_rows > 1  # they really shared the batch
    assert together == alone
    for (text, schema), reply in zip(calls, together):
        if schema is not None:
            schema.parse(reply)
    # the padded-generate path (no continuous batching) masks per row the same way
    batcher, tiny.batcher = tiny.batcher, None
    try:
        with ThreadPoolExecutor(8) as ex:
            padded = list(ex.map(one, calls))
    finally:
        tiny.batcher = batcher
    for (text, schema), reply in zip(calls, padded):
        if schema is not None:
            schema.parse(reply)


def test_the_fake_backend_checks_its_script_against_the_schema():
    ok = FakeModel(['{"agent": "coder", "step": 1, "reason": ""}'])
    assert ok.generate(MSGS, None, GenerationSettings(output=VERDICT)).constrained is True
    with pytest.raises(OutputSchemaError, match="scripted reply breaks output schema 'verdict'"):
        FakeModel(["coder, step 1"]).generate(MSGS, None, GenerationSettings(output=VERDICT))
    loose = FakeModel(["coder, step 1"], structured=False)  # plays a backend without structured output
    assert loose.generate(MSGS, None, GenerationSettings(output=VERDICT)).constrained is False
    assert FakeModel(["free"]).generate(MSGS, None, GenerationSettings()).constrained is None


def test_the_openai_backend_sends_response_format_and_falls_back_where_refused(tiny_llama):
    reply = '{"agent": "coder", "step": 1, "reason": "it wrote it"}'
    with OpenAICompatServer(FakeModel([reply], cycle=True)) as srv:
        model = OpenAIModel(name="m", model="tiny", base_url=srv.base_url)
        gen = model.generate(MSGS, None, GenerationSettings(output=VERDICT))
        sent = srv.bodies[-1]["response_format"]
        assert sent["type"] == "json_schema" and sent["json_schema"]["schema"] == VERDICT.json_schema
        assert sent["json_schema"]["strict"] is True and gen.constrained is True and model.stats["constrained"] == 1
        assert "response_format" not in model._request(MSGS, None, GenerationSettings())  # free text: none sent
    # a server without structured output: json_schema, then json_object, refused; the reply comes unconstrained
    # and counted, and later calls send no schema at all
    with OpenAICompatServer(FakeModel([reply], cycle=True), structured=False) as srv:
        model = OpenAIModel(name="m", model="tiny", base_url=srv.base_url)
        gen = model.generate(MSGS, None, GenerationSettings(output=VERDICT))
        assert gen.constrained is False and VERDICT.parse(gen.text)["agent"] == "coder"
        assert model.stats == {"constrained": 0, "unconstrained": 1, "schema_rejected": 2}
        assert [("response_format" in b) for b in srv.bodies] == [False]  # only the last form was answered
        model.generate(MSGS, None, GenerationSettings(output=VERDICT))
        assert model.stats["schema_rejected"] == 2 and model.stats["unconstrained"] == 2
    # llama-cpp-python's form, and a served local model that decodes under the schema
    with OpenAICompatServer(HFModel(path=str(tiny_llama))) as srv:
        model = OpenAIModel(name="m", model="tiny", base_url=srv.base_url, schema_format="json_object")
        gen = model.generate(MSGS, None, GenerationSettings(max_new_tokens=200, output=VERDICT))
        assert srv.bodies[-1]["response_format"] == {"type": "json_object", "schema": VERDICT.json_schema}
        assert VERDICT.parse(gen.text)["agent"] in ("planner", "coder")


def _lookup_tool() -> Tool:
    tool = Tool.from_function(lambda city: f"Hilton in {city}", name="lookup")
    tool.parameters = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": False}
    tool.description = "Find a hotel in a city."
    return tool


def test_tool_calls_on_a_template_without_tools_become_one_constrained_json_reply(tiny_llama):
    """A ChatML template that drops tools (as SmolLM2's does): the tools go into the system message
    and the reply is a JSON tool call or answer, parsed back into tool calls."""
    model = HFModel(path=str(tiny_llama))
    model.tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    assert not model.template_has_tools()
    tool = _lookup_tool()
    for seed in range(4):  # random weights: some seeds call the tool, some answer; all are well-formed
        with Trace() as tr:
            Agent("w", "Use tools.", model, tools=[tool], max_tool_rounds=1,
                  settings=GenerationSettings(max_new_tokens=120, temperature=0.9, seed=seed))("Find a hotel")
        first = tr.calls()[0]
        raw = json.loads(first.meta.get("raw") or json.dumps({"content": first.text}))
        assert ("tool_calls" in raw) != ("content" in raw)
        for c in first.tool_calls:
            assert c.name == "lookup" and set(c.arguments) == {"city"}
        assert "tool_calls" in raw or first.text == raw["content"]
    # over an OpenAI-compatible server (ChatML on llama.cpp): tool_calls: schema
    replies = iter(['{"tool_calls": [{"name": "lookup", "arguments": {"city": "Paris"}}]}', '{"content": "Hilton."}'])

    def responder(messages, tools):
        assert tools is None and "# Tools" in messages[0]["content"] and "lookup" in messages[0]["content"]
        return next(replies)

    with OpenAICompatServer(FakeModel(responder=responder)) as srv:
        remote = OpenAIModel(name="m", model="tiny", base_url=srv.base_url, tool_calls="schema")
        with Trace() as tr:
            out = Agent("w", "Use tools.", remote, tools=[tool])(tr.input("Find a hotel in Paris"))
        assert srv.bodies[0]["response_format"]["json_schema"]["name"] == "tool_reply"
        assert "Result of tool lookup" in srv.bodies[1]["messages"][-1]["content"]  # the result as text
    assert str(out) == "Hilton." and [n.kind for n in tr] == ["input", "call", "tool", "call"]
    assert tr[1].tool_calls[0].arguments == {"city": "Paris"} and tr[2].text == "Hilton in Paris"


@pytest.mark.parametrize("protocol", ["all_at_once", "step_by_step", "binary_search", "hybrid"])
def test_a_random_model_as_judge_always_gives_a_verdict(tiny, protocol):
    """Constrained, even a model of random weights names one of the log's agents and steps: the
    judge's figures measure judgment (here: none), not parsing."""
    for seed in range(2):
        ep = E.generate("chain", "wrong_value", seed)
        judge = Judge(tiny, max_new_tokens=120)
        ranking = judge_blame(judge, E.without_truth(ep.trace), ep.loss, protocol)
        steps = ep.trace.upstream(ep.loss.targets[0])
        assert ranking and ranking[0][0] in steps and judge.unparsed == 0 and judge.reasked == 0
        assert judge.unconstrained == 0


def test_the_rewrite_and_target_shapes_fit_the_token_budget():
    """A small model constrained to a string writes on until the token budget cuts its reply: the
    prompts' and the target's length caps follow max_new_tokens (at one character a token, the worst case:
    SmolLM2 degenerating into digits or "1.1.1" writes exactly that)."""
    props = rewrite_schema(["a", "b"], 8000, 256).json_schema["properties"]["prompts"]
    assert props["required"] == ["a", "b"] and props["additionalProperties"] is False
    assert props["properties"]["a"]["maxLength"] == (256 - 8 - 32) // 2
    assert rewrite_schema(["a"], 100, 4096).json_schema["properties"]["prompts"]["properties"]["a"]["maxLength"] == 100
    assert target_schema(4000, 200).json_schema["properties"]["target"]["maxLength"] == 200 - 16


def test_the_rewrite_shape_keeps_the_protected_spans_in_their_order():
    spans = ["Say (only) $1.", 'No "quotes"\nhere.']
    schema = rewrite_schema(["a", "b"], 100, protected={"a": spans})
    schema.parse(json.dumps({"prompts": {"a": 'Be brief. Say (only) $1. Then: No "quotes"\nhere. End.', "b": "B."}}))
    for dropped_or_swapped in ("Be brief. Say (only) $1.", 'No "quotes"\nhere. Say (only) $1.', "Say only $1. " + spans[1]):
        with pytest.raises(OutputSchemaError):
            schema.parse(json.dumps({"prompts": {"a": dropped_or_swapped, "b": "B."}}))
    assert "pattern" not in schema.json_schema["properties"]["prompts"]["properties"]["b"]
    # spans longer than the cap: the cap gives way, never an unsatisfiable shape
    assert rewrite_schema(["a"], 10, protected={"a": spans}).json_schema["properties"]["prompts"]["properties"]["a"][
        "maxLength"] == len(spans[0]) + len(spans[1]) + 2


def test_the_optimizer_asks_for_the_protected_spans_and_a_structured_backend_cannot_drop_them():
    from agentgrad.core.agent import Prompt
    from agentgrad.optim.optimizer import PromptOptimizer, StepInput

    inp = StepInput(prompts={"facts": Prompt("B first. List facts. A later.", ("A later.", "B first.")),
                             "answer": Prompt("Answer.")}, tools={}, blamed=["facts"], feedback="...")
    seen = []
    model = FakeModel(responder=lambda msgs, tools: '{"prompts": {"facts": "List facts."}}')
    real = model.generate
    model.generate = lambda m, t, st: (seen.append(st.output), real(m, t, st))[1]
    res = PromptOptimizer(model, max_attempts=1).step(inp)
    pattern = seen[0].json_schema["properties"]["prompts"]["properties"]["facts"]["pattern"]
    assert pattern == r"^[\s\S]*B first\.[\s\S]*A later\.[\s\S]*$"  # in the order they stand in the prompt
    assert res.skipped and "breaks output schema" in res.errors[0]  # the reply that drops them cannot be decoded


def test_a_server_is_not_given_string_bounds_its_grammar_cannot_hold():
    """llama.cpp writes maxLength n as n nested rules and its server dies past a few hundred (the LLM
    optimizer's prompt bound, 1,128, gave SIGSEGV): long bounds are left out of what is sent, short
    ones kept, and the reply is still checked against the whole schema."""
    schema = rewrite_schema(["facts"], 1128)
    model = OpenAIModel(name="m", model="tiny", base_url="http://127.0.0.1:9/v1", schema_format="json_object")
    sent = model._request(MSGS, None, GenerationSettings(output=schema))["response_format"]["schema"]
    facts = sent["properties"]["prompts"]["properties"]["facts"]
    assert "maxLength" not in facts and facts["minLength"] == 1
    assert schema.json_schema["properties"]["prompts"]["properties"]["facts"]["maxLength"] > 256  # not mutated
    short = model._request(MSGS, None, GenerationSettings(output=VERDICT))["response_format"]["schema"]
    assert short == VERDICT.json_schema  # the verdict's 200-character reason bound is kept
    with pytest.raises(OutputSchemaError):
        schema.parse(json.dumps({"prompts": {"facts": "x" * 5000}}))
    # a pattern goes to a json_schema server (hosted: applied to the string's value), not to llama-cpp-python's
    # json_object grammar (applied to the raw JSON text: a wildcard there writes bare quotes and newlines)
    kept = rewrite_schema(["facts"], 100, protected={"facts": ["NEVER invent."]})
    for fmt, has in (("json_object", False), ("json_schema", True)):
        model = OpenAIModel(name="m", model="tiny", base_url="http://127.0.0.1:9/v1", schema_format=fmt)
        rf = model._request(MSGS, None, GenerationSettings(output=kept))["response_format"]
        sent = rf["schema"] if fmt == "json_object" else rf["json_schema"]["schema"]
        assert ("pattern" in sent["properties"]["prompts"]["properties"]["facts"]) is has
