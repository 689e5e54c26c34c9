"""Real multi-agent apps (LangGraph, the OpenAI Agents SDK, smolagents), each instrumented by its official
OpenInference instrumentor and exported by the OpenTelemetry SDK's OTLP JSON file exporter: what a user of
agentgrad already has (the apps of ``tests/integrations/test_framework_apps.py`` and of
``benchmarks/team_verdict_apps.py``, which records their sets).

- :func:`langgraph_supervisor`: a LangGraph ``StateGraph`` with a supervisor and two workers (a
  researcher and an analyst). Every node calls the model through LangChain's ``ChatOpenAI``; the
  researcher first runs its LangChain ``@tool`` (a Python function) and reads the result, the
  analyst reads the researcher's reply (a prompt built from it). Routing is
  fixed (supervisor -> researcher -> supervisor -> analyst -> supervisor), since SmolLM2-135M cannot
  be trusted to route; the supervisor's model call is still made and recorded at every turn.
- :func:`agents_handoff`: an OpenAI Agents SDK app: a triage agent hands off to a billing agent,
  which calls its function tool and answers. The model calls go to the same server through
  ``OpenAIChatCompletionsModel``; the handoff and the first tool call are forced with
  ``tool_choice`` (llama.cpp constrains the reply to the function call by a grammar), so the tiny
  model makes them every time; a model-input filter gives tool results back as ``Tool result: ...``
  messages (:func:`_tool_results_as_text`).

Both return what the app did (the agents' outputs and the tools' results, in order), for the tests
to compare with the imported trace. ``plant`` makes the worker's tool return a wrong value.

Each also runs on a set of inputs into one file (:func:`langgraph_set`, :func:`agents_set`: one trace
per input, the OTLP exporter appends): the 20 cities of :data:`CITIES` and the 20 invoices of
:data:`INVOICES`, with their right answers. The set's planted defect (:func:`planted`) is in one
agent's tool: it reads the next row of its table, so every answer it gives is another input's. The
smolagents team (:func:`smolagents_set`) runs only as a set; the AutoGen and AG2 group chats are in
:mod:`agentgrad.testing.group_chat_apps`.
"""

# no ``from __future__ import annotations``: LangGraph reads the State TypedDict's annotations at run time
import asyncio
import contextlib
from pathlib import Path
from typing import Any, Iterator

CITY, POPULATION, WRONG_POPULATION = "Lyon", "522,250", "9,999,999"
INVOICE, AMOUNT, WRONG_AMOUNT = "INV-1001", "$142.50", "$9,999.00"
QUESTION = "What is the population of {city}, in thousands?"  # the single run's question
SET_QUESTION = "What is the population of {city}?"  # the set's: its expected answer is the population itself
SUPERVISOR = ("You are the supervisor of a researcher and an analyst. Say who works next, "
              "or give the final answer in one sentence.")  # the single run's supervisor, at every turn
# the set's supervisor routes until its workers have reported, then answers; as in LangGraph's supervisor
# tutorial its routing replies only route (they are not added to the messages): SmolLM2 answers the question
# at its first turn, from nothing, whatever it is told, and shown that reply repeats it at its last turn
SET_SUPERVISOR = ("You are the supervisor of a researcher and an analyst. Say who works next.",
                  "You are the supervisor. Give the user the final answer in one sentence, with the figure your "
                  "team found.")

# (city, population): the inputs of the LangGraph set and their expected answers (figures as of the
# last census each country published; any fixed table would do, what matters is that each is distinct)
CITIES = (("Lyon", "522,250"), ("Marseille", "873,076"), ("Toulouse", "504,078"), ("Nice", "348,085"),
          ("Nantes", "323,204"), ("Strasbourg", "291,313"), ("Montpellier", "302,454"), ("Bordeaux", "261,804"),
          ("Lille", "236,710"), ("Rennes", "227,830"), ("Reims", "180,318"), ("Toulon", "180,452"),
          ("Grenoble", "156,389"), ("Dijon", "159,346"), ("Angers", "157,175"), ("Nimes", "148,561"),
          ("Brest", "139,926"), ("Limoges", "129,754"), ("Tours", "137,087"), ("Amiens", "133,625"))
# (invoice, amount due): the inputs of the Agents SDK set and their expected answers
INVOICES = (("INV-1001", "$142.50"), ("INV-1002", "$87.20"), ("INV-1003", "$310.00"), ("INV-1004", "$56.75"),
            ("INV-1005", "$1,204.10"), ("INV-1006", "$23.99"), ("INV-1007", "$468.30"), ("INV-1008", "$75.00"),
            ("INV-1009", "$932.45"), ("INV-1010", "$18.60"), ("INV-1011", "$254.80"), ("INV-1012", "$699.00"),
            ("INV-1013", "$41.25"), ("INV-1014", "$387.90"), ("INV-1015", "$120.00"), ("INV-1016", "$815.55"),
            ("INV-1017", "$64.40"), ("INV-1018", "$2,150.00"), ("INV-1019", "$199.99"), ("INV-1020", "$333.30"))


