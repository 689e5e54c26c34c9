"""The two group-chat apps of the team-verdict harness, the same team in two frameworks: a planner, a
researcher with a tool and a writer, each agent's model call made to the local llama.cpp server on
SmolLM2 (``benchmarks/team_verdict_apps.py`` records their sets, ``tests/integrations`` replays them).

- :func:`autogen_set`: an AutoGen AgentChat ``SelectorGroupChat``, traced by OpenInference's AgentChat
  instrumentor; its ``TaskResult.messages`` are kept beside the spans.
- :func:`ag2_set`: an AG2 ``GroupChat`` (no OpenInference instrumentor): its ``GroupChat.messages`` are
  the record.

The single-app runs and the shared helpers (:func:`~agentgrad.testing.framework_apps.planted`, the
tables of inputs) are in :mod:`agentgrad.testing.framework_apps`.
"""

import asyncio
from pathlib import Path
from typing import Any

from agentgrad.testing.framework_apps import ARGUMENT_PATTERNS, NAME_RULE, SET_QUESTION, traced

# The AutoGen AgentChat team: a SelectorGroupChat of a planner, a researcher with a tool and a writer. The
# selector is a function (AgentChat's ``selector_func``: planner, researcher, writer), since SmolLM2-135M
# cannot be trusted to route; every agent's model call is still made and recorded. As in the other apps the
# replies' form is held by llama.cpp (a grammar for the planner's and the writer's sentence and for the
# researcher's reply after its tool, named ``tool_choice`` for the tool call) and the model fills in the city
# and the figure; the client gives a tool result back as a ``Tool result: ...`` user message, as the Agents
# SDK app's input filter does (llama.cpp's function-calling template renders a tool message so that SmolLM2
# makes up a figure instead of reading it).
PLANNER = "You are the planner. Say who works next."
RESEARCHER = "You are the researcher. Look up the population with your tool, then repeat it in one sentence."
WRITER = "You are the writer. Give the user the final answer in one sentence, with the figure the researcher found."
_PLAN = 'root ::= "Plan: the researcher looks up the population of " ' + NAME_RULE + ' ", then the writer answers."'
_SENTENCE = 'root ::= "The population of " ' + NAME_RULE + ' " is " [0-9] [0-9,]{0,12} "."'
_MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
               "structured_output": False}


def _tool_results_as_user(messages: "list[dict[str, Any]]") -> "list[dict[str, Any]]":
    """OpenAI-shaped messages as SmolLM2 is shown them (as :func:`_tool_results_as_text` does for the Agents
    SDK): an assistant message that only asked for tools dropped, each tool result a ``Tool result: ...``
    user message."""
    return [{"role": "user", "content": f"Tool result: {m['content']}"} if m.get("role") == "tool" else m
            for m in messages if not (m.get("role") == "assistant" and m.get("tool_calls"))]


def _autogen_client(base_url: str, role: str):
    """AutoGen's OpenAI-compatible client on the server, steered for ``role`` (see :data:`PLANNER`)."""
    from autogen_core.models import FunctionExecutionResultMessage
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    class Steered(OpenAIChatCompletionClient):
        def __init__(self, **kw):
            super().__init__(**kw)
            completions = self._client.chat.completions
            plain = completions.create

            async def create(*a, **k):
                k["messages"] = _tool_results_as_user(k["messages"])
                r = await plain(*a, **k)
                for c in r.choices:  # llama.cpp also fills the deprecated function_call, which AutoGen refuses
                    c.message.function_call = None
                return r

            completions.create = create

        def _process_create_args(self, messages, tools, tool_choice, json_output, extra_create_args):
            calling = bool(tools) and not any(isinstance(m, FunctionExecutionResultMessage) for m in messages)
            if not calling and role in ("planner", "researcher", "writer"):
                extra_create_args = {**extra_create_args,
                                     "extra_body": {"grammar": _PLAN if role == "planner" else _SENTENCE}}
            p = super()._process_create_args(messages, tools, tool_choice, json_output, extra_create_args)
            if calling:
                fn = p.tools[0]["function"]
                p.create_args["tool_choice"] = {"type": "function", "function": {"name": fn["name"]}}
                fn["parameters"]["properties"]["city"]["pattern"] = ARGUMENT_PATTERNS["lookup_population", "city"]
            return p

    return Steered(model="smollm2", base_url=base_url, api_key="unused", model_info=_MODEL_INFO, temperature=0,
                   max_tokens=60, max_retries=0)


def autogen_set(base_url: str, out: Path, cases: "list[tuple[str, str]]") -> "list[dict[str, Any]]":
    """Run the AutoGen team once per ``(city, population its tool returns)``, traced by OpenInference's
    AgentChat instrumentor into ``out``; one dict per case, with ``messages``: the team's
    ``TaskResult.messages`` as AutoGen returns them (``model_dump``)."""
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

    with traced(out, AutogenAgentChatInstrumentor()):
        table = dict(cases)
        return [asyncio.run(_autogen_run(base_url, table, city)) for city, _ in cases]


