"""The command line as a new user meets it: the blame table at 80 columns, --method
taken literally, every "pass --resume" hint true where it is printed, and binary or empty files."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from typer.testing import CliRunner

from agentgrad.blame.context import Blame
from agentgrad.blame.methods import DEFAULT_METHOD, list_blame_methods
from agentgrad.blame.verdict import Verdict
from agentgrad.cli import app, main
from agentgrad.testing.oispans import SpanWriter, supervisor_episode

NARROW = {"COLUMNS": "80"}


def _spans(tmp_path):
    """The supervisor episode of test_span_importers: the researcher's tool (city_population, n2)
    returns the wrong figure that the supervisor (n6) repeats."""
    w = SpanWriter()
    supervisor_episode(w, "P" * 32, "Lyon", "9,999,999")
    f = tmp_path / "spans.json"
    f.write_text(json.dumps(w.export()))
    return f


def _blame(runner, *args):
    return runner.invoke(app, ["blame", *map(str, args)], env=NARROW)


# --- 2. the blame table -----------------------------------------------------------------------------
def test_the_blamed_agent_is_whole_at_80_columns_for_every_registry_method(tmp_path, monkeypatch):
    """Every name of the registry through `agentgrad blame` at 80 columns (its output piped): each
    method's blamed agent, node and prompt to repair are printed whole. The methods' verdicts are
    stubbed (one for all of them: the tool n2 of the researcher), so that no scorer or judge runs."""
    import importlib

    api, judge = importlib.import_module("agentgrad.api"), importlib.import_module("agentgrad.blame.judge")
    ib = importlib.import_module("agentgrad.runs.blame")

    def verdict(m, trace, loss, sc, **kw):
        top = Blame("city_population", 2, 0.123456)
        return Verdict.of(m, trace, [top, Blame("supervisor", 6, 0.1)], [top])

    class Scorer:
        def attribute(self, trace):
            return [], None

        def describe(self):
            return {}

    monkeypatch.setattr(ib, "blame_episode", verdict)
    monkeypatch.setattr(ib, "make_scorer", lambda *a, **k: Scorer())
    monkeypatch.setattr(api, "load_scorer", lambda *a, **k: Scorer())
    monkeypatch.setattr(judge, "make_judge", lambda spec: object())
    names = [n for n in list_blame_methods() if n != "replay"]  # replay: bench inject only (below)
    f = _spans(tmp_path)
    res = _blame(CliRunner(), f, "--loss", "the population is wrong", "--wrong", "9,999,999", "--expected", "1,234", "--judge", "stub",
                 "--method", ",".join(names), "--out", tmp_path / "B")
    assert res.exit_code == 0, res.output
    out = res.output
    # every line fits in 80 columns but the one naming what was written: a path is never folded (it is copied)
    written = [line for line in out.splitlines() if line.startswith("wrote ")]
    assert len(written) == 1 and written[0].endswith(str(tmp_path / "B" / "report.html"))
    assert "…" not in out and max(len(line) for line in out.splitlines() if line not in written) <= 80
    # one record per method, in the registry's order, each with its verdict whole
    shown = [line for line in out.splitlines() if line in names]
    assert shown == names
    assert out.count("city_population") == len(names) and len(re.findall(r"\bresearcher\b", out)) == len(names)
    assert out.count("n2 tool") == len(names)
    # replay cannot be asked of agentgrad blame at all: one line that says where it runs
    assert main(["blame", str(f), "--loss", "x", "--method", "replay", "--out", str(tmp_path / "R")]) == 2


def test_method_prints_exactly_the_methods_asked_for_in_that_order(tmp_path):
    f = _spans(tmp_path)
    runner = CliRunner()
    res = _blame(runner, f, "--loss", "the population is wrong", "--wrong", "9,999,999", "--method", "last,provenance",
                 "--out", tmp_path / "B")
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "B" / "blame.json").read_text())["rows"]
    assert [r["method"] for r in rows] == ["last", "provenance"]
    assert [line for line in res.output.splitlines() if line in ("last", "provenance")] == ["last", "provenance"]
    assert "provenance:" not in res.output  # none of its variants, unasked
    # a wide terminal gets the table, a line per method, every cell whole
    res = runner.invoke(app, ["blame", str(f), "--loss", "the population is wrong", "--wrong", "9,999,999",
                              "--method", "provenance:key:root,last", "--out", str(tmp_path / "W")],
                        env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    table = [line for line in res.output.splitlines() if line.startswith("│")]
    assert len(table) == 2 and "…" not in res.output
    assert "provenance:key:root" in table[0] and "city_population" in table[0] and "supervisor (n6)" in table[0]
    assert "last" in table[1] and "supervisor" in table[1]
    # a prefix that is no method's name still asks for its family
    res = _blame(runner, f, "--loss", "x", "--wrong", "9,999,999", "--method", "provenance:key", "--out", tmp_path / "K")
    assert [r["method"] for r in json.loads((tmp_path / "K" / "blame.json").read_text())["rows"]] == ["provenance:key"]
    # the benchmarks' --methods keep taking a name as the prefix of its variants (published commands)
    from agentgrad.blame.methods import select_methods

    assert select_methods("provenance") == ["provenance", "provenance:earliest", "provenance:key",
                                             "provenance:key:root"]


def test_the_default_prints_the_two_rows_its_help_names(tmp_path, tiny_llama):
    runner = CliRunner()
    help_text = " ".join(runner.invoke(app, ["blame", "--help"], env=NARROW).output.replace("│", " ").split())
    assert f"Default: two rows, {DEFAULT_METHOD} and provenance" in help_text
    f = _spans(tmp_path)
    res = _blame(runner, f, "--loss", "the population is wrong", "--wrong", "9,999,999", "--scorer", tiny_llama,
                 "--out", tmp_path / "B")
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "B" / "blame.json").read_text())["rows"]
    assert [r["method"] for r in rows] == [DEFAULT_METHOD, "provenance"]


# --- 3. "pass --resume", followed ---------------------------------------------------------------------
def test_every_resume_hint_is_true_where_it_is_printed(demo_run, tmp_path, capsys):
    # a folder that holds no run: neither command names --resume, and nothing is written there
    d = tmp_path / "notes"
    d.mkdir()
    (d / "todo.txt").write_text("mine")
    for args in (["demo", "--tiny", "--out", str(d)], ["demo", "--tiny", "--out", str(d), "--resume"]):
        assert main(args) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert "holds no agentgrad run" in err and "choose another --out" in err and "pass --resume" not in err, err
    assert sorted(p.name for p in d.iterdir()) == ["todo.txt"]
    # a demo's run directory: the hint, followed, works
    run = tmp_path / "R"
    shutil.copytree(demo_run, run)
    assert main(["demo", "--tiny", "--out", str(run)]) == 1
    assert "pass --resume to continue it" in capsys.readouterr().err
    assert main(["demo", "--tiny", "--out", str(run), "--resume"]) == 0


def test_a_benchmark_optimisation_is_resumed_where_the_hint_says(tmp_path):
    """bench taubench/multiwoz optimize keep their events under train/ and eval/: such a folder is a
    run that --resume continues (it was refused: "no events.jsonl"); another folder is not."""
    from agentgrad.cli.options import check_new_run
    from agentgrad.errors import RunError

    out = tmp_path / "opt"
    (out / "train" / "attribution").mkdir(parents=True)
    (out / "train" / "events.jsonl").write_text(json.dumps({"event": "started", "digest": "d"}) + "\n"
                                                + json.dumps({"event": "sample", "sample": "0"}) + "\n")
    (out / "train" / "attribution" / "0.json").write_text("{}")
    with pytest.raises(RunError, match="pass --resume to continue it"):
        check_new_run(out, False)
    check_new_run(out, True)  # the hint, followed
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.txt").write_text("x")
    for resume in (False, True):
        with pytest.raises(RunError, match="holds no agentgrad run") as e:
            check_new_run(other, resume)
        assert "--resume" not in str(e.value)


def test_every_overwrite_hint_names_what_the_command_takes_and_works(tmp_path, capsys):
    # a positional folder (tiny-model, blame-model): no "--out" that the command does not have
    d = tmp_path / "model"
    d.mkdir()
    (d / "x").write_text("x")
    assert main(["testing", "tiny-model", str(d)]) == 1
    err = capsys.readouterr().err
    assert "pass --overwrite" in err and "--out" not in err, err
    assert main(["testing", "tiny-model", str(d), "--overwrite"]) == 0  # the hint, followed
    assert main(["testing", "blame-model", str(d)]) == 1
    err = capsys.readouterr().err
    assert "pass --overwrite" in err and "--out" not in err, err
    from agentgrad.benchmarks.data import benchmark_dir
    from agentgrad.errors import ConfigError

    try:
        have_tau = benchmark_dir("taubench_retail").is_dir()
    except ConfigError:  # no tau-bench data here: the other folders above still say it
        have_tau = False
    if have_tau:  # replay-gold writes where --dump-db says
        assert main(["bench", "taubench", "replay-gold", "--split", "dev", "--dump-db", str(d)]) == 1
        err = capsys.readouterr().err
        assert "choose another --dump-db" in err and "--out" not in err, err
    # agentgrad blame --overwrite into a folder holding someone's report.html: --overwrite was passed already
    f = _spans(tmp_path)
    b = tmp_path / "B"
    b.mkdir()
    (b / "report.html").write_text("<html>my notes</html>")
    args = ["blame", str(f), "--loss", "x", "--wrong", "9,999,999", "--method", "last", "--out", str(b)]
    assert main(args) == 1 and "pass --overwrite" in capsys.readouterr().err
    assert main(args + ["--overwrite"]) == 0, capsys.readouterr().err
    assert "agentgrad report" in (b / "report.html").read_text()
    # agentgrad report onto a file that is not a report: the command that replaces it, which works
    mine = tmp_path / "mine.html"
    mine.write_text("mine")
    assert main(["report", str(b), "--out", str(mine)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    hint = f"agentgrad report {b} --out {mine} --overwrite"
    assert "not an agentgrad report" in err and hint in err and mine.read_text() == "mine", err
    assert main(hint.split()[1:]) == 0 and "agentgrad report" in mine.read_text()


@pytest.mark.slow
def test_a_finished_tau_bench_optimisation_resumes_as_its_hint_says(tmp_path, capsys):
    from agentgrad.benchmarks.data import benchmark_dir
    from agentgrad.errors import ConfigError

    try:
        benchmark_dir("taubench_retail")
    except ConfigError as e:
        pytest.skip(str(e))
    out = tmp_path / "opt"
    args = ["bench", "taubench", "optimize", "--out", str(out), "--samples", "1", "--tasks", "0", "--max-steps", "1",
            "--model", "tiny", "--user-model", "tiny"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 1 and "pass --resume to continue it" in capsys.readouterr().err
    assert main(args + ["--resume"]) == 0, capsys.readouterr().err  # the hint, followed (it was: "no events.jsonl")


# --- 3. binary and empty files --------------------------------------------------------------------------
BINARY = b"\x8f\x00\x01\x02\xffbinary"
GZIP = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03abc"


def _readers(f, out):
    """Every command that reads a user's file, that file given."""
    return {
        "blame": ["blame", f, "--loss", "x", "--method", "last", "--out", out],
        "import chat": ["import", "chat", f, "--out", out],
        "import otel": ["import", "otel", f, "--out", out],
        "import openinference": ["import", "openinference", f, "--out", out],
        "import whowhen": ["import", "whowhen", f, "--out", out],
        "trace show": ["trace", "show", f],
        "attribute": ["attribute", f, "--scorer", "unused", "--out", f"{out}.json"],
        "report": ["report", f, "--out", f"{out}.html"],
        "run (system)": ["run", f, "--inputs", f, "--out", out],
        "optimize": ["optimize", f, "--out", out],
        "bench multiwoz score": ["bench", "multiwoz", "score", f],
    }


