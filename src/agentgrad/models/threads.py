"""How many threads a run's tensor work uses, and how its waiting threads wait: so that a run shares a machine fairly.

A run computes in at most two threads at once: the batcher's worker (the greedy decoding of every
concurrent episode, :mod:`agentgrad.models.batching`) and the one attribution in flight (backward
passes, under the scorer's lock); three with one intra-op thread, when the batcher prefills arriving
prompts in a thread of its own while its batch decodes. PyTorch gives every thread that runs an operator its own OpenMP
team of ``torch.get_num_threads()`` threads, and OpenMP threads that wait at a barrier **spin** by
default: beside another job they take the CPU that job (or the other team) needs, so a run's CPU time
grew 2.5x beside a two-thread neighbour. The layout (the default, ``auto``) is chosen when the process
starts, from what the machine is doing then (:func:`others_busy`: the cores other processes kept busy
over a tenth of a second): where the machine is otherwise idle, PyTorch's (every core, spinning
threads: the faster layout alone); where another job computes, one intra-op thread
(``OMP_NUM_THREADS=1``) and sleeping waits (``OMP_WAIT_POLICY=PASSIVE``), which leave the other job its
cores (sleeping waits with every core still made the demo 2.00x slower beside a two-thread job, one
thread 1.48x: docs/scale.md). The wait policy is read once, when PyTorch loads (the CLI sets it before);
the thread count then follows the machine while the run computes (:func:`follow_load`: one thread while
another job computes, every core otherwise), so a job that starts later is seen within seconds. The
wait policy changes no result; the thread count changes none on the CPUs measured (SmolLM2's forward and
backward passes are bitwise the same on 1 and on every core: ``tests/models/test_threads.py``), and it is
the same at every concurrency, so that a run at ``--concurrency N`` computes exactly the numbers of the
sequential run.

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
import threading
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
    read = read or _proc_stat
    try:
        first = read()
        time.sleep(seconds)
        second = read()
    except OSError:
        return None
    a, b = cpu_times(first), cpu_times(second)
    if a is None or b is None:
        return None
    return busy_cores(a, b) if b[1] > a[1] else 0.0


def busy_cores(a: tuple[float, float], b: tuple[float, float]) -> float:
    """How many cores the whole machine kept busy between two :func:`cpu_times` samples (``b`` after ``a``)."""
    return (os.cpu_count() or 1) * (b[0] - a[0]) / (b[1] - a[1])


def _proc_stat() -> str:
    with open("/proc/stat", encoding="ascii") as f:
        return f.read()


def configure_process(busy=others_busy) -> str:
    """For a process about to load PyTorch (the CLI): unless the user chose a wait policy or
    ``AGENTGRAD_THREADS=torch``, waiting OpenMP threads spin where ``busy()`` (the cores other processes
    use) is under :data:`BUSY`; otherwise they sleep, and under ``auto`` (the default) the process
    computes with one intra-op thread (``OMP_NUM_THREADS=1``, unless the user set it: PyTorch reads it
    when it loads, and every thread of the process, and its child processes, start from it).
    ``passive``: always sleep, PyTorch's thread count; where ``busy()`` cannot tell, the same. Does nothing
    once torch is loaded (OpenMP reads the variables when it starts). Decided once per process: a second
    call samples nothing; under ``auto`` the thread count then follows the load (:func:`follow_load`).
    Returns the layout chosen: ``spin``, ``shared`` (sleeping, one thread), ``passive``, ``torch`` or
    ``user`` (a wait policy the user set)."""
    global _chosen, _user_count
    chosen = setting()
    if "torch" in sys.modules or chosen == "torch":
        return "torch"
    if _chosen is None:
        _user_count = "OMP_NUM_THREADS" in os.environ  # the user's own count: kept, and never followed
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
_user_count = False  # the user set OMP_NUM_THREADS before the CLI chose

FOLLOW_EVERY = 2.0  # seconds between two looks at the machine's load while a run computes


class LoadFollower:
    """While a run computes, its thread count follows the machine: one intra-op thread while other
    processes keep at least :data:`BUSY` cores busy, every core the process may use otherwise (what
    ``auto`` chooses when it starts, chosen again as the load changes: a job started after the run is
    seen). Each computing thread calls :meth:`follow` between two model steps; at most every
    :data:`FOLLOW_EVERY` seconds it compares the machine's busy time (``/proc/stat``) with this
    process's own CPU time over the interval, and sets the calling thread's count (PyTorch's count is
    a thread's own under OpenMP). The wait policy stays what the process started with (OpenMP reads it
    once); with one thread no team waits, so spinning costs nothing beside a job. Changes no number
    (:mod:`agentgrad.models.threads`). ``read``, ``cpu`` and ``clock`` stand in for ``/proc/stat``,
    the process's CPU seconds and the wall clock (tests)."""

    def __init__(self, read=None, cpu=time.process_time, clock=time.monotonic, cores: int | None = None):
        self._read, self._cpu, self._clock = read or _proc_stat, cpu, clock
        torch = sys.modules.get("torch")  # the count PyTorch chose, where it chose (an idle start), else every core
        self.cores = cores or (torch.get_num_threads() if torch is not None and _chosen == "spin" else _usable_cores())
        self._last: tuple[float, float, float, float] | None = None  # (clock, busy, total, own cpu)
        self.threads = 1 if _chosen == "shared" else self.cores  # what the last look chose
        self._lock = threading.Lock()

    def look(self) -> int | None:
        """The thread count the machine's load asks for now (None: too soon since the last look, or
        the load cannot be read)."""
        now = self._clock()
        with self._lock:
            if self._last is not None and now - self._last[0] < FOLLOW_EVERY:
                return None
            try:
                times = cpu_times(self._read())
            except OSError:
                return None
            if times is None:
                return None
            own = self._cpu()
            last, self._last = self._last, (now, *times, own)
            if last is None or times[1] <= last[2]:
                return None
            others = busy_cores(last[1:3], times) - (own - last[3]) / max(now - last[0], 1e-9)  # minus this run's
            self.threads = 1 if others >= BUSY else self.cores
            return self.threads

    def follow(self) -> None:
        """Look (at most every :data:`FOLLOW_EVERY` seconds, whichever thread looks), and give the calling
        thread the count the last look chose, if it computes with another."""
        self.look()
        torch = sys.modules.get("torch")
        if torch is not None and torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_follower: LoadFollower | None = None


def follow_load() -> None:
    """Between two model steps of a computing thread: its thread count follows the machine's load
    (:class:`LoadFollower`) where the CLI chose ``auto`` by sampling the machine; nothing otherwise
    (a library caller, ``AGENTGRAD_THREADS`` set to another layout, a user's OMP_NUM_THREADS)."""
    global _follower
    if _chosen is None or _user_count or setting() not in (None, "auto"):
        return
    if _follower is None:
        _follower = LoadFollower()
    _follower.follow()


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
