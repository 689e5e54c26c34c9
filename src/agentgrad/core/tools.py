"""Tools an agent may call: a JSON schema for the model plus a Python callable.

A tool never raises into the agent loop: unknown tools, bad arguments and exceptions come back
to the model as text starting with ``Error:``, as tool-use benchmarks expect.
"""

from __future__ import annotations

import inspect
import json
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


@dataclass
class Tool:
    """A callable offered to a model. ``parameters`` is a JSON schema of type ``object``."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    ends_episode: bool = False  # e.g. a transfer to a human agent
    meta: dict[str, Any] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        """The OpenAI / Hugging Face ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def check_arguments(self, arguments: Any) -> str | None:
        """Return an error text for arguments that do not fit the schema's object shape."""
        if not isinstance(arguments, dict):
            return f"Error: arguments of {self.name} must be a JSON object, got {type(arguments).__name__}"
        props = self.parameters.get("properties", {})
        missing = [k for k in self.parameters.get("required", []) if k not in arguments]
        if missing:
            return f"Error: {self.name} is missing required argument(s): {', '.join(missing)}"
        if props and self.parameters.get("additionalProperties", True) is False:
            extra = [k for k in arguments if k not in props]
            if extra:
                return f"Error: {self.name} got unexpected argument(s): {', '.join(extra)}"
        return None

    def run(self, arguments: Any) -> str:
        """Execute with ``arguments``; any failure becomes an ``Error: ...`` text."""
        problem = self.check_arguments(arguments)
        if problem:
            return problem
        try:
            result = self.fn(**arguments)
            if inspect.isawaitable(result):
                raise TypeError("async tools must be run with arun()")
        except Exception as e:  # a tool's failure is information for the model, not a crash
            return f"Error: {type(e).__name__}: {e}"
        return to_text(result)

    async def arun(self, arguments: Any) -> str:
        problem = self.check_arguments(arguments)
        if problem:
            return problem
        try:
            result = self.fn(**arguments)
            if inspect.isawaitable(result):
                result = await result
        except Exception as e:
            return f"Error: {type(e).__name__}: {e}"
        return to_text(result)

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None, description: str | None = None) -> "Tool":
        """Build a tool from a typed function; its docstring's first paragraph is the description."""
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
        props: dict[str, Any] = {}
        required: list[str] = []
        for pname, p in sig.parameters.items():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            ann = hints.get(pname, str)
            origin = typing.get_origin(ann) or ann
            props[pname] = {"type": _JSON_TYPES.get(origin, "string")}
            if p.default is inspect.Parameter.empty:
                required.append(pname)
        doc = inspect.getdoc(fn) or ""
        return cls(
            name=name or fn.__name__,
            description=description or doc.split("\n\n")[0].strip(),
            parameters={"type": "object", "properties": props, "required": required},
            fn=fn,
        )


def to_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)
