"""MultiWOZ query and booking tools. Their arguments are the dialogue state.

Query tools (restaurant, hotel, attraction, train) take constraints from the slot ontology and
return the number of matches and the first few records. Booking tools (restaurant, hotel, train,
taxi) validate their required fields and return a reference number; the taxi returns a car and a
phone number. Everything is deterministic under the episode's seed, and every error goes back to
the model as text ("Error: ...").
"""

from __future__ import annotations

import json
import random
import string
from typing import Any, Callable

from agentgrad.benchmarks.multiwoz.data import canonical_time
from agentgrad.benchmarks.multiwoz.db import VenueDB
from agentgrad.core.tools import Tool

DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
AREAS = ["centre", "north", "south", "east", "west"]
PRICES = ["cheap", "moderate", "expensive"]
CHOICES: dict[str, list[str]] = {  # categorical slots: the values of the ontology ("dontcare" also allowed)
    "area": AREAS, "pricerange": PRICES, "day": DAYS, "internet": ["yes", "no"], "parking": ["yes", "no"],
    "stars": ["0", "1", "2", "3", "4", "5"], "hotel.type": ["hotel", "guesthouse"],
}
MAX_RESULTS = 5
SHOW = {"restaurant": ["name", "food", "pricerange", "area", "address", "postcode", "phone"],
        "hotel": ["name", "type", "pricerange", "area", "stars", "internet", "parking", "address", "postcode", "phone"],
        "attraction": ["name", "type", "area", "entrancefee", "address", "postcode", "phone"],
        "train": ["trainid", "departure", "destination", "day", "leaveat", "arriveby", "price", "duration"]}
TAXI_COLORS = ["black", "white", "red", "yellow", "blue", "grey"]
TAXI_TYPES = ["toyota", "skoda", "bmw", "honda", "ford", "audi", "lexus", "volvo", "volkswagen", "tesla"]

# tool -> (domain, {argument: state slot}, required arguments, description)
SPECS: dict[str, tuple[str, dict[str, str], list[str], str]] = {
    "find_restaurant": ("restaurant", {"name": "name", "food": "food", "pricerange": "pricerange", "area": "area"}, [],
                        "Search restaurants by the customer's constraints."),
    "book_restaurant": ("restaurant", {"name": "name", "people": "book people", "day": "book day",
                                       "time": "book time"}, ["name", "people", "day", "time"],
                        "Book a table at a restaurant."),
    "find_hotel": ("hotel", {"name": "name", "type": "type", "pricerange": "pricerange", "area": "area",
                             "stars": "stars", "internet": "internet", "parking": "parking"}, [],
                   "Search hotels and guesthouses by the customer's constraints."),
    "book_hotel": ("hotel", {"name": "name", "people": "book people", "day": "book day", "stay": "book stay"},
                   ["name", "people", "day", "stay"], "Book rooms at a hotel (stay: number of nights)."),
    "find_attraction": ("attraction", {"name": "name", "type": "type", "area": "area"}, [],
                        "Search attractions by the customer's constraints."),
    "find_train": ("train", {"departure": "departure", "destination": "destination", "day": "day",
                             "leaveat": "leaveat", "arriveby": "arriveby"}, [],
                   "Search trains (leaveat: leaving at or after HH:MM; arriveby: arriving by HH:MM)."),
    "book_train": ("train", {"train_id": "", "people": "book people"}, ["train_id", "people"],
                   "Book seats on a train found with find_train."),
    "book_taxi": ("taxi", {"departure": "departure", "destination": "destination", "leaveat": "leaveat",
                           "arriveby": "arriveby"}, ["departure", "destination"],
                  "Book a taxi; give leaveat (HH:MM) or arriveby (HH:MM)."),
}
DOMAIN_TOOLS = {d: [t for t, s in SPECS.items() if s[0] == d] for d in ("restaurant", "hotel", "attraction", "train",
                                                                          "taxi")}


def state_updates(tool: str, arguments: dict[str, Any]) -> dict[str, str]:
    """The ``{"domain-slot": value}`` a tool call's arguments write into the dialogue state."""
    if tool not in SPECS:
        return {}
    domain, slots, _, _ = SPECS[tool]
    out = {}
    for arg, value in arguments.items():
        slot = slots.get(arg)
        if slot and value is not None and str(value).strip():
            out[f"{domain}-{slot}"] = str(value).strip().lower()
    return out


def schema(tool: str) -> dict[str, Any]:
    domain, slots, required, desc = SPECS[tool]
    props = {}
    for arg in slots:
        p: dict[str, Any] = {"type": "string"}
        choices = CHOICES.get(f"{domain}.{arg}") or CHOICES.get(arg)
        if choices and not tool.startswith("book_"):
            p["enum"] = [*choices, "dontcare"]
        elif arg == "day":
            p["enum"] = DAYS
        if arg in ("people", "stay"):
            p = {"type": "string", "description": "a number"}
        if arg in ("leaveat", "arriveby", "time"):
            p["description"] = "a time, HH:MM"
        props[arg] = p
    return {"type": "object", "properties": props, "required": required}


