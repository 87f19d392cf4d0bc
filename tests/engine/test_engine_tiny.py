"""Engine behaviour on the tiny random model (float64, exact mode): fast, and bitwise comparable."""

import random

import pytest
import torch

from localengine import Engine
from localengine.block_manager import block_hash

BS = 4


def make_engine(**kw) -> Engine:
    kw.setdefault("block_size", BS)
    return Engine(model="tiny-random", dtype="float64", **kw)


def tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 259) for _ in range(n)]  # ids 0..2 are special tokens


def test_cached_prefix_gives_bitwise_identical_logits():
    engine = make_engine()
    prompt = tokens(50, seed=1)
    cold = engine.logits(prompt, use_prefix_cache=False)
    warm = engine.logits(prompt)
    assert cold.num_cached_tokens == 0 and warm.num_cached_tokens == 48
    assert (warm.logits - cold.logits).abs().max().item() == 0.0
    longer = prompt + tokens(13, seed=2)  # a continuation reuses the 48-token prefix, computes the rest
    warm_longer, cold_longer = engine.logits(longer), engine.logits(longer, use_prefix_cache=False)
    assert warm_longer.num_cached_tokens == 48  # the partial block (tokens 48, 49) was never shared
    assert (warm_longer.logits - cold_longer.logits).abs().max().item() == 0.0


