"""The tau-bench retail tools, with tau-bench's semantics and error texts.

Each function takes the episode's database (``{"users", "orders", "products"}``) and the tool's
arguments, changes the database in place for write tools, and returns the observation text. The
schemas the agents see are tau-bench's own, read from the data directory (``tools.json``), in its
order: :func:`load_schemas`.
"""

from __future__ import annotations

import ast
import json
import math
import operator
from pathlib import Path
from typing import Any, Callable

from agentgrad.errors import ConfigError

DB = dict[str, Any]


class Table(dict):
    """A table of an episode's database that shares the records it has not changed with the
    database read from disk (copy on write): ``owned`` holds the keys of the records it copied.
    Every write goes through :func:`own`, so the shared records are never changed."""

    owned: set

    def __init__(self, records: dict[str, Any]):
        super().__init__(records)
        self.owned = set()


def own(db: DB, table: str, key: str) -> dict[str, Any]:
    """The episode's own copy of a record, to change (a plain dict table is changed in place)."""
    t = db[table]
    if isinstance(t, Table) and key not in t.owned:
        t[key] = json.loads(json.dumps(t[key]))
        t.owned.add(key)
    return t[key]


def find_user_id_by_email(db: DB, email: str) -> str:
    for user_id, profile in db["users"].items():
        if profile["email"].lower() == email.lower():
            return user_id
    return "Error: user not found"


def find_user_id_by_name_zip(db: DB, first_name: str, last_name: str, zip: str) -> str:
    for user_id, profile in db["users"].items():
        name = profile["name"]
        if (name["first_name"].lower() == first_name.lower() and name["last_name"].lower() == last_name.lower()
                and profile["address"]["zip"] == zip):
            return user_id
    return "Error: user not found"


def get_order_details(db: DB, order_id: str) -> str:
    return json.dumps(db["orders"][order_id]) if order_id in db["orders"] else "Error: order not found"


def get_product_details(db: DB, product_id: str) -> str:
    return json.dumps(db["products"][product_id]) if product_id in db["products"] else "Error: product not found"


def get_user_details(db: DB, user_id: str) -> str:
    return json.dumps(db["users"][user_id]) if user_id in db["users"] else "Error: user not found"


def list_all_product_types(db: DB) -> str:
    names = {p["name"]: p["product_id"] for p in db["products"].values()}
    return json.dumps(dict(sorted(names.items())))


POW_BITS = 1_000_000  # an integer power beyond this many bits is refused, not computed


def _pow(base: Any, exp: Any) -> Any:
    """``base ** exp``, except that an integer power of more than ``POW_BITS`` bits is an error: tau-bench's
    eval() would compute ``10**10**10`` for hours (holding the interpreter lock, so every concurrent
    episode stalls) to end, at best, in "int too large to convert to float"."""
    if isinstance(base, int) and isinstance(exp, int) and abs(base) > 1 and exp * math.log2(abs(base)) > POW_BITS:
        raise OverflowError(f"the power has more than {POW_BITS} bits; use smaller numbers")
    return base ** exp


_OPS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Pow: _pow, ast.Mod: operator.mod,
    ast.USub: operator.neg, ast.UAdd: operator.pos,
}


