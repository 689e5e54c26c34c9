"""Constrained-decoding libraries on SmolLM2's tokenizer: compile time and time per token mask.

    python benchmarks/constrained_libraries.py [--json FILE]

A 34-token judge verdict ({"agent", "step", "reason"}) is replayed through each library installed
(llguidance, agentgrad's choice and a dependency; xgrammar, for comparison: ``pip install xgrammar``):
the schema's compile time (the first and a second schema), the time to fill the next-token mask
at each step, and the time of the library's own torch helper that applies a mask to the logits.
No model runs: this isolates the libraries' cost, which is added to every decode step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from agentgrad.models.spec import resolve_model_path

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["agent", "step", "reason"],
          "properties": {"agent": {"type": "string", "maxLength": 64}, "step": {"type": "integer", "minimum": 1,
                                                                                "maximum": 40},
                         "reason": {"type": "string", "maxLength": 300}}}
REPLY = json.dumps({"agent": "WebSurfer", "step": 7,
                    "reason": "It read the wrong table row and reported the wrong year as the answer."})


def _ms(xs: list[float]) -> dict:
    return {"median_ms": round(1e3 * statistics.median(xs), 3), "max_ms": round(1e3 * max(xs), 3)}


def llguidance_row(tok, ids: list[int]) -> dict:
    import llguidance
    import llguidance.hf
    import llguidance.torch as lt

    t0 = time.perf_counter()
    lltok = llguidance.hf.from_tokenizer(tok)
    t1 = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(SCHEMA, defaults={"whitespace_flexible": True})
    matcher = llguidance.LLMatcher(lltok, grammar)
    t2 = time.perf_counter()
    second = dict(SCHEMA, properties=dict(SCHEMA["properties"], step={"type": "integer", "minimum": 1, "maximum": 41}))
    llguidance.LLMatcher(lltok, llguidance.LLMatcher.grammar_from_json_schema(second))
    t3 = time.perf_counter()
    mask = lt.allocate_token_bitmask(1, lltok.vocab_size)
    logits = torch.randn(1, lltok.vocab_size)
    fills, applies = [], []
    for t in ids:
        a = time.perf_counter()
        lt.fill_next_token_bitmask(matcher, mask, 0)
        b = time.perf_counter()
        lt.apply_token_bitmask_inplace(logits.clone(), mask)
        applies.append(time.perf_counter() - b)
        fills.append(b - a)
        matcher.consume_token(t)
    assert matcher.is_accepting(), matcher.get_error()
    return {"library": f"llguidance {llguidance.get_version()}", "tokenizer_s": round(t1 - t0, 3),
            "compile_first_s": round(t2 - t1, 4), "compile_second_s": round(t3 - t2, 4),
            "fill": _ms(fills), "apply_helper": _ms(applies[1:])}


def xgrammar_row(tok, ids: list[int]) -> dict:
    import xgrammar as xgr

    t0 = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
    compiler = xgr.GrammarCompiler(info)
    t1 = time.perf_counter()
    compiled = compiler.compile_json_schema(json.dumps(SCHEMA), any_whitespace=True)
    t2 = time.perf_counter()
    second = dict(SCHEMA, properties=dict(SCHEMA["properties"], step={"type": "integer", "minimum": 1, "maximum": 41}))
    compiler.compile_json_schema(json.dumps(second), any_whitespace=True)
    t3 = time.perf_counter()
    matcher = xgr.GrammarMatcher(compiled)
    mask = xgr.allocate_token_bitmask(1, info.vocab_size)
    logits = torch.randn(1, info.vocab_size)
    fills, applies = [], []
    for t in ids:
        a = time.perf_counter()
        matcher.fill_next_token_bitmask(mask, 0)
        b = time.perf_counter()
        xgr.apply_token_bitmask_inplace(logits.clone(), mask)
        applies.append(time.perf_counter() - b)
        fills.append(b - a)
        assert matcher.accept_token(t)
    return {"library": "xgrammar", "tokenizer_s": round(t1 - t0, 3), "compile_first_s": round(t2 - t1, 4),
            "compile_second_s": round(t3 - t2, 4), "fill": _ms(fills), "apply_helper": _ms(applies[1:])}


def agentgrad_apply_row(tok) -> dict:
    """agentgrad's own mask application (numpy unpacking of the bitmask), for the same vocabulary."""
    from agentgrad.core.model import OutputSchema
    from agentgrad.models.constrain import Compiler

    row = Compiler(tok, len(tok), [tok.eos_token_id]).row(OutputSchema(json_schema=SCHEMA))
    logits = torch.randn(len(tok))
    times = []
    for _ in range(30):
        a = time.perf_counter()
        row.mask(logits.clone())
        times.append(time.perf_counter() - a)
    return {"library": "agentgrad RowConstraint.mask (fill + apply)", "fill_and_apply": _ms(times)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model_path("smollm2"))
    ids = tok(REPLY, add_special_tokens=False)["input_ids"]
    rows = []
    for fn in (llguidance_row, xgrammar_row):
        try:
            rows.append(fn(tok, ids))
        except ImportError as e:
            rows.append({"library": fn.__name__.removesuffix("_row"), "missing": str(e)})
        print(rows[-1], flush=True)
    rows.append(agentgrad_apply_row(tok))
    print(rows[-1])
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tokens": len(ids), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
