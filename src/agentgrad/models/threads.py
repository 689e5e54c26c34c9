"""How many threads a run's tensor work uses, and how its waiting threads wait: so that a run shares a machine fairly.

A run computes in at most two threads at once: the batcher's worker (the greedy decoding of every
concurrent episode, :mod:`agentgrad.models.batching`) and the one attribution in flight (backward
passes, under the scorer's lock). PyTorch gives every thread that runs an operator its own OpenMP
team of ``torch.get_num_threads()`` threads, and OpenMP threads that wait at a barrier **spin** by
default: beside another job they take the CPU that job (or the other team) needs, so a run's CPU time
grew 2.5x beside a two-thread neighbour. The layout (the default, ``auto``) is chosen when the process
starts, from what the machine is doing then (:func:`others_busy`: the cores other processes kept busy
over a tenth of a second): where the machine is otherwise idle, PyTorch's (every core, spinning
threads: the faster layout alone); where another job computes, one intra-op thread
(``OMP_NUM_THREADS=1``) and sleeping waits (``OMP_WAIT_POLICY=PASSIVE``), which leave the other job its
cores (sleeping waits with every core still made the demo 2.00x slower beside a two-thread job, one
thread 1.48x: docs/scale.md). It cannot see a job that starts later (OpenMP reads its policy once, when PyTorch
loads; the CLI sets it before). The wait policy changes no result; the thread count changes none on the
CPUs measured (SmolLM2's forward and backward passes are bitwise the same on 1 and on every core:
``tests/models/test_threads.py``), and it is the same at every concurrency, so that a run at
``--concurrency N`` computes exactly the numbers of the sequential run.

``AGENTGRAD_THREADS=passive`` makes waiting threads sleep always, with PyTorch's thread count (the default
until 2026-12-06);
``AGENTGRAD_THREADS=N`` gives every computing thread N intra-op threads, in every run (sequential or
concurrent alike, so the two still agree); ``AGENTGRAD_THREADS=torch`` leaves PyTorch's defaults alone,
wait policy included. ``benchmarks/contention.py`` measures them (docs/scale.md).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Iterator

from agentgrad.errors import ConfigError

ENV = "AGENTGRAD_THREADS"


BUSY = 0.5  # cores other processes keep busy above which ``auto`` makes waiting threads sleep


def setting() -> int | str | None:
    """``AGENTGRAD_THREADS`` read: None (unset: ``auto``), ``"torch"``, ``"auto"``, ``"passive"`` or a thread count."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    if raw.lower() in ("torch", "auto", "passive"):
        return raw.lower()
    if raw.isdigit() and int(raw) >= 1:
        return int(raw)
    raise ConfigError(f"{ENV}={raw!r}: give a number of threads (1 or more), 'torch' for PyTorch's defaults, "
                      f"'auto' (spin on an idle machine, sleep beside another job: the default) or 'passive' (always sleep)")


def cpu_times(stat: str) -> tuple[float, float] | None:
    """``(busy, total)`` jiffies of all cores from the first line of ``/proc/stat`` (idle and iowait are
    not busy; guest time is already counted in user time); None for text that is not such a line."""
    words = stat.split("\n", 1)[0].split()
    if len(words) < 6 or words[0] != "cpu" or not all(w.isdigit() for w in words[1:]):
        return None
    fields = [float(x) for x in words[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    return total - fields[3] - fields[4], total


def others_busy(seconds: float = 0.1, read=None) -> float | None:
    """How many cores other processes kept busy over ``seconds`` (this process sleeps meanwhile), from
    ``/proc/stat``; None where it cannot be read (not Linux). ``read`` returns the file's text (tests)."""
    def sample() -> str:
        with open("/proc/stat", encoding="ascii") as f:
            return f.read()

    read = read or sample
    try:
        first = read()
        time.sleep(seconds)
        second = read()
    except OSError:
        return None
    a, b = cpu_times(first), cpu_times(second)
    if a is None or b is None:
        return None
    cores = os.cpu_count() or 1
    return cores * (b[0] - a[0]) / (b[1] - a[1]) if b[1] > a[1] else 0.0


def configure_process(busy=others_busy) -> str:
    """For a process about to load PyTorch (the CLI): unless the user chose a wait policy or
    ``AGENTGRAD_THREADS=torch``, waiting OpenMP threads spin where ``busy()`` (the cores other processes
    use) is under :data:`BUSY`; otherwise they sleep, and under ``auto`` (the default) the process
    computes with one intra-op thread (``OMP_NUM_THREADS=1``, unless the user set it: PyTorch reads it
    when it loads, and every thread of the process, and its child processes, start from it).
    ``passive``: always sleep, PyTorch's thread count; where ``busy()`` cannot tell, the same. Does nothing
    once torch is loaded (OpenMP reads the variables when it starts). Decided once per process: a second
    call samples nothing. Returns the layout chosen: ``spin``, ``shared`` (sleeping, one thread),
    ``passive``, ``torch`` or ``user`` (a wait policy the user set)."""
    global _chosen
    chosen = setting()
    if "torch" in sys.modules or chosen == "torch":
        return "torch"
    if "OMP_WAIT_POLICY" in os.environ and _chosen != "shared":
        return "user"
    sampled = busy is others_busy
    if chosen != "passive":
        if _chosen in ("spin", "shared") and sampled:  # decided once per process
            return _chosen
        others = busy()
        if others is not None and others < BUSY:
            _chosen = "spin" if sampled else None
            return "spin"  # PyTorch's default: waiting threads spin
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        if others is not None:
            os.environ.setdefault("OMP_NUM_THREADS", "1")
            _chosen = "shared" if sampled else None
            return "shared"
        return "passive"
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return "passive"


_chosen: str | None = None  # what this process's sampling chose (``spin`` or ``shared``), once


def intra_op_threads(concurrency: int = 1) -> int | None:
    """The intra-op threads of each computing thread (the same for every ``concurrency``), or None
    for the process's (PyTorch's default, or the one thread ``auto`` chose beside another job)."""
    chosen = setting()
    return chosen if isinstance(chosen, int) else None


@contextlib.contextmanager
def compute_threads(concurrency: int = 1) -> Iterator[int | None]:
    """While a run is in this block, the calling thread and the threads that start computing (episode
    threads, the batcher's worker) use :func:`intra_op_threads`; the calling thread's count is restored
    after. A no-op by default, and where PyTorch is not loaded (a run on a remote model)."""
    n = intra_op_threads(concurrency)
    torch = sys.modules.get("torch")
    if n is None or torch is None:
        yield None
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)