def _arith(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith(node.left), _arith(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith(node.operand))
    raise ValueError("unsupported expression")


def calculate(db: DB, expression: str) -> str:
    if not all(ch in "0123456789+-*/(). " for ch in expression):
        return "Error: invalid characters in expression"
    try:  # arithmetic only: parsed and evaluated node by node, never eval()
        # eval() (tau-bench's) strips leading and trailing spaces and tabs; ast.parse does not
        return str(round(float(_arith(ast.parse(expression.strip(" \t"), "<string>", mode="eval"))), 2))
    except Exception as e:
        return f"Error: {e}"


def think(db: DB, thought: str) -> str:
    return ""


def transfer_to_human_agents(db: DB, summary: str) -> str:
    return "Transfer successful"


def _order(db: DB, order_id: str, status: str, verb: str) -> tuple[dict[str, Any] | None, str | None]:
    """The order if it exists and has ``status``, else tau-bench's error text."""
    if order_id not in db["orders"]:
        return None, "Error: order not found"
    if db["orders"][order_id]["status"] != status:
        return None, f"Error: non-{status} order cannot be {verb}"
    return own(db, "orders", order_id), None  # every caller changes the order


def _missing_item(wanted: list[str], order: dict[str, Any]) -> str | None:
    """The first wanted item id that the order does not hold often enough (duplicates count)."""
    have = [item["item_id"] for item in order["items"]]
    for item_id in wanted:
        if wanted.count(item_id) > have.count(item_id):
            return item_id
    return None


def _swap(db: DB, order: dict[str, Any], item_ids: list[str], new_item_ids: list[str],
          payment_method_id: str) -> tuple[float, dict[str, Any] | None, str | None]:
    """Checks shared by exchanges and item modifications: (price difference, payment method, error)."""
    missing = _missing_item(item_ids, order)
    if missing is not None:
        return 0, None, f"Error: {missing} not found"
    if len(item_ids) != len(new_item_ids):
        return 0, None, "Error: the number of items to be exchanged should match"
    diff = 0
    for item_id, new_id in zip(item_ids, new_item_ids):
        item = next(i for i in order["items"] if i["item_id"] == item_id)
        variants = db["products"][item["product_id"]]["variants"]
        if not (new_id in variants and variants[new_id]["available"]):
            return 0, None, f"Error: new item {new_id} not found or available"
        diff += variants[new_id]["price"] - item["price"]
    methods = db["users"][order["user_id"]]["payment_methods"]
    if payment_method_id not in methods:
        return 0, None, "Error: payment method not found"
    return diff, methods[payment_method_id], None


def cancel_pending_order(db: DB, order_id: str, reason: str) -> str:
    order, error = _order(db, order_id, "pending", "cancelled")
    if error:
        return error
    if reason not in ("no longer needed", "ordered by mistake"):
        return "Error: invalid reason"
    refunds = []
    for payment in order["payment_history"]:
        pid = payment["payment_method_id"]
        refunds.append({"transaction_type": "refund", "amount": payment["amount"], "payment_method_id": pid})
        if "gift_card" in pid:  # gift cards are refunded at once
            method = own(db, "users", order["user_id"])["payment_methods"][pid]
            method["balance"] = round(method["balance"] + payment["amount"], 2)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"].extend(refunds)
    return json.dumps(order)


def exchange_delivered_order_items(db: DB, order_id: str, item_ids: list[str], new_item_ids: list[str],
                                   payment_method_id: str) -> str:
    order, error = _order(db, order_id, "delivered", "exchanged")
    if error:
        return error
    diff, method, error = _swap(db, order, item_ids, new_item_ids, payment_method_id)
    if error:
        return error
    diff = round(diff, 2)  # rounded before the balance check here, not for item modifications
    if method["source"] == "gift_card" and method["balance"] < diff:
        return "Error: insufficient gift card balance to pay for the price difference"
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = diff
    return json.dumps(order)


def modify_pending_order_address(db: DB, order_id: str, address1: str, address2: str, city: str, state: str,
                                 country: str, zip: str) -> str:
    order, error = _order(db, order_id, "pending", "modified")
    if error:
        return error
    order["address"] = {"address1": address1, "address2": address2, "city": city, "state": state,
                        "country": country, "zip": zip}
    return json.dumps(order)


def modify_pending_order_items(db: DB, order_id: str, item_ids: list[str], new_item_ids: list[str],
                               payment_method_id: str) -> str:
    order, error = _order(db, order_id, "pending", "modified")
    if error:
        return error
    diff, method, error = _swap(db, order, item_ids, new_item_ids, payment_method_id)
    if error:
        return error
    if method["source"] == "gift_card" and method["balance"] < diff:
        return "Error: insufficient gift card balance to pay for the new item"
    order["payment_history"].append({"transaction_type": "payment" if diff > 0 else "refund", "amount": abs(diff),
                                     "payment_method_id": payment_method_id})
    if method["source"] == "gift_card":
        method = own(db, "users", order["user_id"])["payment_methods"][payment_method_id]
        method["balance"] = round(method["balance"] - diff, 2)
    for item_id, new_id in zip(item_ids, new_item_ids):
        item = next(i for i in order["items"] if i["item_id"] == item_id)
        variant = db["products"][item["product_id"]]["variants"][new_id]
        item["item_id"], item["price"], item["options"] = new_id, variant["price"], variant["options"]
    order["status"] = "pending (item modified)"
    return json.dumps(order)


def modify_pending_order_payment(db: DB, order_id: str, payment_method_id: str) -> str:
    order, error = _order(db, order_id, "pending", "modified")
    if error:
        return error
    methods = db["users"][order["user_id"]]["payment_methods"]
    if payment_method_id not in methods:
        return "Error: payment method not found"
    history = order["payment_history"]
    if len(history) > 1 or history[0]["transaction_type"] != "payment":
        return "Error: there should be exactly one payment for a pending order"
    old_id = history[0]["payment_method_id"]
    if old_id == payment_method_id:
        return "Error: the new payment method should be different from the current one"
    amount = history[0]["amount"]
    method = methods[payment_method_id]
    if method["source"] == "gift_card" and method["balance"] < amount:
        return "Error: insufficient gift card balance to pay for the order"
    methods = own(db, "users", order["user_id"])["payment_methods"]  # balances change below
    method = methods[payment_method_id]
    history.extend([
        {"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
        {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id},
    ])
    if method["source"] == "gift_card":
        method["balance"] = round(method["balance"] - amount, 2)
    if "gift_card" in old_id:
        old = methods[old_id]
        old["balance"] = round(old["balance"] + amount, 2)
    return json.dumps(order)


def modify_user_address(db: DB, user_id: str, address1: str, address2: str, city: str, state: str, country: str,
                        zip: str) -> str:
    if user_id not in db["users"]:
        return "Error: user not found"
    user = own(db, "users", user_id)
    user["address"] = {"address1": address1, "address2": address2, "city": city, "state": state,
                       "country": country, "zip": zip}
    return json.dumps(user)


def return_delivered_order_items(db: DB, order_id: str, item_ids: list[str], payment_method_id: str) -> str:
    order, error = _order(db, order_id, "delivered", "returned")
    if error:
        return error
    if payment_method_id not in db["users"][order["user_id"]]["payment_methods"]:
        return "Error: payment method not found"
    if "gift_card" not in payment_method_id and payment_method_id != order["payment_history"][0]["payment_method_id"]:
        return "Error: payment method should be either the original payment method or a gift card"
    if _missing_item(item_ids, order) is not None:
        return "Error: some item not found"
    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return json.dumps(order)


FUNCTIONS: dict[str, Callable[..., str]] = {f.__name__: f for f in (
    calculate, cancel_pending_order, exchange_delivered_order_items, find_user_id_by_email, find_user_id_by_name_zip,
    get_order_details, get_product_details, get_user_details, list_all_product_types, modify_pending_order_address,
    modify_pending_order_items, modify_pending_order_payment, modify_user_address, return_delivered_order_items,
    think, transfer_to_human_agents)}


def load_schemas(root: Path) -> list[dict[str, Any]]:
    """The tools' schemas exactly as tau-bench gives them to its agent, in its order (``tools.json``)."""
    path = root / "tools.json"
    try:
        schemas = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None
    try:
        names = [s["function"]["name"] for s in schemas]
    except (TypeError, KeyError):
        raise ConfigError(f"{path}: every entry must be a tool schema with function.name") from None
    if sorted(names) != sorted(FUNCTIONS):
        raise ConfigError(f"{path} names {sorted(set(names) ^ set(FUNCTIONS))} differently from the retail tools")
    return schemas


READ_TOOLS = ["find_user_id_by_email", "find_user_id_by_name_zip", "get_order_details", "get_product_details",
              "get_user_details", "list_all_product_types", "calculate", "think"]
WRITE_TOOLS = ["cancel_pending_order", "exchange_delivered_order_items", "modify_pending_order_address",
               "modify_pending_order_items", "modify_pending_order_payment", "modify_user_address",
               "return_delivered_order_items"]
TERMINATE_TOOLS = ["transfer_to_human_agents"]
