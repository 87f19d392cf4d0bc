"""Model files: a GGUF written the way llama.cpp's converter writes it, and a Hugging Face directory,
both holding the tiny model's weights, must give the logits of the built-in tiny model."""

import json

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

from localengine import Engine
from localengine.loader import TINY_CONFIG, tiny_random_weights
from localengine.loader.gguf import unpermute_qk
from localengine.loader.safetensors import read_safetensors, save_safetensors
from localengine.tokenizer import Tokenizer

PROMPT = [5, 80, 17, 200, 33, 9, 120, 45, 77, 3, 250, 61, 18, 90]
GGUF_LAYER = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf.py does to Q and K (pairs rotary halves per head)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def reference_logits() -> torch.Tensor:
    return Engine(model="tiny-random", dtype="float32").logits(PROMPT).logits


def test_unpermute_inverts_llama_cpp_permute():
    w = np.arange(12 * 5, dtype=np.float32).reshape(12, 5)
    assert np.array_equal(unpermute_qk(llama_cpp_permute(w, 3), 3), w)
    assert not np.array_equal(llama_cpp_permute(w, 3), w)


def write_tiny_gguf(path, embed_type=GGMLQuantizationType.F32, layer_type=GGMLQuantizationType.F32) -> None:
    cfg, hf = TINY_CONFIG, tiny_random_weights(TINY_CONFIG, seed=0)
    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(cfg.num_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_heads)
    writer.add_head_count_kv(cfg.num_kv_heads)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_vocab_size(cfg.vocab_size)
    tok = Tokenizer.byte_level()
    vocab = sorted(tok.backend.get_vocab().items(), key=lambda kv: kv[1])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list([t for t, _ in vocab])
    writer.add_token_types([3 if i < 3 else 1 for _, i in vocab])
    writer.add_eos_token_id(2)
    writer.add_bos_token_id(1)
    for name, tensor in hf.items():
        array = tensor.float().numpy()
        if name == "model.embed_tokens.weight":
            gguf_name = "token_embd.weight"
        elif name == "model.norm.weight":
            gguf_name = "output_norm.weight"
        else:
            _, _, layer, rest = name.split(".", 3)
            gguf_name = f"blk.{layer}.{GGUF_LAYER[rest.removesuffix('.weight')]}.weight"
        if gguf_name.endswith("attn_q.weight"):
            array = llama_cpp_permute(array, cfg.num_heads)
        elif gguf_name.endswith("attn_k.weight"):
            array = llama_cpp_permute(array, cfg.num_kv_heads)
        qtype = {"token_embd.weight": embed_type}.get(gguf_name, layer_type if name.endswith("_proj.weight") else None)
        if qtype == GGMLQuantizationType.F64:
            writer.add_tensor(gguf_name, array.astype(np.float64))
        elif qtype not in (None, GGMLQuantizationType.F32):
            writer.add_tensor(gguf_name, quantize(array, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(gguf_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_gguf_file_with_permuted_qk_gives_the_reference_logits(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    engine = Engine(model=str(path), dtype="float32")
    assert engine.model_config.num_kv_heads == 2 and engine.model_config.tie_word_embeddings
    assert torch.allclose(engine.logits(PROMPT).logits, reference_logits(), atol=1e-5)
    assert engine.tokenizer.decode(engine.tokenizer.encode("hello 42")) == "hello 42"


@pytest.mark.parametrize("qtype", [GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_1, GGMLQuantizationType.F16])
def test_quantized_gguf_tensors_are_dequantized(tmp_path, qtype):
    path = tmp_path / f"tiny-{qtype.name}.gguf"
    write_tiny_gguf(path, embed_type=qtype)
    logits = Engine(model=str(path), dtype="float32").logits(PROMPT).logits
    error = (logits - reference_logits()).abs().max().item()
    assert 0 < error < {"Q8_0": 0.2, "Q4_1": 2.0, "F16": 0.02}[qtype.name]


def test_hugging_face_directory_gives_the_reference_logits(tmp_path):
    cfg = TINY_CONFIG
    hf = {k: v.float() for k, v in tiny_random_weights(cfg, seed=0).items()}
    save_safetensors(hf, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "vocab_size": cfg.vocab_size,
                "hidden_size": cfg.hidden_size,
                "intermediate_size": cfg.intermediate_size,
                "num_hidden_layers": cfg.num_layers,
                "num_attention_heads": cfg.num_heads,
                "num_key_value_heads": cfg.num_kv_heads,
                "rms_norm_eps": cfg.rms_norm_eps,
                "rope_theta": cfg.rope_theta,
                "max_position_embeddings": cfg.max_position_embeddings,
                "tie_word_embeddings": True,
            }
        )
    )
    Tokenizer.byte_level().backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "bos_token": "<|im_start|>"})
    )
    engine = Engine(model=str(tmp_path), dtype="float32")
    assert torch.equal(engine.logits(PROMPT).logits, reference_logits())
    assert engine.tokenizer.stop_token_ids == (0, 2)


