"""The simulated customer of tau-bench: an LLM (any backend) playing a user from the task's instruction.

The simulator sees the conversation from the customer's side (the agent's replies are its
``user`` messages, its own lines its ``assistant`` messages) and follows tau-bench's user rules:
one piece of information at a time, nothing invented, ``###STOP###`` once the goal is met.
It is the outside world of the system under test: its lines enter the trace as input nodes,
never as call nodes, so they are not blamed or optimised.
"""

from __future__ import annotations

from typing import Any, Protocol

from agentgrad.models.base import GenerationSettings, LanguageModel

STOP = "###STOP###"
GREETING = "Hi! How can I help you today?"

USER_PROMPT = """You are playing a customer who is chatting with a customer service agent of an online store.

Your goal and what you know:
{instruction}

How to behave:
- Write one message at a time, as the customer would, and nothing else.
- Reveal only what the current step of the conversation needs; never state the whole goal at once.
- Use only what your goal says. If the agent asks for something your goal does not give, say you do not know or do not have it; never make it up.
- Say things in your own words rather than repeating the goal text.
- Keep to the personality your goal describes and keep the conversation natural.
- When your goal has been reached (or cannot be reached any further), reply with {stop} alone, with nothing else in the message."""


class User(Protocol):
    """A customer: ``reset()`` gives the first message, ``reply(agent_text)`` each next one."""

    def reset(self, instruction: str) -> str: ...

    def reply(self, agent_text: str) -> str: ...


class UserSimulator:
    """An LLM that plays the customer.

    Args:
        model: any backend.
        settings: decoding settings (tau-bench samples its user at temperature 0 by default).
    """

    def __init__(self, model: LanguageModel, settings: GenerationSettings | None = None):
        self.model = model
        self.settings = settings or GenerationSettings(max_new_tokens=256)
        self.messages: list[dict[str, Any]] = []

    def _next(self) -> str:
        gen = self.model.generate([dict(m) for m in self.messages], None, self.settings)
        text = gen.text.strip()
        self.messages.append({"role": "assistant", "content": text})
        return text

    def reset(self, instruction: str) -> str:
        self.messages = [{"role": "system", "content": USER_PROMPT.format(instruction=instruction, stop=STOP)},
                         {"role": "user", "content": GREETING}]
        return self._next()

    def reply(self, agent_text: str) -> str:
        self.messages.append({"role": "user", "content": agent_text})
        return self._next()


class ScriptedUser:
    """A customer that says fixed lines in order, then ``###STOP###`` (for tests and demos)."""

    def __init__(self, lines: list[str]):
        self.lines = list(lines)
        self.heard: list[str] = []
        self._i = 0

    def reset(self, instruction: str) -> str:
        self._i, self.heard = 0, []
        return self._take()

    def reply(self, agent_text: str) -> str:
        self.heard.append(agent_text)
        return self._take()

    def _take(self) -> str:
        if self._i >= len(self.lines):
            return STOP
        self._i += 1
        return self.lines[self._i - 1]


def is_stop(text: str) -> bool:
    return STOP in text
