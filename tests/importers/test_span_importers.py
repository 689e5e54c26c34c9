"""Span importers (OpenInference, OTel GenAI) on spans written by hand, ``agentgrad blame`` on them, and bad input.

The real framework apps are in test_framework_apps.py; these are the fast checks of every rule.
"""

import json

import pytest

import agentgrad as ag
from agentgrad.cli import main
from agentgrad.errors import ConfigError
from agentgrad.importers import import_file, import_openinference, import_otel, import_spans
from agentgrad.importers.overlap import Produced
from agentgrad.testing.oispans import SpanWriter, flatten_messages, supervisor_episode, synthetic_export
from conftest import ROOT, assert_spans_exact


def _write(path, doc):
    path.write_text(json.dumps(doc))
    return path


def _handoff_export():
    """An Agents-SDK-shaped trace: a root, two AGENT spans joined by a handoff, tool calls with ids."""
    w = SpanWriter()
    t = "T"
    root = w.span(t, "", "Agent workflow", {"openinference.span.kind": "AGENT"})
    a = w.span(t, root, "triage", {"openinference.span.kind": "AGENT", "agent.name": "triage", "graph.node.id": "triage"})
    q = "How much do I owe on invoice INV-1?"
    w.llm(t, a, [{"role": "system", "content": "You triage."}, {"role": "user", "content": q}], "",
          tool_calls=[{"id": "h1", "name": "transfer_to_billing", "arguments": {}}])
    w.span(t, a, "handoff to billing", {"openinference.span.kind": "TOOL", "input.value": "triage",
                                         "output.value": "billing"})
    b = w.span(t, root, "billing", {"openinference.span.kind": "AGENT", "agent.name": "billing",
                                    "graph.node.id": "billing", "graph.node.parent_id": "triage"})
    hist = [{"role": "system", "content": "You bill."}, {"role": "user", "content": q},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "h1", "name": "transfer_to_billing", "arguments": {}}]},
            {"role": "tool", "content": '{"assistant": "billing"}', "tool_call_id": "h1"}]
    w.llm(t, b, hist, "", tool_calls=[{"id": "c1", "name": "lookup_invoice", "arguments": {"invoice_id": "INV-1"}}])
    w.tool(t, b, "lookup_invoice", {"invoice_id": "INV-1"}, "Invoice INV-1 is for $142.50.", **{"tool_call.id": "c1"})
    hist2 = hist + [{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "lookup_invoice",
                                                                         "arguments": {"invoice_id": "INV-1"}}]},
                    {"role": "tool", "contents": ["Invoice INV-1 is for $142.50."], "tool_call_id": "c1"}]
    w.llm(t, b, hist2, "You owe $142.50 on Invoice INV-1 is for $142.50. Thanks.")
    return w.export()


def test_openinference_agents_handoffs_tools_and_exact_spans(tmp_path):
    res = import_openinference(_write(tmp_path / "s.json", _handoff_export()))
    assert res.broken == [] and len(res.traces) == 1
    tr = res.traces[0]
    tr.validate()
    assert [(n.kind, n.name) for n in tr.nodes] == [
        ("input", "user"), ("call", "triage"), ("input", "tool"), ("call", "billing"), ("tool", "lookup_invoice"),
        ("call", "billing")]
    q, triage, handoff_msg, b1, tool, b2 = tr.nodes
    assert triage.tool_calls[0].name == "transfer_to_billing" and triage.messages[0]["role"] == "system"
    # billing's first call: the question, the triage call (its repeated tool call, and the handoff edge)
    assert b1.parents == [q.id, triage.id, handoff_msg.id] and b1.tool_calls[0].arguments == {"invoice_id": "INV-1"}
    assert tool.parents == [b1.id] and tool.text == "Invoice INV-1 is for $142.50."  # by tool call id
    # the last call reads the tool result (a tool message given as contents) and quotes it inside its output
    assert b2.parents == [q.id, triage.id, handoff_msg.id, b1.id, tool.id]
    assert b2.messages[5] == {"role": "tool", "content": tool.text, "tool_call_id": "c1"}
    assert tr.meta["graph"] == {"triage": [], "billing": ["triage"]}
    assert assert_spans_exact(tr) == 1 + 2 + 3
    assert tr.meta["imported"] == "openinference" and b2.meta["attributes"]["openinference.span.kind"] == "LLM"


