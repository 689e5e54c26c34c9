"""Fault families the string test cannot decide, the model-free baselines, and the ``follow`` walk.

The generator's truth is checked against the trace itself; ``provenance`` by hand on small traces;
``follow`` with the ideal copier of conftest (whose gradients point at the value a line copies),
where it must find the planted call on every family that has a loss span.
"""

import pytest

from agentgrad.benchmarks.planted import episodes as E
from agentgrad.benchmarks.planted.families import TRANSFORMS, _words
from agentgrad.benchmarks.stats import paired, sign_test
from agentgrad.blame.methods import BlameContext, get_blame_method
from agentgrad.blame.backward import VerbalLoss
from agentgrad.core.trace import Node, Trace, join_blocks
from agentgrad.errors import ConfigError
from conftest import IdealScorer, assert_spans_exact

CELLS = [(t, f) for f in E.FAMILIES for t in E.TOPOLOGIES if E.supports(t, f)]


def _upstream_texts(ep, skip=()):
    final = ep.loss.targets[0]
    return {n: ep.trace.nodes[n].text for n in ep.trace.upstream(final) if n not in skip}


@pytest.mark.parametrize("topology, fault", CELLS)
def test_family_truth_is_consistent(topology, fault):
    for seed in range(10):
        ep = E.generate(topology, fault, seed)
        tr, key = ep.truth, ep.truth["key"]
        assert_spans_exact(ep.trace)
        ep.trace.validate()
        final = ep.trace.nodes[ep.loss.targets[0]]
        assert tr["path"][-1] == final.id and tr["node"] == tr["path"][0] and tr["kind"] == "call"
        assert ep.trace.nodes[tr["node"]].name == tr["agent"]
        if fault == "ignored":  # the key's line is gone from the planted call and every copy after it
            assert not ep.loss.spans
            assert all(f"{key}: " not in "\n" + ep.trace.nodes[n].text for n in tr["path"])
            assert f"report: " in ep.trace.nodes[tr["node"]].messages[0]["content"].lower()
            assert key in ep.trace.nodes[tr["node"]].messages[0]["content"]  # its prompt asked for it
            continue
        (a, b), = ep.loss.spans[final.id]
        wrong = final.text[a:b]
        assert wrong == ep.loss.details["wrong"]
        for n, spans in tr["corrupted"].items():  # the corrupted value sits on the key's line of each
            (x, y), = spans
            assert ep.trace.nodes[int(n)].text[x - len(key) - 2:x] == f"{key}: "
        if fault == "decoy":  # the wrong string is also the true value of another key off the path
            decoy = ep.trace.nodes[tr["decoy"]]
            assert tr["decoy"] not in tr["path"] and f"{tr['decoy_key']}: {wrong}" in decoy.text.split("\n")
            reader = ep.trace.nodes[tr["decoy_reader"]]
            assert tr["decoy"] in {s.source for s in reader.spans} and tr["decoy_reader"] in tr["path"]
            planted = ep.trace.nodes[tr["node"]]
            assert all(wrong not in ep.trace.nodes[s.source].text for s in planted.spans)  # it could not copy it
        elif fault == "transformed":  # nowhere upstream verbatim but in the rewriting call and after it
            t = tr["transform_at"]
            assert t in tr["path"] and t != tr["node"]
            assert TRANSFORMS[tr["transform"]][2] in ep.trace.nodes[t].messages[0]["content"]
            after = {t} | {n.id for n in ep.trace.nodes if n.id > t and wrong in n.text}
            assert not any(wrong in text for n, text in _upstream_texts(ep, after).items())
            assert f"{key}: {tr['planted_value']}" in ep.trace.nodes[tr["node"]].text.split("\n")
        elif fault == "misroute":  # the manager's routing line names a worker whose lookup lacks the key
            manager = ep.trace.nodes[tr["node"]]
            assert f"{key}: ask {tr['routed_to']}" in manager.text.split("\n") and tr["routed_to"] != tr["holder"]
            assert wrong == E.UNKNOWN and f"{key}: {E.UNKNOWN}" in final.text.split("\n")
            holder_look = next(n for n in ep.trace.nodes if n.name == f"lookup_{tr['holder']}")
            assert f"\n{key}: " in "\n" + holder_look.text
    assert E.generate(topology, fault, 3).trace.to_dict() == E.generate(topology, fault, 3).trace.to_dict()


