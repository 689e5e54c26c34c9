"""Nothing a user types or a dataset holds destroys files, leaks a secret, or ends in a traceback."""

import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

from agentgrad import RunError
from agentgrad.cli import main
from agentgrad.examples import PIPELINE
from agentgrad.core.files import NameRegistry, RunFiles, check_new_output, safe_name
from agentgrad.optim.config import ValidateConfig
from agentgrad.core.redact import is_credential_key, redact_text, redacted
from agentgrad.runs.rundir import RunDir

DATA = Path(os.environ.get("AGENTGRAD_DATA_DIR", "data"))


def cli(*args):
    """(exit code, stdout, stderr) of ``agentgrad ARGS`` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def fake_system(tmp_path, replies=None, extra=None):
    cfg = {"name": "s", "inputs": ["question"],
           "models": {"default": {"backend": "fake", "replies": replies or ["ok"], "cycle": True, **(extra or {})}},
           "agents": {"a": {"prompt": "Answer.", "inputs": ["question"]}}}
    p = tmp_path / "system.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def inputs_file(tmp_path, rows, name="inputs.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


# --- safe names and confinement -----------------------------------------------------------------
def test_safe_names_stay_inside_and_never_collide():
    ids = ["q1", "../evil", "/etc/passwd", "a/b", "a_b", ".hidden", "", "x" * 300, "é", "a\x00b", "..", "."]
    names = [safe_name(i) for i in ids]
    assert names[0] == "q1" and names[4] == "a_b"  # plain ids are kept as they are
    assert len(set(names)) == len(names)  # "a/b" and "a_b" differ (a hash is appended)
    for n in names:
        assert "/" not in n and not n.startswith(".") and n not in ("", ".", "..") and len(n) <= 100
    reg = NameRegistry()
    reg.claim("a/b")
    assert reg.claim("a/b") == safe_name("a/b")  # the same sample again is fine
    reg._owner[safe_name("z")] = "'other'"
    with pytest.raises(RunError, match="samples 'other' and 'z' would both be written"):
        reg.claim("z")


def test_run_files_refuse_paths_leading_out(tmp_path):
    files = RunFiles(tmp_path / "run")
    for bad in ("../x.json", "/tmp/x.json", "a/../../x.json"):
        with pytest.raises(RunError, match="inside"):
            files.path(*Path(bad).parts) if not bad.startswith("/") else files.path(bad)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "link").symlink_to(tmp_path)
    with pytest.raises(RunError, match="outside"):
        files.write_json("link", "x.json", data={})
    assert not (tmp_path / "x.json").exists()


def test_optimize_with_hostile_and_duplicate_ids(tmp_path):
    """Sample ids that are paths write inside the run; duplicate ids are refused naming both."""
    cfg = yaml.safe_load((PIPELINE / "optimize.yaml").read_text())
    cfg["system"] = str(PIPELINE / "system.yaml")
    rows = [{"id": i, "question": "q?", "answer": "never"} for i in ("../escaped", str(tmp_path / "abs"), "a/b")]
    cfg["data"] = {"train": str(inputs_file(tmp_path, rows, "train.jsonl")), "val": str(PIPELINE / "val.jsonl")}
    cfg["trainer"] = {"samples": 3, "step_every": 3, "seed": 0}
    conf = tmp_path / "opt.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    before = files_under(tmp_path)
    rc, _, err = cli("optimize", conf, "--out", tmp_path / "R")
    assert rc == 0, err
    outside = {p for p in files_under(tmp_path) - before if tmp_path / "R" not in p.parents}
    assert outside == set()
    assert len(list((tmp_path / "R" / "traces").glob("*.json"))) == 3  # none overwrote another
    assert len(list((tmp_path / "R" / "attribution").glob("*.json"))) == 3
    rows.append({"id": "a/b", "question": "again", "answer": "x"})
    inputs_file(tmp_path, rows, "train.jsonl")
    rc, _, err = cli("optimize", conf, "--out", tmp_path / "R2")
    assert rc == 2 and "examples 3 and 4 have the same id 'a/b'" in err and len(err.strip().splitlines()) == 1
    inputs_file(tmp_path, rows[:3], "train.jsonl")  # fixed: the failed start does not block the retry
    assert cli("optimize", conf, "--out", tmp_path / "R2")[0] == 0


def test_attribute_out_never_destroys(tmp_path, tiny_llama):
    sysf = fake_system(tmp_path)
    rc, _, err = cli("run", sysf, "--inputs", inputs_file(tmp_path, [{"id": "x", "question": "q"}]), "--out",
                     tmp_path / "R")
    assert rc == 0, err
    trace = tmp_path / "R" / "traces" / "x.json"
    original = trace.read_text()
    unrelated = tmp_path / "notes.json"
    unrelated.write_text("keep me")
    rc, _, err = cli("attribute", trace, "--scorer", tiny_llama, "--out", unrelated)
    assert rc != 0 and "exists; pass --overwrite" in err and unrelated.read_text() == "keep me"
    for out in (tmp_path / "R" / "traces", tmp_path / "R"):  # the run's own traces: never, even with --overwrite
        rc, _, err = cli("attribute", tmp_path / "R", "--scorer", tiny_llama, "--out", out, "--overwrite")
        assert rc != 0 and "would overwrite the input" in err
    rc, _, err = cli("attribute", trace, "--scorer", tiny_llama, "--out", trace, "--overwrite")
    assert rc != 0 and trace.read_text() == original
    rc, _, err = cli("attribute", trace, "--scorer", tiny_llama, "--out", unrelated, "--overwrite")
    assert rc == 0 and json.loads(unrelated.read_text())["schema"] == "agentgrad.attribution"


def test_run_resume_matches_by_id_and_refuses_a_changed_system(tmp_path):
    sysf = fake_system(tmp_path, replies=["first"])
    rows = [{"id": "a", "question": "1"}, {"id": "b", "question": "2"}]
    R = tmp_path / "R"
    assert cli("run", sysf, "--inputs", inputs_file(tmp_path, rows), "--out", R)[0] == 0
    # reordered, with one new input: only the new one runs
    rows2 = [{"id": "c", "question": "3"}, rows[1], rows[0]]
    rc, _, err = cli("run", sysf, "--inputs", inputs_file(tmp_path, rows2), "--out", R, "--resume")
    assert rc == 0, err
    done = [e for e in map(json.loads, (R / "events.jsonl").read_text().splitlines()) if e["event"] == "input_done"]
    assert [e["id"] for e in done] == ["a", "b", "c"]
    # an id whose content changed is refused
    rows3 = [{"id": "a", "question": "changed"}]
    rc, _, err = cli("run", sysf, "--inputs", inputs_file(tmp_path, rows3), "--out", R, "--resume")
    assert rc == 2 and "input 'a' changed" in err
    # a changed system file is refused, and config.yaml is untouched
    config_before = (R / "config.yaml").read_text()
    sys2 = fake_system(tmp_path / "..", replies=["other"])
    rc, _, err = cli("run", sys2, "--inputs", inputs_file(tmp_path, rows), "--out", R, "--resume")
    assert rc == 2 and "started with other system configuration" in err
    assert (R / "config.yaml").read_text() == config_before


def test_duplicate_input_ids_are_refused(tmp_path):
    rc, _, err = cli("run", fake_system(tmp_path), "--inputs",
                     inputs_file(tmp_path, [{"id": 1, "question": "a"}, {"id": "1", "question": "b"}]),
                     "--out", tmp_path / "R")
    assert rc == 2 and "examples 1 and 2 have the same id '1'" in err


def test_stale_temporary_files_are_removed_on_resume(tmp_path):
    R = RunDir(tmp_path / "R")
    R.log("input_done", index=0)
    stale = tmp_path / "R" / "traces" / ".00000.json.1234.5678.tmp"
    stale.write_text("{half")
    keep = tmp_path / "R" / "traces" / "user.tmp"  # not ours: never touched
    keep.write_text("x")
    RunDir(tmp_path / "R", resume=True)
    assert not stale.exists() and keep.exists()


def test_secrets_never_reach_files_or_the_console(tmp_path):
    secret = "SUPERSECRET123"
    sysf = tmp_path / "system.yaml"
    sysf.write_text(yaml.safe_dump({
        "inputs": ["question"],
        "models": {"default": {"backend": "openai", "model": "m", "base_url": f"http://user:{secret}@127.0.0.1:9/v1",
                               "max_retries": 0, "timeout": 2, "extra_body": {"token": secret, "top_k": 3}}},
        "agents": {"a": {"prompt": "x", "inputs": ["question"]}}}))
    R = tmp_path / "R"
    rc, out, err = cli("run", sysf, "--inputs", inputs_file(tmp_path, [{"id": "q", "question": "hi"}]), "--out", R)
    assert rc == 1  # the server does not exist: every input failed, and the exit code says so
    assert secret not in out + err
    written = [p for p in files_under(tmp_path) if R in p.parents]
    assert written and all(secret not in p.read_text() for p in written)
    assert "top_k: 3" in (R / "config.yaml").read_text()  # only the secret went


def test_redaction_rules():
    assert redact_text("http://u:k@h/v1?api_key=abc&model=m") == "http://***@h/v1?api_key=<redacted>&model=m"
    assert redacted({"api_key": "x", "api_key_env": "OPENAI_API_KEY", "prompt_tokens": 3,
                     "headers": {"Authorization": "Bearer abcdefghijkl"}}) == {
        "api_key": "<redacted>", "api_key_env": "OPENAI_API_KEY", "prompt_tokens": 3,
        "headers": {"Authorization": "<redacted>"}}
    assert [is_credential_key(k) for k in ("hf_token", "clientSecret", "password", "max_new_tokens", "monkey")] == [
        True, True, True, False, False]


USAGE_ERRORS = [
    [], ["run"], ["bogus"], ["run", "--nope"], ["run", "s.yaml", "--inputs", "i", "--out", "o", "--concurrency", "0"],
    ["bench"], ["bench", "taubench"], ["bench", "multiwoz", "evaluate", "--out", "o", "--n", "0"],
    ["attribute", "t.json", "--scorer", "s", "--out", "o", "--top-k", "0"], ["trace"], ["trace", "show"],
    ["optimize"], ["testing", "tiny-model"],
]


@pytest.mark.parametrize("args", USAGE_ERRORS, ids=lambda a: " ".join(a) or "(none)")
def test_usage_errors_are_one_line(args):
    rc, _, err = cli(*args)
    assert rc == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error:")


def test_bad_files_are_one_line_errors(tmp_path, tiny_llama):
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe\x00garbage\x80")
    sysf = fake_system(tmp_path)
    empty_agents = tmp_path / "empty.yaml"
    empty_agents.write_text("agents: {}\n")
    nodes_str = tmp_path / "t1.json"
    nodes_str.write_text(json.dumps({"schema": "agentgrad.trace", "schema_version": 1, "nodes": "oops"}))
    orphan = tmp_path / "t2.json"
    orphan.write_text(json.dumps({"schema": "agentgrad.trace", "schema_version": 1, "nodes": [
        {"id": 0, "kind": "input", "output": {"text": "x"}, "parents": [5]}]}))
    ok_inputs = inputs_file(tmp_path, [{"question": "q"}])
    cases = [
        (["run", binary, "--inputs", ok_inputs, "--out", tmp_path / "o1"], "not UTF-8"),
        (["run", sysf, "--inputs", binary, "--out", tmp_path / "o2"], "not UTF-8"),
        (["run", empty_agents, "--inputs", ok_inputs, "--out", tmp_path / "o3"], "agents"),
        (["trace", "show", binary], "not UTF-8"),
        (["trace", "show", nodes_str], "\"nodes\" must be a list"),
        (["trace", "show", orphan], "parent 5, which is not an earlier node"),
        (["attribute", nodes_str, "--scorer", tiny_llama, "--out", tmp_path / "a.json"], "must be a list"),
    ]
    for args, msg in cases:
        rc, _, err = cli(*args)
        assert rc != 0 and msg in err and len(err.strip().splitlines()) == 1, (args, err)
        assert "Traceback" not in err


def test_exit_code_is_non_zero_when_every_input_fails(tmp_path, tiny_llama):
    sysf = tmp_path / "s.yaml"
    sysf.write_text(yaml.safe_dump({"inputs": ["question"],
                                    "models": {"default": {"backend": "hf", "path": str(tiny_llama), "max_context": 8}},
                                    "agents": {"a": {"prompt": "A long prompt that does not fit.", "inputs": ["question"]}}}))
    rc, out, err = cli("run", sysf, "--inputs", inputs_file(tmp_path, [{"question": "q"}] * 4), "--out", tmp_path / "R")
    assert rc == 1 and "input 0 failed" in err


def test_a_failed_start_does_not_block_the_retry(tmp_path):
    sysf = tmp_path / "s.yaml"
    sysf.write_text(yaml.safe_dump({"inputs": ["question"], "models": {"default": {"backend": "nope"}},
                                    "agents": {"a": {"prompt": "x", "inputs": ["question"]}}}))
    inputs = inputs_file(tmp_path, [{"question": "q"}])
    rc, _, err = cli("run", sysf, "--inputs", inputs, "--out", tmp_path / "R")
    assert rc == 2 and "unknown model backend" in err
    rc, _, err = cli("run", fake_system(tmp_path), "--inputs", inputs, "--out", tmp_path / "R")
    assert rc == 0, err
    # a folder holding only a failed start's leftovers is reused too
    (tmp_path / "S").mkdir()
    (tmp_path / "S" / "config.yaml").write_text("x: 1\n")
    (tmp_path / "S" / "events.jsonl").write_text('{"event": "started", "digest": "0"}\n')
    RunDir(tmp_path / "S")
    with pytest.raises(RunError, match="not empty"):
        (tmp_path / "T").mkdir()
        (tmp_path / "T" / "mine.txt").write_text("user data")
        RunDir(tmp_path / "T")


def test_validation_gate_needs_a_choice_to_accept_non_improvement():
    strict = ValidateConfig()
    assert strict.accepts(0.2, 0.4) and not strict.accepts(0.0, 0.0) and not strict.accepts(0.5, 0.4)
    assert ValidateConfig(accept_ties=True).accepts(0.0, 0.0)
    assert ValidateConfig(tolerance=0.1).accepts(0.5, 0.45) and not ValidateConfig(tolerance=0.1).accepts(0.5, 0.3)


def test_check_new_output(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    check_new_output(d, False, "dir")  # empty: fine
    (d / "f").write_text("x")
    with pytest.raises(RunError, match="not empty"):
        check_new_output(d, False, "dir")
    check_new_output(d, True, "dir")


@pytest.mark.skipif(not (DATA / "taubench_retail").is_dir(), reason="tau-bench data not found (set AGENTGRAD_DATA_DIR)")
def test_benchmark_outputs_refuse_non_empty_folders(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "result.json").write_text("precious")
    rc, _, err = cli("bench", "taubench", "replay-gold", "--split", "dev", "--dump-db", full)
    assert rc != 0 and "not empty" in err
    rc, _, err = cli("bench", "taubench", "optimize", "--out", full, "--model", "tiny", "--user-model", "tiny",
                     "--tasks", "0")
    assert rc != 0 and "not empty" in err and (full / "result.json").read_text() == "precious"
    rc, _, err = cli("bench", "taubench", "evaluate", "--out", tmp_path / "e", "--tasks", "5-2", "--model", "tiny",
                     "--user-model", "tiny")
    assert rc == 2 and "is empty" in err


def test_strict_gate_rolls_back_steps_that_do_not_improve(tmp_path):
    cfg = yaml.safe_load((PIPELINE / "optimize.yaml").read_text())
    cfg["system"] = str(PIPELINE / "system.yaml")
    cfg["data"] = {k: str(PIPELINE / v) for k, v in cfg["data"].items()}
    cfg["trainer"].update(samples=3, step_every=3, validate={"size": 2})  # accept_ties off: the default
    conf = tmp_path / "opt.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    rc, _, err = cli("optimize", conf, "--out", tmp_path / "R")
    assert rc == 0, err
    step = next(e for e in map(json.loads, (tmp_path / "R" / "events.jsonl").read_text().splitlines())
                if e["event"] == "step")
    assert step["val_before"] == step["val_after"] == 0.0 and step["accepted"] is False and step["updated"] == []
    assert not (tmp_path / "R" / "prompts" / "step-0001.json").exists()
    original = yaml.safe_load((PIPELINE / "system.yaml").read_text())["agents"]
    assert step["proposed"] and all(original[a]["prompt"] != text for a, text in step["proposed"].items())


def test_debug_adds_a_traceback_and_keeps_the_exit_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args in [a for a in USAGE_ERRORS if a] + [["optimize", "no-such.yaml", "--out", "o"]]:
        rc, _, err = cli(*args)
        rc_debug, _, err_debug = cli("--debug", *args)
        assert rc_debug == rc == 2, (args, err_debug)
        assert err_debug.strip().splitlines()[-1] == err.strip().splitlines()[-1]
    assert "Traceback" in err_debug and "ConfigError" in err_debug  # the configuration error's traceback


def _command_paths(cmd, path=()):
    yield path
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _command_paths(sub, path + (name,))


def test_help_shows_flags_without_a_type():
    """typer 0.29 shows a flag as `--debug <bool>`, which invites `--debug true` (an error)."""
    import typer

    from agentgrad.cli import app

    paths = list(_command_paths(typer.main.get_command(app)))
    assert len(paths) > 20
    for path in paths:
        rc, out, _ = cli(*path, "--help")
        assert rc == 0 and "--help" in out and "<bool>" not in out, (path, out)
    line = next(line for line in cli("--help")[1].splitlines() if "--debug" in line)
    assert "Show tracebacks" in line and "<" not in line
    line = next(line for line in cli("demo", "--help")[1].splitlines() if "--resume" in line)
    assert "Continue" in line and "<" not in line


def test_the_interrupt_line_counts_a_benchmark_episode_once_and_whowhen_logs(tmp_path):
    """A benchmark writes an episode's record (episodes/) beside its trace (traces/); Who&When writes logs/."""
    from agentgrad.runs.rundir import kept_summary

    for i in range(3):
        for d in ("episodes", "traces"):
            (tmp_path / "b" / d).mkdir(parents=True, exist_ok=True)
            (tmp_path / "b" / d / f"e{i}.json").write_text("{}")
    assert kept_summary(tmp_path / "b").endswith("keeps 3 finished episode(s)")
    (tmp_path / "w" / "logs").mkdir(parents=True)
    for i in range(2):
        (tmp_path / "w" / "logs" / f"l{i}.json").write_text("{}")
    assert kept_summary(tmp_path / "w").endswith("keeps 2 finished log(s)")