def planted(table: "tuple[tuple[str, str], ...]", plant: bool) -> "list[tuple[str, str]]":
    """(input, what the tool returns for it): the table itself, or with ``plant`` the set's defect, a
    lookup that reads the next row (the last input gets the first row's value)."""
    return [(k, table[(i + 1) % len(table)][1] if plant else v) for i, (k, v) in enumerate(table)]


@contextlib.contextmanager
def traced(out: Path, instrumentor: Any, **options: Any) -> Iterator[None]:
    """Inside it, ``instrumentor`` (an OpenInference instrumentor) traces the app into ``out``: an
    OpenTelemetry tracer provider that appends OTLP JSON a span at a time; uninstrumented and flushed after."""
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(str(out))))
    instrumentor.instrument(tracer_provider=provider, **options)
    try:
        yield
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


def langgraph_supervisor(base_url: str, out: Path, plant: bool = False, genai: bool = False) -> "dict[str, Any]":
    """Run the supervisor app once, its spans written to ``out``; returns what it did."""
    return langgraph_set(base_url, out, [(CITY, WRONG_POPULATION if plant else POPULATION)], genai, QUESTION,
                         (SUPERVISOR, SUPERVISOR), routing_in_history=True)[0]


def langgraph_set(base_url: str, out: Path, cases: "list[tuple[str, str]]", genai: bool = False,
                  question: str = SET_QUESTION, supervisor: "tuple[str, str]" = SET_SUPERVISOR,
                  routing_in_history: bool = False) -> "list[dict[str, Any]]":
    """Run the supervisor app once per ``(city, population its tool returns)``, the user asking
    ``question`` (``{city}`` filled in), every trace appended to ``out``; one dict per case.
    ``supervisor``: its system prompts while it routes and at its last turn; ``routing_in_history``:
    whether its routing replies join the messages (the single run's app) or only route (the set's)."""
    from langchain_openai import ChatOpenAI
    from openinference.instrumentation import TraceConfig
    from openinference.instrumentation.langchain import LangChainInstrumentor

    config = TraceConfig(enable_genai_semconv=genai) if genai else None
    with traced(out, LangChainInstrumentor(), config=config):
        llm = ChatOpenAI(model="smollm2", base_url=base_url, api_key="unused", temperature=0, max_tokens=40,
                         max_retries=0)
        table = dict(cases)
        return [_supervisor_run(llm, table, city, question.format(city=city), supervisor, routing_in_history)
                for city, _ in cases]


def langgraph_routed_set(base_url: str, out: Path, cases: "list[tuple[str, str]]", genai: bool = False
                         ) -> "list[dict[str, Any]]":
    """:func:`langgraph_set` with the supervisor's routing replies kept in the messages, as LangGraph's
    prebuilt supervisor keeps its own turns in the shared history: every later call reads them."""
    return langgraph_set(base_url, out, cases, genai, routing_in_history=True)


def _supervisor_run(llm, table: "dict[str, str]", city: str, question: str, prompts: "tuple[str, str]",
                    routing_in_history: bool) -> "dict[str, Any]":
    """One run of the supervisor app on ``city``, asked ``question``: its tool answers from ``table``
    (``prompts``, ``routing_in_history``: see :func:`langgraph_set`)."""
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    did: dict[str, Any] = {"calls": [], "tools": []}

    @tool
    def city_population(city: str) -> str:
        """The population of a city."""
        return f"The population of {city} is {table[city]}."

    class State(TypedDict):
        messages: Annotated[list, add_messages]
        turn: int

    plan = ["researcher", "analyst", END]

    def supervisor(state: State) -> dict[str, Any]:
        last = plan[state["turn"]] == END
        reply = llm.invoke([SystemMessage(prompts[last]), *state["messages"]])
        did["calls"].append(("supervisor", reply.content))
        said = [AIMessage(reply.content, name="supervisor")] if last or routing_in_history else []
        return {"messages": said, "turn": state["turn"] + 1}

    def researcher(state: State) -> dict[str, Any]:
        result = city_population.invoke({"city": city})
        did["tools"].append(("city_population", result))
        sys = SystemMessage("You are the researcher. Repeat the population you found in one sentence.")
        reply = llm.invoke([sys, HumanMessage(state["messages"][0].content), HumanMessage(result)])
        did["calls"].append(("researcher", reply.content))
        return {"messages": [AIMessage(reply.content, name="researcher")]}

    def analyst(state: State) -> dict[str, Any]:
        research = next(m.content for m in reversed(state["messages"]) if m.name == "researcher")
        sys = SystemMessage("You are the analyst. State the population in thousands in one sentence.")
        reply = llm.invoke([sys, HumanMessage(f"The researcher says: {research}")])
        did["calls"].append(("analyst", reply.content))
        return {"messages": [AIMessage(reply.content, name="analyst")]}

    g = StateGraph(State)
    g.add_node("supervisor", supervisor)
    g.add_node("researcher", researcher)
    g.add_node("analyst", analyst)
    g.add_edge(START, "supervisor")
    g.add_conditional_edges("supervisor", lambda s: plan[s["turn"] - 1])
    g.add_edge("researcher", "supervisor")
    g.add_edge("analyst", "supervisor")
    final = g.compile().invoke({"messages": [HumanMessage(question)], "turn": 0})
    did["question"] = question
    did["answer"] = final["messages"][-1].content
    return did