def test_safetensors_round_trip_keeps_dtype_and_shape(tmp_path):
    tensors = {
        "a": torch.randn(3, 4, dtype=torch.bfloat16),
        "b": torch.arange(5, dtype=torch.int64),
        "c": torch.zeros(0),
    }
    save_safetensors(tensors, tmp_path / "x.safetensors")
    loaded = read_safetensors(tmp_path / "x.safetensors")
    assert set(loaded) == set(tensors)
    assert all(torch.equal(loaded[k], tensors[k]) and loaded[k].dtype == tensors[k].dtype for k in tensors)


def test_unknown_model_name_says_what_is_accepted():
    with pytest.raises(FileNotFoundError, match="tiny-random"):
        Engine(model="no-such-model")


@pytest.mark.parametrize("qtype", [GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0])
def test_torch_dequantization_is_bitwise_gguf_s(qtype):
    """The engine's torch dequantizer (the bundled model's types) against the gguf package's reference, on
    quantized random rows including zeros, tiny and large values."""
    from gguf.quants import dequantize as reference

    from localengine.loader.dequant import dequantize

    rng = np.random.default_rng(7)
    values = rng.standard_normal((48, 256)).astype(np.float32) * rng.choice([1e-4, 1.0, 300.0], size=(48, 1))
    values[3] = 0.0
    raw = quantize(values, qtype)
    want = np.asarray(reference(raw, qtype), dtype=np.float32)
    got = dequantize(raw, qtype)
    assert got.shape == want.shape == values.shape and got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("qtype", [GGMLQuantizationType.Q5_0, GGMLQuantizationType.Q5_1, GGMLQuantizationType.Q4_0])
def test_layers_of_any_type_the_gguf_package_dequantizes_load(tmp_path, qtype):
    """Layer weights quantized by llama.cpp's own (gguf) quantizer, in types without a torch fast path here:
    they go through the gguf package (which also reads the K-quants of common Q4_K_M files), and the model
    answers as the float weights do, within the type's rounding."""
    path = tmp_path / f"tiny-layers-{qtype.name}.gguf"
    write_tiny_gguf(path, layer_type=qtype)
    engine = Engine(model=str(path), dtype="float32")
    error = (engine.logits(PROMPT).logits - reference_logits()).abs().max().item()
    assert 0 < error < {"Q4_0": 3.0, "Q5_0": 2.0, "Q5_1": 2.0}[qtype.name]  # ~16 vs ~32 levels per block


def test_a_type_the_gguf_package_cannot_dequantize_is_named(tmp_path):
    path = tmp_path / "tiny-f64.gguf"
    write_tiny_gguf(path, layer_type=GGMLQuantizationType.F64)  # a valid GGUF type no dequantizer handles
    with pytest.raises(ValueError, match=r"tiny-f64.gguf: tensor blk\.0\.\w+\.weight has type F64, which the gguf"):
        Engine(model=str(path))
