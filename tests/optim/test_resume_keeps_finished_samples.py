"""A stop in the middle of a step keeps the samples already finished: the one line says so, and
--resume does not run them again (Ctrl-C during the demo at 4/12 once lost them)."""

import json

import yaml

from agentgrad.cli import main
from agentgrad.optim.trainer import Trainer
from test_trainer import events, fake_task_config


def test_samples_finished_before_a_stop_are_kept_and_not_run_again(tmp_path, monkeypatch, capsys):
    path = fake_task_config(tmp_path, {"kind": "deterministic"})
    system = yaml.safe_load((tmp_path / "system.yaml").read_text())
    system["models"]["default"]["replies"] = ["nope"]  # every sample fails: each keeps its blame and trajectories
    (tmp_path / "system.yaml").write_text(yaml.safe_dump(system))
    whole = tmp_path / "whole"
    assert main(["optimize", str(path), "--out", str(whole)]) == 0
    ran: list[str] = []
    real_sample, real_step = Trainer._sample, Trainer.step

    def sample(self, example, seed):
        ran.append(str(example["id"]))
        return real_sample(self, example, seed)

    def stop_at_step_2(self, step, *a, **k):  # Ctrl-C while step 2's optimizer runs: its samples are done
        if step == 2:
            raise KeyboardInterrupt
        return real_step(self, step, *a, **k)

    monkeypatch.setattr(Trainer, "_sample", sample)
    monkeypatch.setattr(Trainer, "step", stop_at_step_2)
    R = tmp_path / "R"
    capsys.readouterr()
    assert main(["optimize", str(path), "--out", str(R)]) == 130
    err = " ".join(capsys.readouterr().err.split())
    assert len(ran) == 4
    assert "after step 1 (2 samples done) and 2 finished sample(s) of the next step" in err
    assert len(list((R / "pending").glob("*.json"))) == 2
    monkeypatch.setattr(Trainer, "step", real_step)
    first = list(ran)
    ran.clear()
    assert main(["optimize", str(path), "--out", str(R), "--resume"]) == 0
    assert len(ran) == 2 and not set(ran) & set(first)  # only the last step's two samples ran
    assert json.loads((R / "final.json").read_text()) == json.loads((whole / "final.json").read_text())
    assert not list((R / "pending").glob("*.json"))
    assert [e["sample"] for e in events(R) if e["event"] == "sample"] == \
        [e["sample"] for e in events(whole) if e["event"] == "sample"]
