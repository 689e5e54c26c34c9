"""User configuration: YAML files validated by pydantic, errors reported in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentgrad.errors import ConfigError
from agentgrad.core.redact import redacted  # noqa: F401  (configurations are written redacted)
from agentgrad.core.model import GenerationSettings

T = TypeVar("T", bound=BaseModel)


class ModelSpec(BaseModel):
    """A model entry: the backend's name plus that backend's options (checked by the backend)."""

    model_config = ConfigDict(extra="allow")

    backend: str = "hf"

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class AgentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "default"
    prompt: str
    protected: list[str] = Field(default_factory=list)
    inputs: list[str] = Field(default_factory=list)
    template: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    max_tool_rounds: int = Field(8, ge=0)
    parallel_tool_calls: bool = True  # False: only the first tool call of a reply is run (tau-bench's agent)


class SystemConfig(BaseModel):
    """A declared system: models, agents, and for each agent the nodes that feed it."""

    model_config = ConfigDict(extra="forbid")

    name: str = "system"
    inputs: list[str] = Field(default_factory=lambda: ["input"])
    models: dict[str, ModelSpec] = Field(default_factory=dict)
    settings: GenerationSettings = Field(default_factory=GenerationSettings)
    agents: dict[str, AgentSpec] = Field(..., min_length=1)
    output: str | None = None


def format_validation_error(e: ValidationError, where: str) -> str:
    first = e.errors()[0]
    loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    more = f" (and {e.error_count() - 1} more problem(s))" if e.error_count() > 1 else ""
    return f"{where}: {loc}: {msg}{more}"


def validate(model: type[T], data: Any, where: str) -> T:
    """``model.model_validate(data)`` with a one-line :class:`ConfigError` on failure."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, where)) from None


def read_yaml(path: str | Path) -> Any:
    from agentgrad.core.files import read_text

    path = Path(path)
    text = read_text(path, "configuration file")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path} is not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a YAML mapping at the top level")
    return data


def load_system_config(path: str | Path) -> SystemConfig:
    return validate(SystemConfig, read_yaml(path), str(path))


def apply_model_override(cfg: SystemConfig, override: str) -> None:
    """Apply ``NAME=VALUE`` from ``--model``.

    VALUE is a local folder or hub id (Hugging Face backend), or ``BACKEND:VALUE``: ``hf:PATH``,
    ``openai:MODEL`` or ``openai:MODEL@BASE_URL``.
    """
    name, sep, value = override.partition("=")
    if not sep or not name or not value:
        raise ConfigError(f"--model takes NAME=PATH_OR_ID, got {override!r}")
    if name not in cfg.models:
        raise ConfigError(f"--model {name}=...: no model named {name!r} (defined: {', '.join(cfg.models) or 'none'})")
    cfg.models[name] = model_spec_from_value(value, cfg.models[name])


def model_spec_from_value(value: str, old: ModelSpec | None = None) -> ModelSpec:
    """A model entry from a command-line value, keeping ``old``'s options when the backend stays.

    VALUE is a local folder or hub id (Hugging Face backend), ``hf:PATH``, ``openai:MODEL``,
    ``openai:MODEL@BASE_URL``, or ``tiny`` / ``tiny:ARCH`` (the offline test model).
    """
    backend, colon, rest = value.partition(":")
    if value == "tiny":
        backend, colon, rest = "tiny", ":", "llama"
    if not colon or backend not in ("hf", "openai", "fake", "tiny") or rest.startswith("//"):
        backend, rest = "hf", value
    keep = old.options() if old is not None and old.backend == backend else {}
    if backend == "hf":
        keep["path"] = rest
    elif backend == "openai":
        model, at, url = rest.partition("@")
        keep["model"] = model
        if at:
            keep["base_url"] = url
    elif backend == "tiny":
        keep["arch"] = rest
    else:
        raise ConfigError("--model cannot switch a model to the fake backend; edit the YAML instead")
    return ModelSpec(backend=backend, **keep)
