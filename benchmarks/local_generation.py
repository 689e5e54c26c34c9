"""Tokens per second of local generation on SmolLM2: 1 vs 8 concurrent episodes, and the llama.cpp server.

    python benchmarks/local_generation.py [--episodes 24] [--workload short|long|structured|matched] [--json FILE]

Runs the demo's system (examples/lookup: two agents, greedy) on its 24 questions: with transformers
in this process one episode at a time, then 8 at once (concurrent greedy calls are decoded in one
batch), then, when llama-cpp-python[server] is installed, against llama.cpp's OpenAI-compatible
server on the same GGUF file (1 and 4 requests in flight). Tokens are completion tokens as each
backend counts them. Run it alone on the machine.

Two workloads: ``short`` is the demo's (answers of about 7 tokens after a prompt of about 100: the
prompt's forward pass dominates), ``long`` asks each agent to describe the record in three
sentences with up to 64 new tokens (decoding dominates, which batching amortises).

``structured`` measures what constrained decoding costs: each of the questions is asked directly
(one call, no system) for a JSON verdict ``{"answer", "confidence", "reason"}`` with up to 64 new
tokens, once free and once under that output schema (llguidance token masks in transformers; the
server's ``response_format`` grammar in llama.cpp), at 1 and 8 calls in flight; the ratio of free to
constrained tokens/s is the slowdown.

``matched`` is the same comparison with the reply's length taken out (transformers only): every call
decodes exactly 64 tokens, free with the end-of-sequence token ignored, constrained under a schema
whose reason must be longer than 64 tokens can hold, so both modes run the same prompts for the same
number of decode steps and the ratio is the mask's own cost (the ``structured`` ratio mixes in the
prompt's forward pass, which a short free reply spends most of its time on).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from agentgrad.core.config import apply_model_override, load_system_config
from agentgrad.core.model import GenerationSettings, OutputSchema
from agentgrad.runs.graph_system import GraphSystem
from agentgrad.examples import LOOKUP
from agentgrad.runs.runner import read_jsonl
from agentgrad.testing.llama_server import LlamaServer


def measure(system: GraphSystem, examples: list[dict], concurrency: int) -> dict:
    for model in {id(m): m for m in system.models.values()}.values():  # every series starts cold: no prompt
        batcher = getattr(model, "batcher", None)                     # of an earlier series is reused
        if batcher is not None:
            batcher.prefixes.clear()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        eps = list(ex.map(system.run, examples))
    seconds = time.perf_counter() - t0
    tokens = sum(n.usage.get("completion_tokens", 0) for ep in eps for n in ep.trace.calls())
    return {"concurrency": concurrency, "episodes": len(eps), "tokens": tokens, "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds, 1)}


def system_for(model: str, workload: str = "short") -> GraphSystem:
    cfg = load_system_config(LOOKUP / "system.yaml")
    apply_model_override(cfg, f"default={model}")
    if workload == "long":
        cfg.settings.max_new_tokens = 64
        for a in cfg.agents.values():
            a.prompt = "You describe what you are given in three full sentences.\n"
            a.protected = []
    return GraphSystem(cfg)


VERDICT = OutputSchema(name="verdict", json_schema={
    "type": "object", "additionalProperties": False, "required": ["answer", "confidence", "reason"],
    "properties": {"answer": {"type": "string", "maxLength": 40}, "confidence": {"enum": ["low", "medium", "high"]},
                   "reason": {"type": "string", "maxLength": 200}}})


def structured_calls(examples: list[dict]) -> list[list[dict]]:
    return [[{"role": "system", "content": "You answer questions about records. Reply with one JSON object: "
                                           '{"answer": "<the value>", "confidence": "low, medium or high", '
                                           '"reason": "<one sentence>"}'},
             {"role": "user", "content": f"Record: {ex['record']}\nQuestion: {ex['question']}"}] for ex in examples]


def measure_calls(model, calls: list[list[dict]], concurrency: int, schema: OutputSchema | None) -> dict:
    """Each call once, ``concurrency`` in flight, free or under ``schema``; replies that fit the schema counted."""
    batcher = getattr(model, "batcher", None)
    if batcher is not None:
        batcher.prefixes.clear()
    settings = GenerationSettings(max_new_tokens=64, output=schema)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        gens = list(ex.map(lambda m: model.generate(m, None, settings), calls))
    seconds = time.perf_counter() - t0
    tokens = sum(g.usage.get("completion_tokens", 0) for g in gens)

    def fits(text: str) -> bool:
        try:
            VERDICT.parse(text)
            return True
        except Exception:  # noqa: BLE001 - any reply that is not the verdict
            return False

    return {"mode": "constrained" if schema else "free", "concurrency": concurrency, "calls": len(gens),
            "tokens": tokens, "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 1),
            "schema_valid": sum(fits(g.text) for g in gens)}


LONG_VERDICT = OutputSchema(name="long_verdict", json_schema={
    "type": "object", "additionalProperties": False, "required": ["answer", "confidence", "reason"],
    "properties": {"answer": {"type": "string", "maxLength": 40}, "confidence": {"enum": ["low", "medium", "high"]},
                   "reason": {"type": "string", "minLength": 1000, "maxLength": 1000}}})


def matched(examples: list[dict], rows: list[dict]) -> None:
    """Free and constrained on transformers, every call exactly 64 decode steps (see the module's doc)."""
    from agentgrad.models.hf import HFModel

    calls = structured_calls(examples)
    model = HFModel.shared(name="default", path="smollm2")
    model.generate(calls[0], None, GenerationSettings(max_new_tokens=8, output=LONG_VERDICT))  # warm up, compile
    stops = set(model.batcher.stops)
    try:
        for c in (1, 8):
            for schema in (None, LONG_VERDICT):
                model.batcher.stops = set() if schema is None else stops  # free: the end of sequence is ignored
                row = measure_calls(model, calls, c, schema)
                if row["tokens"] != 64 * len(calls):
                    raise SystemExit(f"{row['mode']} at concurrency {c} decoded {row['tokens']} tokens, "
                                     f"not {64 * len(calls)}: the lengths are not matched")
                rows.append({"backend": "transformers (float32)", "workload": "matched", **row})
                print(rows[-1], flush=True)
    finally:
        model.batcher.stops = stops
    for c in (1, 8):
        free, con = (next(r for r in rows if r["concurrency"] == c and r["mode"] == m) for m in ("free", "constrained"))
        print(f"transformers (float32), 64 tokens per call, concurrency {c}: free {free['tokens_per_s']:6.1f} tokens/s, "
              f"constrained {con['tokens_per_s']:6.1f} tokens/s: slowdown {free['tokens_per_s'] / con['tokens_per_s']:.2f}x")


def structured(examples: list[dict], rows: list[dict]) -> None:
    from agentgrad.models.hf import HFModel
    from agentgrad.models.openai_compat import OpenAIModel

    calls = structured_calls(examples)
    backends = [("transformers (float32)", HFModel.shared(name="default", path="smollm2"), None)]
    if importlib.util.find_spec("llama_cpp") is not None:
        srv, url = llama_server()
        backends.append(("llama.cpp server (Q4_1)", OpenAIModel(name="default", model="smollm2", base_url=url), srv))
    else:
        print("llama-cpp-python[server] is not installed: the server rows are left out")
    try:
        for name, model, _ in backends:
            model.generate(calls[0], None, GenerationSettings(max_new_tokens=8, output=VERDICT))  # warm up, compile
            for c in (1, 8):
                for schema in (None, VERDICT):
                    rows.append({"backend": name, "workload": "structured", **measure_calls(model, calls, c, schema)})
                    print(rows[-1], flush=True)
    finally:
        for _, _, srv in backends:
            if srv is not None:
                srv.stop()
    for name, *_ in backends:
        for c in (1, 8):
            free, con = (next(r for r in rows if r["backend"] == name and r["concurrency"] == c and r["mode"] == m)
                         for m in ("free", "constrained"))
            print(f"{name:<26} concurrency {c}: free {free['tokens_per_s']:6.1f} tokens/s, constrained "
                  f"{con['tokens_per_s']:6.1f} tokens/s: slowdown {free['tokens_per_s'] / con['tokens_per_s']:.2f}x; "
                  f"schema-valid replies free {free['schema_valid']}/{free['calls']}, constrained "
                  f"{con['schema_valid']}/{con['calls']}")


def llama_server() -> tuple[LlamaServer, str]:
    """The chatml server on 2 threads, as these figures were measured; a start that fails is one line."""
    try:
        srv = LlamaServer(n_ctx=2048, chat_format="chatml", n_threads=2)
    except RuntimeError as e:
        raise SystemExit(f"error: {e}") from None
    return srv, srv.base_url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--workload", choices=["short", "long", "structured", "matched"], default="short")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    examples = (read_jsonl(LOOKUP / "train.jsonl") + read_jsonl(LOOKUP / "val.jsonl"))[: a.episodes]
    rows: list[dict] = []
    if a.workload in ("structured", "matched"):
        (structured if a.workload == "structured" else matched)(examples, rows)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"rows": rows, "command": " ".join(sys.argv)}, f, indent=1)
        return
    hf = system_for("smollm2", a.workload)
    hf.run(examples[0])  # load and warm up
    for c in (1, 8):
        rows.append({"backend": "transformers (float32)", "workload": a.workload, **measure(hf, examples, c)})
        print(rows[-1], flush=True)
    if importlib.util.find_spec("llama_cpp") is not None:
        server, url = llama_server()
        try:
            srv = system_for(f"openai:smollm2@{url}", a.workload)
            srv.run(examples[0])
            for c in (1, 4):
                rows.append({"backend": "llama.cpp server (Q4_1)", "workload": a.workload, **measure(srv, examples, c)})
                print(rows[-1], flush=True)
        finally:
            server.stop()
    else:
        print("llama-cpp-python[server] is not installed: the server rows are left out")
    for r in rows:
        print(f"{r['backend']:<26} {r['workload']:<5} concurrency {r['concurrency']:>2}: {r['tokens_per_s']:6.1f} tokens/s "
              f"({r['tokens']} tokens, {r['episodes']} episodes, {r['seconds']} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "command": " ".join(sys.argv)}, f, indent=1)


if __name__ == "__main__":
    main()
