"""How many threads a run's tensor work uses: chosen on purpose, so that a run shares a machine fairly.

A run computes in at most two threads at once: the batcher's worker (the greedy decoding of every
concurrent episode, :mod:`agentgrad.models.batching`) and the one attribution in flight (backward
passes, under the scorer's lock). PyTorch gives every thread that runs an operator its own OpenMP
team of ``torch.get_num_threads()`` threads, so on 2 cores two computing threads with PyTorch's
default would run 4 busy threads, and a neighbour's job 2 more; OpenMP threads that wait at a
barrier spin by default, taking the CPU the neighbour (or the other team) needs. The layout here:

- with episodes run at once (``concurrency > 1``), each computing thread gets ``cores // 2``
  intra-op threads (at least 1), so the two teams together fill the cores and never nest beyond
  them; a run of one episode at a time keeps PyTorch's default (every core);
- waiting OpenMP threads sleep (``OMP_WAIT_POLICY=PASSIVE``), set by the CLI before PyTorch loads;
  a program that imports agentgrad sets it itself, before it imports torch, if it wants the same.

``AGENTGRAD_THREADS=N`` sets the intra-op threads of every computing thread to N instead;
``AGENTGRAD_THREADS=torch`` leaves PyTorch's own defaults alone (no wait policy either): the layout
before this one, for comparison (``benchmarks/contention.py``).
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


def intra_op_threads(concurrency: int, cores: int | None = None) -> int | None:
    """The intra-op threads of each computing thread for a run of ``concurrency`` episodes at once,
    or None for PyTorch's default."""
    chosen = setting()
    if chosen == "torch":
        return None
    if isinstance(chosen, int):
        return chosen
    if concurrency <= 1:
        return None
    return max(1, (cores or os.cpu_count() or 1) // 2)


@contextlib.contextmanager
def compute_threads(concurrency: int) -> Iterator[int | None]:
    """While a run of ``concurrency`` episodes at once is in this block, threads that start computing
    (episode threads, the batcher's worker) use :func:`intra_op_threads`; the calling thread's count
    is restored after. A no-op where PyTorch is not loaded (a run on a remote model)."""
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
