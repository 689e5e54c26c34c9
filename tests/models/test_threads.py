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
from conftest import smollm2_missing


def _counts(concurrency: int) -> dict[int, int]:
    """The intra-op thread count each of two jobs computes with, at ``concurrency``."""
    seen: dict[int, int] = {}
    gate = threading.Barrier(2, timeout=10) if concurrency > 1 else None

    def job(i: int) -> int:
        if gate is not None:
            gate.wait()  # both jobs in flight at once, on two threads
        x = torch.randn(64, 64)
        _ = x @ x  # an operator: the thread's OpenMP team is set up from the layout
        return torch.get_num_threads()

    run_jobs([0, 1], job, concurrency, lambda j, r: seen.__setitem__(j, r))
    return seen


def test_by_default_a_run_computes_with_the_callers_threads_at_any_concurrency(monkeypatch):
    """The default changes no thread count: a concurrent run computes the sequential run's numbers."""
    monkeypatch.delenv(threads.ENV, raising=False)
    original = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        assert _counts(2) == {0: 3, 1: 3} and _counts(1) == {0: 3, 1: 3}
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(original)


def test_the_setting_gives_every_run_its_threads_and_the_caller_gets_its_count_back(monkeypatch):
    original = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        monkeypatch.setenv(threads.ENV, "1")
        assert _counts(2) == {0: 1, 1: 1} and _counts(1) == {0: 1, 1: 1}  # sequential and concurrent alike
        assert torch.get_num_threads() == 3  # restored in the calling thread
        monkeypatch.setenv(threads.ENV, "torch")
        assert _counts(2) == {0: 3, 1: 3}
    finally:
        torch.set_num_threads(original)


def test_a_bad_setting_is_one_line(monkeypatch):
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


