"""The per-trace confidence signal: agreement read from verdicts (hand-worked), its measured meaning read
from the package file, and that file (and the committed table) equal to what the table script computes
from the committed records."""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path

import pytest

from agentgrad.core.stats import wilson
from agentgrad.blame.confidence import (PACKAGE_FILE, agrees, confidence, confidence_line, figure, measured,
                                        short_line, top_agents)
from agentgrad.blame.context import Blame
from agentgrad.blame.verdict import Verdict
from agentgrad.errors import ConfigError
from conftest import ROOT, run_script

SCRIPT = ROOT / "benchmarks" / "confidence_table.py"
BLEND = "gbc:max_l1:targeted:blend"


def script():
    spec = importlib.util.spec_from_file_location("confidence_table", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def index_command() -> str:
    index = json.loads((ROOT / "records" / "index.json").read_text(encoding="utf-8"))
    return next(g for g in index["groups"] if g["id"] == "confidence")["tables"]["all"]


def figures(agree=(10, 0.9), disagree=(4, 0.5), unresolved=0, bound=None, method=BLEND) -> dict:
    bench = {"method": method, "unresolved": unresolved, "bound": bound or {"agree": agree[1], "disagree": disagree[1]},
             "agree": {"n": agree[0], "accuracy": agree[1]}, "disagree": {"n": disagree[0], "accuracy": disagree[1]}}
    return {"signals": {"agree": {"benchmarks": {"planted": bench}}, "model-free": {"benchmarks": {"planted": bench}}}}


def test_agreement_is_the_same_set_of_top_agents():
    tied = Verdict(method=BLEND, blamed=[Blame("a", 1, 1.0), Blame("b", 2, 1.0), Blame("a", 3, 1.0)])
    assert top_agents(tied) == ["a", "b"]
    assert agrees(top_agents(tied), ["b", "a"]) and not agrees(top_agents(tied), ["a"])
    assert top_agents({"method": "provenance", "agent": "a"}) == ["a"] and top_agents(None) == []
    assert not agrees([], [])  # a verdict that names nobody agrees with nothing
    with pytest.raises(ConfigError):
        top_agents(3)


def test_the_signal_and_its_meaning_hand_worked():
    f = figures()
    c = confidence({BLEND: ["reader"], "provenance": "reader", "last": "responder"}, figures=f)
    assert (c.signal, c.value, c.method, c.partner) == ("agree", True, BLEND, "provenance")
    assert c.meaning == "methods agree: right in 0.90 of planted (n=10); when they disagree: 0.50 of planted (n=4)"
    c = confidence([{"method": BLEND, "agent": "reader"}, {"method": "provenance", "agent": "writer"}], figures=f)
    assert c.value is False and c.meaning.startswith("methods disagree: right in 0.50 of planted (n=4);")
    # no scorer: provenance against the final agent; the verdict qualified is provenance's
    c = confidence({"provenance": "reader", "last": "reader"}, figures=f)
    assert (c.signal, c.value, c.method, c.partner) == ("model-free", True, "provenance", "last")
    # a benchmark measured with another method says so
    c = confidence({BLEND: "a", "provenance": "a"}, figures=figures(method="gbc:max_l1:targeted:follow"))
    assert "0.90 of planted (n=10, with gbc:max_l1:targeted:follow)" in c.meaning
    none = confidence({"random": "a"}, figures=f)
    assert none.signal == "none" and none.value is None
    assert confidence({BLEND: [], "provenance": "a"}, figures=f).signal == "none"  # the verdict named nobody
    assert confidence({"nomethod:x": "a", "provenance": "a", "last": "b"}, figures=f).signal == "model-free"
    with pytest.raises(ConfigError):
        confidence([{"agent": "a"}], figures=f)


def test_an_unresolved_benchmark_is_quoted_as_the_range_between_the_two_countings():
    b = figures(agree=(358, 0.6788), disagree=(242, 0.9711), unresolved=115,
                bound={"agree": 1.0, "disagree": 0.6611})["signals"]["agree"]["benchmarks"]["planted"]
    assert figure(b, "agree") == "0.68-1.00" and figure(b, "disagree") == "0.66-0.97"
    b["unresolved"] = 0
    assert figure(b, "agree") == "0.68"


def test_the_line_quotes_the_package_figures():
    line = confidence_line({BLEND: ["reader"], "provenance": ["reader"]})
    inj = measured()["signals"]["agree"]["benchmarks"]["injected faults"]
    assert line.startswith(f"confidence ({BLEND} and provenance): methods agree: right in ")
    assert f"{figure(inj, 'agree')} of injected faults (n={inj['agree']['n']})" in line
    assert confidence_line({"random": "a"}).startswith("confidence: no confidence")


def test_records_split_hand_worked():
    mod = script()

    def ep(default: float, prov: float, top=(None, None)) -> dict:
        return {"id": "x", "methods": {BLEND: {"right": default, "top": top[0]}, "provenance": {"right": prov, "top": top[1]}}}

    # both right: agree; one right: disagree (twice); neither (a miss, a tie): unresolved, counted as agreeing
    eps = [ep(1.0, 1.0), ep(1.0, 0.0), ep(0.0, 1.0), ep(0.0, 0.0), ep(0.5, 0.0)]
    s = mod.split(eps, BLEND, ["provenance"])
    assert s["unresolved"] == 2
    assert (s["agree"]["n"], s["agree"]["right"], s["agree"]["accuracy"]) == (3, 1.5, 0.5)
    assert (s["disagree"]["n"], s["disagree"]["accuracy"]) == (2, 0.5)
    assert s["agree"]["ci95"] == [round(x, 4) for x in wilson(1.5, 3)]
    assert s["bound"] == {"agree": 1.0, "disagree": 0.375}  # were the two unresolved disagreements: 1/1, 1.5/4
    # picks recorded (Who&When): compared directly, never unresolved
    ww = [ep(0.0, 0.0, ("a", "a")), ep(0.0, 0.0, ("a", "b")), ep(1.0, 0.0, ("a", "b"))]
    s = mod.split(ww, BLEND, ["provenance"])
    assert (s["agree"]["n"], s["disagree"]["n"], s["unresolved"]) == (1, 2, 0) and s["disagree"]["accuracy"] == 0.5
    assert mod.split(eps, BLEND, [BLEND]) is None and mod.split(eps, BLEND, ["last"]) is None


def test_the_package_file_and_the_committed_table_are_what_the_script_computes_from_the_records(capsys):
    mod = script()
    paths = [ROOT / w for w in shlex.split(index_command())[2:] if not w.startswith("--")]
    given = {mod.key_of(p): p for p in paths}
    assert set(given) == {n for *_, names in mod.SCORED + mod.FREE for n in names}  # every registered record
    rows = json.loads(json.dumps(mod.table(given, None, mod.RUNNER_UP)))
    capsys.readouterr()
    assert mod.package(rows) == json.loads(PACKAGE_FILE.read_text(encoding="utf-8"))
    committed = json.loads((ROOT / "records" / "confidence" / "confidence-table.json").read_text(encoding="utf-8"))
    assert committed == {"runner_up": mod.RUNNER_UP, "rows": rows}
    # every unresolved episode is a plain miss of the verdict (no tie credit): the two countings bound the truth
    for units, partner in ((mod.SCORED, "provenance"), (mod.SCORED, mod.RUNNER_UP), (mod.FREE, "last")):
        for method, eps in mod.gather(units, given, None).values():
            assert all(e["methods"][method]["right"] == 0.0 for e in eps if partner != method and partner in e["methods"]
                       and mod.relation(e["methods"][method], e["methods"][partner]) == "unresolved")
    parts = {(r["benchmark"], r["part"]) for r in rows if r["signal"] == "agree"}
    assert ("injected faults", "report") in parts and ("Who&When, algorithm", "report") in parts


def test_the_script_refuses_a_record_the_pre_registration_does_not_name(tmp_path):
    other = tmp_path / "blame-smollm2" / "s10-other.jsonl"
    other.parent.mkdir()
    other.write_text("{}\n", encoding="utf-8")
    for arg, says in [(other, "not a record the pre-registration names"), (tmp_path / "none.jsonl", "does not exist")]:
        done = run_script(str(SCRIPT), str(arg))
        assert done.returncode == 1 and says in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_meaning_quoted_is_that_of_traces_of_the_same_kind():
    """A trace's confidence quotes only the benchmarks measured on traces like it: agentgrad's own runs
    (planted, injected), Who&When's logs; an imported trace of another kind was never measured."""
    from agentgrad.blame.confidence import trace_kind
    from agentgrad.core.trace import Trace

    verdicts = {BLEND: ["reader"], "provenance": "reader"}
    every = confidence(verdicts)
    mine = confidence(verdicts, kind="agentgrad")
    ww = confidence(verdicts, kind="whowhen")
    other = confidence(verdicts, kind="taubench")
    assert set(mine.measured) and all(n.startswith(("planted", "injected")) for n in mine.measured)
    assert set(ww.measured) and all(n.startswith("Who&When") for n in ww.measured)
    assert set(every.measured) == set(mine.measured) | set(ww.measured)
    assert other.value is True and not other.measured and "not measured for traces like this" in other.meaning
    assert "not measured for traces like this" in short_line(other)
    assert trace_kind(Trace(id="x")) == "agentgrad" and trace_kind(Trace(id="y", meta={"imported": "whowhen"})) == "whowhen"
