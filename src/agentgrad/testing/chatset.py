"""A set of failed chat traces with a known fault in each, and their expected answers: fixtures for the
tests and the cost benchmark of blaming a set (``agentgrad blame FILE --expected FILE``).

Trace ``i`` (id ``t{i}``) is a planner, a researcher with a ``lookup`` tool, and a writer; its fault is
``FAULTS[i % 4]``: none (the answer is right), the researcher (it misstates the tool's figure), the
tool (it returns a wrong figure the researcher repeats) or the planner (it invents the figure the
others repeat). The prompt to repair is :data:`REPAIR` of the fault.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FAULTS = (None, "researcher", "tool", "planner")
REPAIR = {"researcher": "researcher", "tool": "researcher", "planner": "planner"}


def conv(i: int, fault: str | None) -> dict[str, Any]:
    """One conversation; the wrong figure first appears in the output of the agent (or tool) named by
    ``fault``, and every agent after it repeats it."""
    right, wrong = f"{1000 + i:,}", f"{90000 + i:,}"
    fig = right if fault is None else wrong
    plan = (f"Ask the researcher to confirm that City{i} has {wrong} inhabitants." if fault == "planner"
            else f"Ask the researcher about City{i}.")
    return {"id": f"t{i}", "messages": [
        {"role": "system", "name": "planner", "content": "You plan."},
        {"role": "user", "content": f"What is the population of City{i}?"},
        {"role": "assistant", "name": "planner", "content": plan},
        {"role": "assistant", "name": "researcher", "content": "",
         "tool_calls": [{"id": f"c{i}", "function": {"name": "lookup", "arguments": json.dumps({"city": f"City{i}"})}}]},
        {"role": "tool", "name": "lookup", "tool_call_id": f"c{i}",
         "content": f"City{i}: {wrong if fault == 'tool' else right} inhabitants."},
        {"role": "assistant", "name": "researcher", "content": f"City{i} has {fig} inhabitants."},
        {"role": "assistant", "name": "writer", "content": f"The answer: {fig} people live in City{i}."}]}


def write_set(root: Path, n: int = 12, by_input: bool = False) -> tuple[Path, Path]:
    """``root/chats.jsonl`` (``n`` traces) and ``root/expected.jsonl`` (their answers, by trace id or,
    with ``by_input``, by the user's question)."""
    src, exp = Path(root) / "chats.jsonl", Path(root) / "expected.jsonl"
    src.write_text("".join(json.dumps(conv(i, FAULTS[i % 4])) + "\n" for i in range(n)), encoding="utf-8")
    key = (lambda i: {"input": f"What is the population of City{i}?"}) if by_input else (lambda i: {"trace": f"t{i}"})
    exp.write_text("".join(json.dumps(key(i) | {"expected": f"{1000 + i:,}"}) + "\n" for i in range(n)),
                   encoding="utf-8")
    return src, exp
