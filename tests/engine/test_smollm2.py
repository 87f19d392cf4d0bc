"""The bundled SmolLM2-135M-Instruct (Q4_1 GGUF): known answers, tokenizer, and cache exactness in float32."""

import pytest

from localengine import Engine


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(model="smollm2-135m-instruct", device="cpu", dtype="float32")


def test_capital_of_france_is_paris(engine):
    # Guards the Q/K un-permutation: with it wrong the model answers with an immediate end token.
    ids = engine.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    result = engine.generate(ids, max_tokens=20)
    assert "Paris" in result.text
    assert result.finish_reason == "stop" and result.token_ids[-1] == engine.tokenizer.token_to_id("<|im_end|>")


def test_cached_prefix_logits_match_uncached_in_float32(engine):
    system = "You are a meticulous assistant. Answer in one short sentence and never use lists."
    ids = engine.apply_chat_template(
        [{"role": "user", "content": "Write a short story about a dragon who learns to bake bread."}], system=system
    )
    cold = engine.logits(ids, use_prefix_cache=False)
    warm = engine.logits(ids)
    assert warm.num_cached_tokens == (len(ids) - 1) // 16 * 16 > 0
    assert (warm.logits - cold.logits).abs().max().item() <= 1e-4


def test_chat_template_matches_smollm2_format(engine):
    ids = engine.apply_chat_template([{"role": "user", "content": "Hi"}])
    text = engine.tokenizer.decode(ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert ids.count(engine.tokenizer.token_to_id("<|im_start|>")) == 3


def test_tokenizer_splits_digits_and_round_trips(engine):
    tok = engine.tokenizer
    assert len(tok.encode("2024")) == 4  # llama.cpp's "smollm" pre-tokenizer: one token per digit
    assert tok.encode(" hello") == [tok.token_to_id("Ġhello")]
    for text in ("Hello, world!", "naïve café — 漢字 ✓\n\tend", "x = 3.14159 * r**2"):
        assert tok.decode(tok.encode(text)) == text


def test_second_turn_reuses_the_first_turn(engine):
    first_turn = [{"role": "user", "content": "Name a primary colour."}]
    first = engine.generate(engine.apply_chat_template(first_turn), max_tokens=12)
    conversation = first_turn + [
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "And another one?"},
    ]
    second = engine.generate(engine.apply_chat_template(conversation), max_tokens=12)
    assert second.num_cached_tokens >= 32
    assert second.text.strip()


def test_default_fast_path_gives_the_same_answer_as_float32(engine):
    """Engine() picks the fast path (bfloat16 matmuls where the CPU has them); its greedy answer and
    next-token choice match the float32 reference on a plain question."""
    import torch

    fast = Engine(model="smollm2-135m-instruct", device="cpu")
    assert fast.uses_onednn
    if torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        # the bundled GGUF stores its layers as Q4_1: decode reads them in 4 bits, as the file holds them
        assert fast.dtype == torch.bfloat16 and "bfloat16" in fast.kernels and "int4 groups decode" in fast.kernels
        assert "int8 groups head decode" in fast.kernels  # its Q8_0 head in 8 bits
    ids = engine.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    answer = fast.generate(ids, max_tokens=20)
    assert "Paris" in answer.text
    ref, got = engine.logits(ids, use_prefix_cache=False).logits, fast.logits(ids, use_prefix_cache=False).logits
    # float32 puts "The" 0.08 above "L": both round to the same bfloat16 logit, and the greedy pick re-scores
    # such near ties in float32 rather than take the lower token id
    assert answer.token_ids[0] == ref.argmax()
    assert (got.float() - ref).abs().max().item() < 1.5  # bfloat16 keeps ~3 significant digits of logits ~20


@pytest.mark.parametrize("weights", ["auto", "int8"])
def test_single_token_steps_on_low_precision_weights_agree_with_float32(engine, weights):
    """A step that computes one token (decode, or a prompt whose blocks but the last token are cached) reads the
    low-precision copies of the weights on the fast path (int4 for this Q4_1 file, or int8 when asked); its
    next-token choice is float32's."""
    fast = Engine(model="smollm2-135m-instruct", device="cpu", decode_weights=weights)
    if " decode" not in fast.kernels:
        pytest.skip(f"no low-precision decode on this CPU's fast path ({fast.kernels})")
    question = "Explain in two sentences why the sky is blue, then name the scientist who explained it first."
    ids = engine.apply_chat_template([{"role": "user", "content": question}])
    block = fast.block_manager.block_size
    cut = (len(ids) - 1) // block * block + 1  # all but the last token fill whole blocks
    fast.logits(ids[:cut])
    step = fast.logits(ids[:cut])  # now only the last token is computed: a single-row step
    assert step.num_cached_tokens == cut - 1
    ref = engine.logits(ids[:cut], use_prefix_cache=False).logits
    assert step.logits.float().argmax() == ref.argmax()
    assert (step.logits.float() - ref).abs().max().item() < 1.5
