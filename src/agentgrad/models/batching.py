"""Continuous batching of greedy generation for one local causal LM.

Concurrent greedy calls to one loaded model (the episodes of a run at ``--concurrency`` N) are
decoded by one worker thread, one token per step for every active call. A call that finishes
(end-of-sequence, its token limit, or one of its stop strings) leaves the batch at once, and a call
that arrives while others are decoding joins at the next step: its prompt is prefilled and its
key/value cache merged into the running batch. No row waits for the longest reply of its batch,
and no call waits for a batch to end before it starts.

Rows of different lengths share one left-padded key/value cache: keys are stored already rotated
for their own positions, each row carries its own position ids and attention mask, and padding is
masked. The cache grows in place (:func:`~agentgrad.models.kvcache.growing_cache`: no copy of the whole
cache per token). Where the worker computes with one intra-op thread (beside another job, under the
CLI's ``auto``), the prompts that arrive while rows decode are prefilled in a thread of their own and
merged when done, so that the run computes in two one-core threads, not one
(:meth:`ContinuousBatcher._overlap`). Greedy decoding is what is batched: its result does not depend on
which other calls share the batch (up to float rounding of the batched matrix products). A row may carry an output schema's
constraint (:mod:`agentgrad.models.constrain`): its logits are masked before its choice, other
rows' are not, so constrained and free calls share the batch. Models whose cache is not a plain
per-layer key/value store (sliding-window layers, for one) are not batched this way:
:func:`supports_continuous_batching` says which. The caches themselves (the prompts' prefix cache,
transformers' cache objects) are :mod:`agentgrad.models.kvcache`'s.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections import deque
from typing import Any

from agentgrad.errors import ModelError
from agentgrad.models.kvcache import (PrefixCache, cache_kwarg, dynamic_cache, growing_cache, layers_kv, output_cache,
                                      plain_kv_cache)
from agentgrad.models.threads import follow_load

_LIVE: "weakref.WeakSet[ContinuousBatcher]" = weakref.WeakSet()  # batchers whose worker ran


@atexit.register
def _close_all() -> None:
    for batcher in list(_LIVE):
        batcher.close()


def _inference() -> Any:
    import torch

    return torch.inference_mode()


def greedy_suppressed(model: Any) -> list[int] | None:
    """The token ids greedy decoding must never pick under ``model``'s generation config (its
    ``suppress_tokens``), or None where greedy ``generate`` would apply another logits rule (a
    repetition penalty, forced tokens, ...) that the batcher does not."""
    try:
        import copy

        from transformers.generation.logits_process import SuppressTokensLogitsProcessor

        gc = copy.deepcopy(model.generation_config)
        gc.do_sample, gc.temperature, gc.top_p, gc.top_k = False, None, None, None
        procs = model._get_logits_processor(generation_config=gc, input_ids_seq_length=1, device="cpu")
    except Exception:  # a config or transformers version the check cannot read: not batched this way
        return None
    if any(not isinstance(p, SuppressTokensLogitsProcessor) for p in procs):
        return None
    return sorted({int(t) for p in procs for t in p.suppress_tokens.tolist()})


def supports_continuous_batching(model: Any) -> bool:
    """Whether rows of ``model`` can be merged into one cache (:func:`plain_kv_cache`) and greedy
    decoding under its generation config is an argmax (with suppressed tokens at most)."""
    return plain_kv_cache(model) and greedy_suppressed(model) is not None


class Row:
    """One waiting or decoding call: its prompt ids, token limit, stop strings and, once done, its
    generated ids (the end-of-sequence token kept) or its error."""

    def __init__(self, ids: list[int], limit: int, stop: tuple[str, ...], constraint: Any = None):
        self.ids, self.limit, self.stop = ids, limit, stop
        self.constraint = constraint  # a RowConstraint (an output schema), or None
        self.new: list[int] = []
        self.pos = len(ids)  # position of the next token fed to the model
        self.error: BaseException | None = None
        self.done = threading.Event()


class ContinuousBatcher:
    """A worker thread that decodes every submitted greedy call, rows joining and leaving per step.

    ``lock`` is held for each model step (so other users of the model, such as seeded sampling,
    interleave with the batch); ``max_batch`` rows decode at once, the others wait their turn."""

    def __init__(self, model: Any, tokenizer: Any, lock: threading.Lock, max_batch: int = 16,
                 prefill_tokens: int = 4096, prefix_cache_bytes: int = 256 * 2**20):
        self.model, self.tokenizer, self.lock = model, tokenizer, lock
        self.max_batch, self.prefill_tokens = max_batch, prefill_tokens
        self.prefixes = PrefixCache(prefix_cache_bytes, min_tokens=8)  # prompts -> their key/value caches
        self.suppressed = greedy_suppressed(model) or []
        eos = model.generation_config.eos_token_id
        self.stops = (set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}) - {None}
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad = 0 if pad is None else pad
        self._cond = threading.Condition()
        self._waiting: deque[Row] = deque()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.steps = 0  # decode steps taken
        self.peak_rows = 0  # the most rows decoded in one step
        self.joined = 0  # rows admitted while other rows were decoding
        self.admitted_beside = 0  # rows prefilled in a thread of their own while the batch decoded (_overlap)
        self.steps_beside = 0  # decode steps taken meanwhile

    def generate(self, ids: list[int], limit: int, stop: tuple[str, ...] = (), constraint: Any = None) -> list[int]:
        """The generated ids of one greedy call (blocks until it is done); ``constraint``: a
        :class:`~agentgrad.models.constrain.RowConstraint` its tokens must satisfy."""
        row = Row(ids, limit, tuple(stop), constraint)
        with self._cond:
            if self._closed:
                raise ModelError("the model is shutting down (the interpreter is exiting)")
            self._waiting.append(row)
            if self._thread is None:  # the worker runs while there is work, and ends when there is none
                self._thread = threading.Thread(target=self._loop, name="agentgrad-batcher", daemon=True)
                self._thread.start()
                _LIVE.add(self)
            self._cond.notify()
        row.done.wait()
        if row.error is not None:
            raise row.error
        return row.new

    def close(self, timeout: float = 60.0) -> None:
        """Stop the worker after its current step (rows still in flight get an error). Called at
        interpreter exit, so that no model step is cut off while Python finalises (which aborts)."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the worker --------------------------------------------------------------------------------

    def _loop(self) -> None:
        active: list[Row] = []
        cache: Any = None
        mask: Any = None  # (B, W) 1 where a cache column is a real token of that row
        while True:
            with self._cond:
                if self._closed:  # the interpreter is exiting: nobody waits for these rows any more
                    for r in active + list(self._waiting):
                        r.error = ModelError("the model is shutting down (the interpreter is exiting)")
                        r.done.set()
                    self._waiting.clear()
                    self._thread = None
                    return
                if not active and not self._waiting:
                    self._thread = None
                    return
                new = [self._waiting.popleft() for _ in range(min(self.max_batch - len(active), len(self._waiting)))]
            try:
                follow_load()  # this thread's count follows the machine's load, between two steps (the CLI's auto)
                with self.lock, _inference():
                    if new and active and self._overlap():
                        cache, mask, active = self._admit_beside(new, active, cache, mask)
                    elif new:
                        cache, mask, active = self._admit(new, active, cache, mask)
                    else:
                        self._step(active, cache, mask)
                        mask = self._grown(mask)
                    self.peak_rows = max(self.peak_rows, len(active))
                active, cache, mask = self._retire(active, cache, mask)
            except BaseException as e:  # every row in flight gets the error, never a hang
                for r in active + new:
                    if not r.done.is_set():
                        r.error = e
                        r.done.set()
                active, cache, mask = [], None, None

    def _retire(self, active: list[Row], cache: Any, mask: Any) -> tuple[list[Row], Any, Any]:
        """The batch without its finished rows, whose callers are woken."""
        keep = [i for i, r in enumerate(active) if not self._finished(r)]
        for i, r in enumerate(active):
            if i not in keep:
                r.done.set()
        if len(keep) == len(active):
            return active, cache, mask
        active = [active[i] for i in keep]
        return (active, *self._select(cache, mask, keep)) if active else ([], None, None)

    @staticmethod
    def _overlap() -> bool:
        """Whether arriving prompts are prefilled beside the decoding batch: where this worker computes with
        one intra-op thread (a team of more would be oversubscribed by a second computing thread)."""
        import torch

        return torch.get_num_threads() == 1

    def _admit_beside(self, new: list[Row], active: list[Row], cache: Any, mask: Any) -> tuple[Any, Any, list[Row]]:
        """:meth:`_admit`, with ``new`` prefilled in a thread of its own while the batch keeps decoding (its
        finished rows leave as usual), merged once done: like any call that joins mid-decode, no reply changes."""
        box: dict[str, Any] = {}

        def prefill() -> None:
            try:
                follow_load()
                with _inference():
                    box["parts"] = self._prefill_rows(new)
            except BaseException as e:
                box["error"] = e

        helper = threading.Thread(target=prefill, name="agentgrad-prefill", daemon=True)
        helper.start()
        try:
            while helper.is_alive() and active:
                self._step(active, cache, mask)
                mask = self._grown(mask)
                self.steps_beside += 1
                self.peak_rows = max(self.peak_rows, len(active))
                active, cache, mask = self._retire(active, cache, mask)
        finally:
            helper.join()
        if "error" in box:
            raise box["error"]
        self.admitted_beside += len(new)
        return self._join(*box["parts"], active, cache, mask)

    def _finished(self, r: Row) -> bool:
        if not r.new:
            return False
        if r.new[-1] in self.stops or len(r.new) >= r.limit:
            return True
        if r.constraint is not None and r.constraint.stopped():  # the shape is complete: nothing but eos can follow
            return True
        if r.stop:
            text = self.tokenizer.decode(r.new, skip_special_tokens=False)
            return any(s in text for s in r.stop)
        return False

    def _argmax(self, logits: Any, rows: list[Row]) -> list[int]:
        """Greedy choice per row of (B, V) logits, never a suppressed token nor one that leaves the
        row's output schema (the chosen tokens are consumed by the rows' constraints)."""
        from agentgrad.models.constrain import mask_rows

        logits = mask_rows(logits, [r.constraint for r in rows])
        if self.suppressed:
            logits = logits.clone()
            logits[:, [t for t in self.suppressed if t < logits.shape[-1]]] = float("-inf")
        chosen = [int(t) for t in logits.argmax(dim=-1).tolist()]
        for r, t in zip(rows, chosen):
            if r.constraint is not None:
                r.constraint.consume(t)
        return chosen

    def _grown(self, mask: Any) -> Any:
        import torch

        return torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)

    def _step(self, active: list[Row], cache: Any, mask: Any) -> None:
        """One token for every active row (each row's last token is fed, its cache grows by one)."""
        import torch

        dev = self.model.device
        ids = torch.tensor([[r.new[-1]] for r in active], dtype=torch.long, device=dev)  # (B, 1)
        pos = torch.tensor([[r.pos] for r in active], dtype=torch.long, device=dev)  # (B, 1)
        full = self._grown(mask).to(dev)  # (B, W + 1)
        with torch.no_grad():
            out = self.model(input_ids=ids, attention_mask=full, position_ids=pos, use_cache=True,
                             **{cache_kwarg(self.model): cache})
        nxt = self._argmax(out.logits[:, -1, :], active)  # (B,)
        for r, t in zip(active, nxt):
            r.new.append(int(t))
            r.pos += 1
        self.steps += 1

    def _prefill(self, rows: list[Row]) -> tuple[list[tuple[Any, Any]], Any]:
        """Prompts of ``rows`` through the model, left-padded together: their per-layer (K, V)
        (B, H, T, D) and mask (B, T); each row's first generated token is appended."""
        import torch

        dev = self.model.device
        width = max(len(r.ids) for r in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long)  # (B, T)
        mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T)
        for i, r in enumerate(rows):
            ids[i, width - len(r.ids):] = torch.tensor(r.ids, dtype=torch.long)
            mask[i, width - len(r.ids):] = 1
        pos = (mask.cumsum(dim=1) - 1).clamp(min=0)  # (B, T) each row's own positions
        with torch.no_grad():
            out = self.model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev),
                             use_cache=True, logits_to_keep=1)  # the last position's logits only
        first = self._argmax(out.logits[:, -1, :], rows)  # (B,)
        for r, t in zip(rows, first):
            r.new.append(int(t))
        kv = layers_kv(output_cache(out))
        for i, r in enumerate(rows):  # each prompt's own (unpadded) cache, for later prompts that share its start;
            cut = width - len(r.ids)     # copied (add), so that an entry does not keep the whole padded batch alive
            self.prefixes.add(r.ids, [(k[i:i + 1, :, cut:], v[i:i + 1, :, cut:]) for k, v in kv])
        return kv, mask

    def _prefill_from(self, r: Row, p: int, past: list[tuple[Any, Any]]) -> tuple[list[tuple[Any, Any]], Any]:
        """One prompt whose first ``p`` tokens' cache is ``past``: only the rest goes through the model."""
        import torch

        dev = self.model.device
        ids = torch.tensor([r.ids[p:]], dtype=torch.long, device=dev)  # (1, T - p)
        pos = torch.arange(p, len(r.ids), dtype=torch.long, device=dev)[None]  # (1, T - p)
        mask = torch.ones((1, len(r.ids)), dtype=torch.long)  # (1, T)
        with torch.no_grad():
            out = self.model(input_ids=ids, attention_mask=mask.to(dev), position_ids=pos, use_cache=True,
                             logits_to_keep=1, **{cache_kwarg(self.model): dynamic_cache(past)})
        r.new.append(self._argmax(out.logits[:, -1, :], [r])[0])
        kv = layers_kv(output_cache(out))
        self.prefixes.add(r.ids, kv)
        return kv, mask

    def _groups(self, rows: list[Row]) -> list[list[Row]]:
        """Rows prefilled together: similar lengths (padding at most a quarter of the real tokens)
        and at most ``prefill_tokens`` padded tokens per forward pass."""
        groups: list[list[Row]] = []
        for r in sorted(rows, key=lambda r: len(r.ids)):
            g = groups[-1] if groups else None
            if g is not None:
                width = len(r.ids)  # the longest so far (sorted)
                real = sum(len(x.ids) for x in g) + width
                if width * (len(g) + 1) <= min(1.25 * real, max(self.prefill_tokens, width)):
                    g.append(r)
                    continue
            groups.append([r])
        return groups

    def _admit(self, new: list[Row], active: list[Row], cache: Any, mask: Any) -> tuple[Any, Any, list[Row]]:
        """Prefill ``new`` and merge their caches into the running batch (left-padding to one width)."""
        return self._join(*self._prefill_rows(new), active, cache, mask)

    def _join(self, parts: list[tuple[list[tuple[Any, Any]], Any]], rows: list[Row], active: list[Row], cache: Any,
              mask: Any) -> tuple[Any, Any, list[Row]]:
        """The running batch (if any) and the prefilled ``parts`` of ``rows`` as one batch, the running rows first."""
        if active:
            parts = [(layers_kv(cache), mask), *parts]
            self.joined += len(rows)
        return (*self._merge(parts), active + rows)

    def _prefill_rows(self, new: list[Row]) -> tuple[list[tuple[list[tuple[Any, Any]], Any]], list[Row]]:
        """Each of ``new`` through the model (from the prefix cache where a prompt starts like a cached
        one, else in groups of similar length): the parts' (per-layer (K, V), mask) and their rows, in order."""
        parts: list[tuple[list[tuple[Any, Any]], Any]] = []
        rows: list[Row] = []
        cold = []
        for r in new:
            p, past = self.prefixes.longest(r.ids)
            if past is None:
                cold.append(r)
            else:
                parts.append(self._prefill_from(r, p, past))
                rows.append(r)
        for g in self._groups(cold):
            parts.append(self._prefill(g))
            rows.extend(g)
        return parts, rows

    def _merge(self, parts: list[tuple[list[tuple[Any, Any]], Any]]) -> tuple[Any, Any]:
        """One cache and mask of ``parts`` (each (per-layer (K, V), mask)), left-padded to one width."""
        import torch

        width = max(m.shape[1] for _, m in parts)

        def left(t: Any, n: int) -> Any:  # pad dim -2 (cache) or -1 (mask) on the left with zeros
            if n == 0:
                return t
            shape = list(t.shape)
            dim = t.dim() - 2 if t.dim() == 4 else t.dim() - 1
            shape[dim] = n
            return torch.cat([t.new_zeros(shape), t], dim=dim)

        layers = []
        for li in range(len(parts[0][0])):
            ks = [left(kv[li][0], width - m.shape[1]) for kv, m in parts]
            vs = [left(kv[li][1], width - m.shape[1]) for kv, m in parts]
            layers.append((torch.cat(ks, dim=0), torch.cat(vs, dim=0)))
        merged_mask = torch.cat([left(m, width - m.shape[1]) for _, m in parts], dim=0)
        return growing_cache(layers), merged_mask

    def _select(self, cache: Any, mask: Any, keep: list[int]) -> tuple[Any, Any]:
        """The batch without its finished rows; columns that are padding in every kept row are dropped."""
        import torch

        idx = torch.tensor(keep, dtype=torch.long)
        mask = mask[idx]
        real = mask.sum(dim=0).nonzero()
        start = int(real[0]) if len(real) else 0
        mask = mask[:, start:]
        kv = layers_kv(cache)
        dev_idx = idx.to(kv[0][0].device)
        layers = [(k[dev_idx][:, :, start:], v[dev_idx][:, :, start:]) for k, v in kv]
        return growing_cache(layers), mask