@pytest.mark.parametrize("fault", [f for f in E.FAULTS if f != "misroute"])
def test_prose_is_the_same_episode_in_sentences(fault):
    """``--style prose``: the episode of ``lines`` with every call writing one sentence per fact in
    its own words (no ``key: value`` line, no key named), every span moved with its value, and the
    lookups and the task left as records."""
    import re

    from agentgrad.benchmarks.planted.prose import ALIASES, FRAMES, to_prose

    assert not any(re.search(r"[:=]", f) for f in FRAMES)
    assert not any(k in " ".join(a).split() for k, a in ALIASES.items())  # a paraphrase never names its key
    for topology in E.TOPOLOGIES:
        for seed in range(4):
            lines, prose = E.generate(topology, fault, seed), E.generate(topology, fault, seed, style="prose")
            assert prose.trace.id == lines.trace.id + "-prose" and prose.truth["style"] == "prose"
            assert_spans_exact(prose.trace)
            prose.trace.validate()
            for a, b in zip(lines.trace.nodes, prose.trace.nodes):
                if a.kind != "call":
                    assert a.text == b.text  # lookups and the task stay records
                    continue
                facts = [line.split(": ", 1) for line in a.text.split("\n")]
                sentences = b.text.split("\n")
                assert len(sentences) == len(facts) and not any(f"{k}: " in b.text for k, _ in facts)
                assert all(v in s for (_, v), s in zip(facts, sentences))  # the same values, in order
                assert "one sentence per fact" in b.messages[0]["content"]
            if fault == "ignored":
                assert not prose.loss.spans
                continue
            (x, y), = prose.loss.spans[prose.loss.targets[0]]
            assert prose.trace.nodes[prose.loss.targets[0]].text[x:y] == prose.loss.details["wrong"]
            for n, spans in prose.truth["corrupted"].items():  # each corrupted span still covers its value
                (x0, y0), = lines.truth["corrupted"][n]
                (x1, y1), = spans
                assert lines.trace.nodes[int(n)].text[x0:y0] == prose.trace.nodes[int(n)].text[x1:y1]
    with pytest.raises(ConfigError, match="misroute has no prose form"):
        E.generate("manager", "misroute", 0, style="prose")
    with pytest.raises(ConfigError, match="unknown style"):
        E.generate("chain", "decoy", 0, style="poem")
    assert not E.supports("manager", "misroute", "prose") and E.supports("manager", "misroute")
    tr = Trace()  # an agent keeps one wording for a key; another agent words it differently
    for name in ("ann", "bob", "ann"):
        tr.add(Node(id=-1, kind="call", name=name, text="city: Lyon",
                    messages=[{"role": "system", "content": "x"}, {"role": "user", "content": ""}]))
    moved = to_prose(tr, "s")
    assert tr.nodes[0].text == tr.nodes[2].text and "Lyon" in tr.nodes[0].text and "city" not in tr.nodes[0].text
    (old, new), = moved[1].items()
    assert old == (6, 10) and tr.nodes[1].text[new[0]:new[1]] == "Lyon"


def test_misroute_needs_a_router_and_words_are_right():
    with pytest.raises(ConfigError, match="manager only"):
        E.generate("chain", "misroute", 0)
    assert [_words(n) for n in (21, 40, 99)] == ["twenty-one", "forty", "ninety-nine"]
    make, rewrite, _ = TRANSFORMS["time"]
    assert rewrite("14:30") == "2:30 pm" and TRANSFORMS["distance"][1]("3.5 km") == "3500 m"
    assert TRANSFORMS["date"][1]("2026-03-04") == "4 March 2026" and TRANSFORMS["price"][1]("12 dollars") == "$12.00"


def _call(trace, name, sources, text):
    user, spans = join_blocks([(s, f"[from {trace.nodes[s].name}]\n", trace.nodes[s].text) for s in sources], 1)
    return trace.add(Node(id=-1, kind="call", name=name, text=text, parents=list(sources), spans=spans,
                          messages=[{"role": "system", "content": f"You are {name}."},
                                    {"role": "user", "content": user}])).id


