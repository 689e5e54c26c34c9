import json

import pytest

from agentgrad import Text, Trace, TraceError
from agentgrad.core.trace import Node, Span


def test_text_keeps_provenance_through_concat_join_and_format():
    a, b = Text("alpha", source=1), Text("beta", source=2)
    t = "x " + a + " / " + b
    assert str(t) == "x alpha / beta"
    assert t.spans() == [(1, 2, 7), (2, 10, 14)]
    j = Text.join(", ", [a, "lit", b])
    assert str(j) == "alpha, lit, beta"
    assert j.spans() == [(1, 0, 5), (2, 12, 16)]
    f = Text.format("Q: {q}\nA: {0}", b, q=a)
    assert str(f) == "Q: alpha\nA: beta"
    for src, s, e in f.spans():
        assert str(f)[s:e] == {1: "alpha", 2: "beta"}[src]
    assert f.sources == [1, 2]
    assert a.upper() == "ALPHA" and isinstance(a.upper(), str)  # str methods drop provenance


def test_text_format_rejects_format_specs():
    with pytest.raises(ValueError):
        Text.format("{x!r}", x="a")


def test_trace_roundtrip(tmp_path):
    tr = Trace(id="ep1", meta={"k": 1})
    q = tr.input("hello", name="question")
    tr.add(
        Node(
            id=-1,
            kind="call",
            name="a",
            text="out",
            messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "Q: hello"}],
            spans=[Span(q.sources[0], 1, 3, 8)],
            parents=[0],
        )
    )
    p = tr.save(tmp_path / "t.json")
    back = Trace.load(p)
    assert back.to_dict() == tr.to_dict()
    d = json.loads(p.read_text())
    assert d["schema_version"] == 1
    node = d["nodes"][1]
    assert node["kind"] == "call" and node["agent"] == "a"
    assert node["output"] == {"text": "out", "tool_calls": []}
    assert node["spans"] == [{"source": 0, "message": 1, "start": 3, "end": 8}]


def test_trace_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError, match="not valid JSON"):
        Trace.load(bad)
    tr = Trace()
    tr.input("x")
    d = tr.to_dict()
    d["schema_version"] = 99
    (tmp_path / "v.json").write_text(json.dumps(d))
    with pytest.raises(TraceError, match="schema version 99"):
        Trace.load(tmp_path / "v.json")
    with pytest.raises(TraceError, match="does not exist"):
        Trace.load(tmp_path / "missing.json")
    d["schema_version"] = 1
    d["nodes"].append({"id": 1, "kind": "call", "messages": [{"role": "user", "content": "ab"}],
                       "spans": [{"source": 0, "message": 0, "start": 1, "end": 5}]})
    (tmp_path / "s.json").write_text(json.dumps(d))
    with pytest.raises(TraceError, match="outside its message"):
        Trace.load(tmp_path / "s.json")
