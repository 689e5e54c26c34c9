"""Two real multi-agent apps, each instrumented by its official OpenInference instrumentor and exported
by the OpenTelemetry SDK's OTLP JSON file exporter: what a user of agentgrad already has.

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
"""



import asyncio
from pathlib import Path
from typing import Any

CITY, POPULATION, WRONG_POPULATION = "Lyon", "522,250", "9,999,999"
INVOICE, AMOUNT, WRONG_AMOUNT = "INV-1001", "$142.50", "$9,999.00"


def _provider(out: Path):
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(str(out))))
    return provider


def langgraph_supervisor(base_url: str, out: Path, plant: bool = False, genai: bool = False) -> "dict[str, Any]":
    """Run the supervisor app once, its spans written to ``out``; returns what it did."""
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from openinference.instrumentation import TraceConfig
    from openinference.instrumentation.langchain import LangChainInstrumentor

    provider = _provider(out)
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider, config=TraceConfig(enable_genai_semconv=genai) if genai else None)
    did: dict[str, Any] = {"calls": [], "tools": []}
    try:
        llm = ChatOpenAI(model="smollm2", base_url=base_url, api_key="unused", temperature=0, max_tokens=40,
                         max_retries=0)

        @tool
        def city_population(city: str) -> str:
            """The population of a city."""
            return f"The population of {city} is {WRONG_POPULATION if plant else POPULATION}."

        class State(TypedDict):
            messages: Annotated[list, add_messages]
            turn: int

        plan = ["researcher", "analyst", END]

        def supervisor(state: State) -> dict[str, Any]:
            sys = SystemMessage("You are the supervisor of a researcher and an analyst. Say who works next, "
                                "or give the final answer in one sentence.")
            reply = llm.invoke([sys, *state["messages"]])
            did["calls"].append(("supervisor", reply.content))
            return {"messages": [AIMessage(reply.content, name="supervisor")], "turn": state["turn"] + 1}

        def researcher(state: State) -> dict[str, Any]:
            result = city_population.invoke({"city": CITY})
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
        question = f"What is the population of {CITY}, in thousands?"
        final = g.compile().invoke({"messages": [HumanMessage(question)], "turn": 0})
        did["question"] = question
        did["answer"] = final["messages"][-1].content
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
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
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool,
                        set_trace_processors)
    from openai import AsyncOpenAI
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    set_trace_processors([])  # no export to OpenAI's servers: only the OpenInference processor
    provider = _provider(out)
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    did: dict[str, Any] = {"tools": []}
    try:
        model = OpenAIChatCompletionsModel(model="smollm2", openai_client=AsyncOpenAI(
            base_url=base_url, api_key="unused", max_retries=0))

        @function_tool
        def lookup_invoice() -> str:
            """The amount due on the customer's invoice."""
            result = f"Invoice {INVOICE} is for {WRONG_AMOUNT if plant else AMOUNT}."
            did["tools"].append(("lookup_invoice", result))
            return result

        billing = Agent(name="billing", model=model, tools=[lookup_invoice],
                        instructions="You are the billing agent. Tell the customer the amount due in one sentence.",
                        model_settings=ModelSettings(tool_choice="lookup_invoice", temperature=0, max_tokens=60))
        triage = Agent(name="triage", model=model, handoffs=[billing],
                       instructions="You are the triage agent. Hand billing questions to the billing agent.",
                       model_settings=ModelSettings(tool_choice="transfer_to_billing", temperature=0, max_tokens=40))
        question = f"How much do I owe on invoice {INVOICE}?"
        result = asyncio.run(Runner.run(triage, question, max_turns=6,
                                        run_config=RunConfig(tracing_disabled=False, workflow_name="support",
                                                             call_model_input_filter=_tool_results_as_text)))
        did["question"] = question
        did["answer"] = str(result.final_output)
        did["last_agent"] = result.last_agent.name
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    return did