def test_provenance_by_hand():
    """task -> A -> B -> C; B writes the wrong city, C copies it: blame B. A tool holding it is
    blamed itself; with two holders the latest (calls and tools before inputs) is followed."""
    t = Trace()
    task = t.add(Node(id=-1, kind="input", name="task", text="city: Lyon")).id
    a = _call(t, "A", [task], "city: Lyon")
    b = _call(t, "B", [a], "city: Oslo")
    c = _call(t, "C", [b], "city: Oslo")
    loss = VerbalLoss("wrong city", [c], spans={c: [(6, 10)]})
    prov = get_blame_method("provenance")
    ctx = BlameContext(t, loss)
    assert [(x.agent, x.score) for x in prov(ctx)] == [("B", 1.0), ("C", 0.5)]
    assert ctx.walked == {c: [b]}
    # a tool that returned it: the tool is blamed
    t2 = Trace()
    task = t2.add(Node(id=-1, kind="input", name="task", text="city?")).id
    tool = t2.add(Node(id=-1, kind="tool", name="lookup", text="city: Oslo")).id
    w = _call(t2, "W", [task, tool], "city: Oslo")
    r = _call(t2, "R", [w], "the city is Oslo")
    assert prov(BlameContext(t2, VerbalLoss("x", [r], spans={r: [(12, 16)]})))[0].agent == "lookup"
    # two holders of the string: the later one is followed (here an innocent decoy: wrong by design)
    t3 = Trace()
    task = t3.add(Node(id=-1, kind="input", name="task", text="home: Rome")).id
    x = _call(t3, "X", [task], "city: Rome")  # X put the wrong city
    y = _call(t3, "Y", [task], "home: Rome")  # Y copied the home town, innocently
    z = _call(t3, "Z", [x, y], "city: Rome")
    ranking = prov(BlameContext(t3, VerbalLoss("x", [z], spans={z: [(6, 10)]})))
    # Y (the later holder) is followed, then the task: the string came from an input, so the first
    # call on the path, Y, is blamed
    assert [b.agent for b in ranking] == ["Y", "Z"]
    # no span: nothing to match, the failing call
    assert prov(BlameContext(t3, VerbalLoss("x", [z])))[0].agent == "Z"


def test_key_provenance_by_hand():
    """``provenance:key`` follows the wrong value's key, not its text, and blames where the key's value
    first changed: through a rewrite the string walk cannot follow, past an innocent holder of the
    same string under another key; a tool whose value is copied unchanged is blamed itself; off a
    ``key: value`` line it is ``provenance``."""
    keyp, prov = get_blame_method("provenance:key"), get_blame_method("provenance")
    # task -> A -> B (writes the wrong time) -> C (rewrites it, 12 h) -> D copies: B, not C
    t = Trace()
    task = t.add(Node(id=-1, kind="input", name="task", text="time: 14:30\ncity: Lyon")).id
    a = _call(t, "A", [task], "time: 14:30")
    b = _call(t, "B", [a], "time: 15:30")
    c = _call(t, "C", [b], "time: 3:30 pm")
    d = _call(t, "D", [c], "city: Lyon\ntime: 3:30 pm")
    loss = VerbalLoss("wrong time", [d], spans={d: [(17, 24)]})
    assert t.nodes[d].text[17:24] == "3:30 pm"
    ctx = BlameContext(t, loss)
    assert [(x.agent, x.score) for x in keyp(ctx)] == [("B", 1.0), ("D", 0.5), ("C", 0.25), ("A", 0.5 / 3)]
    assert ctx.walked == {d: [c], c: [b], b: [a], a: [task]}
    assert prov(BlameContext(t, loss))[0].agent == "C"  # the string stops where it was rewritten
    # the wrong string is another key's true value (a decoy): the key walk passes it by
    t2 = Trace()
    task = t2.add(Node(id=-1, kind="input", name="task", text="city: Lyon\nhome: Rome")).id
    x = _call(t2, "X", [task], "city: Rome")  # X put the wrong city
    y = _call(t2, "Y", [task], "home: Rome")  # Y reports the home town, innocently
    z = _call(t2, "Z", [x, y], "city: Rome")
    loss2 = VerbalLoss("x", [z], spans={z: [(6, 10)]})
    assert keyp(BlameContext(t2, loss2))[0].agent == "X" and prov(BlameContext(t2, loss2))[0].agent == "Y"
    # a tool returned it and every call copied it: the tool
    t3 = Trace()
    task = t3.add(Node(id=-1, kind="input", name="task", text="city?")).id
    tool = t3.add(Node(id=-1, kind="tool", name="lookup", text='{"city": "Oslo"}')).id
    w = _call(t3, "W", [task, tool], "city: Oslo")
    assert keyp(BlameContext(t3, VerbalLoss("x", [w], spans={w: [(6, 10)]})))[0].agent == "lookup"
    # free text (no key before the span), no span: as provenance, the failing call
    r = _call(t3, "R", [w], "the city is Oslo")
    loss4 = VerbalLoss("x", [r], spans={r: [(12, 16)]})
    assert keyp(BlameContext(t3, loss4))[0].agent == prov(BlameContext(t3, loss4))[0].agent == "lookup"
    assert keyp(BlameContext(t3, VerbalLoss("x", [r])))[0].agent == "R"
    # a misroute: manager M routes the drink to worker B (``drink: ask B``), whose lookup lacks it; B
    # answers ``unknown``. The key walk blames B, the first change it sees; with ``root`` the call that
    # first states the key (none of its sources does) is a change too, and the earliest: M
    t5, loss5 = _misrouted()
    root = get_blame_method("provenance:key:root")
    assert keyp(BlameContext(t5, loss5))[0].agent == "B"
    assert [(x.agent, x.score) for x in root(BlameContext(t5, loss5))] == [("M", 1.0), ("R", 0.5), ("B", 0.25)]
    # where the key's path starts at a tool or the task, ``root`` is the key walk (B's wrong time above)
    assert [x.agent for x in root(BlameContext(t, loss))] == [x.agent for x in keyp(BlameContext(t, loss))]


