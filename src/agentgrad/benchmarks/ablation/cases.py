"""The prompt-bug benchmark's cases: three small systems on one look-up task, many planted defects.

Every case is a system whose answers are checkable (questions about a customer record: its city, its
pet or its favourite colour) with **one agent's prompt carrying one planted defect**, a line inserted
into that agent's prompt (:mod:`agentgrad.benchmarks.ablation.defects`: four families, each in
several wordings, positions and agents). The truth is the bugged agent.

Splits (:func:`make_splits` with :data:`ABLATION_SPLITS`) separate selection from measurement:
``train`` (the loop's samples), ``val`` (the validation gate), ``screen`` (decides which cases are
kept) and ``test`` (read only for the reported figures). They are generated from a fixed seed, so
they are the same on every machine and for every run seed; the run seed changes only which training
episodes a run samples, in which order, and tie-breaking. ``make_splits()`` without sizes gives the
earlier 24/12/24 splits, which the fault-injection benchmark still reads.

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

Prompt sets (``PROMPT_SETS``, ``Case.prompts``, ``--prompts``): ``short`` (the default: each prompt
one or two sentences on one line) and ``long`` (:data:`LONG_PROMPTS`: 13 to 15 lines per agent, as
agent prompts are written: role, rules, output format, an example), in which a defect is one line
among many. A case's name is the same in both; a benchmark folder holds one prompt set.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from agentgrad.benchmarks.ablation.defects import AGENT_KINDS, AGENTS, FAMILIES, POSITIONS, WORDINGS, defect_line, plant
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
SPLITS = {"train": 24, "val": 12, "test": 24}  # the earlier splits (the fault-injection benchmark reads them)
# the ablation's: at least 50 gate and 200 test questions per case (a test score moves in steps of 1/200)
ABLATION_SPLITS = {"train": 40, "val": 50, "screen": 100, "test": 200}
DATA_SEED = 2026


def _row(rng: random.Random, split: str, i: int, name: str, width: int) -> dict[str, Any]:
    fields = list(FIELDS)
    values = {"city": rng.choice(_CITIES), "pet": rng.choice(_PETS), "colour": rng.choice(_COLOURS)}
    field = fields[(i + rng.randrange(3)) % 3]
    record = f"Name: {name}. " + " ".join(f"{FIELDS[f]}: {values[f]}." for f in fields)
    return {"id": f"{split}-{i:0{width}d}", "record": record, "question": QUESTION[field].format(name=name),
            "answer": values[field], "avoid": [values[f] for f in fields if f != field], "field": field}


def make_splits(sizes: dict[str, int] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The benchmark's examples: ``{"id", "record", "question", "answer", "avoid", "field"}``; the
    record's other values are ``avoid`` (an answer that names one fails). Fixed by ``DATA_SEED``.

    Without ``sizes``: the earlier :data:`SPLITS` (every record a different name). With sizes (the
    ablation's :data:`ABLATION_SPLITS`): a separate draw in which names repeat across records (there
    are more records than names); every record is still drawn afresh."""
    if sizes is None:
        rng = random.Random(DATA_SEED)
        names = rng.sample(_NAMES, sum(SPLITS.values()))
        out: dict[str, list[dict[str, Any]]] = {}
        k = 0
        for split, n in SPLITS.items():
            out[split] = [_row(rng, split, i, names[k + i], 2) for i in range(n)]
            k += n
        return out
    rng = random.Random(f"{DATA_SEED}:{sorted(sizes.items())}")
    return {split: [_row(rng, split, i, rng.choice(_NAMES), 3) for i in range(n)] for split, n in sizes.items()}


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

# --- the long prompt set (docs/ablation-factorial.md): every agent's prompt 13-16 lines, as agent prompts are written
# (role, rules, output format, an example); the role line is the short prompt's first sentence, and
# the protected sentence of the final agents is kept. The example's record (Ada, Nice, mole, gold)
# shares no value with the benchmark's records, so a copied example answer is wrong.
_EX_RECORD = "Name: Ada. City: Nice. Pet: mole. Favourite colour: gold."


def _record_prompt(role: str, who: str, output: str) -> str:
    return "\n".join([
        role, f"You are the {who} of a customer-support team that answers questions about customer records.",
        "Rules:", "- Use only the record you are given.", "- Find the field that the question asks about.",
        "- Copy its value exactly as the record writes it.", "- Do not guess and do not add other fields.",
        "Output format:", f"- {output}", "- No quotes and no explanation.",
        "Example:", f"Record: {_EX_RECORD}", "Question: What is Ada's pet?", "Answer: mole"]) + "\n"


def _note_prompt(role: str, who: str, notes: str, example: list[str]) -> str:
    return "\n".join([
        role, f"You are the {who} of a customer-support team that answers questions about customer records.",
        "Rules:", f"- {notes}", "- Keep the value exactly as the notes give it.",
        "- Do not add facts that are not in the notes.", "- Do not greet the customer and do not explain.",
        "Output format:", "- Reply with the answer only.", "- One word or a few words, on one line.",
        "Example:", *example]) + "\n"


