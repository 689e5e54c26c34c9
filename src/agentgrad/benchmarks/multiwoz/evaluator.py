"""MultiWOZ metrics: joint goal accuracy and slot P/R/F1 per turn; Inform and Success per dialogue.

State metrics compare the predicted accumulated state of every turn with the gold one: names and
train departure/destination match fuzzily (ratio >= 90 after canonicalisation), every other value
exactly. Precision, recall and F1 are micro-averaged over all turns; a wrong value counts as a
false positive and a false negative.

Inform and Success follow the standard MultiWOZ evaluator (Tomiinek/MultiWOZ_Evaluation): replies
are delexicalised (``[name]``, ``[phone]``, ``[address]``, ``[postcode]``, ``[reference]``,
``[train_id]``, or any placeholder spelling it reads: :func:`.standard.standard_response`) and
states are read in its form (:mod:`.standard_input`); in each turn, for every goal domain that is
active, a NAME (TRAINID for trains) in the reply offers the venues that the turn's state matches
in the database, replacing the
earlier offer only when some earlier venue is no longer among them. A domain is informed when its
offered venues all satisfy the goal's constraints (or the goal names its venue, or the domain is
taxi, or a train without a requested TRAINID was never offered). Success needs Inform and every
requested PHONE, ADDRESS, POST, TRAINID and REFERENCE (REFERENCE only in turns where the domain
had been booked) provided. Active domains, unless given, are estimated from the changes of the state.
"""

from __future__ import annotations

import re
from typing import Any

from rapidfuzz import fuzz

from agentgrad.benchmarks.multiwoz.data import Dialogue
from agentgrad.benchmarks.multiwoz.db import VenueDB, canonical
from agentgrad.benchmarks.multiwoz.standard import standard_response
from agentgrad.benchmarks.multiwoz.standard_input import nested_state

FUZZY_SLOTS = ("hotel-name", "restaurant-name", "attraction-name", "train-departure", "train-destination")
REQUESTABLE = {"phone": "PHONE", "address": "ADDRESS", "postcode": "POST", "trainID": "TRAINID"}
SPAN_SLOT = {"Name": "name", "Phone": "phone", "Addr": "address", "Post": "postcode", "Ref": "reference"}


# --- state metrics --------------------------------------------------------------------------
def values_match(slot: str, predicted: str, gold: str) -> bool:
    if predicted == gold:
        return True
    if slot in FUZZY_SLOTS:
        key = slot.split("-")[1]
        a, b = (re.sub(r"^the ", "", canonical(key, v)).replace(" ", "") for v in (predicted, gold))
        return a == b or fuzz.ratio(a, b) >= 90
    return False


def compare_states(predicted: dict[str, str], gold: dict[str, str]) -> dict[str, Any]:
    """One turn: joint match, and the true positive, false positive and false negative slots."""
    tp = [s for s in predicted if s in gold and values_match(s, predicted[s], gold[s])]
    fp = [s for s in predicted if s not in tp]
    fn = [s for s in gold if s not in tp]
    return {"joint": not fp and not fn, "tp": tp, "fp": fp, "fn": fn}


def _ratio(num: int, den: int, empty: float) -> float:
    return num / den if den else empty


def state_metrics(turns: list[tuple[dict[str, str], dict[str, str]]]) -> dict[str, float]:
    """JGA and micro slot precision/recall/F1 (in %) over ``(predicted, gold)`` turn states."""
    tp = fp = fn = joint = 0
    for pred, gold in turns:
        c = compare_states(pred, gold)
        tp, fp, fn, joint = tp + len(c["tp"]), fp + len(c["fp"]), fn + len(c["fn"]), joint + c["joint"]
    p = _ratio(tp, tp + fp, 1.0 if tp + fn == 0 else 0.0)
    r = _ratio(tp, tp + fn, 1.0)
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {"jga": 100 * _ratio(joint, len(turns), 0.0), "slot_precision": 100 * p, "slot_recall": 100 * r,
            "slot_f1": 100 * f1, "turns": len(turns), "tp": tp, "fp": fp, "fn": fn}


# --- delexicalisation -------------------------------------------------------------------------
_PATTERNS = [
    ("train_id", re.compile(r"\btr\s?\d{4}\b", re.IGNORECASE)),
    ("phone", re.compile(r"\b0\d{9,10}\b|\b0\d{4}\s\d{6}\b|\b0\d{3}\s\d{3}\s\d{4}\b")),
    ("postcode", re.compile(r"\bc\.?\s?b\.?\s?\d{1,2}\s?,?\s?\d\s?[a-z]\.?\s?[a-z]\b", re.IGNORECASE)),
    ("reference", re.compile(r"\b(?=[A-Z0-9]*[A-Z])(?=[A-Z0-9]*\d)[A-Z0-9]{8}\b")),
]