def test_overlap_finds_whole_outputs_at_word_boundaries_longest_first():
    p = Produced()
    p.add(0, "Paris")  # too short to be looked for inside a message
    p.add(1, "The population of Lyon is 522,250.")
    p.add(2, "The population of Lyon")
    content = "Tool: The population of Lyon is 522,250. Again The population of Lyonnais."
    spans = p.spans(content, 3)
    assert [(s.source, content[s.start:s.end]) for s in spans] == [(1, "The population of Lyon is 522,250.")]
    assert p.spans("Paris", 0)[0].source == 0  # a whole message is matched whatever its length
    p.add(3, "Paris")  # two nodes said the same: a history repeating it twice reads them in order
    assert p.whole(["Paris", "x", "Paris"]) == [0, None, 3] and p.whole(["Paris"]) == [3]


def test_a_synthetic_export_imports_every_call_tool_result_and_edge(tmp_path):
    doc, episodes = synthetic_export(12 * 5)
    res = import_otel(_write(tmp_path / "s.json", doc))
    assert res.broken == [] and len(res.traces) == len(episodes) == 5
    for tr, did in zip(res.traces, episodes):
        assert [(c.name, c.text) for c in tr.calls()] == did["calls"]
        assert [(n.name, n.text) for n in tr.nodes if n.kind == "tool"] == did["tools"]
        by = {n.text: n.id for n in tr.nodes}
        researcher, analyst = tr.calls("researcher")[0], tr.calls("analyst")[0]
        tool = next(n for n in tr.nodes if n.kind == "tool")
        assert tool.id in researcher.parents and tool.meta["agent"] == "researcher"  # the researcher read its tool
        assert analyst.parents == [researcher.id]  # the analyst read the researcher, inside its prompt
        final = tr.calls()[-1]
        assert {by[t] for a, t in did["calls"][:-1]} <= set(final.parents)  # the supervisor read every reply
        assert tr.nodes[0].text == did["question"] and assert_spans_exact(tr) > 0


def test_spans_of_one_trace_exported_one_per_line_are_one_trace(tmp_path):
    w = SpanWriter()
    supervisor_episode(w, "A" * 32, "Lyon", "522,250")
    lines = [json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [sp]}]}]}) for sp in reversed(w.spans)]
    f = tmp_path / "s.jsonl"
    f.write_text("\n".join(lines) + "\n")
    res = import_otel(f)
    assert len(res.traces) == 1 and len(res.traces[0].calls()) == 5 and res.broken == []
    assert res.traces[0].calls()[-1].parents == import_otel(_write(tmp_path / "one.json", w.export())).traces[0].calls()[-1].parents


def _genai_span(sid, parent, name, attrs, events=()):
    return {"traceId": "G", "spanId": sid, "parentSpanId": parent, "name": name, "startTimeUnixNano": sid[-1],
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
            "events": [{"name": n, "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in a.items()]}
                       for n, a in events]}


def test_genai_parts_tool_responses_content_on_events_and_agent_names(tmp_path):
    ask = {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}
    call = {"role": "assistant", "parts": [{"type": "tool_call", "id": "t1", "name": "weather", "arguments": {"city": "Paris"}}]}
    spans = [
        _genai_span("s1", "", "invoke_agent forecaster", {"gen_ai.operation.name": "invoke_agent",
                                                           "gen_ai.agent.name": "forecaster"}),
        _genai_span("s2", "s1", "chat", {"gen_ai.operation.name": "chat"}, events=[(
            "gen_ai.client.inference.operation.details",
            {"gen_ai.input.messages": json.dumps([ask]), "gen_ai.output.messages": json.dumps([call])})]),
        _genai_span("s3", "s1", "execute_tool weather", {"gen_ai.operation.name": "execute_tool",
                                                          "gen_ai.tool.name": "weather", "gen_ai.tool.call.id": "t1",
                                                          "gen_ai.tool.call.result": "Rain, 12 C."}),
        _genai_span("s4", "s1", "chat", {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([ask, call, {"role": "tool", "parts": [
                {"type": "tool_call_response", "id": "t1", "response": "Rain, 12 C."}]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "text", "content": "Rain in Paris: take an umbrella."}]}])}),
    ]
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    tr = import_otel(_write(tmp_path / "g.json", doc)).traces[0]
    assert [(n.kind, n.name) for n in tr.nodes] == [("input", "user"), ("call", "forecaster"), ("tool", "weather"),
                                                    ("call", "forecaster")]
    assert tr.nodes[1].tool_calls[0].arguments == {"city": "Paris"} and tr.nodes[2].parents == [1]
    assert tr.nodes[3].parents == [0, 1, 2] and tr.nodes[3].messages[2]["tool_call_id"] == "t1"
    assert assert_spans_exact(tr) == 1 + 2
    with pytest.raises(ConfigError, match="no span carries openinference.span.kind"):
        import_spans(tmp_path / "g.json", "openinference")


