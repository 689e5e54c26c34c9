import json
import re
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
import yaml

from agentgrad import ConfigError
from agentgrad.blame.backward import cut
from agentgrad.cli import main
from agentgrad.examples import PIPELINE

OPTIMIZE = PIPELINE / "optimize.yaml"


def events(run):
    return [json.loads(l) for l in (run / "events.jsonl").read_text().splitlines() if l.strip()]


def test_demo_writes_the_whole_run_directory(demo_run):
    R = demo_run
    assert len(list((R / "traces").glob("*.json"))) == 9
    attributions = list((R / "attribution").glob("*.json"))
    assert len(attributions) == 9  # the random model fails, so every sample is attributed
    rec = json.loads(attributions[0].read_text())
    assert rec["trajectories"] and rec["loss"]["targets"] and rec["kept_edges"]
    assert sorted(p.name for p in (R / "prompts").glob("*.json"))[0] == "step-0000.json"
    ckpt = json.loads((R / "checkpoint.json").read_text())
    assert ckpt["next_sample"] == 9 and ckpt["step"] == 3 and len(ckpt["rng"]["python"][1]) == 625
    steps = [e for e in events(R) if e["event"] == "step"]
    assert len(steps) == 3
    for s in steps:  # observability: scores, blamed agents and counts, normalised update frequency
        assert s["blamed"] and 0 < s["update_frequency"] <= 1 and "val_after" in s
        assert s["update_frequency"] == len(s["updated"]) / len(s["relevant"])
    final = json.loads((R / "final.json").read_text())
    accepted = [s for s in steps if s["accepted"]]
    assert final["accepted"] == len(accepted)
    last = json.loads(sorted((R / "prompts").glob("*.json"))[-1].read_text())
    edited = {a for a, p in final["prompts"].items() if "## Warning" in p}
    assert last == final["prompts"] and edited and edited <= {a for s in accepted for a in s["updated"]}
    assert "Reply with the answer only." in final["prompts"]["answerer"]  # the protected span survives
    assert (R / "report.html").is_file()


def test_demo_bullets_come_from_each_agents_own_failures(demo_run):
    """Each new Warning bullet of an agent names a loss of a sample of that step whose trajectories it is
    on, with its own output in that sample as the example; no bullet twice."""
    R = demo_run
    samples: list[str] = []
    checked = 0
    for e in events(R):
        if e["event"] == "sample":
            samples.append(e["sample"])
            continue
        if e["event"] != "step":
            continue
        step_samples, samples = samples, []
        if not e["accepted"]:
            continue
        earlier = [p for p in sorted((R / "prompts").glob("step-*.json")) if p.name < f"step-{e['step']:04d}.json"]
        before = json.loads(earlier[-1].read_text())  # the prompts of the last accepted step before this one
        after = json.loads((R / "prompts" / f"step-{e['step']:04d}.json").read_text())
        recs = [json.loads((R / "attribution" / f"{sid}.json").read_text()) for sid in step_samples
                if (R / "attribution" / f"{sid}.json").exists()]
        for agent in e["updated"]:
            bullets = [b for b in after[agent].splitlines() if b.startswith("- ")]
            assert len(bullets) == len(set(bullets))
            new = [b for b in bullets if b not in before[agent].splitlines()]
            own = [r for r in recs if any(agent in t["agents"] for t in r["trajectories"])]
            assert 1 <= len(new) <= len(own), (agent, new)
            examples = set()  # the agent's own first output on each of its samples' trajectories
            for r in own:
                nodes = json.loads((R / r["trace"]).read_text())["nodes"]
                first = next(nodes[n] for t in r["trajectories"] for n in t["nodes"]
                             if nodes[n]["kind"] == "call" and nodes[n]["name"] == agent)
                examples.add(f"(e.g. you wrote {cut(' '.join(first['output']['text'].split()), 60)!r})")
            for b in new:
                assert any(b.endswith(x) for x in examples), (agent, b, examples)
                checked += 1
    assert checked


