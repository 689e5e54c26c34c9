from pathlib import Path

import pytest
import yaml

from agentgrad import Agent, ModelError, Tool, Trace
from agentgrad.cli import main
from agentgrad.models.fake import FakeModel
from agentgrad.models.hf import HFModel
from agentgrad.models.openai_compat import OpenAIModel
from agentgrad.models.serve import OpenAICompatServer
from conftest import ROOT, assert_spans_exact

EXAMPLE = ROOT / "examples" / "pipeline"
FAST = dict(backoff_initial=0.01, backoff_max=0.05)


def test_native_tool_calls_over_http():
    def responder(messages, tools):
        if messages[-1]["role"] == "tool":
            return "The hotel is " + messages[-1]["content"]
        assert tools[0]["function"]["name"] == "lookup"
        return {"tool_calls": [{"name": "lookup", "arguments": {"city": "Cambridge"}}]}

    with OpenAICompatServer(FakeModel(responder=responder)) as srv:
        model = OpenAIModel(name="m", model="tiny", base_url=srv.base_url, **FAST)
        tool = Tool.from_function(lambda city: f"Hilton in {city}", name="lookup")
        tool.parameters = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        with Trace() as tr:
            out = Agent("w", "Use tools.", model, tools=[tool])(tr.input("find a hotel"))
    assert str(out) == "The hotel is Hilton in Cambridge"
    assert [n.kind for n in tr] == ["input", "call", "tool", "call"]
    assert tr[1].tool_calls[0].arguments == {"city": "Cambridge"}
    assert_spans_exact(tr)


async def _agen(model, msgs):
    from agentgrad import GenerationSettings

    return await model.agenerate(msgs, None, GenerationSettings())


def test_retries_then_clear_errors():
    import asyncio

    from agentgrad import GenerationSettings

    with OpenAICompatServer(FakeModel(["a"], cycle=True), fail_rate=1.0) as srv:
        model = OpenAIModel(name="m", model="tiny", base_url=srv.base_url, max_retries=2, **FAST)
        with pytest.raises(ModelError, match="failed after 3 attempt"):
            model.generate([{"role": "user", "content": "x"}], None, GenerationSettings())
        assert srv.stats["requests"] == 3
        with pytest.raises(ModelError, match="failed after 3 attempt"):
            asyncio.run(_agen(model, [{"role": "user", "content": "x"}]))
    # a server that is not there at all: tests/models/test_server_failfast.py
    with OpenAICompatServer(FakeModel([])) as srv:  # the script is empty: the server answers 400
        model = OpenAIModel(name="m", model="tiny", base_url=srv.base_url, **FAST)
        with pytest.raises(ModelError, match="refused the request"):
            model.generate([{"role": "user", "content": "x"}], None, GenerationSettings())


def test_pipeline_against_flaky_server_loses_no_input(tmp_path, tiny_llama, monkeypatch):
    """The example system, served by the tiny model over HTTP, with 30% of requests failing."""
    n_inputs = len((EXAMPLE / "inputs.jsonl").read_text().splitlines())
    with OpenAICompatServer(HFModel(path=str(tiny_llama)), fail_rate=0.3, seed=3) as srv:
        cfg = yaml.safe_load((EXAMPLE / "system.yaml").read_text())
        cfg["models"]["default"] = {"backend": "openai", "model": "tiny", "base_url": srv.base_url,
                                    "api_key": "sk-secret-do-not-write", **FAST}
        sys_yaml = tmp_path / "system.yaml"
        sys_yaml.write_text(yaml.safe_dump(cfg))
        out = tmp_path / "run"
        code = main(["run", str(sys_yaml), "--inputs", str(EXAMPLE / "inputs.jsonl"), "--out", str(out),
                     "--concurrency", "4"])
        stats = dict(srv.stats)
    assert code == 0
    assert stats["failed"] > 0 and stats["answered"] == 3 * n_inputs
    traces = sorted((out / "traces").glob("*.json"))
    assert len(traces) == n_inputs
    for p in traces:
        tr = Trace.load(p)
        assert len(tr.calls()) == 3 and "error" not in tr.meta
        assert tr.calls()[0].model["backend"] == "openai"
        assert assert_spans_exact(tr) == 4
    written = [f for f in out.rglob("*") if f.is_file()]
    assert len(written) >= n_inputs + 2  # the traces, config.yaml and events.jsonl at least
    for f in written:
        assert "sk-secret-do-not-write" not in f.read_text()
    # greedy over HTTP gives what the local model gives
    local = HFModel(path=str(tiny_llama))
    first = Trace.load(traces[0]).calls()[0]
    from agentgrad import GenerationSettings

    assert local.generate(first.messages, None, GenerationSettings(**first.settings)).text == first.text


def test_missing_key_without_base_url(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    from agentgrad import GenerationSettings

    with pytest.raises(ModelError, match="no API key; set OPENAI_API_KEY"):
        OpenAIModel(name="m", model="gpt").generate([{"role": "user", "content": "x"}], None, GenerationSettings())
