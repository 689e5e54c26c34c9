"""Any OpenAI-compatible chat-completions server (vLLM, SGLang, Ollama, llama.cpp, OpenAI).

The API key comes from the configuration or the environment and is never written anywhere.
Requests that fail with 429, 5xx, a timeout or a broken connection are retried with exponential
backoff (honouring ``Retry-After``); the number of requests in flight is bounded. A server that is
not there fails fast (:mod:`agentgrad.models.breaker`): a refused connection or an unknown host
before the server ever answered is a one-line :class:`ServerUnreachableError` naming the URL, and a
server that stops answering mid-run opens the breaker after ``breaker_seconds``.

An output schema (``settings.output`` with a JSON schema) goes to the server as ``response_format``
``{"type": "json_schema", ...}`` (hosted servers, vLLM, llama.cpp's llama-server), or as
``{"type": "json_object", "schema": ...}``, the form llama-cpp-python's server (0.3.x) takes. With
``schema_format: auto`` a server that rejects the first form (an error naming ``response_format``,
a 500 from llama-cpp-python included) is asked again in the second, then without one; from then on
this backend sends what worked. Each reply decoded without the schema is counted in
``stats["unconstrained"]`` and marked ``Generation.constrained = False``, so the caller checks and
re-asks. A regex or choice list has no
portable field: such calls go unconstrained (counted the same way). ``tool_calls: schema`` serves a
model whose chat template has no tools (ChatML over llama.cpp): see :mod:`agentgrad.models.toolschema`.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentgrad.core.config import validate
from agentgrad.core.redact import redact_text
from agentgrad.core.trace import ToolCall
from agentgrad.errors import ContextLengthError, ModelError, ServerUnreachableError
from agentgrad.core.model import Generation, GenerationSettings
from agentgrad.models.breaker import Breaker, refused_or_unknown
from agentgrad.models import toolschema


class OpenAIOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    base_url: str | None = None
    api_key: str | None = Field(None, description="prefer api_key_env; never written to disk")
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = Field(600.0, gt=0, description="seconds one request may take (the openai client's default): a "
                           "local server on a CPU reads about 80 prompt tokens a second, an 8k-token prompt 100 s")
    max_retries: int = Field(8, ge=0)
    backoff_initial: float = Field(0.5, ge=0)
    backoff_max: float = Field(30.0, ge=0)
    concurrency: int = Field(64, ge=1, description="requests in flight at once (lower it for rate-limited APIs)")
    extra_body: dict[str, Any] = Field(default_factory=dict)
    breaker_seconds: float | None = Field(
        60.0, gt=0, description="a server that has answered before and then fails every attempt (no HTTP response) "
                                "for this long is given up: its calls fail at once (None: never)")
    schema_format: Literal["auto", "json_schema", "json_object", "off"] = Field(
        "auto", description="how an output schema is sent: json_schema (OpenAI, vLLM, llama.cpp's llama-server), "
                            "json_object with a schema (llama-cpp-python's server), off (never: the caller parses and "
                            "re-asks); auto: json_schema, then json_object where the server rejects it, then off")
    tool_calls: Literal["native", "schema"] = Field(
        "native", description="native: the server's tool calling; schema: for a chat template without tools (ChatML), "
                              "tools described in the prompt and the reply constrained to a JSON tool call")


def to_openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        o: dict[str, Any] = {"role": m["role"], "content": m.get("content", "")}
        if m.get("tool_calls"):
            o["tool_calls"] = [
                {
                    "id": c.get("id") or f"call_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
                }
                for i, c in enumerate(m["tool_calls"])
            ]
        if m["role"] == "tool":
            o["tool_call_id"] = m.get("tool_call_id", "")
        out.append(o)
    return out


def _rejects_schema(e: Exception) -> bool:
    """An error that names the structured-output field: the server does not take this response_format
    (a 400 or 422; llama-cpp-python answers its validation error with a 500)."""
    import openai

    if not isinstance(e, openai.APIStatusError) or e.status_code not in (400, 422, 500):
        return False
    text = (getattr(e, "message", "") or str(e)).lower()
    return "response_format" in text or (e.status_code != 500 and ("json_schema" in text or "schema" in text))


SERVER_MAX_LENGTH = 256  # longest string bound a server's grammar is given (see _for_server)


def _for_server(schema: Any, patterns: bool = True) -> Any:
    """``schema`` as sent to a server: a string's ``maxLength`` above :data:`SERVER_MAX_LENGTH` is left
    out. llama.cpp turns ``maxLength: n`` into ``n`` nested optional rules; past a few hundred it
    refuses the grammar, and llama-cpp-python 0.3.36's server then dies with SIGSEGV (measured: the
    LLM optimizer's 1,128-character prompt bound). ``patterns=False`` (llama-cpp-python's
    ``json_object`` form) leaves out a string's ``pattern`` too: its grammar applies the regex to the
    raw JSON text, not to the string's value, so a wildcard there can write a bare quote or newline.
    The reply is still validated against the full schema (:meth:`~agentgrad.core.model.OutputSchema.parse`),
    so a too-long reply, or one that misses the pattern, is caught there."""
    if isinstance(schema, list):
        return [_for_server(s, patterns) for s in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: _for_server(v, patterns) for k, v in schema.items()
            if not (k == "maxLength" and isinstance(v, int) and v > SERVER_MAX_LENGTH)
            and not (k == "pattern" and not patterns and isinstance(v, str))}


def _strict(schema: Any) -> bool:
    """Whether ``schema`` meets OpenAI's strict mode (every object closed, every property required):
    only then is ``strict: true`` sent, which a hosted server would refuse otherwise."""
    if isinstance(schema, list):
        return all(_strict(s) for s in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        if schema.get("additionalProperties") is not False or set(schema.get("required") or []) != set(props):
            return False
    return all(_strict(v) for k, v in schema.items() if k not in ("enum", "const", "default", "examples"))


def _retryable(e: Exception) -> bool:
    import openai

    if isinstance(e, (openai.APIConnectionError, openai.RateLimitError)):  # timeouts are connection errors
        return True
    return isinstance(e, openai.APIStatusError) and e.status_code >= 500


def _retry_after(e: Exception) -> float | None:
    resp = getattr(e, "response", None)
    value = resp.headers.get("retry-after") if resp is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class OpenAIModel:
    """Chat completions on an OpenAI-compatible endpoint, sync and async."""

    def __init__(self, name: str = "openai", **options: Any):
        self.name = name
        self.options = validate(OpenAIOptions, options, f"models.{name}")
        self.base_url = self.options.base_url or os.environ.get("OPENAI_BASE_URL")
        self._client: Any = None
        self._aclients: dict[int, tuple[Any, asyncio.Semaphore]] = {}
        self._sem = threading.BoundedSemaphore(self.options.concurrency)
        self._rng = random.Random(0)
        self.breaker = Breaker(self.options.breaker_seconds)
        # the response_format form sent with an output schema; auto steps down when the server rejects one
        self.schema_format: str | None = {"auto": "json_schema", "off": None}.get(self.options.schema_format,
                                                                                 self.options.schema_format)
        # constrained / unconstrained: replies to calls with an output schema, decoded under it or not;
        # schema_rejected: requests the server refused because of response_format
        self.stats = {"constrained": 0, "unconstrained": 0, "schema_rejected": 0}

    def describe(self) -> dict[str, Any]:
        return {"backend": "openai", "model": self.options.model, "base_url": self.base_url}

    def check(self) -> None:
        """Raise now what the first request would: no API key and no server given."""
        self._key()

    def _key(self) -> str:
        key = self.options.api_key or os.environ.get(self.options.api_key_env)
        if key:
            return key
        if self.base_url:  # local servers (vLLM, llama.cpp, ...) accept any key
            return "EMPTY"
        raise ModelError(f"model {self.name!r}: no API key; set {self.options.api_key_env} or give base_url")

    def _client_kwargs(self) -> dict[str, Any]:
        return {"api_key": self._key(), "base_url": self.base_url, "timeout": self.options.timeout, "max_retries": 0}

    def _sync_client(self) -> Any:
        if self._client is None:
            import openai

            self._client = openai.OpenAI(**self._client_kwargs())
        return self._client

    def _async_client(self) -> tuple[Any, asyncio.Semaphore]:
        loop_id = id(asyncio.get_running_loop())  # clients and semaphores belong to one event loop
        if loop_id not in self._aclients:
            import openai

            self._aclients[loop_id] = (openai.AsyncOpenAI(**self._client_kwargs()), asyncio.Semaphore(self.options.concurrency))
        return self._aclients[loop_id]

    @property
    def url(self) -> str:
        """The server's address as shown to a user (credentials masked)."""
        return redact_text(self.base_url or "https://api.openai.com/v1")

    def _request(self, messages, tools, settings: GenerationSettings) -> dict[str, Any]:
        if tools and self.options.tool_calls == "schema":
            messages = toolschema.messages_without_tools(messages, tools)
            settings = settings.with_output(toolschema.tool_reply_schema(tools))
            tools = None
        req: dict[str, Any] = {
            "model": self.options.model,
            "messages": to_openai_messages(messages),
            "top_p": settings.top_p,
        }
        if settings.temperature is not None:  # unset: the server's default applies
            req["temperature"] = settings.temperature
        if settings.max_new_tokens is not None:
            req["max_tokens"] = settings.max_new_tokens
        if settings.seed is not None:
            req["seed"] = settings.seed
        if settings.stop:
            req["stop"] = settings.stop
        if tools:
            req["tools"] = tools
        if self.options.extra_body:
            req["extra_body"] = self.options.extra_body
        schema = settings.output
        if schema is not None:
            schema.check()  # a schema no backend can use: one line here, not a server's 400 taken for "unsupported"
        if schema is not None and schema.json_schema is not None and self.schema_format == "json_schema":
            req["response_format"] = {"type": "json_schema", "json_schema": {
                "name": schema.name, "schema": _for_server(schema.json_schema), "strict": _strict(schema.json_schema)}}
        elif schema is not None and schema.json_schema is not None and self.schema_format == "json_object":
            req["response_format"] = {"type": "json_object", "schema": _for_server(schema.json_schema, patterns=False)}
        return req

    def _wants_schema(self, tools, settings: GenerationSettings) -> bool:
        return settings.output is not None or bool(tools and self.options.tool_calls == "schema")

    def _delay(self, attempt: int, e: Exception) -> float:
        base = min(self.options.backoff_max, self.options.backoff_initial * 2**attempt)
        hinted = _retry_after(e)
        if hinted is not None:
            return min(self.options.backoff_max, max(hinted, base / 2))
        return base * (0.5 + 0.5 * self._rng.random())

    def _fail(self, e: Exception, attempts: int) -> ModelError:
        import openai

        where = f"{self.options.model} at {self.url}"
        msg = getattr(e, "message", None) or str(e) or type(e).__name__
        msg = msg.strip().splitlines()[0] if msg.strip() else type(e).__name__
        if isinstance(e, openai.BadRequestError) and "context" in msg.lower() and "length" in msg.lower():
            return ContextLengthError(f"{where}: {msg}")
        if _retryable(e):
            return ModelError(f"{where} failed after {attempts} attempt(s): {msg}")
        return ModelError(f"{where} refused the request: {msg}")

    def _gate(self) -> None:
        reason = self.breaker.check()
        if reason is not None:
            raise ServerUnreachableError(reason)

    def _after_failure(self, e: Exception, attempt: int, started: float) -> float:
        """What a failed attempt means: raise (a configuration error, an open breaker, no retry left),
        or the seconds to wait before the next attempt."""
        import openai

        if isinstance(e, openai.APIStatusError):
            self.breaker.alive()  # an HTTP response, even an error: the server is there
        elif isinstance(e, openai.APIConnectionError):
            how = refused_or_unknown(e)
            hint = "is it running, and is the URL right?" if how == "refused the connection" else "is the URL right?"
            if how is not None and self.breaker.refused(f"the model server {self.url} {how} ({hint})"):
                self._gate()
            # a timeout is silence since it expired, not since the attempt began: a server busy with a long
            # prompt gets its retry, a hung one opens the breaker at its next timeout
            since = self.breaker.clock() if isinstance(e, openai.APITimeoutError) else started
            if self.breaker.failed(since, f"the model server {self.url} stopped answering: no response for "
                                            f"{self.options.breaker_seconds:g} s (breaker_seconds)"):
                self._gate()
        if not _retryable(e) or attempt == self.options.max_retries:
            raise self._fail(e, attempt + 1) from None
        delay = self._delay(attempt, e)
        cap = self.breaker.wait_cap()
        return delay if cap is None else min(delay, cap)

    def _fallback(self, req: dict[str, Any], e: Exception) -> dict[str, Any] | None:
        """The request in the next response_format form (or without one), where the server rejected
        it for that field; None where it did not."""
        if "response_format" not in req or not _rejects_schema(e):
            return None
        self.breaker.alive()  # it answered (with an error)
        self.stats["schema_rejected"] += 1
        sent = req["response_format"]["type"]
        if self.options.schema_format == "auto" and sent == "json_schema":
            self.schema_format = "json_object"
            return {**req, "response_format": {"type": "json_object", "schema": _for_server(
                req["response_format"]["json_schema"]["schema"], patterns=False)}}
        self.schema_format = None
        return {k: v for k, v in req.items() if k != "response_format"}

    def _finish(self, resp: Any, req: dict[str, Any], tools, settings: GenerationSettings) -> Generation:
        self.breaker.alive()
        gen = self._parse(resp)
        if self._wants_schema(tools, settings):
            gen.constrained = "response_format" in req
            self.stats["constrained" if gen.constrained else "unconstrained"] += 1
            if tools and self.options.tool_calls == "schema":
                gen = toolschema.parse_tool_reply(gen)
        return gen

    def generate(self, messages, tools, settings: GenerationSettings) -> Generation:
        client, req = self._sync_client(), self._request(messages, tools, settings)
        attempt = 0
        while True:
            self._gate()
            started = time.monotonic()
            try:
                with self._sem:
                    resp = client.chat.completions.create(**req)
                return self._finish(resp, req, tools, settings)
            except Exception as e:
                if (fallback := self._fallback(req, e)) is not None:
                    req = fallback
                    continue
                time.sleep(self._after_failure(e, attempt, started))
                attempt += 1

    async def agenerate(self, messages, tools, settings: GenerationSettings) -> Generation:
        (client, sem), req = self._async_client(), self._request(messages, tools, settings)
        attempt = 0
        while True:
            self._gate()
            started = time.monotonic()
            try:
                async with sem:
                    resp = await client.chat.completions.create(**req)
                return self._finish(resp, req, tools, settings)
            except Exception as e:
                if (fallback := self._fallback(req, e)) is not None:
                    req = fallback
                    continue
                await asyncio.sleep(self._after_failure(e, attempt, started))
                attempt += 1

    def _parse(self, resp: Any) -> Generation:
        if not getattr(resp, "choices", None):
            raise ModelError(f"{self.options.model}: the server returned no choices")
        choice = resp.choices[0]
        msg = choice.message
        calls = []
        for i, c in enumerate(msg.tool_calls or []):
            fn = c.function
            try:
                args: Any = json.loads(fn.arguments or "{}")
            except json.JSONDecodeError:
                args = fn.arguments  # kept as text; the tool answers with an error the model can read
            calls.append(ToolCall(name=fn.name, arguments=args, id=c.id or f"call_{i}"))
        usage = {}
        if resp.usage is not None:
            usage = {"prompt_tokens": resp.usage.prompt_tokens or 0, "completion_tokens": resp.usage.completion_tokens or 0}
        return Generation(text=msg.content or "", tool_calls=calls, usage=usage, finish_reason=choice.finish_reason or "")
