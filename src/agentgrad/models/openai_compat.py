"""Any OpenAI-compatible chat-completions server (vLLM, SGLang, Ollama, llama.cpp, OpenAI).

The API key comes from the configuration or the environment and is never written anywhere.
Requests that fail with 429, 5xx, a timeout or a broken connection are retried with exponential
backoff (honouring ``Retry-After``); the number of requests in flight is bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentgrad.core.config import validate
from agentgrad.core.trace import ToolCall
from agentgrad.errors import ContextLengthError, ModelError
from agentgrad.core.model import Generation, GenerationSettings


class OpenAIOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    base_url: str | None = None
    api_key: str | None = Field(None, description="prefer api_key_env; never written to disk")
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = Field(120.0, gt=0)
    max_retries: int = Field(8, ge=0)
    backoff_initial: float = Field(0.5, ge=0)
    backoff_max: float = Field(30.0, ge=0)
    concurrency: int = Field(64, ge=1, description="requests in flight at once (lower it for rate-limited APIs)")
    extra_body: dict[str, Any] = Field(default_factory=dict)


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

    def _request(self, messages, tools, settings: GenerationSettings) -> dict[str, Any]:
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
        return req

    def _delay(self, attempt: int, e: Exception) -> float:
        base = min(self.options.backoff_max, self.options.backoff_initial * 2**attempt)
        hinted = _retry_after(e)
        if hinted is not None:
            return min(self.options.backoff_max, max(hinted, base / 2))
        return base * (0.5 + 0.5 * self._rng.random())

    def _fail(self, e: Exception, attempts: int) -> ModelError:
        import openai

        where = f"{self.options.model} at {self.base_url or 'api.openai.com'}"
        msg = getattr(e, "message", None) or str(e) or type(e).__name__
        msg = msg.strip().splitlines()[0] if msg.strip() else type(e).__name__
        if isinstance(e, openai.BadRequestError) and "context" in msg.lower() and "length" in msg.lower():
            return ContextLengthError(f"{where}: {msg}")
        if _retryable(e):
            return ModelError(f"{where} failed after {attempts} attempt(s): {msg}")
        return ModelError(f"{where} refused the request: {msg}")

    def generate(self, messages, tools, settings: GenerationSettings) -> Generation:
        client, req = self._sync_client(), self._request(messages, tools, settings)
        for attempt in range(self.options.max_retries + 1):
            try:
                with self._sem:
                    resp = client.chat.completions.create(**req)
                return self._parse(resp)
            except Exception as e:
                if not _retryable(e) or attempt == self.options.max_retries:
                    raise self._fail(e, attempt + 1) from None
                time.sleep(self._delay(attempt, e))
        raise AssertionError("unreachable")

    async def agenerate(self, messages, tools, settings: GenerationSettings) -> Generation:
        (client, sem), req = self._async_client(), self._request(messages, tools, settings)
        for attempt in range(self.options.max_retries + 1):
            try:
                async with sem:
                    resp = await client.chat.completions.create(**req)
                return self._parse(resp)
            except Exception as e:
                if not _retryable(e) or attempt == self.options.max_retries:
                    raise self._fail(e, attempt + 1) from None
                await asyncio.sleep(self._delay(attempt, e))
        raise AssertionError("unreachable")

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
