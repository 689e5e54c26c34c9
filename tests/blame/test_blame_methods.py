"""The planted-fault blame benchmark: generator truth, metrics by hand, walk rules, CLI and the trained scorer."""

import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout

import pytest

from agentgrad.benchmarks.planted import episodes as E
from agentgrad.benchmarks.planted.bench import Cost, run_benchmark, summarize, top1_credit
from agentgrad.core.stats import wilson
from agentgrad.blame.methods import Blame, BlameContext, get_blame_method, select_methods
from agentgrad.cli import main
from agentgrad.errors import ConfigError, RegistryError
from conftest import IdealScorer, ROOT, assert_spans_exact, run_script


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("topology", E.TOPOLOGIES)
@pytest.mark.parametrize("fault", E.COPIED)
def test_generator_truth_is_consistent(topology, fault):
    for seed in range(12):
        ep = E.generate(topology, fault, seed)
        tr, key, wrong = ep.truth, ep.truth["key"], ep.loss.details["wrong"]
        assert_spans_exact(ep.trace)
        ep.trace.validate()
        path = set(tr["path"])
        for node in ep.trace.nodes:  # the corrupted value is exactly in the outputs on the corrupted path
            line = f"{key}: {wrong}"
            has = line in node.text.split("\n")
            assert has == (node.id in path), (seed, node.id, tr)
            if fault != "omitted":  # a wrong value is new: it occurs nowhere else
                assert (wrong in node.text) == (node.id in path), (seed, node.id, tr)
        for n, spans in tr["corrupted"].items():
            a, b = spans[0]
            assert ep.trace.nodes[int(n)].text[a:b] == wrong
        final = ep.trace.nodes[ep.loss.targets[0]]
        (a, b), = ep.loss.spans[final.id]
        assert final.text[a:b] == wrong and tr["path"][-1] == final.id
        assert tr["kind"] == ("tool" if fault == "tool" else "call")
        assert "truth" not in E.without_truth(ep.trace).meta and "truth" in ep.trace.meta
    assert E.generate(topology, fault, 3).trace.to_dict() == E.generate(topology, fault, 3).trace.to_dict()


def test_held_out_values_and_names_never_occur_in_training():
    train_values, train_names = E.pools("train")
    eval_values, eval_names = E.pools("eval")
    assert not set(train_values) & set(eval_values) and not set(train_names) & set(eval_names)
    text = " ".join(n.text + n.messages[0]["content"] for n in E.training_calls(300))
    assert not any(v in text for v in eval_values)
    long = E.generate("fanin", "wrong_value", 1, long=True).trace
    lens = sorted(len(n.text) for n in long.nodes if n.kind == "tool")
    assert lens[-1] >= 8 * lens[0]  # a distractor about 10x longer than a used source


def test_bad_input_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown topology 'ring'"):
        E.generate("ring", "wrong_value", 0)
    with pytest.raises(ConfigError, match="unknown fault kind"):
        E.generate("chain", "typo", 0)
    with pytest.raises(ConfigError, match="at least 1"):
        run_benchmark(None, ["last"], ["chain"], ["tool"], 0)
    with pytest.raises(RegistryError, match="unknown blame method 'nope'"):
        select_methods("nope")


def test_metrics_by_hand_on_three_episodes():
    assert top1_credit([Blame("a", 1, 1.0), Blame("b", 2, 1.0)], "a", lambda b: b.agent) == 0.5  # a tie of two
    assert top1_credit([Blame("a", 1, 0.5), Blame("b", 2, 1.0)], "a", lambda b: b.agent) == 0.0
    recs = [{"topology": "chain", "fault": "tool", "long": False, "candidates": c,
             "methods": {"m": {"agent_top1": a, "node_top1": n, "agent_top3": 1.0, "seconds": s, "backward": 2,
                               "forward": 0}}} for a, n, s, c in [(1.0, 1.0, 0.1, 4), (0.0, 0.0, 0.2, 4), (0.5, 0.0, 0.3, 2)]]
    m = summarize(recs, ["m"])["groups"]["all"]["m"]
    assert m["agent_top1"]["value"] == pytest.approx(0.5) and m["node_top1"]["value"] == pytest.approx(1 / 3)
    assert m["seconds"] == pytest.approx(0.2) and m["backward"] == 2
    # Wilson interval for 1.5 of 3, by the textbook formula
    p, n, z = 0.5, 3, 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert m["agent_top1"]["ci95"] == pytest.approx([centre - half, centre + half])
    assert summarize(recs, ["m"])["chance_agent_top1"] == pytest.approx((0.25 + 0.25 + 0.5) / 3)
    assert wilson(0, 0) == (0.0, 0.0)
    # beside the model-free baselines, paired: m 1, 0, 0.5 against provenance 0, 0, 1 and last 0, 1, 0
    for r, (p_, l_) in zip(recs, [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0)]):
        r["methods"]["provenance"] = dict(r["methods"]["m"], agent_top1=p_)
        r["methods"]["last"] = dict(r["methods"]["m"], agent_top1=l_)
    g = summarize(recs, ["m", "provenance", "last"])["groups"]["all"]["m"]
    assert g["vs_provenance"]["diff"] == pytest.approx(0.5 / 3)
    assert (g["vs_provenance"]["wins"], g["vs_provenance"]["losses"]) == (1, 1) and g["vs_provenance"]["p"] == 1.0
    # the best model-free method of these episodes: provenance and last tie (1 of 3); provenance is taken
    assert g["vs_best_free"]["baseline"] == "provenance"


def test_the_carry_test_takes_the_value_or_its_key_on_the_same_line():
    """Where the source's top token may lie for the source to carry the wrong text: inside it, or the
    cue right before it (only spaces between, or on its line only spaces and punctuation)."""
    from types import SimpleNamespace as NS

    from agentgrad.blame.follow import carried

    text = 'lamp: eager valley\nmuseum: blue island\n{"shop": "red fox"}\nkey:\nred fox'
    base = 100  # where the source's text starts in the rendered prompt

    def top(word: str, wrong: str, nth: int = 0):
        at = -1
        for _ in range(nth + 1):
            at = text.index(word, at + 1)
        r = NS(offsets=[(base + at, base + at + len(word))], source_chars={1: [(base, base + len(text))]})
        ctx = NS(render=lambda node: r, trace=NS(nodes={1: NS(text=text)}))
        return carried(ctx, NS(source=1, positions=[0], l1=[1.0]), 2, wrong)

    blue = (text.index("blue island"), text.index("blue island") + len("blue island"))
    assert top("blue", "blue island") == blue  # inside the value
    assert top(" island", "blue island") == blue
    assert top(":", "blue island", 1) == blue  # the token right before it, spaces between
    assert top("museum", "blue island") == blue  # its key: ": " between (SmolLM2 splits "museum:")
    fox = text.index("red fox")
    assert top("shop", "red fox") == (fox, fox + 7)  # a JSON key: '": "' between
    assert top("valley", "blue island") is None  # the line before: a newline and the key between
    assert top("lamp", "blue island") is None  # another key
    assert top("eager", "eager valley") == (6, 18)  # "lamp: " is 6 characters
    assert top("key", "red fox") is None  # ":\n" between: not on the same line
    assert top("red", "red fox", 1) == (text.rindex("red fox"), len(text))  # the second occurrence


