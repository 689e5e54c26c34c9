"""The MultiWOZ venue databases and one query function, shared by the tools and the evaluator.

Constraints use the state's slot names (``area``, ``food``, ``leaveat``, ...). ``leaveat`` keeps
trains leaving at or after the time, ``arriveby`` those arriving at or before it, compared as times;
a database value of "?" matches anything. Two rules (``VenueDB.query(rule=...)``):

- ``exact`` (the tools the agents call): values are canonicalised (case, aliases, "the ", yes/no,
  times) and must then be equal; "dontcare" and unset values constrain nothing;
- ``standard`` (the Inform/Success evaluator): the standard evaluator's normalisation and fuzzy
  matching (:mod:`.standard`), so that figures are comparable with published ones.

The attraction database spells one type "mutliple sports"; it is corrected on load, as the
standard evaluator's copy of the database is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from agentgrad.benchmarks.data import benchmark_dir
from agentgrad.benchmarks.multiwoz.data import canonical_time, minutes
from agentgrad.benchmarks.multiwoz.standard import (DONT_CARE, FOOD_ALIASES, FUZZY_RATIO, TYPE_ALIASES, partial_ratio,
                                                    standard_minutes, standard_name, standard_value)
from agentgrad.errors import ConfigError

VENUE_DOMAINS = ("restaurant", "hotel", "attraction", "train")
FUZZY = {"hotel": {"name"}, "attraction": {"name"}, "restaurant": {"name", "food"}, "train": {"departure", "destination"}}
_COLUMN = {"arriveBy": "arriveby", "leaveAt": "leaveat", "trainID": "trainid", "entrance fee": "entrancefee"}

def canonical(slot: str, value: str) -> str:
    """A constraint value in the database's form (names, types, yes/no, times)."""
    v = str(value).strip().lower()
    if slot in ("name", "departure", "destination"):
        return standard_name(v)
    if slot == "type":
        return TYPE_ALIASES.get(v, v)
    if slot == "food":
        return FOOD_ALIASES.get(v, v)
    if slot in ("parking", "internet"):
        return {"free": "yes", "none": "no"}.get(v, v)
    if slot in ("leaveat", "arriveby"):
        return canonical_time(v) or v
    return v


class VenueDB:
    """Restaurant, hotel, attraction and train records, read once from ``multiwoz/db``."""

    def __init__(self, data: str | Path | None = None):
        root = benchmark_dir("multiwoz", data) / "db"
        self.records: dict[str, list[dict[str, Any]]] = {}
        for d in VENUE_DOMAINS:
            path = root / f"{d}_db.json"
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as e:
                raise ConfigError(f"cannot read {path}: {e}") from None
            self.records[d] = [{_COLUMN.get(k, k): v for k, v in r.items() if k != "location"} for r in raw]
        for r in self.records["attraction"]:  # the data's misspelling; the standard evaluator's copy is right
            if r.get("type") == "mutliple sports":
                r["type"] = "multiple sports"
        self.names = {d: sorted({r["name"].lower() for r in self.records[d]}, key=len, reverse=True)
                      for d in ("restaurant", "hotel", "attraction")}
        # names safe to delexicalise wherever they occur (several words, not everyday words like "ask")
        self.distinct_names = {n for names in self.names.values() for n in names if " " in n and len(n) >= 8}

    def query(self, domain: str, constraints: dict[str, str], rule: str = "exact") -> list[dict[str, Any]]:
        """Records of ``domain`` meeting every constraint (unknown keys constrain nothing), by ``rule``."""
        if domain not in self.records:
            return []
        if rule not in ("exact", "standard"):
            raise ValueError(f"rule must be exact or standard, got {rule!r}")
        keys = set(self.records[domain][0])
        if rule == "standard":
            wanted = {k: standard_value(k, str(v)) for k, v in constraints.items()
                      if k in keys and v is not None and str(v) not in DONT_CARE}
            fuzzy = FUZZY.get(domain, ())  # the fuzzy comparisons last: a cheap mismatch decides most records
            wanted = dict(sorted(wanted.items(), key=lambda kv: kv[0] in fuzzy))
            return [r for r in self.records[domain] if all(self._standard_match(domain, k, v, r[k])
                                                           for k, v in wanted.items())]
        wanted = {k: canonical(k, v) for k, v in constraints.items()
                  if k in keys and v is not None and str(v).strip().lower() not in ("dontcare", "")}
        return [r for r in self.records[domain] if all(self._exact_match(k, v, r[k]) for k, v in wanted.items())]

    @staticmethod
    def _exact_match(key: str, want: str, have: Any) -> bool:
        have = str(have).lower()
        if have == "?":
            return True
        if key in ("leaveat", "arriveby"):
            w, h = minutes(want), minutes(have)
            if w is None or h is None:
                return False
            return h >= w if key == "leaveat" else h <= w
        if key in ("name", "departure", "destination"):
            return _bare(have) == _bare(want)
        return have == want

    @staticmethod
    def _standard_match(domain: str, key: str, want: str, have: Any) -> bool:
        have = str(have)
        if have == "?":
            return True
        if key in ("leaveat", "arriveby"):
            h, w = standard_minutes(have), standard_minutes(want)
            return h >= w if key == "leaveat" else h <= w
        if key in FUZZY.get(domain, ()):
            return partial_ratio(have, want) >= FUZZY_RATIO
        return have == want

    def ids(self, domain: str, constraints: dict[str, str]) -> list[str]:
        """Identifiers of the venues matching by the standard evaluator's rule (train ids for trains)."""
        key = "trainid" if domain == "train" else "id"
        return [str(r[key]) for r in self.query(domain, constraints, rule="standard")]

    def find_name(self, domain: str, name: str) -> dict[str, Any] | None:
        """The venue called ``name``: equal after canonicalisation (case, aliases, a leading "the")."""
        want = _bare(canonical("name", name))
        return next((r for r in self.records.get(domain, []) if _bare(r["name"].lower()) == want), None)


def _bare(name: str) -> str:
    """A venue name without a leading "the" and with single spaces."""
    return re.sub(r"^the ", "", " ".join(name.split()))
