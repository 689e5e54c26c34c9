"""Span rows as observability tools export them: flat rows with nested ``child_spans`` and nested
attributes, Phoenix's spans dataframe (``context.span_id``, ``attributes.*``) as JSONL and parquet.
The real LangGraph and Agents SDK exports the suite keeps (OTLP) are written in each shape: every
shape gives the same traces. Hostile files get one line each."""

from __future__ import annotations

import json

import pytest

from agentgrad.cli import main
from agentgrad.importers.otlp import read_otlp
from agentgrad.importers.rows import flatten
from agentgrad.importers.spans import import_file
from conftest import ROOT

APPS = ROOT / "records" / "team-verdict-apps"


def nested(flat: dict) -> dict:
    """OTLP's flat attribute keys as the nested objects a store keeps (``a.b.0.c`` -> ``{"a": {"b": [{"c": }]}}``)."""
    out: dict = {}
    for k, v in flat.items():
        cur = out
        *head, last = k.split(".")
        for p in head:
            cur = cur.setdefault(p, {})
        cur[last] = v

    def lists(x):
        if isinstance(x, dict):
            if x and all(k.isdigit() for k in x):
                return [lists(x[k]) for k in sorted(x, key=int)]
            return {k: lists(v) for k, v in x.items()}
        return x
    return lists(out)


def as_flat_rows(spans) -> list[dict]:
    """One trace object a line, its root spans holding their children (``child_spans``)."""
    by_trace: dict = {}
    for sp in spans:
        by_trace.setdefault(sp.trace_id, []).append(sp)
    out = []
    for tid, mine in by_trace.items():
        kids: dict = {}
        for s in mine:
            kids.setdefault(s.parent, []).append(s)

        def row(s):
            return {"trace_id": tid, "span_id": s.span_id, "parent_span_id": s.parent, "span_name": s.name,
                    "timestamp": s.start, "span_attributes": nested(s.attrs),
                    "child_spans": [row(c) for c in kids.get(s.span_id, [])]}
        out.append({"trace_id": tid, "spans": [row(s) for s in kids.get("", [])]})
    return out


def as_phoenix(spans) -> list[dict]:
    """Phoenix's spans dataframe: one row a span, its attributes as ``attributes.*`` columns."""
    return [{"context.span_id": s.span_id, "context.trace_id": s.trace_id, "parent_id": s.parent or None,
             "name": s.name, "start_time": s.start, **{f"attributes.{k}": v for k, v in s.attrs.items()}}
            for s in spans]


@pytest.mark.parametrize("app", ["langgraph", "agents-sdk"])
def test_every_export_shape_gives_the_otlp_files_traces(tmp_path, app):
    src = APPS / app / "spans.jsonl"
    spans, _ = read_otlp(src)
    want = {t.id: t.to_dict() for t in import_file(src).traces}
    assert len(want) == 20
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in as_flat_rows(spans)))
    phoenix = tmp_path / "phoenix.jsonl"
    phoenix.write_text("".join(json.dumps(r) + "\n" for r in as_phoenix(spans)))
    one = tmp_path / "one-trace.json"  # a single trace object, parents by id (no nesting), pretty-printed
    one.write_text(json.dumps({"spans": [{"trace_id": s.trace_id, "span_id": s.span_id, "parent_span_id": s.parent,
                                          "span_name": s.name, "timestamp": s.start, "span_attributes": s.attrs}
                                         for s in spans if s.trace_id == spans[0].trace_id]}, indent=1))
    files = [rows, phoenix]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:  # the parquet extra; .ci/run installs it
        pytest.fail(f"pyarrow is missing ({e}): pip install -e '.[parquet]'") if __import__("os").environ.get(
            "AGENTGRAD_REQUIRE_DATA") == "1" else None
    else:  # the dataframe written with to_parquet: a column per attribute, null where a span has none
        rows = as_phoenix(spans)
        columns = list(dict.fromkeys(k for r in rows for k in r))  # as a dataframe has them: every span's
        pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in columns} for r in rows]), tmp_path / "phoenix.parquet")
        files.append(tmp_path / "phoenix.parquet")
    for f in files:
        res = import_file(f)
        assert not res.broken and {t.id: t.to_dict() for t in res.traces} == want, f.name
    res = import_file(one)
    assert [t.to_dict() for t in res.traces] == [want[spans[0].trace_id]]


