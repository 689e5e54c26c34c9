"""The simulated customer of tau-bench: an LLM (any backend) playing a user from the task's instruction.

The simulator is tau-bench's default LLM user: its system prompt template, the agent's first
message and the stop token come from ``user_simulator.json`` in the data directory. It sees the
conversation from the customer's side (the agent's replies are its ``user`` messages, its own
lines its ``assistant`` messages); a message that contains the stop token anywhere ends the
conversation.
It is the outside world of the system under test: its lines enter the trace as input nodes,
never as call nodes, so they are not blamed or optimised.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agentgrad.benchmarks.data import benchmark_dir
from agentgrad.errors import ConfigError
from agentgrad.core.model import GenerationSettings, LanguageModel

STOP = "###STOP###"


@dataclass(frozen=True)
class UserRules:
    """tau-bench's user simulator (``user_simulator.json``): prompt template, first agent message, stop token."""

    template: str  # holds {instruction_display}
    instruction_display: str  # holds {instruction}
    first_agent_message: str
    stop_token: str

    def system_prompt(self, instruction: str | None) -> str:
        shown = self.instruction_display.replace("{instruction}", instruction) if instruction is not None else ""
        return self.template.replace("{instruction_display}", shown)


def load_user_rules(data: str | Path | None = None) -> UserRules:
    """tau-bench's rules for its simulated customer, from the data directory."""
    path = benchmark_dir("taubench_retail", data) / "user_simulator.json"
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        display = d["instruction_display"].split("  (inserted")[0]  # the text, without the file's note on it
        display = display.replace("\\n", "\n")  # written escaped in the file
        rules = UserRules(d["system_prompt_template"], display, d["first_agent_message"], d["stop_token"])
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None
    except (KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"{path} lacks {e}; it must hold system_prompt_template, instruction_display, "
                          f"first_agent_message and stop_token") from None
    if "{instruction_display}" not in rules.template or "{instruction}" not in rules.instruction_display:
        raise ConfigError(f"{path}: the template must hold {{instruction_display}} and the display {{instruction}}")
    return rules


class User(Protocol):
    """A customer: ``reset()`` gives the first message, ``reply(agent_text)`` each next one."""

    def reset(self, instruction: str) -> str: ...

    def reply(self, agent_text: str) -> str: ...

    def is_stop(self, text: str) -> bool: ...


class UserSimulator:
    """An LLM that plays the customer, as tau-bench's default user does.

    Args:
        model: any backend.
        rules: tau-bench's prompt template, first agent message and stop token (:func:`load_user_rules`).
        settings: decoding settings; by default the temperature is unset (the server's default
            applies, as in tau-bench) and there is no cap on a message's length beyond the backend's.
    """

    def __init__(self, model: LanguageModel, rules: UserRules, settings: GenerationSettings | None = None):
        self.model = model
        self.rules = rules
        self.settings = settings or GenerationSettings(temperature=None, max_new_tokens=None, seed=None)
        self.messages: list[dict[str, Any]] = []

    def _next(self) -> str:
        gen = self.model.generate([dict(m) for m in self.messages], None, self.settings)
        text = gen.text.strip()
        self.messages.append({"role": "assistant", "content": text})
        return text

    def reset(self, instruction: str) -> str:
        self.messages = [{"role": "system", "content": self.rules.system_prompt(instruction)},
                         {"role": "user", "content": self.rules.first_agent_message}]
        return self._next()

    def reply(self, agent_text: str) -> str:
        self.messages.append({"role": "user", "content": agent_text})
        return self._next()

    def is_stop(self, text: str) -> bool:
        return self.rules.stop_token in text


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

    def is_stop(self, text: str) -> bool:
        return STOP in text
