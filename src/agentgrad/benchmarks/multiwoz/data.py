"""MultiWOZ dialogues in the ``data.json`` format (2.1 and 2.4 share it), states normalised to 30 slots.

A dialogue's ``log`` alternates user (even) and system (odd) turns; the belief state after a user
turn is the ``metadata`` of the system turn that follows it. Only dialogues whose domains all lie
in {hotel, restaurant, attraction, train, taxi} are kept. Slot names follow the 2.4 ontology, lower
cased (``hotel-book day``, ``train-arriveby``); "not mentioned", "none" and "" mean unset and
"dontcare" is a value.

The data directory holds ``multiwoz/dialogues/{test,val}.json.zip`` (2.1 dialogues, 2.1 labels),
``multiwoz/db/*_db.json`` and ``multiwoz/meta/`` (2.4 split lists and ontology, booked domains). A
full 2.4 ``data.json`` (``agentgrad data download multiwoz24``) is used instead when present, and
results say which labels they used.
"""

from __future__ import annotations

import functools
import io
import json
import random
import re
import shutil
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgrad.benchmarks.data import benchmark_dir, data_dir
from agentgrad.errors import ConfigError

DOMAINS = ("hotel", "restaurant", "attraction", "train", "taxi")
SLOTS: dict[str, list[str]] = {
    "hotel": ["pricerange", "type", "parking", "book stay", "book day", "book people", "area", "stars", "internet",
              "name"],
    "train": ["destination", "day", "departure", "arriveby", "book people", "leaveat"],
    "attraction": ["area", "name", "type"],
    "restaurant": ["food", "pricerange", "area", "name", "book time", "book day", "book people"],
    "taxi": ["leaveat", "destination", "departure", "arriveby"],
}
ALL_SLOTS = [f"{d}-{s}" for d in DOMAINS for s in SLOTS[d]]
UNSET = {"", "none", "not mentioned", "not given", "?"}
DONTCARE = {"dontcare", "don't care", "dont care", "do n't care", "do not care", "does not care", "any"}
SPLITS = {"test": "test", "val": "val", "validation": "val", "dev": "val"}
MULTIWOZ24_URL = "https://github.com/smartyfh/MultiWOZ2.4/raw/main/data/MULTIWOZ2.4.zip"
TIME_SLOTS = {"leaveat", "arriveby", "book time"}


def normalize_value(slot: str, value: Any) -> str | None:
    """One slot value in canonical form; ``None`` when it means unset."""
    v = re.sub(r"\s+", " ", str(value).strip().lower())
    if v in UNSET:
        return None
    if v in DONTCARE:
        return "dontcare"
    if slot.split("-")[-1] in TIME_SLOTS:
        return canonical_time(v) or v
    return v


def normalize_state(state: dict[str, Any]) -> dict[str, str]:
    """``{"domain-slot": value}`` restricted to the 30 slots, unset values dropped."""
    out = {}
    for k, v in state.items():
        k = k.lower()
        if k in ALL_SLOTS:
            nv = normalize_value(k, v)
            if nv is not None:
                out[k] = nv
    return out


_WORD_TIMES = {"morning": "08:00", "noon": "12:00", "lunch": "12:00", "midday": "12:00", "afternoon": "13:00",
               "evening": "18:00", "midnight": "00:00"}


def canonical_time(text: str) -> str | None:
    """``"5:30 pm"``, ``"after 17:30"``, ``"1730"``, ``"5pm"`` -> ``"17:30"``; ``None`` if not a time."""
    t = text.strip().lower().replace(".", "")
    t = re.sub(r"^(after|by|before|around|at|about)\s+", "", t)
    if t in _WORD_TIMES:
        return _WORD_TIMES[t]
    m = re.fullmatch(r"(\d{1,2})(?::?(\d{2}))?\s*(am|pm)?", t)
    if not m:
        return None
    h, mnt, half = int(m.group(1)), int(m.group(2) or 0), m.group(3)
    if m.group(2) is None and half is None and len(m.group(1)) > 2:
        return None
    if half == "pm" and h < 12:
        h += 12
    if half == "am" and h == 12:
        h = 0
    if h > 24 or mnt > 59:
        return None
    return f"{h % 24:02d}:{mnt:02d}"


def minutes(text: str) -> int | None:
    """Minutes since midnight; "24:07" (a train arriving after midnight) is 1447, as the database means it."""
    m = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*", text)
    if m:
        return int(m.group(1)) * 60 + int(m.group(2))
    t = canonical_time(text)
    return None if t is None else int(t[:2]) * 60 + int(t[3:])


@dataclass
class Turn:
    """One exchange: the user's words, the gold reply, the gold state after the user's words."""

    user: str
    system: str
    state: dict[str, str]
    system_spans: list[list[Any]] = field(default_factory=list)  # span_info of the system turn


@dataclass
class Dialogue:
    id: str  # lower case, no ".json" (as the standard evaluator keys dialogues)
    turns: list[Turn]
    goal: dict[str, Any]
    domains: list[str]
    labels: str = "2.1"


def goal_domains(goal: dict[str, Any]) -> list[str]:
    skip = {"message", "topic"}
    return [d for d, g in goal.items() if d not in skip and isinstance(g, dict) and g]


