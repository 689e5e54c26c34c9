"""A scripted model: replies come from a queue (text or tool calls). For tests and examples."""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Any, Callable, Iterable

from agentgrad.core.trace import ToolCall
from agentgrad.errors import ConfigError, ModelError
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
    """

    def __init__(
        self,
        replies: Iterable[Any] = (),
        responder: Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], Any] | None = None,
        cycle: bool = False,
        name: str = "fake",
    ):
        self.name = name
        self._script = [to_generation(r) for r in replies]
        self._queue = deque(self._script)
        self.responder = responder
        self.cycle = cycle
        self.requests: list[list[dict[str, Any]]] = []  # every messages list received, for tests
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        return {"backend": "fake", "name": self.name}

    def generate(self, messages, tools, settings: GenerationSettings) -> Generation:
        with self._lock:
            self.requests.append(messages)
            if self.responder is not None:
                return to_generation(self.responder(messages, tools))
            if not self._queue and self.cycle and self._script:
                self._queue.extend(self._script)
            if not self._queue:
                raise ModelError(f"fake model {self.name!r} ran out of scripted replies")
            return self._queue.popleft()
