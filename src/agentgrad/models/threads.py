"""How many threads a run's tensor work uses, and how its waiting threads wait: so that a run shares a machine fairly.

A run computes in at most two threads at once: the batcher's worker (the greedy decoding of every
concurrent episode, :mod:`agentgrad.models.batching`) and the one attribution in flight (backward
passes, under the scorer's lock). PyTorch gives every thread that runs an operator its own OpenMP
team of ``torch.get_num_threads()`` threads, and OpenMP threads that wait at a barrier **spin** by
default: beside another job they take the CPU that job (or the other team) needs, so a run's CPU time
grew 2.5x beside a two-thread neighbour. The layout:

- waiting OpenMP threads sleep (``OMP_WAIT_POLICY=PASSIVE``), set by the CLI before PyTorch loads
  (a program that imports agentgrad sets it itself, before it imports torch, if it wants the same);
  the wait policy changes no result;
- the intra-op thread count is PyTorch's (every core), whatever the concurrency, so that a run at
  ``--concurrency N`` computes exactly the numbers of the sequential run (float reductions depend on
  the thread count).

``AGENTGRAD_THREADS=N`` gives every computing thread N intra-op threads instead, in every run
(sequential or concurrent alike, so the two still agree); ``AGENTGRAD_THREADS=torch`` leaves
PyTorch's defaults alone, wait policy included: the layout before this one, for comparison
(``benchmarks/contention.py``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

from agentgrad.errors import ConfigError

ENV = "AGENTGRAD_THREADS"


def setting() -> int | str | None:
    """``AGENTGRAD_THREADS`` read: None (unset: the layout above), ``"torch"`` or a thread count."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    if raw.lower() == "torch":
        return "torch"
    if raw.isdigit() and int(raw) >= 1:
        return int(raw)
    raise ConfigError(f"{ENV}={raw!r}: give a number of threads (1 or more), or 'torch' for PyTorch's defaults")


def configure_process() -> None:
    """For a process about to load PyTorch (the CLI): waiting OpenMP threads sleep rather than spin,
    unless the user chose a wait policy or ``AGENTGRAD_THREADS=torch``. Does nothing once torch is
    loaded (OpenMP reads the variable when it starts)."""
    if "torch" in sys.modules or setting() == "torch":
        return
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def intra_op_threads(concurrency: int = 1) -> int | None:
    """The intra-op threads of each computing thread (the same for every ``concurrency``), or None
    for PyTorch's default."""
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
