"""The protocol every model backend implements, and the data it exchanges.

An :class:`~agentgrad.core.agent.Agent` calls a :class:`LanguageModel`; the backends that implement it
(fake, Hugging Face, OpenAI-compatible, tiny) live in :mod:`agentgrad.models`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agentgrad.core.trace import ToolCall


class GenerationSettings(BaseModel):
    """How to decode. ``temperature == 0`` means greedy decoding.

    ``temperature=None`` leaves it to the backend (an OpenAI-compatible server's default, 1.0 for
    OpenAI's models; sampling at 1.0 for a local model), as tau-bench samples its customer;
    ``max_new_tokens=None`` sets no cap beyond the backend's own (a local model: its context).
    """

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int | None = Field(512, ge=1)
    seed: int | None = 0
    stop: list[str] = Field(default_factory=list)


@dataclass
class Generation:
    """A model's reply: text and/or tool calls, with token usage."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    finish_reason: str = ""
    raw: str | None = None  # the unparsed text, where tool calls were parsed out of it


@runtime_checkable
class LanguageModel(Protocol):
    """A chat model. Messages are OpenAI-style dicts; tools are OpenAI-style schemas."""

    name: str

    def describe(self) -> dict[str, Any]:
        """What is recorded in a call node's ``model`` field (never secrets)."""
        ...

    def generate(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, settings: GenerationSettings
    ) -> Generation: ...

    async def agenerate(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, settings: GenerationSettings
    ) -> Generation: ...


class ThreadedAsyncMixin:
    """``agenerate`` by running the blocking ``generate`` in a worker thread."""

    async def agenerate(self, messages, tools, settings):  # type: ignore[no-untyped-def]
        return await asyncio.to_thread(self.generate, messages, tools, settings)  # type: ignore[attr-defined]
