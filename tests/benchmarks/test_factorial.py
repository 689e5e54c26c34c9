"""The factorial repair ablation (docs/ablation-factorial.md): one edit operator, which agent x which line crossed; the
long prompt set; the memo of scores by prompts; the compact records and their table."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from agentgrad.benchmarks.ablation import bench as B
from agentgrad.benchmarks.ablation.cases import LONG_PROMPTS, PROMPT_SETS, SYSTEMS, Case, cases, system_data
from agentgrad.benchmarks.ablation.defects import plant
from agentgrad.benchmarks.ablation.grid import run_ablation
from agentgrad.benchmarks.ablation.records import read_records
from agentgrad.benchmarks.ablation.summary import (CONTRASTS, compare_arms, detectable, discordant,
                                                   factorial_markdown, share_of)
from agentgrad.blame.backward import VerbalLoss
from agentgrad.blame.methods import DEFAULT_METHOD
from conftest import ROOT, run_script
from agentgrad.cli import main
from agentgrad.core.agent import Prompt
from agentgrad.optim.edit import LINE_RULES, EditOptimizer, sentences, string_scores
from agentgrad.optim.optimizer import Failure, StepInput



def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def test_the_cells_are_the_cross_product_and_each_uses_the_one_edit_operator(tmp_path):
    agents = {"gbc": DEFAULT_METHOD, "provenance": "provenance", "random": "random", "oracle": "agent:reader"}
    assert set(B.CELLS) == {f"{a}/{r}" for a in agents for r in ("grad", "string", "random_line")}
    assert len(B.CELLS) == 12 and B.FACTORIAL == [*B.CELLS, "noop"] and not set(B.CELLS) & set(B.ARMS)
    bench = B.Ablation(tmp_path / "o", "tiny", "llm", None, 1, 2, 2, 2, 2, lambda m: None)  # --optimizer llm ignored
    for cell in B.CELLS:
        agent, line = cell.split("/")
        opt = bench.optimizer(cell, 3)
        assert type(opt) is EditOptimizer and opt.line == line and opt.seed == 3
        assert B.blame_of(cell, "reader") == agents[agent]
    assert type(bench.optimizer("gbc", 0)) is not EditOptimizer  # the old arms keep their --optimizer
    with pytest.raises(ValueError):
        EditOptimizer(line="best")


def _step(text: str, produced: list[str], scores: list[list[tuple[int, int, float]]] | None = None,
          protected: tuple[str, ...] = ()) -> StepInput:
    fails = [Failure(f"s{i}", VerbalLoss.generic("Oslo", p, "wrong", [0])) for i, p in enumerate(produced)]
    return StepInput(prompts={"a": Prompt(text, protected=tuple(protected))}, tools={"a": []}, blamed=["a"],
                     feedback="", failures=fails, prompt_scores={"a": scores or []})


PROMPT = ("You read a record and answer with the value only.\n"
          "Always mention that our Paris office is open on Sundays.\n"
          "Keep a friendly tone.\n"
          "Reply with the answer only.\n")


def test_each_line_rule_on_a_hand_made_prompt():
    lines = [PROMPT[a:b] for a, b in sentences(PROMPT)]
    # string: the line sharing most content words with the wrong outputs ("office", "open", "sundays", "paris")
    inp = _step(PROMPT, ["Oslo. Our Paris office is open on Sundays.", "The office is open."])
    assert string_scores(PROMPT, ["Our Paris office is open on Sundays."]) == [0, 4, 0, 0]
    res = EditOptimizer(line="string").step(inp)
    assert res.prompts["a"] == PROMPT.replace(lines[1] + "\n", "") and "string share" in res.notes[0]
    # a protected line is never chosen, even when it shares most ("reply", "answer", "only")
    res = EditOptimizer(line="string").step(_step(PROMPT, ["Reply answer only"], protected=("Reply with the answer only.",)))
    assert res.prompts["a"] == PROMPT.replace(lines[0] + "\n", "")  # "answer", "only" shared by line 0 too
    # no line shares a word: a random line, the same for the same seed, and over seeds more than one
    none = _step(PROMPT, ["Oslo", "Lima"])
    picks = {s: EditOptimizer(line="string", seed=s).step(none).prompts["a"] for s in range(12)}
    assert EditOptimizer(line="string", seed=5).step(none).prompts["a"] == picks[5]
    assert len(set(picks.values())) > 1 and all("random line" in EditOptimizer(line="string", seed=s).step(none).notes[0]
                                                for s in range(3))
    assert all(p.count("\n") == 3 for p in picks.values())  # one line removed
    # random_line ignores the words: seeds pick different lines, one line removed each time
    rnd = {EditOptimizer(line="random_line", seed=s).step(inp).prompts["a"] for s in range(12)}
    assert len(rnd) > 1 and all(p.count("\n") == 3 for p in rnd)
    # grad: the line the gradient points at (line 2 has the largest token), not the one sharing words
    a2 = PROMPT.index("Keep")
    grad = [[(0, 3, 0.1), (a2, a2 + 4, 0.9), (PROMPT.index("Paris"), PROMPT.index("Paris") + 5, 0.2)]]
    res = EditOptimizer().step(_step(PROMPT, ["Our Paris office is open on Sundays."], grad))
    assert res.prompts["a"] == PROMPT.replace("Keep a friendly tone.\n", "") and "gradient share" in res.notes[0]
    assert EditOptimizer(line="grad").step(_step(PROMPT, ["x"], grad)).prompts == res.prompts
    # no gradient: the same fallback for the gradient rule as before (Warning bullets)
    assert "Warning bullets" in EditOptimizer().step(_step(PROMPT, ["x"])).notes[0]


@pytest.mark.slow  # over 3 s alone on 2 cores: out of the fast subset
def test_gbc_grad_on_the_tiny_model_is_the_gbc_arm_under_the_edit_optimizer(tmp_path):
    case = cases(["pipeline"], ["stale_example"], 1, 1, 1)[0]
    base = {"clean_test": 1.0, "bugged_test": 0.0}
    rows = {}
    for arm in ("gbc", "gbc/grad"):
        bench = B.Ablation(tmp_path / arm.replace("/", "+"), "tiny", "edit", None, 2, 4, 2, 4, 4, lambda m: None)
        rows[arm] = bench.run_one(case, base, arm, 0)
    volatile = ("method", "seconds", "calls", "generated")
    assert rows["gbc"]["step_notes"] and any("removed" in n for s in rows["gbc"]["step_notes"] for n in s["notes"])
    assert {k: v for k, v in rows["gbc"].items() if k not in volatile} == \
        {k: v for k, v in rows["gbc/grad"].items() if k not in volatile}
    # an agent chosen without the gradient (random, provenance) still gets the gradient's line: the
    # trainer attributes every failure and the blamed call is on its trajectory
    for arm in ("random/grad", "provenance/grad"):
        row = bench.run_one(case, base, arm, 0)
        notes = [n for s in row["step_notes"] for n in s["notes"]]
        assert notes and "gradient share" in notes[0], (arm, notes)  # later: Warning bullets once no line is free


def test_the_memo_scores_the_same_prompts_once_and_the_gate_reads_it(tmp_path):
    case = cases(["pipeline"], ["stale_example"], 1, 1, 1)[0]
    bench = B.Ablation(tmp_path / "o", "tiny", "edit", None, 1, 2, 3, 4, 4, lambda m: None)
    prompts = {"reader": "You read a record.\nAnswer with the value only.\n"}
    first = bench.vector(case, prompts, "val", 3)
    generated = bench.model.generated
    assert bench.vector(case, dict(prompts), "val", 3) == first and bench.model.generated == generated
    assert bench.vector(case, None, "val", 3) is not None and bench.model.generated > generated  # other prompts
    again = B.Ablation(tmp_path / "o", "tiny", "edit", None, 1, 2, 3, 4, 4, lambda m: None)  # a later chunk
    assert again._scores == bench._scores and again.vector(case, prompts, "val", 3) == first
    # the trainer's gate is the memo's score of its current prompts
    seen = []
    trainer = B._GatedTrainer(bench.task(case), bench.scorer, B.NoopOptimizer(),
                              B.validate(B.TrainerConfig, {"samples": 2, "step_every": 2, "validate": {"size": 3}}, "t"),
                              B.RunDir(tmp_path / "run"), gate=lambda p: seen.append(p) or 0.25)
    assert trainer.evaluate(trainer.val) == 0.25 and seen[0] == bench.prompts_of(case)
    assert trainer.evaluate(trainer.train[:1]) in (0.0, 1.0) and len(seen) == 1  # other questions: run as before


def test_the_long_prompts_are_12_to_20_lines_and_the_defect_one_line_among_them():
    assert PROMPT_SETS == ("short", "long") and set(LONG_PROMPTS) == set(SYSTEMS)
    for s in SYSTEMS:
        short, long = system_data(s)["agents"], system_data(s, "long")["agents"]
        assert set(short) == set(long) and short == SYSTEMS[s]()["agents"]
        for name, a in long.items():
            assert 12 <= len(a["prompt"].strip().splitlines()) <= 20
            assert all(p in a["prompt"] for p in a.get("protected", []))
    assert len(cases()) == 282  # the short set's instances, unchanged
    long_cases = cases(prompts="long")
    assert {c.position for c in long_cases} == {"first", "second", "last"}
    for c in long_cases[::7]:
        clean = system_data(c.system, "long")["agents"][c.bugged_agent]["prompt"].strip().splitlines()
        bugged = c.config({"backend": "tiny"}).agents[c.bugged_agent].prompt.strip().splitlines()
        at = {"first": 0, "second": 1, "last": len(clean)}[c.position]
        assert bugged == clean[:at] + [c.defect_line] + clean[at:] and 13 <= len(bugged) <= 21
    one = "You write the answer. Reply with it.\n"  # a one-line prompt is planted as before
    assert plant(one, "X.", "second") == "You write the answer.\nX.\nReply with it.\n"


def test_bad_factorial_options_are_one_line_errors(tmp_path):
    for args, msg in ((["--prompts", "medium"], "--prompts takes short, long"),
                      (["--methods", "gbc/best"], "unknown method 'gbc/best'")):
        rc, _, err = cli("bench", "ablation", "--out", tmp_path / "o", *args)
        assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1, (args, err)
        assert not (tmp_path / "o").exists()


def _table(*args):
    p = run_script(str(ROOT / "benchmarks" / "ablation_table.py"), *map(str, args))
    return p.returncode, p.stdout, p.stderr


@pytest.mark.slow  # three grid invocations on the tiny model
def test_a_chunked_factorial_grid_resumes_and_its_records_round_trip_through_the_table(tmp_path):
    opts = dict(model="tiny", systems=["pipeline"], defects=["stale_example"],
                methods=["gbc/grad", "random/random_line", "oracle/string"], seeds=1, steps=1, step_every=2,
                val_size=2, wordings=1, positions=1, agents=1, noise_edits=1, keep_factor=0.0, concurrency=4,
                sizes={"train": 4, "val": 2, "screen": 2, "test": 3}, prompts="long", log=lambda s: None)
    ref = run_ablation(tmp_path / "ref", **opts)
    assert ref["kept"] == 1 and ref["runs"] == 3

    class Stop(Exception):
        pass

    def stop(line: str) -> None:
        if "seed 0:" in line:
            raise Stop()

    with pytest.raises(Stop):
        run_ablation(tmp_path / "cut", **{**opts, "log": stop})
    done = run_ablation(tmp_path / "cut", **opts, resume=True)
    volatile = ("seconds", "calls", "generated")
    strip = lambda p: sorted(json.dumps({k: v for k, v in json.loads(x).items() if k not in volatile}, sort_keys=True)
                             for x in p.read_text().splitlines())  # noqa: E731
    assert strip(tmp_path / "cut" / "results.jsonl") == strip(tmp_path / "ref" / "results.jsonl")
    assert done["options"]["prompts"] == "long" and (tmp_path / "cut" / "runs").is_dir()
    records = tmp_path / "cut" / "records.jsonl"
    lines = [json.loads(x) for x in records.read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["noise", "case", "run", "run", "run"]
    assert all(x["prompts"] == "long" for x in lines) and all("step_notes" not in x for x in lines)
    assert {(x["case"], x["method"], x["seed"]) for x in lines if x["kind"] == "run"} == \
        {(ref["cases"][0]["case"], m, 0) for m in opts["methods"]}
    # the records give the folder's figures: the same arms table, and the factorial's contrasts
    rc, from_folder, err = _table(tmp_path / "cut", "--resamples", 50)
    assert rc == 0, err
    rc, from_records, err = _table(records, records, "--resamples", 50, "--pairs", "gbc/grad-random/random_line")
    assert rc == 0, err
    assert from_records.startswith("## Prompt set: long\n\n") and from_folder in from_records
    assert "| (a) | gbc/grad | random/random_line |" in from_records and "| (b) | gbc/grad | gbc/random_line | no runs" \
        in from_records and "- gbc/grad - random/random_line:" in from_records
    rc, _, err = _table(tmp_path / "missing.jsonl")
    assert rc != 0 and err.strip().splitlines()[-1].startswith("error:") and len(err.strip().splitlines()) == 1


def _runs(cell, bits_by_case, seed=0):
    return [{"case": c, "system": "pipeline", "method": cell, "seed": seed, "test_q": q, "bugged_agent": "reader",
             "edited": ["reader"], "defect_removed": True, "accepted": 1, "calls": 1, "generated": 1, "seconds": 1,
             "test_before": 0.0, "test_after": q.count("1") / len(q), "blame_accuracy": 1.0,
             "gain": q.count("1") / len(q), "prompt_growth": -10} for c, q in bits_by_case.items()]


def test_the_contrasts_and_their_raw_counts_on_hand_made_records(tmp_path):
    names = [c.name for c in cases(["pipeline"], ["stale_example"], 2, 1, 1)]
    case_rows = [{"case": n, "system": "pipeline", "defect": "stale_example", "kept": True, "bugged_agent": "reader",
                  "test_clean_q": "1111", "test_bugged_q": "0000", "clean_test": 1.0, "bugged_test": 0.0,
                  "screen_clean": 1.0, "screen_bugged": 0.0, "damage_screen": 1.0, "threshold": 0.1, "n_test": 4}
                 for n in names]
    rows = _runs("gbc/grad", {names[0]: "1110", names[1]: "1100"}) + \
        _runs("random/random_line", {names[0]: "1000", names[1]: "0110"})
    ab, ba, n = discordant(case_rows, rows, "gbc/grad", "random/random_line")
    assert (ab, ba, n) == (3, 1, 8)  # case 0: q1, q2 won; case 1: q0 won, q2 lost (a tie)
    v = compare_arms(case_rows, rows, "gbc/grad", "random/random_line", 200)
    assert v["diff"] == pytest.approx((3 - 1) / 8) and (v["wins"], v["losses"]) == (1, 0)  # case 1 a tie
    md = factorial_markdown(case_rows, rows, 200)
    assert "| gbc | +0.625" in md and "(2; 5 / 0 of 8)" in md and "| 3 / 1 of 8 |" in md
    assert [c[0] for c in CONTRASTS] == list("abcdef") and "| (f) | gbc/grad | oracle/grad | no runs |" in md
    # power: (1.96 + 0.84) standard errors, each half the 95% interval over 1.96; the sign test's smallest p
    # with 2 cases is 2 x 0.5^2 = 0.5
    least = (v["ci95"][1] - v["ci95"][0]) / 2 / 1.959964 * (1.959964 + 0.841621)
    assert detectable(v["ci95"]) == pytest.approx(least) and detectable(None) is None
    assert f"| {least:.3f} | 1 / 0 of 2 (0.500) | 3 / 1 of 8 |" in md
    assert "share of oracle/grad" not in md  # no oracle runs
    # the moonshot's share: gbc/grad gains (3 + 2) / 8 against oracle/grad's (4 + 1) / 8 on the same questions
    oracle = _runs("oracle/grad", {names[0]: "1111", names[1]: "1000"})
    share = share_of(case_rows, rows + oracle, "gbc/grad", "oracle/grad", 200)
    assert share[0] == pytest.approx(5 / 5) and share[1] <= share[0] <= share[2]
    both = _runs("gbc/grad", {names[0]: "1110"}) + oracle  # only the runs both arms have
    assert share_of(case_rows, both, "gbc/grad", "oracle/grad", 200)[0] == pytest.approx(3 / 4)
    assert "gbc/grad's gain as a share of oracle/grad's (the moonshot asks at least 0.8): 1.00 [" in \
        factorial_markdown(case_rows, rows + oracle, 200)
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({"kind": k, "prompts": "short", **r}) + "\n"
                            for k, rs in (("case", case_rows), ("run", rows)) for r in rs))
    got = read_records([path, path])  # a file given twice is read once
    assert list(got) == ["short"] and got["short"][0] == case_rows and got["short"][1] == rows
    rc, out, err = _table(path, "--resamples", 200)
    assert rc == 0, err
    assert "| (a) | gbc/grad | random/random_line | +0.250" in out and "| 3 / 1 of 8 |" in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"case": "x"}\n')
    rc, _, err = _table(bad)
    assert rc != 0 and "not a records file" in err
