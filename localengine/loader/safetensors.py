"""Hugging Face model directories: config.json + *.safetensors, read without the `safetensors` package.

The format is an 8-byte little-endian header length, a JSON header mapping each tensor name to its
dtype, shape and byte range, then the raw little-endian data. We memory-map the file and view each
tensor in place. `save_safetensors` writes the same format (used to export models and in tests).
"""

from __future__ import annotations

import json
import mmap
import struct
import warnings
from pathlib import Path

import torch

from ..config import ModelConfig

_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I8": torch.int8,
    "U8": torch.uint8,
}
_DTYPE_NAMES = {v: k for k, v in _DTYPES.items()}


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    with path.open("rb") as f:
        buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    (header_len,) = struct.unpack("<Q", buffer[:8])
    header = json.loads(buffer[8 : 8 + header_len])
    base = 8 + header_len
    tensors: dict[str, torch.Tensor] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        count = (end - start) // dtype.itemsize
        if count:
            with warnings.catch_warnings():  # read-only map: the views are never written (see load_hf_dir)
                warnings.simplefilter("ignore", UserWarning)
                flat = torch.frombuffer(buffer, dtype=dtype, count=count, offset=base + start)
        else:
            flat = torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(info["shape"])
    return tensors


def save_safetensors(tensors: dict[str, torch.Tensor], path: str | Path) -> None:
    header: dict[str, object] = {}
    offset = 0
    blobs = []
    for name, tensor in tensors.items():
        data = tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
        header[name] = {
            "dtype": _DTYPE_NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the spec pads the header to 8-byte alignment
    with Path(path).open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)


def config_from_hf(config: dict, source: str = "config.json") -> ModelConfig:
    archs = config.get("architectures") or ["LlamaForCausalLM"]
    if config.get("model_type", "llama") != "llama" and "LlamaForCausalLM" not in archs:
        raise ValueError(f"{source}: model type {config.get('model_type')!r} is not a Llama-family decoder")
    num_heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    return ModelConfig(
        vocab_size=int(config["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(config["intermediate_size"]),
        num_layers=int(config["num_hidden_layers"]),
        num_heads=num_heads,
        num_kv_heads=int(config.get("num_key_value_heads") or num_heads),
        head_dim=int(config.get("head_dim") or hidden // num_heads),
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-5)),
        rope_theta=float(config.get("rope_theta", 10_000.0)),
        max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        name=str(config.get("_name_or_path") or "hf-model"),
    )


def load_hf_dir(path: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    path = Path(path)
    config_path = path / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{path}: no config.json (expected a Hugging Face model directory)")
    cfg = config_from_hf(json.loads(config_path.read_text()), str(config_path))
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors weight files")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        # Copy out of the read-only map: owned, aligned memory (kernels can round differently on unaligned data).
        weights.update({name: t.clone() for name, t in read_safetensors(file).items()})
    if cfg.tie_word_embeddings is False and "lm_head.weight" not in weights:
        cfg.tie_word_embeddings = True  # some exports omit the head when it is tied
    return cfg, weights