EXPECTED = {"blame": "a trace agentgrad reads", "import chat": "chat JSONL", "import otel": "OTLP JSON spans",
            "import openinference": "OTLP JSON spans", "import whowhen": "Who&When archive",
            "trace show": "an agentgrad trace", "attribute": "an agentgrad trace", "report": "an agentgrad trace",
            "run (system)": "a system YAML", "optimize": "an optimisation YAML",
            "bench multiwoz score": "predictions JSON"}


@pytest.mark.parametrize("kind", ["empty", "whitespace", "binary", "gzip", "latin-1"])
def test_binary_and_empty_files_get_one_line_saying_what_they_are(tmp_path, capsys, kind):
    content = {"empty": b"", "whitespace": b" \n\n", "binary": BINARY, "gzip": GZIP, "latin-1": b"caf\xe9\n"}[kind]
    said = {"empty": "is empty (0 bytes)", "whitespace": "is empty (only whitespace)", "binary": "is binary data",
            "gzip": "is a gzip archive", "latin-1": "is not UTF-8 text (byte 0xe9 at offset 3, line 1)"}[kind]
    f = tmp_path / "input.json"
    f.write_bytes(content)
    for what, args in _readers(str(f), str(tmp_path / "out")).items():
        assert main(args) != 0, what
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error:") and "codec" not in err, (what, err)
        if what == "import whowhen" and kind not in ("empty",):
            assert "not a .tar.gz archive" in err, err  # a text file or another binary: the archive expected
            continue
        assert said in err and EXPECTED[what] in err, (what, err)
        assert not (tmp_path / "out").exists(), what


