"""The standard evaluator's input read as it reads it: every placeholder spelling of the published
systems' files, its state normalisation, its active domains, and dialogues with fewer turns."""

import json
import os
from pathlib import Path

import pytest

from agentgrad.benchmarks.multiwoz.data import Dialogue, Turn
from agentgrad.benchmarks.multiwoz.db import VenueDB
from agentgrad.benchmarks.multiwoz.evaluator import active_domains, goal_of, venue_verdict
from agentgrad.benchmarks.multiwoz.standard import standard_response
from agentgrad.benchmarks.multiwoz.standard_input import predicted_state, slot_domains, standard_state
from agentgrad.cli import main
from agentgrad.errors import ConfigError
from conftest import ROOT, run_script

DATA = Path(os.environ.get("AGENTGRAD_DATA_DIR", "data")) / "multiwoz"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="MultiWOZ data not found (set AGENTGRAD_DATA_DIR)")


@pytest.fixture(scope="module")
def db():
    return VenueDB()


# A cheap Italian restaurant in the centre (3 in the database: pizza hut city centre, ask restaurant,
# zizzi cambridge), booked, with its phone, address and postcode; then a train Cambridge -> Ely on
# Monday after 09:00 (8 in the database), with its id.
GOAL = goal_of(Dialogue("hand", [Turn("u", "s", {})] * 3, {
    "restaurant": {"info": {"food": "italian", "area": "centre", "pricerange": "cheap"},
                   "reqt": ["phone", "address", "postcode"], "book": {"people": "2", "day": "monday", "time": "18:00"}},
    "train": {"info": {"departure": "cambridge", "destination": "ely", "day": "monday", "leaveAt": "09:00"},
              "reqt": ["trainID"]}}, ["restaurant", "train"]))
_FOOD = {"food": "italian", "area": "centre", "pricerange": "cheap"}
STATES = [{"restaurant": _FOOD}, {"restaurant": dict(_FOOD, people="2")},
          {"restaurant": dict(_FOOD, people="2"),
           "train": {"departure": "cambridge", "destination": "ely", "day": "monday", "leave": "09:00"}}]
BOOKED = [[], ["restaurant"], ["restaurant"]]
REPLIES = ["{name} is a cheap italian place in the {area} .",
           "booked , reference {ref} . phone {phone} , address {address} , {postcode} .",
           "{trainid} leaves at {leave} ."]
# the placeholder spellings of the published files (Tomiinek/MultiWOZ_Evaluation's predictions/)
STYLES = {
    "bare (AuGPT)": dict(name="[name]", area="[area]", ref="[reference]", phone="[phone]", address="[address]",
                         postcode="[postcode]", trainid="[id]", leave="[leave at]"),
    "value_ (DAMD, UBAR, PPTOD, MinTL, LABES, GALAXY)": dict(
        name="[value_name]s", area="[value_area]", ref="[value_reference]", phone="[value_phone]",
        address="[value_address]", postcode="[value_postcode]", trainid="[value_id]", leave="[value_leave]"),
    "domain_ (DoTS, HDNO, LAVA, SFN, SOLOIST)": dict(
        name="[restaurant_name]", area="[restaurant_area]", ref="[restaurant_reference]", phone="[restaurant_phone]",
        address="[restaurant_address]", postcode="[restaurant_postcode]", trainid="[train_id]", leave="[train_leave]"),
    "domain_slot (HDSA, MarCo, UniConv)": dict(
        name="[Restaurant_Name]", area="[restaurant_area]", ref="[train_reference]", phone="[restaurant_phone]",
        address="[restaurant_address]", postcode="[restaurant_postcode]", trainid="[train_trainid]",
        leave="[train_leaveat]"),
}


def _verdict(db, style, states=STATES, active=None):
    replies = [r.format(**style) for r in REPLIES]
    return venue_verdict(GOAL, replies, [predicted_state(s, "test") for s in states], BOOKED, db, active)


