"""Blaming a set of failed traces (agentgrad.runs.blame_set, `agentgrad blame FOLDER --expected`):
losses written from expected answers, the team verdict, streaming and resuming, hostile input, the CLI."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

import agentgrad as ag
from agentgrad.blame.team import TeamVerdict, TraceVerdict
from agentgrad.cli import app, main
from agentgrad.errors import ConfigError, RunError
from agentgrad.runs import blame_set as bs
from agentgrad.blame.expected import check_answer, matches, read_book, wrong_text
from agentgrad.testing.chatset import FAULTS, REPAIR, conv, write_set
from agentgrad.testing.oispans import SpanWriter, supervisor_episode

NARROW = {"COLUMNS": "80"}
MODEL_FREE = ["provenance", "last"]


# --- expected answers -------------------------------------------------------------------------------
def test_answers_are_compared_normalised_and_the_differing_part_is_marked():
    assert matches("1,234", "The population is 1234.") and matches("1234.0", "about 1,234 people")
    assert matches("Paris", "The capital is PARIS!") and not matches("Paris, France", "Paris")
    assert not matches("1,234", "The population is 9,999,999.")
    assert wrong_text("1,234", "Lyon has 9,999,999 inhabitants, about 9 thousand.") == "9,999,999"
    assert wrong_text("Paris", "The capital of France is Lyon.") == "Lyon"  # the last name it lacks
    assert wrong_text("the blue box", "the red box") == "red"
    c = check_answer("Paris France", "Paris")  # only leaves something out: nothing to mark, and said
    assert not c.success and c.wrong is None and "leaves out 'france'" in c.note
    c = check_answer("1,234", "It is 4,321.")
    assert c.loss == 'the answer should be "1,234"; it says "It is 4,321."' and c.wrong == "4,321"
    assert "empty" in check_answer("42", "").note
    # an id the question gives is not the wrong text: the amount is (the Agents SDK set's answers)
    assert check_answer("$142.50", "Invoice INV-1002 is for $99.00.").wrong == "1002"
    assert check_answer("$142.50", "Invoice INV-1002 is for $99.00.", "How much do I owe on invoice INV-1002?").wrong == "99.00"


def test_a_hostile_expected_file_is_one_line_per_problem(tmp_path):
    f = tmp_path / "e.jsonl"
    f.write_text("\n".join([json.dumps({"trace": "a", "expected": "1"}), "{cut", json.dumps(["a list"]),
                            json.dumps({"expected": "2"}), json.dumps({"trace": "a", "expected": "3"}),
                            json.dumps({"trace": "b", "expected": 4, "colour": "red"}), json.dumps({"trace": "c"})]))
    book = read_book(f, "expected")
    assert sorted(book.by_trace) == ["a", "b"] and book.by_trace["a"].expected == "1"  # the first line for a is used
    w = book.warnings
    assert len(w) == 6 and all("\n" not in x for x in w)
    assert [int(x.split(":")[1]) for x in w] == [2, 3, 4, 5, 6, 7]
    assert "not JSON" in w[0] and "again (first on line 1" in w[3] and "colour ignored" in w[4] and "no \"expected\"" in w[5]
    for bad in ("", "{cut\n"):
        f.write_text(bad)
        with pytest.raises(ConfigError, match="expected"):
            read_book(f, "expected")


# --- the set, from Python ---------------------------------------------------------------------------
def test_a_set_from_expected_answers_names_the_faulty_agents(tmp_path):
    src, exp = write_set(tmp_path)
    res = ag.blame_set(src, expected=exp, methods=MODEL_FREE, out=tmp_path / "R")
    assert isinstance(res, ag.BlameSet) and isinstance(res.team, TeamVerdict)
    assert [t.status for t in res.traces] == ["succeeded" if FAULTS[i % 4] is None else "blamed" for i in range(12)]
    for i, t in enumerate(res.traces):
        if t.status == "blamed":
            assert t.wrong == f"{90000 + i:,}" and t.loss.startswith(f'the answer should be "{1000 + i:,}"')
            assert t.methods["provenance"].repair == [REPAIR[FAULTS[i % 4]]]
            assert t.methods["last"].agent == "writer"
    p = res.team.methods["provenance"]
    assert p.traces == 9 and [(s.agent, s.failures) for s in p.shares] == [("researcher", 6), ("planner", 3)]
    assert p.share("researcher").low <= 2 / 3 <= p.share("researcher").high
    assert res.team.methods["last"].shares[0].agent == "writer" and res.team.methods["last"].shares[0].share == 1.0
    assert res.team.primary == "provenance" and res.team.repair == ["researcher", "planner"]
    assert res.team.counts == {"blamed": 9, "succeeded": 3, "malformed": 0, "unblamed": 0}
    # what was written: one line per trace, the team verdict, the blamed traces
    lines = (tmp_path / "R" / "verdicts.jsonl").read_text().splitlines()
    assert [TraceVerdict.from_dict(json.loads(x)) for x in lines] == res.traces
    doc = json.loads((tmp_path / "R" / "blame.json").read_text())
    assert doc["team"] == res.team.to_dict() and len(doc["blamed"]) == 9
    kept = (tmp_path / "R" / "traces.jsonl").read_bytes()  # the blamed traces, each where its verdict says
    for t in res.by_status("blamed"):
        assert t.file == "traces.jsonl" and json.loads(kept[t.offset:].split(b"\n")[0])["id"] == t.trace
    assert kept.count(b"\n") == 9


def test_inputs_mappings_and_a_default_loss(tmp_path):
    src, exp = write_set(tmp_path, 8, by_input=True)
    by_input = bs.blame_set(src, expected=exp, methods=["provenance"])
    assert by_input.team.counts["blamed"] == 6 and by_input.out is None
    mapping = bs.blame_set(src, expected={f"t{i}": f"{1000 + i:,}" for i in range(4)}, loss="the figure is wrong",
                           methods=["provenance"])
    st = {t.trace: (t.status, t.loss) for t in mapping.traces}
    assert st["t0"][0] == "succeeded" and st["t1"][1].startswith("the answer should be")
    assert st["t5"] == ("blamed", "the figure is wrong")  # not in the mapping: the default loss
    none = bs.blame_set(src, losses={"t1": {"loss": "wrong figure", "wrong": "90,001"}}, methods=["provenance"])
    assert none.team.counts == {"blamed": 1, "succeeded": 0, "malformed": 0, "unblamed": 7}
    assert none.traces[1].wrong == "90,001" and "no loss for it" in none.traces[0].reason
    both = bs.blame_set(src, losses={"t1": {"loss": "by hand", "wrong": "90,001"}}, expected=exp, methods=["provenance"])
    assert both.traces[1].loss == "by hand" and both.traces[2].loss.startswith("the answer should be")
    assert both.warnings == []  # t1's answer was overruled by its loss, not unknown
    with pytest.raises(ConfigError, match="nothing says what went wrong"):
        bs.blame_set(src, methods=["provenance"])


def test_resume_after_an_interruption_redoes_no_trace(tmp_path):
    src, exp = write_set(tmp_path)
    whole = bs.blame_set(src, expected=exp, methods=MODEL_FREE, out=tmp_path / "A")
    seen: list[str] = []

    def stop_after_five(v, counts):
        seen.append(v.trace)
        if len(seen) == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        bs.blame_set(src, expected=exp, methods=MODEL_FREE, out=tmp_path / "B", progress=stop_after_five)
    with open(tmp_path / "B" / "verdicts.jsonl", "a") as f:
        f.write('{"trace": "t5", "status": "bla')  # a line cut short by a kill
    from agentgrad.runs.rundir import kept_summary

    assert kept_summary(tmp_path / "B").endswith("keeps 5 finished trace(s)")  # what the Ctrl-C line says
    with pytest.raises(RunError, match="not empty"):
        bs.blame_set(src, expected=exp, methods=MODEL_FREE, out=tmp_path / "B")
    with pytest.raises(ConfigError, match="methods="):
        bs.blame_set(src, expected=exp, methods=["provenance"], out=tmp_path / "B", resume=True)
    again: list[str] = []
    res = bs.blame_set(src, expected=exp, methods=MODEL_FREE, out=tmp_path / "B", resume=True,
                       progress=lambda v, c: again.append(v.trace))
    assert again == [f"t{i}" for i in range(5, 12)] and res.resumed == 5 and res.warnings == []
    strip = lambda ts: [{**t.to_dict(), "seconds": 0} for t in ts]  # noqa: E731
    assert strip(res.traces) == strip(whole.traces) and res.team.to_dict() == whole.team.to_dict()
    lines = [json.loads(x) for x in (tmp_path / "B" / "verdicts.jsonl").read_text().splitlines() if x.endswith("}")]
    assert sorted(x["trace"] for x in lines) == sorted(f"t{i}" for i in range(12))


def test_malformed_traces_are_skipped_by_id_and_the_rest_go_on(tmp_path, monkeypatch):
    src, exp = write_set(tmp_path, 8)
    lines = src.read_text().splitlines()
    lines[2] = json.dumps({"id": "t2", "messages": [{"role": "robot", "content": "beep"}]})
    src.write_text("\n".join(lines) + "\n")
    real = bs.blame_trace

    def fails_on_t5_and_t6(trace, *a, **k):
        if trace.id == "t5":  # the trace's own fault: the library says so with its own error
            raise ConfigError("span 3 ends past its message")
        if trace.id == "t6":  # a bug of the library's: not hidden among the malformed traces
            raise TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'")
        return real(trace, *a, **k)

    monkeypatch.setattr(bs, "blame_trace", fails_on_t5_and_t6)
    res = bs.blame_set(src, expected=exp, methods=["provenance"], out=tmp_path / "R", debug=False)
    bad = {t.trace: t.reason for t in res.by_status("malformed")}
    assert set(bad) == {"chats.jsonl:3", "t5"} and "a log of 1 message" in bad["chats.jsonl:3"]
    assert "span 3 ends past its message" in bad["t5"]
    [bug] = res.by_status("error")
    assert bug.trace == "t6" and "TypeError" in bug.reason and "--debug" in bug.reason
    assert res.team.counts["error"] == 1 and res.team.counts["malformed"] == 2
    assert sorted(t.trace for t in res.by_status("blamed")) == ["t1", "t3", "t7"]
    # with debug the bug stops the set with its own traceback
    with pytest.raises(TypeError, match="unsupported operand"):
        bs.blame_set(src, expected=exp, methods=["provenance"], out=tmp_path / "D", debug=True)


def _span_lines(tmp_path, n: int):
    """``n`` supervisor episodes as OTLP JSON, one export request per line (as the SDK's file exporter
    writes them); the researcher's tool returned the wrong figure in each."""
    out = []
    for i in range(n):
        w = SpanWriter()
        supervisor_episode(w, f"{i:032x}", f"City{i}", "9,999,999")
        out.append(json.dumps(w.export()))
    return out