def _tool_results_as_text(data):
    """The app's model-input filter: past tool calls are dropped and each tool result is given as a user
    message, ``Tool result: ...`` (the handoff's own result dropped too). SmolLM2 shown its own earlier
    function calls, as llama.cpp's function-calling template writes them, only repeats them."""
    from agents.run_config import ModelInputData

    items = []
    for item in data.model_data.input:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "function_call":
            continue
        if kind == "function_call_output":
            out = str(item.get("output", ""))
            if not out.startswith('{"assistant"'):  # the handoff's result: which agent took over
                items.append({"role": "user", "content": f"Tool result: {out}"})
            continue
        items.append(item)
    return ModelInputData(input=items, instructions=data.model_data.instructions)


def agents_handoff(base_url: str, out: Path, plant: bool = False) -> dict[str, Any]:
    """Run the triage -> billing app once, its spans written to ``out``; returns what it did."""
    return agents_set(base_url, out, [(INVOICE, WRONG_AMOUNT if plant else AMOUNT)])[0]


def agents_set(base_url: str, out: Path, cases: "list[tuple[str, str]]") -> "list[dict[str, Any]]":
    """Run the triage -> billing app once per ``(invoice, amount its tool returns)`` (the customer's
    invoice, as the app's session knows it), every trace appended to ``out``; one dict per case."""
    from agents import set_trace_processors
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    set_trace_processors([])  # no export to OpenAI's servers: only the OpenInference processor
    with traced(out, OpenAIAgentsInstrumentor()):
        return [_handoff_run(base_url, invoice, amount) for invoice, amount in cases]


def _handoff_run(base_url: str, invoice: str, amount: str) -> "dict[str, Any]":
    """One run of the triage -> billing app for the customer of ``invoice``: its tool returns ``amount``."""
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
    from openai import AsyncOpenAI

    did: dict[str, Any] = {"tools": []}
    # a client per run: each run has its own event loop (asyncio.run), and a pooled connection is bound to one
    model = OpenAIChatCompletionsModel(model="smollm2", openai_client=AsyncOpenAI(
        base_url=base_url, api_key="unused", max_retries=0))

    @function_tool
    def lookup_invoice() -> str:
        """The amount due on the customer's invoice."""
        result = f"Invoice {invoice} is for {amount}."
        did["tools"].append(("lookup_invoice", result))
        return result

    billing = Agent(name="billing", model=model, tools=[lookup_invoice],
                    instructions="You are the billing agent. Tell the customer the amount due in one sentence.",
                    model_settings=ModelSettings(tool_choice="lookup_invoice", temperature=0, max_tokens=60))
    triage = Agent(name="triage", model=model, handoffs=[billing],
                   instructions="You are the triage agent. Hand billing questions to the billing agent.",
                   model_settings=ModelSettings(tool_choice="transfer_to_billing", temperature=0, max_tokens=40))
    question = f"How much do I owe on invoice {invoice}?"
    result = asyncio.run(Runner.run(triage, question, max_turns=6,
                                    run_config=RunConfig(tracing_disabled=False, workflow_name="support",
                                                         call_model_input_filter=_tool_results_as_text)))
    did["question"] = question
    did["answer"] = str(result.final_output)
    did["last_agent"] = result.last_agent.name
    return did


# The smolagents team: a CodeAgent manager with a managed ToolCallingAgent, the searcher. SmolLM2-135M
# cannot hold smolagents' own system prompts (9,867 and 3,778 characters), so each agent gets a short one
# (``prompt_templates``, smolagents' other templates kept: the managed agent's task and report, memory as
# ``Observation:``); the replies' form is held by llama.cpp as the Agents SDK app's tool calls are: a
# grammar for the manager's code (ask the searcher, then ``final_answer``) and named ``tool_choice`` with
# patterns for the searcher's tool calls. What fills them (the city, the figure) is the model's own.
MANAGER = ("You are the manager of a searcher. You answer the user's question by writing Python code between "
           "<code> and </code>. To ask the searcher, write: found = searcher(task=\"the question\") and print(found). "
           "When you know the answer, write: final_answer(\"the answer, with the figure the searcher found\").")
