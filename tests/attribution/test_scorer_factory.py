"""The one scorer factory (agentgrad.attribution.factory.make_scorer) and the CLI's option types.

Every way in (the API, optimize, attribute, the benchmarks) goes through make_scorer; here each form
of its value is checked on the tiny model: a folder, ``tiny``, a loaded model (weights shared, not
loaded again), a scorer (returned as it is), a registered name, and the values that cannot be a
scorer (one-line errors that say what a scorer can be).
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest

import agentgrad as ag
from agentgrad.attribution.factory import make_scorer, register_scorer_value, scorer_path, scorer_values
from agentgrad.attribution.scorer import Scorer
from agentgrad.cli import main
from agentgrad.cli.options import check_device, check_dtype, method_names, names, scorer_value
from agentgrad.errors import ConfigError


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def test_a_folder_a_loaded_model_and_a_scorer_give_scorers_on_the_same_weights(tiny_llama):
    from agentgrad.models.hf import HFModel

    sc = make_scorer(str(tiny_llama), on_too_long="skip")
    assert isinstance(sc, Scorer) and sc.on_too_long == "skip" and sc.path == str(tiny_llama)
    assert make_scorer(sc) is sc and ag.load_scorer(sc) is sc  # a scorer is returned as it is
    model = HFModel(path=str(tiny_llama))
    shared = make_scorer(model, prompt_weights=True)
    # a loaded model's weights are shared: the very tensors, not a second copy
    assert next(shared.model.parameters()).data_ptr() == next(model.model.parameters()).data_ptr()
    assert shared.prompt_weights and next(sc.model.parameters()).data_ptr() != next(model.model.parameters()).data_ptr()


def test_tiny_and_hf_values_name_the_folders_they_stand_for(tiny_llama):
    from agentgrad.models.tiny import cached_tiny_model

    assert scorer_path("tiny") == str(cached_tiny_model(arch="llama"))
    assert scorer_path("tiny:qwen3") == str(cached_tiny_model(arch="qwen3"))
    assert scorer_path(f"hf:{tiny_llama}") == str(tiny_llama) == scorer_path(tiny_llama)
    assert scorer_path("smollm2") == "smollm2" and scorer_path("org/model") == "org/model"  # resolved on load


def test_a_registered_name_is_a_scorer_value(tiny_llama, monkeypatch):
    from agentgrad.attribution import factory

    monkeypatch.setattr(factory, "_NAMED", dict(factory._NAMED))  # the test's name goes with the test
    register_scorer_value("test-named", lambda: tiny_llama, "a name registered by a test")
    assert scorer_path("test-named") == str(tiny_llama) and "test-named (a name registered by a test)" in scorer_values()
    import agentgrad.benchmarks.planted.model  # noqa: F401  (registers trained)

    assert "trained (" in scorer_values()


@pytest.mark.parametrize("value, message", [
    ("openai:gpt-4o@http://127.0.0.1:9", "served model"),
    ("fake:x", "scripted model"),
    (None, "not none"),
    ("", "not none"),
    (3, "not int"),
])
def test_what_cannot_be_a_scorer_is_one_line_that_lists_what_can(value, message):
    with pytest.raises(ConfigError, match=message) as e:
        make_scorer(value, hint="do this instead")
    text = str(e.value)
    assert "\n" not in text and "smollm2, a model folder or hub id, gguf:FILE, tiny" in text
    assert text.endswith("do this instead")


def test_a_folder_that_holds_no_model_is_refused_before_anything_loads(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ConfigError, match="is not a model folder"):
        make_scorer(tmp_path)
    with pytest.raises(ConfigError, match="is not a model folder"):
        make_scorer(str(tmp_path / "notes.txt"))


def test_the_option_parsers():
    assert names("all", ("a", "b")) == ["a", "b"] and names(" b , a,", ("a", "b")) == ["b", "a"]
    assert names("zzz", ("a",)) == ["zzz"]  # kept: the library names the valid ones
    assert method_names("last,random") == ["last", "random"]
    assert not any(m.startswith("judge:") for m in method_names("all")) and "replay" not in method_names("all")
    assert "replay" in method_names("all", replay=True)
    with pytest.raises(ConfigError, match="unknown blame method 'nope'"):
        method_names("nope")
    assert scorer_value("none") is None and scorer_value("") is None and scorer_value("tiny") == "tiny"
    assert check_device("cuda:1") == "cuda:1" and check_dtype("bfloat16") == "bfloat16"
    for bad in ("gpu", "cuda:x", "cuda 0"):
        with pytest.raises(ConfigError, match="--device"):
            check_device(bad)
    with pytest.raises(ConfigError, match="--dtype"):
        check_dtype("fp16")


def test_a_bad_device_or_dtype_is_one_line_before_anything_loads(tmp_path):
    for args, msg in [(["--device", "gpu0"], "--device takes cpu, cuda or cuda:N"),
                      (["--dtype", "half"], "--dtype takes float32, bfloat16, float16")]:
        rc, _, err = cli("attribute", tmp_path / "t.json", "--scorer", "no-such-model", "--out", tmp_path / "a", *args)
        assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "a").exists()


def test_bench_blame_refuses_a_served_scorer_and_unknown_options_in_the_library(tmp_path):
    from agentgrad.benchmarks.planted.bench import check_options

    rc, _, err = cli("bench", "blame", "--out", tmp_path / "o", "--scorer", "openai:m@http://127.0.0.1:9",
                     "--episodes", "1", "--topology", "chain", "--faults", "tool", "--methods", "gbc:max_l1:whole")
    assert rc == 2 and "served model" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
    for args, msg in [((["ring"], ["tool"], 1, ["last"], False), "unknown topology 'ring'"),
                      ((["chain"], [], 1, ["last"], False), r"unknown fault kind '\(none\)'"),
                      ((["chain"], ["tool"], 1, ["temporal"], False), "temporal needs a white-box model"),
                      ((["chain"], ["misroute"], 1, ["last"], True), "no topology given can hold misroute")]:
        with pytest.raises(ConfigError, match=msg):
            check_options(*args)