def test_a_truncated_spans_file_and_a_folder_with_a_broken_file(tmp_path):
    lines = _span_lines(tmp_path, 4)
    f = tmp_path / "spans.jsonl"
    f.write_text("\n".join(lines[:3] + [lines[3][: len(lines[3]) // 2]]))  # the last request cut short
    exp = tmp_path / "expected.jsonl"
    exp.write_text("".join(json.dumps({"trace": f"{i:032x}", "expected": f"{100 + i},000"}) + "\n" for i in range(4)))
    res = bs.blame_set(f, expected=exp, methods=["provenance"])
    assert [t.trace for t in res.by_status("blamed")] == [f"{i:032x}" for i in range(3)]
    assert [(t.trace, t.status) for t in res.by_status("malformed")] == [("spans.jsonl:4", "malformed")]
    assert all(t.methods["provenance"].repair == ["researcher"] for t in res.by_status("blamed"))
    assert res.warnings == [f"{exp}:4: trace '{3:032x}' is not in the set (no trace has that id); skipped"]
    cut = tmp_path / "cut.json"
    cut.write_text(lines[0][:100])  # one request cut short: no trace at all, a one-line error, nothing written
    with pytest.raises(ConfigError, match="cut.json"):
        bs.blame_set(cut, expected=exp, methods=["provenance"], out=tmp_path / "X")
    assert not (tmp_path / "X").exists()
    d = tmp_path / "folder"
    d.mkdir()
    (d / "a.json").write_text(lines[0])
    (d / "b.json").write_text(lines[1][:100])  # one request, cut: not a spans file at all
    (d / "c.json").write_text(json.dumps({"schema": "agentgrad.trace", "schema_version": 1, "nodes": 5}))
    (d / "notes.txt").write_text("my notes")
    res = bs.blame_set(d, loss="the population is wrong", wrong="9,999,999", methods=["provenance"])
    assert [t.status for t in res.traces] == ["blamed", "malformed", "malformed", "malformed"]
    assert [t.trace for t in res.traces[1:]] == ["b.json", "c.json", "notes.txt"]
    assert "nodes" in res.traces[2].reason or "schema" in res.traces[2].reason


def test_nothing_is_overwritten(tmp_path):
    src, exp = write_set(tmp_path, 4)
    out = tmp_path / "R"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(RunError, match="not empty"):
        bs.blame_set(src, expected=exp, methods=["provenance"], out=out)
    with pytest.raises(ConfigError, match="no blame of a set"):
        bs.blame_set(src, expected=exp, methods=["provenance"], out=out, resume=True)
    with pytest.raises(RunError, match="would overwrite the input"):
        bs.blame_set(tmp_path, expected=exp, methods=["provenance"], out=tmp_path, overwrite=True)
    assert (out / "mine.txt").read_text() == "keep" and sorted(p.name for p in out.iterdir()) == ["mine.txt"]


def test_a_thousand_traces_model_free(tmp_path):
    src, exp = write_set(tmp_path, 1000)
    res = bs.blame_set(src, expected=exp, methods=MODEL_FREE, out=tmp_path / "R")
    assert res.team.counts == {"blamed": 750, "succeeded": 250, "malformed": 0, "unblamed": 0}
    p = res.team.methods["provenance"]
    assert [(s.agent, s.failures) for s in p.shares] == [("researcher", 500), ("planner", 250)]
    r = p.share("researcher")
    assert r.low < 2 / 3 < r.high and r.high - r.low < 0.08  # n = 750: about +-0.034
    assert len((tmp_path / "R" / "verdicts.jsonl").read_text().splitlines()) == 1000


def test_the_default_method_with_a_tiny_scorer(tmp_path, tiny_llama):
    src, exp = write_set(tmp_path, 3)
    res = bs.blame_set(src, expected=exp, scorer=tiny_llama)
    from agentgrad.blame.methods import DEFAULT_METHOD

    assert list(res.team.methods) == [DEFAULT_METHOD, "provenance"] and res.team.primary == DEFAULT_METHOD
    assert res.team.methods[DEFAULT_METHOD].traces == 2 and res.team.counts["succeeded"] == 1
    assert all(len(t.methods[DEFAULT_METHOD].scores) == 2 for t in res.by_status("blamed"))


# --- the command ------------------------------------------------------------------------------------
def _blame(*args):
    return CliRunner().invoke(app, ["blame", *map(str, args)], env=NARROW)


def test_the_command_prints_the_team_table_whole_at_80_columns(tmp_path):
    src, exp = write_set(tmp_path)
    res = _blame(src, "--expected", exp, "--method", "provenance,last", "--out", tmp_path / "R")
    assert res.exit_code == 0, res.output
    out = res.output
    assert "12 trace(s)" in out and "9 blamed, 3 succeeded, 0 malformed" in out
    table = [x for x in out.splitlines() if x[:1] in "┏┃┡│└"]
    assert len(table) == 7 and max(len(x) for x in table) <= 80  # the table whole, at 80 columns
    cells = {r[0]: r[1:] for r in ([c.strip() for c in x.split("│")[1:-1]] for x in out.splitlines() if "│" in x)}
    assert re.fullmatch(r"0\.67 \[0\.\d\d, [01]\.\d\d\]", cells["researcher"][0]) and cells["researcher"][2] == "1"
    assert cells["writer"][1] == "1.00 [0.70, 1.00]" and cells["writer"][0] == "-" and cells["planner"][2] == "2"
    assert "repair first (provenance): researcher, planner" in out
    assert "researcher -> writer: 6 trace(s)" in out and "planner -> researcher -> writer: 3 trace(s)" in out
    assert "succeeded: 3 skipped" in out and (tmp_path / "R" / "report.html").exists()
    # the confidence signal: provenance and last name different agents on every blamed trace
    assert "confidence: provenance and last agree on 0 of 9 blamed trace(s)" in out and "measured: methods" in out
    lines = [json.loads(x) for x in (tmp_path / "R" / "verdicts.jsonl").read_text().splitlines()]
    blamed = [v for v in lines if v["status"] == "blamed"]
    assert len(blamed) == 9 and all(v["confidence"]["signal"] == "model-free" and v["confidence"]["value"] is False
                                    for v in blamed)
    # the same again: refused; --resume does nothing more; a default loss in set mode
    again = _blame(src, "--expected", exp, "--method", "provenance", "--out", tmp_path / "R")
    assert again.exit_code == 1 and "pass --resume to go on" in str(again.exception)
    resumed = _blame(src, "--expected", exp, "--method", "provenance,last", "--out", tmp_path / "R", "--resume")
    assert resumed.exit_code == 0 and "12 finished before, not redone" in resumed.output


def test_the_command_exits_non_zero_only_when_nothing_could_be_blamed(tmp_path, capsys):
    src, exp = write_set(tmp_path, 4)
    bad = tmp_path / "losses.jsonl"
    bad.write_text(json.dumps({"trace": "nobody", "loss": "x"}) + "\n" + json.dumps({"trace": "nobody", "loss": "y"}))
    assert main(["blame", str(src), "--losses", str(bad), "--method", "provenance", "--out", str(tmp_path / "R")]) == 1
    out, err = capsys.readouterr()
    assert "nothing could be blamed" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in out + err
    assert "unblamed: 4 skipped" in out and "'nobody' again" in out and "is not in the set" in out
    ok = _blame(src, "--losses", bad, "--loss", "the figure is wrong", "--method", "provenance", "--out", tmp_path / "S")
    assert ok.exit_code == 0 and "4 blamed" in ok.output
    assert main(["blame", str(src), "--method", "provenance", "--out", str(tmp_path / "T")]) == 2
    assert "--loss is required for one trace" in capsys.readouterr().err
    assert main(["blame", str(src), "--loss", "x", "--method", "provenance", "--out", str(tmp_path / "U")]) == 2
    assert "--expected FILE" in capsys.readouterr().err
    assert main(["blame", str(src), "--expected", str(exp), "--trace", "t1", "--out", str(tmp_path / "V")]) == 2
    assert "--trace is for one trace" in capsys.readouterr().err


def test_hostile_input_at_the_command_is_one_line_each_and_long_names_print_whole(tmp_path):
    """The issue's hostile target through the command: a truncated spans file, an expected file with a
    duplicate, an unknown trace and a broken line. Exit 0 (three traces blamed), one line for each
    problem; method names too long for an 80-column table print one method at a time, whole."""
    lines = _span_lines(tmp_path, 4)
    f = tmp_path / "spans.jsonl"
    f.write_text("\n".join(lines[:3] + [lines[3][: len(lines[3]) // 2]]))
    answers = [{"trace": f"{i:032x}", "expected": f"{100 + i},000"} for i in range(3)]
    answers += [{"trace": f"{0:032x}", "expected": "5"}, {"trace": "nope", "expected": "x"}]
    exp = tmp_path / "answers.jsonl"
    exp.write_text("\n".join(json.dumps(a) for a in answers) + "\n{broken\n")
    methods = "provenance:key:root,provenance:earliest,last"
    res = _blame(f, "--expected", exp, "--method", methods, "--out", tmp_path / "R")
    assert res.exit_code == 0, res.output
    out = res.output.splitlines()
    assert out[0] == "4 trace(s) from " + str(f) + ": 3 blamed, 0 succeeded, 1 malformed, 0 without a loss"
    assert [x for x in out if x.startswith("malformed:")] == [
        "malformed: 1 skipped (could not be read or blamed; first spans.jsonl:4: not JSON (Unterminated string "
        "starting at))"]
    warnings = [x for x in out if x.startswith("warning:")]
    assert len(warnings) == 3 and "line 1, which is used" in warnings[0] and "not JSON" in warnings[1]
    assert "'nope' is not in the set" in warnings[2]
    assert "one method at a time:" in res.output
    for m in methods.split(","):
        assert m in out  # each method on a line of its own, then its agents
    assert out[out.index("last") + 1] == "  supervisor: 1.00 [0.44, 1.00]"
    assert res.output.count("researcher: 1.00 [0.44, 1.00]") == 2


def test_a_run_directory_and_a_folder_whose_files_repeat_ids(tmp_path):
    from agentgrad.importers.chat import import_chat

    src, exp = write_set(tmp_path, 8)
    run = tmp_path / "run"
    for t in import_chat(src).traces:  # a run directory: agentgrad traces in traces/
        t.save(run / "traces" / f"{t.id}.json")
    (run / "events.jsonl").write_text("")
    res = bs.blame_set(run, expected=exp, methods=["provenance"])
    assert [t.trace for t in res.traces] == sorted(f"t{i}" for i in range(8))
    assert res.team.counts["blamed"] == 6 and res.team.repair == ["researcher", "planner"]
    d = tmp_path / "chats"  # two files of chat lines without ids: line-1 twice, the second named by its file
    d.mkdir()
    for name, fault in (("a.jsonl", "researcher"), ("b.jsonl", "planner")):
        c = conv(1, fault)
        (d / name).write_text(json.dumps(c["messages"]) + "\n")
    losses = {"line-1": {"loss": "the figure is wrong", "wrong": "90,001"}, "b.jsonl:line-1": {"loss": "wrong too",
                                                                                            "wrong": "90,001"}}
    res = bs.blame_set(d, losses=losses, methods=["provenance"])
    assert [(t.trace, t.loss, t.methods["provenance"].repair) for t in res.traces] == [
        ("line-1", "the figure is wrong", ["researcher"]), ("b.jsonl:line-1", "wrong too", ["planner"])]
    res = bs.blame_set(d, loss="wrong", wrong="no such text", methods=["provenance"])  # not in the output: said
    assert all(t.status == "blamed" and "is not in its final output" in t.note for t in res.traces)


def test_the_command_checks_its_files_before_a_model_loads(tmp_path, capsys):
    (tmp_path / "set").mkdir()
    src, exp = write_set(tmp_path / "set", 4)
    nomodel = ["--scorer", str(tmp_path / "no-model"), "--out", str(tmp_path / "R")]  # loading it would fail
    assert main(["blame", str(tmp_path / "set"), *nomodel]) == 2
    assert "is a folder: say what went wrong with --losses FILE" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert main(["blame", str(src), "--expected", str(bad), *nomodel]) == 2
    err = capsys.readouterr().err
    assert "the expected file" in err and "holds no usable line" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "R").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    for args in (["--expected", str(exp)], ["--loss", "x", "--trace", "t1"]):  # a set, one trace: --resume is no licence
        assert main(["blame", str(src), *args, "--method", "provenance", "--out", str(mine), "--resume"]) == 1
        assert "holds no blame to resume" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_one_trace_prints_its_confidence_signal_with_the_measured_meaning(tmp_path):
    """The measured meaning is quoted for a trace like those it was measured on (a run of agentgrad's
    own); an imported chat log was never measured, and the line says so."""
    from agentgrad.importers.chat import import_chat

    src, _ = write_set(tmp_path, 2)  # t1: the researcher misstates the tool's figure
    res = _blame(src, "--trace", "t1", "--loss", "the population is wrong", "--wrong", "90,001",
                 "--method", "provenance,last", "--out", tmp_path / "chat")
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "confidence: provenance and last disagree; not measured for traces like this (chat traces)" in said
    own = next(t for t in import_chat(src).traces if t.id == "t1")
    del own.meta["imported"]  # as agentgrad's own run of the same team writes it
    own.save(tmp_path / "t1.json")
    res = _blame(tmp_path / "t1.json", "--loss", "the population is wrong", "--wrong", "90,001",
                 "--method", "provenance,last", "--out", tmp_path / "one")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("confidence:"))
    said = " ".join(" ".join(lines[start:]).split())  # wrapped at 80 columns, never cut
    assert said.startswith("confidence: provenance and last disagree; where they disagree the verdict was right in:")
    # every line at 80 columns but the one naming what was written (a path is never folded: it is copied)
    assert "injected faults" in said and "docs/confidence.md" in said
    assert max(len(x) for x in lines if not x.startswith("wrote ")) <= 80 and lines[-1].startswith("wrote ")
