"""``bench multiwoz score FILE``: Inform, Success, JGA and slot figures of a predictions file.

Scores any system's predictions with the same code as ``evaluate``, without running anything. Two
shapes are read, per dialogue id (lower case; a ``.json`` suffix is dropped):

- ours (``predictions.json`` of ``evaluate``): ``[{"turn", "state": {"hotel-area": ...}, "reply",
  "response"}]``;
- the standard evaluator's input (Tomiinek/MultiWOZ_Evaluation): ``[{"response", "state":
  {"hotel": {"area": ...}}, "active_domains": [...]}]``, ``state`` and ``active_domains`` optional.

``response`` is the delexicalised reply (``[name]``, ``[value_phone]``, ...). Without states, the
gold states are used for Inform and Success (as the standard evaluator does), and the state
figures (JGA, slot P/R/F1) are not reported. Without ``active_domains`` they are estimated from
the states, as the standard evaluator does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgrad.benchmarks.multiwoz.data import Dialogue, load_dialogues, normalize_state, split_ids
from agentgrad.benchmarks.multiwoz.db import VenueDB
from agentgrad.errors import ConfigError
from agentgrad.files import read_text

# the standard evaluator's slot names (lower case, spaces removed) -> ours
_SLOT = {"arrive": "arriveby", "leave": "leaveat", "bookday": "book day", "bookpeople": "book people",
         "bookstay": "book stay", "booktime": "book time"}
STATE_FIGURES = ("jga", "slot_precision", "slot_recall", "slot_f1")


def read_predictions(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The file's dialogues, checked for shape (a one-line error names what is wrong)."""
    text = read_text(path, "predictions file", ConfigError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{path} must map dialogue ids to lists of turns")
    out = {}
    for key, turns in data.items():
        if not isinstance(turns, list) or not all(isinstance(t, dict) and isinstance(t.get("response"), str)
                                                  for t in turns):
            raise ConfigError(f"{path}: dialogue {key!r} must be a list of turns, each with a string 'response'")
        out[str(key).lower().removesuffix(".json")] = turns
    return out


def flat_state(state: Any, where: str) -> dict[str, str]:
    """A predicted state in our flat form (``{"hotel-area": "east"}``), from either shape."""
    if not isinstance(state, dict):
        raise ConfigError(f"{where}: 'state' must be an object")
    flat: dict[str, Any] = {}
    for k, v in state.items():
        if isinstance(v, dict):  # the standard evaluator's {domain: {slot: value}}
            for slot, value in v.items():
                s = str(slot).lower().replace(" ", "")
                flat[f"{str(k).lower()}-{_SLOT.get(s, s)}"] = value
        elif "-" in str(k):
            flat[str(k)] = v
        else:
            raise ConfigError(f"{where}: state key {k!r} is neither a domain nor a 'domain-slot' name")
    return normalize_state(flat)


def score_file(path: Path, data: str | Path | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(metrics, per-dialogue records) of the predictions in ``path``."""
    from agentgrad.benchmarks.multiwoz.run import dialogue_record, load_booked_domains, summarize

    preds = read_predictions(Path(path))
    gold: dict[str, Dialogue] = {}
    for split in ("test", "val"):
        if set(preds) - set(gold):
            gold.update({d.id: d for d in load_dialogues(split, data)})
    unknown = sorted(set(preds) - set(gold))
    if unknown:
        raise ConfigError(f"{path}: {len(unknown)} dialogue id(s) not in the test or validation split, "
                          f"e.g. {unknown[0]!r}")
    has_state = {"state" in t for turns in preds.values() for t in turns}
    if len(has_state) > 1:
        raise ConfigError(f"{path}: some turns have a 'state' and some do not; give all or none")
    with_states = has_state == {True}
    db, booked = VenueDB(data), load_booked_domains(data)
    records = []
    for did, turns in preds.items():
        d = gold[did]
        if len(turns) != len(d.turns):
            raise ConfigError(f"{path}: dialogue {did!r} has {len(turns)} turns; the data has {len(d.turns)}")
        predictions = [{"turn": i, "response": t["response"],
                        "state": flat_state(t["state"], f"{path}: dialogue {did!r} turn {i}") if with_states
                        else d.turns[i].state} for i, t in enumerate(turns)]
        active = [list(t["active_domains"]) for t in turns] if all("active_domains" in t for t in turns) else None
        records.append(dialogue_record(d, predictions, db, booked.get(did, []), active))
    test_ids = set(split_ids("test", data))
    metrics = summarize(records) | {"file": str(path), "states": "predicted" if with_states else
                                    "gold (the file has none)", "system": Path(path).name,
                                    "split": "+".join(sorted({"test" if did in test_ids else "val" for did in preds}))}
    if not with_states:
        metrics.update({k: None for k in STATE_FIGURES})
    return metrics, records

