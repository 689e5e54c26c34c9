"""Distributed attribution on Ray (the optional extra): the same files as one scorer, resumable, and a
one-line error naming the install without it."""

from __future__ import annotations

import json
import math
import sys

import pytest

from agentgrad.cli import main
from agentgrad.examples import PIPELINE

try:
    import ray  # noqa: F401
    HAVE_RAY = True
except ImportError:
    HAVE_RAY = False

VOLATILE = {"seconds", "cache_hit", "cache_stats"}  # timings, and which calls found their prefix cached


def strip(d):
    if isinstance(d, dict):
        return {k: strip(v) for k, v in d.items() if k not in VOLATILE}
    if isinstance(d, list):
        return [strip(x) for x in d]
    return d


def same(a, b) -> bool:
    """Equal records, floats within float32 noise (1e-4 relative or 1e-5 absolute): a Ray worker runs
    torch on other threads than the driver, so sums are reduced in another order; signed token scores
    (gradient x input, with cancellation) differ by up to about 2e-6 absolute."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory, tiny_llama):
    out = tmp_path_factory.mktemp("ray") / "run"
    assert main(["run", str(PIPELINE / "system.yaml"), "--inputs", str(PIPELINE / "inputs.jsonl"), "--out", str(out),
                 "--model", f"default={tiny_llama}"]) == 0
    return out


def test_workers_without_ray_is_one_line(pipeline_run, tiny_llama, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    rc = main(["attribute", str(pipeline_run), "--scorer", str(tiny_llama), "--out", str(tmp_path / "a"), "--workers", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and "pip install 'agentgrad[ray]'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists()


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_RAY, reason="ray tests: Ray is not installed (pip install -e '.[ray]')")
def test_two_ray_workers_equal_one_scorer_and_resume(pipeline_run, tiny_llama, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["attribute", str(pipeline_run), "--scorer", str(tiny_llama), "--out", str(one)]) == 0
    assert main(["attribute", str(pipeline_run), "--scorer", str(tiny_llama), "--out", str(two), "--workers", "2"]) == 0
    files = sorted(p.name for p in one.glob("*.json"))
    assert len(files) == 4 and sorted(p.name for p in two.glob("*.json")) == files
    for name in files:
        assert same(strip(json.loads((one / name).read_text())), strip(json.loads((two / name).read_text()))), name
    # a stopped run: one file missing; --resume writes it and leaves the others untouched
    (two / files[1]).unlink()
    kept = {n: (two / n).stat().st_mtime_ns for n in files if n != files[1]}
    assert main(["attribute", str(pipeline_run), "--scorer", str(tiny_llama), "--out", str(two), "--workers", "2",
                 "--resume"]) == 0
    assert {n: (two / n).stat().st_mtime_ns for n in kept} == kept
    assert same(strip(json.loads((one / files[1]).read_text())), strip(json.loads((two / files[1]).read_text())))


@pytest.mark.skipif(not HAVE_RAY, reason="ray tests: Ray is not installed (pip install -e '.[ray]')")
def test_an_unreachable_cluster_is_one_line_at_once(pipeline_run, tiny_llama, tmp_path, capsys):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a port nobody listens on
    rc = main(["attribute", str(pipeline_run), "--scorer", str(tiny_llama), "--out", str(tmp_path / "a"),
               "--workers", "2", "--ray-address", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert rc == 1 and "no Ray cluster answers there" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists()