@pytest.mark.parametrize("text, peak, wrong", [
    ("City, pet: Lyon, snake", "Lyon", "snake"),  # a CSV line: the correct neighbour of the wrong value
    ("| Lyon | snake |", "Lyon", "snake"),  # a table row
    ('["Oslo", "Rome"]', "Oslo", "Rome"),  # a JSON array
    ("Oslo; Rome", "Oslo", "Rome"),
    ("a = b, c = Rome", "b", "Rome"),  # the value of the key before: a comma between
])
def test_the_carry_test_does_not_take_a_neighbouring_value_for_the_cue(text, peak, wrong):
    """A gradient peaking on the correct neighbour of a list, row or array does not carry the wrong
    value: only the key of ``key: value`` (spaces, quotes, one ':' or '=' between) is its cue."""
    from types import SimpleNamespace as NS

    from agentgrad.blame.facts import LINES
    from agentgrad.blame.follow import carried

    _cue_before = LINES.cue_before

    at = text.index(peak)
    r = NS(offsets=[(at, at + len(peak))], source_chars={1: [(0, len(text))]})
    ctx = NS(render=lambda node: r, trace=NS(nodes={1: NS(text=text)}))
    assert carried(ctx, NS(source=1, positions=[0], l1=[1.0]), 2, wrong) is None
    w = text.index(wrong)
    assert carried(ctx, NS(source=1, positions=[0], l1=[1.0]), 2, text[at:w] + wrong) is not None  # inside it
    assert _cue_before("key = value", 3, 6) and _cue_before("'key': 'value'", 4, 7) and _cue_before("a  b", 1, 3)


def test_a_value_is_the_same_fact_only_under_the_same_key_once_a_source_states_the_key():
    """``animal: unknown`` at a call whose sources state ``animal: shy canyon`` and ``ref: unknown``:
    the ``unknown`` of ``ref`` is another fact, so a gradient peaking on it does not carry the
    value, and the string test finds no holder. Where no source states ``animal`` (a key renamed on
    the way, or free text) any occurrence counts, as before."""
    from types import SimpleNamespace as NS

    from agentgrad.blame.facts import LINES
    from agentgrad.blame.follow import carried, fact_key

    _held = LINES.held

    out, echo, hal = "storm: calm\nanimal: unknown", "animal: shy canyon\nstorm: calm", "ref: unknown\narea: old"
    nodes = {1: NS(text=echo), 2: NS(text=hal), 3: NS(text=out)}
    ctx = NS(trace=NS(nodes=nodes))
    region = ((out.index("unknown"), len(out)),)
    assert fact_key(ctx, 3, region, [1, 2]) == "animal"
    assert fact_key(ctx, 3, region, [2]) is None  # nobody upstream states "animal": any occurrence counts
    assert fact_key(ctx, 3, ((0, 5),), [1, 2]) is None  # "storm" itself is a key, not a value
    assert _held(hal, "unknown", "animal") == [] and _held(hal, "unknown", None) == [(5, 12)]
    assert _held("animal: unknown\nref: unknown", "unknown", "ref") == [(21, 28)]
    assert _held("note: the animal: unknown", "unknown", "animal") == []  # the line's key is "note"
    at = hal.index("unknown")  # the gradient peaks on hal's "unknown"
    r = NS(offsets=[(at, at + 7)], source_chars={2: [(0, len(hal))]})
    ctx = NS(render=lambda node: r, trace=NS(nodes=nodes))
    src = NS(source=2, positions=[0], l1=[1.0])
    assert carried(ctx, src, 3, "unknown") == (5, 12) and carried(ctx, src, 3, "unknown", "animal") is None


@pytest.mark.parametrize("line, unit", [
    ("storm: 21:00", "21:00"), ("port:8080", "8080"), ('"size": "4 km",', "4 km"), ("x = 3", "3"),
    ("For the gale we have 15:30.", "For the gale we have 15:30."),  # a clock time, not a key
    ("It is 9:45 pm for the dock.", "It is 9:45 pm for the dock."),
])
def test_the_unit_a_gradient_peak_stands_for_is_a_value_or_the_whole_sentence(line, unit):
    """On a ``key: value`` line the value; in a sentence the sentence, even with a clock time in it
    (its colon once read as a key's, so that '30.' was followed instead of the sentence)."""
    from agentgrad.blame.facts import LINES

    a, b = LINES.unit("first line\n" + line + "\nlast", len("first line\n") + 1)
    assert ("first line\n" + line)[a:b] == unit


@pytest.mark.parametrize("topology", ["chain", "manager", "fanin"])
def test_stop_rule_finds_the_planted_source_where_earliest_does_not(topology, tiny_llama):
    from transformers import AutoTokenizer

    sc = IdealScorer(AutoTokenizer.from_pretrained(tiny_llama))
    stop = get_blame_method("gbc:max_l1:targeted:stop")
    earliest = get_blame_method("gbc:max_l1:targeted:earliest")
    hits = {"stop": 0, "earliest": 0}
    n = 8
    for seed in range(n):
        ep = E.generate(topology, "wrong_value", seed)
        ctx = BlameContext(E.without_truth(ep.trace), ep.loss, sc, seed)
        hits["stop"] += stop(ctx)[0].node == ep.truth["node"]
        hits["earliest"] += earliest(ctx)[0].node == ep.truth["node"]
    assert hits["stop"] == n  # with gradients that point where the value came from, the rule is exact
    assert hits["earliest"] < n  # the obvious rule blames the start of the path


@pytest.mark.parametrize("fault", ["wrong_value", "tool"])
@pytest.mark.parametrize("topology", E.TOPOLOGIES)
def test_carry_rule_is_exact_where_a_heavier_source_does_not_hold_the_fault(topology, fault, tiny_llama):
    """``carry`` follows the heaviest source that holds the wrong text. In a broadcast log the source
    heaviest overall may hold the key's earlier, right value: ``stop`` ends there, ``carry`` goes on."""
    from transformers import AutoTokenizer

    sc = IdealScorer(AutoTokenizer.from_pretrained(tiny_llama))
    carry = get_blame_method("gbc:max_l1:targeted:carry")
    n = 6
    hits = 0
    for seed in range(n):
        ep = E.generate(topology, fault, seed)
        hits += carry(BlameContext(E.without_truth(ep.trace), ep.loss, sc, seed))[0].node == ep.truth["node"]
    assert hits == n


def test_benchmark_runs_every_method_on_the_tiny_model(tiny_llama, tmp_path):
    from agentgrad.attribution.scorer import Scorer

    sc = Scorer(str(tiny_llama))
    methods = select_methods("all")
    m = run_benchmark(sc, methods, ["chain", "broadcast"], ["omitted"], 1, tmp_path / "B")
    assert set(m["groups"]["all"]) == set(methods) and m["episodes"] == 2
    rec = json.loads(next((tmp_path / "B" / "episodes").glob("*.json")).read_text())
    last = rec["methods"]["last"]["ranking"][0]["node"]
    assert all(b["node"] <= last for r in rec["methods"].values() for b in r["ranking"])  # all upstream of the loss
    for name, r in rec["methods"].items():
        assert 0.0 <= r["agent_top1"] <= 1.0
    # gradients were really taken (each pass is counted once, by the first method that needed it)
    assert sum(m["groups"]["all"][k]["backward"] for k in methods if k.startswith("gbc:")) >= 2
    assert m["groups"]["all"]["occlusion:whole:maxw"]["forward"] >= 1
    # the episode's wall time holds every method's passes, each run once: no less than the costliest
    # method alone, and well under the sum of what each method would cost on its own
    alone = [r["seconds"] for r in rec["methods"].values()]
    assert max(alone) - 0.05 <= rec["seconds"] < sum(alone) / 2
    assert m["seconds_per_episode"] > 0


