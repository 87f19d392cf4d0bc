"""Read a llama.cpp GGUF file: model config, dequantized weights in Hugging Face naming, tokenizer fields.

Quirk: llama.cpp's converter permutes the rows of Q and K so that each head's rotary pairs are adjacent
(llama.cpp rotates pairs (0,1), (2,3), ...; Hugging Face rotates (i, i + head_dim/2)). We undo that
permutation so the HF-layout RoPE in `models/llama.py` applies. Getting it wrong fails silently (the model
answers with an immediate end token), which is why a known-answer test guards it.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config import ModelConfig
from .dequant import GroupCodes

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


@dataclass(slots=True)
class GGUFModel:
    config: ModelConfig
    weights: dict[str, torch.Tensor]  # HF names, float32
    metadata: dict[str, object]  # every key/value field (tokenizer.*, general.*, ...)
    layer_bits: float  # bits per weight, block scales included, of the widest-stored layer projection
    codes: dict[str, GroupCodes]  # HF names: the file's own codes of projections and head, where read here


# -- file format (GGUF v2/v3): header, key/values, tensor infos, aligned data ---------------------------
# Parsed here rather than with gguf.GGUFReader, whose per-field numpy memmaps take seconds for a 49k-token
# vocabulary; the `gguf` package still does the dequantization.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8", 12: "<f8"}
_STRING, _ARRAY = 8, 9


@dataclass(slots=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order (outermost first): GGUF lists dimensions innermost first
    type_id: int
    offset: int  # from the start of the data section


class _Cursor:
    def __init__(self, buffer, path: Path):
        self.buffer, self.pos, self.path = buffer, 0, path

    def scalar(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.buffer, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.scalar("<Q")
        self.pos += n
        return bytes(self.buffer[self.pos - n : self.pos]).decode("utf-8", errors="replace")

    def strings(self, count: int) -> list[str]:
        """`count` consecutive strings (a vocabulary, its merges: ~100k of them), in one tight loop."""
        buffer, pos, out = self.buffer, self.pos, []
        length = struct.Struct("<Q").unpack_from
        for _ in range(count):
            (n,) = length(buffer, pos)
            pos += 8
            out.append(str(buffer[pos : pos + n], "utf-8", "replace"))
            pos += n
        self.pos = pos
        return out

    def value(self, type_id: int):
        if type_id == _STRING:
            return self.string()
        if type_id == _ARRAY:
            item_type, count = self.scalar("<I"), self.scalar("<Q")
            if item_type in _NUMPY:
                array = np.frombuffer(self.buffer, dtype=_NUMPY[item_type], count=count, offset=self.pos)
                self.pos += array.nbytes
                return array.tolist()
            if item_type == _STRING:
                return self.strings(count)
            return [self.value(item_type) for _ in range(count)]
        if type_id not in _SCALARS:
            raise ValueError(f"{self.path}: unknown GGUF value type {type_id} at byte {self.pos}")
        return self.scalar(_SCALARS[type_id])


def read_gguf(path: Path) -> tuple[dict[str, object], list[TensorInfo], memoryview]:
    """Metadata, tensor table and a read-only view of the data section (memory-mapped)."""
    with path.open("rb") as f:
        buffer = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    if bytes(buffer[:4]) != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file (bad magic)")
    cur = _Cursor(buffer, path)
    cur.pos = 4
    version = cur.scalar("<I")
    if version not in (2, 3):
        raise ValueError(f"{path}: GGUF version {version} is not supported (2 or 3)")
    num_tensors, num_kv = cur.scalar("<Q"), cur.scalar("<Q")
    meta: dict[str, object] = {}
    for _ in range(num_kv):
        key = cur.string()
        meta[key] = cur.value(cur.scalar("<I"))
    tensors = []
    for _ in range(num_tensors):
        name = cur.string()
        dims = [cur.scalar("<Q") for _ in range(cur.scalar("<I"))]
        tensors.append(TensorInfo(name, tuple(reversed(dims)), cur.scalar("<I"), cur.scalar("<Q")))
    alignment = int(meta.get("general.alignment", 32))  # type: ignore[arg-type]
    data_start = (cur.pos + alignment - 1) // alignment * alignment
    return meta, tensors, buffer[data_start:]


def _tensor_bytes(info: TensorInfo, data: memoryview) -> tuple[np.ndarray, object]:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    qtype = GGMLQuantizationType(info.type_id)
    block, type_size = GGML_QUANT_SIZES[qtype]
    *outer, inner = info.shape
    row_bytes = inner // block * type_size
    rows = int(np.prod(outer)) if outer else 1
    raw = np.frombuffer(data, dtype=np.uint8, count=rows * row_bytes, offset=info.offset)
    return raw.reshape(*outer, row_bytes), qtype


def bits_per_weight(qtype) -> float:
    """Bits a GGUF type stores per weight, block scales included: 4.5 for Q4_0 and Q4_K, 5.0 for Q4_1,
    8.5 for Q8_0, 16 for F16."""
    from gguf.constants import GGML_QUANT_SIZES

    block, type_size = GGML_QUANT_SIZES[qtype]
    return type_size * 8 / block


def hf_name(gguf_name: str) -> str | None:
    stem, _, suffix = gguf_name.rpartition(".")
    parts = stem.split(".")
    if parts[0] == "blk" and len(parts) == 3 and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{suffix}"
    if stem in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[stem]}.{suffix}"
    return None


def unpermute_qk(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's `permute`: rows [head, pair, 2] -> [head, 2, pair]."""
    rows, cols = weight.shape
    head_dim = rows // num_heads
    return weight.reshape(num_heads, head_dim // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def _config(meta: dict[str, object], path: Path, has_output: bool) -> ModelConfig:
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: architecture {arch!r} is not supported (only 'llama')")

    def get(key: str, default=None):
        value = meta.get(f"llama.{key}", default)
        if value is None:
            raise ValueError(f"{path}: metadata field llama.{key} is missing")
        return value

    num_heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    vocab = meta.get("llama.vocab_size") or len(meta["tokenizer.ggml.tokens"])  # type: ignore[arg-type]
    return ModelConfig(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(get("feed_forward_length")),
        num_layers=int(get("block_count")),
        num_heads=num_heads,
        num_kv_heads=int(get("attention.head_count_kv", num_heads)),
        head_dim=int(get("rope.dimension_count", hidden // num_heads)),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(get("rope.freq_base", 10_000.0)),
        max_position_embeddings=int(get("context_length", 2048)),
        tie_word_embeddings=not has_output,
        name=str(meta.get("general.name") or path.stem),
    )


def _unpermuted_rows(rows: int, num_heads: int) -> torch.Tensor:
    return torch.from_numpy(unpermute_qk(np.arange(rows)[:, None], num_heads)[:, 0].copy())


def load_gguf(path: str | Path) -> GGUFModel:
    from .dequant import dequantize_with_codes

    path = Path(path)
    meta, tensors, data = read_gguf(path)
    cfg = _config(meta, path, has_output=any(t.name == "output.weight" for t in tensors))
    weights: dict[str, torch.Tensor] = {}
    codes: dict[str, GroupCodes] = {}
    layer_bits = 0.0
    for info in tensors:
        name = hf_name(info.name)
        if name is None:
            continue  # e.g. rope_freqs: derived from the config instead
        raw, qtype = _tensor_bytes(info, data)
        try:  # every type the `gguf` package dequantizes: Q4_K_M and the other K-quants included
            array, own = dequantize_with_codes(raw, qtype)
            array = array.reshape(info.shape)
        except NotImplementedError:
            raise ValueError(f"{path}: tensor {info.name} has type {qtype.name}, which the gguf package "
                             "cannot dequantize") from None
        if name.endswith("_proj.weight"):
            layer_bits = max(layer_bits, bits_per_weight(qtype))
        heads = cfg.num_heads if name.endswith("q_proj.weight") else \
            cfg.num_kv_heads if name.endswith("k_proj.weight") else None
        if heads is not None:
            array = unpermute_qk(array, heads)
        head = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
        if own is not None and (name.endswith("_proj.weight") or name == head):
            codes[name] = own if heads is None else own.rows(_unpermuted_rows(array.shape[0], heads))
        # writable and owning its memory (not a view of the mapped file)
        weights[name] = torch.from_numpy(np.array(array, dtype=np.float32, order="C", copy=not array.flags.owndata))
    return GGUFModel(cfg, weights, meta, layer_bits or 32.0, codes)
