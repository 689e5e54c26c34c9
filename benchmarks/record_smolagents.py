"""Record a real smolagents team's spans, for the importer's tests: a ``CodeAgent`` manager that calls a
managed ``ToolCallingAgent`` ("searcher", with a population tool), traced by OpenInference's smolagents
instrumentor and written by the OpenTelemetry SDK's OTLP JSON file exporter, as a user's app would.
The model is agentgrad's local OpenAI-compatible server over a scripted FakeModel (no weights, no
network); the searcher's tool returns the planted wrong figure, which the manager repeats.

    python benchmarks/record_smolagents.py --out tests/importers/data/smolagents_spans.jsonl

Needs ``smolagents``, ``openinference-instrumentation-smolagents``, ``opentelemetry-sdk`` and
``opentelemetry-exporter-otlp-json-file`` (recorded with smolagents 1.26.0, instrumentor 0.1.43), with
this checkout on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

QUESTION = "What is the population of Lyon? Answer with the number."
WRONG = "9,999,999"


def scripted(messages, tools):
    """The team's model: the manager writes code that asks the searcher, then gives its answer; the
    searcher calls its tool, then answers with what the tool said."""
    text = " ".join(str(m.get("content") or "") for m in messages)
    system = str(messages[0].get("content") or "") if messages else ""
    if tools:  # the searcher (a tool-calling agent): its tool, then final_answer with the tool's figure
        if WRONG not in text:
            return {"tool_calls": [{"name": "lookup_population", "arguments": {"city": "Lyon"}}]}
        return {"tool_calls": [{"name": "final_answer", "arguments": {"answer": f"Lyon has {WRONG} inhabitants."}}]}
    if "searcher" in system and WRONG not in text:
        return ("Thought: the searcher can look the population up.\n<code>\n"
                "found = searcher(task=\"Find the population of Lyon.\")\nprint(found)\n</code>")
    return f"Thought: the searcher found it.\n<code>\nfinal_answer(\"{WRONG}\")\n</code>"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the OTLP JSON file to write")
    a = ap.parse_args(argv)
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from smolagents import CodeAgent, OpenAIServerModel, ToolCallingAgent, tool

    from agentgrad.models.fake import FakeModel
    from agentgrad.models.serve import OpenAICompatServer

    if a.out.exists():
        a.out.unlink()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(str(a.out))))
    SmolagentsInstrumentor().instrument(tracer_provider=provider)

    @tool
    def lookup_population(city: str) -> str:
        """The population of a city.

        Args:
            city: the city's name.
        """
        return f"{city}: {WRONG} inhabitants"

    with OpenAICompatServer(FakeModel(responder=scripted)) as srv:
        model = OpenAIServerModel(model_id="fake", api_base=srv.base_url, api_key="unused")
        searcher = ToolCallingAgent(tools=[lookup_population], model=model, name="searcher", max_steps=3,
                                    description="Looks up facts about cities with its tools.")
        manager = CodeAgent(tools=[], model=model, managed_agents=[searcher], max_steps=3)
        answer = manager.run(QUESTION)
    provider.shutdown()
    print(f"answer: {answer}; spans written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
