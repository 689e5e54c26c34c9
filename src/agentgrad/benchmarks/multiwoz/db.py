"""The MultiWOZ venue databases and one query function, shared by the tools and the evaluator.

Constraints use the state's slot names (``area``, ``food``, ``leaveat``, ...). "dontcare" and unset
values constrain nothing; names (and restaurant food, train departure/destination) match fuzzily
(partial ratio >= 90 after canonicalisation); ``leaveat`` keeps trains leaving at or after the time,
``arriveby`` those arriving at or before it, compared as times; everything else must be equal. A
database value of "?" matches anything (as in the standard evaluator).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rapidfuzz import fuzz

from agentgrad.benchmarks.data import benchmark_dir
from agentgrad.benchmarks.multiwoz.data import canonical_time, minutes
from agentgrad.errors import ConfigError

VENUE_DOMAINS = ("restaurant", "hotel", "attraction", "train")
FUZZY = {"hotel": {"name"}, "attraction": {"name"}, "restaurant": {"name", "food"}, "train": {"departure", "destination"}}
_COLUMN = {"arriveBy": "arriveby", "leaveAt": "leaveat", "trainID": "trainid", "entrance fee": "entrancefee"}

# Spellings of venue names and values seen in the dialogues, and the database's form of each.
_NAME_ALIASES = {
    "hotel du vin bistro": "hotel du vin and bistro", "the river bar and grill": "the river bar steakhouse and grill",
    "nando's": "nandos", "caffee uno": "caffe uno", "cafe uno": "caffe uno", "restaurant 2 two": "restaurant two two",
    "restaurant 17": "restaurant one seven", "lime house": "limehouse", "cityrooms": "cityroomz",
    "huntingdon hotel": "huntingdon marriott hotel", "university hotel": "university arms hotel",
    "arbury guesthouse": "arbury lodge guesthouse", "bridge house": "bridge guest house",
    "broughton gallery": "broughton house gallery", "scudamores punt co": "scudamores punting co",
    "cambridge botanic gardens": "cambridge university botanic gardens", "the junction": "junction theatre",
    "christ college": "christ's college", "christs": "christ's college", "parkside pools": "parkside swimming pool",
    "history of science museum": "whipple museum of the history of science",
}
_FOOD_ALIASES = {"sea food": "seafood", "portugese": "portuguese", "brazilian": "portuguese", "english": "british",
                 "modern american": "north american", "americas": "north american", "intalian": "italian",
                 "italain": "italian", "asian or oriental": "asian", "australasian": "australian",
                 "gastropod": "gastropub", "brutish": "british", "bristish": "british", "europeon": "european",
                 "eriterean": "mediterranean"}
_TYPE_ALIASES = {"guest house": "guesthouse", "swimming pool": "swimmingpool", "night club": "nightclub",
                 "mutliple sports": "multiple sports"}


def canonical(slot: str, value: str) -> str:
    """A constraint value in the database's form (names, types, yes/no, times)."""
    v = str(value).strip().lower()
    if slot in ("name", "departure", "destination"):
        v = v.replace(" & ", " and ").replace("&", " and ").replace(" '", "'")
        return _NAME_ALIASES.get(v, v)
    if slot == "type":
        return _TYPE_ALIASES.get(v, v)
    if slot == "food":
        return _FOOD_ALIASES.get(v, v)
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
        self.names = {d: sorted({r["name"].lower() for r in self.records[d]}, key=len, reverse=True)
                      for d in ("restaurant", "hotel", "attraction")}
        # names safe to delexicalise wherever they occur (several words, not everyday words like "ask")
        self.distinct_names = {n for names in self.names.values() for n in names if " " in n and len(n) >= 8}

    def query(self, domain: str, constraints: dict[str, str]) -> list[dict[str, Any]]:
        """Records of ``domain`` meeting every constraint (unknown keys constrain nothing)."""
        if domain not in self.records:
            return []
        keys = set(self.records[domain][0])
        wanted = {}
        for k, v in constraints.items():
            if k in keys and v is not None and str(v).strip().lower() not in ("dontcare", ""):
                wanted[k] = canonical(k, v)
        out = []
        for r in self.records[domain]:
            if all(self._match(domain, k, v, r[k]) for k, v in wanted.items()):
                out.append(r)
        return out

    @staticmethod
    def _match(domain: str, key: str, want: str, have: Any) -> bool:
        have = str(have).lower()
        if have == "?":
            return True
        if key in ("leaveat", "arriveby"):
            w, h = minutes(want), minutes(have)
            if w is None or h is None:
                return False
            return h >= w if key == "leaveat" else h <= w
        if key in FUZZY.get(domain, ()):
            return fuzz.partial_ratio(have, want) >= 90
        return have == want

    def ids(self, domain: str, constraints: dict[str, str]) -> list[str]:
        """Identifiers of the matching venues (train ids for trains), as the evaluator compares them."""
        key = "trainid" if domain == "train" else "id"
        return [str(r[key]) for r in self.query(domain, constraints)]

    def find_name(self, domain: str, name: str) -> dict[str, Any] | None:
        """The venue called ``name`` (exact after canonicalisation, else the best fuzzy match >= 90)."""
        want = canonical("name", name)
        best, score = None, 0.0
        for r in self.records.get(domain, []):
            s = 100.0 if r["name"].lower() == want else fuzz.ratio(r["name"].lower(), want)
            if s > score:
                best, score = r, s
        return best if score >= 90 else None
