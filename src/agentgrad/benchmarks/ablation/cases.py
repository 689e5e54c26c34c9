"""The prompt-bug benchmark's cases: three small systems on one look-up task, four defect kinds.

Every case is a system whose answers are checkable (questions about a customer record: its city, its
pet or its favourite colour) with **one agent's prompt carrying one planted defect**, a line inserted
into that agent's prompt. The truth is the bugged agent. The splits (train, validation, test) are
generated from a fixed seed, so they are the same on every machine and for every run seed; the run
seed changes only which training episodes a run samples, in which order, and tie-breaking.

Systems (``SYSTEMS``):

- ``pipeline``: ``reader -> answerer``. The reader looks the value up in the record; the answerer
  writes the final answer from the reader's note.
- ``fanin``: two workers (``reader``, ``checker``) each answer from the record; the ``responder``
  writes the final answer from their two notes.
- ``manager``: the paper's manager -> workers -> responder shape: the ``manager`` answers from the
  record; two workers take its answer (the ``checker`` checks it against the record, the ``writer``
  writes it as a sentence); the ``responder`` writes the final answer from the workers' notes.

SmolLM2-135M cannot route (asked which field a question names, it answers the question, wrongly),
so every agent here does what it can do: read a value, check it, restate it.

Defect kinds (``DEFECTS``), each a line whose text depends on the system and the bugged agent:

- ``stale_example``: a worked example whose answer is another field's value (the model imitates it).
- ``forbidden_field``: an instruction to also report a field the answer must not contain.
- ``wrong_item``: an instruction to report a fixed item of the record (the first value: the name).
- ``distractor``: an instruction unrelated to the task (a greeting and a sales pitch).

A case where the defect does not lower the test score on the model (``clean <= bugged``) is dropped
from the comparison and counted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from agentgrad.core.config import SystemConfig, validate

FIELDS = {"city": "City", "pet": "Pet", "colour": "Favourite colour"}
QUESTION = {"city": "What is {name}'s city?", "pet": "What is {name}'s pet?",
            "colour": "What is {name}'s favourite colour?"}
_NAMES = ["Alice", "Bruno", "Carla", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Luca",
          "Maya", "Nils", "Olga", "Pablo", "Queenie", "Rosa", "Samir", "Tara", "Umar", "Vera", "Wim", "Xenia",
          "Yusuf", "Zora", "Anton", "Bea", "Cyril", "Dana", "Emil", "Fiona", "Gael", "Hana", "Ivo", "Jana",
          "Kofi", "Lina", "Marek", "Nora", "Oscar", "Petra", "Rami", "Sara", "Tomas", "Ulla", "Viktor", "Wanda",
          "Yara", "Zeno", "Aris", "Boris", "Chloe", "Dario", "Edda", "Felix", "Gina", "Henrik", "Iris", "Joel"]
_CITIES = ["Lyon", "Oslo", "Rome", "Cairo", "Lima", "Kyoto", "Dublin", "Quito", "Accra", "Hanoi", "Perth", "Porto",
           "Riga", "Tunis", "Dakar", "Minsk", "Seoul", "Bern", "Turin", "Nantes"]
_PETS = ["snake", "goat", "cat", "dog", "parrot", "rabbit", "turtle", "frog", "hamster", "horse", "pony", "lizard",
         "ferret", "duck", "owl", "pig"]
_COLOURS = ["blue", "purple", "red", "green", "yellow", "orange", "pink", "brown", "black", "white", "grey", "teal"]
SPLITS = {"train": 24, "val": 12, "test": 24}  # the test score moves in steps of 1/24 < 0.05
DATA_SEED = 2026


def make_splits() -> dict[str, list[dict[str, Any]]]:
    """The benchmark's examples: ``{"id", "record", "question", "answer", "avoid", "field"}``; the
    record's other values are ``avoid`` (an answer that names one fails). Fixed by ``DATA_SEED``."""
    rng = random.Random(DATA_SEED)
    names = rng.sample(_NAMES, sum(SPLITS.values()))
    fields = list(FIELDS)
    out: dict[str, list[dict[str, Any]]] = {}
    k = 0
    for split, n in SPLITS.items():
        rows = []
        for i in range(n):
            name = names[k]
            k += 1
            values = {"city": rng.choice(_CITIES), "pet": rng.choice(_PETS), "colour": rng.choice(_COLOURS)}
            field = fields[(i + rng.randrange(3)) % 3]
            record = f"Name: {name}. " + " ".join(f"{FIELDS[f]}: {values[f]}." for f in fields)
            rows.append({"id": f"{split}-{i:02d}", "record": record, "question": QUESTION[field].format(name=name),
                         "answer": values[field], "avoid": [values[f] for f in fields if f != field],
                         "field": field})
        out[split] = rows
    return out


_EXAMPLE_RECORD = "Record: Name: Zoe. City: Bern. Pet: cow. Favourite colour: teal."


