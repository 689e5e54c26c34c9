"""The standard MultiWOZ evaluator's matching rules (Tomiinek/MultiWOZ_Evaluation), written here.

Inform and Success depend on which venues a state "matches" in the database, so to give figures
comparable with published ones the evaluator must match exactly as the standard one does:

- values are normalised as it normalises them (:func:`standard_value`): venue names lower-cased,
  ``&`` spelled ``and`` and its alias table applied; attraction types, restaurant food and the
  yes/no of parking and internet mapped to the database's words; times read by its rules, where a
  time that does not parse counts as midnight (:func:`standard_minutes`);
- "don't care" values in any of its spellings constrain nothing;
- names, restaurant food and train departure/destination match when fuzzywuzzy's ``partial_ratio``
  (with python-Levenshtein, as the standard evaluator installs it) is at least 90
  (:func:`partial_ratio`: the same algorithm, on rapidfuzz's edit operations); other columns must
  be equal; a database value of ``?`` matches anything.

Replies are read as it reads them (:func:`standard_response`): lower-cased, and each placeholder
(``[value_name]``, ``[restaurant_phone]``, ``[train_id]``, ``[ref]``, ...) replaced by the token of
its slot, which Inform and Success look for as a substring (``NAME``, ``PHONE``, ``ADDRESS``,
``POST``, ``REFERENCE``, ``TRAINID``).

The tools the agents call do not use the fuzzy rule (it confuses "yu garden" with "curry garden"):
see :meth:`~agentgrad.benchmarks.multiwoz.db.VenueDB.query`.
"""

from __future__ import annotations

import functools
import re

DONT_CARE = {"dontcare", "not mentioned", "don't care", "dont care", "do n't care", "do not care"}
FUZZY_RATIO = 90

# the standard evaluator's name aliases (it applies every domain's to every name)
NAME_ALIASES = {
    # restaurants
    "hotel du vin bistro": "hotel du vin and bistro", "the river bar and grill": "the river bar steakhouse and grill",
    "nando's": "nandos", "city center b and b": "city center north b and b", "acorn house": "acorn guest house",
    "caffee uno": "caffe uno", "cafe uno": "caffe uno", "rosa's": "rosas bed and breakfast",
    "restaurant called two two": "restaurant two two", "restaurant 2 two": "restaurant two two",
    "restaurant two 2": "restaurant two two", "restaurant 2 2": "restaurant two two",
    "restaurant 1 7": "restaurant one seven", "restaurant 17": "restaurant one seven",
    # hotels
    "lime house": "limehouse", "cityrooms": "cityroomz", "whale of time": "whale of a time",
    "huntingdon hotel": "huntingdon marriott hotel",
    "holiday inn exlpress, cambridge": "express by holiday inn cambridge", "university hotel": "university arms hotel",
    "arbury guesthouse and lodge": "arbury lodge guesthouse", "bridge house": "bridge guest house",
    "arbury guesthouse": "arbury lodge guesthouse", "nandos in the city centre": "nandos city centre",
    # attractions
    "broughton gallery": "broughton house gallery", "scudamores punt co": "scudamores punting co",
    "cambridge botanic gardens": "cambridge university botanic gardens", "the junction": "junction theatre",
    "trinity street college": "trinity college", "christ college": "christ's college", "christs": "christ's college",
    "history of science museum": "whipple museum of the history of science", "parkside pools": "parkside swimming pool",
    "the botanical gardens at cambridge university": "cambridge university botanic gardens",
    "cafe jello museum": "cafe jello gallery",
}
FOOD_ALIASES = {"eriterean": "mediterranean", "brazilian": "portuguese", "sea food": "seafood",
                "portugese": "portuguese", "modern american": "north american", "americas": "north american",
                "intalian": "italian", "italain": "italian", "asian or oriental": "asian", "english": "british",
                "australasian": "australian", "gastropod": "gastropub", "brutish": "british", "bristish": "british",
                "europeon": "european"}
TYPE_ALIASES = {"swimming pool": "swimmingpool", "mutliple sports": "multiple sports", "night club": "nightclub",
                "guest house": "guesthouse"}

# spoken times with a fixed reading, and prefixes that fix one
_TIME_WORDS = {"afternoon": "13:00", "lunch": "12:00", "noon": "12:00", "mid-day": "12:00",
               "around lunch time": "12:00", "morning": "08:00", "seven o'clock tomorrow evening": "07:00",
               "three forty five p.m": "15:45", "one thirty p.m.": "13:30", "six fourty five": "06:45",
               "eight thirty": "08:30"}
_TIME_PREFIXES = {"one o'clock p.m": "13:00", "ten o'clock a.m": "10:00"}


