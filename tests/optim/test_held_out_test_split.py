"""The held-out test split of an optimisation run : ``trainer.test`` scores the
starting and the final prompts on questions no step and no gate read; the demo prints it."""

from __future__ import annotations

import io
import json

import yaml
from rich.console import Console

from agentgrad.cli import main
from agentgrad.optim.config import OptimizeConfig


def _task(tmp_path, test: dict | None, with_data: bool = True):
    """A pipeline whose answer is right only once a prompt has a Warning section (see _fake_backend)."""
    system = {"name": "warned", "inputs": ["question"],
              "models": {"default": {"backend": "fake", "replies": ["x"], "cycle": True}},
              "agents": {"extractor": {"prompt": "Extract.", "inputs": ["question"]},
                         "answerer": {"prompt": "Answer.", "inputs": ["extractor", "question"]}}}
    (tmp_path / "system.yaml").write_text(yaml.safe_dump(system))
    for split, n in (("train", 4), ("val", 2), ("test", 3)):
        rows = [{"id": f"{split}{i}", "question": f"q{i}", "answer": "x"} for i in range(n)]
        (tmp_path / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    data = {"train": "train.jsonl", "val": "val.jsonl"} | ({"test": "test.jsonl"} if with_data else {})
    cfg = {"system": "system.yaml", "data": data, "models": {"scorer": {"backend": "tiny"}},
           "scorer": {"model": "scorer"}, "optimizer": {"kind": "deterministic"},
           "trainer": {"samples": 4, "step_every": 2, "validate": {"size": 2}} | ({"test": test} if test is not None else {})}
    path = tmp_path / "opt.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _fake_backend(monkeypatch):
    from agentgrad.models import registry
    from agentgrad.models.fake import FakeModel

    def responder(messages, tools):  # a warned extractor writes "fixed"; an answerer that reads it, or is warned, "x"
        system, user = messages[0]["content"], messages[-1]["content"]
        if "## Warning" in system:
            return "fixed" if system.startswith("Extract") else "x"
        return "x" if "fixed" in user else "wrong"

    registry.list_backends()  # the built-in backends registered first: replacing "fake" must not hide them
    monkeypatch.setitem(registry._BACKENDS, "fake", lambda name, **o: FakeModel(responder=responder, name=name))


def test_the_test_split_is_scored_before_and_after_and_changes_no_step(tmp_path, monkeypatch):
    _fake_backend(monkeypatch)
    path = _task(tmp_path, {"size": 2})
    R = tmp_path / "R"
    assert main(["optimize", str(path), "--out", str(R)]) == 0
    final = json.loads((R / "final.json").read_text())
    assert final["accepted"] >= 1 and any("## Warning" in p for p in final["prompts"].values())
    assert (final["test_before"], final["test_after"], final["test_size"]) == (0.0, 1.0, 2)
    events = [json.loads(x) for x in (R / "events.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "train_finished" and events[-1]["test_after"] == 1.0
    samples = {e["sample"] for e in events if e["event"] == "sample"}
    assert not any(s.startswith("test") for s in samples)  # the loop never ran a test question
    # the test split is no part of what a resumed run must match
    (tmp_path / "b").mkdir()
    plain = OptimizeConfig.model_validate(yaml.safe_load(_task(tmp_path / "b", None).read_text()))
    with_test = OptimizeConfig.model_validate(yaml.safe_load(path.read_text()))
    assert plain.digest() == with_test.digest()


def test_a_test_split_asked_for_but_missing_is_one_line_before_the_run(tmp_path, monkeypatch, capsys):
    _fake_backend(monkeypatch)
    path = _task(tmp_path, {"size": 0}, with_data=False)
    assert main(["optimize", str(path), "--out", str(tmp_path / "R")]) != 0
    err = capsys.readouterr().err
    assert "no 'test' split" in err and "Traceback" not in err
    assert not (tmp_path / "R" / "events.jsonl").exists() or "sample" not in (tmp_path / "R" / "events.jsonl").read_text()


def test_the_demo_prints_validation_and_test_before_and_after():
    from agentgrad.examples.demo import show

    buf = io.StringIO()
    show({"failing": None, "edits": [], "rejected": [], "changed": {}, "val_before": 0.67, "val_after": 0.83,
          "steps": 3, "accepted": 1, "test_before": 0.6, "test_after": 0.75, "test_size": 48}, Console(file=buf, width=200))
    out = buf.getvalue()
    assert "validation (the gate's questions, which chose the prompts): 0.67 -> 0.83" in out
    assert "test (48 held-out questions no step and no gate read): 0.60 -> 0.75" in out