@pytest.mark.parametrize("topology, fault", [c for c in CELLS if c[1] != "ignored"] +
                         [(t, "wrong_value") for t in E.TOPOLOGIES])
def test_follow_finds_the_planted_call_with_an_ideal_copier(topology, fault, tiny_llama):
    """With gradients that point at the value each line copies, and log p that is high only for
    copied lines, ``follow`` names the planted call on every family with a span: through rewrites
    (transformed), past innocent holders (decoy), and back from an honest ``unknown`` to the router
    (misroute). ``provenance`` cannot do it where the text is rewritten."""
    from transformers import AutoTokenizer

    sc = IdealScorer(AutoTokenizer.from_pretrained(tiny_llama))
    follow, prov = get_blame_method("gbc:max_l1:targeted:follow"), get_blame_method("provenance")
    hits, prov_hits, n = 0, 0, 6
    for seed in range(n):
        ep = E.generate(topology, fault, seed)
        ctx = BlameContext(E.without_truth(ep.trace), ep.loss, sc, seed)
        hits += follow(ctx)[0].node == ep.truth["node"]
        prov_hits += prov(ctx)[0].node == ep.truth["node"]
    if fault == "misroute":  # the copier's gradient of "unknown" points at no source value: measured only
        assert 0 <= hits <= n
    elif (topology, fault) == ("broadcast", "transformed"):
        # the ideal copier weighs every earlier holder of the key alike (the right value before the
        # planted call too), so where the text was rewritten the walk may take an older holder
        assert hits >= n // 2
    else:
        assert hits == n
    if fault == "transformed":
        assert prov_hits == 0


