"""A small Llama-shaped scorer trained offline to reproduce planted-fault episodes' outputs.

This is a **mechanism test**: a model that really reads the sources it copies from, so that its
gradients can be checked against a known truth. Its accuracy says nothing about real LLMs.

It has its own word-level tokenizer (keys with their colon, values, names and template words; every
word of the generator is one token, held-out values and names included) and a ChatML template, is
trained on the calls of fresh fault-free ``train`` episodes made while it trains (teacher forcing,
loss on the output tokens only; a fixed set of calls is recited rather than read), and is
evaluated on ``eval`` episodes, whose values and agent names never occur in training. Every other
step is a look-up drill (random words, then fragments of them in random order: each next word is
found by locating the word before it, the circuit a key's look-up needs), and every head starts
with equal query and key projections (mimetic initialisation: heads begin by matching equal tokens);
with both, and two 64-wide heads per layer, the look-up forms within the 5-minute budget. It is
saved with ``save_pretrained`` and loaded by :class:`~agentgrad.attribution.scorer.Scorer` like any
model. ``cached_blame_model`` keeps built models under ``$AGENTGRAD_CACHE/blame/``; the scorer value
``trained`` names it (:func:`~agentgrad.attribution.factory.make_scorer`).
"""

from __future__ import annotations

import json
import math
import os
import queue
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from agentgrad.attribution.factory import register_scorer_value
from agentgrad.benchmarks.planted import episodes as E

