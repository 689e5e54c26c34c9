"""The tau-bench retail environment: a fresh database per episode, the tools, and the reward.

Reward as tau-bench computes it: actions are right when the database after the episode hashes the
same as the database after replaying the task's gold actions on a fresh copy (terminating tools
skipped); outputs are right when every required string appears, lower-cased with commas removed,
in some reply to the user; the reward is their product.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agentgrad.benchmarks.data import benchmark_dir
from agentgrad.benchmarks.taubench import tools as T
from agentgrad.core.tools import Tool
from agentgrad.core.files import RunFiles
from agentgrad.errors import ConfigError

SPLITS = ("train", "dev", "test")


@dataclass
class Action:
    name: str
    kwargs: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kwargs": self.kwargs}


@dataclass
class RetailTask:
    split: str
    index: int
    user_id: str
    instruction: str
    actions: list[Action]
    outputs: list[str] = field(default_factory=list)


def load_tasks(split: str, data: str | Path | None = None) -> list[RetailTask]:
    """Tasks of ``split`` (train 500, dev 20, test 115) from the data directory."""
    if split not in SPLITS:
        raise ConfigError(f"unknown tau-bench split {split!r}; valid: {', '.join(SPLITS)}")
    path = benchmark_dir("taubench_retail", data) / f"tasks_{split}.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None
    return [RetailTask(split, i, t["user_id"], t["instruction"], [Action(a["name"], dict(a["kwargs"])) for a in t["actions"]],
                       list(t.get("outputs", []))) for i, t in enumerate(raw)]


def data_hash(db: dict[str, Any]) -> str:
    """A hash of the database content (key order does not matter; list order does)."""
    return hashlib.sha256(json.dumps(db, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class RetailDatabase:
    """The retail database as read once from disk; every episode gets its own deep copy."""

    def __init__(self, data: str | Path | None = None):
        base = benchmark_dir("taubench_retail", data)
        self.schemas = T.load_schemas(base)  # tau-bench's tool schemas, in its order
        self.tool_names = [t["function"]["name"] for t in self.schemas]
        self._schema = {t["function"]["name"]: t["function"] for t in self.schemas}
        root = base / "db"
        self._db = {}
        for name in ("users", "orders", "products"):
            try:
                self._db[name] = json.loads((root / f"{name}.json").read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as e:
                raise ConfigError(f"cannot read {root / (name + '.json')}: {e}") from None
        self.root = root
        # per record, its text as data_hash writes it: a changed record is written again, the rest reused
        self._records = {t: {k: json.dumps(v, sort_keys=True, ensure_ascii=False) for k, v in recs.items()}
                         for t, recs in self._db.items()}
        # per table, its keys in data_hash's order with their text (``"key": ``), written once
        self._keys = {t: [(k, json.dumps(k, ensure_ascii=False) + ": ") for k in sorted(recs)]
                      for t, recs in self._db.items()}
        self._gold: dict[str, str] = {}  # task's gold actions -> hash of the database they lead to
        self._gold_lock = threading.Lock()

    def snapshot(self) -> str:
        """The shared database's tables as one JSON text (keys sorted): two equal snapshots, no write."""
        return json.dumps(self._db, sort_keys=True)

    def gold_hash(self, task: "RetailTask") -> str:
        """The hash of the database after the task's gold actions, computed once per distinct gold
        (every trial of a task compares with the same one)."""
        key = json.dumps([[a.name, a.kwargs] for a in task.actions], sort_keys=True)
        with self._gold_lock:
            if key in self._gold:
                return self._gold[key]
        h = self.hash(gold_database(self, task))
        with self._gold_lock:
            self._gold[key] = h
        return h

    def fresh(self) -> dict[str, Any]:
        """The episode's database: tables that share the unchanged records with the one read from
        disk and copy a record before changing it (:class:`tools.Table`), so episodes never see each
        other's changes; a fresh database costs a few pointer copies, not a parse."""
        return {t: T.Table(recs) for t, recs in self._db.items()}

    def hash(self, db: dict[str, Any]) -> str:
        """``data_hash(db)``, reusing the text of every record the episode did not change."""
        parts = []
        for t in sorted(db):
            table, cached, shared = db[t], self._records.get(t, {}), self._db.get(t, {})
            owned = getattr(table, "owned", None)
            keys = self._keys[t] if t in self._keys and table.keys() == shared.keys() else \
                [(k, json.dumps(k, ensure_ascii=False) + ": ") for k in sorted(table)]
            recs = []
            for k, key_text in keys:
                v = table[k]
                text = cached.get(k) if owned is not None and k not in owned and v is shared.get(k) else None
                recs.append(key_text + (text if text is not None else json.dumps(v, sort_keys=True, ensure_ascii=False)))
            parts.append(json.dumps(t, ensure_ascii=False) + ": {" + ", ".join(recs) + "}")
        return hashlib.sha256(("{" + ", ".join(parts) + "}").encode()).hexdigest()

    def make_tools(self, names: list[str], run: Callable[[str, dict[str, Any]], str]) -> list[Tool]:
        """Agent tools with tau-bench's schemas, in tau-bench's order, each calling ``run(name, arguments)``."""
        unknown = sorted(set(names) - set(self._schema))
        if unknown:
            raise ConfigError(f"unknown retail tool(s) {unknown}; valid: {', '.join(self.tool_names)}")
        return [Tool(n, self._schema[n]["description"], self._schema[n]["parameters"],
                     (lambda n: lambda **kw: run(n, kw))(n), ends_episode=n in T.TERMINATE_TOOLS)
                for n in self.tool_names if n in names]