_READ = "You read a record and answer the question with the value only."
LONG_PROMPTS: dict[str, dict[str, str]] = {
    "pipeline": {
        "reader": _record_prompt(_READ, "reader", "One line with the value, nothing else."),
        "answerer": _note_prompt("You write the final answer from the reader's note.", "last agent",
                                 "The reader's note holds the value the customer asked for.",
                                 ["Reader's note: mole", "Answer: mole"]),
    },
    "fanin": {
        "reader": _record_prompt(_READ, "first reader", "One line with the value, nothing else."),
        "checker": _record_prompt("You find the answer to the question in the record.", "second reader",
                                  "Reply with the value only."),
        "responder": _note_prompt("You write the final answer from the two notes.", "last agent",
                                  "The two notes hold the value the customer asked for.",
                                  ["Note 1: mole", "Note 2: mole", "Answer: mole"]),
    },
    "manager": {
        "manager": _record_prompt(_READ, "manager", "One line with the value, nothing else."),
        "checker": "\n".join([
            "You check the manager's answer against the record.",
            "You are the checker of a customer-support team that answers questions about customer records.",
            "Rules:", "- Find the field that the question asks about in the record.",
            "- If the manager's answer is that field's value, keep it.",
            "- If it is not, give the value the record has instead.", "- Do not add other fields.",
            "Output format:", "- Reply with the correct value only.", "- No quotes and no explanation.",
            "Example:", f"Record: {_EX_RECORD}", "Question: What is Ada's pet?", "Manager's answer: gold",
            "Answer: mole"]) + "\n",
        "writer": "\n".join([
            "You write the manager's answer as one short sentence.",
            "You are the writer of a customer-support team that answers questions about customer records.",
            "Rules:", "- Use the manager's answer as it is.", "- Name the person and the field the question asks about.",
            "- Do not add other facts.", "- Do not greet the customer.",
            "Output format:", "- One sentence, ending with a full stop.", "- No quotes.",
            "Example:", "Question: What is Ada's pet?", "Manager's answer: mole", "Answer: Ada's pet is a mole."]) + "\n",
        "responder": _note_prompt("You write the final answer from the two notes.", "last agent",
                                  "The two notes hold the value the customer asked for.",
                                  ["Note 1: mole", "Note 2: Ada's pet is a mole.", "Answer: mole"]),
    },
}
PROMPT_SETS = ("short", "long")


def system_data(system: str, prompts: str = "short") -> dict[str, Any]:
    """The system's configuration data with the prompts of prompt set ``prompts`` (``short``: the
    original one-line prompts; ``long``: :data:`LONG_PROMPTS`)."""
    if prompts not in PROMPT_SETS:
        raise KeyError(prompts)
    data = SYSTEMS[system]()
    if prompts == "long":
        for name, text in LONG_PROMPTS[system].items():
            data["agents"][name]["prompt"] = text
    return data

DEFECTS = FAMILIES  # the defect families (defects.py)


@dataclass(frozen=True)
class Case:
    """One system with one planted defect instance (``defect`` None: the clean system).

    ``defect`` is the family; ``agent`` (None: the family's default agent in this system),
    ``wording`` and ``position`` pick the instance (:mod:`agentgrad.benchmarks.ablation.defects`)."""

    system: str
    defect: str | None
    wording: int = 0
    position: str = "second"
    agent: str | None = None
    prompts: str = "short"  # the prompt set (PROMPT_SETS); a case's name is the same in both

    @property
    def name(self) -> str:
        if not self.defect:
            return f"{self.system}-clean"
        return f"{self.system}-{self.defect}-{self.bugged_agent}-w{self.wording}-{self.position}"

    @property
    def bugged_agent(self) -> str | None:
        return (self.agent or AGENTS[(self.system, self.defect)][0]) if self.defect else None

    @property
    def defect_line(self) -> str | None:
        return defect_line(self.system, self.defect, self.bugged_agent, self.wording) if self.defect else None

    def config(self, model: dict[str, Any]) -> SystemConfig:
        """The system, every agent on ``model`` (a models: entry), the defect's line planted in the
        bugged agent's prompt at the instance's position."""
        data = system_data(self.system, self.prompts)
        data["name"] = self.name
        data["models"] = {"default": model}
        data["settings"] = {"max_new_tokens": 24}
        for a in data["agents"].values():
            a["model"] = "default"
        if self.defect:
            agent = data["agents"][self.bugged_agent]
            agent["prompt"] = plant(agent["prompt"], self.defect_line, self.position)
        return validate(SystemConfig, data, f"ablation case {self.name}")


def cases(systems: list[str] | None = None, defects: list[str] | None = None,
          wordings: int | tuple[int, int] | None = None, positions: int | None = None,
          agents: int | None = None, prompts: str = "short") -> list[Case]:
    """Every instance of the families ``defects`` in ``systems``: per family and system, each of its
    agents (the first ``agents``), wordings (the first ``wordings``, or the indices ``lo..hi`` of a
    pair: the wordings added after a screen) and positions (the first ``positions`` of ``second,
    first, last``; ``last`` left out where it is the same prompt as ``second``); None: all. Ordered
    system, family, agent, wording, position. ``prompts``: the prompt set the instances are planted in."""
    lo, hi = (0, wordings) if not isinstance(wordings, tuple) else (wordings[0], wordings[1] + 1)
    out = []
    for s in systems or list(SYSTEMS):
        clean = system_data(s, prompts)["agents"]
        for d in defects or DEFECTS:
            for a in AGENTS[(s, d)][:agents]:
                for w in range(len(WORDINGS[d][AGENT_KINDS[s][a]]))[lo:hi]:
                    line = defect_line(s, d, a, w)
                    for pos in POSITIONS[:positions]:
                        # a one-sentence prompt has no "rest": its last position is its second
                        if pos == "last" and plant(clean[a]["prompt"], line, pos) == plant(clean[a]["prompt"], line, "second"):
                            continue
                        out.append(Case(s, d, w, pos, a, prompts))
    return out
