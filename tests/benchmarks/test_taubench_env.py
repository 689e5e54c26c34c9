"""tau-bench retail environment: tool preconditions, error texts, reward, gold replay."""

import json
import os
from pathlib import Path

import pytest

from agentgrad.benchmarks.taubench import tools as T
from agentgrad.benchmarks.taubench.env import (RetailDatabase, RetailEnv, compute_reward, data_hash, gold_database,
                                               load_tasks, replay_gold)
from agentgrad.cli import main

pytestmark = pytest.mark.skipif(
    not (Path(os.environ.get("AGENTGRAD_DATA_DIR", "data")) / "taubench_retail").is_dir(),
    reason="tau-bench data not found (set AGENTGRAD_DATA_DIR)",
)


@pytest.fixture(scope="module")
def database():
    return RetailDatabase()


def find(db, pred):
    return next(o for o in db["orders"].values() if pred(o))


def gift_card(db, user_id):
    return next((k for k, m in db["users"][user_id]["payment_methods"].items() if m["source"] == "gift_card"), None)


def test_tasks_load(database):
    assert [len(load_tasks(s)) for s in ("train", "dev", "test")] == [500, 20, 115]
    assert len(T.FUNCTIONS) == 16 and sorted(database.tool_names) == sorted(T.FUNCTIONS)
    assert all(s["function"]["parameters"]["type"] == "object" for s in database.schemas)
    assert T.calculate({}, "  2 + 3 * 4 ") == "14.0"  # spaces around, as tau-bench's eval accepts
    assert T.calculate({}, "2\t+ 1") == "Error: invalid characters in expression"  # a tab, as there
    assert T.calculate({}, "2 + x") == "Error: invalid characters in expression"
    # a power too large to compute is refused at once (tau-bench's eval would run for hours, stalling every
    # concurrent episode); large powers that can be computed still are, as there
    assert T.calculate({}, "10**10**10").startswith("Error: the power has more than")
    assert T.calculate({}, "(-9)**(9**9)").startswith("Error: the power has more than")
    assert T.calculate({}, "10**400/10**399") == "10.0" and T.calculate({}, "2**0.5") == "1.41"
    assert T.calculate({}, "10**400") == "Error: int too large to convert to float"


def test_fresh_copies_are_never_shared(database):
    a, b = RetailEnv(database), RetailEnv(database)
    order = next(iter(a.db["orders"]))
    T.own(a.db, "orders", order)["status"] = "changed"  # how every write tool changes a record
    assert a.db["orders"][order]["status"] == "changed"
    assert b.db["orders"][order]["status"] != "changed" and database.fresh()["orders"][order]["status"] != "changed"
    assert database.hash(a.db) == data_hash(a.db) != database.hash(b.db) == data_hash(b.db)


@pytest.mark.slow
def test_copy_on_write_databases_hash_and_leave_the_shared_one_unchanged(database):
    """Every gold replay of every split, the copy-on-write hash compared with the full one on one replay in
    five (dev, test) and one in 25 (train: the full hash is the slow one; benchmarks/taubench_hash_sweep.py
    compares them on every replay), and the database read from disk is exactly as it was (no tool wrote
    to a record it shares)."""
    before = database.snapshot()
    replayed = 0
    for split in ("dev", "test", "train"):
        for task in load_tasks(split):
            db = gold_database(database, task)
            if task.index % (25 if split == "train" else 5) == 0:
                assert database.hash(db) == data_hash(db)
            replayed += 1
    assert replayed == 635
    assert database.snapshot() == before


@pytest.mark.parametrize(
    "tool,make_args,error",
    [
        ("cancel_pending_order", lambda db: {"order_id": find(db, lambda o: o["status"] == "delivered")["order_id"],
                                              "reason": "no longer needed"}, "Error: non-pending order cannot be cancelled"),
        ("cancel_pending_order", lambda db: {"order_id": find(db, lambda o: o["status"] == "pending")["order_id"],
                                              "reason": "too expensive"}, "Error: invalid reason"),
        ("cancel_pending_order", lambda db: {"order_id": "#W0", "reason": "no longer needed"}, "Error: order not found"),
        ("return_delivered_order_items", lambda db: {"order_id": find(db, lambda o: o["status"] == "delivered")["order_id"],
                                                      "item_ids": ["0000000000"],
                                                      "payment_method_id": find(db, lambda o: o["status"] == "delivered")["payment_history"][0]["payment_method_id"]},
         "Error: some item not found"),
        ("exchange_delivered_order_items", lambda db: {"order_id": find(db, lambda o: o["status"] == "pending")["order_id"],
                                                        "item_ids": [], "new_item_ids": [], "payment_method_id": "x"},
         "Error: non-delivered order cannot be exchanged"),
        ("modify_pending_order_address", lambda db: {"order_id": find(db, lambda o: o["status"] == "delivered")["order_id"],
                                                      **{k: "x" for k in ("address1", "address2", "city", "state", "country", "zip")}},
         "Error: non-pending order cannot be modified"),
        ("modify_user_address", lambda db: {"user_id": "nobody", **{k: "x" for k in ("address1", "address2", "city", "state", "country", "zip")}},
         "Error: user not found"),
        ("calculate", lambda db: {"expression": "2 + x"}, "Error: invalid characters in expression"),
        ("calculate", lambda db: {"expression": "1 / 0"}, "Error: division by zero"),
    ],
)
def test_preconditions_return_the_error_and_change_nothing(database, tool, make_args, error):
    env = RetailEnv(database)
    before = data_hash(env.db)
    assert env.step(tool, make_args(env.db)) == error
    assert data_hash(env.db) == before