def parse_dialogue(key: str, raw: dict[str, Any], labels: str) -> Dialogue:
    log = raw.get("log", [])
    turns = []
    for i in range(0, len(log) - 1, 2):
        meta = log[i + 1].get("metadata") or {}
        flat: dict[str, Any] = {}
        for d in DOMAINS:
            dm = meta.get(d, {})
            for s, v in dm.get("semi", {}).items():
                flat[f"{d}-{s}"] = v
            for s, v in dm.get("book", {}).items():
                if s != "booked":
                    flat[f"{d}-book {s}"] = v
        turns.append(Turn(log[i]["text"], log[i + 1]["text"], normalize_state(flat), list(log[i + 1].get("span_info", []))))
    return Dialogue(key.lower().removesuffix(".json"), turns, raw.get("goal", {}), goal_domains(raw.get("goal", {})),
                    labels)


def _read_json_or_zip(path: Path) -> dict[str, Any]:
    try:
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as z:
                name = next(n for n in z.namelist() if n.endswith(".json"))
                return json.loads(z.read(name))
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, zipfile.BadZipFile, StopIteration) as e:
        raise ConfigError(f"cannot read MultiWOZ dialogues from {path}: {e}") from None


def split_ids(split: str, data: str | Path | None = None) -> list[str]:
    """The dialogue ids of a 2.4 split list (``testListFile.json`` / ``valListFile.json``), lower case."""
    root = benchmark_dir("multiwoz", data)
    path = root / "meta" / f"{SPLITS[split]}ListFile.json"
    try:
        return [line.strip().lower().removesuffix(".json") for line in path.read_text().splitlines() if line.strip()]
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e}") from None


def load_dialogues(split: str = "test", data: str | Path | None = None) -> list[Dialogue]:
    """The split's dialogues over the five domains, in split-list order.

    Reads ``multiwoz/MULTIWOZ2.4/data.json`` (2.4 labels) when present, else the 2.1 dialogues in
    ``multiwoz/dialogues/<split>.json.zip`` (2.1 labels). Read once per process while those files and
    the split list are unchanged (seconds each time otherwise: a run and a scoring both read the test
    split); the dialogues are shared between callers, so treat them as read-only.
    """
    if split not in SPLITS:
        raise ConfigError(f"unknown MultiWOZ split {split!r}; valid: test, val")
    root = benchmark_dir("multiwoz", data)
    files = (root / "MULTIWOZ2.4" / "data.json", root / "dialogues" / f"{SPLITS[split]}.json.zip",
             root / "meta" / f"{SPLITS[split]}ListFile.json")
    return list(_load_dialogues(split, data, root.resolve(), tuple(_stamp(f) for f in files)))


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=4)
def _load_dialogues(split: str, data: str | Path | None, root: Path, stamps: tuple[Any, ...]) -> tuple[Dialogue, ...]:
    """``load_dialogues``'s reading (``stamps``: the files' sizes and times, so a changed file is read again)."""
    full = root / "MULTIWOZ2.4" / "data.json"
    if full.exists():
        raw, labels = _read_json_or_zip(full), "2.4"
    else:
        raw, labels = _read_json_or_zip(root / "dialogues" / f"{SPLITS[split]}.json.zip"), "2.1"
    by_id = {k.lower().removesuffix(".json"): v for k, v in raw.items()}
    out = []
    for did in split_ids(split, data):
        if did not in by_id:
            continue
        d = parse_dialogue(did, by_id[did], labels)
        if d.turns and all(x in DOMAINS for x in d.domains):
            out.append(d)
    if not out:
        raise ConfigError(f"no {split} dialogues found under {root}")
    return tuple(out)


def sample(dialogues: list[Dialogue], n: int | None, seed: int = 42) -> list[Dialogue]:
    """``n`` dialogues drawn without replacement by a seeded RNG (the paper: 100 test dialogues, seed 42)."""
    if n is None or n >= len(dialogues):
        return list(dialogues)
    if n < 1:
        raise ConfigError(f"--n must be at least 1, got {n}")
    return random.Random(seed).sample(dialogues, n)


def download_multiwoz24(data: str | Path | None = None, url: str = MULTIWOZ24_URL, timeout: float = 60) -> Path:
    """Fetch the official 2.4 archive and unpack its ``data.json`` (and split lists) into the data directory."""
    root = data_dir(data)
    dest = root / "multiwoz" / "MULTIWOZ2.4"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            blob = r.read()
    except (urllib.error.URLError, OSError) as e:
        raise ConfigError(f"cannot download MultiWOZ 2.4 from {url} ({getattr(e, 'reason', e)}); fetch the archive "
                          f"elsewhere and unpack its data.json into {dest}") from None
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as z:
            for name in z.namelist():
                base = name.rsplit("/", 1)[-1]
                if base in ("data.json", "testListFile.json", "valListFile.json", "ontology.json"):
                    (tmp / base).write_bytes(z.read(name))
    except zipfile.BadZipFile as e:
        raise ConfigError(f"the file at {url} is not a zip archive: {e}") from None
    if not (tmp / "data.json").exists():
        raise ConfigError(f"the archive at {url} holds no data.json")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest
