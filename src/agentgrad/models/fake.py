"""A scripted model: replies come from a queue (text or tool calls). For tests and examples.

A call with an output schema (``settings.output``) is answered as a backend that constrains decoding
would be: the scripted reply must have the shape (else a one-line :class:`OutputSchemaError` names
the script's mistake) and is marked ``constrained``. ``structured=False`` plays a backend without
structured output instead: the schema is ignored and the reply marked unconstrained, so the caller's
parse-and-re-ask is what runs.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import deque
from typing import Any, Callable, Iterable

from agentgrad.core.trace import ToolCall
from agentgrad.errors import ConfigError, ModelError, OutputSchemaError
from agentgrad.core.model import Generation, GenerationSettings, ThreadedAsyncMixin

Reply = "str | dict[str, Any] | Generation"


def to_generation(reply: Any) -> Generation:
    """Turn a scripted reply into a :class:`Generation`.

    A reply is a string (text), a ``Generation``, or a dict with ``text`` and/or ``tool_calls``
    (each ``{"name": ..., "arguments": {...}}``).
    """
    if isinstance(reply, Generation):
        return reply
    if isinstance(reply, str):
        return Generation(text=reply, finish_reason="stop")
    if isinstance(reply, dict):
        unknown = set(reply) - {"text", "tool_calls"}
        if unknown:
            raise ConfigError(f"fake reply has unknown key(s) {sorted(unknown)}; use text and tool_calls")
        calls = []
        for i, c in enumerate(reply.get("tool_calls") or []):
            args = c.get("arguments", {})
            if isinstance(args, str):
                args = json.loads(args)
            calls.append(ToolCall(name=c["name"], arguments=args, id=c.get("id") or f"call_{i}"))
        return Generation(text=reply.get("text", ""), tool_calls=calls, finish_reason="tool_calls" if calls else "stop")
    raise ConfigError(f"fake reply must be a string or a dict, got {type(reply).__name__}")


class FakeModel(ThreadedAsyncMixin):
    """Answers from a queue of scripted replies, or from a function of the messages.

    Args:
        replies: replies served in order (see :func:`to_generation`).
        responder: called as ``responder(messages, tools)`` when given; its return is a reply.
        cycle: start the queue again when it runs out, instead of raising.
        structured: honour output schemas (check each reply against it); False: ignore them.
    """

    def __init__(
        self,
        replies: Iterable[Any] = (),
        responder: Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], Any] | None = None,
        cycle: bool = False,
        name: str = "fake",
        structured: bool = True,
    ):
        self.name = name
        self._script = [to_generation(r) for r in replies]
        self._queue = deque(self._script)
        self.responder = responder
        self.cycle = cycle
        self.structured = structured
        self.requests: list[list[dict[str, Any]]] = []  # every messages list received, for tests
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        return {"backend": "fake", "name": self.name}

    def generate(self, messages, tools, settings: GenerationSettings) -> Generation:
        schema = settings.output
        if schema is not None and self.structured:
            schema.check()
        with self._lock:
            self.requests.append(messages)
            if self.responder is not None:
                gen = to_generation(self.responder(messages, tools))
            else:
                if not self._queue and self.cycle and self._script:
                    self._queue.extend(self._script)
                if not self._queue:
                    raise ModelError(f"fake model {self.name!r} ran out of scripted replies")
                gen = self._queue.popleft()
        if schema is None or gen.tool_calls:
            return gen
        if self.structured:
            try:
                schema.parse(gen.text)
            except OutputSchemaError as e:
                raise OutputSchemaError(f"fake model {self.name!r}: a scripted reply breaks output schema "
                                        f"{schema.name!r}: {e}") from None
        return dataclasses.replace(gen, constrained=self.structured)