def test_exchange_to_another_product_and_unknown_item(database):
    env = RetailEnv(database)
    order = find(env.db, lambda o: o["status"] == "delivered" and len({i["product_id"] for i in o["items"]}) > 1)
    a, b = order["items"][0], next(i for i in order["items"] if i["product_id"] != order["items"][0]["product_id"])
    pm = order["payment_history"][0]["payment_method_id"]
    before = data_hash(env.db)
    out = env.step("exchange_delivered_order_items",
                   {"order_id": order["order_id"], "item_ids": [a["item_id"]], "new_item_ids": [b["item_id"]], "payment_method_id": pm})
    assert out == f"Error: new item {b['item_id']} not found or available"
    out = env.step("exchange_delivered_order_items",
                   {"order_id": order["order_id"], "item_ids": ["123"], "new_item_ids": ["456"], "payment_method_id": pm})
    assert out == "Error: 123 not found"
    out = env.step("exchange_delivered_order_items",
                   {"order_id": order["order_id"], "item_ids": [a["item_id"]], "new_item_ids": [], "payment_method_id": pm})
    assert out == "Error: the number of items to be exchanged should match"
    assert data_hash(env.db) == before


def test_insufficient_gift_card_balance(database):
    env = RetailEnv(database)
    order = next(o for o in env.db["orders"].values() if o["status"] == "pending" and gift_card(env.db, o["user_id"])
                 and len(o["payment_history"]) == 1
                 and o["payment_history"][0]["payment_method_id"] != gift_card(env.db, o["user_id"]))
    gc = gift_card(env.db, order["user_id"])
    T.own(env.db, "users", order["user_id"])["payment_methods"][gc]["balance"] = 0.0  # writes go through own()
    before = data_hash(env.db)
    out = env.step("modify_pending_order_payment", {"order_id": order["order_id"], "payment_method_id": gc})
    assert out == "Error: insufficient gift card balance to pay for the order"
    assert data_hash(env.db) == before


def test_cancel_refunds_and_wrong_arguments(database):
    env = RetailEnv(database)
    order = find(env.db, lambda o: o["status"] == "pending")
    out = json.loads(env.step("cancel_pending_order", {"order_id": order["order_id"], "reason": "ordered by mistake"}))
    assert out["status"] == "cancelled" and out["payment_history"][-1]["transaction_type"] == "refund"
    assert env.step("get_order_details", {"id": "x"}).startswith("Error: ")  # bad argument name: text, no raise
    assert env.step("fly_to_the_moon", {}) == "Unknown action fly_to_the_moon"


def test_reward_actions_and_outputs(database):
    task = next(t for t in load_tasks("test") if t.outputs)
    env = RetailEnv(database, task)
    r = env.reward()
    assert r.outputs == 0.0 and r.reward == 0.0
    env.respond("Sure: " + ", ".join(o.upper() for o in task.outputs))  # case and commas do not matter
    for a in task.actions:
        env.step(a.name, a.kwargs)
    r = env.reward()
    assert r.actions == 1.0 and r.outputs == 1.0 and r.reward == 1.0
    write = next(t for t in load_tasks("test") if any(a.name in T.WRITE_TOOLS for a in t.actions))
    assert compute_reward(database, write, database.fresh(), []).actions == 0.0  # nothing done: wrong database


@pytest.mark.slow
def test_every_gold_replay_earns_the_full_action_reward(database):
    """docs/taubench.md: 1.0 over all 635 tasks (train 500, dev 20, test 115), and 44 gold tool calls that
    tau-bench itself answers with an error."""
    assert {s: len(load_tasks(s)) for s in ("train", "dev", "test")} == {"train": 500, "dev": 20, "test": 115}
    res = replay_gold("all", database=database)
    assert (res["tasks"], res["action_reward"], res["failed"], res["tool_errors"]) == (635, 1.0, [], 44)


def test_replay_gold_dev_and_dump(tmp_path, database):
    res = replay_gold("dev", dump_dir=tmp_path, database=database)
    assert res["tasks"] == 20 and res["action_reward"] == 1.0 and not res["failed"]
    dumped = json.loads((tmp_path / "dev-0.json").read_text())
    assert set(dumped) == {"users", "orders", "products"}
    assert main(["bench", "taubench", "replay-gold", "--split", "dev"]) == 0


def test_tool_schemas_file_errors(tmp_path):
    from agentgrad.errors import ConfigError

    with pytest.raises(ConfigError, match="cannot read .*tools.json"):
        T.load_schemas(tmp_path)
    (tmp_path / "tools.json").write_text(json.dumps([{"type": "function", "function": {"name": "calculate"}}]))
    with pytest.raises(ConfigError, match="differently from the retail tools"):
        T.load_schemas(tmp_path)
    (tmp_path / "tools.json").write_text("[1]")
    with pytest.raises(ConfigError, match="function.name"):
        T.load_schemas(tmp_path)


def test_gold_hash_is_the_replayed_database_and_computed_once(database, monkeypatch):
    from agentgrad.benchmarks.taubench import env as E

    task = load_tasks("dev")[3]
    first = database.gold_hash(task)
    assert first == data_hash(E.gold_database(database, task))
    calls = []
    monkeypatch.setattr(E, "gold_database", lambda *a: calls.append(a) or {})
    assert database.gold_hash(task) == first and calls == []  # the second time comes from the cache