@pytest.mark.slow
@pytest.mark.parametrize("concurrency", [1, 3])
def test_kill_9_then_resume_equals_uninterrupted(demo_run, tmp_path, concurrency):
    """kill -9 in the middle of `agentgrad optimize`, then --resume: same prompts and scores, at any
    concurrency (the demo ran sequentially)."""
    R = tmp_path / "R"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "agentgrad.cli", "optimize", str(OPTIMIZE), "--out", str(R),
           "--concurrency", str(concurrency)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 120
    killed_at = None
    while time.time() < deadline and proc.poll() is None:
        if (R / "events.jsonl").exists():
            evs = events(R)
            # after the first step, in the middle of the second batch
            if any(e["event"] == "step" for e in evs) and sum(e["event"] == "sample" for e in evs) >= 4:
                proc.send_signal(signal.SIGKILL)
                killed_at = len(evs)
                break
        time.sleep(0.02)
    proc.wait()
    assert killed_at is not None, "the run finished before it could be killed"
    assert not (R / "final.json").exists()
    assert main(["optimize", str(OPTIMIZE), "--out", str(R), "--resume", "--concurrency", str(concurrency)]) == 0
    want = json.loads((demo_run / "final.json").read_text())
    got = json.loads((R / "final.json").read_text())
    assert got == want
    assert any(e["event"] == "resumed" for e in events(R))
    prompts = sorted(p.name for p in (demo_run / "prompts").glob("*.json"))
    assert len(prompts) == want["accepted"] + 1 and sorted(p.name for p in (R / "prompts").glob("*.json")) == prompts
    for name in prompts:
        assert json.loads((R / "prompts" / name).read_text()) == json.loads((demo_run / "prompts" / name).read_text())


@pytest.mark.slow  # over 3 s alone on 2 cores: out of the fast subset
def test_concurrent_steps_equal_the_sequential_run(demo_run, tmp_path):
    """trainer.concurrency 3: a step's episodes and the validation gate run at once; samples, seeds,
    updates, prompts and weights are those of the sequential demo."""
    R = tmp_path / "C"
    assert main(["optimize", str(OPTIMIZE), "--out", str(R), "--concurrency", "3"]) == 0
    assert json.loads((R / "final.json").read_text()) == json.loads((demo_run / "final.json").read_text())
    prompts = sorted(p.name for p in (demo_run / "prompts").glob("*.json"))
    assert len(prompts) >= 2 and sorted(p.name for p in (R / "prompts").glob("*.json")) == prompts
    for name in prompts:
        assert json.loads((R / "prompts" / name).read_text()) == json.loads((demo_run / "prompts" / name).read_text())

    def strip(evs):
        return [{k: v for k, v in e.items() if k != "time"} for e in evs]

    assert strip(events(R)) == strip(events(demo_run))  # the same events, in the same order
    attributed = sorted(f.name for f in (demo_run / "attribution").glob("*.json"))
    assert attributed and sorted(f.name for f in (R / "attribution").glob("*.json")) == attributed
    for name in attributed:
        a, b = json.loads((demo_run / "attribution" / name).read_text()), json.loads((R / "attribution" / name).read_text())
        assert a["seed"] == b["seed"] and a["kept_edges"] == b["kept_edges"] and a["trajectories"] == b["trajectories"]
        for na, nb in zip(a["nodes"], b["nodes"], strict=True):
            assert [s["weights"] for s in na["sources"]] == [s["weights"] for s in nb["sources"]]


def test_resume_refuses_a_changed_config(demo_run, tmp_path):
    cfg = yaml.safe_load(OPTIMIZE.read_text())
    cfg["trainer"]["samples"] = 6
    for k in ("system",):
        cfg[k] = str(PIPELINE / cfg[k])
    cfg["data"] = {k: str(PIPELINE / v) for k, v in cfg["data"].items()}
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    import shutil

    R = tmp_path / "R"
    shutil.copytree(demo_run, R)
    from agentgrad.optim.run import run_optimize
    from rich.console import Console

    before = (R / "config.yaml").read_text()
    with pytest.raises(ConfigError, match="started with other configuration"):
        run_optimize(changed, R, resume=True, overrides=[], method=None, console=Console(quiet=True))
    assert (R / "config.yaml").read_text() == before  # the run's record of its configuration is untouched


