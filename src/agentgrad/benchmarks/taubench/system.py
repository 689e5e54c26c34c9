"""The paper's multi-agent retail system, the single-agent baseline, and the conversation loop.

Multi-agent (one turn per customer message): the **manager** holds the policy (wiki.md), reads
the conversation and the findings so far, and routes the turn (``ROUTE: worker, ...``) with an
instruction; each routed **worker** acts with only its own tools; the **responder** writes the
reply to the customer from the conversation, the manager's instruction and the findings.
Single-agent: one agent with the policy and all tools, keeping its whole tool-calling history.

Both run a full conversation with a customer (a :class:`~.user.User`) over a fresh database per
episode, record every customer line as an input node, and follow tau-bench's episode rules: the
conversation ends on the customer's stop token, on a transfer to a human agent, or at the limit of
30 agent steps (tool calls and replies), which scores 0, as does an episode that fails (a model
error, a context overflow). Prompts are YAML (``prompts/multi.yaml``, ``single.yaml``);
``{policy}`` in a prompt is replaced by wiki.md at load time and protected from rewrites.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agentgrad.benchmarks.common import build_agents, load_prompts, named_line, require_agents
from agentgrad.benchmarks.data import benchmark_dir
from agentgrad.benchmarks.taubench.env import RetailDatabase, RetailEnv, RetailTask, Reward
from agentgrad.benchmarks.taubench.user import User
from agentgrad.core.config import SystemConfig
from agentgrad.core.agent import Output, tool_report, transcript
from agentgrad.core.system import System
from agentgrad.core.text import Text
from agentgrad.core.tools import Tool
from agentgrad.core.trace import current_trace
from agentgrad.errors import ConfigError, ModelError
from agentgrad.core.model import LanguageModel

WORKERS: dict[str, list[str]] = {
    "user_resolution": ["find_user_id_by_email", "find_user_id_by_name_zip", "get_user_details"],
    "retrieval": ["get_order_details", "get_product_details", "list_all_product_types", "calculate"],
    "post_delivery": ["return_delivered_order_items", "exchange_delivered_order_items"],
    "order_modification": ["cancel_pending_order", "modify_pending_order_address", "modify_pending_order_items",
                           "modify_pending_order_payment"],
    "user_profile": ["modify_user_address"],
}
MANAGER_TOOLS = ["transfer_to_human_agents", "think"]
TOOL_OWNER = {t: w for w, ts in WORKERS.items() for t in ts}

_ENV: contextvars.ContextVar[RetailEnv] = contextvars.ContextVar("agentgrad_taubench_env")


def read_policy(data: str | Path | None = None) -> str:
    path = benchmark_dir("taubench_retail", data) / "wiki.md"
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e}") from None


def load_retail_config(system: str, prompts: str | Path | None, policy: str) -> SystemConfig:
    """The prompts YAML with ``{policy}`` filled in and protected (the optimizer may not drop it)."""
    cfg = load_prompts("taubench", system, prompts)
    for spec in cfg.agents.values():
        if "{policy}" in spec.prompt:
            spec.prompt = spec.prompt.replace("{policy}", policy)
            spec.protected = list(dict.fromkeys([*spec.protected, policy]))
    return cfg


@dataclass
class RetailOutcome:
    """What one conversation produced: the reward, the actions, the replies and how it ended."""

    task: RetailTask
    reward: Reward
    ended_by: str
    turns: int
    actions: list[dict[str, Any]]
    replies: list[str]
    reply_nodes: list[int] = field(default_factory=list)
    error: str | None = None

    def __str__(self) -> str:
        return self.replies[-1] if self.replies else ""

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.task.split, "index": self.task.index, "reward": self.reward.to_dict(),
                "ended_by": self.ended_by, "turns": self.turns, "actions": self.actions, "replies": self.replies,
                "error": self.error}


class RetailSystem(System):
    """The conversation loop shared by both systems; subclasses define one turn.

    Args:
        cfg: agents, prompts and models (see ``prompts/*.yaml``).
        models: the models of ``cfg``.
        make_user: builds the customer of an episode from a seed (the trial number).
        database: the retail database (each episode gets a fresh copy).
        max_steps: tau-bench's limit of agent steps (tool calls and replies to the customer); an
            episode that reaches it without the customer ending scores 0.
    """

    kind = "base"
    required: list[str] = []

    def __init__(self, cfg: SystemConfig, models: dict[str, LanguageModel], make_user: Callable[[int], User],
                 database: RetailDatabase, max_steps: int = 30):
        require_agents(cfg, self.required, f"the {self.kind} tau-bench system")
        self.cfg = cfg
        self.name = f"taubench-{self.kind}"
        self.make_user = make_user
        self.database = database
        self.max_steps = max_steps
        self.agents_ = build_agents(cfg, models, self.tools_for)

    def episode_tools(self, names: list[str]) -> list[Tool]:
        """Tools with tau-bench's schemas that act on the database of the episode being run (each has its own)."""
        return self.database.make_tools(names, lambda name, kw: _ENV.get().step(name, kw))

    def tools_for(self, agent: str) -> list[Tool]:
        return []

    def start(self) -> dict[str, Any]:
        """The state of a new conversation (kept per episode, so episodes can run concurrently)."""
        return {}

    def turn(self, conv: dict[str, Any], message: Text) -> Output:
        raise NotImplementedError

    def forward(self, task: RetailTask, trial: int = 0) -> RetailOutcome:
        if not isinstance(task, RetailTask):
            raise ConfigError("a tau-bench example needs a 'task' field holding a RetailTask")
        trace = current_trace()
        env = RetailEnv(self.database, task, self.max_steps)
        token = _ENV.set(env)
        user = self.make_user(trial)
        ended_by, turns, error, reply_nodes = "step_limit", 0, None, []
        conv = self.start()
        try:
            text = user.reset(task.instruction)
            while True:
                if user.is_stop(text):
                    ended_by = "user_stop"
                    break
                if env.exhausted:  # the agent's next step would pass the limit
                    env.limit_reached = True
                    break
                message = trace.input(text, name="customer", turn=turns)
                reply = self.turn(conv, message)
                turns += 1
                if env.limit_reached:
                    break
                if env.done:
                    ended_by = "transfer"
                    break
                if not env.respond(str(reply)):
                    break
                reply_nodes.append(reply.node)
                text = user.reply(str(reply))
        except ModelError as e:  # a model failure (agent or customer, a context overflow): reward 0
            ended_by, error = "error", str(e)
        finally:
            _ENV.reset(token)
        trace.meta.update(task={"split": task.split, "index": task.index}, ended_by=ended_by, steps=env.steps)
        actions = [a.to_dict() for a in env.actions if a.name != "respond"]
        reward = env.reward()
        if ended_by in ("error", "step_limit"):  # tau-bench scores an episode that did not end as 0
            reward = reward.as_failed(ended_by)
        return RetailOutcome(task, reward, ended_by, turns, actions, list(env.replies), reply_nodes, error)


class MultiAgentRetail(RetailSystem):
    """Manager (policy, routing) -> workers (their own tools) -> responder, once per customer message."""

    kind = "multi"
    required = ["manager", *WORKERS, "responder"]
    max_findings = 8

    def tools_for(self, agent: str) -> list[Tool]:
        if agent == "manager":
            return self.episode_tools(MANAGER_TOOLS)
        return self.episode_tools(WORKERS.get(agent, []))

    def start(self) -> dict[str, Any]:
        return {"history": [], "findings": []}

    def _findings(self, conv: dict[str, Any], extra: list[Text] = ()) -> Text:  # type: ignore[assignment]
        items = (conv["findings"] + list(extra))[-self.max_findings:]
        return Text.join("\n", items) if items else Text("(none yet)")

    @staticmethod
    def routes(text: str) -> list[str]:
        """Workers named on the manager's ``ROUTE:`` line, in order (unknown names ignored)."""
        return named_line(text, "ROUTE", WORKERS)

    def turn(self, conv: dict[str, Any], message: Text) -> Output:
        a = self.agents_
        conv["history"].append(("Customer", message))
        conversation = Text.join("\n", [Text.format("{0}: {1}", who, t) for who, t in conv["history"]])
        plan = a["manager"](conversation=conversation, findings=self._findings(conv))
        trace = plan.trace
        routes = self.routes(str(plan))
        trace.nodes[plan.node].meta["routes"] = routes
        if plan.ended:
            return plan
        new: list[Text] = []
        for name in routes:
            out = a[name](conversation=conversation, instruction=plan, findings=self._findings(conv, new))
            new.append(Text.format("[{0}] {1}", name, tool_report(out)))
            if out.ended:
                return out
        conv["findings"].extend(new)
        reply = a["responder"](conversation=conversation, instruction=plan, findings=self._findings(conv))
        conv["history"].append(("Agent", reply))
        return reply


class SingleAgentRetail(RetailSystem):
    """One tool-calling agent with the policy and every tool, keeping its whole history."""

    kind = "single"
    required = ["agent"]

    def tools_for(self, agent: str) -> list[Tool]:
        return self.episode_tools(self.database.tool_names)  # all, in tau-bench's order

    def start(self) -> dict[str, Any]:
        return {"messages": []}

    def turn(self, conv: dict[str, Any], message: Text) -> Output:
        conv["messages"].append(("user", message))
        out = self.agents_["agent"].chat(conv["messages"])
        conv["messages"].extend(transcript(out))
        return out


SYSTEMS: dict[str, type[RetailSystem]] = {"multi": MultiAgentRetail, "single": SingleAgentRetail}


def build_system(kind: str, cfg: SystemConfig, models: dict[str, LanguageModel], make_user: Callable[[int], User],
                 database: RetailDatabase, max_steps: int = 30) -> RetailSystem:
    if kind not in SYSTEMS:
        raise ConfigError(f"unknown tau-bench system {kind!r}; valid: {', '.join(SYSTEMS)}")
    return SYSTEMS[kind](cfg, models, make_user, database, max_steps)