def _pipeline() -> dict[str, Any]:
    return {"inputs": ["record", "question"], "agents": {
        "reader": {"prompt": "You read a record and answer the question with the value only.\n",
                   "inputs": ["record", "question"], "template": "Record: {record}\nQuestion: {question}"},
        "answerer": {"prompt": "You write the final answer from the reader's note. Reply with the answer only.\n",
                     "protected": ["Reply with the answer only."], "inputs": ["reader"],
                     "template": "Reader's note: {reader}"}}}


def _fanin() -> dict[str, Any]:
    reader = "You read a record and answer the question with the value only.\n"
    return {"inputs": ["record", "question"], "agents": {
        "reader": {"prompt": reader, "inputs": ["record", "question"],
                   "template": "Record: {record}\nQuestion: {question}"},
        "checker": {"prompt": "You find the answer to the question in the record. Reply with the value only.\n",
                    "inputs": ["record", "question"], "template": "Question: {question}\nRecord: {record}"},
        "responder": {"prompt": "You write the final answer from the two notes. Reply with the answer only.\n",
                      "protected": ["Reply with the answer only."], "inputs": ["reader", "checker"],
                      "template": "Note 1: {reader}\nNote 2: {checker}"}}}


def _manager() -> dict[str, Any]:
    return {"inputs": ["record", "question"], "agents": {
        "manager": {"prompt": "You read a record and answer the question with the value only.\n",
                    "inputs": ["record", "question"], "template": "Record: {record}\nQuestion: {question}"},
        "checker": {"prompt": "You check the manager's answer against the record. Reply with the correct value "
                              "only.\n",
                    "inputs": ["record", "question", "manager"],
                    "template": "Record: {record}\nQuestion: {question}\nManager's answer: {manager}"},
        "writer": {"prompt": "You write the manager's answer as one short sentence.\n",
                   "inputs": ["question", "manager"], "template": "Question: {question}\nManager's answer: {manager}"},
        "responder": {"prompt": "You write the final answer from the two notes. Reply with the answer only.\n",
                      "protected": ["Reply with the answer only."], "inputs": ["checker", "writer"],
                      "template": "Note 1: {checker}\nNote 2: {writer}"}}}


SYSTEMS = {"pipeline": _pipeline, "fanin": _fanin, "manager": _manager}

# (system, defect) -> the bugged agent and the line planted in its prompt
_STALE = f"Example: {_EXAMPLE_RECORD} Question: What is Zoe's city? Answer: The pet is a cow."
_WRONG_ITEM = "Always reply with the first value of the record."
_DISTRACTOR = "Start by greeting the customer and recommend our premium plan."
_DEFECTS: dict[tuple[str, str], tuple[str, str]] = {
    ("pipeline", "stale_example"): ("reader", _STALE),
    ("pipeline", "forbidden_field"): ("answerer", "Always also say the person's pet and favourite colour."),
    ("pipeline", "wrong_item"): ("reader", _WRONG_ITEM),
    ("pipeline", "distractor"): ("answerer", _DISTRACTOR),
    ("fanin", "stale_example"): ("reader", _STALE),
    ("fanin", "forbidden_field"): ("responder", "Always also name the person's city and pet."),
    ("fanin", "wrong_item"): ("checker", _WRONG_ITEM),
    ("fanin", "distractor"): ("reader", _DISTRACTOR),
    ("manager", "stale_example"): ("manager", _STALE),
    ("manager", "forbidden_field"): ("writer", "Always also name the person's city and pet."),
    ("manager", "wrong_item"): ("checker", _WRONG_ITEM),
    ("manager", "distractor"): ("responder", _DISTRACTOR),
}
DEFECTS = ["stale_example", "forbidden_field", "wrong_item", "distractor"]


@dataclass(frozen=True)
class Case:
    """One system with one planted defect (``defect`` None: the clean system)."""

    system: str
    defect: str | None

    @property
    def name(self) -> str:
        return f"{self.system}-{self.defect or 'clean'}"

    @property
    def bugged_agent(self) -> str | None:
        return _DEFECTS[(self.system, self.defect)][0] if self.defect else None

    @property
    def defect_line(self) -> str | None:
        return _DEFECTS[(self.system, self.defect)][1] if self.defect else None

    def config(self, model: dict[str, Any]) -> SystemConfig:
        """The system, every agent on ``model`` (a models: entry), the defect's line inserted as the
        bugged agent's second line (after its role sentence)."""
        data = SYSTEMS[self.system]()
        data["name"] = self.name
        data["models"] = {"default": model}
        data["settings"] = {"max_new_tokens": 24}
        for a in data["agents"].values():
            a["model"] = "default"
        if self.defect:
            agent = data["agents"][self.bugged_agent]
            first, sep, rest = agent["prompt"].strip().partition(". ")
            lines = [first + "." if sep else first, self.defect_line, *([rest] if rest else [])]
            agent["prompt"] = "\n".join(lines) + "\n"
        return validate(SystemConfig, data, f"ablation case {self.name}")


def cases(systems: list[str] | None = None, defects: list[str] | None = None) -> list[Case]:
    return [Case(s, d) for s in (systems or list(SYSTEMS)) for d in (defects or DEFECTS)]
