"""``bench agentrx``: the labelled real runs read and scored as docs/agentrx.md fixes it; the run
reproduces the committed records, resumes after a stop, refuses bad options in one line; and no
method, loss or rule reads the annotators' words."""

from __future__ import annotations

import json
import re

import pytest

from agentgrad.benchmarks.agentrx.bench import PRIORS, losses, markdown, summary
from agentgrad.benchmarks.agentrx.data import agent_key, load_runs
from agentgrad.benchmarks.data import data_dir
from agentgrad.cli import main
from conftest import ROOT

AGENTRX = data_dir() / "agentrx"
needs_agentrx = pytest.mark.skipif(not AGENTRX.is_dir(), reason="AgentRx data not found (set AGENTGRAD_DATA_DIR)")
RECORDS = ROOT / "records" / "agentrx" / "model-free" / "records.jsonl"
LABEL_WORDS = ("failure_summary", "step_reason", "reason_for_root_cause", "category_reason", "mistake_reason")


def strip(rec: dict) -> dict:
    return {**rec, "methods": {m: {k: v for k, v in x.items() if not k.endswith("seconds")}
                               for m, x in rec["methods"].items()}}


def test_no_method_loss_or_rule_reads_the_annotators_words():
    """The labels' explanations are labels: nothing in the library or the benchmark scripts names them."""
    pattern = re.compile("|".join(LABEL_WORDS))
    hits = [f"{p}:{n}" for root in (ROOT / "src", ROOT / "benchmarks") for p in sorted(root.rglob("*.py"))
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_agent_names_compare_without_case_or_spaces():
    assert agent_key("Websurfer") == agent_key("WebSurfer") == agent_key("web surfer") == "websurfer"


@needs_agentrx
def test_the_runs_are_labelled_as_fixed_and_split_in_halves():
    runs, broken = load_runs()
    assert not broken
    tau = [r for r in runs if r.subset == "tau"]
    mag = [r for r in runs if r.subset == "magentic"]
    assert len(tau) == 29 and len(mag) == 44  # one run writes its root cause's id as a string: still read
    assert [r.half for r in sorted(tau, key=lambda r: r.trace.id)][:4] == ["A", "B", "A", "B"]
    # the root-cause message is the labelled agent's in all but one run of each subset: 28 of 29, 43 of 44
    # (docs/agentrx.md)
    for group, right in ((tau, 28), (mag, 43)):
        wrong = [r for r in group if r.node is None or agent_key(
            r.trace.nodes[r.node].name) != r.agent]
        assert len(group) - len(wrong) == right, [(r.trace.id, r.agent) for r in wrong]
    t2 = next(r for r in tau if r.trace.id == "2")
    assert (t2.agent, t2.message) == ("assistant", 6) and losses(t2)["located"].targets == [t2.node]


@needs_agentrx
def test_the_benchmark_reproduces_the_committed_records_and_resumes(tmp_path, capsys):
    out = tmp_path / "R"
    assert main(["bench", "agentrx", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    mine = [strip(json.loads(x)) for x in (out / "records.jsonl").read_text().splitlines()]
    kept = [strip(json.loads(x)) for x in RECORDS.read_text().splitlines()]
    assert mine == kept  # the same runs, losses, top nodes and credits as committed
    assert markdown(summary(kept)) in printed and "CPU seconds per method:" in printed
    # a stop after the first records: --resume runs only the rest, and the records end the same
    lines = (out / "records.jsonl").read_text().splitlines()
    (out / "records.jsonl").write_text("\n".join(lines[:10]) + "\n" + lines[10][:40])  # a line cut short
    assert main(["bench", "agentrx", "--out", str(out)]) != 0  # not without --resume
    assert "--resume" in capsys.readouterr().err
    assert main(["bench", "agentrx", "--out", str(out), "--resume"]) == 0
    again = [strip(json.loads(x)) for x in (out / "records.jsonl").read_text().splitlines() if x.endswith("}")]
    key = lambda r: (r["subset"], r["run"], r["loss"])  # noqa: E731
    assert sorted(again, key=key) == sorted(kept, key=key)


@pytest.mark.parametrize("argv, words", [
    (["--subset", "gaia"], "--subset takes tau, magentic"),
    (["--methods", "gbc:max_l1:targeted:blend"], "need(s) a white-box scorer"),
    (["--methods", "provenence"], "unknown blame method"),
    (["--edges", "addressed"], "use it with --subset magentic"),
    (["--edges", "some", "--subset", "magentic"], "--edges takes all or addressed"),
    (["--half", "C"], "--half takes A, B or all"),
    (["--calls-in-history"], "use it with --scorer"),
])
def test_bad_options_are_one_line_before_anything_is_read(tmp_path, capsys, argv, words):
    out = tmp_path / "R"
    assert main(["bench", "agentrx", "--out", str(out), *argv]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and not out.exists()


@needs_agentrx
def test_one_half_on_the_addressed_edges_records_them_and_only_that_half(tmp_path):
    """``--half B --edges addressed``: only the report half's 22 Magentic-One logs, each record saying its
    edges; the priors name the same nodes as on the broadcast graph (they read positions, not edges)."""
    out = tmp_path / "R"
    assert main(["bench", "agentrx", "--subset", "magentic", "--half", "B", "--edges", "addressed",
                 "--methods", "first,last,most_active", "--out", str(out)]) == 0
    mine = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(mine) == 22 and {r["half"] for r in mine} == {"B"} and {r.get("edges") for r in mine} == {"addressed"}
    kept = {(r["run"], r["loss"]): r for r in map(json.loads, RECORDS.read_text().splitlines())}
    for r in mine:
        for m in ("first", "last", "most_active"):
            assert r["methods"][m]["top"] == kept[(r["run"], r["loss"])]["methods"][m]["top"], (r["run"], m)


def test_a_method_run_on_one_half_only_is_reported_there_and_dashed_elsewhere():
    """Hand-worked: 2 runs a half; ``last`` everywhere, ``gbc`` on half B only (a run registered for the
    report half). Half A's best prior is ``last``; on half B gbc is right at step level on run b1 only,
    ``last`` on neither: +0.50, 1 won, 0 lost; its half A cells are dashes."""
    def rec(run, half, last, gbc=None):
        m = {"last": {"agent": 1.0, "step": last, "top": [1]}}
        if gbc is not None:
            m["gbc"] = {"agent": 1.0, "step": gbc, "top": [2]}
        return {"subset": "magentic", "run": run, "loss": "last", "half": half, "methods": m}

    s = summary([rec("a1", "A", 1.0), rec("a2", "A", 0.0), rec("b1", "B", 0.0, 1.0), rec("b2", "B", 0.0, 0.0)])
    g = s["magentic/last"]
    assert g["best_prior"] == "last" and g["accuracy"]["A"]["gbc"] is None and g["accuracy"]["B"]["gbc"]["step"] == 0.5
    p = g["paired"]["gbc"]["step"]
    assert (p["diff"], p["wins"], p["losses"]) == (0.5, 1, 0)
    row = next(x for x in markdown(s).splitlines() if x.startswith("| gbc |"))
    assert row.startswith("| gbc | - | - | 1.00 | 0.50 |")


def test_the_priors_are_the_registry_names():
    from agentgrad.blame.methods import list_blame_methods

    assert set(PRIORS) <= set(list_blame_methods())


@needs_agentrx
def test_a_scored_run_records_the_calls_it_could_not_read(tiny_llama, tmp_path):
    from agentgrad.attribution.render import render_call
    from agentgrad.attribution.scorer import Scorer
    from agentgrad.benchmarks.agentrx.bench import run_agentrx

    run = next(r for r in load_runs(("tau",))[0] if r.trace.id == "2")
    sc = Scorer(str(tiny_llama), on_too_long="skip")
    last = run.trace.calls()[-1]
    sc.max_context = len(render_call(sc.tokenizer, last).input_ids) - 1  # the loss call alone is too long
    rec = run_agentrx([run], ["gbc:max_l1:targeted:blend"], tmp_path / "R", sc, settings=("last",))[0]
    assert rec["target"] == last.id and rec["methods"]["gbc:max_l1:targeted:blend"]["skipped"] == [last.id]
    sc.max_context += 1  # now it fits: nothing skipped
    rec = run_agentrx([run], ["gbc:max_l1:targeted:blend"], tmp_path / "S", sc, settings=("last",))[0]
    assert rec["methods"]["gbc:max_l1:targeted:blend"]["skipped"] == []


@needs_agentrx
def test_the_window_is_made_once_per_run_and_its_cpu_recorded_apart(tiny_llama, tmp_path, monkeypatch):
    """Two methods and two loss settings of one tau-bench run: the windowed trace is made once (it was
    made for every method), and each record keeps its CPU time apart from the methods'."""
    import agentgrad.attribution.render as render
    from agentgrad.attribution.scorer import Scorer
    from agentgrad.benchmarks.agentrx.bench import run_agentrx

    made = []
    real = render.window_trace
    monkeypatch.setattr(render, "window_trace", lambda *a: made.append(1) or real(*a))
    run = next(r for r in load_runs(("tau",))[0] if r.trace.id == "2")
    recs = run_agentrx([run], ["last", "provenance"], tmp_path / "R", Scorer(str(tiny_llama)), window=512)
    assert len(made) == 1 and len(recs) == 2
    assert all(r["read_cpu_seconds"] >= 0 and set(r["methods"]) == {"last", "provenance"} for r in recs)


@needs_agentrx
def test_earlier_tool_calls_are_written_into_the_histories_the_scorer_reads(tiny_llama, tmp_path):
    """tau-bench's reader records a turn that replays a tool-calling call as its (empty) text: no token of a
    later call comes from it. With ``calls_in_history`` the turn holds the call's tool calls as the call's own
    output is scored (:func:`tool_calls_as_text`), its span covers them, and the later call's rendering has
    tokens from it; turns of calls without tool calls, and the trace given, are left as they were."""
    from transformers import AutoTokenizer

    from agentgrad.attribution.render import calls_in_history, render_call, tool_calls_as_text
    from agentgrad.benchmarks.agentrx.bench import run_agentrx

    tok = AutoTokenizer.from_pretrained(str(tiny_llama))
    run = next(r for r in load_runs(("tau",))[0] if r.trace.id == "2")
    before = json.dumps(run.trace.to_dict(), sort_keys=True)
    after = calls_in_history(run.trace)
    assert json.dumps(run.trace.to_dict(), sort_keys=True) == before
    last, new = run.trace.calls()[-1], after.calls()[-1]
    made = {n.id: n for n in run.trace.calls() if n.tool_calls}
    replayed = [s for s in last.spans if s.source in made and last.messages[s.message]["role"] == "assistant"]
    assert replayed and all(s.end == 0 for s in replayed)  # empty turns: nothing for a gradient to reach
    a, b = render_call(tok, last).source_ranges[replayed[0].source][0]
    assert a == b
    for s, t in zip(last.spans, new.spans):
        if s in replayed:
            text = tool_calls_as_text(made[s.source])
            assert new.messages[s.message]["content"] == text and (t.start, t.end) == (0, len(text))
            assert made[s.source].tool_calls[0].name in text
            a, b = render_call(tok, new).source_ranges[s.source][0]
            assert b > a
        else:
            assert t == s and new.messages[s.message] == last.messages[s.message]
    for n in run.trace.calls():  # a call that made tool calls reads, as its output, what its replays hold
        m = after.nodes[n.id]
        assert (m.text, m.tool_calls) == ((tool_calls_as_text(n), []) if n.tool_calls else (n.text, n.tool_calls))
    rec = run_agentrx([run], ["last"], tmp_path / "R", None, settings=("last",), calls_in_history=True)[0]
    assert rec["calls_in_history"] is True
