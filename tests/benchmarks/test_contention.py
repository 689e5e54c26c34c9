"""benchmarks/contention.py without the demo: its table from records, its one-line errors, and the late
neighbour's timing (started while the command runs, its CPU time not the command's)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

from conftest import ROOT, run_script

SCRIPT = ROOT / "benchmarks" / "contention.py"


def _module():
    spec = importlib.util.spec_from_file_location("contention", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record(**extra):
    outcome = {"test_before": 0.5, "test_after": 0.875, "val_score": 0.8, "steps": 3, "accepted": 1}
    return {"command": "demo", "env": ["AGENTGRAD_THREADS=auto"], "cores": 2, "machine": "x86_64",
            "alone": {"wall_s": 80.0, "cpu_s": 150.0, "outcome": outcome},
            "shared": {"wall_s": 120.0, "cpu_s": 90.0, "outcome": outcome}, "ratios": {"wall": 1.5, "cpu": 0.6}, **extra}


def test_the_table_names_the_layout_by_its_label_and_the_late_neighbour(tmp_path):
    plain, late = tmp_path / "plain.json", tmp_path / "late.json"
    plain.write_text(json.dumps(_record()))
    late.write_text(json.dumps(_record(label="following the load", late_s=15.0)))
    p = run_script(str(SCRIPT), "--table", str(plain), str(late))
    assert p.returncode == 0, p.stderr
    rows = p.stdout.splitlines()
    assert rows[2] == "| plain.json | AGENTGRAD_THREADS=auto | 80.0 s / 150.0 s | 120.0 s / 90.0 s | 1.50x / 0.60x | - |"
    assert rows[3].startswith("| late.json | following the load; the neighbour from 15 s on | 80.0 s")
    assert "held-out test 0.50 -> 0.875, 1 of 3 steps kept" in p.stdout


def test_the_neighbour_in_a_session_of_its_own_is_named_and_runs_in_another_session(tmp_path, monkeypatch):
    """--neighbour-session: the table says so, and the neighbour's session is not this process's (setsid), where
    by default it is; a neighbour that only says ready and sleeps stands for the PyTorch job."""
    own = tmp_path / "own.json"
    own.write_text(json.dumps(_record(neighbour_session=True, autogroup=True)))
    p = run_script(str(SCRIPT), "--table", str(own))
    assert p.returncode == 0, p.stderr
    row = p.stdout.splitlines()[2]
    assert row.startswith("| own.json | AGENTGRAD_THREADS=auto; the neighbour in a session of its own |"), row
    mod = _module()
    monkeypatch.setattr(mod, "NEIGHBOUR", "import time\nprint('ready', flush=True)\ntime.sleep(60)")
    for own_session in (False, True):
        n = mod.start_neighbour(own_session)
        try:
            assert (os.getsid(n.pid) != os.getsid(0)) is own_session
        finally:
            n.kill()
            n.wait()


def test_bad_input_is_one_line(tmp_path):
    for args, says in ((["--late", "-1"], "--late takes seconds"), (["--env", "NOEQUALS"], "takes KEY=VALUE")):
        p = run_script(str(SCRIPT), *args)
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
    (tmp_path / "bad.json").write_text("{}")
    p = run_script(str(SCRIPT), "--table", str(tmp_path / "bad.json"))
    assert p.returncode != 0 and "is not a record of benchmarks/contention.py" in p.stderr and not p.stdout


@pytest.mark.skipif(sys.platform != "linux", reason="getrusage of children as on Linux")
def test_a_late_neighbour_starts_while_the_command_runs_and_its_cpu_is_not_the_commands(monkeypatch):
    """A command that sleeps 3 s, the neighbour (a CPU-bound loop) from 1 s on: the wall time is the
    command's, and its CPU time stays near 0, although the neighbour burnt about 2 s of CPU meanwhile."""
    mod = _module()
    started = []
    spin = [sys.executable, "-c", "import time\nprint('ready', flush=True)\nwhile True: pass"]
    real_popen = mod.subprocess.Popen

    def neighbour(own_session=False):
        started.append(real_popen(spin, stdout=mod.subprocess.PIPE, text=True))
        assert started[-1].stdout.readline().strip() == "ready"
        return started[-1]

    monkeypatch.setattr(mod, "start_neighbour", neighbour)
    got = mod.timed([sys.executable, "-c", "import time; time.sleep(3)"], dict(__import__("os").environ), late=1.0)
    assert started and started[0].poll() is not None  # started, and killed when the command ended
    assert 2.9 <= got["wall_s"] < 10 and got["cpu_s"] < 1.0