def test_the_step_lines_and_the_demo_say_what_happened_in_words():
    """The step line and the demo's edit lines named event keys ("update frequency 0.67",
    "blamed reader x2", "Warning bullets (no sentence to remove)"); they now say what happened."""
    from agentgrad.examples.demo import plain
    from agentgrad.optim.run import step_line

    e = {"step": 1, "train_score": 0.5, "blamed": {"reader": 2, "answerer": 1}, "accepted": False,
         "updated": ["reader"], "update_frequency": 0.5, "val_before": 0.67, "val_after": 0.58}
    line = step_line(e)
    assert line == ("step 1: training score 0.50; blamed reader (in 2 failed samples), answerer (in 1 failed sample); "
                    "rewrote the prompt of reader; rejected: the validation score did not rise (validation 0.67 -> 0.58), "
                    "the prompts were put back")
    assert "accepted: the validation score rose (validation 0.58 -> 0.67)" in step_line(
        {**e, "accepted": True, "val_before": 0.58, "val_after": 0.67})
    assert step_line({**e, "accepted": None, "updated": [], "note": "no failures"}).endswith(
        "; no prompt changed (no failures)")
    assert "no line of its prompt was left to remove" in plain("reader: Warning bullets (no sentence to remove)")
    assert plain("reader: removed 'Example: x' (gradient share 0.69)") == "reader: removed 'Example: x' (gradient share 0.69)"


