"""Dialogue states in the standard evaluator's form, and the turn-level rules it applies around them.

The standard evaluator (Tomiinek/MultiWOZ_Evaluation) reads a turn's state as
``{domain: {slot: value}}`` and normalises it before anything else:

- slot names are lower-cased and lose their spaces (``"arrive by"`` -> ``arriveby``); ``arriveby``
  and ``arrive`` are one slot, and so are ``leaveat`` and ``leave`` (named here as the database's
  columns, ``arriveby`` and ``leaveat``);
- values are normalised by :func:`~.standard.standard_value`, and none is dropped: an unset
  spelling such as "not mentioned" stays in the state, counts as a change of its domain when the
  active domains are estimated, and constrains nothing in the database.

A turn's active domains are the file's when every turn of the file has them; otherwise they are
estimated from the changes of the states (:func:`~.evaluator.active_domains`). The evaluator's
``add_slot_domains.py`` takes them from the placeholders' domain prefixes instead
(:func:`slot_domains`). Without predicted states it reads MultiWOZ 2.2's gold states (without
"dontcare" values); the data directory holds other labels, given in the same form by
:func:`gold_state`.
"""

from __future__ import annotations

import re
from typing import Any

from agentgrad.benchmarks.multiwoz.standard import standard_value
from agentgrad.errors import ConfigError

SLOT_DOMAINS = ("restaurant", "hotel", "attraction", "train", "taxi", "police", "hospital")
_SAME_SLOT = {"arrive": "arriveby", "leave": "leaveat"}


def standard_slot(name: str) -> str:
    """A slot name as the standard evaluator reads it (``"Arrive By"`` -> ``arriveby``)."""
    s = name.lower().replace(" ", "")
    return _SAME_SLOT.get(s, s)


def standard_state(state: Any, where: str) -> dict[str, dict[str, str]]:
    """A ``{domain: {slot: value}}`` state, checked and normalised as the standard evaluator normalises it."""
    if not isinstance(state, dict) or not all(isinstance(v, dict) for v in state.values()):
        raise ConfigError(f"{where}: 'state' must map each domain to an object of slot values")
    out: dict[str, dict[str, str]] = {}
    for domain, slots in state.items():
        normalised = {}
        for slot, value in slots.items():
            if not isinstance(value, str):
                raise ConfigError(f"{where}: the value of {domain}-{slot} must be a string, got {value!r}")
            name = standard_slot(str(slot))
            normalised[name] = standard_value(name, value)
        out[str(domain)] = normalised
    return out


def nested_state(flat: dict[str, str]) -> dict[str, dict[str, str]]:
    """Our flat state (``{"hotel-book day": "monday"}``) in the standard evaluator's normalised form."""
    nested: dict[str, dict[str, str]] = {}
    for key, value in flat.items():
        domain, _, slot = key.partition("-")
        nested.setdefault(domain, {})[slot] = value
    return standard_state(nested, "state")


def gold_state(flat: dict[str, str]) -> dict[str, dict[str, str]]:
    """A gold flat state in that form, without "dontcare" values (as the evaluator reads 2.2's gold states)."""
    return nested_state({k: v for k, v in flat.items() if v != "dontcare"})


def predicted_state(state: Any, where: str) -> dict[str, dict[str, str]]:
    """A predicted state in either shape (``{domain: {slot: value}}`` or our flat ``{"domain-slot": value}``)."""
    if isinstance(state, dict) and state and all(isinstance(k, str) and "-" in k and isinstance(v, str)
                                                 for k, v in state.items()):
        return nested_state(state)
    return standard_state(state, where)


def slot_domains(response: str) -> list[str]:
    """The domains a reply's placeholders name (``[hotel_name]`` -> hotel; ``[value_name]`` names none),
    as the standard evaluator's ``add_slot_domains.py`` finds them."""
    named = {m.split("_")[0] for m in re.findall(r"\[([\w\s]+)\]", response.lower())}
    return [d for d in SLOT_DOMAINS if d in named]


def file_domains(turns: list[dict[str, Any]], where: str) -> list[list[str]]:
    """The ``active_domains`` of each turn, checked to be lists of domain names."""
    out = []
    for i, t in enumerate(turns):
        doms = t["active_domains"]
        if not isinstance(doms, list) or not all(isinstance(x, str) for x in doms):
            raise ConfigError(f"{where} turn {i}: 'active_domains' must be a list of domain names, got {doms!r}")
        out.append(list(doms))
    return out
