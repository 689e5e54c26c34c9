"""Record what real group-chat frameworks return, for the reader's tests: an AutoGen AgentChat team and
an AG2 group chat, each run for real against a local OpenAI-compatible server whose model replies from
a script (agentgrad's test server over a FakeModel: no weights, no network).

    python benchmarks/record_group_chats.py --out tests/importers/data

writes ``autogen_agentchat.json`` (``TaskResult.messages``, each ``model_dump()``: ``source``, ``type``,
``content``, tool request and execution events) and ``ag2_groupchat.json`` (``GroupChat.messages``:
``name`` beside an OpenAI ``role``, the calculator's ``tool_calls`` and the executor's ``tool_responses``), and
``autogen_selector_events.json`` (a ``SelectorGroupChat`` with ``emit_team_events=True``: its messages with
the manager's ``SelectSpeakerEvent`` before each turn; the speaker chosen by a function, in order). Needs ``autogen-agentchat``, ``autogen-ext[openai]`` and ``ag2`` 0.9
(its classic ``autogen.GroupChat``; ag2 1.x has another API), in a virtual environment of their own,
with this checkout on ``PYTHONPATH``. The library versions are written beside the messages (recorded
with autogen-agentchat 0.7.5 and ag2 0.9.9).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from importlib.metadata import version
from pathlib import Path

QUESTION = "What is 12 times 7, and is it more than 80?"


def scripted(messages, tools):
    """The model's replies, by who is asking (the system prompt names the agent)."""
    system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    seen = " ".join(str(m.get("content") or "") for m in messages)
    if "calculator" in system.lower():
        if tools and "84" not in seen:
            return {"tool_calls": [{"name": "multiply", "arguments": {"a": 12, "b": 7}}]}
        return "The product is 84."
    if "planner" in system.lower():
        return "Plan: the calculator multiplies 12 by 7, then the writer answers."
    if "writer" in system.lower():
        return "12 times 7 is 84, which is more than 80. TERMINATE"
    return "TERMINATE"


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


async def autogen_team(url: str) -> list[dict]:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(model="fake", base_url=url, api_key="unused", model_info={
        "vision": False, "function_calling": True, "json_output": False, "family": "unknown", "structured_output": False})
    agents = [AssistantAgent("planner", client, system_message="You are the planner."),
              AssistantAgent("calculator", client, tools=[multiply], system_message="You are the calculator."),
              AssistantAgent("writer", client, system_message="You are the writer.")]
    team = RoundRobinGroupChat(agents, termination_condition=TextMentionTermination("TERMINATE")
                               | MaxMessageTermination(8))
    result = await team.run(task=QUESTION)
    return [m.model_dump(mode="json") for m in result.messages]


async def autogen_selector(url: str) -> list[dict]:
    """The same three agents in a ``SelectorGroupChat`` that emits its team events: each choice of the next
    speaker is a ``SelectSpeakerEvent`` in the result."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
    from autogen_agentchat.teams import SelectorGroupChat
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(model="fake", base_url=url, api_key="unused", model_info={
        "vision": False, "function_calling": True, "json_output": False, "family": "unknown", "structured_output": False})
    agents = [AssistantAgent("planner", client, system_message="You are the planner."),
              AssistantAgent("calculator", client, tools=[multiply], reflect_on_tool_use=True,
                             system_message="You are the calculator."),
              AssistantAgent("writer", client, system_message="You are the writer.")]
    order = {"user": "planner", "planner": "calculator", "calculator": "writer"}
    team = SelectorGroupChat(agents, model_client=client, emit_team_events=True,
                             selector_func=lambda msgs: order.get(msgs[-1].source),
                             termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(12))
    result = await team.run(task=QUESTION)
    return [m.model_dump(mode="json") for m in result.messages]


def ag2_chat(url: str) -> list[dict]:
    """The planner, the calculator (its tool registered with ``register_function``, executed by the user
    proxy) and the writer, in that order."""
    import autogen

    cfg = {"config_list": [{"model": "fake", "base_url": url, "api_key": "unused"}], "cache_seed": None}
    planner = autogen.AssistantAgent("planner", system_message="You are the planner.", llm_config=cfg)
    calculator = autogen.AssistantAgent("calculator", system_message="You are the calculator.", llm_config=cfg)
    writer = autogen.AssistantAgent("writer", system_message="You are the writer.", llm_config=cfg)
    user = autogen.UserProxyAgent("user_proxy", human_input_mode="NEVER", code_execution_config=False,
                                  is_termination_msg=lambda m: "TERMINATE" in (m.get("content") or ""))
    autogen.register_function(multiply, caller=calculator, executor=user, description="Multiply two integers.")

    def next_speaker(last, chat):
        said = chat.messages[-1]
        if last is user:
            return calculator if said.get("tool_responses") else planner
        if last is planner:
            return calculator
        if last is calculator:
            return user if said.get("tool_calls") else writer
        return None

    chat = autogen.GroupChat([user, planner, calculator, writer], messages=[], max_round=8,
                             speaker_selection_method=next_speaker)
    manager = autogen.GroupChatManager(chat, llm_config=False)
    user.initiate_chat(manager, message=QUESTION)
    return list(chat.messages)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the recorded messages")
    ap.add_argument("--only", choices=("autogen", "autogen-selector", "ag2"), help="record one framework (they need separate environments)")
    a = ap.parse_args(argv)
    from agentgrad.models.fake import FakeModel
    from agentgrad.models.serve import OpenAICompatServer

    a.out.mkdir(parents=True, exist_ok=True)
    with OpenAICompatServer(FakeModel(responder=scripted)) as srv:
        if a.only in (None, "autogen"):
            msgs = asyncio.run(autogen_team(srv.base_url))
            (a.out / "autogen_agentchat.json").write_text(json.dumps(
                {"library": f"autogen-agentchat {version('autogen-agentchat')}", "messages": msgs}, indent=1) + "\n")
        if a.only in (None, "autogen-selector"):
            msgs = asyncio.run(autogen_selector(srv.base_url))
            (a.out / "autogen_selector_events.json").write_text(json.dumps(
                {"library": f"autogen-agentchat {version('autogen-agentchat')}", "messages": msgs}, indent=1) + "\n")
        if a.only in (None, "ag2"):
            msgs = ag2_chat(srv.base_url)
            (a.out / "ag2_groupchat.json").write_text(json.dumps(
                {"library": f"ag2 {version('ag2')}", "messages": msgs}, indent=1) + "\n")
    print(f"written in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