def delexicalize(text: str, values: dict[str, set[str]] | None = None, spans: list[list[Any]] | None = None) -> str:
    """``text`` with venue names, phones, addresses, postcodes, references and train ids as placeholders.

    ``spans`` (a gold turn's ``span_info``: act, slot, value, first word, last word) are replaced
    first; then the known ``values`` (placeholder -> strings: what the tools returned, and the
    database's multi-word venue names), then the patterns of phone numbers, postcodes, train ids
    and reference numbers.
    """
    if spans:
        words = text.split()
        marks: dict[int, tuple[int, str]] = {}
        for act, slot, _value, a, b in spans:
            kind = "train_id" if slot == "Id" and act.lower().startswith("train") else SPAN_SLOT.get(slot)
            if kind and 0 <= int(a) <= int(b) < len(words):
                marks[int(a)] = (int(b), kind)
        out, i = [], 0
        while i < len(words):
            if i in marks:
                end, kind = marks[i]
                out.append(f"[{kind}]")
                i = end + 1
            else:
                out.append(words[i])
                i += 1
        text = " ".join(out)
    for kind, vals in (values or {}).items():
        words = sorted({v.strip() for v in vals if len(v.strip()) >= 3}, key=len, reverse=True)  # longest first
        if words:
            alternatives = "|".join(re.escape(w) for w in words)
            text = re.sub(rf"(?<![\w])(?:{alternatives})(?![\w])", f"[{kind}]", text, flags=re.IGNORECASE)
    for kind, pat in _PATTERNS:
        text = pat.sub(f"[{kind}]", text)
    return text


# --- Inform and Success -----------------------------------------------------------------------
def active_domains(states: list[dict[str, dict[str, str]]]) -> list[list[str]]:
    """The domain each turn is about, from which domain's state changed (the standard evaluator's estimate)."""
    current: str | None = None
    old: dict[str, dict[str, str]] = {}
    old_changed: list[str] = []
    out = []
    for st in states:
        changed = [d for d in st if set(st[d].items()) - set(old.get(d, {}).items())]
        if not changed:
            if current is None:
                out.append([])
                continue
            if len(old_changed) > 1:
                old_changed = [d for d in old_changed if d in st and d != current]
                if old_changed:
                    current = old_changed[0]
        elif current not in changed:
            current = max(changed, key=lambda d: len(st[d]))
        old, old_changed = st, changed
        out.append([current] if current else [])
    return out


def goal_of(dialogue: Dialogue) -> dict[str, dict[str, Any]]:
    """Per goal domain: the constraints (``informable``) and requested slots (``requestable``)."""
    out = {}
    for d in dialogue.domains:
        g = dialogue.goal[d]
        info = {k.lower(): str(v).lower() for k, v in (g.get("info") or {}).items()}
        req = {REQUESTABLE[r] for r in g.get("reqt", []) if r in REQUESTABLE}
        if d == "taxi" and "phone" in g.get("reqt", []):
            req.add("PHONE")
        if any(k not in ("invalid", "pre_invalid") for k in (g.get("book") or {})):
            req.add("REFERENCE")
        out[d] = {"informable": info, "requestable": sorted(req)}
    return out


def inform_success(goal: dict[str, dict[str, Any]], responses: list[str], states: list[dict[str, str]],
                   booked: list[list[str]], db: VenueDB, active: list[list[str]] | None = None) -> dict[str, Any]:
    """Inform and Success of one dialogue (``responses`` delexicalised, ``states`` flat, per turn)."""
    return venue_verdict(goal, responses, [nested_state(s) for s in states], booked, db, active)


def venue_verdict(goal: dict[str, dict[str, Any]], responses: list[str], states: list[dict[str, dict[str, str]]],
                  booked: list[list[str]], db: VenueDB, active: list[list[str]] | None = None) -> dict[str, Any]:
    """Inform and Success of one dialogue, the standard evaluator's way, from ``states`` in its form
    (``{domain: {slot: value}}``, normalised by :func:`~.standard_input.standard_state`).

    Turns are read while every list has one (the standard evaluator zips them): a dialogue with
    fewer predicted turns than the data is scored on the turns it has.
    """
    active = active if active is not None else active_domains(states)
    offered: dict[str, Any] = {d: [] for d in goal}
    provided: dict[str, set[str]] = {d: set() for d in goal}
    for i, (resp, st, act) in enumerate(zip(responses, states, active)):
        utt = standard_response(resp)
        day_booked = booked[i] if i < len(booked) else []
        for d in goal:
            if d not in act:
                continue
            if ("NAME" in utt and d in ("restaurant", "hotel", "attraction")) or ("TRAINID" in utt and d == "train"):
                venues = db.ids(d, st[d]) if d in st else []
                if not offered[d] or any(v not in venues for v in offered[d]):
                    offered[d] = venues
            for slot in ("PHONE", "ADDRESS", "POST", "REFERENCE", "TRAINID"):
                if slot in utt and (slot != "REFERENCE" or d in day_booked):
                    provided[d].add(slot)
    for d in goal:
        if "name" in goal[d]["informable"] or d == "taxi":
            offered[d] = "MATCHED"
        if d == "train" and not offered[d] and "TRAINID" not in goal[d]["requestable"]:
            offered[d] = "MATCHED"
    match = {}
    for d in goal:
        ok = offered[d] == "MATCHED"
        if not ok and d in ("restaurant", "hotel", "attraction", "train") and offered[d]:
            ok = set(offered[d]) <= set(db.ids(d, goal[d]["informable"]))
        match[d] = ok
    inform = all(match.values())
    success_by = {d: set(goal[d]["requestable"]) <= provided[d] for d in goal} if inform else {}
    return {"inform": inform, "success": inform and all(success_by.values()), "match": match,
            "provided": {d: sorted(v) for d, v in provided.items()},
            "offered": {d: v if isinstance(v, str) else v[:10] for d, v in offered.items()}}