class RetailEnv:
    """One episode: its own database, the actions taken, the replies to the user.

    ``db`` shares every record it has not changed with the database read from disk (copy on
    write): code that changes a record takes it with ``tools.own(db, table, key)``, as the write
    tools do, never by writing into ``db[table][key]`` directly.
    """

    def __init__(self, database: RetailDatabase, task: RetailTask | None = None, max_steps: int | None = None):
        self.database = database
        self.task = task
        self.db = database.fresh()
        self.actions: list[Action] = []
        self.replies: list[str] = []
        self.done = False
        self.max_steps = max_steps  # tau-bench's agent loop: at most 30 steps (tool calls and replies)
        self.steps = 0
        self.limit_reached = False

    @property
    def exhausted(self) -> bool:
        """No step is left: the next tool call or reply would pass the limit."""
        return self.max_steps is not None and self.steps >= self.max_steps

    def _take_step(self) -> bool:
        if self.exhausted:
            self.limit_reached = True
            return False
        self.steps += 1
        return True

    def step(self, name: str, kwargs: dict[str, Any]) -> str:
        """Run a tool as tau-bench does: an error never raises, it comes back as text.

        Past the step limit nothing is done (the episode ends with reward 0)."""
        if not self._take_step():
            return f"Error: the episode's limit of {self.max_steps} steps is reached; nothing was done"
        self.actions.append(Action(name, dict(kwargs)))
        if name not in T.FUNCTIONS:
            return f"Unknown action {name}"
        try:
            out = T.FUNCTIONS[name](self.db, **kwargs)
        except Exception as e:  # e.g. a wrong argument name: tau-bench answers "Error: <exception>"
            out = f"Error: {e}"
        if name in T.TERMINATE_TOOLS:
            self.done = True
        return out

    def respond(self, text: str) -> bool:
        """Record a reply to the user (the ``respond`` action of tau-bench); False past the step limit."""
        if not self._take_step():
            return False
        self.actions.append(Action("respond", {"content": text}))
        self.replies.append(text)
        return True

    def tools(self, names: list[str] | None = None) -> list[Tool]:
        """The tools as agent tools bound to this episode's database."""
        return self.database.make_tools(names or self.database.tool_names, self.step)

    def reward(self) -> "Reward":
        if self.task is None:
            raise ConfigError("this episode has no task to be rewarded against")
        return compute_reward(self.database, self.task, self.db, self.replies)


@dataclass
class Reward:
    actions: float  # 1 when the final database equals the gold one
    outputs: float  # 1 when every required output string was said
    outputs_found: dict[str, bool]
    reward: float  # actions * outputs
    gold_hash: str
    hash: str
    failed: str | None = None  # "error" or "step_limit": the episode did not end, and scores 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def as_failed(self, why: str) -> "Reward":
        """Reward 0, as tau-bench gives an episode that raised or ran out of steps (the hashes are kept)."""
        return Reward(0.0, 0.0, {o: False for o in self.outputs_found}, 0.0, self.gold_hash, self.hash, why)


def gold_database(database: RetailDatabase, task: RetailTask) -> dict[str, Any]:
    """The database after replaying the task's gold actions on a fresh copy."""
    env = RetailEnv(database, task)
    for a in task.actions:
        if a.name not in T.TERMINATE_TOOLS and a.name != "respond":
            env.step(a.name, a.kwargs)
    return env.db


def compute_reward(database: RetailDatabase, task: RetailTask, db: dict[str, Any], replies: list[str]) -> Reward:
    gold = database.gold_hash(task)
    got = database.hash(db)
    found = {o: any(o.lower() in r.lower().replace(",", "") for r in replies) for o in task.outputs}
    r_actions = 1.0 if got == gold else 0.0
    r_outputs = 1.0 if all(found.values()) else 0.0
    return Reward(r_actions, r_outputs, found, r_actions * r_outputs, gold, got)


def replay_gold(split: str, data: str | Path | None = None, dump_dir: Path | None = None,
                database: RetailDatabase | None = None) -> dict[str, Any]:
    """Replay every task's gold actions through the environment; the action reward of each."""
    database = database or RetailDatabase(data)
    splits = SPLITS if split == "all" else (split,)
    per_task, errors = [], 0
    for s in splits:
        for task in load_tasks(s, data):
            env = RetailEnv(database, task)
            for a in task.actions:
                out = env.step(a.name, a.kwargs)
                errors += out.startswith("Error") or out.startswith("Unknown action")
            r = env.reward()
            per_task.append({"split": s, "index": task.index, "actions": r.actions})
            if dump_dir is not None:
                RunFiles(dump_dir).write_text(f"{s}-{task.index}.json", text=json.dumps(env.db, ensure_ascii=False))
    n = len(per_task)
    return {"tasks": n, "action_reward": sum(t["actions"] for t in per_task) / max(n, 1),
            "failed": [t for t in per_task if t["actions"] < 1], "tool_errors": errors}
