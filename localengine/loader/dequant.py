"""GGUF block dequantization in torch, for the types the bundled model uses (Q4_1, Q8_0).

The `gguf` package's numpy versions take ~1.7 s for SmolLM2-135M's Q4_1 weights, most of the engine's load
time; these vectorised torch versions do the same arithmetic in the same order (float16 scales widened to
float32, `d * q` then `+ m`, each rounded once), so the weights are bitwise what `gguf.quants.dequantize`
returns. Other types go through `gguf`.
"""

from __future__ import annotations

import numpy as np
import torch

Q4_1_BLOCK, Q4_1_BYTES = 32, 20  # per block: float16 d, float16 m, 16 bytes of 4-bit values
Q8_0_BLOCK, Q8_0_BYTES = 32, 34  # per block: float16 d, 32 int8 values


def _halves(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """The float16 at bytes [start, start + 2) of each block, widened to float32: [n, 1]."""
    return blocks[:, start : start + 2].contiguous().view(torch.float16).float()


def dequantize_q4_1(raw: np.ndarray) -> np.ndarray:
    """raw: uint8 [..., row_bytes] -> float32 [..., row_bytes / 20 * 32]."""
    blocks = torch.from_numpy(np.array(raw, copy=True)).reshape(-1, Q4_1_BYTES)  # writable (raw maps the file)
    d, m = _halves(blocks, 0), _halves(blocks, 2)
    qs = blocks[:, 4:]
    q = torch.cat([qs & 0x0F, qs >> 4], dim=1).float()  # the low nibbles are the block's first 16 values
    out = (q * d) + m
    return out.reshape(*raw.shape[:-1], raw.shape[-1] // Q4_1_BYTES * Q4_1_BLOCK).numpy()


def dequantize_q8_0(raw: np.ndarray) -> np.ndarray:
    blocks = torch.from_numpy(np.array(raw, copy=True)).reshape(-1, Q8_0_BYTES)
    d = _halves(blocks, 0)
    x = blocks[:, 2:].contiguous().view(torch.int8).float()
    out = x * d
    return out.reshape(*raw.shape[:-1], raw.shape[-1] // Q8_0_BYTES * Q8_0_BLOCK).numpy()


FAST = {"Q4_1": dequantize_q4_1, "Q8_0": dequantize_q8_0}


def dequantize(raw: np.ndarray, qtype) -> np.ndarray:
    """float32 values of one tensor's raw blocks (`qtype`: gguf's GGMLQuantizationType)."""
    fast = FAST.get(qtype.name)
    if fast is not None:
        return fast(raw)
    from gguf.quants import dequantize as slow

    return np.asarray(slow(raw, qtype), dtype=np.float32)