@pytest.mark.parametrize("argv", [["bench", "ablation", "--model", "tiny", "--systems", "pipeline"],
                                  ["bench", "inject", "--model", "tiny", "--questions", "1"]])
def test_a_benchmark_out_that_holds_no_benchmark_is_not_told_to_resume(tmp_path, capsys, argv):
    """`bench ablation` and `bench inject` told any non-empty --out to "pass --resume"; a folder
    they did not write has nothing to resume, and following the advice wrote into it."""
    out = tmp_path / "notes"
    out.mkdir()
    (out / "mine.txt").write_text("a user's file\n")
    for extra in ([], ["--resume"]):
        assert main([*argv, "--out", str(out), *extra]) != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "nothing to resume" in err and "pass --resume" not in err, err
        assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]  # nothing written beside the user's file


def test_the_progress_of_a_blame_counts_the_calls_scored_and_is_silent_off_a_terminal(tmp_path, tiny_llama, capsys):
    """A blame shows on stderr which method runs and how many calls it has scored; piped (no
    terminal) or with --quiet it shows nothing, and the verdict printed is the same."""
    from agentgrad.cli.blame_trace import CallProgress

    shown = CallProgress()
    assert not shown.on  # the tests' stderr is no terminal
    shown.method("gbc:max_l1:targeted:blend")
    shown.computed("gradient blame", 4, 1.5)
    shown.computed("occlusion", 4, 0.2)  # not a gradient: not counted
    assert shown.calls == 1 and "1 call(s) scored" in shown.progress.tasks[0].description
    f = _spans(tmp_path)
    outs = []
    for extra, out in (([], "A"), (["--quiet"], "B")):
        res = _blame(CliRunner(), f, "--loss", "the population is wrong", "--wrong", "9,999,999",
                     "--scorer", str(tiny_llama), *extra, "--out", tmp_path / out)
        assert res.exit_code == 0, res.output
        text = re.sub(r"Loading weights:.*?it/s\]", "", res.output)  # transformers' own bar, and its timing
        outs.append([x for x in text.splitlines() if not x.startswith("wrote ")])
    assert outs[0] == outs[1] and not capsys.readouterr().err
