"""A local Hugging Face causal LM behind the :class:`LanguageModel` protocol.

Weights load once per process per (path, dtype, device) and are shared by every agent naming
them. Prompts are rendered with the tokenizer's chat template (with tools where the template
supports them); tool calls are parsed from the generated text (see ``toolparse``). A template that
has no tools (it renders the same with and without them, as SmolLM2's ChatML does) gets them as a
schema-constrained JSON reply instead (``toolschema``). An output schema in the settings constrains
decoding token by token (``constrain``: llguidance masks), greedy, batched or sampled.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentgrad.core.config import validate
from agentgrad.errors import ContextLengthError, ModelError
from agentgrad.core.model import Generation, GenerationSettings, ThreadedAsyncMixin
from agentgrad.models import toolschema
from agentgrad.models.batching import ContinuousBatcher, supports_continuous_batching
from agentgrad.models.threads import follow_load
from agentgrad.models.toolparse import parse_tool_calls


class HFOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(..., description="local folder, hub id, gguf:FILE, or an embedded model's name (smollm2)")
    gguf_file: str | None = Field(None, description="a GGUF file name inside the folder `path`")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    device_map: str | None = None
    trust_remote_code: bool = False
    max_context: int | None = Field(None, ge=1, description="override of the model's context length")
    attn_implementation: str | None = Field(None, description="sdpa (default), eager, flash_attention_2, ...")


_SHARED: dict[tuple[Any, ...], "HFModel"] = {}
_SHARED_LOCK = threading.Lock()


def looks_local(path: str) -> bool:
    """A path (rather than a hub id ``org/name``) by its form or by existing."""
    p = os.path.expanduser(path)
    return os.path.exists(p) or p.startswith((".", "/", "~")) or p.count("/") > 1 or os.sep != "/" and os.sep in p


def load_tokenizer_and_model(opts: HFOptions) -> tuple[Any, Any]:
    """``from_pretrained`` for tokenizer and model, with one-line errors for the usual mistakes.

    ``opts.path`` may be any model value of :mod:`agentgrad.models.spec` (a GGUF file or an
    embedded model's name are converted once to a cached folder, which is what loads)."""
    from agentgrad.models.spec import is_model_name, resolve_model_path

    if opts.gguf_file or is_model_name(opts.path):
        opts = opts.model_copy(update={"path": resolve_model_path(opts.path, opts.gguf_file), "gguf_file": None})
    path = os.path.expanduser(opts.path)
    if looks_local(opts.path) and not os.path.isdir(path):
        raise ModelError(f"model folder {opts.path} does not exist (give a folder with config.json, or a hub id)")
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "config.json")):
        raise ModelError(f"model folder {opts.path} has no config.json; is it a Hugging Face model folder?")
    if not os.path.isdir(path):
        check_hub_reachable(opts.path)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=opts.trust_remote_code)
        kwargs: dict[str, Any] = {"trust_remote_code": opts.trust_remote_code}
        kwargs["dtype"] = "auto" if opts.dtype == "auto" else getattr(torch, opts.dtype)
        if opts.device_map:
            kwargs["device_map"] = opts.device_map
        if opts.attn_implementation:
            kwargs["attn_implementation"] = opts.attn_implementation
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"cannot load model {opts.path!r}: {first}") from None
    if not opts.device_map:
        try:
            model.to(opts.device)
        except (RuntimeError, AssertionError) as e:
            raise ModelError(f"cannot move model {opts.path!r} to device {opts.device!r}: {str(e).splitlines()[0]}") from None
    model.eval()
    model.requires_grad_(False)
    return tok, model


def check_hub_reachable(repo_id: str, timeout: float = 3.0) -> None:
    """Fail at once (not after a minute of retries) when a hub id must be downloaded and cannot be.

    A model already in the local Hugging Face cache loads offline. Otherwise offline mode
    (``HF_HUB_OFFLINE``) or a hub that does not answer within ``timeout`` seconds is a one-line error.
    """
    try:
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
            return
    except Exception:  # noqa: BLE001 - an invalid repo id: from_pretrained says so below
        return
    fix = f"download it where there is network (hf download {repo_id}) and give its folder"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ModelError(f"model {repo_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; {fix}")
    import socket
    from urllib.parse import urlparse

    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError:
        raise ModelError(f"model {repo_id!r} is not in the local Hugging Face cache and {host} cannot be reached "
                         f"(no network?); {fix}") from None


def context_length(model: Any, tok: Any, override: int | None = None) -> int:
    if override:
        return override
    cfg = getattr(model, "config", None)
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        v = getattr(cfg, attr, None) or getattr(getattr(cfg, "text_config", None), attr, None)
        if isinstance(v, int) and v > 0:
            return v
    v = getattr(tok, "model_max_length", None)
    return v if isinstance(v, int) and 0 < v < 10**9 else 2048


def to_hf_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our messages in the shape Hugging Face chat templates expect for tool calls."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {"id": c.get("id", ""), "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in m["tool_calls"]
            ]
        out.append(m)
    return out


