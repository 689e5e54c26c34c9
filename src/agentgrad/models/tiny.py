"""Tiny random causal LMs with a locally trained byte-level BPE tokenizer, built offline in seconds.

The weights are random (``initializer_range`` 0.2 so greedy outputs vary with the input); the
model is a normal Hugging Face folder that ``from_pretrained`` loads, so every code path that
serves real weights is exercised without downloading anything.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agentgrad.errors import ConfigError
from agentgrad.models.spec import cache_dir  # one cache for everything agentgrad builds

ARCHS = ("llama", "qwen3", "mistral", "gemma")

SPECIALS = ["<|begin_of_text|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]
TOOL_TAGS = ["<tool_call>", "</tool_call>"]

# ChatML with Hermes-style tools. ``bos`` is prepended for the architectures whose templates
# start with a BOS token (llama, gemma), so that code mapping characters to tokens meets both.
CHAT_TEMPLATE = (
    "{% if add_bos %}{{ bos_token }}{% endif %}"
    "{% for m in messages %}"
    "<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'system' and tools %}{{ m['content'] }}\n\n# Tools\n<tools>\n"
    "{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>\n"
    'Call a tool with <tool_call>{"name": NAME, "arguments": {...}}</tool_call>'
    "{% else %}{{ m['content'] }}{% endif %}"
    "{% if m['tool_calls'] is defined and m['tool_calls'] %}{% for c in m['tool_calls'] %}\n"
    '<tool_call>{"name": {{ c["function"]["name"] | tojson }}, "arguments": {{ c["function"]["arguments"] | tojson }}}</tool_call>'
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = """
The manager reads the question and routes the work to the right worker. Each worker answers one part
of the task, and the responder writes the final answer for the user. When an answer is wrong we ask
which agent is to blame. A hotel in the centre of town with free parking and free wifi costs 120 pounds
a night. The train leaves Cambridge at 09:15 and arrives in London at 10:05 on Monday. Please book a
table for 4 people at 19:30 on Friday. What is the capital of France? Paris is the capital of France.
Summarise the text in one sentence. Extract the numbers: 3, 17, 42 and 256. The order #W2378156 was
delivered; the customer wants to return the keyboard and exchange the thermostat. {"name": "lookup",
"arguments": {"query": "hotel", "area": "centre"}} Answer with yes or no. The sum of 12 and 30 is 42.
A short answer is better than a long one. Think step by step, then give the final answer.
"""


def _corpus() -> list[str]:
    base = [line.strip() for line in _CORPUS.strip().splitlines()]
    chat = [f"<|im_start|>{r}\n{t}<|im_end|>\n" for r in ("system", "user", "assistant") for t in base]
    return base * 20 + chat * 5 + [" ".join(str(i) for i in range(300))]


def build_tokenizer(vocab_size: int = 1024) -> Any:
    """A byte-level BPE tokenizer trained here on a small built-in corpus, with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    hf.add_tokens(TOOL_TAGS)
    return hf


def _suppressed(tok: Any) -> list[int]:
    """Token ids a random model should never emit: specials (but EOS) and bytes that are not text."""
    bad = set(tok.all_special_ids) - {tok.eos_token_id}
    bad.update(tok.convert_tokens_to_ids(TOOL_TAGS))
    for token, i in tok.get_vocab().items():
        s = tok.decode([i])
        if "\ufffd" in s or any((ord(ch) < 32 and ch != "\n") or ord(ch) == 127 for ch in s):
            bad.add(i)
    return sorted(bad)


def _config(arch: str, tok: Any, layers: int, hidden: int, max_context: int) -> Any:
    import transformers as tf

    common: dict[str, Any] = dict(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_context,
        initializer_range=0.2,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    if arch == "llama":
        return tf.LlamaConfig(**common)
    if arch == "qwen3":
        return tf.Qwen3Config(**common, head_dim=hidden // 4)
    if arch == "mistral":
        return tf.MistralConfig(**common, sliding_window=None)
    if arch == "gemma":
        return tf.GemmaConfig(**common, head_dim=hidden // 4)
    raise ConfigError(f"unknown tiny architecture {arch!r}; valid: {', '.join(ARCHS)}")


def build_tiny_model(
    out_dir: str | Path,
    arch: str = "llama",
    seed: int = 0,
    layers: int = 2,
    hidden: int = 64,
    max_context: int = 2048,
    vocab_size: int = 1024,
) -> Path:
    """Build and save a tiny random model + tokenizer folder; returns the folder.

    Args:
        out_dir: folder to write (created; existing model files are overwritten).
        arch: one of ``llama``, ``qwen3``, ``mistral``, ``gemma``.
        seed: seeds the random weights, so the same seed gives the same model.
        layers, hidden: size of the network.
        max_context: the model's context length (``max_position_embeddings``).
    """
    if arch not in ARCHS:
        raise ConfigError(f"unknown tiny architecture {arch!r}; valid: {', '.join(ARCHS)}")
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(vocab_size)
    tok.chat_template = CHAT_TEMPLATE.replace("add_bos", "true" if arch in ("llama", "gemma") else "false")
    cfg = _config(arch, tok, layers, hidden, max_context)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        suppress_tokens=_suppressed(tok),
        do_sample=False,
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def cached_tiny_model(arch: str = "llama", seed: int = 0) -> Path:
    """The tiny model for (arch, seed), built once and reused (the ``tiny`` model backend).

    Built into a temporary folder and renamed into place, so concurrent builders and crashes
    never leave a half-written model behind.
    """
    if arch not in ARCHS:
        raise ConfigError(f"unknown tiny architecture {arch!r}; valid: {', '.join(ARCHS)}")
    final = cache_dir() / "tiny" / f"{arch}-seed{seed}"
    if (final / "config.json").exists() and (final / "model.safetensors").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{arch}-seed{seed}-", dir=final.parent))
    build_tiny_model(tmp, arch=arch, seed=seed)
    try:
        os.rename(tmp, final)
    except OSError:  # built meanwhile by another process
        shutil.rmtree(tmp, ignore_errors=True)
    return final