@needs_data
@pytest.mark.parametrize("style", STYLES, ids=list(STYLES))
def test_each_delexicalisation_style_informs_and_succeeds(db, style):
    r = _verdict(db, STYLES[style])
    assert r["offered"] == {"restaurant": ["19210", "19229", "29652"], "train": r["offered"]["train"]}
    assert len(r["offered"]["train"]) == 8 and r["match"] == {"restaurant": True, "train": True}
    assert r["provided"] == {"restaurant": ["ADDRESS", "PHONE", "POST", "REFERENCE"], "train": ["TRAINID"]}
    assert r["inform"] and r["success"]


@needs_data
def test_placeholders_the_standard_evaluator_does_not_read_give_nothing(db):
    # [value_trainid] and [taxi_reference] are no names of its table; [restaurant_id] is an ID, not a TRAINID
    style = dict(STYLES["value_ (DAMD, UBAR, PPTOD, MinTL, LABES, GALAXY)"], ref="[taxi_reference]",
                 trainid="[value_trainid] or [restaurant_id]")
    r = _verdict(db, style)
    assert r["provided"] == {"restaurant": ["ADDRESS", "PHONE", "POST"], "train": []}
    # no train offered while its id was requested: the train domain is not informed
    assert r["match"] == {"restaurant": True, "train": False} and not r["inform"] and not r["success"]


def test_standard_response_tokens():
    assert standard_response("[Value_Name]s is at [hotel_address] , [value_area] .") == "NAME is at ADDRESS ,  ."
    assert standard_response("[train] [value_id] [train_trainid] [ref] [police_postcode]") == \
           "TRAINID TRAINID TRAINID REFERENCE POST"
    assert standard_response("[taxi_name] [restaurant_id] [hospital_reference] [price range]") == "   "


def test_states_are_normalised_as_the_standard_evaluator_does():
    state = {"train": {"Arrive By": "5:30 pm", "leave at": "after 9:15", "day": "Monday"},
             "hotel": {"name": "Lime House", "parking": "free", "area": "not mentioned", "type": "guest house"}}
    assert standard_state(state, "t") == {
        "train": {"arriveby": "17:30", "leaveat": "09:15", "day": "Monday"},  # other values keep their case
        "hotel": {"name": "limehouse", "parking": "yes", "area": "not mentioned", "type": "guesthouse"}}
    # our flat shape reads the same way
    assert predicted_state({"train-arriveby": "5:30 pm", "hotel-book day": "monday"}, "t") == \
           {"train": {"arriveby": "17:30"}, "hotel": {"bookday": "monday"}}
    # an unset spelling stays in the state: it is a change of its domain
    states = [{}, {"hotel": {"area": "not mentioned"}}, {"hotel": {"area": "not mentioned"}, "taxi": {"leave": "x"}}]
    assert active_domains([standard_state(s, "t") for s in states]) == [[], ["hotel"], ["taxi"]]
    for bad, msg in [({"hotel": {"stars": 4}}, "must be a string"), ({"hotel": "east"}, "each domain"),
                     (["x"], "each domain")]:
        with pytest.raises(ConfigError, match=msg):
            standard_state(bad, "dialogue 'x' turn 0")


@needs_data
def test_a_none_value_constrains_the_query(db):
    # "none" is not a "don't care": no restaurant serves food "none", so the offer is empty
    states = [{"restaurant": dict(_FOOD, food="none")}] + STATES[1:]
    r = _verdict(db, STYLES["bare (AuGPT)"], states, active=[["restaurant"], [], ["train"]])
    assert r["offered"]["restaurant"] == [] and r["match"]["restaurant"] is False and not r["inform"]


@needs_data
def test_active_domains_from_the_file_or_the_placeholders(db):
    assert slot_domains("[hotel_name] in the [value_area] , [train] at [Taxi_phone]") == ["hotel", "train", "taxi"]
    assert slot_domains("[value_name] is [price range]") == []
    style = STYLES["value_ (DAMD, UBAR, PPTOD, MinTL, LABES, GALAXY)"]
    # placeholders without a domain name none: nothing is offered or provided
    replies = [r.format(**style) for r in REPLIES]
    r = _verdict(db, style, active=[slot_domains(x) for x in replies])
    assert r["provided"] == {"restaurant": [], "train": []} and not r["inform"]
    # the file's domains are taken as given: the restaurant never active, only the train
    r = _verdict(db, style, active=[["train"]] * 3)
    assert r["match"] == {"restaurant": False, "train": True} and r["provided"]["restaurant"] == []


