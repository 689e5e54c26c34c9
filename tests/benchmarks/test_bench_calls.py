"""Every bench command parses its options, makes one library call and prints: the library checks
the options (one-line ConfigErrors before anything is read or a model loads) and does the whole
command (bench ablation: the grid and the folder's report). agentgrad blame takes the shared option
types of cli/options.py."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from agentgrad.cli import main
from agentgrad.errors import ConfigError


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def test_bench_whowhen_checks_its_options_in_the_library_before_the_logs_are_read(tmp_path):
    from agentgrad.benchmarks.whowhen.command import log_range, whowhen_benchmark

    missing = tmp_path / "no-such-archive.tar.gz"  # reached only if a check let the call through
    for kwargs, msg in [({"on_too_long": "drop"}, "--on-too-long must be skip, exclude, window or error"),
                        ({"answer_span": True, "with_ground_truth": False}, "--answer-span locates the answer"),
                        ({"methods": "gbc:max_l1:whole:maxw"}, "needs a white-box model"),
                        ({"methods": "last", "max_context": 64}, "--max-context sets the white-box scorer's context"),
                        ({"methods": "nope"}, "unknown blame method 'nope'")]:
        with pytest.raises(ConfigError, match=msg):
            whowhen_benchmark(tmp_path / "o", archive=missing, **kwargs)
        assert not (tmp_path / "o").exists()
    rc, _, err = cli("bench", "whowhen", "--out", tmp_path / "o", "--archive", missing, "--on-too-long", "drop")
    assert rc == 2 and "--on-too-long must be" in err and len(err.strip().splitlines()) == 1
    assert log_range("3", 5) == (1, 3) and log_range("2-9", 5) == (2, 5) and log_range(" 4 - 4 ", 5) == (4, 4)
    assert log_range("7", 5) == (1, 5)  # the first 7 of 5: all of them
    for bad, msg in [("0", "--logs takes N"), ("3-2", "--logs takes N"), ("x", "--logs takes N"),
                     ("7-9", "the subset has only 5 logs")]:
        with pytest.raises(ConfigError, match=msg):
            log_range(bad, 5)


def test_agentgrad_blame_takes_the_shared_device_and_dtype_options(tmp_path):
    for args, msg in [(["--device", "gpu0"], "--device takes cpu, cuda or cuda:N"),
                      (["--dtype", "half"], "--dtype takes float32, bfloat16, float16")]:
        rc, _, err = cli("blame", tmp_path / "t.json", "--loss", "wrong", "--out", tmp_path / "b", *args)
        assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "b").exists()



def test_bench_ablation_is_one_call_that_runs_the_grid_and_writes_its_report(tmp_path):
    from agentgrad.benchmarks.ablation.grid import ablation_benchmark

    out = tmp_path / "a"
    summary, report = ablation_benchmark(
        out, model="tiny", systems=["pipeline"], defects=["stale_example"], methods=["oracle"], seeds=1, steps=1,
        step_every=2, val_size=2, wordings=1, positions=1, agents=1, noise_edits=1, keep_factor=0.0, concurrency=4,
        sizes={"train": 4, "val": 2, "screen": 2, "test": 3}, log=lambda s: None)
    same = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731  (NaN figures compare as written)
    assert summary["runs"] == 1 and same(summary) == same(json.loads((out / "summary.json").read_text()))
    page = report.read_text()
    assert report == out / "report.html" and "prompt-bug ablation" in page and page.count("<svg xmlns") == 2
    assert (out / "steps.svg").read_text() in page  # the report draws the figure the benchmark wrote
    with pytest.raises(ConfigError, match="--prompts takes"):  # checked before a model loads
        ablation_benchmark(tmp_path / "b", model="tiny", prompts="medium")
    assert not (tmp_path / "b").exists()