def test_nested_attributes_flatten_to_otlp_keys():
    assert flatten({"llm": {"input_messages": [{"message": {"role": "user", "content": "hi"}}]}}) == {
        "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "hi"}
    assert flatten({"llm.input_messages": [{"message.role": "user"}], "tags": ["a", "b"]}) == {
        "llm.input_messages.0.message.role": "user", "tags": ["a", "b"]}
    assert flatten({"metadata": {"langgraph_node": "researcher"}}) == {"metadata": '{"langgraph_node": "researcher"}'}


def _row(sid, parent, tid="t1", **attrs):
    return {"trace_id": tid, "span_id": sid, "parent_span_id": parent, "span_name": "x", "timestamp": 1,
            "span_attributes": {"openinference.span.kind": "LLM", **attrs}}


@pytest.mark.parametrize("text, words", [
    ('{"spans": [{"span_id": "a", "trace_id": "t", "span_name": "x"', "not JSON"),  # cut short
    (json.dumps({"spans": [_row("a", "b"), _row("b", "a")]}), "cycle"),
    (json.dumps({"spans": [_row("a", "zz")]}), "not in the file"),
    (json.dumps({"spans": [_row("a", ""), {"span_name": "no ids"}]}), "needs a span id"),
    (json.dumps({"rows": [1, 2]}), "is not a trace agentgrad reads"),
])
def test_hostile_span_rows_get_one_line_each(tmp_path, capsys, text, words):
    f = tmp_path / "rows.json"
    f.write_text(text)
    out = tmp_path / "B"
    assert main(["blame", str(f), "--loss", "wrong", "--method", "provenance", "--out", str(out)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
    assert not out.exists()


def test_an_errored_tool_span_is_where_loss_auto_puts_the_loss(tmp_path):
    """Phoenix rows of a real export with one tool span's status set to ERROR: the tool node records
    the error, and the trace's own loss lands on the call that asked for that tool."""
    from agentgrad.blame.losses import trace_loss

    spans, _ = read_otlp(APPS / "agents-sdk" / "spans.jsonl")
    mine = [s for s in spans if s.trace_id == spans[0].trace_id]
    rows = as_phoenix(mine)
    tool = next(r for r in rows if r["name"] == "lookup_invoice")  # the billing agent's tool
    tool.update(status_code="ERROR", status_message="invoice service unavailable")
    f = tmp_path / "phoenix.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tr = import_file(f).traces[0]
    node = next(n for n in tr.nodes if n.meta.get("span_id") == tool["context.span_id"])
    assert node.kind == "tool" and node.meta["error"] == "invoice service unavailable"
    loss = trace_loss(tr)
    callers = [p for p in node.parents if tr.nodes[p].kind == "call"]
    assert callers and loss.targets == callers[:1] and tr.nodes[callers[0]].name == "billing"
    assert "invoice service unavailable" in loss.text


def test_a_model_call_outside_every_agent_is_the_harness(tmp_path):
    """An LLM span under no agent (an app formatting the final answer itself) is the harness, not an
    agent named after the Python method its span is named after."""
    def llm(sid, parent, ask, say):
        return {"trace_id": "t", "span_id": sid, "parent_span_id": parent, "span_name": "LiteLLMModel.__call__",
                "timestamp": int(sid), "span_attributes": {
                    "openinference.span.kind": "LLM", "llm.input_messages.0.message.role": "user",
                    "llm.input_messages.0.message.content": ask, "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": say}}
    rows = [{"trace_id": "t", "span_id": "1", "span_name": "researcher.run", "timestamp": 1,
             "span_attributes": {"openinference.span.kind": "AGENT"}},
            llm("2", "1", "Find the population of Lyon.", "Lyon has 522,969 inhabitants."),
            llm("3", "", "Format this answer: Lyon has 522,969 inhabitants.", "522,969")]
    f = tmp_path / "rows.json"
    f.write_text(json.dumps({"spans": rows}))
    tr = import_file(f).traces[0]
    assert [c.name for c in tr.calls()] == ["researcher", "harness"]
    assert tr.calls()[0].id in tr.calls()[1].parents  # the answer it formats is the researcher's
