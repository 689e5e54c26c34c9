"""The optimisation run's configuration (``agentgrad optimize CONFIG.yaml``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentgrad.blame.methods import DEFAULT_METHOD, canonical
from agentgrad.core.config import ModelSpec, SystemConfig, load_system_config, read_yaml, validate
from agentgrad.errors import ConfigError
from agentgrad.core.redact import REDACTED


class ScorerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = Field("default", description="a model of the system (hf or tiny backend)")
    path: str | None = Field(None, description="or a separate scorer (surrogate): folder or hub id")
    method: str = Field(DEFAULT_METHOD, description="any blame method of agentgrad.blame.methods, or an alias "
                                                    "(docs/blame.md)")
    judge: str | None = Field(None, description="a model under models: that judges (the judge:* methods)")
    top_k: int = Field(1, ge=1)
    max_paths: int = Field(16, ge=1)
    dtype: str = "float32"
    device: str = "cpu"
    on_too_long: Literal["error", "skip"] = "skip"
    prompt_weights: bool = Field(False, description="also score each call's own prompt (for agentgrad.blame.credit)")
    batch_tokens: int = Field(0, ge=0, description="score calls that share a prefix in padded batches (0: one by one)")

    @field_validator("method")
    @classmethod
    def _known(cls, v: str) -> str:
        canonical(v)  # an unknown name is a RegistryError listing the valid ones
        return v


class OptimizerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["deterministic", "llm", "target", "edit"] = "deterministic"
    model: str | None = Field(None, description="name of a model under models: (llm optimizer; target: "
                                                "the target writer and prompt rewriter, else scripted)")
    max_attempts: int = Field(3, ge=1)
    max_chars: int = Field(8000, ge=100)
    max_new_tokens: int = Field(4096, ge=16)


class ValidateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    size: int = Field(4, ge=1, description="examples of the validation split scored per step")
    tolerance: float = Field(0.0, ge=0.0, description="largest score drop still accepted (a choice: default 0)")
    accept_ties: bool = Field(False, description="accept a step that leaves the validation score unchanged")

    def accepts(self, before: float, after: float) -> bool:
        """The gate's rule: a step is kept when it improves the validation score; a tie only with
        ``accept_ties`` (or a positive ``tolerance``); a drop only when ``tolerance`` covers it."""
        if after > before:
            return True
        if after == before:
            return self.accept_ties or self.tolerance > 0
        return before - after <= self.tolerance


class TestConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    size: int = Field(0, ge=0, description="questions of the test split scored (0: all of them)")


class RenderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_node_chars: int = Field(300, ge=20)
    max_chars: int = Field(6000, ge=200)


class TrainerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    samples: int = Field(30, ge=1, description="training examples used (the paper: 30)")
    step_every: int = Field(3, ge=1, description="an optimizer step every N samples (the paper: 3)")
    seed: int = 0
    concurrency: int = Field(1, ge=1, description="episodes of a step (and of the validation gate) run at once")
    validation: ValidateConfig | None = Field(None, alias="validate", description="the validation gate")
    test: TestConfig | None = Field(None, description="a held-out test split (data: test:) scored with the "
                                                      "starting and the final prompts: no gate reads it")
    history: int = Field(5, ge=0, description="earlier steps shown to the optimizer")
    render: RenderConfig = Field(default_factory=RenderConfig)


class OptimizeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = "pipeline"
    system: str = Field(..., description="system YAML, relative to this file")
    data: dict[str, str] = Field(default_factory=dict, description="split -> JSONL, relative to this file")
    models: dict[str, ModelSpec] = Field(default_factory=dict, description="added to / replacing the system's")
    scorer: ScorerConfig = Field(default_factory=ScorerConfig)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    resolved_system: SystemConfig | None = Field(
        None, description="written by a run into its config.yaml: the system it ran, model overrides included "
                          "(used instead of the system file, so that the run's own config.yaml resumes it)")

    def anchored(self, base: Path) -> "OptimizeConfig":
        """A copy whose file paths (``system``, ``data``) are absolute: the same configuration, and the
        same digest, whether it is read from the original file or from a run's config.yaml."""
        return self.model_copy(update={"system": str((base / self.system).resolve()),
                                       "data": {k: str((base / v).resolve()) for k, v in self.data.items()}})

    def digest(self) -> str:
        """A hash of everything that determines the run (a resumed run must not change it); the
        concurrency and the test split do not: a run resumed at another concurrency ends the same."""
        d = self.model_dump(mode="json", exclude={"resolved_system"})
        d["trainer"].pop("concurrency", None)
        d["trainer"].pop("test", None)  # scored after the loop: it changes no step
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _redacted_at(data: Any, where: str = "") -> str | None:
    """Where ``data`` holds a value a run removed when it wrote its configuration (a secret), if anywhere."""
    if data == REDACTED:
        return where or "(top level)"
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else []
    for k, v in items:
        found = _redacted_at(v, f"{where}.{k}" if where else str(k))
        if found:
            return found
    return None


def load_optimize_config(path: str | Path) -> tuple[OptimizeConfig, Path]:
    """The configuration in ``path`` (a user's file, or a run's own config.yaml) with its paths made
    absolute, and the folder it was read from."""
    path = Path(path)
    data = read_yaml(path)
    secret = _redacted_at(data)
    if secret:
        raise ConfigError(f"{path}: {secret} is {REDACTED} (a secret is never written to a run); give it through "
                          f"an environment variable (api_key_env) or resume with the original configuration")
    cfg = validate(OptimizeConfig, data, str(path))
    return cfg.anchored(path.parent), path.parent


def resolve_system(cfg: OptimizeConfig, base: Path) -> SystemConfig:
    """The system configuration (a run's recorded one, else the system file) with this run's model
    entries merged in."""
    if cfg.resolved_system is not None:
        sys_cfg = cfg.resolved_system.model_copy(deep=True)
    else:
        sys_cfg = load_system_config((base / cfg.system))
    for name, spec in cfg.models.items():
        sys_cfg.models[name] = spec
    return sys_cfg