SPECIALS = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass
class BlameModelConfig:
    """Size and training budget of the trained scorer (see the README for the accuracy the defaults reach)."""

    layers: int = 2
    hidden: int = 128
    intermediate: int = 128  # MLP width; copying is attention's work, a narrow MLP trains faster per second
    heads: int = 2  # wide heads (64 dims) form the look-up circuit far sooner than many narrow ones
    steps: int = 8000
    batch: int = 16
    lr: float = 1e-3
    reuse: int = 2  # each generated batch is trained on this many times (fresh data otherwise)
    eval_episodes: int = 40
    seed: int = 0
    # the budget (the issue's: 5 minutes): the schedule ends by then on any machine; None: no time cap,
    # the schedule runs on steps only, so the result is the same on a busy machine as on an idle one
    max_seconds: float | None = 280.0
    prompt_loss: float = 0.0  # weight of the loss on prompt tokens (repeated facts teach copying too)
    rope_theta: float = 300.0  # a small base gives more frequencies that resolve nearby positions
    induction_warmup: float = 1.0  # share of the steps on which every other batch is a look-up drill
    induction_length: int = 16  # longest word list of those drills
    mimetic_init: bool = True  # start every attention head with its key projection equal to its query's

    def key(self) -> str:
        import hashlib

        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def build_tokenizer() -> Any:
    """Word-level tokenizer over every word the generator writes; whitespace is not a token."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = set(E.KEYS) | set(E.ADJ) | set(E.NOUN) | set(E.NAMES) | set(E.TEMPLATE_WORDS)
    words |= {"system", "user", "assistant", "lookup", "task", ":", ",", ".", "[", "]", "_"}
    words |= {str(i) for i in range(10)}
    words |= {f"{k}:" for k in E.KEYS} | {"report:"}  # a key with its colon is one token: keys never read as values
    vocab = {t: i for i, t in enumerate(SPECIALS + sorted(words))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Split(Regex(r"[A-Za-z]+:|[A-Za-z]+|[0-9]|[^A-Za-z0-9]"), behavior="isolated"),
    ])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                 eos_token="<|im_end|>", bos_token="<|im_start|>")
    hf.chat_template = CHAT_TEMPLATE
    return hf


def _encode(tok: Any, node: Any) -> tuple[list[int], int]:
    """(token ids of the rendered call with its output, index of the first output token)."""
    from agentgrad.models.hf import render_chat

    prompt = render_chat(tok, node.messages, None, add_generation_prompt=True)
    ids_prompt = tok(prompt, add_special_tokens=False)["input_ids"]
    ids_out = tok(node.text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    return ids_prompt + ids_out, len(ids_prompt)


def token_accuracy(model: Any, tok: Any, nodes: list[Any]) -> float:
    """Share of output tokens (end-of-turn included) that greedy prediction gets right under teacher forcing."""
    import torch

    right = total = 0
    with torch.no_grad():
        for node in nodes:
            ids, start = _encode(tok, node)
            x = torch.tensor(ids)[None]  # (1, T)
            pred = model(input_ids=x).logits[0, start - 1 : -1].argmax(-1)  # (n_out,)
            right += int((pred == x[0, start:]).sum())
            total += len(ids) - start
    return right / max(total, 1)


def eval_calls(n_episodes: int, seed: int = 0) -> list[Any]:
    """Calls of fault-free held-out (``eval``) episodes of every topology."""
    out = []
    for i in range(n_episodes):
        out.extend(E.generate(E.TOPOLOGIES[i % len(E.TOPOLOGIES)], None, 10_000 + seed * 7919 + i, "eval").trace.calls())
    return out


class _FreshBatches:
    """Batches of calls from fresh ``train`` episodes, made by a background thread while the model trains.

    Every batch is new (up to ``cfg.reuse`` uses): a small model given a fixed set of calls learns
    to recite them instead of looking values up. A chunk of calls is sorted by length and cut into
    batches, so that little of a batch is padding; the order is seeded.
    """

    def __init__(self, tok: Any, cfg: BlameModelConfig, chunk_batches: int = 16):
        import threading

        self.tok, self.cfg, self.chunk_batches = tok, cfg, chunk_batches
        self.queue: queue.Queue = queue.Queue(maxsize=4 * chunk_batches * max(cfg.reuse, 1))
        self.stop = threading.Event()
        threading.Thread(target=self._produce, daemon=True).start()

    def _produce(self) -> None:
        cfg = self.cfg
        rng, episodes = random.Random(cfg.seed), E.training_episodes(cfg.seed)
        while not self.stop.is_set():
            calls: list[tuple[list[int], int]] = []
            while len(calls) < cfg.batch * self.chunk_batches:
                calls.extend(_encode(self.tok, n) for n in next(episodes).trace.calls())
            calls.sort(key=lambda d: len(d[0]))
            batches = [calls[j : j + cfg.batch] for j in range(0, len(calls) - cfg.batch + 1, cfg.batch)]
            batches = batches * max(cfg.reuse, 1)
            rng.shuffle(batches)
            for b in batches:
                while not self.stop.is_set():
                    try:
                        self.queue.put(b, timeout=0.5)
                        break
                    except queue.Full:  # the trainer is behind
                        continue

    def get(self) -> list[tuple[list[int], int]]:
        return self.queue.get()

    def close(self) -> None:
        self.stop.set()


def _induction_batch(cfg: BlameModelConfig, low: int, high: int, rng: random.Random) -> list[tuple[list[int], list[int]]]:
    """Look-up drills: distinct random words, then fragments of them quoted in random order.

    Each fragment starts at a random place of the word list and goes on for 2-4 words; every word
    of a fragment after its first is predictable only by finding the word before it in the list
    and reading what followed it (an induction circuit), the mechanism the look-up of a key's value
    needs. List and fragment lengths vary, so that no fixed offset solves it. Returns (ids, labels)
    with -100 where there is no loss.
    """
    out = []
    for _ in range(cfg.batch):
        words = rng.sample(range(low, high), rng.randint(cfg.induction_length // 2, cfg.induction_length))
        ids, labels = list(words), [-100] * len(words)
        while len(ids) < 2 * len(words):
            i = rng.randrange(len(words) - 1)
            frag = words[i : i + rng.randint(2, 4)]
            ids += frag
            labels += [-100] + frag[1:]
        out.append((ids, labels))
    return out


def train_blame_model(out_dir: str | Path, cfg: BlameModelConfig | None = None,
                      on_step: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """Train the scorer into ``out_dir``; returns its report (held-out token accuracy, seconds, steps)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = cfg or BlameModelConfig()
    t0 = time.time()
    torch.manual_seed(cfg.seed)
    tok = build_tokenizer()
    batches = _FreshBatches(tok, cfg)
    mc = LlamaConfig(vocab_size=len(tok), hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                     num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
                     max_position_embeddings=2048, initializer_range=0.02, tie_word_embeddings=True,
                     rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = LlamaForCausalLM(mc)
    if cfg.mimetic_init:  # q.k = |W x|^2-like at the start: heads begin by matching equal tokens
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.k_proj.weight.copy_(layer.self_attn.q_proj.weight)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    t_train = time.time()
    model.train()
    trained, loss_v = 0, float("nan")
    warm = int(cfg.induction_warmup * cfg.steps)
    drills = random.Random(cfg.seed)
    budget = None if cfg.max_seconds is None else max(cfg.max_seconds - (t_train - t0), 1e-9)
    time_capped = False
    for step in range(1, cfg.steps + 1):
        # progress: steps done or time spent, whichever is further along, so that a slower machine
        # still anneals the learning rate to zero within the time budget (warm-up 10%, then cosine);
        # without a budget, steps only (deterministic whatever the machine's load)
        progress = (step - 1) / cfg.steps
        if budget is not None and (time.time() - t_train) / budget > progress:
            progress = (time.time() - t_train) / budget
            if progress >= 1.0:
                time_capped = True
                break
        for group in opt.param_groups:
            group["lr"] = cfg.lr * (progress / 0.1 if progress < 0.1 else
                                    0.5 * (1 + math.cos(math.pi * (progress - 0.1) / 0.9)))
        if step <= warm and step % 2:
            batch = _induction_batch(cfg, len(SPECIALS), len(tok), drills)
        else:
            batch = [(ids, [-100] * start + ids[start:]) for ids, start in batches.get()]
        width = max(len(ids) for ids, _ in batch)
        x = torch.full((cfg.batch, width), tok.pad_token_id)  # (B, T)
        y = torch.full((cfg.batch, width), -100)  # (B, T): the labels (-100: no loss there)
        mask = torch.zeros((cfg.batch, width), dtype=torch.long)  # (B, T)
        for i, (ids, labels) in enumerate(batch):
            x[i, : len(ids)] = torch.tensor(ids)
            y[i, : len(ids)] = torch.tensor(labels)
            mask[i, : len(ids)] = 1
        if cfg.prompt_loss:
            logits = model(input_ids=x, attention_mask=mask).logits[:, :-1].float()  # (B, T-1, V)
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none")  # (B, T-1)
            out_w = (y[:, 1:] != -100).float()  # (B, T-1)
            w = out_w + cfg.prompt_loss * mask[:, 1:] * (1 - out_w)
            loss = (nll * w).sum() / w.sum()
        else:
            loss = model(input_ids=x, attention_mask=mask, labels=y).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        trained, loss_v = step, float(loss.detach())
        if on_step and step % 50 == 0:
            on_step(step, loss_v)
    batches.close()
    model.eval()
    acc = token_accuracy(model, tok, eval_calls(cfg.eval_episodes, cfg.seed))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    report = {"heldout_token_accuracy": acc, "steps": trained, "time_capped": time_capped, "final_loss": loss_v,
              "seconds": round(time.time() - t0, 1), "config": asdict(cfg),
              "note": "mechanism test: a model that copies facts from its sources; not evidence about real LLMs"}
    (out / "blame_model.json").write_text(json.dumps(report, indent=1))
    return report


def cached_blame_model(cfg: BlameModelConfig | None = None,
                       on_step: Callable[[int, float], None] | None = None) -> Path:
    """The trained scorer for ``cfg``, trained once and kept (like the tiny model), renamed into place."""
    from agentgrad.models.spec import cache_dir

    cfg = cfg or BlameModelConfig()
    final = cache_dir() / "blame" / cfg.key()
    if (final / "blame_model.json").exists() and (final / "model.safetensors").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cfg.key()}-", dir=final.parent))
    train_blame_model(tmp, cfg, on_step)
    try:
        os.rename(tmp, final)
    except OSError:  # trained meanwhile by another process
        shutil.rmtree(tmp, ignore_errors=True)
    return final


# ``--scorer trained`` (and ``make_scorer("trained")``): the cached trained scorer, built on first use
register_scorer_value("trained", cached_blame_model, "the planted benchmark's trained scorer, built once")
