"""The corruptions injected into a call's output, one function per kind (``KINDS``).

Each takes the call's clean output, the example (``record``, ``answer``, ``field``) and the
plausible wrong values of its field, and returns the text the call is made to have said:

- ``wrong_value``: a plausible wrong value: another record's value of the same field (one of
  ``wrong_values``, chosen by ``seed``). Every occurrence of the expected answer in the clean output
  (whole words, any case) is replaced by it; a clean output that does not name the answer becomes
  the note ``"The {field} is {wrong}."`` (``"The city is Oslo."``).
- ``dropped``: the fact is removed: the output becomes ``"The record does not give the {field}."``
  (``"The record does not give the favourite colour."``).
- ``broken_instruction``: the format is broken: instead of the value only, the output reports every
  field of the record, name included, as the record writes them (``"Name: Kira. City: Lyon. Pet:
  cat. Favourite colour: blue."``): the answer is there, among values that must not be in the
  final answer.
"""

from __future__ import annotations

import random
import re
from typing import Any

from agentgrad.benchmarks.ablation.cases import FIELDS
from agentgrad.errors import ConfigError

KINDS = ("wrong_value", "dropped", "broken_instruction")


def field_values(examples: list[dict[str, Any]], field: str) -> list[str]:
    """Every value of ``field`` that the records of ``examples`` hold, sorted, without repeats."""
    pattern = re.compile(re.escape(FIELDS[field]) + r": ([^.]+)\.")
    return sorted({m.group(1).strip() for ex in examples for m in pattern.finditer(ex["record"])})


def pick_wrong(example: dict[str, Any], wrong_values: list[str], seed: int) -> str:
    """The wrong value of one injection: a value of ``wrong_values`` other than the answer and the
    record's own values, the same for the same (seed, example) on every machine."""
    own = {v.lower() for f in FIELDS for v in field_values([example], f)} | {str(example["answer"]).lower()}
    pool = sorted(v for v in wrong_values if v.lower() not in own)
    if not pool:
        raise ConfigError(f"no wrong value of field {example['field']!r} for example {example.get('id')!r}")
    return random.Random(f"{seed}:{example.get('id', '')}").choice(pool)


def _label(field: str) -> str:
    return FIELDS[field].lower()


def wrong_value(clean: str, example: dict[str, Any], wrong: str) -> str:
    pattern = re.compile(r"\b" + re.escape(str(example["answer"])) + r"\b", re.IGNORECASE)
    if pattern.search(clean):
        return pattern.sub(wrong, clean)
    return f"The {_label(example['field'])} is {wrong}."


def dropped(clean: str, example: dict[str, Any]) -> str:
    return f"The record does not give the {_label(example['field'])}."


def broken_instruction(clean: str, example: dict[str, Any]) -> str:
    return str(example["record"]).strip()


def corrupt(kind: str, clean: str, example: dict[str, Any], wrong_values: list[str], seed: int) -> str:
    """The corrupted output of kind ``kind`` (see the module docstring)."""
    if kind == "wrong_value":
        return wrong_value(clean, example, pick_wrong(example, wrong_values, seed))
    if kind == "dropped":
        return dropped(clean, example)
    if kind == "broken_instruction":
        return broken_instruction(clean, example)
    raise ConfigError(f"unknown injection kind {kind!r}; valid: {', '.join(KINDS)}")