async def _autogen_run(base_url: str, table: "dict[str, str]", city: str) -> "dict[str, Any]":
    """One run of the planner -> researcher -> writer team, asked ``city``'s population."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination, SourceMatchTermination
    from autogen_agentchat.teams import SelectorGroupChat

    did: dict[str, Any] = {"tools": []}

    def lookup_population(city: str) -> str:
        """The population of a city."""
        result = f"The population of {city} is {table.get(city, 'unknown')}."
        did["tools"].append(("lookup_population", result))
        return result

    agents = [AssistantAgent("planner", _autogen_client(base_url, "planner"), system_message=PLANNER),
              AssistantAgent("researcher", _autogen_client(base_url, "researcher"), tools=[lookup_population],
                             reflect_on_tool_use=True, system_message=RESEARCHER),
              AssistantAgent("writer", _autogen_client(base_url, "writer"), system_message=WRITER)]
    order = {"user": "planner", "planner": "researcher", "researcher": "writer"}
    team = SelectorGroupChat(agents, model_client=_autogen_client(base_url, "selector"),
                             selector_func=lambda msgs: order.get(msgs[-1].source),
                             termination_condition=SourceMatchTermination(["writer"]) | MaxMessageTermination(8))
    question = SET_QUESTION.format(city=city)
    result = await team.run(task=question)
    did["question"] = question
    did["messages"] = [m.model_dump(mode="json") for m in result.messages]
    did["answer"] = str(result.messages[-1].content)
    return did


def ag2_set(base_url: str, out: Path, cases: "list[tuple[str, str]]") -> "list[dict[str, Any]]":
    """Run the AG2 group chat once per ``(city, population its tool returns)``; one dict per case, with
    ``messages``: the chat's ``GroupChat.messages`` as AG2 keeps them. AG2 has no OpenInference
    instrumentor, so ``out`` gets no spans: the messages are the record (``team_verdict_apps.py`` writes
    them). The same team as :func:`autogen_set`: a planner, a researcher with the tool and a writer."""
    table = dict(cases)
    return [_ag2_run(base_url, table, city) for city, _ in cases]


def _ag2_client(role: str):
    """AG2's OpenAI client class for ``role``, its replies' form held by llama.cpp as in
    :func:`_autogen_client`: the planner's and writer's sentence by a grammar, the researcher's first
    reply a named tool call, its tool result given back as a ``Tool result: ...`` user message."""
    from autogen.oai.client import OpenAIClient
    from openai import OpenAI

    def __init__(self, config, **kwargs):
        OpenAIClient.__init__(self, OpenAI(base_url=str(config["base_url"]), api_key="unused", max_retries=0))

    def create(self, params):
        params = {k: v for k, v in params.items() if k not in ("model_client_cls", "base_url", "api_key")}
        msgs = params["messages"]
        observed = any(m.get("role") == "tool" for m in msgs)
        params["messages"] = [{k: v for k, v in m.items() if k != "name"} for m in _tool_results_as_user(msgs)]
        if role == "researcher" and not observed and params.get("tools"):
            fn = params["tools"][0]["function"]
            fn["parameters"]["properties"]["city"]["pattern"] = ARGUMENT_PATTERNS["lookup_population", "city"]
            params["tool_choice"] = {"type": "function", "function": {"name": fn["name"]}}
        else:
            params.pop("tools", None)
            params["extra_body"] = {"grammar": _PLAN if role == "planner" else _SENTENCE}
        r = OpenAIClient.create(self, params)
        for c in r.choices:  # llama.cpp also fills the deprecated function_call beside tool_calls
            c.message.function_call = None
        return r

    return type(f"SmolLM2{role.title()}", (OpenAIClient,), {"__init__": __init__, "create": create})


def _ag2_run(base_url: str, table: "dict[str, str]", city: str) -> "dict[str, Any]":
    """One run of the planner -> researcher (-> its tool) -> writer group chat, asked ``city``'s population."""
    import autogen

    did: dict[str, Any] = {"tools": []}

    def lookup_population(city: str) -> str:
        result = f"The population of {city} is {table.get(city, 'unknown')}."
        did["tools"].append(("lookup_population", result))
        return result

    def agent(name: str, system: str):
        cls = _ag2_client(name)
        cfg = {"config_list": [{"model": "smollm2", "model_client_cls": cls.__name__, "base_url": base_url,
                                "api_key": "unused"}], "cache_seed": None, "temperature": 0, "max_tokens": 60}
        return autogen.AssistantAgent(name, system_message=system, llm_config=cfg), cls

    user = autogen.UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False)
    (planner, p), (researcher, r), (writer, w) = agent("planner", PLANNER), agent("researcher", RESEARCHER), \
        agent("writer", WRITER)
    autogen.register_function(lookup_population, caller=researcher, executor=user,
                              description="The population of a city.")
    for a, cls in ((planner, p), (researcher, r), (writer, w)):  # after the tool: registering it builds a new client
        a.register_model_client(model_client_cls=cls)

    def next_speaker(last, chat):
        said = chat.messages[-1]
        if last is user and not said.get("tool_responses"):
            return planner
        if last is planner or (last is user and said.get("tool_responses")):
            return researcher
        if last is researcher:
            return user if said.get("tool_calls") else writer
        return None  # the writer has answered

    chat = autogen.GroupChat([user, planner, researcher, writer], messages=[], max_round=8,
                             speaker_selection_method=next_speaker)
    manager = autogen.GroupChatManager(chat, llm_config=False)
    question = SET_QUESTION.format(city=city)
    user.initiate_chat(manager, message=question, silent=True)
    did["question"] = question
    did["messages"] = [dict(m) for m in chat.messages]
    did["answer"] = str(chat.messages[-1].get("content") or "")
    return did
