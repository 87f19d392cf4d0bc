"""The low-precision weight copies that single-token steps read (`Engine(decode_weights=...)`)."""

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import quantize
from test_loaders import PROMPT, write_tiny_gguf

from localengine import Engine
from localengine.loader.dequant import dequantize
from localengine.models.llama import INT4_GROUP, RowWeight

needs_bf16_cpu = pytest.mark.skipif(
    not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
    reason="the default decode copies are part of the bfloat16 CPU fast path",
)


def weights_as_seen(row: RowWeight, in_features: int) -> torch.Tensor:
    """The [out, in] weight a RowWeight multiplies by: its product with each unit vector."""
    eye = torch.eye(in_features, dtype=torch.bfloat16)
    return torch.cat([row.matmul(eye[i : i + 1]) for i in range(in_features)]).float().T


def file_weight(qtype: GGMLQuantizationType, out_features: int, in_features: int, seed: int) -> torch.Tensor:
    """A weight as a GGUF of `qtype` holds it: llama.cpp's quantizer, then the loader's dequantization."""
    rng = np.random.default_rng(seed)
    dense = rng.normal(0, 0.05, (out_features, in_features)).astype(np.float32)
    return torch.from_numpy(dequantize(quantize(dense, qtype), qtype))


def test_int4_copy_of_a_q4_1_weight_keeps_the_file_values():
    """Requantizing a Q4_1 file's weights in groups of 32 finds the file's own codes: what single-token steps
    multiply by differs from the dense weights only by rounding each group's scale and offset to bfloat16,
    well under the half step (scale / 2) a fresh 4-bit quantization would cost."""
    w = file_weight(GGMLQuantizationType.Q4_1, 96, 128, seed=1)
    row = RowWeight.quantize(w.bfloat16(), "int4 groups")
    if row is None:
        pytest.skip("this torch build has no int4 CPU kernel")
    seen = weights_as_seen(row, 128)
    groups = w.reshape(96, 128 // INT4_GROUP, INT4_GROUP)
    half_step = ((groups.amax(-1) - groups.amin(-1)) / 15 / 2).repeat_interleave(INT4_GROUP, dim=1)
    error = (seen - w).abs()
    assert (error <= half_step / 4 + 2e-3 * w.abs()).all()
    # a weight that was not stored in 4 bits does lose up to half a step
    fresh = torch.randn(96, 128) * 0.05
    fresh_error = (weights_as_seen(RowWeight.quantize(fresh.bfloat16(), "int4 groups"), 128) - fresh).abs()
    assert fresh_error.max() > 4 * error.max()


def test_int8_group_copy_of_a_q8_0_weight_keeps_the_file_values():
    """The head's copy: Q8_0's codes come back from its dequantized values, and the two 4-bit halves they are
    split into add up to them; what remains is bfloat16 rounding (of each group's scale, of each half's
    output and of their sum), not a step of the 8-bit grid."""
    w = file_weight(GGMLQuantizationType.Q8_0, 80, 96, seed=2)
    row = RowWeight.quantize(w.bfloat16(), "int8 groups")
    if row is None:
        pytest.skip("this torch build has no int4 CPU kernel")
    assert len(row.parts) == 2
    step = w.reshape(80, 3, INT4_GROUP).abs().amax(-1).repeat_interleave(INT4_GROUP, dim=1) / 127
    error = (weights_as_seen(row, 96) - w).abs()
    high_half = w.abs() + 16 * step  # the larger half's magnitude: w minus the low half (0..15 steps)
    assert (error <= 2**-8 * (w.abs() + 2 * high_half) + step / 4).all()


def test_int8_copy_is_within_half_a_step_of_each_row():
    w = torch.randn(64, 96) * 0.1
    row = RowWeight.quantize(w.bfloat16(), "int8 rows")
    if row is None:
        pytest.skip("this torch build has no int8 weight-only kernel")
    step = w.bfloat16().float().abs().amax(dim=1, keepdim=True) / 127
    assert ((weights_as_seen(row, 96) - w).abs() <= step / 2 + 1e-2 * w.abs() + 1e-4).all()


@needs_bf16_cpu
def test_decode_copies_never_hold_fewer_bits_than_the_file(tmp_path):
    """Default: 4-bit layers in the file -> int4 copies; 5- or 8-bit, float16 or float64 sources -> int8; asked
    for explicitly, either or none. Greedy answers stay those of the dense weights on the tiny model."""
    q4, q5, q8 = tmp_path / "q4.gguf", tmp_path / "q5.gguf", tmp_path / "q8.gguf"
    write_tiny_gguf(q4, layer_type=GGMLQuantizationType.Q4_1)
    write_tiny_gguf(q5, layer_type=GGMLQuantizationType.Q5_0)
    write_tiny_gguf(q8, layer_type=GGMLQuantizationType.Q8_0)
    assert "int4 groups decode" in Engine(model=str(q4)).kernels
    assert "int8 rows decode" in Engine(model=str(q5)).kernels  # 5-bit codes: 4 would lose one
    assert "int8 rows decode" in Engine(model=str(q8)).kernels
    assert "int8 rows decode" in Engine(model="tiny-random").kernels
    assert "int4 groups decode" in Engine(model="tiny-random", decode_weights="int4").kernels
    assert " decode" not in Engine(model=str(q4), decode_weights="dense").kernels
    assert " decode" not in Engine(model=str(q4), dtype="bfloat16").kernels  # only the "auto" fast path
    dense = Engine(model=str(q4), decode_weights="dense").generate(PROMPT, max_tokens=8, ignore_eos=True)
    int4 = Engine(model=str(q4)).generate(PROMPT, max_tokens=8, ignore_eos=True)
    assert int4.token_ids == dense.token_ids


def test_an_unknown_decode_weight_choice_is_refused():
    with pytest.raises(ValueError, match="decode_weights 'int3'.*int4, int8, dense"):
        Engine(model="tiny-random", decode_weights="int3")


def test_greedy_breaks_a_bfloat16_tie_by_the_float32_logits():
    """Two tokens whose logits round to the same bfloat16 value: the greedy pick is the one with the higher
    float32 logit from the dense head, not the lower token id; a clear winner is kept as it is."""
    engine = Engine(model="tiny-random", dtype="bfloat16")
    runner, weight = engine.runner, engine.runner.model.embed_tokens.weight
    head_input = torch.randn(1, weight.shape[1], generator=torch.Generator().manual_seed(3)).bfloat16()
    exact = weight.float() @ head_input[0].float()
    best = int(exact[1:].argmax()) + 1  # the best token but 0, and a token with a lower id and a lower logit
    lower = next(t for t in range(best) if exact[t] < exact[best])
    logits = torch.full((1, weight.shape[0]), -100.0)
    logits[0, lower] = logits[0, best] = 20.0  # a tie once rounded: argmax alone would take `lower`
    assert runner._greedy(logits.bfloat16(), head_input) == [best]
    logits[0, best] = 19.0  # far apart: no re-scoring
    assert runner._greedy(logits.bfloat16(), head_input) == [lower]


@needs_bf16_cpu
@pytest.mark.parametrize("model", ["tiny-random", "q4"])
def test_a_decode_step_of_several_sequences_reads_the_copies_and_answers_alike(tmp_path, model):
    """Sequences decoding together (up to ROW_COPY_MAX_ROWS in a step) read the same low-precision copies as
    one decoding alone, so batching does not change a greedy answer."""
    if model == "q4":
        model = str(tmp_path / "q4.gguf")
        write_tiny_gguf(model, layer_type=GGMLQuantizationType.Q4_1)
    prompts = [PROMPT, PROMPT[::-1], PROMPT[3:] + PROMPT[:3]]
    alone = [Engine(model=model).generate(p, max_tokens=12, ignore_eos=True).token_ids for p in prompts]
    together = [r.token_ids for r in Engine(model=model).generate(prompts, max_tokens=12, ignore_eos=True)]
    assert together == alone


def test_the_bundled_files_own_codes_are_what_requantizing_recovers():
    """The decode copies are built from the GGUF's own Q4_1 / Q8_0 codes (no requantizing at load); for every
    kind of projection (Q/K/V fused, their rows un-permuted like the weights) and the head, those are the
    codes requantizing the dequantized weights finds, and scales and offsets agree to bfloat16's rounding."""
    from localengine.loader import default_model_path
    from localengine.loader.gguf import load_gguf
    from localengine.models.llama import fuse_codes, fuse_hf_weights

    model = load_gguf(default_model_path())
    cfg = model.config
    dense, codes = fuse_hf_weights(cfg, model.weights), fuse_codes(cfg, model.codes)
    checks = {"layers.3.self_attn.qkv_proj": "int4 groups", "layers.3.self_attn.o_proj": "int4 groups",
              "layers.3.mlp.gate_proj": "int4 groups", "layers.3.mlp.down_proj": "int4 groups",
              "lm_head": "int8 groups"}
    for name, layout in checks.items():
        weight = dense[name + ".weight"].bfloat16()
        from_file = RowWeight.quantize(weight, layout, codes[name])
        recovered = RowWeight.quantize(weight, layout)
        if from_file is None or recovered is None:
            pytest.skip("this torch build has no int4 CPU kernel")
        for (data_f, scales_f), (data_r, scales_r) in zip(from_file.parts, recovered.parts):
            assert torch.equal(data_f, data_r), name
            difference = (scales_f.float() - scales_r.float()).abs().max()
            assert difference <= 2**-7 * scales_r.float().abs().max(), name  # a unit or two of bfloat16