def test_cli_bench_blame_and_errors(tiny_llama, tmp_path):
    rc, out, err = cli("bench", "blame", "--out", tmp_path / "B", "--scorer", tiny_llama, "--episodes", "1",
                       "--topology", "fanin", "--faults", "tool", "--methods", "last,random,gbc:mean_l1:whole")
    assert rc == 0, err
    metrics = json.loads((tmp_path / "B" / "metrics.json").read_text())
    assert metrics["episodes"] == 1 and "last" in out and "wall time per episode, the " in out
    # each episode's trace and whole-output attribution are kept for the report
    ep = next((tmp_path / "B" / "episodes").glob("*.json")).name
    att = json.loads((tmp_path / "B" / "attribution" / ep).read_text())
    assert (tmp_path / "B" / "traces" / ep).exists() and att["trajectories"] and att["loss"]["targets"]
    from agentgrad.report.html import render_report

    html, info = render_report(tmp_path / "B")
    assert info["shown"] == 1 and "Planted fault: agent" in html and "agent top-1 [95% CI]" in html
    for args, msg in [(["--topology", "ring"], "unknown topology"), (["--scorer", str(tmp_path)], "not a model folder"),
                      (["--methods", "bogus"], "unknown blame method"), (["--episodes", "0"], "--episodes")]:
        rc, _, err = cli("bench", "blame", "--out", tmp_path / "C", *args)
        assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1
    # model-free methods need no scorer (--scorer none); a method that reads one is refused, on one line
    rc, _, err = cli("bench", "blame", "--out", tmp_path / "C", "--scorer", "none", "--methods", "provenance:key,temporal")
    assert rc == 2 and "temporal needs a white-box model" in err and len(err.strip().splitlines()) == 1
    rc, out, err = cli("bench", "blame", "--out", tmp_path / "F", "--scorer", "none", "--episodes", "2",
                       "--faults", "transformed", "--methods", "provenance,provenance:key")
    assert rc == 0, err
    m = json.loads((tmp_path / "F" / "metrics.json").read_text())
    assert m["episodes"] == 8 and m["groups"]["all"]["provenance:key"]["agent_top1"]["value"] == 1.0
    assert m["groups"]["all"]["provenance"]["agent_top1"]["value"] < 0.5  # the rewritten text is nowhere upstream
    # misroutes: the key walk blames the worker that answered "unknown"; counting the call that first
    # states the key as a change (``:root``) blames the router. The name is printed as it is (no emoji)
    rc, out, err = cli("bench", "blame", "--out", tmp_path / "G", "--scorer", "none", "--episodes", "3",
                       "--faults", "misroute", "--methods", "provenance:key,provenance:key:root")
    assert rc == 0, err
    g = json.loads((tmp_path / "G" / "metrics.json").read_text())["groups"]["all"]
    assert g["provenance:key"]["agent_top1"]["value"] == 0.0 and g["provenance:key:root"]["agent_top1"]["value"] == 1.0
    assert "provenance:key:root" in out and "\N{KEY}" not in out
    # the same episodes in prose: the key walk has no key to read, and falls back to the string walk
    rc, out, err = cli("bench", "blame", "--out", tmp_path / "P", "--scorer", "none", "--episodes", "2", "--style",
                       "prose", "--faults", "transformed,misroute", "--methods", "provenance,provenance:key")
    assert rc == 0, err
    m = json.loads((tmp_path / "P" / "metrics.json").read_text())
    assert m["episodes"] == 8 and json.loads((tmp_path / "P" / "bench.json").read_text())["style"] == "prose"
    g = m["groups"]["all"]
    assert g["provenance:key"]["agent_top1"]["value"] == g["provenance"]["agent_top1"]["value"] < 0.5
    rc, _, err = cli("bench", "blame", "--out", tmp_path / "Q", "--scorer", "none", "--style", "poem")
    assert rc == 2 and "unknown --style 'poem'" in err and len(err.strip().splitlines()) == 1
    rc, _, err = cli("bench", "blame", "--out", tmp_path / "Q", "--scorer", "none", "--style", "prose",
                     "--faults", "misroute", "--methods", "provenance")
    assert rc == 2 and "no topology given can hold misroute in prose" in err and len(err.strip().splitlines()) == 1


