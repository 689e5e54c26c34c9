"""What attribution costs: teacher-forced forward vs naive gradients vs prefix-cached gradients vs
gradients kept through generation (as the paper's reference code does).

A Llama-shaped random model of about 100M parameters scores one call: a prompt of P tokens (the
prefix: system prompt, tool schemas), three predecessor outputs of 100 tokens each, and a
100-token output. For P = 1,000 and P = 4,000 it prints time and peak extra memory of

  (a) one no-grad teacher-forced forward over the whole call,
  (b) the naive gradient pass (agentgrad's reference path, Scorer(mode="naive")),
  (c) the prefix-cached gradient pass, the prefix cache already built by an earlier call of the
      same agent (Scorer(mode="cached"), what agentgrad runs by default),
  (d) generating the 100 output tokens with autograd on, then one backward pass,

and the ratios (b)/(a), (c)/(a), (c)/(b), (d)/(c). With ``--cases`` it also times, on the same call,

  (r) the plain reference of agentgrad.attribution.gbc (one full gradient pass, every logit),
  (s) Captum's Saliency (|gradient|, whence the L1 weights), and
  (x) Captum's InputXGradient (gradient x input, whence the g.e weights), each one full pass,

and prints each beside the engine's (c) as a ratio, and beside (b), the engine on equal work: every token of
the call differentiated, nothing cached, as in (r), (s) and (x) (Captum: pip install -e ".[attribution-check]").
Each measurement runs in its own process:
time is the median of the timed runs after a warm-up; peak extra memory, measured in another
process, is the peak of one run minus what was allocated before it (model, and for (c) the prefix
cache): CUDA's allocator statistics on a GPU; on CPU the resident set size sampled every
millisecond, with glibc told to return freed blocks of 64 KiB and more to the OS (which slows
allocation, hence the separate process for timing).

    python benchmarks/attribution_cost.py                  # CPU
    python benchmarks/attribution_cost.py --device cuda    # GPU
    python benchmarks/attribution_cost.py --prompts 4000 --cases b,c,r,s,x --repeats 3 --time-only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

PRED, OUT = 100, 100
CASES = ("a", "b", "c", "d")
LABELS = {
    "a": "(a) no-grad forward",
    "b": "(b) naive gradient",
    "c": "(c) prefix-cached gradient",
    "d": "(d) gradient through generation",
    "r": "(r) reference gbc.py",
    "s": "(s) Captum Saliency",
    "x": "(x) Captum InputXGradient",
}


def build_model(device: str, dtype: str, layers: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=layers,
        num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=16384, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).to(device=device, dtype=getattr(torch, dtype)).eval()
    model.requires_grad_(False)
    return model


class PeakMemory:
    """Peak memory above the level at start, on CUDA (allocator) or CPU (sampled RSS)."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.peak = 0

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            self.base = self._rss()
            self._stop = threading.Event()
            self._max = self.base

            def sample():
                while not self._stop.is_set():
                    self._max = max(self._max, self._rss())
                    time.sleep(0.001)

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.base
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self._max, self._rss()) - self.base