class Bookings:
    """One dialogue's tools: queries over the database, bookings with seeded reference numbers."""

    def __init__(self, db: VenueDB, seed: int = 0):
        self.db = db
        self.rng = random.Random(seed)
        self.made: list[dict[str, Any]] = []  # every successful booking
        self.queries: list[dict[str, Any]] = []  # every query: tool, arguments, count
        self.seen: dict[str, set[str]] = {}  # placeholder -> values the tools returned (for delexicalisation)

    def _saw(self, kind: str, value: Any) -> None:
        if value:
            self.seen.setdefault(kind, set()).add(str(value))

    # --- helpers ------------------------------------------------------------------------------
    def _reference(self) -> str:
        return "".join(self.rng.choice(string.ascii_uppercase + string.digits) for _ in range(8))

    @staticmethod
    def _check(domain: str, args: dict[str, Any]) -> str | None:
        for arg, value in args.items():
            v = str(value).strip().lower()
            choices = CHOICES.get(f"{domain}.{arg}") or CHOICES.get(arg)
            if choices and v not in choices and v != "dontcare":
                return f"Error: {arg} must be one of {', '.join(choices)} (or dontcare), not {value!r}"
            if arg in ("leaveat", "arriveby", "time") and v != "dontcare" and canonical_time(v) is None:
                return f"Error: {arg} must be a time like 14:30, not {value!r}"
        return None

    @staticmethod
    def _count(arg: str, value: Any, low: int = 1, high: int = 20) -> int | str:
        try:
            n = int(str(value).strip())
        except ValueError:
            return f"Error: {arg} must be a number, not {value!r}"
        return n if low <= n <= high else f"Error: {arg} must be between {low} and {high}"

    def _missing(self, tool: str, args: dict[str, Any]) -> str | None:
        unknown = sorted(set(args) - set(SPECS[tool][1]))
        if unknown:
            return f"Error: {tool} has no argument {unknown[0]!r}; valid: {', '.join(SPECS[tool][1])}"
        missing = [a for a in SPECS[tool][2] if not str(args.get(a) or "").strip()]
        if missing:
            return f"Error: {tool} needs {', '.join(missing)}"
        return None

    # --- the tools ----------------------------------------------------------------------------
    def find(self, tool: str, args: dict[str, Any]) -> str:
        domain = SPECS[tool][0]
        err = self._missing(tool, args) or self._check(domain, args)
        if err:
            return err
        found = self.db.query(domain, {k: str(v) for k, v in args.items() if v is not None})
        shown = [{k: r[k] for k in SHOW[domain] if k in r} for r in found[:MAX_RESULTS]]
        self.queries.append({"tool": tool, "arguments": dict(args), "count": len(found)})
        for r in shown:
            for key, kind in (("name", "name"), ("phone", "phone"), ("address", "address"), ("postcode", "postcode"),
                              ("trainid", "train_id")):
                self._saw(kind, r.get(key))
        return json.dumps({"count": len(found), "results": shown})

    def book(self, tool: str, args: dict[str, Any]) -> str:
        domain = SPECS[tool][0]
        err = self._missing(tool, args) or self._check(domain, {k: v for k, v in args.items() if k != "train_id"})
        if err:
            return err
        result: dict[str, Any]
        if domain in ("restaurant", "hotel"):
            venue = self.db.find_name(domain, str(args["name"]))
            if venue is None:
                return f"Error: no {domain} called {args['name']!r}"
            people = self._count("people", args["people"])
            if isinstance(people, str):
                return people
            if domain == "hotel":
                stay = self._count("stay", args["stay"], 1, 30)
                if isinstance(stay, str):
                    return stay
            result = {"booked": True, "name": venue["name"], "reference": self._reference()}
        elif domain == "train":
            tid = str(args["train_id"]).strip().upper()
            train = next((r for r in self.db.records["train"] if r["trainid"].upper() == tid), None)
            if train is None:
                return f"Error: no train {args['train_id']!r}"
            people = self._count("people", args["people"])
            if isinstance(people, str):
                return people
            price = float(str(train["price"]).split()[0]) * people
            result = {"booked": True, "train_id": train["trainid"], "reference": self._reference(),
                      "total": f"{price:.2f} GBP"}
        else:  # taxi
            if not str(args.get("leaveat") or "").strip() and not str(args.get("arriveby") or "").strip():
                return "Error: book_taxi needs leaveat or arriveby"
            result = {"booked": True, "car": f"{self.rng.choice(TAXI_COLORS)} {self.rng.choice(TAXI_TYPES)}",
                      "phone": "07" + "".join(self.rng.choice(string.digits) for _ in range(9))}
        self.made.append({"tool": tool, "arguments": dict(args), **result})
        for key, kind in (("reference", "reference"), ("name", "name"), ("phone", "phone"), ("train_id", "train_id")):
            self._saw(kind, result.get(key))
        return json.dumps(result)

    def run(self, tool: str, args: dict[str, Any]) -> str:
        if tool not in SPECS:
            return f"Error: unknown tool {tool!r}"
        return self.find(tool, args) if tool.startswith("find_") else self.book(tool, args)


def make_tools(names: list[str], current: Callable[[], Bookings]) -> list[Tool]:
    """Agent tools acting on the dialogue being run (``current()`` gives its :class:`Bookings`)."""
    out = []
    for name in names:
        def fn(_name: str = name, **kw: Any) -> str:
            return current().run(_name, kw)

        out.append(Tool(name, SPECS[name][3], schema(name), fn))
    return out