# --- bad input: one line each, nothing written --------------------------------------------------------
def _oi(spans):
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def _bad_files(tmp_path):
    w = SpanWriter()
    c = w.chain("T", "", "root")
    w.tool("T", c, "search", {}, "found")
    no_llm = w.export()
    w = SpanWriter()
    w.span("T", "b", "a", {"openinference.span.kind": "CHAIN"}, span_id="a")
    w.span("T", "a", "b", {"openinference.span.kind": "CHAIN"}, span_id="b")
    w.llm("T", "a", [{"role": "user", "content": "hi"}], "hello")
    cycle = w.export()
    w = SpanWriter()
    w.llm("T", "gone", [{"role": "user", "content": "hi"}], "hello")
    orphan = w.export()
    w = SpanWriter()
    w.span("T", "", "ChatOpenAI", {"openinference.span.kind": "LLM", "llm.model_name": "gpt",
                                   **flatten_messages("llm.output_messages", [{"role": "assistant", "content": "hi"}])})
    hidden = w.export()
    w = SpanWriter()
    w.llm("T", "", [{"role": "user", "content": "__REDACTED__"}], "hello")
    redacted = w.export()
    genai_hidden = _oi([_genai_span("s1", "", "chat", {"gen_ai.operation.name": "chat"})])
    trace = ag.Trace(id="x")
    trace.input("hi")
    files = {
        "no LLM span": (no_llm, "no LLM span"),
        "a cycle": (cycle, "the span tree has a cycle: a -> b -> a"),
        "a missing parent": (orphan, "names parent gone, which is not in the file"),
        "hidden inputs": (hidden, "records no input messages: the instrumentor hid it"),
        "redacted text": (redacted, "is __REDACTED__"),
        "genai without content": (genai_hidden, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"),
        "chat JSONL": ([{"role": "user", "content": "hi"}], "chat JSONL: use agentgrad import chat"),
        "an agentgrad trace": (trace.to_dict(), "it is an agentgrad trace"),
        "other JSON": ({"hello": 1}, "an OTLP JSON export holds 'resourceSpans'"),
    }
    return {k: (_write(tmp_path / f"{i}.json", doc), msg) for i, (k, (doc, msg)) in enumerate(files.items())}


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    for what, (f, msg) in _bad_files(tmp_path).items():
        out = tmp_path / f"out-{f.stem}"
        assert main(["import", "otel", str(f), "--out", str(out)]) != 0, what
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and msg in " ".join(err.split()), (what, err)
        assert not out.exists(), what
        if what in ("chat JSONL", "an agentgrad trace"):
            continue  # blame reads those (they are traces)
        assert main(["blame", str(f), "--loss", "wrong", "--method", "provenance", "--out", str(out)]) != 0, what
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error:"), (what, err)
        assert not out.exists(), what
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert main(["blame", str(empty), "--loss", "x", "--method", "provenance", "--out", str(tmp_path / "e")]) != 0
    assert "is not a trace agentgrad reads" in capsys.readouterr().err


def test_verbal_loss_from_words_targets_and_wrong_text():
    doc, _ = synthetic_export(12)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        tr = import_file(_write(Path(d) / "s.json", doc)).traces[0]
    loss = ag.verbal_loss(tr, "wrong figure", wrong="thousand")
    last = tr.calls()[-1]
    assert loss.targets == [last.id] and last.text[slice(*loss.spans[last.id][0])] == "thousand"
    assert ag.verbal_loss(tr, "x", target="researcher").targets == [tr.calls("researcher")[-1].id]
    for kw, msg in (({"wrong": "Madrid"}, "is not in the output"), ({"target": "nobody"}, "no agent 'nobody'"),
                    ({"target": 0}, "not a call node")):
        with pytest.raises(ConfigError, match=msg):
            ag.verbal_loss(tr, "x", **kw)


def test_blame_command_names_the_planted_tool_and_writes_the_report(tmp_path, capsys):
    w = SpanWriter()
    supervisor_episode(w, "P" * 32, "Lyon", "9,999,999")  # the researcher's tool returns a wrong figure
    f = _write(tmp_path / "spans.json", w.export())
    out = tmp_path / "B"
    assert main(["blame", str(f), "--loss", "the population is wrong", "--wrong", "9,999,999", "--method",
                 "provenance,last", "--out", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    rec = json.loads((out / "blame.json").read_text())
    rows = {r["method"]: r for r in rec["rows"]}
    assert rows["provenance"]["agent"] == "city_population" and rows["provenance"]["repair"] == ["researcher"]
    assert rows["last"]["agent"] == "supervisor" and "provenance" in printed and "report.html" in printed
    html = (out / "report.html").read_text()
    assert "Blame (best first, per method)" in html and "the population is wrong" in html
    assert "blamed city_population (provenance)" in html
    # an import, reported: a Summary and a verdict for every trace
    imp = tmp_path / "I"
    assert main(["import", "otel", str(f), "--out", str(imp)]) == 0
    assert main(["report", str(imp)]) == 0
    html = (imp / "report.html").read_text()
    assert "imported from" in html and "calls 5, agents supervisor, researcher, analyst, tools 1" in html


def test_blame_with_the_expected_answer_contrasts_the_produced_one(tmp_path, capsys, tiny_llama):
    """``--expected`` puts the right answer where the ``contrast`` objective differentiates it; a contrast
    method named without it (which would silently be the whole objective) is refused before a model loads."""
    from agentgrad.blame.outcome import blame_episode
    from agentgrad.runs.blame import blame_file

    w = SpanWriter()
    supervisor_episode(w, "P" * 32, "Lyon", "9,999,999")
    f = _write(tmp_path / "spans.json", w.export())
    out = tmp_path / "B"
    m = "gbc:max_l1:contrast:direct"
    assert main(["blame", str(f), "--loss", "wrong figure", "--method", m, "--scorer", str(tmp_path / "no-model"),
                 "--out", str(out)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--expected" in err and not out.exists()
    tr = import_file(f).traces[0]
    with pytest.raises(ConfigError, match="expected answer is empty"):
        ag.verbal_loss(tr, "x", expected=" ")
    with pytest.raises(ConfigError, match="right one"):  # the library refuses it too, before any model loads
        ag.blame(tr, ag.verbal_loss(tr, "wrong figure"), method=m)
    tb = blame_file(f, "wrong figure", wrong="9,999,999", expected="522,969", methods=[m, "gbc:max_l1:whole:direct"],
                    scorer=str(tiny_llama))
    assert tb.verbal.details["expected"] == "522,969" and tb.verbal.details["wrong"] == "9,999,999"
    # the same ranking as the loss built by hand with that answer; the method reads the answer it was given
    hand = ag.verbal_loss(tb.data, "wrong figure", wrong="9,999,999", expected="522,969", target="described")
    assert hand.to_dict() == tb.verbal.to_dict()
    assert tb.methods[m].ranking == blame_episode(m, tb.data, hand, tb.scorer).ranking
    # another right answer, another gradient at the loss's span
    from agentgrad.blame.context import BlameContext

    def weights(loss):
        with BlameContext(tb.data, loss, tb.scorer).objective_of("contrast") as c:
            return [s.l1 for s in c.attribute(loss.targets[0], None).sources]

    other = ag.verbal_loss(tb.data, "wrong figure", wrong="9,999,999", expected="Lyon is the capital")
    assert weights(hand) != weights(other)


def test_import_help_lists_every_format(capsys):
    assert main(["import", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for fmt in ("chat", "otel", "openinference", "whowhen"):
        assert fmt in text


SMOLAGENTS = ROOT / "tests" / "importers" / "data" / "smolagents_spans.jsonl"  # benchmarks/record_smolagents.py


def test_a_smolagents_team_is_read_with_its_agents_as_smolagents_names_them():
    """A real smolagents run (1.26.0, OpenInference's instrumentor, the OTLP file exporter): the
    CodeAgent manager and its managed ToolCallingAgent 'searcher' are the agents, never the model
    class's method the LLM spans are named after; the manager's final_answer is under its last call."""
    tr = import_file(SMOLAGENTS).traces[0]
    assert [c.name for c in tr.calls()] == ["CodeAgent", "searcher", "searcher", "CodeAgent"]
    tool = next(n for n in tr.nodes if n.kind == "tool" and n.name == "lookup_population")
    assert "9,999,999" in tool.text and tr.nodes[tool.parents[0]].name == "searcher"
    final = tr.calls()[-1]
    assert any(tr.nodes[p].name == "final_answer" and tr.nodes[p].kind == "tool" for p in final.parents)
    assert tr.nodes[-1].kind == "tool" and tr.nodes[-1].parents == [final.id]
    # the manager's code passed the searcher its task: that quoted part of its output is an edge (a
    # fragment of the output, not the whole), so the final output reaches back to every call
    from agentgrad.runs.blame import reach

    first = tr.calls()[1]
    quoted = [s for s in first.spans if s.source == tr.calls()[0].id]
    assert quoted and quoted[0].at > 0 and first.messages[quoted[0].message]["content"][
        quoted[0].start:quoted[0].end] == "Find the population of Lyon."
    assert reach(tr) == (4, 4)
    assert_spans_exact(tr)