def fake_task_config(tmp_path, optimizer, validate=True, replies_fn="answer_right_without_warning"):
    """A pipeline whose answer is right only while the answerer's prompt has no Warning section."""
    system = {
        "name": "fake-pipeline",
        "inputs": ["question"],
        "models": {"default": {"backend": "fake", "replies": ["x"], "cycle": True}},
        "agents": {
            "extractor": {"prompt": "Extract.", "inputs": ["question"]},
            "answerer": {"prompt": "Answer.", "inputs": ["extractor", "question"]},
        },
    }
    (tmp_path / "system.yaml").write_text(yaml.safe_dump(system))
    rows = [{"id": f"e{i}", "question": f"q{i}", "answer": "x"} for i in range(6)]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "val.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:2]))
    cfg = {
        "system": "system.yaml",
        "data": {"train": "train.jsonl", "val": "val.jsonl"},
        "models": {"scorer": {"backend": "tiny"}},
        "scorer": {"model": "scorer"},
        "optimizer": optimizer,
        "trainer": {"samples": 6, "step_every": 2, "validate": {"size": 2} if validate else None},
    }
    path = tmp_path / "opt.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_validation_gate_rejects_a_step_that_hurts(tmp_path, monkeypatch, capsys):
    from agentgrad.models import registry

    calls = {"n": 0}

    def responder(messages, tools):  # answers right until the prompt carries a Warning
        calls["n"] += 1
        sys_prompt = messages[0]["content"]
        if "## Warning" in sys_prompt:
            return "wrong"
        return "x" if calls["n"] % 3 else "nope"  # every third call fails, so there is something to fix

    from agentgrad.models.fake import FakeModel

    registry.list_backends()  # the built-in backends registered first: replacing "fake" must not hide them
    monkeypatch.setitem(registry._BACKENDS, "fake", lambda name, **o: FakeModel(responder=responder, name=name))
    path = fake_task_config(tmp_path, {"kind": "deterministic"})
    R = tmp_path / "R"
    capsys.readouterr()
    assert main(["optimize", str(path), "--out", str(R)]) == 0
    steps = [e for e in events(R) if e["event"] == "step"]
    rolled = [s for s in steps if s["accepted"] is False]
    assert rolled and all(s["val_after"] < s["val_before"] for s in rolled)
    final = json.loads((R / "final.json").read_text())
    assert final["rejected"] == len(rolled) and "## Warning" not in final["prompts"]["answerer"]
    assert sorted(p.name for p in (R / "prompts").glob("*.json")) == ["step-0000.json"]  # nothing accepted
    # one word for a step the gate refuses: the step lines, the summary and the report say "rejected"
    out, report = " ".join(capsys.readouterr().out.split()), (R / "report.html").read_text()  # lines unwrapped
    assert out.count("; rejected: the validation score did not rise (validation ") == len(rolled)
    # the phases with no sample events say how far they are (a line at their end, and every 30 s)
    assert re.search(r"validation of the starting prompts: (\d+) of \1 questions run", out)
    assert out.count("validation of the new prompts: ") >= len(rolled)
    assert not [e for e in events(R) if e["event"] == "progress"]  # shown, never logged
    assert "update frequency" not in out and " x1" not in out  # words, not the event's keys
    assert f"{len(rolled)} rejected; train score" in out
    assert ">rejected<" in report and "rolled back" not in out + report


def test_a_failing_optimizer_skips_the_step_and_the_run_goes_on(tmp_path, monkeypatch):
    from agentgrad.models import registry
    from agentgrad.models.fake import FakeModel

    bad = FakeModel(["not json at all"], cycle=True, name="opt", structured=False)  # cannot keep the format
    registry.list_backends()  # the built-in backends registered first: replacing "fake" must not hide them
    monkeypatch.setitem(registry._BACKENDS, "fake",
                        lambda name, **o: bad if name == "opt" else FakeModel(["wrong"], cycle=True, name=name))
    path = fake_task_config(tmp_path, {"kind": "llm", "model": "opt", "max_attempts": 2}, validate=False)
    cfg = yaml.safe_load(path.read_text())
    cfg["models"]["opt"] = {"backend": "fake"}
    path.write_text(yaml.safe_dump(cfg))
    R = tmp_path / "R"
    assert main(["optimize", str(path), "--out", str(R)]) == 0
    steps = [e for e in events(R) if e["event"] == "step"]
    assert len(steps) == 3 and all(s["skipped"] and len(s["errors"]) == 2 for s in steps)
    assert "not JSON" in steps[0]["errors"][0]
    assert json.loads((R / "final.json").read_text())["steps"] == 3


