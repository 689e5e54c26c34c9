"""Fact readers: what a fact is in an agent's text (``key: value`` lines, prose sentences, JSON
fields), detected from the trace or chosen by the method's name, and named in the blame outcome."""

from __future__ import annotations

import importlib

import pytest

from agentgrad.benchmarks.planted import episodes as E
from agentgrad.blame.backward import VerbalLoss
from agentgrad.blame.facts import JSON, LINES, PROSE, detect_reader, get_reader
from agentgrad.blame.methods import DEFAULT_METHOD, canonical, fact_reader
from agentgrad.blame.outcome import blame_episode
from agentgrad.core.trace import Node, Trace, join_blocks
from agentgrad.errors import ConfigError, RegistryError


def _call(trace, name, sources, text):
    user, spans = join_blocks([(s, f"[from {trace.nodes[s].name}]\n", trace.nodes[s].text) for s in sources], 1)
    return trace.add(Node(id=-1, kind="call", name=name, text=text, parents=list(sources), spans=spans,
                          messages=[{"role": "system", "content": f"You are {name}."},
                                    {"role": "user", "content": user}])).id


class PeakScorer:
    """Gradients that peak where told: ``peaks[(call, source)] = (text in the source, height)``, every
    other token 0.1; every output token has log p -2 (a change, not an invention)."""

    def __init__(self, tokenizer, peaks):
        self.tokenizer, self.peaks = tokenizer, peaks

    def attribute_node(self, trace, node, target_chars=None):
        from agentgrad.attribution.render import render_call
        from agentgrad.attribution.scorer import NodeAttribution, SourceAttribution
        from agentgrad.attribution.weights import connection_weights

        r = render_call(self.tokenizer, node)
        sources = []
        for src, chars in r.source_chars.items():
            word, height = self.peaks.get((node.id, src), ("", 1.0))
            at = trace.nodes[src].text.find(word) if word else -1
            hot = (chars[0][0] + at, chars[0][0] + at + len(word)) if at >= 0 else (0, 0)
            positions = sorted({t for a, b in r.source_ranges[src] for t in range(a, b)})
            l1 = [height if r.offsets[p][0] < hot[1] and r.offsets[p][1] > hot[0] else 0.1 for p in positions]
            sources.append(SourceAttribution(src, trace.nodes[src].kind, trace.nodes[src].name, r.source_ranges[src],
                                             connection_weights(l1, l1), positions, l1, l1))
        n = len(r.output_tokens_for(target_chars)) if target_chars else r.output_range[1] - r.output_range[0]
        return NodeAttribution(node.id, node.name, r.input_ids, r.output_range, sources, "peak", log_prob=-2.0 * n)


def test_readers_read_their_format():
    """A compact JSON line read as lines takes its first key for every value; the JSON reader reads
    each field; prose splits a line into sentences; a ``key: value`` record among prose is still one."""
    js = '{"city": "Oslo", "dist": "9 km", "n": 3}'
    km = (js.index("9 km"), js.index("9 km") + 4)
    assert LINES.key_at(js, (km,)) == "city" and JSON.key_at(js, (km,)) == "dist"
    assert JSON.key_value(js, "dist") == "9 km" and JSON.key_value(js, "n") == "3" and JSON.key_value(js, "x") is None
    assert JSON.unit(js, js.index("dist")) == km  # the key stands for its value
    assert JSON.key_value("dist: 9 km", "dist") == "9 km"  # outside JSON: read as lines
    line = "The town is Oslo. The day is Monday."
    assert line[slice(*PROSE.unit(line, line.index("Monday")))] == "The day is Monday."
    assert LINES.unit(line, line.index("Monday")) == (0, len(line))
    rec = "day: Monday"
    assert PROSE.unit(rec, 0) == LINES.unit(rec, 0) == (5, len(rec))
    assert get_reader("prose") is PROSE
    with pytest.raises(ConfigError, match="unknown fact reader 'xml'; valid: lines, prose, json"):
        get_reader("xml")


def test_the_reader_is_detected_from_the_calls_and_chosen_by_the_name():
    """The planted benchmark's two styles read as ``lines`` and ``prose``; JSON outputs as ``json``;
    ``NAME@READER`` chooses one, and a method that reads no facts takes none."""
    for style, want in (("lines", "lines"), ("prose", "prose")):
        for topo in ("chain", "broadcast"):
            ep = E.generate(topo, "wrong_value", 3, style=style)
            assert detect_reader(E.without_truth(ep.trace)).name == want
            assert fact_reader(DEFAULT_METHOD, ep.trace) == want and fact_reader("provenance", ep.trace) is None
    assert fact_reader(f"{DEFAULT_METHOD}@json", ep.trace) == "json"
    assert canonical("provenance:key@prose") == "provenance:key@prose"
    with pytest.raises(RegistryError, match="reads no facts"):
        canonical("gbc:max_l1:targeted:maxw@prose")