def chain_hashes(ids: list[int]) -> list[int]:
    hashes, parent = [], None
    for i in range(0, len(ids) // BS * BS, BS):
        parent = block_hash(ids[i : i + BS], parent)
        hashes.append(parent)
    return hashes


def test_kv_spliced_from_another_prefix_changes_the_logits():
    suffix, prefix_a, prefix_b = tokens(6, seed=3), tokens(16, seed=4), tokens(16, seed=5)
    true_b = make_engine().logits(prefix_b + suffix).logits  # same seed: same weights
    engine = make_engine()
    engine.logits(prefix_a + suffix)  # publishes prefix_a's 4 blocks
    # Splice: point prefix_b's block hashes at the blocks holding prefix_a's K/V (and fake their tokens).
    bm = engine.block_manager
    for i, (hash_a, hash_b) in enumerate(zip(chain_hashes(prefix_a), chain_hashes(prefix_b))):
        block_id = bm.hash_to_block_id[hash_a]
        bm.hash_to_block_id[hash_b] = block_id
        bm.blocks[block_id].token_ids = tuple(prefix_b[i * BS : (i + 1) * BS])
    spliced = engine.logits(prefix_b + suffix)
    assert spliced.num_cached_tokens == 16
    difference = (spliced.logits - true_b).abs().max().item()
    print(f"max |logits with prefix_a's K/V - true logits| = {difference:.4f}")
    assert difference > 0.1  # the cached K/V really is what the suffix attends to


def test_concurrent_requests_match_one_at_a_time():
    prompts = [tokens(30, seed=10), tokens(7, seed=11), tokens(30, seed=10)[:20] + tokens(5, seed=12)]
    alone = [make_engine().generate(p, max_tokens=12, ignore_eos=True).token_ids for p in prompts]
    together = make_engine().generate(prompts, max_tokens=12, ignore_eos=True)
    assert [r.token_ids for r in together] == alone
    assert all(len(r.token_ids) == 12 and r.finish_reason == "length" for r in together)


def test_a_request_joins_while_another_is_decoding():
    engine = make_engine()
    first = engine.add_request(tokens(10, seed=20), max_tokens=6, ignore_eos=True)
    engine.step()
    engine.step()
    second = engine.add_request(tokens(8, seed=20) + tokens(2, seed=21), max_tokens=3, ignore_eos=True)
    updates = {u.request_id: u for u in engine.step()}
    assert set(updates) == {first, second}  # one forward pass decoded `first` and prefilled `second`
    assert len(updates[second].new_token_ids) == 1
    assert updates[second].num_cached_tokens == 8  # shares `first`'s first two blocks (same prompt head)
    results = {}
    while engine.has_unfinished_requests():
        results |= {u.request_id: u.result for u in engine.step() if u.finished}
    assert len(results[first].token_ids) == 6 and len(results[second].token_ids) == 3


def test_memory_pressure_preempts_without_changing_outputs():
    prompts = [tokens(20, seed=30 + i) for i in range(4)]
    roomy = make_engine().generate(prompts, max_tokens=10, ignore_eos=True)
    tight_engine = make_engine(num_blocks=16)  # 4 requests x 8 blocks at the end: must preempt
    tight = tight_engine.generate(prompts, max_tokens=10, ignore_eos=True)
    assert tight_engine.stats.preemptions > 0
    assert [r.token_ids for r in tight] == [r.token_ids for r in roomy]
    assert tight_engine.stats.blocks_free == 16


def test_generation_reports_cached_tokens_and_timings():
    engine = make_engine()
    system = tokens(40, seed=40)
    first = engine.generate(system + tokens(5, seed=41), max_tokens=4, ignore_eos=True)
    second = engine.generate(system + tokens(5, seed=42), max_tokens=4, ignore_eos=True)
    assert first.num_cached_tokens == 0 and second.num_cached_tokens == 40
    assert second.num_prompt_tokens == 45 and len(second.token_ids) == 4
    assert second.text == engine.tokenizer.decode(second.token_ids)
    for r in (first, second):
        assert 0 < r.prefill_seconds <= r.first_token_seconds and r.decode_seconds > 0
    stats = engine.stats
    assert stats.prefix_queries == 90 and stats.prefix_hits == 40
    assert stats.hit_ratio == pytest.approx(40 / 90)


def test_prewarm_with_max_tokens_zero_then_clear_cache():
    engine = make_engine()
    prompt = tokens(33, seed=50)
    warm = engine.generate(prompt, max_tokens=0)
    assert warm.token_ids == [] and warm.finish_reason == "length"
    assert engine.generate(prompt, max_tokens=1).num_cached_tokens == 32
    engine.clear_cache()
    assert engine.stats.blocks_cached_free == 0
    assert engine.generate(prompt, max_tokens=1).num_cached_tokens == 0


def test_evicted_blocks_are_counted_and_no_longer_hit():
    engine = make_engine(num_blocks=12)
    prompt = tokens(33, seed=60)  # 9 blocks
    engine.generate(prompt, max_tokens=0)
    engine.generate(tokens(40, seed=61), max_tokens=0)  # 10 blocks: must recycle cached ones
    stats = engine.stats
    assert stats.evictions > 0
    assert engine.generate(prompt, max_tokens=0).num_cached_tokens < 32


def test_sampling_is_seeded_and_greedy_is_the_argmax():
    prompt = tokens(12, seed=70)
    a = make_engine(seed=7).generate(prompt, max_tokens=8, temperature=1.0, ignore_eos=True)
    b = make_engine(seed=7).generate(prompt, max_tokens=8, temperature=1.0, ignore_eos=True)
    assert a.token_ids == b.token_ids
    engine = make_engine()
    greedy = engine.generate(prompt, max_tokens=1, ignore_eos=True).token_ids[0]
    assert greedy == int(engine.logits(prompt).logits.argmax())


def test_stop_tokens_end_generation():
    engine = make_engine()
    prompt = tokens(12, seed=80)
    free = engine.generate(prompt, max_tokens=5, ignore_eos=True).token_ids
    stopped = engine.generate(prompt, max_tokens=5, stop_token_ids=(free[1],), ignore_eos=True)
    assert stopped.finish_reason == "stop" and stopped.token_ids == free[: free.index(free[1]) + 1]


def test_invalid_prompts_are_rejected_with_a_reason():
    engine = make_engine(num_blocks=4)
    with pytest.raises(ValueError, match="empty"):
        engine.generate([], max_tokens=1)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.generate([5, 100_000], max_tokens=1)
    with pytest.raises(ValueError, match="KV blocks"):
        engine.generate(tokens(40, seed=90), max_tokens=1)
    with pytest.raises(ValueError, match="KV blocks"):  # fits now, but could not finish
        engine.generate(tokens(10, seed=91), max_tokens=20)
    with pytest.raises(ValueError, match="context length"):
        make_engine().generate(tokens(1100, seed=92), max_tokens=1)


def test_generation_stops_at_the_context_length():
    engine = Engine(model="tiny-random", dtype="float32", block_size=BS)
    limit = engine.model_config.max_position_embeddings
    result = engine.generate(tokens(limit - 3, seed=93), max_tokens=10, ignore_eos=True)
    assert len(result.token_ids) == 3 and result.finish_reason == "length"


def test_chat_template_and_tokenizer_round_trip():
    engine = make_engine()
    ids = engine.apply_chat_template([{"role": "user", "content": "hi"}], system="be brief")
    text = engine.tokenizer.decode(ids, skip_special_tokens=False)
    assert text == "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert ids[0] == engine.tokenizer.token_to_id("<|im_start|>")
    sample = "naïve café, 2024 ✓"
    assert engine.tokenizer.decode(engine.tokenizer.encode(sample)) == sample


def test_float32_and_bfloat16_run_with_fast_kernels():
    prompt = tokens(40, seed=100)
    for dtype in ("float32", "bfloat16"):
        engine = Engine(model="tiny-random", dtype=dtype, block_size=BS)
        assert not engine.runner.batch_invariant
        cold, warm = engine.logits(prompt, use_prefix_cache=False), engine.logits(prompt)
        assert warm.num_cached_tokens == 36 and warm.logits.dtype == getattr(torch, dtype)
        tolerance = 1e-4 if dtype == "float32" else 0.25  # bfloat16: a few units in the last place at |logit| ~ 10
        assert (warm.logits.float() - cold.logits.float()).abs().max().item() <= tolerance


def test_slot_runs_cover_the_context_in_order():
    from localengine.model_runner import slot_runs

    assert slot_runs([3, 4, 5], 4, 10) == [(12, 10)]
    assert slot_runs([3, 4, 9, 10, 0], 4, 18) == [(12, 8), (36, 8), (0, 2)]


def test_decode_over_a_fragmented_block_table_matches_a_contiguous_one():
    prefix, tail_a, tail_b = tokens(24, seed=110), tokens(9, seed=111), tokens(9, seed=112)
    engine = Engine(model="tiny-random", dtype="float32", block_size=BS)
    engine.generate(prefix + tail_a, max_tokens=4, ignore_eos=True)
    fragmented = engine.generate(prefix + tail_b, max_tokens=8, ignore_eos=True)  # reused head, fresh tail
    assert fragmented.num_cached_tokens == 24
    fresh = Engine(model="tiny-random", dtype="float32", block_size=BS).generate(
        prefix + tail_b, max_tokens=8, ignore_eos=True
    )
    assert fragmented.token_ids == fresh.token_ids


def test_an_aborted_request_frees_its_blocks_and_others_finish():
    engine = make_engine(num_blocks=64)
    keep = engine.add_request(tokens(20, seed=120), max_tokens=5, ignore_eos=True)
    drop = engine.add_request(tokens(20, seed=121), max_tokens=50, ignore_eos=True)
    engine.step()
    engine.abort_request(drop)
    finished = []
    while engine.has_unfinished_requests():
        finished += [u.request_id for u in engine.step() if u.finished]
    assert finished == [keep]
    assert engine.stats.blocks_free == 64


def test_a_blocking_call_does_not_swallow_other_requests_updates():
    engine = make_engine()
    streaming = engine.add_request(tokens(12, seed=130), max_tokens=4, ignore_eos=True)
    engine.logits(tokens(12, seed=131))  # runs steps that also advance `streaming`
    received = []
    while engine.has_unfinished_requests() or not received or not received[-1].finished:
        received += [u for u in engine.step() if u.request_id == streaming]
    assert sum(len(u.new_token_ids) for u in received) == 4 and received[-1].finished
