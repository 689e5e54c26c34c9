"""Attribution of many traces over many scorers, on Ray (the optional extra ``agentgrad[ray]``).

``attribute_on_ray`` starts ``workers`` scorer actors (one GPU each where the cluster has GPUs for
all of them; CPU processes otherwise), hands each trace to the next free actor through Ray's own
``ActorPool`` (no scheduler of ours), and writes every attribution file here, atomically, as it comes
back: a stopped run resumes by skipping the files already written, and a remote cluster
(``address``) needs no shared file system (traces go out as JSON, records come back as JSON). Each
actor builds the same scorer (:func:`~agentgrad.attribution.factory.make_scorer` on the path the
driver resolved), so the records are those of one worker, except the timings and
which calls found their prefix cache already built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from agentgrad.extras import require


def require_ray() -> Any:
    return require("ray", "ray", "--workers")


class ScorerWorker:
    """One scorer, loaded once, attributing whole traces (a Ray actor's class)."""

    def __init__(self, scorer_kwargs: dict[str, Any]):
        """``scorer_kwargs["path"]``: the folder, hub id or GGUF file the driver resolved
        (:func:`~agentgrad.attribution.factory.scorer_path`), not a registered name such as ``trained``,
        which an actor's process has not registered; the rest are :func:`make_scorer`'s options."""
        import os

        from agentgrad.attribution.factory import make_scorer

        kw = dict(scorer_kwargs)
        if kw.get("device", "cpu") == "auto":
            kw["device"] = "cuda" if os.environ.get("CUDA_VISIBLE_DEVICES") else "cpu"
        self.scorer = make_scorer(kw.pop("path"), **kw)

    def attribute(self, index: int, trace: dict[str, Any], trace_path: str, method: str, top_k: int,
                  seed: int, weight: str | None = None) -> tuple[int, dict[str, Any]]:
        from agentgrad.attribution.io import attribution_record
        from agentgrad.core.trace import Trace

        tr = Trace.from_dict(trace, trace_path)
        results, graph = self.scorer.attribute(tr)
        return index, attribution_record(tr, results, graph, self.scorer, method, top_k, seed, trace_path, weight)


def attribute_on_ray(files: list[Path], outs: list[Path], scorer_kwargs: dict[str, Any], method: str, top_k: int,
                     seed: int, workers: int, address: str | None = None,
                     on_trace: Callable[[Path, dict[str, Any]], None] | None = None, weight: str | None = None) -> int:
    """Attribute ``files`` into ``outs`` on ``workers`` Ray actors; returns how many were written.

    Pairs whose output exists already are skipped (resume). ``address``: a running Ray cluster
    (``ray://HOST:PORT`` or ``auto``); without it a local one is started for this call.
    """
    import json

    from agentgrad.core.trace import write_json_atomic

    ray = require_ray()
    jobs = [(f, o) for f, o in zip(files, outs) if not o.exists()]
    if not jobs:
        return 0
    started = not ray.is_initialized()
    if started and address:
        check_reachable(address)
    if started:
        opts: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        if address:
            opts["address"] = address
        else:
            opts["num_cpus"] = workers
        ray.init(**opts)
    try:
        from ray.util import ActorPool

        gpus = ray.cluster_resources().get("GPU", 0)
        per = {"num_cpus": 1, "num_gpus": 1 if gpus >= workers else 0}
        kwargs = dict(scorer_kwargs, device="auto" if per["num_gpus"] else scorer_kwargs.get("device", "cpu"))
        actors = [ray.remote(**per)(ScorerWorker).remote(kwargs) for _ in range(min(workers, len(jobs)))]
        pool = ActorPool(actors)
        written = 0

        def submit(actor: Any, i: int) -> Any:
            f = jobs[i][0]
            return actor.attribute.remote(i, json.loads(f.read_text(encoding="utf-8")), str(f), method, top_k, seed,
                                          weight)

        for i, rec in pool.map_unordered(submit, range(len(jobs))):  # written as each one finishes
            f, o = jobs[i]
            write_json_atomic(o, rec)
            written += 1
            if on_trace:
                on_trace(f, rec)
        return written
    finally:
        if started:
            ray.shutdown()


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """A cluster address that answers no TCP connection is a one-line error at once (Ray itself would
    wait for minutes); ``auto`` and addresses without a port are left to Ray."""
    import socket

    from agentgrad.errors import RunError

    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise RunError(f"--ray-address {address}: no Ray cluster answers there ({e.strerror or e}); start one "
                       "with `ray start --head`, or leave --ray-address out for a local one") from None
