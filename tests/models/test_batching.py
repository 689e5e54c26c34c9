"""Continuous batching of greedy calls to one local model (agentgrad.models.batching): replies equal
Hugging Face's own ``generate`` one call at a time, whatever shares the batch and whenever a call
joins it; prompts that start alike are prefilled from a cached prefix; errors reach every caller."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentgrad import GenerationSettings
from agentgrad.models.hf import HFModel, _Request, render_chat

SYSTEM = "You are a careful assistant who answers questions about customer records in one short sentence."
QUESTIONS = ["What is the capital of France?", "Name a colour.", "Book a table for 4 people at 7 pm tonight please.",
             "Hi", "Which city is the record about, and what pet does the customer keep at home?", "Count to three."]


def msgs(q):
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]


def reference(m, q, settings):
    """Hugging Face ``generate`` on this prompt alone (the padded path, a batch of one)."""
    ids = m.tokenizer(render_chat(m.tokenizer, msgs(q), None, add_generation_prompt=True), add_special_tokens=False,
                      return_tensors="pt")["input_ids"][0]
    req = _Request(ids, settings.max_new_tokens, settings)
    return m._reply(m._decode([req])[0], ids.shape[0], settings.max_new_tokens, None, settings)


@pytest.fixture(params=["tiny_llama", "tiny_qwen3"])
def model(request):
    m = HFModel(path=str(request.getfixturevalue(request.param)))  # its own instance: fresh counters and caches
    assert m.batcher is not None, "plain key/value caches are continuously batched"
    return m


def test_concurrent_replies_of_different_lengths_equal_generate_one_at_a_time(model):
    limits = [5, 17, 9, 30, 12, 23]  # rows leave the batch at different steps
    settings = [GenerationSettings(max_new_tokens=n) for n in limits]
    ref = [reference(model, q, s) for q, s in zip(QUESTIONS, settings)]
    with ThreadPoolExecutor(len(QUESTIONS)) as ex:
        got = list(ex.map(lambda qs: model.generate(msgs(qs[0]), None, qs[1]), zip(QUESTIONS, settings)))
    assert [g.text for g in got] == [r.text for r in ref]
    assert [g.usage for g in got] == [r.usage for r in ref]
    assert [g.finish_reason for g in got] == [r.finish_reason for r in ref]
    assert model.batcher.peak_rows > 1  # they did share steps
    assert model.batcher.steps < sum(limits)


def join_mid_decode(model):
    """A 40-token call, and three short ones sent once it has decoded 3 steps (it still decodes when they
    arrive, however loaded the machine): every reply equals ``generate`` one call at a time."""
    long, short = GenerationSettings(max_new_tokens=40), GenerationSettings(max_new_tokens=8)
    ref_long, ref_short = reference(model, QUESTIONS[0], long), [reference(model, q, short) for q in QUESTIONS[1:4]]
    b = model.batcher
    undo = hold_after(b, 3, 3)
    try:
        with ThreadPoolExecutor(4) as ex:
            first = ex.submit(model.generate, msgs(QUESTIONS[0]), None, long)
            wait_steps(b, 3)
            later = [ex.submit(model.generate, msgs(q), None, short) for q in QUESTIONS[1:4]]
            assert first.result().text == ref_long.text
            assert [f.result().text for f in later] == [r.text for r in ref_short]
    finally:
        undo()


def test_a_call_that_arrives_mid_decode_joins_the_running_batch(model):
    join_mid_decode(model)
    b = model.batcher
    assert b.joined >= 1  # admitted while the first row was still decoding, not after it
    assert b.steps < 40 + 3 * 8
    import torch

    assert (b.admitted_beside == 0) == (torch.get_num_threads() > 1)  # with a team of threads the worker prefills


def test_a_shared_prompt_start_is_prefilled_from_the_cache_and_gives_the_same_reply(model):
    s = GenerationSettings(max_new_tokens=10)
    ref = [reference(model, q, s) for q in QUESTIONS[:3]]
    got = [model.generate(msgs(q), None, s) for q in QUESTIONS[:3]]  # one after another: each sees the last
    assert [g.text for g in got] == [r.text for r in ref]
    system_tokens = len(model.tokenizer(SYSTEM, add_special_tokens=False)["input_ids"])
    assert model.batcher.prefixes.hits >= 2 and model.batcher.prefixes.reused_tokens >= 2 * system_tokens


def test_the_prefix_cache_keeps_to_its_budget(model):
    cache = model.batcher.prefixes
    s = GenerationSettings(max_new_tokens=2)
    model.generate(msgs(QUESTIONS[0]), None, s)
    one = cache.bytes
    cache.max_bytes = int(one * 2.5)  # room for two prompts
    for q in QUESTIONS:
        model.generate(msgs(q), None, s)
    assert 0 < cache.bytes <= cache.max_bytes and len(cache) <= 2
    # the bytes counted are the bytes held: no entry is a view into a larger (padded batch) tensor
    from agentgrad.models.batching import Row
    from agentgrad.models.kvcache import layers_kv

    cache.clear()
    cache.max_bytes = 2**30
    model.batcher._prefill([Row(list(range(5, 25)), 4, ()), Row(list(range(30, 42)), 4, ())])  # two rows, padded
    assert len(cache) == 2
    for entry in cache.entries.values():
        for k, v in layers_kv(entry):
            assert k.untyped_storage().nbytes() == k.numel() * k.element_size()
            assert v.untyped_storage().nbytes() == v.numel() * v.element_size()


def test_the_one_prefix_cache_matches_exactly_or_by_longest_prefix_and_never_hands_out_its_own_tensors():
    import torch

    from agentgrad.models.kvcache import PrefixCache, layers_kv

    def kv(n, fill):  # two layers of (1, H=2, T=n, D=3)
        return [(torch.full((1, 2, n, 3), fill), torch.full((1, 2, n, 3), -fill)) for _ in range(2)]

    cache = PrefixCache(max_bytes=2 * 2 * 2 * 10 * 3 * 4 * 2, max_entries=3, min_tokens=4)  # room for 2 x 10 tokens
    cache.add(list(range(10)), kv(10, 1.0))
    assert cache.get(tuple(range(9))) is None and cache.longest([0, 1, 2, 9, 9]) == (0, None)  # exact; min_tokens
    p, past = cache.longest(list(range(6)) + [50, 51])
    assert p == 6 and past[0][0].shape == (1, 2, 6, 3) and bool((past[1][1] == -1.0).all())
    assert cache.longest(list(range(10)))[0] == 9  # one token short of the whole: the last is computed
    got = cache.get(tuple(range(10)))
    got.layers[0].keys = torch.zeros(1)  # what a model's update does to its cache: the kept one is untouched
    assert layers_kv(cache.entries[tuple(range(10))])[0][0].shape == (1, 2, 10, 3)
    assert cache.stats == {"hits": 3, "misses": 2} and cache.reused_tokens == 6 + 9 + 10
    cache.add(list(range(100, 110)), kv(10, 2.0))
    cache.add(list(range(200, 205)), kv(5, 3.0))  # over the byte budget: the least recently used goes
    assert list(cache.entries) == [tuple(range(100, 110)), tuple(range(200, 205))] and cache.bytes <= cache.max_bytes
    cache.add(list(range(300, 340)), kv(40, 4.0))  # bigger than the whole budget: it alone stays
    assert list(cache.entries) == [tuple(range(300, 340))] and len(cache) == 1
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0 and cache.stats["hits"] == 3


def test_stop_strings_end_a_row_as_generate_does(model):
    s = GenerationSettings(max_new_tokens=20)
    text = reference(model, QUESTIONS[2], s).text
    stop = text[6:9]
    assert len(stop) == 3 and stop in text
    st = GenerationSettings(max_new_tokens=20, stop=[stop])
    with ThreadPoolExecutor(2) as ex:
        got, other = ex.map(lambda q: model.generate(msgs(q), None, st), [QUESTIONS[2], QUESTIONS[0]])
    assert got.text == reference(model, QUESTIONS[2], st).text == text[: text.index(stop)]
    assert got.finish_reason == "stop" and got.usage["completion_tokens"] < 20
    assert other.text == reference(model, QUESTIONS[0], st).text


def test_an_error_in_a_step_reaches_every_caller_and_the_next_calls_work(model):
    b = model.batcher
    real, calls = b._step, []

    def failing(active, cache, mask):
        calls.append(len(active))
        if len(calls) == 2:
            raise RuntimeError("out of memory")
        return real(active, cache, mask)

    b._step = failing
    gate = threading.Barrier(3)
    s = GenerationSettings(max_new_tokens=12)

    def call(q):
        gate.wait()
        try:
            return model.generate(msgs(q), None, s).text
        except RuntimeError as e:
            return str(e)

    try:
        with ThreadPoolExecutor(3) as ex:
            out = list(ex.map(call, QUESTIONS[:3]))
    finally:
        b._step = real
    assert "out of memory" in out  # the rows in the failed step got the error, none hangs
    assert model.generate(msgs(QUESTIONS[0]), None, s).text == reference(model, QUESTIONS[0], s).text


@pytest.fixture
def one_thread():
    """The worker computes with one intra-op thread (the CLI's layout beside another job)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def wait_steps(b, n):
    """Until the batcher has taken ``n`` decode steps (at most 60 s)."""
    deadline = time.time() + 60
    while b.steps < n and time.time() < deadline:
        time.sleep(0.005)


def hold_after(b, steps, waiting):
    """Make the batcher's worker wait after ``steps`` steps until ``waiting`` calls wait to join (at most
    30 s), so that they arrive while the first call still decodes, however loaded the machine; undone by
    calling what it returns."""
    real = b._step

    def step(*args):
        out = real(*args)
        deadline = time.time() + 30
        while b.steps == steps and len(b._waiting) < waiting and time.time() < deadline:
            time.sleep(0.002)
        return out

    b._step = step
    return lambda: setattr(b, "_step", real)


def test_with_one_thread_a_call_that_arrives_is_prefilled_beside_the_decoding_batch(model, one_thread):
    b = model.batcher
    real, seen = b._prefill_rows, []

    def slow(rows):  # a prefill beside the batch ends only once it has decoded two more steps: it must not wait
        if threading.current_thread().name != "agentgrad-prefill":
            seen.append(("worker", 0))
            return real(rows)
        start, deadline = b.steps, time.time() + 30
        while b.steps < start + 2 and time.time() < deadline:
            time.sleep(0.002)
        seen.append((threading.current_thread().name, b.steps - start))
        return real(rows)

    b._prefill_rows = slow
    try:
        join_mid_decode(model)
    finally:
        b._prefill_rows = real
    beside = [n for name, n in seen if name == "agentgrad-prefill"]
    assert beside and all(n >= 2 for n in beside)  # the batch decoded while they were prefilled
    assert seen[0] == ("worker", 0)  # the first call, with no batch to decode, prefilled by the worker
    assert b.admitted_beside >= 1 and b.steps_beside >= 2 and b.joined >= 1


def test_a_prefill_that_fails_beside_the_batch_reaches_its_callers_and_the_batch(model, one_thread):
    b = model.batcher
    real = b._prefill_rows
    s, long = GenerationSettings(max_new_tokens=8), GenerationSettings(max_new_tokens=40)

    def failing(rows):
        if threading.current_thread().name == "agentgrad-prefill":
            raise RuntimeError("out of memory")
        return real(rows)

    b._prefill_rows, undo = failing, hold_after(b, 3, 1)
    try:
        with ThreadPoolExecutor(2) as ex:
            first = ex.submit(model.generate, msgs(QUESTIONS[0]), None, long)
            wait_steps(b, 3)
            later = ex.submit(model.generate, msgs(QUESTIONS[1]), None, s)
            with pytest.raises(RuntimeError, match="out of memory"):
                later.result(timeout=60)
            with pytest.raises(RuntimeError, match="out of memory"):  # the batch in flight too, as a serial admit's
                first.result(timeout=60)
    finally:
        b._prefill_rows = real
        undo()
    assert model.generate(msgs(QUESTIONS[1]), None, s).text == reference(model, QUESTIONS[1], s).text


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen3"])
def test_a_cache_that_grows_in_place_gives_the_dynamic_caches_logits_bit_for_bit(arch, attn, request):
    import torch
    from transformers import AutoModelForCausalLM

    from agentgrad.models.kvcache import cache_kwarg, dynamic_cache, growing_cache, layers_kv, output_cache

    model = AutoModelForCausalLM.from_pretrained(str(request.getfixturevalue(arch)), attn_implementation=attn).eval()
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (3, 20))
    mask = torch.ones(3, 20, dtype=torch.long)
    mask[1, :7] = 0  # a left-padded row
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        kv = layers_kv(output_cache(model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)))
        runs = []
        for make in (dynamic_cache, growing_cache):
            cache, m, p, logits, storages = make([(k.clone(), v.clone()) for k, v in kv]), mask, pos[:, -1:], [], set()
            nxt = torch.tensor([[5], [6], [7]])
            for _ in range(150):  # past the first room (64 positions and more): it grows twice
                m, p = torch.cat([m, m.new_ones(3, 1)], 1), p + 1
                out = model(input_ids=nxt, attention_mask=m, position_ids=p, use_cache=True, **{cache_kwarg(model): cache})
                logits.append(out.logits[:, -1])
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                storages.add(cache.layers[0].keys.untyped_storage().data_ptr())
            runs.append((torch.stack(logits), layers_kv(cache), len(storages)))
    (a, kv_a, new_a), (b, kv_b, new_b) = runs
    assert torch.equal(a, b)
    assert all(torch.equal(x, y) for (ka, va), (kb, vb) in zip(kv_a, kv_b) for x, y in ((ka, kb), (va, vb)))
    assert kv_b[0][0].shape[-2] == 170
    assert new_b <= 3 < new_a  # a dynamic layer copies its keys into new memory every step; these grew twice at most