SEARCHER = ("You are the searcher. Call lookup_population with the name of the city in the task, then call "
            "final_answer with the population the tool gave, in one sentence.")
NAME_RULE = '[A-Z] [a-z]{1,20}'  # a grammar rule for a city's name (the group-chat apps use it too)
_ASK = ('root ::= "Thought: I will ask the searcher.\\n<code>\\nfound = searcher(task=\\"Find the population of " '
        + NAME_RULE + ' ".\\")\\nprint(found)\\n</code>"')
_ANSWER = ('root ::= "Thought: the searcher found the population.\\n<code>\\nfinal_answer(\\"The population of " '
           + NAME_RULE + ' " is " [0-9] [0-9,]{0,12} ".\\")\\n</code>"')
ARGUMENT_PATTERNS = {("lookup_population", "city"): "^[A-Z][a-z]+$",  # JSON-schema patterns for tool arguments
                     ("final_answer", "answer"): "^The population of [A-Z][a-z]+ is [0-9][0-9,]{0,12}[.]$"}


def _steered_model(base_url: str):
    """smolagents' OpenAI-compatible model, its replies' form held by llama.cpp (see :data:`MANAGER`)."""
    from smolagents import OpenAIServerModel
    from smolagents.models import MessageRole

    class Steered(OpenAIServerModel):
        def _prepare_completion_kwargs(self, *a, **kw):
            out = super()._prepare_completion_kwargs(*a, **kw)
            for t in out.get("tools", []):
                fn = t["function"]
                for arg, spec in fn["parameters"]["properties"].items():
                    if (fn["name"], arg) in ARGUMENT_PATTERNS:
                        spec["pattern"] = ARGUMENT_PATTERNS[fn["name"], arg]
            return out

        def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kw):
            observed = any(m.role == MessageRole.TOOL_RESPONSE for m in messages)
            if tools_to_call_from:  # the searcher: its tool first, then final_answer
                kw["tool_choice"] = {"type": "function",
                                     "function": {"name": "final_answer" if observed else "lookup_population"}}
            else:  # the manager: ask the searcher, then answer
                kw["extra_body"] = {"grammar": _ANSWER if observed else _ASK}
            return super().generate(messages, stop_sequences=stop_sequences, response_format=response_format,
                                    tools_to_call_from=tools_to_call_from, **kw)

    return Steered(model_id="smollm2", api_base=base_url, api_key="unused", max_tokens=120, temperature=0,
                   flatten_messages_as_text=True, client_kwargs={"max_retries": 0})


def _templates(name: str, system: str) -> "dict[str, Any]":
    import importlib.resources

    import yaml

    d = yaml.safe_load(importlib.resources.files("smolagents.prompts").joinpath(name).read_text(encoding="utf-8"))
    return {**d, "system_prompt": system}


def smolagents_set(base_url: str, out: Path, cases: "list[tuple[str, str]]") -> "list[dict[str, Any]]":
    """Run the smolagents team once per ``(city, population its tool returns)``, traced by OpenInference's
    smolagents instrumentor, every trace appended to ``out``; one dict per case."""
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    with traced(out, SmolagentsInstrumentor()):
        model = _steered_model(base_url)
        table = dict(cases)
        return [_smolagents_run(model, table, city) for city, _ in cases]


def _smolagents_run(model, table: "dict[str, str]", city: str) -> "dict[str, Any]":
    """One run of the manager -> searcher team, asked ``city``'s population: the tool answers from ``table``."""
    from smolagents import CodeAgent, ToolCallingAgent, tool

    did: dict[str, Any] = {"tools": []}

    @tool
    def lookup_population(city: str) -> str:
        """The population of a city.

        Args:
            city: the city's name
        """
        result = f"The population of {city} is {table.get(city, 'unknown')}."
        did["tools"].append(("lookup_population", result))
        return result

    searcher = ToolCallingAgent(tools=[lookup_population], model=model, name="searcher", max_steps=3, verbosity_level=0,
                                description="Finds the population of a city.",
                                prompt_templates=_templates("toolcalling_agent.yaml", SEARCHER))
    manager = CodeAgent(tools=[], model=model, managed_agents=[searcher], name="manager", max_steps=3, verbosity_level=0,
                        prompt_templates=_templates("code_agent.yaml", MANAGER))
    question = SET_QUESTION.format(city=city)
    did["question"] = question
    did["answer"] = str(manager.run(question))
    return did
