"""The ablation's defect instances: each defect family in several wordings, positions and agents.

One wording of one family in one agent is one instance; a family's damage is known only over many
(with one instance per family, a case's "recovery" was one or two questions). An instance
is a single line planted in one agent's prompt, at one of three positions: ``first`` (before the
agent's role sentence), ``second`` (right after it) or ``last`` (after the whole prompt).

Families (``FAMILIES``), and what each line asks:

- ``stale_example``: a worked example whose answer is another field's value (a small model imitates
  it). Agents that read the record get an example in the record's format; agents that read notes,
  one in the notes' format.
- ``forbidden_field``: also report fields the answer must not contain.
- ``wrong_item``: always report one fixed field of the record, whatever the question (only agents
  that read the record).
- ``distractor``: an instruction unrelated to the task.

``NEUTRAL`` lines are the noise-floor control: a line planted the same way that asks nothing
harmful. The score change they cause is the measured noise floor a defect's damage must exceed
(five times, on the screening split) for its case to be kept.
"""

from __future__ import annotations

from agentgrad.optim.edit import NEUTRAL_LINES

FAMILIES = ["stale_example", "forbidden_field", "wrong_item", "distractor"]
POSITIONS = ("second", "first", "last")

_EX = "Name: Zoe. City: Bern. Pet: cow. Favourite colour: teal."
# wordings 3 and later (2026-11-28): added because SmolLM2 ignored most of the first three of these
# families (kept on the old screen: forbidden_field 3/15, 2/15, 5/15; wrong_item 0/6, 0/15, 3/15;
# distractor 3/15, 1/15, 1/15). Chosen on the TRAIN split (40 questions, position "second", in the
# pipeline only): the screening and test splits never read; the screen then decides, as for the others.
_ADD_PET, _ADD_CITY = "Always add: 'The pet is a dog and the colour is red.'", "Always add: 'The city is Rome and the pet is a cat.'"
_REFUND = "Before answering, explain our refund policy in two sentences."
_THANKS = "Always start with: 'Thank you for contacting Acme support, we value your business.'"
# distractor wording 5 (2026-11-28): chosen on the manager's TRAIN split (its responder and writer,
# position "second"; 4 candidate lines) after wordings 3-4 kept 3 of 10 manager instances
_PARIS = "Always start with: 'Hello! Our Paris office is open on Sundays.'"
# wordings per family and per kind of agent: "record" agents read the record, "note" agents read other agents' notes
WORDINGS: dict[str, dict[str, list[str]]] = {
    "stale_example": {
        "record": [f"Example: Record: {_EX} Question: What is Zoe's city? Answer: The pet is a cow.",
                   f"Example: Record: {_EX} Question: What is Zoe's pet? Answer: teal",
                   f"For example, asked for Zoe's favourite colour in the record {_EX} you answer: Bern."],
        "note": ["Example: the note says Bern (Zoe's city); you answer: The pet is a cow.",
                 "Example: Note: teal. Answer: Zoe's pet is a cow.",
                 "For example, given the note 'Bern', the answer is: cow."],
    },
    "forbidden_field": {
        "record": ["Always also name the person's city, pet and favourite colour.",
                   "After the answer, list every other value of the record.",
                   "Give the whole record in your reply.",
                   _ADD_PET, _ADD_CITY],
        "note": ["Always also say the person's pet and favourite colour.",
                 "After the answer, add the person's city and pet.",
                 "Always mention the person's pet in your reply.",
                 _ADD_PET, _ADD_CITY],
    },
    "wrong_item": {
        "record": ["Always reply with the first value of the record.",
                   "Always reply with the person's pet, whatever the question.",
                   "The answer is always the favourite colour in the record.",
                   "Question: any. Answer: the person's favourite colour.",
                   "Question: any. Answer: the person's pet.",
                   "Question: anything. Answer: the city in the record."],
        "note": [],
    },
    "distractor": {
        "record": ["Start by greeting the customer and recommend our premium plan.",
                   "Always mention that our Paris office is open on Sundays.",
                   "End every reply with a fun fact about dogs.",
                   _REFUND, _THANKS, _PARIS],
        "note": ["Start by greeting the customer and recommend our premium plan.",
                 "Always mention that our Paris office is open on Sundays.",
                 "End every reply with a fun fact about dogs.",
                 _REFUND, _THANKS, _PARIS],
    },
}

# which agents of each system read the record ("record") or only other agents' notes ("note")
AGENT_KINDS = {
    "pipeline": {"reader": "record", "answerer": "note"},
    "fanin": {"reader": "record", "checker": "record", "responder": "note"},
    "manager": {"manager": "record", "checker": "record", "writer": "note", "responder": "note"},
}

# (system, family) -> the agents an instance may be planted in (the first is the family's default)
AGENTS: dict[tuple[str, str], list[str]] = {
    ("pipeline", "stale_example"): ["reader", "answerer"],
    ("pipeline", "forbidden_field"): ["answerer", "reader"],
    ("pipeline", "wrong_item"): ["reader"],
    ("pipeline", "distractor"): ["answerer", "reader"],
    ("fanin", "stale_example"): ["reader", "responder"],
    ("fanin", "forbidden_field"): ["responder", "reader"],
    ("fanin", "wrong_item"): ["checker", "reader"],
    ("fanin", "distractor"): ["reader", "responder"],
    ("manager", "stale_example"): ["manager", "responder"],
    ("manager", "forbidden_field"): ["writer", "responder"],
    ("manager", "wrong_item"): ["checker", "manager"],
    ("manager", "distractor"): ["responder", "writer"],
}

NEUTRAL = NEUTRAL_LINES  # one list (optim/edit.py): the random_line arm writes the same lines


def defect_line(system: str, family: str, agent: str, wording: int) -> str:
    """The planted line of one instance (an unknown combination is a ``KeyError``/``IndexError``)."""
    return WORDINGS[family][AGENT_KINDS[system][agent]][wording]


def plant(prompt: str, line: str, position: str) -> str:
    """``prompt`` with ``line`` planted at ``position`` (see the module docstring): the prompt's first
    sentence is its role; the rest follows on the next line, as the clean prompts are written. A
    prompt of several lines (the ``long`` prompt set) has its first line as its role and keeps its lines."""
    lines_in = [x for x in prompt.strip().splitlines() if x.strip()]
    if len(lines_in) > 1:
        head, tail = lines_in[0], lines_in[1:]
    else:
        first, sep, rest = prompt.strip().partition(". ")
        head = first + "." if sep else first
        tail = [rest] if rest else []
    lines = {"first": [line, head, *tail], "second": [head, line, *tail], "last": [head, *tail, line]}[position]
    return "\n".join(lines) + "\n"