def test_optimize_needs_out(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "agentgrad.cli", "optimize", str(OPTIMIZE)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Missing option '--out'" in proc.stderr and "Traceback" not in proc.stderr


def continue_command(err: str) -> list[str]:
    """The command an interrupted run's one line says continues it."""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted: ") and "continue with: " in lines[0], err
    return shlex.split(lines[0].split("continue with: ", 1)[1])


@pytest.mark.slow
def test_ctrl_c_says_what_was_kept_and_the_command_it_prints_finishes_the_demo(demo_run, tmp_path):
    """Ctrl-C in the middle of `agentgrad demo`: exit 130 and one line naming what was kept and the
    command that continues it; that command ends as the uninterrupted demo did, report included."""
    R = tmp_path / "R"
    proc = subprocess.Popen([sys.executable, "-m", "agentgrad.cli", "demo", "--tiny", "--out", str(R)], text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            # a job started in the background ignores SIGINT, and so would its children
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (R / "events.jsonl").exists() and any(e["event"] == "step" for e in events(R)):
            proc.send_signal(signal.SIGINT)
            break
        time.sleep(0.02)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert not (R / "final.json").exists(), "the demo finished before it could be interrupted"
    argv = continue_command(err)
    assert argv == ["agentgrad", "demo", "--tiny", "--out", str(R), "--resume"]
    assert f"{R} keeps the checkpoint after step " in err
    assert main(argv[1:]) == 0
    assert json.loads((R / "final.json").read_text()) == json.loads((demo_run / "final.json").read_text())
    assert (R / "report.html").is_file() and any(e["event"] == "resumed" for e in events(R))


@pytest.mark.slow  # over 3 s alone on 2 cores: out of the fast subset
def test_optimize_resumes_from_the_runs_own_config(demo_run, tmp_path, monkeypatch, capsys):
    """A stopped `optimize` continues from RUN_DIR/config.yaml (no unknown field, the same digest) and
    writes its report on the resumed completion."""
    from agentgrad.optim.trainer import Trainer

    real_step = Trainer.step

    def step(self, n, *args, **kwargs):
        if n == 2:
            raise KeyboardInterrupt  # Ctrl-C during the second step
        return real_step(self, n, *args, **kwargs)

    monkeypatch.setattr(Trainer, "step", step)
    R = tmp_path / "R"
    assert main(["optimize", str(OPTIMIZE), "--out", str(R)]) == 130
    err = capsys.readouterr().err
    assert continue_command(err) == ["agentgrad", "optimize", str(OPTIMIZE), "--out", str(R), "--resume"]
    assert f"{R} keeps the checkpoint after step 1 (3 samples done)" in err
    monkeypatch.setattr(Trainer, "step", real_step)
    assert not (R / "report.html").exists()
    assert main(["optimize", str(R / "config.yaml"), "--out", str(R), "--resume"]) == 0
    assert json.loads((R / "final.json").read_text()) == json.loads((demo_run / "final.json").read_text())
    assert (R / "report.html").is_file()


def test_a_report_a_ctrl_c_stopped_is_written_on_resume(demo_run, tmp_path, monkeypatch, capsys):
    """Interrupted while the report was written: the line says the run is complete but has no report,
    and the command it prints writes it."""
    import shutil

    import agentgrad.report.html as H

    R = tmp_path / "R"
    shutil.copytree(demo_run, R)
    (R / "report.html").unlink()
    final = (R / "final.json").read_text()
    real = H.write_report

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(H, "write_report", stopped)
    assert main(["demo", "--tiny", "--out", str(R), "--resume"]) == 130
    err = capsys.readouterr().err
    assert f"the run in {R} is complete but its report.html was not written" in err
    argv = continue_command(err)
    monkeypatch.setattr(H, "write_report", real)
    assert main(argv[1:]) == 0 and (R / "report.html").is_file()
    assert json.loads((R / "final.json").read_text()) == json.loads(final)


def test_a_runs_config_with_a_removed_secret_is_refused(tmp_path):
    from agentgrad.optim.config import load_optimize_config

    cfg = yaml.safe_load(OPTIMIZE.read_text())
    cfg["models"]["opt"] = {"backend": "openai", "model": "m", "api_key": "<redacted>"}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match=r"models\.opt\.api_key is <redacted>.*api_key_env"):
        load_optimize_config(path)


def test_a_long_phase_prints_a_line_at_least_every_30_seconds(tmp_path, monkeypatch, capsys):
    """The validation and test phases emit no sample events, and printed nothing for minutes on
    a loaded machine; each question run is now a progress event, printed at most PROGRESS_EVERY apart."""
    from agentgrad.cli import main
    from agentgrad.optim import run

    monkeypatch.setattr(run, "PROGRESS_EVERY", 0.0)  # every question: the cadence is the clock's, not a count
    R = tmp_path / "R"
    assert main(["optimize", str(fake_task_config(tmp_path, {"kind": "deterministic"})), "--out", str(R)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    lines = re.findall(r"validation of the starting prompts: (\d+) of (\d+) questions run", out)
    assert lines and [int(d) for d, _ in lines] == list(range(1, int(lines[0][1]) + 1))  # one per question
