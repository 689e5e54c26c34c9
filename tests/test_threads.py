"""The thread layout of a run (agentgrad.models.threads): chosen, documented, and overridable."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch

from agentgrad.errors import ConfigError
from agentgrad.models import threads
from agentgrad.runs.runner import run_jobs


def test_concurrent_jobs_compute_with_half_the_cores_each_and_the_caller_gets_its_count_back(monkeypatch):
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    original = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        _check_layout()
    finally:
        torch.set_num_threads(original)


def _check_layout() -> None:
    seen: dict[int, int] = {}
    gate = threading.Barrier(2, timeout=10)

    def job(i: int) -> int:
        gate.wait()  # both jobs in flight at once, on two threads
        x = torch.randn(64, 64)
        _ = x @ x  # an operator: the thread's OpenMP team is set up from the layout
        return torch.get_num_threads()

    run_jobs([0, 1], job, 2, lambda j, r: seen.__setitem__(j, r))
    assert seen == {0: 2, 1: 2}  # 4 cores // 2 computing threads
    assert torch.get_num_threads() == 3  # restored in the calling thread
    seen.clear()
    run_jobs([0, 1], lambda i: torch.get_num_threads(), 1, lambda j, r: seen.__setitem__(j, r))
    assert seen == {0: 3, 1: 3}  # one episode at a time: the caller's count, untouched


def test_the_setting_overrides_the_layout_and_a_bad_value_is_one_line(monkeypatch):
    monkeypatch.setenv(threads.ENV, "1")
    assert threads.intra_op_threads(8, cores=16) == 1 and threads.intra_op_threads(1, cores=16) == 1
    monkeypatch.setenv(threads.ENV, "torch")
    assert threads.intra_op_threads(8, cores=16) is None
    monkeypatch.delenv(threads.ENV)
    assert threads.intra_op_threads(8, cores=2) == 1 and threads.intra_op_threads(8, cores=1) == 1
    assert threads.intra_op_threads(1, cores=16) is None
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(threads.ENV, bad)
        with pytest.raises(ConfigError, match="AGENTGRAD_THREADS") as e:
            threads.intra_op_threads(4)
        assert "\n" not in str(e.value)


def _cli_env(extra: dict[str, str]) -> str:
    """OMP_WAIT_POLICY as the CLI leaves it in its own process (``agentgrad --help`` then print)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", threads.ENV)} | extra
    code = ("import os, sys; from agentgrad.cli import main; "
            "main(['--help']); sys.stdout.write('\\nPOLICY=' + os.environ.get('OMP_WAIT_POLICY', '-'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.rsplit("POLICY=", 1)[1]


def test_the_cli_makes_waiting_threads_sleep_unless_the_user_chose():
    assert _cli_env({}) == "PASSIVE"
    assert _cli_env({"OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE"  # the user's choice is kept
    assert _cli_env({threads.ENV: "torch"}) == "-"  # PyTorch's defaults, as before the layout
