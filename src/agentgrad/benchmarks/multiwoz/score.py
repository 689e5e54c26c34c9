"""``bench multiwoz score FILE``: Inform, Success, JGA and slot figures of a predictions file.

Scores any system's predictions with the same code as ``evaluate``, without running anything. Two
shapes are read, per dialogue id (lower case; a ``.json`` suffix is dropped):

- ours (``predictions.json`` of ``evaluate``): ``[{"turn", "state": {"hotel-area": ...}, "reply",
  "response"}]``;
- the standard evaluator's input (Tomiinek/MultiWOZ_Evaluation, e.g. the published systems' files
  of its ``predictions/`` folder): ``[{"response", "state": {"hotel": {"area": ...}},
  "active_domains": [...]}]``, ``state`` and ``active_domains`` optional.

Inform and Success read the file as the standard evaluator does: ``response`` is a delexicalised
reply in any of its placeholder spellings (``[name]``, ``[value_name]``, ``[restaurant_name]``,
...); states are normalised in its way (:mod:`.standard_input`); a dialogue with fewer turns than
the data is scored on the turns it has. Without states, Inform and Success read the data
directory's gold states (MultiWOZ 2.1 labels here; the standard evaluator reads 2.2's, so these
figures can differ from its own and metrics.json says so), and the state figures (JGA, slot
P/R/F1) are not reported. Active domains (``domains``): ``file``, the file's when every turn has
them, otherwise estimated from the states (the standard evaluator's rule); ``states``, always
estimated; ``slots``, from the placeholders' domain prefixes (its ``add_slot_domains.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgrad.benchmarks.multiwoz.data import Dialogue, load_dialogues, normalize_state, split_ids
from agentgrad.benchmarks.multiwoz.db import VenueDB
from agentgrad.benchmarks.multiwoz.evaluator import goal_of, venue_verdict
from agentgrad.benchmarks.multiwoz.standard_input import (file_domains, gold_state, predicted_state, slot_domains,
                                                          standard_slot)
from agentgrad.errors import ConfigError
from agentgrad.core.files import read_text

# the standard evaluator's slot names (lower case, spaces removed) -> ours; the booking slots of
# hotels and restaurants go without their "book" in some files ("people", "day", "stay", "time")
_SLOT = {"bookday": "book day", "bookpeople": "book people", "bookstay": "book stay", "booktime": "book time"}
_BOOKING = {"hotel": ("day", "people", "stay"), "restaurant": ("day", "people", "time"), "train": ("people",)}
STATE_FIGURES = ("jga", "slot_precision", "slot_recall", "slot_f1")
DOMAIN_SOURCES = ("file", "states", "slots")


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
    """A predicted state in our flat form (``{"hotel-area": "east"}``), from either shape, for the state figures."""
    if not isinstance(state, dict):
        raise ConfigError(f"{where}: 'state' must be an object")
    flat: dict[str, Any] = {}
    for k, v in state.items():
        if isinstance(v, dict):  # the standard evaluator's {domain: {slot: value}}
            domain = str(k).lower()
            for slot, value in v.items():
                s = standard_slot(str(slot))
                s = f"book {s}" if s in _BOOKING.get(domain, ()) else _SLOT.get(s, s)
                flat[f"{domain}-{s}"] = value
        elif "-" in str(k):
            flat[str(k)] = v
        else:
            raise ConfigError(f"{where}: state key {k!r} is neither a domain nor a 'domain-slot' name")
    return normalize_state(flat)


def _gold_dialogues(path: Path, ids: set[str], data: str | Path | None) -> dict[str, Dialogue]:
    gold: dict[str, Dialogue] = {}
    for split in ("test", "val"):
        if ids - set(gold):
            gold.update({d.id: d for d in load_dialogues(split, data)})
    unknown = sorted(ids - set(gold))
    if unknown:
        raise ConfigError(f"{path}: {len(unknown)} dialogue id(s) not in the test or validation split, "
                          f"e.g. {unknown[0]!r}")
    return gold


def score_file(path: Path, data: str | Path | None = None,
               domains: str = "file") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(metrics, per-dialogue records) of the predictions in ``path``; ``domains``: see the module's doc."""
    from agentgrad.benchmarks.multiwoz.run import dialogue_record, load_booked_domains, summarize

    if domains not in DOMAIN_SOURCES:
        raise ConfigError(f"unknown source of active domains {domains!r}; valid: {', '.join(DOMAIN_SOURCES)}")
    preds = read_predictions(Path(path))
    gold = _gold_dialogues(Path(path), set(preds), data)
    has_state = {"state" in t for turns in preds.values() for t in turns}
    if len(has_state) > 1:
        raise ConfigError(f"{path}: some turns have a 'state' and some do not; give all or none")
    with_states = has_state == {True}
    if domains == "file" and not all("active_domains" in t for turns in preds.values() for t in turns):
        domains = "states"  # the standard evaluator's rule: the file's domains only when every turn has them
    db, booked = VenueDB(data), load_booked_domains(data)
    records, short = [], 0
    for did, turns in preds.items():
        d, where = gold[did], f"{path}: dialogue {did!r}"
        if len(turns) > len(d.turns):
            raise ConfigError(f"{where} has {len(turns)} turns; the data has {len(d.turns)}")
        short += len(turns) < len(d.turns)
        if with_states:
            states = [predicted_state(t["state"], f"{where} turn {i}") for i, t in enumerate(turns)]
            flat = [flat_state(t["state"], f"{where} turn {i}") for i, t in enumerate(turns)]
        else:
            states = [gold_state(g.state) for g in d.turns[:len(turns)]]
            flat = [g.state for g in d.turns[:len(turns)]]
        active = None  # estimated from the states
        if domains == "file":
            active = file_domains(turns, where)
        elif domains == "slots":
            active = [slot_domains(t["response"]) for t in turns]
        responses = [t["response"] for t in turns]
        verdict = venue_verdict(goal_of(d), responses, states, booked.get(did, []), db, active)
        predictions = [{"turn": i, "response": r, "state": s} for i, (r, s) in enumerate(zip(responses, flat))]
        records.append(dialogue_record(d, predictions, db, booked.get(did, []), verdict=verdict))
    test_ids = set(split_ids("test", data))
    labels = "+".join(sorted({d.labels for d in gold.values() if d.id in preds}))
    metrics = summarize(records) | {
        "file": str(path), "system": Path(path).name, "domains": domains, "short_dialogues": short,
        "states": "predicted" if with_states else f"gold: MultiWOZ {labels} labels of the data directory (the file "
                                                  f"has none; the standard evaluator reads MultiWOZ 2.2's)",
        "split": "+".join(sorted({"test" if did in test_ids else "val" for did in preds}))}
    if not with_states:
        metrics.update({k: None for k in STATE_FIGURES})
    return metrics, records