# PMUL3688 has 6 turns in the data: an attraction in the centre (address requested), then a train
# Cambridge -> Stansted Airport on Friday after 08:45, booked in turns 4 and 5 (reference requested).
# PPTOD's file has its first 5 turns only.
_PMUL3688 = [
    ({"attraction": {"area": "centre"}}, "there are [value_choice] attractions in the [value_area] ."),
    ({"attraction": {"area": "centre"}}, "[value_name] is in the [value_area] , at [value_address] ."),
    ({"attraction": {"area": "centre"}, "train": {"destination": "stansted airport", "day": "friday"}},
     "where from ?"),
    ({"attraction": {"area": "centre"}, "train": {"day": "friday", "leave": "08:45", "destination": "stansted airport",
                                                  "departure": "cambridge"}}, "[value_id] leaves at [value_leave] ."),
    ({"attraction": {"area": "centre"}, "train": {"day": "friday", "leave": "08:45", "destination": "stansted airport",
                                                  "departure": "cambridge", "people": "3"}},
     "booked , reference number is : [value_reference] ."),
]


@pytest.mark.slow
@needs_data
def test_a_dialogue_with_fewer_turns_is_scored_on_the_turns_it_has(tmp_path, capsys):
    def score(turns, name):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"pmul3688": turns}))
        assert main(["bench", "multiwoz", "score", str(path), "--out", str(tmp_path / name)]) == 0
        return json.loads((tmp_path / name / "metrics.json").read_text())

    five = [{"state": s, "response": r} for s, r in _PMUL3688]
    m = score(five, "five")
    assert (m["inform"], m["success"], m["short_dialogues"], m["states"]) == (100.0, 100.0, 1, "predicted")
    assert "1 dialogue(s) have fewer turns than the data" in capsys.readouterr().out
    # four turns: the reference (turn 4) was never given: informed, not successful
    m = score(five[:4], "four")
    assert (m["inform"], m["success"]) == (100.0, 0.0)
    # no states: the data's gold states (2.1 labels), said in metrics.json and in one printed line
    m = score([{"response": r} for _, r in _PMUL3688], "bare")
    assert (m["inform"], m["success"], m["jga"]) == (100.0, 100.0, None)
    assert m["states"].startswith("gold: MultiWOZ 2.1 labels") and "2.2" in m["states"]
    assert "Inform and Success read the gold: MultiWOZ 2.1 labels" in capsys.readouterr().out
    # bad input: one line, exit 2
    for turns, msg in [([{"state": {"train": {"day": 5}}, "response": "x"}], "must be a string"),
                       ([{"response": "x", "active_domains": "train"}], "must be a list of domain names"),
                       (five + five[-1:] + five[-1:], "has 7 turns; the data has 6")]:
        path = tmp_path / "bad.json"
        path.write_text(json.dumps({"PMUL3688.json": turns}))
        assert main(["bench", "multiwoz", "score", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], err
    assert main(["bench", "multiwoz", "score", str(path), "--domains", "guess"]) == 2
    assert "valid: file, states, slots" in capsys.readouterr().err


def test_the_doc_page_commands_run(tmp_path, capsys):
    root = ROOT
    doc = (root / "docs" / "multiwoz.md").read_text()
    script = root / "benchmarks" / "multiwoz_published.py"
    assert "python benchmarks/multiwoz_published.py PREDICTIONS_FOLDER" in doc
    out = run_script(str(script), "--help")
    assert out.returncode == 0 and "predictions" in out.stdout
    out = run_script(str(script), str(tmp_path))
    assert out.returncode == 1 and out.stderr.strip() == f"no *.json file in {tmp_path}"
    assert main(["bench", "multiwoz", "score", "--help"]) == 0
    assert "--domains" in capsys.readouterr().out
