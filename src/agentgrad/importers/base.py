"""What every importer returns: the traces and the records that could not be read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgrad.core.files import read_text
from agentgrad.core.trace import ToolCall, Trace

FORMATS = ("chat", "otel", "openinference", "whowhen")
WHOWHEN_SUBSETS = {"hand": "Hand-Crafted", "algorithm": "Algorithm-Generated"}


@dataclass
class ImportResult:
    traces: list[Trace] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # "where: what is wrong", one per record not imported


class BadRecord(Exception):
    """A record that cannot be imported (the message names the field)."""


def text_field(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRecord(f"{what} must be a string")
    return value


def tool_calls(items: Any, i: int) -> list[ToolCall]:
    """The tool calls of message ``i``: OpenAI's ``tool_calls`` (``{"id", "function": {"name", "arguments"}}``,
    the arguments a JSON string or an object) or AutoGen's ``FunctionCall`` list (``{"id", "name",
    "arguments"}``); a call without an id gets ``call_I_J``."""
    out = []
    for j, c in enumerate(items or []):
        try:
            f = c.get("function", c)
            args = f.get("arguments", {})
            out.append(ToolCall(name=str(f["name"]), arguments=json.loads(args) if isinstance(args, str) else dict(args),
                                id=str(c.get("id") or f"call_{i}_{j}")))
        except (AttributeError, KeyError, TypeError, ValueError):
            raise BadRecord(f"message {i} tool call {j} needs a function name and JSON arguments") from None
    return out


def read_user_text(path: str | Path, expected: str) -> str:
    """The text of a file a user gave, or a one-line :class:`ConfigError` that says what the file is
    (missing, a folder, empty, binary, not UTF-8) and what was ``expected`` ("chat JSONL", ...):
    :func:`agentgrad.core.files.read_text`, the one reader of a user's file."""
    return read_text(path, "", expected=expected)
