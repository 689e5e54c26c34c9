"""Model backends by name. ``create_model(spec)`` builds one from a configuration entry."""

from __future__ import annotations

from typing import Any, Callable

from agentgrad.errors import RegistryError
from agentgrad.core.model import LanguageModel

_BACKENDS: dict[str, Callable[..., LanguageModel]] = {}


def register_backend(name: str, factory: Callable[..., LanguageModel]) -> None:
    """Make ``factory(name=..., **options)`` available as backend ``name``."""
    _BACKENDS[name] = factory


def list_backends() -> list[str]:
    _ensure_builtins()
    return sorted(_BACKENDS)


def get_backend(name: str) -> Callable[..., LanguageModel]:
    _ensure_builtins()
    try:
        return _BACKENDS[name]
    except KeyError:
        raise RegistryError(f"unknown model backend {name!r}; valid: {', '.join(sorted(_BACKENDS))}") from None


def create_model(name: str, backend: str, **options: Any) -> LanguageModel:
    return get_backend(backend)(name=name, **options)


def _ensure_builtins() -> None:
    # Imported lazily so that importing agentgrad does not import torch or openai.
    if "fake" in _BACKENDS:
        return

    def fake(name: str, **o: Any) -> LanguageModel:
        from agentgrad.models.fake import FakeModel

        return FakeModel(name=name, **o)

    def hf(name: str, **o: Any) -> LanguageModel:
        from agentgrad.models.hf import HFModel

        return HFModel.shared(name=name, **o)

    def openai(name: str, **o: Any) -> LanguageModel:
        from agentgrad.models.openai_compat import OpenAIModel

        return OpenAIModel(name=name, **o)

    def tiny(name: str, **o: Any) -> LanguageModel:
        from agentgrad.models.hf import HFModel
        from agentgrad.models.tiny import cached_tiny_model

        path = cached_tiny_model(arch=o.pop("arch", "llama"), seed=o.pop("seed", 0))
        return HFModel.shared(name=name, path=str(path), **o)

    _BACKENDS.setdefault("fake", fake)
    _BACKENDS.setdefault("tiny", tiny)
    _BACKENDS.setdefault("hf", hf)
    _BACKENDS.setdefault("openai", openai)