def test_lookup_drills_are_answered_only_by_looking_up():
    """Every labelled word of a drill is what followed the word before it in the list of distinct words."""
    import random

    from agentgrad.benchmarks.planted.model import BlameModelConfig, _induction_batch

    batch = _induction_batch(BlameModelConfig(batch=16, induction_length=16), 4, 60, random.Random(3))
    assert len(batch) == 16
    for ids, labels in batch:
        assert len(ids) == len(labels) and all(4 <= t < 60 for t in ids)
        head = ids[: (len(ids) - 3) // 2]  # the word list is at least this long
        assert len(set(head)) == len(head) >= 6
        marked = [j for j, lab in enumerate(labels) if lab != -100]
        assert marked and all(j >= len(head) for j in marked)
        for j in marked:
            first = ids.index(ids[j - 1])  # the word before it, where the list holds it
            assert labels[j] == ids[j] == ids[first + 1] and first + 1 < j - 1


def test_trained_scorer_trains_saves_and_scores(tmp_path):
    from agentgrad.attribution.scorer import Scorer
    from agentgrad.benchmarks.planted.model import BlameModelConfig, train_blame_model

    small = dict(layers=1, hidden=32, steps=20, batch=4, eval_episodes=2)
    rep = train_blame_model(tmp_path / "M", BlameModelConfig(**small, max_seconds=None))
    assert 0.0 <= rep["heldout_token_accuracy"] <= 1.0 and rep["steps"] == 20 and not rep["time_capped"]
    # steps only: a second training is the same model, bit for bit, whatever the machine's load
    again = train_blame_model(tmp_path / "M2", BlameModelConfig(**small, max_seconds=None))
    assert (again["final_loss"], again["heldout_token_accuracy"]) == (rep["final_loss"], rep["heldout_token_accuracy"])
    assert (tmp_path / "M2" / "model.safetensors").read_bytes() == (tmp_path / "M" / "model.safetensors").read_bytes()
    capped = train_blame_model(tmp_path / "M3", BlameModelConfig(**small, max_seconds=1e-6))  # a budget stops it
    assert capped["time_capped"] and capped["steps"] < 20
    sc = Scorer(str(tmp_path / "M"))
    ep = E.generate("chain", "wrong_value", 0)
    res = sc.attribute_node(ep.trace, ep.trace.nodes[ep.loss.targets[0]], ep.loss.spans[ep.loss.targets[0]])
    assert res.sources and all(s.l1 and len(s.l1) == len(s.positions) for s in res.sources)
    whole = sc.attribute_node(ep.trace, ep.trace.nodes[ep.loss.targets[0]])
    assert whole.log_prob < res.log_prob  # fewer tokens scored: the targeted objective


@pytest.mark.parametrize("fault", E.COPIED)
@pytest.mark.parametrize("topology", E.TOPOLOGIES)
def test_temporal_credit_and_top2_find_the_planted_source_with_an_ideal_copier(topology, fault, tiny_llama):
    from transformers import AutoTokenizer

    sc = IdealScorer(AutoTokenizer.from_pretrained(tiny_llama))
    temporal, top2 = (get_blame_method(m) for m in ("temporal", "gbc:max_l1:targeted:top2"))
    hits = {"temporal": 0, "top2": 0}
    n = 6
    for seed in range(n):
        ep = E.generate(topology, fault, seed)
        cost = Cost()
        ctx = BlameContext(E.without_truth(ep.trace), ep.loss, sc, seed, meter=cost)
        hits["temporal"] += temporal(ctx)[0].node == ep.truth["node"]
        hits["top2"] += top2(ctx)[0].node == ep.truth["node"]
        assert cost.forward >= 1
    assert hits["temporal"] == n
    if fault == "wrong_value" and topology != "broadcast":
        assert hits["top2"] == n  # an exact gradient makes the top-2 walk with the stop test exact as well


def _reading_judge(messages, tools):
    """A scripted judge that really reads the log: the decisive step is the first whose output holds the
    wrong value the loss names. It answers with the JSON object each protocol asks for."""
    import re

    prompt = messages[1]["content"]  # the log and the question (a retry appends after it)
    wrong = re.search(r"but it says (.+)\.$", prompt.split("WHAT WENT WRONG: ")[1].split("\n")[0]).group(1)
    steps = re.findall(r"--- step (\d+): [^\n]*---\n((?:(?!--- step|WHAT WENT WRONG)[\s\S])*)", prompt)
    first = next((int(i) for i, text in steps if f": {wrong}" in text), None)  # None: not in the log shown
    question = prompt.split("WHAT WENT WRONG: ")[1]
    if "Which agent" in question:
        step = first or len(steps)
        agent = re.search(rf"--- step {step}: (?:agent|tool result) (.+?) ---", prompt).group(1)
        return json.dumps({"agent": agent, "step": step, "reason": "It is where the value first appears."})
    if "Is step" in question:
        i = int(re.search(r"Is step (\d+)", question).group(1))
        return json.dumps({"answer": "YES" if i == first else "NO", "reason": "It writes the wrong value."})
    lo, mid = (int(x) for x in re.search(r"lower half \(steps (\d+) to (\d+)\)", question).groups())
    return json.dumps({"half": "LOWER" if first is not None and first <= mid else "UPPER", "reason": ""})


@pytest.mark.slow  # over 3 s alone on 2 cores: out of the fast subset
def test_judge_methods_against_the_openai_compatible_server(tmp_path, tiny_llama, monkeypatch):
    from agentgrad.blame.judge import Judge, make_judge
    from agentgrad.models.fake import FakeModel
    from agentgrad.models.serve import OpenAICompatServer

    with OpenAICompatServer(FakeModel(responder=_reading_judge)) as srv:
        judge = Judge(make_judge(f"openai:judge@{srv.base_url}"))
        methods = select_methods("judge", judge=True)
        assert methods == ["judge:all_at_once", "judge:step_by_step", "judge:binary_search", "judge:hybrid"]
        m = run_benchmark(None, methods, ["chain", "broadcast"], ["wrong_value", "tool"], 3, tmp_path / "J",
                          judge=judge)
        for name in methods:
            assert m["groups"]["all"][name]["agent_top1"]["value"] == 1.0, name
            assert m["groups"]["all"][name]["judge_requests"] >= 1
        g = m["groups"]["all"]
        assert g["judge:all_at_once"]["judge_requests"] == 1
        assert g["judge:binary_search"]["judge_requests"] < g["judge:step_by_step"]["judge_requests"]
        assert g["judge:hybrid"]["judge_requests"] <= g["judge:step_by_step"]["judge_requests"] + 1
        rc, out, err = cli("bench", "blame", "--out", tmp_path / "C", "--scorer", tiny_llama, "--episodes", "1",
                           "--topology", "fanin", "--faults", "tool", "--methods", "judge:binary_search,last",
                           "--judge", f"openai:judge@{srv.base_url}")
        assert rc == 0, err
        rec = json.loads(next((tmp_path / "C" / "episodes").glob("*.json")).read_text())
        assert rec["methods"]["judge:binary_search"]["agent_top1"] == 1.0
    assert "judge:all_at_once" not in select_methods("all")
    with pytest.raises(ConfigError, match="--judge"):
        select_methods("judge:binary_search")
    rc, _, err = cli("bench", "blame", "--out", tmp_path / "D", "--methods", "judge")
    assert rc == 2 and "--judge" in err and len(err.strip().splitlines()) == 1
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    rc, _, err = cli("bench", "blame", "--out", tmp_path / "E", "--methods", "judge", "--judge", "openai:x")
    assert rc == 1 and "no API key" in err and not (tmp_path / "E").exists()  # refused before anything is written


def test_hybrid_judge_asks_about_the_named_agents_steps_only():
    """Hybrid (Who&When, Section 4.7): all-at-once names the agent (here with a wrong step), then
    step-by-step over that agent's steps finds the step; no other agent's step is asked about."""
    from agentgrad.blame.judge import Judge, steps_of
    from agentgrad.blame.methods import BlameContext, get_blame_method
    from agentgrad.models.fake import FakeModel

    ep = E.generate("chain", "wrong_value", 0)
    trace = E.without_truth(ep.trace)
    steps = steps_of(trace, ep.loss.targets[0])
    calls = [i for i, n in enumerate(steps, 1) if trace.nodes[n].kind == "call"]
    agent = trace.nodes[steps[calls[-1] - 1]].name  # the agent of the last call step
    own = [i for i in calls if trace.nodes[steps[i - 1]].name == agent]
    wanted = own[0]
    other = next(i for i in range(1, len(steps) + 1) if i != wanted)
    asked = []

    def judge(messages, tools):
        prompt = messages[1]["content"]
        if "Which agent" in prompt:
            return json.dumps({"agent": agent, "step": other, "reason": ""})
        i = int(prompt.split("Is step ")[1].split(" ")[0])
        asked.append(i)
        return json.dumps({"answer": "YES" if i == wanted else "NO", "reason": ""})

    j = Judge(FakeModel(responder=judge))
    (blame,) = get_blame_method("judge:hybrid")(BlameContext(trace, ep.loss, judge=j))
    assert (blame.agent, blame.node) == (agent, steps[wanted - 1])
    assert asked == [wanted] and j.requests == 2
    # the agent says no to every one of its steps: the step all-at-once named stays
    asked.clear()
    wanted = -1
    (blame,) = get_blame_method("judge:hybrid")(BlameContext(trace, ep.loss, judge=j))
    assert blame.node == steps[other - 1] and blame.agent == agent and asked == own


def test_judge_reply_that_does_not_parse_is_asked_again_then_an_error():
    from agentgrad.blame.judge import Judge, judge_blame
    from agentgrad.errors import ModelError
    from agentgrad.models.fake import FakeModel

    ep = E.generate("chain", "wrong_value", 0)
    trace = E.without_truth(ep.trace)
    steps = trace.upstream(ep.loss.targets[0])
    second = trace.nodes[sorted(steps)[1]].name
    # a backend that cannot constrain decoding (structured=False): the reply is parsed, and asked again
    model = FakeModel(["I think it is agent x.", json.dumps({"agent": second, "step": 2})], structured=False)
    judge = Judge(model)
    (node, _), = judge_blame(judge, trace, ep.loss, "all_at_once")
    assert node == sorted(steps)[1] and judge.requests == 2 and judge.named_agent == second
    assert judge.reasked == 1 and judge.unconstrained == 2 and judge.unparsed == 0
    # asked afresh (the bad reply is not shown back), for the verdict alone: no reason in the shape
    again = model.requests[1]
    assert len(again) == 2 and "did not follow the format" in again[-1]["content"]
    assert "I think" not in json.dumps(again) and '"reason"' not in again[-1]["content"]
    with pytest.raises(ModelError, match="does not parse"):  # the second shape has no reason: a reply with one fails
        judge_blame(Judge(FakeModel(["x", json.dumps({"agent": second, "step": 2, "reason": "."})], structured=False)),
                    trace, ep.loss, "all_at_once")
    with pytest.raises(ModelError, match="does not parse.*'no idea'"):
        judge_blame(Judge(FakeModel(["no idea", "no idea"], structured=False)), trace, ep.loss, "binary_search")
    # a step outside the log, or an agent that is not one of it, does not parse either
    for bad in ({"agent": second, "step": len(steps) + 1, "reason": ""}, {"agent": "nobody", "step": 1, "reason": ""}):
        j = Judge(FakeModel([json.dumps(bad)], cycle=True, structured=False))
        with pytest.raises(ModelError, match="does not parse"):
            judge_blame(j, trace, ep.loss, "all_at_once")


def test_bench_resume_reads_back_finished_episodes(tiny_llama, tmp_path):
    from agentgrad.attribution.scorer import Scorer

    sc = Scorer(str(tiny_llama))
    out = tmp_path / "R"
    first = run_benchmark(sc, ["last", "random"], ["chain"], ["tool"], 2, out, setup={"scorer": "tiny"})
    (out / "episodes" / "chain-tool-1.json").unlink()  # as if stopped before the second episode finished
    kept = out / "episodes" / "chain-tool-0.json"
    rec = json.loads(kept.read_text())
    rec["methods"]["last"]["agent_top1"] = 0.25  # a marker: read back, not run again
    kept.write_text(json.dumps(rec))
    again = run_benchmark(sc, ["last", "random"], ["chain"], ["tool"], 2, out, resume=True, setup={"scorer": "tiny"})
    assert (out / "episodes" / "chain-tool-1.json").exists()
    ep1 = json.loads((out / "episodes" / "chain-tool-1.json").read_text())["methods"]["last"]["agent_top1"]
    assert again["groups"]["all"]["last"]["agent_top1"]["value"] == pytest.approx((0.25 + ep1) / 2)
    assert again["groups"]["all"]["random"] == first["groups"]["all"]["random"]
    # a real scorer's record keeps the token under every objective, the contrast one paired with the targeted one
    assert set(rec["token"]) == {"whole", "targeted", "contrast"} and 0.0 <= rec["token"]["contrast"]["mass"] <= 1.0
    assert first["token"]["contrast"]["n"] == 2 and first["token"]["contrast"]["vs_targeted"]["l1"]["n"] == 2
    with pytest.raises(ConfigError, match="different scorer"):
        run_benchmark(sc, ["last"], ["chain"], ["tool"], 2, out, resume=True, setup={"scorer": "other"})


@pytest.mark.parametrize("topology", ["chain", "broadcast"])
def test_temporal_after_occlusion_reads_the_unoccluded_row_and_ranks_as_alone(topology, tiny_llama):
    """Occlusion's unoccluded row is the call's output log p: temporal credit after occlusion on the
    same episode uses it (no second forward pass) and ranks exactly as temporal credit alone."""
    from agentgrad.attribution.scorer import Scorer

    sc = Scorer(str(tiny_llama))
    temporal, occlusion = get_blame_method("temporal"), get_blame_method("occlusion:targeted:carry")
    reused = 0
    for seed in range(3):
        ep = E.generate(topology, "wrong_value", seed)
        alone_ctx = BlameContext(E.without_truth(ep.trace), ep.loss, sc, seed)
        alone = temporal(alone_ctx)
        ctx = BlameContext(E.without_truth(ep.trace), ep.loss, sc, seed)
        occlusion(ctx)
        occluded = [k[1] for k in ctx._cache if k[0] == "occlusion"]
        computed = []
        real = sc.output_logprobs
        sc.output_logprobs = lambda node: computed.append(node.id) or real(node)
        try:
            after = temporal(ctx)
        finally:
            sc.output_logprobs = real
        assert [(b.node, b.agent) for b in after] == [(b.node, b.agent) for b in alone]
        assert [b.score for b in after] == pytest.approx([b.score for b in alone], abs=1e-4)
        assert not set(computed) & set(occluded)  # no call whose occlusion was computed ran again
        reused += len({k[1] for k in ctx._cache if k[0] == "temporal credit"} & set(occluded))
        for n in occluded:
            if ctx._cache[("occlusion", n)][0] is not None:
                assert ctx._cache[("temporal credit", n)][0][1] == pytest.approx(
                    alone_ctx._cache[("temporal credit", n)][0][1], abs=1e-4)
    assert reused > 0  # temporal credit did read calls that occlusion had scored


def test_token_precision_by_hand_under_l1_and_abs_gxi():
    """The carrying source's tokens: a key (heavy L1, small |g.e|) then the value's two tokens; the
    L1 peak is the key (a miss), the |g.e| peak a value token (a hit); the summary pairs the two."""
    from types import SimpleNamespace as NS

    from agentgrad.benchmarks.planted.bench import token_precision, token_summary

    # source node 1's text "city: 15:30" sits at characters 100.. of the rendered call; its tokens
    # "city" (100-104), ":" (104-105), " 15" (105-108), ":30" (108-111); the corrupted value is "15:30" (6-11)
    src = NS(source=1, positions=[0, 1, 2, 3], l1=[9.0, 1.0, 4.0, 2.0], gxi=[0.5, -0.1, -3.0, 1.0])
    render = NS(text=" " * 100 + "city: 15:30", offsets=[(100, 104), (104, 105), (105, 108), (108, 111)],
                source_chars={1: [(100, 111)]})
    ctx = NS(loss=NS(spans={2: [(0, 7)]}), attribute=lambda node, region: NS(sources=[src]), render=lambda node: render)
    truth = {"path": [1, 2], "corrupted": {"1": [(6, 11)]}}
    t = token_precision(ctx, truth, "targeted")
    assert t["hit1"] == 0.0 and t["mass"] == pytest.approx(6 / 16)
    assert t["abs_gxi"]["hit1"] == 1.0 and t["abs_gxi"]["mass"] == pytest.approx(4.0 / 4.6)
    # signed g.e: the peak is ":30" (1.0 > 0.5 of "city"; " 15" pushes the other way), a hit; the
    # positive parts are 0.5 and 1.0, the value's 1.0 of them
    assert t["gxi"]["hit1"] == 1.0 and t["gxi"]["mass"] == pytest.approx(1.0 / 1.5)
    src.gxi = [0.5, -0.1, -3.0, 0.2]  # now the key pushes most: a miss, though |g.e| still hits
    flipped = token_precision(ctx, truth, "targeted")
    assert flipped["gxi"] == {"hit1": 0.0, "mass": pytest.approx(0.2 / 0.7)} and flipped["abs_gxi"]["hit1"] == 1.0
    src.gxi = [-0.5, -0.1, -3.0, -0.2]  # all negative: the least negative token is the peak, no share anywhere
    assert token_precision(ctx, truth, "targeted")["gxi"] == {"hit1": 0.0, "mass": 0.0}
    # among content tokens (a letter or a digit): the colon is skipped; L1's peak "city" is content (a miss)
    assert t["l1_content"] == {"hit1": 0.0, "mass": pytest.approx(6 / 16)}
    src.l1, src.gxi = [1.0, 9.0, 4.0, 2.0], [0.5, -5.0, -3.0, 0.2]  # the colon peaks under both scores
    c = token_precision(ctx, truth, "targeted")
    assert (c["hit1"], c["abs_gxi"]["hit1"]) == (0.0, 0.0) and (c["l1_content"]["hit1"], c["abs_gxi_content"]["hit1"]) == (1.0, 1.0)
    assert c["abs_gxi_content"]["mass"] == c["abs_gxi"]["mass"] == pytest.approx(3.2 / 8.7)  # the share over all tokens
    assert token_precision(ctx, {"path": [2], "corrupted": {}}, "targeted") is None  # a fault at the loss's call
    # two episodes: L1 hits 0 and 1, |g.e| hits 1 and 1: +0.5 over L1, one won, none lost
    recs = [{"token": {"targeted": t}}, {"token": {"targeted": {"hit1": 1.0, "mass": 0.5,
                                                                "abs_gxi": {"hit1": 1.0, "mass": 0.7}}}}]
    s = token_summary(recs)["targeted"]
    assert s["hit1"]["value"] == 0.5 and s["abs_gxi"]["hit1"]["value"] == 1.0 and s["abs_gxi"]["n"] == 2
    assert s["abs_gxi"]["mass"] == pytest.approx((4.0 / 4.6 + 0.7) / 2)
    d = s["abs_gxi"]["vs_l1"]
    assert d["diff"] == 0.5 and (d["wins"], d["losses"]) == (1, 0)


def test_word_scores_sum_a_words_tokens_and_the_longest_word_is_their_control():
    """Words by hand: a word starts after white space; a value in digits is one word of many tokens.
    The word scores pick the word with the largest summed score (a hit where most of its content
    tokens are in the value); ``longest_word`` picks by length alone (no model); the summary pairs a
    word score with that control and with its own peak content token."""
    from types import SimpleNamespace as NS

    from agentgrad.benchmarks.planted.bench import token_precision, token_summary, word_hit, words_of

    toks = ["shop", ":", " giant", " ribbon", "\n", "storm", ":", " ", "1", "5", ":", "3", "0", "\n"]
    assert words_of(toks) == [0, 0, 1, 2, 3, 4, 4, 5, 6, 6, 6, 6, 6, 7]
    assert words_of(["a ", "b", "c"]) == [0, 1, 1] and words_of([]) == []
    # "city: 15:30": the key "city" (+ its colon) is one word, " 15" ":30" the other (the value)
    src = NS(source=1, positions=[0, 1, 2, 3], l1=[5.0, 1.0, 4.0, 2.0], gxi=[9.0, 0.0, 4.0, 2.0])
    render = NS(text=" " * 100 + "city: 15:30", offsets=[(100, 104), (104, 105), (105, 108), (108, 111)],
                source_chars={1: [(100, 111)]})
    ctx = NS(loss=NS(spans={2: [(0, 7)]}), attribute=lambda node, region: NS(sources=[src]), render=lambda node: render)
    t = token_precision(ctx, {"path": [1, 2], "corrupted": {"1": [(6, 11)]}}, "targeted")
    # L1: the peak token is "city" (5 > 4), a miss; summed per word the value wins (4 + 2 = 6 > 5), a hit
    assert t["l1_content"]["hit1"] == 0.0 and t["l1_word"] == {"hit1": 1.0, "mass": pytest.approx(6 / 12)}
    # |g.e|: "city" 9 against the value's 4 + 2 = 6: a miss by word as by token
    assert t["abs_gxi_word"]["hit1"] == 0.0 and t["abs_gxi_content"]["hit1"] == 0.0
    assert t["longest_word"] == {"hit1": 1.0, "mass": 0.5}  # the value has two content tokens, the key one
    # a word wins by its sum, and it is a hit only where most of its content tokens are in the value
    assert word_hit([1.0, 1.0, 1.0], [True, False, False], ["a", "b", "c"])["hit1"] == 0.0
    assert word_hit([1.0, 1.0, 1.0], [True, True, False], ["a", "b", "c"])["hit1"] == 1.0
    assert word_hit([3.0, 0.0, 1.0, 1.0], [True, False, False, False], ["x", " y", "z", " w"])["hit1"] == 1.0
    # the summary: l1_word 1, 1 against longest_word 1, 0 (+0.5, one won) and l1_content 0, 0 (+1.0, two won)
    other = {"hit1": 0.0, "mass": 0.2, "l1_content": {"hit1": 0.0, "mass": 0.2}, "l1_word": {"hit1": 1.0, "mass": 0.2},
             "longest_word": {"hit1": 0.0, "mass": 0.3}}
    s = token_summary([{"token": {"targeted": t}}, {"token": {"targeted": other}}])["targeted"]
    assert s["l1_word"]["hit1"]["value"] == 1.0 and s["longest_word"]["hit1"]["value"] == 0.5
    assert (s["l1_word"]["vs_longest_word"]["diff"], s["l1_word"]["vs_longest_word"]["wins"]) == (0.5, 1)
    assert (s["l1_word"]["vs_content"]["diff"], s["l1_word"]["vs_content"]["wins"]) == (1.0, 2)
    assert "vs_longest_word" not in s["longest_word"] and "vs_content" not in s["l1_content"]


def test_value_word_skips_a_lines_key_and_its_control_is_the_longest_value_word():
    """``l1_value_word``, by hand: in ``coin: calm valley`` lines the peak word is taken among the words
    that are not a line's key (no colon before them on the line, one after); the summary pairs it with
    its control ``longest_value_word`` and with ``l1_word``. A sentence has no key."""
    from types import SimpleNamespace as NS

    from agentgrad.benchmarks.planted.bench import is_key, token_precision, token_summary, value_groups, word_groups

    toks = ["coin", ":", " calm", " valley", "\n", "bank", ":", " 1", "4", ":", "3", "0"]
    groups = word_groups(toks)
    assert [is_key(toks, g) for g in groups] == [True, False, False, True, False]  # coin, calm, valley, bank, 14:30
    prose = ["The", " storm", " is", " at", " 1", "4", ":", "3", "0", "."]  # a colon a digit follows: no key
    assert not any(is_key(prose, g) for g in word_groups(prose))
    label = ["Phone", " number", ":", " 5", "\n", "x", ":"]  # a key of two words; one that ends its line
    assert [is_key(label, g) for g in word_groups(label)] == [True, True, False, True]
    assert value_groups(["a", ":"], word_groups(["a", ":"])) == [[0]]  # every word a key: all of them
    assert not is_key(["x", ":", " y", ":"], [2])  # after the line's first colon: a value
    # a token that opens its line with a newline; a colon inside the key's token; CRLF; a tab
    nl = ["coin", ":", " a", "\nbank", ":", " b"]
    assert [is_key(nl, g) for g in word_groups(nl)] == [True, False, True, False]
    assert [is_key(t, g) for t in (["time:", " x"], ["Phone", " number:", " 5"]) for g in word_groups(t)] == \
        [True, False, True, True, False]
    assert [is_key(t, g) for t in (["x", ":\r\n", "y", ":\t", "z"],) for g in word_groups(t)] == [True, True, False]
    assert not any(is_key(t, g) for t in (["at", " 14", ":", "30", " note", ":", " x"],) for g in word_groups(t))
    text = "coin: calm valley\nbank: 14:30"
    offsets, at = [], 100
    for t in toks:
        offsets.append((at, at + len(t)))
        at += len(t)
    # L1: the key "coin" 9 tops every word (a miss by word); among the values " calm" 5 leads (a hit)
    src = NS(source=1, positions=list(range(len(toks))), l1=[9.0, 1.0, 5.0, 3.0, 0.1, 1.0, 0.1, 0.5, 0.5, 0.1, 0.5, 0.5],
             gxi=[0.0] * len(toks))
    render = NS(text=" " * 100 + text, offsets=offsets, source_chars={1: [(100, 100 + len(text))]})
    ctx = NS(loss=NS(spans={2: [(0, 7)]}), attribute=lambda node, region: NS(sources=[src]), render=lambda node: render)
    t = token_precision(ctx, {"path": [1, 2], "corrupted": {"1": [(6, 17)]}}, "targeted")  # "calm valley"
    assert t["l1_word"]["hit1"] == 0.0 and t["l1_value_word"]["hit1"] == 1.0
    assert t["longest_word"]["hit1"] == 0.0 and t["longest_value_word"]["hit1"] == 0.0  # "14:30": four digits
    other = {"hit1": 0.0, "mass": 0.2, "l1_word": {"hit1": 1.0, "mass": 0.2}, "l1_value_word": {"hit1": 1.0, "mass": 0.2},
             "longest_word": {"hit1": 0.0, "mass": 0.3}, "longest_value_word": {"hit1": 1.0, "mass": 0.3}}
    s = token_summary([{"token": {"targeted": t}}, {"token": {"targeted": other}}])["targeted"]
    assert s["l1_value_word"]["hit1"]["value"] == 1.0 and s["longest_value_word"]["hit1"]["value"] == 0.5
    assert (s["l1_value_word"]["vs_longest_value_word"]["diff"], s["l1_value_word"]["vs_longest_value_word"]["wins"]) == (0.5, 1)
    assert (s["l1_value_word"]["vs_word"]["diff"], s["l1_value_word"]["vs_word"]["wins"]) == (0.5, 1)
    assert "vs_word" not in s["longest_value_word"]


def test_token_candidates_scores_a_dump_by_hand(tmp_path):
    """benchmarks/token_candidates.py score: two hand-made episodes ("city: 15:30" in four tokens)."""
    from pathlib import Path

    toks, inside = ["city", ":", " 15", ":30"], [False, False, True, True]
    # episode 1: targeted L1 peaks on "city" (a miss by token), but the value's word sums higher (a hit)
    one = {"tokens": toks, "inside": inside, "targeted": {"l1": [5.0, 1.0, 4.0, 2.0], "gxi": [9.0, 0.0, 4.0, 2.0]},
           "contrast": {"l1": [1.0, 1.0, 4.0, 2.0], "gxi": [1.0, 0.0, 4.0, 2.0]}}
    # episode 2: the key wins everywhere
    two = {"tokens": toks, "inside": inside, "targeted": {"l1": [9.0, 1.0, 1.0, 1.0], "gxi": [9.0, 0.0, 1.0, 1.0]},
           "contrast": {"l1": [9.0, 1.0, 1.0, 1.0], "gxi": [9.0, 0.0, 1.0, 1.0]}}
    dump = tmp_path / "d.jsonl"
    dump.write_text(json.dumps(one) + "\n" + json.dumps(two) + "\n")
    script = ROOT / "benchmarks" / "token_candidates.py"
    out = run_script(str(script), "score", str(dump))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("2 episodes (")
    for line in ("| `targeted/l1/token` | 0.00 |", "| `targeted/l1/word_sum` | 0.50 |", "| `contrast/l1/token` | 0.50 |",
                 "| `targeted/abs_gxi/word_sum` | 0.00 |", "| `control/longest_word` | 1.00 |",
                 "| `control/random_word` | 0.50 |", "| `control/random_content_token` | 0.67 |",
                 # "city" is the line's key: among the other words only the value is left
                 "| `targeted/l1/value_word_sum` | 1.00 |", "| `control/longest_value_word` | 1.00 |",
                 # by cell (one file, no topology): the worst cell is the only one
                 "| `targeted/l1/word_sum` | 0.50 | 0.50 |"):
        assert line in out.stdout, line
    # where targeted/l1/word_sum misses (episode 2): on "city", the key of the value's own line
    why = run_script(str(script), "score", str(dump), "--explain", "targeted/l1/word_sum")
    assert why.returncode == 0 and "| d | 2 | 1 | 1 | 0 | 0 |" in why.stdout, why.stdout + why.stderr
    # the other outcomes, by hand: a miss on another line's key, and on another value
    import importlib.util

    spec = importlib.util.spec_from_file_location("token_candidates", script)
    tc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tc)
    rec = {"tokens": ["a", ":", " x", "\nb", ":", " y", " z"], "inside": [False, False, True, False, False, False, False]}
    assert [tc.miss_kind(rec, g) for g in ([0], [3], [5])] == ["own key", "other key", "other value"]
    bad_explain = run_script(str(script), "score", str(dump), "--explain", "targeted/l1")
    assert bad_explain.returncode == 1 and "--explain takes a word candidate" in bad_explain.stderr
    assert bad_explain.stdout == ""  # refused before any table
    # paired on the same episodes: the value word hits twice, the word once (+0.50, one won, none lost)
    pr = run_script(str(script), "score", str(dump), "--pair", "targeted/l1/value_word_sum,targeted/l1/word_sum")
    row = "| `targeted/l1/value_word_sum` | `targeted/l1/word_sum` | d | 2 | 1.00 | 0.50 | +0.50 ["
    assert pr.returncode == 0 and row in pr.stdout and pr.stdout.rstrip().endswith("| 1 | 0 | 1 |"), pr.stdout
    for bad_pair in ("targeted/l1/word_sum", "targeted/l1/word_sum,nothing"):
        bp = run_script(str(script), "score", str(dump), "--pair", bad_pair)
        assert bp.returncode == 1 and "--pair" in bp.stderr and "Traceback" not in bp.stderr
    bad = run_script(str(script), "score", str(tmp_path / "none.jsonl"))
    assert bad.returncode == 1 and "cannot read" in bad.stderr and "Traceback" not in bad.stderr
    short = tmp_path / "short.jsonl"  # scores shorter than the tokens
    short.write_text(json.dumps({**one, "targeted": {"l1": [1.0], "gxi": [1.0]}}) + "\n")
    bad = run_script(str(script), "score", str(short))
    assert bad.returncode == 1 and "line 1 is not an episode" in bad.stderr and "Traceback" not in bad.stderr