# the placeholder names the standard evaluator reads as each token Inform and Success look for: the
# bare slot, and the slot after each prefix listed (``value_name``, ``hotel_name``, ...). Its other
# tokens (AREA, FOOD, PRICE, COUNT, ...) are never looked for, and an unknown name becomes nothing.
_VENUE_PREFIXES = ("attraction", "hospital", "hotel", "police", "restaurant", "value")
_PLACEHOLDER_RULES = {
    "NAME": (("name",), _VENUE_PREFIXES),
    "PHONE": (("phone",), _VENUE_PREFIXES + ("taxi",)),
    "ADDRESS": (("address",), _VENUE_PREFIXES),
    "POST": (("postcode",), _VENUE_PREFIXES),
    "REFERENCE": (("reference", "ref"), ("attraction", "hotel", "restaurant", "train", "value")),
    "TRAINID": (("trainid", "train_id", "train_trainid", "value_id", "id", "train"), ()),
}
PLACEHOLDER_TOKENS = {name: token for token, (bare, prefixes) in _PLACEHOLDER_RULES.items()
                      for name in bare + tuple(f"{p}_{bare[0]}" for p in prefixes)}
_PLACEHOLDER = re.compile(r"\[([\w\s]+)\](?:es|s|-s|-es)?")


def standard_response(text: str) -> str:
    """A reply as the standard evaluator reads it: lower case, each placeholder replaced by its token
    (``"[Value_Name]s is at [hotel_address]"`` -> ``"NAME is at ADDRESS"``), an unknown one by nothing.

    The standard evaluator also runs the Moses tokenizer and detokenizer over the reply, which moves
    spaces and punctuation only: no token appears or disappears, so it is not repeated here.
    """
    return _PLACEHOLDER.sub(lambda m: PLACEHOLDER_TOKENS.get(m.group(1), ""), text.lower())


def standard_name(value: str) -> str:
    v = value.strip().lower().replace(" & ", " and ").replace("&", " and ").replace(" '", "'")
    return NAME_ALIASES.get(v, v)


def standard_time(value: str) -> str:
    """A time as the standard evaluator reads it (``HH:MM`` when it can; otherwise the cleaned text)."""
    t = value.strip().lower()
    if t in _TIME_WORDS:
        return _TIME_WORDS[t]
    for prefix, hhmm in _TIME_PREFIXES.items():
        if t.startswith(prefix):
            return hhmm
    if t.startswith("by"):
        t = t[3:]
    if t.startswith("after"):
        t = t[5:].strip()
    if t.startswith("afer"):
        t = t[4:].strip()
    if t.endswith("am"):
        t = t[:-2].strip()
    if t.endswith("a.m."):
        t = t[:-4].strip()
    if t.endswith("pm") or t.endswith("p.m."):
        t = t[:-2].strip() if t.endswith("pm") else t[:-4].strip()
        parts = t.split(":")
        if len(parts) == 2 and parts[0].strip().isdigit():
            return f"{int(parts[0]) + 12}:{parts[1]}"
        if len(parts) == 1 and parts[0].isdigit():
            return f"{int(parts[0]) + 12}:00"
    if not t:
        return "00:00"
    if t[-1] in ".,?":
        t = t[:-1]
    if t.isdigit():
        return f"{t[:2]}:{t[2:]}" if len(t) == 4 else f"{t.zfill(2)}:00"
    if ":" in t:
        t = t.replace(" ", "")
    if len(t) == 4 and t[1] == ":":
        return "0" + t
    return t


@functools.lru_cache(maxsize=1 << 12)  # a database query asks it of every train, for a handful of values
def standard_minutes(value: str) -> int:
    """Minutes since midnight of a normalised time; 0 when it does not begin with ``HH:MM`` (as the standard does)."""
    m = re.match(r"(\d\d):(\d\d)", value)
    return int(m.group(1)) * 60 + int(m.group(2)) if m else 0


def standard_value(slot: str, value: str) -> str:
    """A state or goal value normalised as the standard evaluator normalises it before a database query."""
    if slot in ("name", "destination", "departure"):
        return standard_name(value)
    if slot == "type":
        return TYPE_ALIASES.get(value, value)
    if slot == "food":
        v = value.strip().lower()
        return FOOD_ALIASES.get(v, v)
    if slot in ("arriveby", "leaveat", "time"):
        return standard_time(value)
    if slot in ("parking", "internet"):
        return "yes" if value == "free" else value
    return value


@functools.lru_cache(maxsize=1 << 16)  # a query compares every venue name with the few a dialogue names
def partial_ratio(a: str, b: str) -> int:
    """fuzzywuzzy's ``partial_ratio`` (with python-Levenshtein): the best similarity, in whole percent,
    of the shorter string with a window of the longer one placed at each of their matching blocks."""
    from rapidfuzz.distance import Indel, Levenshtein

    if a == b:
        return 100
    if not a or not b:
        return 0
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    best = 0.0
    for block in Levenshtein.editops(short, long_).as_matching_blocks():
        start = max(block.b - block.a, 0)
        r = Indel.normalized_similarity(short, long_[start : start + len(short)])
        if r > 0.995:
            return 100
        best = max(best, r)
    return int(round(100 * best))