def test_the_cli_sets_the_wait_policy_unless_the_user_chose():
    assert _cli_env({threads.ENV: "passive"}) == "PASSIVE"
    assert _cli_env({}) in ("PASSIVE", "-")  # the default samples the machine: spin (unset) or sleep
    assert _cli_env({"OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE"  # the user's choice is kept
    assert _cli_env({threads.ENV: "torch"}) == "-"  # PyTorch's defaults, as before the layout


def test_cpu_times_read_proc_stat_by_hand():
    """user 100, nice 5, system 50, idle 800, iowait 20, irq 3, softirq 2, steal 0 (guest columns after):
    busy = 980 - 800 - 20 = 160 of 980."""
    assert threads.cpu_times("cpu  100 5 50 800 20 3 2 0 7 0\ncpu0 1 2 3 4\n") == (160.0, 980.0)
    assert threads.cpu_times("intr 1 2 3 4 5 6") is None and threads.cpu_times("") is None


def test_others_busy_counts_the_cores_kept_busy_between_two_samples(monkeypatch):
    samples = iter(["cpu  100 0 0 900 0 0 0 0\n", "cpu  250 0 0 950 0 0 0 0\n"])  # 150 busy of 200 jiffies
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    assert threads.others_busy(0.0, read=lambda: next(samples)) == pytest.approx(1.5)
    assert threads.others_busy(0.0, read=lambda: "not a stat file") is None


def _auto_policy(busy: float | None, setting: str | None = "auto", extra: dict[str, str] | None = None) -> str:
    """What ``AGENTGRAD_THREADS=setting`` (None: unset, the default) chooses in a process without torch, the
    machine's other load being ``busy`` cores: the layout, the OMP_WAIT_POLICY and OMP_NUM_THREADS it
    leaves, and the thread count PyTorch then computes with."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", threads.ENV)}
    if setting is not None:
        env[threads.ENV] = setting
    env |= extra or {}
    code = ("import os, sys; from agentgrad.models import threads; assert 'torch' not in sys.modules; "
            f"layout = threads.configure_process(lambda: {busy!r}); import torch; "
            "print(layout, os.environ.get('OMP_WAIT_POLICY', '-'), os.environ.get('OMP_NUM_THREADS', '-'), "
            "'one' if torch.get_num_threads() == 1 else 'all')")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: every layout computes with one thread")
def test_auto_spins_on_an_idle_machine_and_computes_on_one_sleeping_thread_beside_another_job():
    assert _auto_policy(0.1) == "spin - - all"  # PyTorch's defaults: every core, spinning threads
    assert _auto_policy(1.8) == "shared PASSIVE 1 one"  # beside a job: one thread, sleeping waits
    assert _auto_policy(None) == "passive PASSIVE - all"  # nothing could be read: sleep, PyTorch's count
    assert _auto_policy(0.1, None) == "spin - - all" and _auto_policy(1.8, None) == "shared PASSIVE 1 one"  # default
    assert _auto_policy(0.1, "passive") == "passive PASSIVE - all"  # always sleep, idle or not
    assert _auto_policy(1.8, "passive") == "passive PASSIVE - all"
    assert _auto_policy(1.8, None, {"OMP_NUM_THREADS": "2"}) == "shared PASSIVE 2 all"  # the user's count is kept


@pytest.mark.skipif(bool(smollm2_missing()), reason=f"SmolLM2: {smollm2_missing()}")
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: nothing to compare")
def test_one_thread_and_every_core_compute_the_same_numbers(smol):
    """Why ``auto`` may change the thread count with the machine's load: SmolLM2's logits and the
    gradients of a call's log-likelihood with respect to its input embeddings (what the scorer computes)
    are bitwise the same on one thread and on every core, on this CPU."""
    model, tok = smol.model, smol.tokenizer
    ids = torch.tensor(tok("The refund policy: " + "order 12 holds a kettle, check its status. " * 30)["input_ids"])[None]

    def once(n: int):
        torch.set_num_threads(n)
        emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logits = model(inputs_embeds=emb).logits
        logits[0, :-1].float().log_softmax(-1).gather(-1, ids[0, 1:, None]).sum().backward()
        return logits.detach(), emb.grad

    original = torch.get_num_threads()
    try:
        (l1, g1), (ln, gn) = once(1), once(os.cpu_count() or 2)
    finally:
        torch.set_num_threads(original)
    assert ids.shape[1] > 300 and torch.equal(l1, ln) and torch.equal(g1, gn)


def test_the_cli_refuses_a_bad_setting_in_one_line():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | {threads.ENV: "bogus"}
    out = subprocess.run([sys.executable, "-m", "agentgrad.cli", "--help"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "AGENTGRAD_THREADS='bogus'" in out.stderr


def test_auto_samples_the_machine_once_per_process(monkeypatch):
    """A process that calls the CLI many times (a script, the tests) pays the sampling once."""
    for name in ("OMP_WAIT_POLICY", threads.ENV):
        monkeypatch.setenv(name, "")  # recorded, so that what the call sets is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.delitem(sys.modules, "torch")  # as before PyTorch loads; restored after the test
    monkeypatch.setattr(threads, "_chosen", None)
    monkeypatch.setattr(threads, "_user_count", False)  # restored after: the call sets it
    calls = []
    monkeypatch.setattr(threads, "others_busy", lambda *a, **k: calls.append(1) or 0.0)
    first = threads.configure_process(threads.others_busy)
    second = threads.configure_process(threads.others_busy)
    assert (first, second, len(calls)) == ("spin", "spin", 1)
    assert "OMP_WAIT_POLICY" not in os.environ  # spinning is PyTorch's default: nothing set


def test_auto_beside_a_job_is_decided_once_too(monkeypatch):
    for name in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", threads.ENV):
        monkeypatch.setenv(name, "")  # recorded, so that what the call sets is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.setattr(threads, "_chosen", None)
    monkeypatch.setattr(threads, "_user_count", False)  # restored after: the call sets it
    calls = []
    monkeypatch.setattr(threads, "others_busy", lambda *a, **k: calls.append(1) or 1.8)
    first = threads.configure_process(threads.others_busy)
    second = threads.configure_process(threads.others_busy)  # its own PASSIVE is not the user's choice
    assert (first, second, len(calls)) == ("shared", "shared", 1)
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE" and os.environ["OMP_NUM_THREADS"] == "1"


class _Machine:
    """``/proc/stat``, this process's CPU seconds and the clock, moved by hand: 2 cores, 100 jiffies a second."""

    def __init__(self):
        self.busy = self.total = 0.0
        self.cpu = self.now = 0.0

    def run(self, seconds: float, others: float, own: float) -> None:
        """``seconds`` pass with ``others`` cores busy in other processes and ``own`` in this one."""
        self.busy += 100 * seconds * (others + own)
        self.total += 100 * seconds * 2
        self.cpu += own * seconds
        self.now += seconds

    def stat(self) -> str:
        return f"cpu  {int(self.busy)} 0 0 {int(self.total - self.busy)} 0 0 0 0\n"


def test_the_thread_count_follows_the_load_of_other_processes_not_its_own(monkeypatch):
    """The follower's count: every core while only this run computes (even when it keeps both cores busy
    itself), one thread once another job keeps a core busy, every core again when the job ends; one look
    every FOLLOW_EVERY seconds at most."""
    m = _Machine()
    monkeypatch.setattr(threads, "_chosen", "spin")
    f = threads.LoadFollower(read=m.stat, cpu=lambda: m.cpu, clock=lambda: m.now, cores=2)
    assert f.threads == 2 and f.look() is None  # the first look only starts the interval
    m.run(3, others=0.0, own=2.0)  # alone, busy on both cores: not another job's load
    assert f.look() == 2
    m.run(1, others=1.9, own=0.1)
    assert f.look() is None  # too soon: nothing read
    m.run(2, others=1.9, own=0.1)  # a two-thread job started
    assert f.look() == 1
    m.run(3, others=0.2, own=1.8)  # it ended
    assert f.look() == 2
    bad = threads.LoadFollower(read=lambda: "not a stat file", clock=lambda: m.now, cores=2)
    assert bad.look() is None and bad.threads == 2


def test_following_sets_the_calling_threads_count_and_only_under_the_clis_auto(monkeypatch):
    m = _Machine()
    original = torch.get_num_threads()
    monkeypatch.setattr(threads, "_follower", threads.LoadFollower(read=m.stat, cpu=lambda: m.cpu,
                                                                    clock=lambda: m.now, cores=2))
    try:
        torch.set_num_threads(2)
        monkeypatch.setattr(threads, "_chosen", None)  # a library caller: the CLI chose nothing
        threads.follow_load()
        m.run(3, others=1.9, own=0.1)
        threads.follow_load()
        assert torch.get_num_threads() == 2
        monkeypatch.setattr(threads, "_chosen", "spin")
        threads.follow_load()  # the first look starts the interval
        assert torch.get_num_threads() == 2
        m.run(3, others=1.9, own=0.1)
        threads.follow_load()  # the interval shows the job
        assert torch.get_num_threads() == 1
        seen = []  # another computing thread, between two looks: it takes the count the last look chose
        worker = threading.Thread(target=lambda: (torch.set_num_threads(2), threads.follow_load(),
                                                  seen.append(torch.get_num_threads())))
        worker.start()
        worker.join()
        assert seen == [1]
        m.run(3, others=0.0, own=1.0)
        monkeypatch.setenv(threads.ENV, "passive")  # another layout chosen: never followed
        threads.follow_load()
        assert torch.get_num_threads() == 1
        monkeypatch.delenv(threads.ENV)
        monkeypatch.setattr(threads, "_user_count", True)  # the user's OMP_NUM_THREADS: never followed
        threads.follow_load()
        assert torch.get_num_threads() == 1
        monkeypatch.setattr(threads, "_user_count", False)
        threads.follow_load()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(original)