def test_token_precision_under_the_contrast_objective_reads_the_contrast_gradient():
    """``contrast``: the loss's span against its expected answer; the attribution asked for is the
    contrastive one (the context's objective inside the call), on the span; none without an expected answer."""
    from types import SimpleNamespace as NS

    from agentgrad.benchmarks.planted.bench import token_precision

    asked = []
    by_objective = {"targeted": NS(source=1, positions=[0, 1], l1=[9.0, 1.0], gxi=[1.0, 1.0]),
                    "contrast": NS(source=1, positions=[0, 1], l1=[1.0, 9.0], gxi=[1.0, 1.0])}
    ctx = NS(objective="targeted", render=lambda node: NS(text=" " * 100 + "time 16:00", offsets=[(100, 104), (104, 109)],
                                                          source_chars={1: [(100, 109)]}))

    def attribute(node, region, objective=None):
        asked.append((objective or ctx.objective, node, region))
        return NS(sources=[by_objective[objective or ctx.objective]])

    ctx.attribute = attribute
    ctx.contrasts = lambda: bool(ctx.loss.details.get("expected"))  # as BlameContext.contrasts, for a scorer that takes one
    ctx.loss = NS(spans={2: [(3, 8)]}, details={"expected": "4 pm"})
    truth = {"path": [1, 2], "corrupted": {"1": [(4, 9)]}}  # the value: characters 104-109
    assert token_precision(ctx, truth, "targeted")["hit1"] == 0.0
    assert token_precision(ctx, truth, "contrast")["hit1"] == 1.0 and ctx.objective == "targeted"
    assert asked == [("targeted", 2, ((3, 8),)), ("contrast", 2, ((3, 8),))]
    ctx.loss.details = {}
    assert token_precision(ctx, truth, "contrast") is None and len(asked) == 2


