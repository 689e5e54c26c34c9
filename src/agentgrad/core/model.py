"""The protocol every model backend implements, and the data it exchanges.

An :class:`~agentgrad.core.agent.Agent` calls a :class:`LanguageModel`; the backends that implement it
(fake, Hugging Face, OpenAI-compatible, tiny) live in :mod:`agentgrad.models`.

A call may ask for a shape (:class:`OutputSchema` in ``GenerationSettings.output``): a JSON schema, a
regular expression or a list of choices. Each backend honours it natively (docs/models.md, "Structured
output"): the hf backend masks the tokens that would leave the shape, an OpenAI-compatible server gets
``response_format``, the fake backend checks its scripted replies. ``Generation.constrained`` says
whether the reply was decoded under the schema (a server that rejected it answers unconstrained, and
the caller parses and re-asks, as it would without a schema).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentgrad.core.trace import ToolCall
from agentgrad.errors import OutputSchemaError


class OutputSchema(BaseModel):
    """The shape a reply must take: exactly one of ``json_schema``, ``regex`` or ``choices``.

    A reply decoded under it is the bare JSON text (``json_schema``), the whole matching string
    (``regex``, matched in full) or one of the choices verbatim. :meth:`parse` checks a reply against
    it (a backend that could not constrain decoding, a fake's script) and returns the value.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field("reply", pattern=r"^[A-Za-z0-9_-]{1,64}$", description="the schema's name (OpenAI asks for one)")
    json_schema: dict[str, Any] | None = None
    regex: str | None = None
    choices: list[str] | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> "OutputSchema":
        given = [k for k in ("json_schema", "regex", "choices") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"an output schema takes exactly one of json_schema, regex, choices; got {given or 'none'}")
        if self.choices is not None and (not self.choices or not all(isinstance(c, str) and c for c in self.choices)):
            raise ValueError("choices must be a non-empty list of non-empty strings")
        return self

    @property
    def kind(self) -> str:
        return "json_schema" if self.json_schema is not None else "regex" if self.regex is not None else "choices"

    def key(self) -> str:
        """A canonical text of the schema (compiled grammars are cached by it; calls batch by it)."""
        return json.dumps(self.model_dump(), sort_keys=True, ensure_ascii=False)

    def check(self) -> None:
        """A one-line :class:`OutputSchemaError` for a schema no backend can use, checked the same way
        everywhere (JSON Schema's meta-schema; Python's regex compiler)."""
        if self.json_schema is not None:
            import jsonschema

            try:
                jsonschema.validators.validator_for(self.json_schema).check_schema(self.json_schema)
            except jsonschema.SchemaError as e:
                raise OutputSchemaError(f"output schema {self.name!r} is not a valid JSON schema: {e.message[:200]}") from None
        elif self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as e:
                raise OutputSchemaError(f"output schema {self.name!r}: the regex {self.regex!r} does not compile: {e}") from None

    def parse(self, text: str) -> Any:
        """The value of a reply that has this shape: the decoded JSON, or the text itself.

        Raises:
            OutputSchemaError: the reply does not have the shape; the message says where it departs.
        """
        if self.choices is not None:
            if text.strip() in self.choices:
                return text.strip()
            raise OutputSchemaError(f"the reply {_quote(text)} is not one of {', '.join(map(repr, self.choices))}")
        if self.regex is not None:
            try:
                matched = re.fullmatch(self.regex, text.strip(), re.S)
            except re.error as e:
                raise OutputSchemaError(f"output schema {self.name!r}: the regex does not compile: {e}") from None
            if matched is None:
                raise OutputSchemaError(f"the reply {_quote(text)} does not match /{self.regex}/")
            return text.strip()
        value = _json_in(text)
        import jsonschema

        try:
            jsonschema.validate(value, self.json_schema)
        except jsonschema.ValidationError as e:
            where = "/".join(str(p) for p in e.absolute_path) or "the reply"
            raise OutputSchemaError(f"{where}: {e.message[:160]} (schema {self.name!r}): {_quote(text)}") from None
        except jsonschema.SchemaError as e:
            raise OutputSchemaError(f"output schema {self.name!r} is not a valid JSON schema: {e.message[:160]}") from None
        return value


def _json_in(text: str) -> Any:
    """The JSON value of a reply: the whole text, else (a reply decoded without the schema) a fenced
    code block or the span from the first ``{`` to the last ``}``, as chat models wrap JSON in prose."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        error = e
    candidates = [text[text.find("{"): text.rfind("}") + 1]]
    start = text.find("```")
    end = text.find("```", start + 3) if start >= 0 else -1
    if end > 0:  # found by position, not by a regex that backtracks over a long reply
        body = text[start + 3: end]
        candidates.insert(0, body[4:] if body.startswith("json") else body)
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    raise OutputSchemaError(f"the reply is not JSON ({error.msg}): {_quote(text)}")


def _quote(text: str, n: int = 160) -> str:
    text = text.strip()
    return repr(text if len(text) <= n else text[:n] + "...")


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
    output: OutputSchema | None = Field(None, description="the shape the reply must take (see OutputSchema)")

    def with_output(self, schema: OutputSchema | None) -> "GenerationSettings":
        """These settings asking for ``schema`` (None: free text)."""
        return self.model_copy(update={"output": schema})

    def record(self) -> dict[str, Any]:
        """What a call node stores: every setting, the output schema only where one was asked."""
        d = self.model_dump()
        if d.get("output") is None:
            d.pop("output", None)
        return d


@dataclass
class Generation:
    """A model's reply: text and/or tool calls, with token usage."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    finish_reason: str = ""
    raw: str | None = None  # the unparsed text, where tool calls were parsed out of it
    # with an output schema asked: whether decoding was constrained to it (False: the backend could not,
    # and the caller must check the reply); None: no schema was asked
    constrained: bool | None = None


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