def test_paired_statistics_by_hand():
    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 0) == pytest.approx(2 / 32)  # two-sided: 2 * (1/2)^5
    assert sign_test(3, 1) == pytest.approx(2 * (1 + 4) / 16)
    p = paired([1, 1, 1, 0, 1], [0, 0, 1, 0, 1])
    assert (p["n"], p["wins"], p["losses"]) == (5, 2, 0) and p["diff"] == pytest.approx(0.4)
    assert 0.0 <= p["ci95"][0] <= 0.4 <= p["ci95"][1] <= 0.8 and p["p"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        paired([1], [1, 0])


def test_origin_stops_where_the_followed_text_was_invented(tiny_llama):
    """task -> A -> B -> C. A rewrote its lookup (a change, mildly surprising), B invented the wrong
    city (very surprising), C copied it. ``follow`` blames the earliest change on the path, A, as the
    gradient at B (pointing at A's line, not at the city B invented) walks on past B; ``origin`` stops
    at B, whose city is more surprising than ``INVENTED``, and blames it."""
    import math

    from transformers import AutoTokenizer

    from agentgrad.attribution.render import render_call
    from agentgrad.blame.walk import WALK_RULES
    from agentgrad.blame.walk import SUPPORTED

    INVENTED = WALK_RULES["origin"].params["invented"]

    class Copier(IdealScorer):  # log p of a line: copied 0.99; "Rome" (invented) 1e-4; else 0.01
        def output_logprobs(self, node):
            r, lps = super().output_logprobs(node)
            base, out = r.output_char_start, []
            for t, lp in zip(range(*r.output_range), lps):
                a = max(r.offsets[t][0] - base, 0)
                line = node.text[node.text.rfind("\n", 0, a) + 1:].split("\n")[0]
                out.append(math.log(1e-4) if "Rome" in line and lp < math.log(0.5) else lp)
            return r, out

    assert -math.log(0.01) < INVENTED < -math.log(1e-4) and SUPPORTED < -math.log(0.01)
    t = Trace()
    tool = t.add(Node(id=-1, kind="tool", name="lookup", text="city: Oslo")).id
    a = _call(t, "A", [tool], "city: Bergen")  # rewritten from the lookup: a change, not invented
    b = _call(t, "B", [a], "city: Rome")  # invented
    c = _call(t, "C", [b], "city: Rome")  # copied
    loss = VerbalLoss("the city is wrong", [c], spans={c: [(6, 10)]})
    sc = Copier(AutoTokenizer.from_pretrained(tiny_llama))
    assert render_call(sc.tokenizer, t.nodes[c]).output_range[1] > 0
    follow, origin = get_blame_method("gbc:max_l1:targeted:follow"), get_blame_method("gbc:max_l1:targeted:origin")
    assert follow(BlameContext(t, loss, sc))[0].agent == "A"
    assert origin(BlameContext(t, loss, sc))[0].agent == "B"
    # with nothing invented (B's city as unlikely as A's), origin is follow: the earliest change
    t.nodes[b].text = t.nodes[c].text = "city: Rennes"
    loss = VerbalLoss("the city is wrong", [c], spans={c: [(6, 12)]})
    assert origin(BlameContext(t, loss, sc))[0].agent == follow(BlameContext(t, loss, sc))[0].agent == "A"


class Lured(IdealScorer):
    """A copier in which call B invented its value (log p of its uncopied tokens: p 1e-4) and the tool
    named ``registry`` draws the gradient: its tokens of ``text`` weigh ``lure`` at every call reading it."""

    def __init__(self, tokenizer, text, lure=20.0):
        super().__init__(tokenizer)
        self.text, self.lure = text, lure

    def output_logprobs(self, node):
        import math

        r, lps = super().output_logprobs(node)
        return r, [math.log(1e-4) if lp < math.log(0.5) and node.name == "B" else lp for lp in lps]

    def attribute_node(self, trace, node, target_chars=None):
        from dataclasses import replace

        from agentgrad.attribution.render import render_call
        from agentgrad.attribution.weights import connection_weights

        res = super().attribute_node(trace, node, target_chars)
        r = render_call(self.tokenizer, node)
        for i, s in enumerate(res.sources):
            if s.name == "registry":
                a = r.source_chars[s.source][0][0] + trace.nodes[s.source].text.find(self.text)
                l1 = [self.lure if r.offsets[p][0] < a + len(self.text) and r.offsets[p][1] > a else 0.1
                      for p in s.positions]
                res.sources[i] = replace(s, l1=l1, gxi=l1, weights=connection_weights(l1, l1))
        return res


def test_blend_follows_every_holder_and_takes_the_one_where_the_text_was_invented(tiny_llama):
    """lookup -> A -> B -> C, and a registry tool that C also reads. B invented the wrong city
    ("Rome"); the registry holds "city: Rome" innocently (another record's true value), and the
    gradient at C weighs it most. ``origin`` follows the heaviest holder, ends at the registry and blames it;
    ``blend`` follows both holders, and only B's walk ends where the text was invented: it blames B.
    With the innocent holder the lighter one, the two rules agree. And where B states the city in a
    sentence whose gradient peaks elsewhere (no carry test passes for B), ``blend`` still follows
    B, which holds the text verbatim; ``origin`` has only the registry to follow."""
    from transformers import AutoTokenizer

    t = Trace()
    lookup = t.add(Node(id=-1, kind="tool", name="lookup", text="city: Oslo")).id
    registry = t.add(Node(id=-1, kind="tool", name="registry", text="city: Rome")).id
    a = _call(t, "A", [lookup], "city: Oslo")
    b = _call(t, "B", [a], "city: Rome")  # invented
    c = _call(t, "C", [b, registry], "city: Rome")
    loss = VerbalLoss("the city is wrong", [c], spans={c: [(6, 10)]})
    sc = Lured(AutoTokenizer.from_pretrained(tiny_llama), "Rome")
    origin, blend = get_blame_method("gbc:max_l1:targeted:origin"), get_blame_method("gbc:max_l1:targeted:blend")
    assert origin(BlameContext(t, loss, sc))[0].agent == "registry"
    ctx = BlameContext(t, loss, sc)
    assert blend(ctx)[0].agent == "B"
    # the edges kept are the chosen walk's (through B, on by its key to the lookup), not the registry's
    assert ctx.walked == {c: [b], b: [a], a: [lookup]}
    sc.lure = 0.5  # the registry now the lighter holder: origin follows B too, and blend agrees
    assert origin(BlameContext(t, loss, sc))[0].agent == blend(BlameContext(t, loss, sc))[0].agent == "B"
    # "Rome" as the registry's *town*: another key's value is another fact, whatever the gradient
    # says, once a source states the key ("city") itself: origin follows B, with no fork
    sc.lure = 20.0
    t.nodes[registry].text = "town: Rome"
    assert origin(BlameContext(t, loss, sc))[0].agent == blend(BlameContext(t, loss, sc))[0].agent == "B"
    assert get_blame_method("gbc:max_l1:targeted:carry")(BlameContext(t, loss, sc))[0].agent == "B"
    # B's city inside a sentence, the copier's gradient at C on its first word: only the string says B holds it
    sc.lure = 20.0
    t = Trace()
    lookup = t.add(Node(id=-1, kind="tool", name="lookup", text="city: Oslo")).id
    registry = t.add(Node(id=-1, kind="tool", name="registry", text="town: Rome")).id
    b = _call(t, "B", [_call(t, "A", [lookup], "city: Oslo")], "We chose it. Rome is the place.")
    c = _call(t, "C", [b, registry], "city: Rome")
    loss = VerbalLoss("the city is wrong", [c], spans={c: [(6, 10)]})
    assert origin(BlameContext(t, loss, sc))[0].agent == "registry"
    assert blend(BlameContext(t, loss, sc))[0].agent == "B"
    sc.lure = 0.5  # lighter or not, the registry is followed by origin: B holds it only as a string
    assert origin(BlameContext(t, loss, sc))[0].agent == "registry"


def test_blend_reads_whole_values_and_follows_the_holders_of_a_rewritten_key(tiny_llama):
    """lookup -> A -> B -> C, and a registry tool that C also reads. B invented the wrong distance
    ("7 km"; the lookup says 17 km), C rewrote it in metres ("7000 m"), and the registry holds the
    same key's true value, which the gradient at C weighs most. Where C rewrote the value no source
    holds "7000 m": ``origin`` goes into the heaviest source, the registry, finds nothing changed
    above C and blames C, the faithful rewriter. ``blend`` follows every source that states the key
    (the registry, then B) and takes the walk that ends where the text was invented: B. On the way it
    reads values whole: "7 km" is not held by A's "17 km" (a substring match would walk on past B)."""
    from transformers import AutoTokenizer

    from agentgrad.blame.facts import occurrences as _occurs

    assert _occurs("dist: 17 km", "7 km") == [(7, 11)] and _occurs("dist: 17 km", "7 km", whole=True) == []
    assert _occurs("a cat. cats", "cat", whole=True) == [(2, 5)] and _occurs("(7 km)", "7 km", whole=True) == [(1, 5)]
    assert _occurs("dist: 1.7 km", "7 km", whole=True) == [] and _occurs("x 3,700 m", "700 m", whole=True) == []
    assert _occurs("7.5 and 7, 8", "7", whole=True) == [(8, 9)] and _occurs("is 0.5", ".5", whole=True) == []

    t = Trace()
    lookup = t.add(Node(id=-1, kind="tool", name="lookup", text="dist: 17 km")).id
    registry = t.add(Node(id=-1, kind="tool", name="registry", text="dist: 17 km")).id
    a = _call(t, "A", [lookup], "dist: 17 km")
    b = _call(t, "B", [a], "dist: 7 km")  # invented
    c = _call(t, "C", [b, registry], "dist: 7000 m")  # rewritten in metres, as its prompt asks
    d = _call(t, "D", [c], "dist: 7000 m")
    loss = VerbalLoss("the distance is wrong", [d], spans={d: [(6, 12)]})
    sc = Lured(AutoTokenizer.from_pretrained(tiny_llama), "17 km")
    origin, blend = get_blame_method("gbc:max_l1:targeted:origin"), get_blame_method("gbc:max_l1:targeted:blend")
    assert origin(BlameContext(t, loss, sc))[0].agent == "C"
    ctx = BlameContext(t, loss, sc)
    assert blend(ctx)[0].agent == "B"
    assert ctx.walked == {d: [c], c: [b], b: [a], a: [lookup]}  # the chosen walk's edges: into B, not the registry
    # with B's value no longer invented (as likely as a rewrite), the walk that changed the text is still B's
    sc.output_logprobs = lambda node: IdealScorer.output_logprobs(sc, node)
    assert blend(BlameContext(t, loss, sc))[0].agent == "B"
    assert origin(BlameContext(t, loss, sc))[0].agent == "C"
    # the registry states the key with no value ('dist: ""'), still the heaviest source at C: B is the one
    # source with a value for the key, followed without a fork
    t.nodes[registry].text = 'dist: ""'
    sc = Lured(AutoTokenizer.from_pretrained(tiny_llama), '""')
    assert origin(BlameContext(t, loss, sc))[0].agent == "C"
    ctx = BlameContext(t, loss, sc)
    assert blend(ctx)[0].agent == "B" and ctx.walked == {d: [c], c: [b], b: [a], a: [lookup]}


def _misrouted() -> tuple[Trace, VerbalLoss]:
    """task (0) -> manager M (1, ``drink: ask B``) -> worker B (3, also reading its lookup 2, which
    lacks the drink: ``drink: unknown``) -> responder R (4, copies it); the loss marks R's value."""
    t = Trace()
    task = t.add(Node(id=-1, kind="input", name="task", text="request: drink")).id
    m = _call(t, "M", [task], "drink: ask B")
    b = _call(t, "B", [m, t.add(Node(id=-1, kind="tool", name="lookup_B", text="food: rice")).id], "drink: unknown")
    r = _call(t, "R", [b], "drink: unknown")
    assert (task, m, b, r) == (0, 1, 3, 4)
    return t, VerbalLoss("the drink is missing", [r], spans={r: [(7, 14)]})


def test_blend_walks_on_past_an_invention_where_a_source_states_the_key(tiny_llama):
    """A misroute: the task asks for the drink, the manager M routes it to worker B (``drink: ask B``),
    whose lookup lacks it, so B answers ``drink: unknown`` (surprising: above ``INVENTED``) and the
    responder R copies that. ``origin`` stops at B's invention and blames B, which only answered what
    it was asked; ``blend`` follows the source that states the key, M, on its value (``ask B``, a
    change: nothing above states it) and blames the earliest change, M. Where instead A told B the
    drink (``drink: tea``, copied from A's lookup: no change above), B is blamed, as before."""
    from transformers import AutoTokenizer

    t, loss = _misrouted()
    task, m, _, b, r = range(5)
    sc = Lured(AutoTokenizer.from_pretrained(tiny_llama), "none")
    origin, blend = get_blame_method("gbc:max_l1:targeted:origin"), get_blame_method("gbc:max_l1:targeted:blend")
    assert origin(BlameContext(t, loss, sc))[0].agent == "B"
    ctx = BlameContext(t, loss, sc)
    assert [x.agent for x in blend(ctx)[:2]] == ["M", "R"] and ctx.walked == {r: [b], b: [m], m: [task]}
    # an omitted value: A told B the drink; B's "unknown" is invented, and nothing changed above it
    t = Trace()
    lookup = t.add(Node(id=-1, kind="tool", name="lookup", text="drink: tea")).id
    a = _call(t, "A", [lookup], "drink: tea")
    b = _call(t, "B", [a], "drink: unknown")
    r = _call(t, "R", [b], "drink: unknown")
    loss = VerbalLoss("the drink is missing", [r], spans={r: [(7, 14)]})
    ctx = BlameContext(t, loss, sc)
    assert blend(ctx)[0].agent == "B" and ctx.walked == {r: [b], b: [a], a: [lookup]}
    assert origin(BlameContext(t, loss, sc))[0].agent == "B"