def render_chat(tok: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, **kw: Any) -> str:
    """The chat template applied to ``messages`` (no tokenisation), with a clear error if absent."""
    if not getattr(tok, "chat_template", None):
        raise ModelError(f"tokenizer of {getattr(tok, 'name_or_path', '?')} has no chat template")
    try:
        return tok.apply_chat_template(to_hf_messages(messages), tools=tools or None, tokenize=False, **kw)
    except Exception as e:  # jinja raises many kinds (TemplateError, TypeError, ...)
        raise ModelError(f"the chat template of {getattr(tok, 'name_or_path', '?')} failed: {e}") from None


class HFModel(ThreadedAsyncMixin):
    """Generation with a local Hugging Face model (greedy, or seeded sampling)."""

    def __init__(self, name: str = "hf", **options: Any):
        self.name = name
        self.options = validate(HFOptions, options, f"models.{name}")
        self.tokenizer, self.model = load_tokenizer_and_model(self.options)
        self.max_context = context_length(self.model, self.tokenizer, self.options.max_context)
        self._lock = threading.Lock()  # one generation at a time per loaded model
        self._queue_lock = threading.Lock()
        self._pending: list[_Request] = []  # calls waiting for the model, batched when compatible
        self.max_batch = 16
        # greedy calls: continuous batching (rows join and leave the batch per token) where the
        # model's cache allows it; else compatible waiting calls share one padded generate
        self.batcher = (ContinuousBatcher(self.model, self.tokenizer, self._lock, self.max_batch)
                        if supports_continuous_batching(self.model) else None)
        self._compiler: Any = None
        self._template_tools: bool | None = None  # whether the chat template renders tools at all

    def compiler(self) -> Any:
        """Output schemas compiled for this tokenizer (built on first use)."""
        if self._compiler is None:
            from agentgrad.models.constrain import Compiler

            eos = self.model.generation_config.eos_token_id
            ids = [t for t in dict.fromkeys([self.tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos])])
                   if t is not None]
            vocab = self.model.get_output_embeddings().weight.shape[0]
            self._compiler = Compiler(self.tokenizer, vocab, ids, self.options.path)
        return self._compiler

    def template_has_tools(self) -> bool:
        """Whether the chat template shows tools to the model (a template that ignores them renders
        the same text with and without a tool)."""
        if self._template_tools is None:
            probe = [{"role": "system", "content": "You help."}, {"role": "user", "content": "hi"}]
            tool = [{"type": "function", "function": {"name": "agentgrad_probe_tool", "description": "probe",
                                                      "parameters": {"type": "object", "properties": {}}}}]
            self._template_tools = (render_chat(self.tokenizer, probe, tool, add_generation_prompt=True)
                                    != render_chat(self.tokenizer, probe, None, add_generation_prompt=True))
        return self._template_tools

    @classmethod
    def shared(cls, name: str = "hf", **options: Any) -> "HFModel":
        """The process-wide instance for these options (weights are loaded once)."""
        opts = validate(HFOptions, options, f"models.{name}")
        key = (str(Path(opts.path).expanduser()), opts.gguf_file, opts.dtype, opts.device, opts.device_map, opts.max_context)
        with _SHARED_LOCK:
            if key not in _SHARED:
                _SHARED[key] = cls(name=name, **options)
            return _SHARED[key]

    def describe(self) -> dict[str, Any]:
        return {"backend": "hf", "path": self.options.path, "dtype": self.options.dtype}

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    def generate(self, messages, tools, settings: GenerationSettings) -> Generation:
        """One reply. Greedy calls made at the same time from several threads (concurrent episodes)
        are decoded together: continuously batched (:mod:`agentgrad.models.batching`), else in one
        padded ``generate``; seeded sampling runs alone, so that its result never depends on what
        else ran. ``settings.output`` constrains the reply to its schema (on any of these paths)."""
        schema_tools = bool(tools) and not self.template_has_tools()
        if schema_tools:  # a template without tools: the tools in the prompt, the reply a JSON tool call
            messages = toolschema.messages_without_tools(messages, tools)
            settings = settings.with_output(toolschema.tool_reply_schema(tools))
            tools = None
        constraint = self.compiler().row(settings.output) if settings.output is not None else None
        prompt = render_chat(self.tokenizer, messages, tools, add_generation_prompt=True)
        ids = self.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"][0]  # (T,)
        n = ids.shape[0]
        if n >= self.max_context:
            raise ContextLengthError(
                f"prompt of {n} tokens does not fit the context of {self.options.path} ({self.max_context} tokens)"
            )
        cap = self.max_context - n
        limit = cap if settings.max_new_tokens is None else min(settings.max_new_tokens, cap)
        req = _Request(ids, limit, settings, constraint)
        if req.greedy and self.batcher is not None:
            new = self.batcher.generate(ids.tolist(), limit, tuple(settings.stop), constraint)
            return self._reply(new, n, limit, tools, settings, schema_tools)
        with self._queue_lock:
            self._pending.append(req)
        while not req.done:
            with self._lock:  # one generate at a time; the holder decodes every compatible waiting call
                if req.done:
                    break
                with self._queue_lock:
                    batch = [r for r in self._pending if r.key == req.key][: self.max_batch] if req.greedy else [req]
                    if req not in batch:
                        batch[-1] = req
                    for r in batch:
                        self._pending.remove(r)
                try:
                    outs = self._decode(batch)
                except BaseException as e:  # every waiting caller gets the error, not a hang
                    for r in batch:
                        r.error, r.done = e, True
                    raise
                for r, new in zip(batch, outs):
                    r.new, r.done = new, True
        if req.error is not None:
            raise req.error
        return self._reply(req.new, n, limit, tools, settings, schema_tools)

    def _decode(self, batch: list["_Request"]) -> list[list[int]]:
        """Generated token ids of each request (left-padded into one batch; eos and padding cut)."""
        import torch

        follow_load()

        settings = batch[0].settings
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        width = max(r.ids.shape[0] for r in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)  # (B, T) left-padded
        mask = torch.zeros((len(batch), width), dtype=torch.long)  # (B, T)
        for i, r in enumerate(batch):
            ids[i, width - r.ids.shape[0]:] = r.ids
            mask[i, width - r.ids.shape[0]:] = 1
        temperature = 1.0 if settings.temperature is None else settings.temperature
        kw: dict[str, Any] = {"max_new_tokens": max(r.limit for r in batch), "do_sample": temperature > 0,
                              "pad_token_id": pad}
        if temperature > 0:
            kw.update(temperature=temperature, top_p=settings.top_p)
        else:
            kw.update(temperature=None, top_p=None, top_k=None)
        if settings.stop:
            kw.update(stop_strings=settings.stop, tokenizer=self.tokenizer)
        if any(r.constraint is not None for r in batch):
            kw["logits_processor"] = _schema_processor([r.constraint for r in batch], width)
        with torch.no_grad(), torch.random.fork_rng(devices=[] if self.device.type == "cpu" else [self.device]):
            if settings.seed is not None:
                torch.manual_seed(settings.seed)
            out = self.model.generate(ids.to(self.device), attention_mask=mask.to(self.device), **kw)  # (B, T + new)
        eos = self.model.generation_config.eos_token_id
        stops = set(eos if isinstance(eos, list) else [eos]) | {self.tokenizer.eos_token_id} - {None}
        result = []
        for i, r in enumerate(batch):
            new = out[i, width:].tolist()[: r.limit]
            end = next((j + 1 for j, t in enumerate(new) if t in stops), len(new))  # the eos is kept, as unbatched
            result.append(new[:end])
        return result

    def _reply(self, new: list[int], n: int, limit: int, tools: Any, settings: GenerationSettings,
               schema_tools: bool = False) -> Generation:
        raw = self.tokenizer.decode(new, skip_special_tokens=False)
        for special in {self.tokenizer.eos_token, self.tokenizer.pad_token} - {None}:
            raw = raw.replace(special, "")
        text, calls = parse_tool_calls(raw) if tools else (raw, [])
        if not calls:
            text = self.tokenizer.decode(new, skip_special_tokens=True)
        if settings.stop:
            for s in settings.stop:
                if s in text:
                    text = text[: text.index(s)]
        finish = "tool_calls" if calls else ("length" if len(new) >= limit else "stop")
        gen = Generation(
            text=text,
            tool_calls=calls,
            usage={"prompt_tokens": n, "completion_tokens": len(new)},
            finish_reason=finish,
            raw=raw if calls else None,
            constrained=True if settings.output is not None else None,
        )
        return toolschema.parse_tool_reply(gen) if schema_tools else gen


def _schema_processor(constraints: list[Any], width: int) -> Any:
    """A logits processor for ``generate`` that masks each row by its constraint (None: free) and
    feeds it the token chosen at the previous step (rows are left-padded to ``width`` prompt tokens)."""
    from transformers import LogitsProcessor, LogitsProcessorList

    from agentgrad.models.constrain import mask_rows

    class SchemaMask(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:  # (B, T), (B, V)
            if input_ids.shape[1] > width:  # a token was chosen since the last call
                for c, t in zip(constraints, input_ids[:, -1].tolist()):
                    if c is not None:
                        c.consume(t)
            return mask_rows(scores, constraints)

    return LogitsProcessorList([SchemaMask()])


class _Request:
    """One waiting ``generate`` call. Greedy calls with the same limit and stop strings share a batch."""

    def __init__(self, ids: Any, limit: int, settings: GenerationSettings, constraint: Any = None):
        self.ids, self.limit, self.settings, self.constraint = ids, limit, settings, constraint
        self.greedy = settings.temperature == 0
        self.key = (limit, tuple(settings.stop)) if self.greedy else id(self)
        self.done, self.new, self.error = False, [], None