def measure(case: str, prompt: int, device: str, dtype: str, layers: int, repeats: int, what: str) -> dict:
    """Time (median over ``repeats`` after one warm-up), or peak extra memory of one run, of one case."""
    import torch

    from agentgrad.attribution.render import RenderedCall
    from agentgrad.attribution.scorer import Scorer

    model = build_model(device, dtype, layers)
    n_params = sum(p.numel() for p in model.parameters())
    T = prompt + 3 * PRED + OUT
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (T,), generator=gen).tolist()
    call = RenderedCall(
        text="",
        input_ids=ids,
        output_range=(prompt + 3 * PRED, T),
        source_ranges={i + 1: [(prompt + i * PRED, prompt + (i + 1) * PRED)] for i in range(3)},
    )
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    ids_t = torch.tensor([ids], device=device)  # (1, T)

    if case == "a":
        def run():
            with torch.no_grad():
                model(input_ids=ids_t, use_cache=False, logits_to_keep=OUT + 1)
    elif case == "r":
        from agentgrad.attribution.gbc import gbc

        def run():
            gbc(model, ids, call.output_range, call.source_ranges)
    elif case in ("s", "x"):
        from captum.attr import InputXGradient, Saliency

        from agentgrad.attribution.gbc import source_weights

        o_s, o_e = call.output_range
        y = ids_t[0, o_s:o_e]  # (n_out,)

        def objective(embeds):  # (1, T, H) -> (1,): sum_i log p(y_i), the scorer's objective
            logits = model(inputs_embeds=embeds).logits[0].float()  # (T, V)
            return logits[o_s - 1:o_e - 1].log_softmax(-1).gather(-1, y[:, None]).sum()[None]

        method = Saliency(objective) if case == "s" else InputXGradient(objective)
        kw = {"abs": True} if case == "s" else {}

        def run():
            with torch.no_grad():
                e = model.get_input_embeddings()(ids_t)  # (1, T, H)
            per_token = method.attribute(e, **kw)[0].double().sum(-1)  # (T,): ||g_t||_1 or g_t . e_t
            for ranges in call.source_ranges.values():
                source_weights(per_token, per_token, ranges)
    elif case in ("b", "c"):
        scorer = Scorer(tokenizer=None, model=model, mode="naive" if case == "b" else "cached")
        if case == "c":
            scorer.gradients(call)  # an earlier call of the same agent built the prefix cache

        def run():
            scorer.gradients(call)
    else:
        emb = model.get_input_embeddings()
        ctx = ids_t[:, : prompt + 3 * PRED]  # (1, T - OUT): what the agent read

        def run():
            with torch.enable_grad():
                leaf = emb(ctx).detach().requires_grad_(True)  # (1, T - OUT, H)
                out = model(inputs_embeds=leaf, use_cache=True, logits_to_keep=1)
                past, logits = out.past_key_values, out.logits[:, -1].float()  # (1, V)
                total = 0.0
                for _ in range(OUT):
                    nxt = logits.argmax(-1)  # (1,) greedy
                    total = total + logits.log_softmax(-1)[0, nxt[0]]
                    out = model(inputs_embeds=emb(nxt)[:, None], past_key_values=past, use_cache=True)
                    past, logits = out.past_key_values, out.logits[:, -1].float()
                total.backward()

    run()  # warm-up (allocator, kernels)
    sync()
    out = {"case": case, "prompt": prompt, "params": n_params, "tokens": T}
    if what == "memory":
        with PeakMemory(device) as mem:
            run()
        return out | {"peak_extra_bytes": mem.peak}
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - t0)
    return out | {"seconds": statistics.median(times), "all_seconds": times}


def kv_copies_bytes(prompt: int, layers: int, dtype: str) -> int:
    """What (d) keeps for backward: each generated token's attention saves the whole K and V."""
    width = 768 * (2 if dtype in ("bfloat16", "float16") else 4)
    return sum(2 * layers * (prompt + 3 * PRED + i) * width for i in range(OUT))


def child(args) -> None:
    limit = int(os.environ.get("AGENTGRAD_BENCH_MEM_LIMIT", "0"))
    if limit:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # fail cleanly instead of the OOM killer
    try:
        res = measure(args.case, args.prompt, args.device, args.dtype, args.layers, args.repeats, args.what)
    except (RuntimeError, MemoryError) as e:  # torch's CPU and CUDA out-of-memory errors
        if "memory" not in str(e).lower() and not isinstance(e, MemoryError):
            raise
        res = {"case": args.case, "prompt": args.prompt, "oom": True, "error": str(e).splitlines()[0][:200]}
    print("RESULT " + json.dumps(res), flush=True)