def test_the_default_method_uses_the_reader_of_a_json_or_prose_trace_and_says_which(tiny_llama):
    """JSON: the writer's ``"dist": "9 km"`` is the lookup's ``dist: 9 km``: read by field, the
    lookup carries the value and is blamed; read as lines (its first key, ``city``) no source holds
    the value under that key, and the writer is blamed. Prose: the merger's line holds two sentences;
    the gradient at the relay points at the second, which the dayer wrote: read by sentence the walk
    reaches the dayer, read by line (a text no source holds) it stops at the merger."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama)
    t = Trace()
    lookup = t.add(Node(id=-1, kind="tool", name="lookup", text="dist: 9 km\ncity: Oslo")).id
    w = _call(t, "writer", [lookup], '{"city": "Oslo", "dist": "9 km"}')
    text = t.nodes[w].text
    loss = VerbalLoss("the distance is wrong", [w], spans={w: [(text.index("9 km"), text.index("9 km") + 4)]})
    sc = PeakScorer(tok, {(w, lookup): ("9 km", 5.0)})
    out = blame_episode(DEFAULT_METHOD, t, loss, sc)
    assert out.reader == "json" and out.to_dict()["reader"] == "json" and out.blamed[0].agent == "lookup"
    forced = blame_episode(f"{DEFAULT_METHOD}@lines", t, loss, sc)
    assert forced.reader == "lines" and forced.blamed[0].agent == "writer"
    assert "reader" not in blame_episode("provenance", t, loss).to_dict()

    t = Trace()
    lookup = t.add(Node(id=-1, kind="tool", name="lookup", text="city: Oslo\nday: Monday")).id
    a0 = _call(t, "dayer", [lookup], "The day is Monday.")
    a = _call(t, "merger", [lookup, a0], "The town is Oslo. The day is Monday.")
    b = _call(t, "relay", [a], "The town is Oslo. The day is Friday.")
    c = _call(t, "answer", [b], "The day is Friday.")
    loss = VerbalLoss("the day is wrong", [c], spans={c: [(11, 17)]})
    sc = PeakScorer(tok, {(b, a): ("Monday", 5.0), (a, lookup): ("Monday", 10.0), (a, a0): ("Monday", 5.0)})
    out = blame_episode(DEFAULT_METHOD, t, loss, sc)
    assert out.reader == "prose" and out.to_dict()["reader"] == "prose" and out.blamed[0].agent == "dayer"
    assert blame_episode(f"{DEFAULT_METHOD}@lines", t, loss, sc).blamed[0].agent == "merger"


def test_the_reader_is_detected_once_per_episode_for_every_target_and_the_outcome(tiny_llama, monkeypatch):
    from transformers import AutoTokenizer

    context, methods = (importlib.import_module(f"agentgrad.blame.{m}") for m in ("context", "methods"))
    seen = []
    monkeypatch.setattr(context, "detect_reader", lambda trace: seen.append(trace) or detect_reader(trace))
    monkeypatch.setattr(methods, "detect_reader", lambda trace: pytest.fail("detected again for the outcome"))
    t = Trace()
    lookup = t.add(Node(id=-1, kind="tool", name="lookup", text="dist: 9 km\ncity: Oslo")).id
    w = _call(t, "writer", [lookup], '{"city": "Oslo", "dist": "9 km"}')
    w2 = _call(t, "copier", [w], '{"dist": "9 km"}')
    spans = {n: [(t.nodes[n].text.index("9 km"), t.nodes[n].text.index("9 km") + 4)] for n in (w, w2)}
    loss = VerbalLoss("the distance is wrong", [w2, w], spans=spans)  # two targets: two walks, two focused views
    out = blame_episode(DEFAULT_METHOD, t, loss, PeakScorer(AutoTokenizer.from_pretrained(tiny_llama), {}))
    assert out.reader == "json" and len(out.ranking) > 1
    assert seen == [t]  # once for both walks and the outcome's name of it


def test_agentgrad_blame_prints_the_reader_and_the_blame_json_names_it(tmp_path, capsys):
    """``agentgrad blame`` on a trace whose agent writes JSON: ``provenance:key`` (no model) reads it
    by field, and the output and ``blame.json`` say so."""
    import json

    from agentgrad.cli import main

    t = Trace()
    lookup = t.add(Node(id=-1, kind="tool", name="lookup", text="dist: 9 km\ncity: Oslo")).id
    _call(t, "writer", [lookup], '{"city": "Oslo", "dist": "9 km"}')
    f = tmp_path / "trace.json"
    f.write_text(json.dumps(t.to_dict()))
    rc = main(["blame", str(f), "--loss", "the distance is wrong", "--wrong", "9 km", "--method", "provenance:key",
               "--scorer", "", "--out", str(tmp_path / "B")])
    assert rc == 0
    assert "facts read as json by provenance:key" in capsys.readouterr().out
    assert json.loads((tmp_path / "B" / "blame.json").read_text())["methods"]["provenance:key"]["reader"] == "json"


def test_a_benchmark_declares_its_reader_and_the_methods_option_takes_one():
    """Who&When and the injected faults were measured reading `key: value` lines; their harnesses keep
    that reader (detection reads most Who&When logs as prose), and `--methods NAME@READER` selects it."""
    from agentgrad.benchmarks.inject import bench as inject
    from agentgrad.benchmarks.whowhen import bench as whowhen
    from agentgrad.blame.methods import select_methods, with_reader

    assert whowhen.READER == "lines" and inject.READER == "lines"
    assert with_reader(DEFAULT_METHOD, "lines") == DEFAULT_METHOD + "@lines"
    assert with_reader("provenance:key", "prose") == "provenance:key@prose"
    assert with_reader("last", "lines") == "last"  # reads no facts
    assert with_reader(DEFAULT_METHOD + "@json", "lines") == DEFAULT_METHOD + "@json"  # its own reader kept
    with pytest.raises(ConfigError, match="unknown fact reader"):
        with_reader(DEFAULT_METHOD, "yaml")
    assert select_methods(f"{DEFAULT_METHOD}@prose,last") == [DEFAULT_METHOD + "@prose", "last"]
    with pytest.raises(RegistryError, match="reads no facts"):
        select_methods("last@prose")