def test_blame_table_prints_each_family_with_its_token_hit_under_l1_and_abs_gxi(tmp_path):
    """benchmarks/blame_table.py on a metrics.json made by summarize from hand records."""
    from pathlib import Path

    def rec(topo, m, p, hit, ghit):
        return {"topology": topo, "fault": "transformed", "long": False, "candidates": 4,
                "methods": {"gbc:max_l1:targeted:follow": {"agent_top1": m, "node_top1": m, "agent_top3": 1.0},
                            "provenance": {"agent_top1": p, "node_top1": p, "agent_top3": 1.0}},
                "token": {"targeted": {"hit1": hit, "mass": 0.3, "abs_gxi": {"hit1": ghit, "mass": 0.6},
                                       "gxi": {"hit1": 0.0, "mass": 0.1}, "l1_content": {"hit1": hit, "mass": 0.3},
                                       "l1_word": {"hit1": ghit, "mass": 0.3}, "longest_word": {"hit1": 0.0, "mass": 0.2}},
                          # the contrast objective: L1 hits all four, |g.e| as the targeted one's, signed g.e
                          # hits where the targeted L1 does
                          "contrast": {"hit1": 1.0, "mass": 0.5, "abs_gxi": {"hit1": ghit, "mass": 0.6},
                                       "gxi": {"hit1": hit, "mass": 0.4}}}}

    recs = [rec("chain", 1.0, 0.0, 0.0, 1.0), rec("chain", 1.0, 0.0, 1.0, 1.0), rec("fanin", 0.0, 0.0, 0.0, 0.0),
            rec("fanin", 1.0, 1.0, 0.0, 1.0)]
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(summarize(recs, ["gbc:max_l1:targeted:follow", "provenance"])))
    script = ROOT / "benchmarks" / "blame_table.py"
    out = run_script(str(script), str(path), "--compact")
    assert out.returncode == 0, out.stderr
    assert "### transformed (4 episodes: chain 2, fanin 2)" in out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("| `gbc:max_l1:targeted:follow`"))
    assert row.startswith("| `gbc:max_l1:targeted:follow` | 1.00 | 0.50 | 0.75 [")  # 3 of 4
    assert "+0.50 [" in row and "(2 won, 0 lost, p 0.50)" in row  # against provenance 1 of 4
    assert "Token hit@1 (targeted objective, the source that carried the value into the loss's call): 0.25 [" in out.stdout
    assert "By |gradient x input|: 0.75 [" in out.stdout and "against L1 +0.50 [" in out.stdout
    assert "(2 won, 0 lost, p 0.50)" in out.stdout.split("By |gradient x input|")[1]
    signed = next(line for line in out.stdout.splitlines() if line.startswith("By signed gradient x input"))
    assert ": 0.00 [" in signed and "mass 0.10" in signed and "against L1 -0.25 [" in signed and "(0 won, 1 lost" in signed
    word = next(line for line in out.stdout.splitlines() if line.startswith("By L1 summed over each word"))
    assert ": 0.75 [" in word and "against L1 +0.50 [" in word and "against the longest word +0.75 [" in word
    assert "(3 won, 0 lost" in word.split("longest word")[1] and "against its peak content token +0.50 [" in word
    assert "By the longest word (no model): 0.00 [" in out.stdout
    con = [line for line in out.stdout.splitlines() if line.startswith("Token hit@1, contrast objective")]
    assert len(con) == 3 and "by L1: 1.00 [" in con[0] and "against targeted +0.75 [" in con[0]
    assert "(3 won, 0 lost, p 0.25)" in con[0]
    assert "by |gradient x input|: 0.75 [" in con[1] and "against targeted +0.00 [" in con[1] and "(0 won, 0 lost" in con[1]
    assert "by signed gradient x input: 0.25 [" in con[2] and "against targeted +0.25 [" in con[2] and "(1 won, 0 lost" in con[2]
    # --keep writes the episode records compact; the tables read back from them are the same
    (tmp_path / "episodes").mkdir()
    tied = [{"agent": "a", "node": 1, "score": 2.0}, {"agent": "b", "node": 2, "score": 2.0}, {"agent": "a", "node": 3, "score": 2.0},
            {"agent": "c", "node": 4, "score": 1.0}]  # the first episode's rankings: a and b tied at the top
    for i, r in enumerate(recs):
        methods = {m: {**v, "ranking": tied} for m, v in r["methods"].items()} if i == 0 else r["methods"]
        (tmp_path / "episodes" / f"e{i}.json").write_text(json.dumps({**r, "methods": methods, "episode": f"e{i}",
                                                                      "loss": {"x": 1}}))
    kept = tmp_path / "kept.jsonl"
    again = run_script(str(script), str(path), "--compact", "--keep", str(kept))
    assert again.returncode == 0 and again.stdout == out.stdout and "kept 4 episode records" in again.stderr
    lines = [json.loads(x) for x in kept.read_text().splitlines()]
    assert [x["episode"] for x in lines] == ["e0", "e1", "e2", "e3"] and "loss" not in lines[0]
    # the agents a method names (tied at its top score) are kept from its ranking; none where it has none
    assert all(v["top"] == ["a", "b"] and "ranking" not in v for v in lines[0]["methods"].values())
    assert all("top" not in v for v in lines[1]["methods"].values())
    back = run_script(str(script), str(kept), "--compact")
    assert back.returncode == 0 and back.stdout == out.stdout, back.stderr
    tp = run_script(str(script), str(kept), "--token-pair", "targeted:l1_word,targeted:longest_word",
                         "--token-pair", "targeted:abs_gxi,targeted:l1")
    assert tp.returncode == 0, tp.stderr
    assert "`targeted:l1_word` against `targeted:longest_word` (token hit@1, paired" in tp.stdout
    rows = [line for line in tp.stdout.splitlines() if line.startswith("| transformed |")]
    assert rows[0].startswith("| transformed | +0.75 [") and "(3 won, 0 lost, p 0.25; n 4)" in rows[0]
    assert "| +1.00 (2/0) | +0.50 (1/0) |" in rows[0]  # chain, fan-in
    assert rows[1].startswith("| transformed | +0.50 [") and "(2 won, 0 lost" in rows[1]  # |g.e| 3 of 4, L1 1 of 4
    for bad_pair in ("targeted:l1_word", "l1_word,targeted:l1", "targeted:,targeted:l1"):
        bad_tp = run_script(str(script), str(kept), "--token-pair", bad_pair)
        assert bad_tp.returncode == 1 and "--token-pair takes two OBJECTIVE:SCORE names" in bad_tp.stderr
    none_tp = run_script(str(script), str(kept), "--token-pair", "whole:l1,targeted:l1")
    assert none_tp.returncode == 1 and "no episode record holds both 'whole:l1'" in none_tp.stderr
    same = run_script(str(script), str(kept), "--keep", str(kept))
    assert same.returncode == 1 and "would overwrite" in same.stderr and kept.read_text().count("\n") == 4
    bad = run_script(str(script), str(tmp_path / "none.json"))
    assert bad.returncode == 1 and "is not a bench blame metrics.json" in bad.stderr and "Traceback" not in bad.stderr
    # --join adds another run's methods on the same episodes (a model-free run), paired with the rest
    free = tmp_path / "free.jsonl"
    free.write_text("".join(json.dumps({"episode": f"e{i}", "methods": {"provenance:key": {
        "agent_top1": 1.0, "node_top1": 1.0, "agent_top3": 1.0}}}) + "\n" for i in range(4)))
    joined = run_script(str(script), str(kept), "--compact", "--join", str(free))
    assert joined.returncode == 0, joined.stderr
    key_row = next(line for line in joined.stdout.splitlines() if line.startswith("| `provenance:key`"))
    assert key_row.startswith("| `provenance:key` | 1.00 | 1.00 | 1.00 [") and "(3 won, 0 lost" in key_row
    row = next(line for line in joined.stdout.splitlines() if line.startswith("| `gbc:max_l1:targeted:follow`"))
    assert row.endswith("-0.25 vs `provenance:key` (p 1.00) |")  # the best model-free method is now the key walk
    free.write_text(free.read_text().split("\n", 1)[1])  # e0 missing
    short = run_script(str(script), str(kept), "--join", str(free))
    assert short.returncode == 1 and "has no episode e0" in short.stderr and "Traceback" not in short.stderr
    onjson = run_script(str(script), str(path), "--join", str(free))
    assert onjson.returncode == 1 and "--join adds to kept records" in onjson.stderr
    # --pair: one method against another on the same episodes, per family and topology (hand-worked:
    # follow 1,1 | 0,1 against provenance 0,0 | 0,1: chain +1.00 with 2 won, fan-in level)
    for src in (kept, path):  # kept records, or the episode records beside a metrics.json
        pair = run_script(str(script), str(src), "--pair", "gbc:max_l1:targeted:follow,provenance")
        assert pair.returncode == 0, pair.stderr
        line = next(x for x in pair.stdout.splitlines() if x.startswith("| transformed |"))
        assert line.startswith("| transformed | +0.50 [") and "(2 won, 0 lost, p 0.50; n 4)" in line
        assert line.endswith("| +1.00 (2/0) | +0.00 (0/0) | - | - |")
    nopair = run_script(str(script), str(kept), "--pair", "provenance")
    assert nopair.returncode == 1 and "--pair takes two method names" in nopair.stderr
    unknown = run_script(str(script), str(kept), "--pair", "provenance,temporal")
    assert unknown.returncode == 1 and "has no method 'temporal'" in unknown.stderr and "Traceback" not in unknown.stderr
    # --join-suffix: the joined run's methods named METHOD@SUFFIX, so a rule pairs with itself before a change
    # (hand-worked: provenance now 0,0 | 0,1; before 1,1 | 0,1: -1.00 on chain with 2 lost)
    before = tmp_path / "before.jsonl"
    before.write_text("".join(json.dumps({"episode": f"e{i}", "truth": lines[i].get("truth"), "methods": {
        "provenance": {"agent_top1": [1.0, 1.0, 0.0, 1.0][i], "node_top1": 1.0, "agent_top3": 1.0}}}) + "\n"
        for i in range(4)))
    suffixed = run_script(str(script), str(kept), "--compact", "--join", str(before),
                               "--join-suffix", "old", "--pair", "provenance,provenance@old")
    assert suffixed.returncode == 0, suffixed.stderr
    assert any(x.startswith("| `provenance@old` | 1.00 | 0.50 | 0.75 [") for x in suffixed.stdout.splitlines())
    line = next(x for x in suffixed.stdout.splitlines() if x.startswith("| transformed |"))
    assert line.startswith("| transformed | -0.50 [") and "(0 won, 2 lost, p 0.50; n 4)" in line
    assert line.endswith("| -1.00 (0/2) | +0.00 (0/0) | - | - |")
    alone = run_script(str(script), str(kept), "--join-suffix", "old")
    assert alone.returncode == 1 and "--join-suffix names the methods of one --join file" in alone.stderr
    comma = run_script(str(script), str(kept), "--join", str(before), "--join-suffix", "a,b")
    assert comma.returncode == 1 and "cannot hold a comma" in comma.stderr and "Traceback" not in comma.stderr