def table(path: str) -> None:
    """Per case of a ``--json`` file, per prompt length: its seconds and its ratios to (c) and to (b)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"attribution_cost: {path} is not a file this script wrote with --json ({e.__class__.__name__})")
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, dict):
        sys.exit(f"attribution_cost: {path} is not a file this script wrote with --json (no results)")
    for prompt, cases in results.items():
        for case, r in cases.items():
            if r.get("oom") or "seconds" not in r:
                print(f"prompt {prompt} {LABELS.get(case, case)}: out of memory")
                continue
            rel = [f"{r['seconds'] / cases[k]['seconds']:.{d}f}" if k in cases and "seconds" in cases[k] else "-"
                   for k, d in (("c", 1), ("b", 2))]
            print(f"prompt {prompt} {LABELS.get(case, case)}: {r['seconds']:.2f} s, / (c) {rel[0]}, / (b) {rel[1]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--layers", type=int, default=10, help="10 layers of width 768: about 120M parameters")
    ap.add_argument("--prompts", default="1000,4000", help="prompt lengths (comma-separated)")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per case (median), after one warm-up")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--cases", default=",".join(CASES),
                    help="which cases (comma-separated, of a,b,c,d and r,s,x: the reference gbc.py, Captum's "
                         "Saliency and InputXGradient)")
    ap.add_argument("--time-only", action="store_true", help="no memory measurement (one process per case less)")
    ap.add_argument("--table", help="print each case's time and its ratios to (c) and (b) from a --json file, and stop")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--prompt", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--what", default="time", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.table:
        return table(args.table)
    if args.case:
        return child(args)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if not cases or any(c not in LABELS for c in cases):
        sys.exit(f"--cases: choose among {', '.join(LABELS)}; got {args.cases!r}")
    if {"s", "x"} & set(cases):
        try:
            import captum.attr  # noqa: F401
        except ImportError as e:
            sys.exit(f"cases s and x need Captum ({e}): pip install -e '.[attribution-check]'")

    env = dict(os.environ, TRANSFORMERS_VERBOSITY="error", HF_HUB_DISABLE_PROGRESS_BARS="1")
    limit = 0
    if not args.device.startswith("cuda"):  # address-space limits and CUDA do not mix
        limit = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.85)
        env["AGENTGRAD_BENCH_MEM_LIMIT"] = str(limit)

    def child_run(case: str, prompt: int, what: str) -> dict:
        cmd = [sys.executable, __file__, "--case", case, "--prompt", str(prompt), "--device", args.device,
               "--dtype", args.dtype, "--layers", str(args.layers), "--repeats", str(args.repeats), "--what", what]
        e = dict(env, MALLOC_MMAP_THRESHOLD_="65536") if what == "memory" else env
        proc = subprocess.run(cmd, capture_output=True, text=True, env=e)
        line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if proc.returncode or not line:
            sys.exit(f"case {case} ({what}) at prompt {prompt} failed:\n{proc.stderr[-3000:]}")
        return json.loads(line[0][7:])

    results: dict[int, dict[str, dict]] = {}
    for prompt in [int(p) for p in args.prompts.split(",")]:
        results[prompt] = {}
        for case in cases:
            r = child_run(case, prompt, "time")
            if not r.get("oom") and not args.time_only:
                mem = child_run(case, prompt, "memory")
                r = r | mem if not mem.get("oom") else mem
            results[prompt][case] = r
            if r.get("oom"):
                print(f"  measured {LABELS[case]:34s} prompt {prompt:5d}: out of memory within "
                      f"{limit / 2**30:.1f} GiB (it keeps about {kv_copies_bytes(prompt, args.layers, args.dtype) / 2**30:.1f}"
                      f" GiB of key/value copies for backward)", flush=True)
                continue
            mem = f", {r['peak_extra_bytes'] / 2**20:8.1f} MiB" if "peak_extra_bytes" in r else ""
            print(f"  measured {LABELS[case]:34s} prompt {prompt:5d}: {r['seconds']:8.3f} s{mem}", flush=True)

    def fmt(r: dict, key: str, scale: float = 1.0) -> str:
        return f"{'OOM':>15s}" if r.get("oom") else f"{r[key] / scale:15.3f}" if key in r else f"{'-':>15s}"

    def ratio(rx: dict, ry: dict, key: str) -> str:
        if rx.get("oom") or ry.get("oom") or key not in rx or key not in ry or not ry[key]:
            return f"{'n/a':>15s}"
        return f"{rx[key] / ry[key]:15.3f}"

    first = next(iter(next(iter(results.values())).values()))
    print(f"\nmodel: Llama-shaped, {first['params'] / 1e6:.0f}M parameters, {args.dtype}, device {args.device}; "
          f"call = prompt + 3 x {PRED} predecessor tokens + {OUT} output tokens")
    header = f"{'':36s}" + "".join(f"{'prompt ' + str(p):>30s}" for p in results)
    print(header)
    print(f"{'':36s}" + "".join(f"{'time (s)':>15s}{'peak extra MiB':>15s}" for _ in results))
    for case in cases:
        row = f"{LABELS[case]:36s}"
        for p in results:
            r = results[p][case]
            row += fmt(r, "seconds") + fmt(r, "peak_extra_bytes", 2**20)
        print(row)
    print()
    ratios = [("(b)/(a)", "b", "a"), ("(c)/(a)", "c", "a"), ("(c)/(b)", "c", "b"), ("(d)/(c)", "d", "c"),
              ("(r)/(c)", "r", "c"), ("(s)/(c)", "s", "c"), ("(x)/(c)", "x", "c"),
              # equal work: the engine without its prefix cache differentiates every token of the call, as
              # the reference and Captum's passes do (each run cold: nothing cached before it)
              ("(r)/(b)", "r", "b"), ("(s)/(b)", "s", "b"), ("(x)/(b)", "x", "b")]
    ratios = [x for x in ratios if x[1] in cases and x[2] in cases]
    print(f"{'ratio':36s}" + "".join(f"{'time':>15s}{'memory':>15s}" for _ in results))
    for name, x, y in ratios:
        row = f"{name:36s}"
        for p in results:
            rx, ry = results[p][x], results[p][y]
            row += ratio(rx, ry, "seconds") + ratio(rx, ry, "peak_extra_bytes")
        print(row)
    print()
    targets = []
    at4k = results.get(4000, {})
    if "c" in at4k and {"s", "x"} & set(at4k) and not any(at4k[k].get("oom") for k in at4k):
        v = min(at4k[k]["seconds"] for k in ("s", "x") if k in at4k) / at4k["c"]["seconds"]
        targets.append(("Captum / (c) time at prompt 4000 >= 3", v, v >= 3))
    if "b" in at4k and {"s", "x"} & set(at4k) and not any(at4k[k].get("oom") for k in at4k):
        v = min(at4k[k]["seconds"] for k in ("s", "x") if k in at4k) / at4k["b"]["seconds"]
        targets.append(("Captum / (b) time at prompt 4000 (equal work)", v, v >= 1))
    if 1000 in results and {"a", "c"} <= set(results[1000]):
        v = results[1000]["c"]["seconds"] / results[1000]["a"]["seconds"]
        targets.append(("(c)/(a) time at prompt 1000 <= 0.9", v, v <= 0.9))
    if {"a", "c"} <= set(at4k):
        v = results[4000]["c"]["seconds"] / results[4000]["a"]["seconds"]
        targets.append(("(c)/(a) time at prompt 4000 <= 0.4", v, v <= 0.4))
    if {"b", "c"} <= set(at4k) and "peak_extra_bytes" in at4k["b"]:
        m = results[4000]["c"]["peak_extra_bytes"] / results[4000]["b"]["peak_extra_bytes"]
        targets.append(("(c) peak memory <= 0.5 x (b) at prompt 4000", m, m <= 0.5))
    for name, v, ok in targets:
        print(f"target {name:45s} measured {v:6.3f}  {'MET' if ok else 'NOT MET'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "dtype": args.dtype, "results": results,
                       "targets": [{"target": n, "value": v, "met": ok} for n, v, ok in targets]}, f, indent=1)


if __name__ == "__main__":
    main()
