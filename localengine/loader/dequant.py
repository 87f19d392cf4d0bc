"""GGUF block dequantization in torch, for the types the bundled model uses (Q4_1, Q8_0).

The `gguf` package's numpy versions take ~1.7 s for SmolLM2-135M's Q4_1 weights, most of the engine's load
time; these vectorised torch versions do the same arithmetic in the same order (float16 scales widened to
float32, `d * q` then `+ m`, each rounded once), so the weights are bitwise what `gguf.quants.dequantize`
returns. Other types go through `gguf`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

Q4_1_BLOCK, Q4_1_BYTES = 32, 20  # per block: float16 d, float16 m, 16 bytes of 4-bit values
Q8_0_BLOCK, Q8_0_BYTES = 32, 34  # per block: float16 d, 32 int8 values


def _halves(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """The float16 at bytes [start, start + 2) of each block, widened to float32: [n, 1]."""
    return blocks[:, start : start + 2].contiguous().view(torch.float16).float()


@dataclass(slots=True)
class GroupCodes:
    """A 2-D tensor's values as the file stores them, in groups of 32 inputs: `codes * scale + offset`.

    kind: "Q4_1" (codes 0..15, an offset per group) or "Q8_0" (codes -127..127, no offset).
    codes: [rows, cols], uint8 (Q4_1) or int8 (Q8_0); scale, offset: float32 [rows, cols / 32] (offset None
    for Q8_0).
    The engine's low-precision decode copies are built from these rather than recovered from the values.
    """

    kind: str
    codes: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor | None

    @staticmethod
    def concat(parts: list[GroupCodes]) -> GroupCodes:
        """Stacked by rows (a fused projection); all of one kind."""
        offsets = [p.offset for p in parts]
        offset = None if any(o is None for o in offsets) else torch.cat(offsets)  # type: ignore[arg-type]
        return GroupCodes(parts[0].kind, torch.cat([p.codes for p in parts]),
                          torch.cat([p.scale for p in parts]), offset)

    def rows(self, index: torch.Tensor) -> GroupCodes:
        offset = None if self.offset is None else self.offset[index]
        return GroupCodes(self.kind, self.codes[index], self.scale[index], offset)


def _shaped(values: torch.Tensor, raw: np.ndarray, block_bytes: int, block: int) -> torch.Tensor:
    return values.reshape(*raw.shape[:-1], raw.shape[-1] // block_bytes * block)


def _q4_1(raw: np.ndarray) -> tuple[np.ndarray, GroupCodes | None]:
    """raw: uint8 [..., row_bytes] -> float32 [..., row_bytes / 20 * 32], and the codes of a 2-D tensor."""
    blocks = torch.from_numpy(np.array(raw, copy=True)).reshape(-1, Q4_1_BYTES)  # writable (raw maps the file)
    d, m = _halves(blocks, 0), _halves(blocks, 2)
    qs = blocks[:, 4:]
    q = torch.cat([qs & 0x0F, qs >> 4], dim=1)  # the low nibbles are the block's first 16 values
    out = (q.float() * d) + m
    values = _shaped(out, raw, Q4_1_BYTES, Q4_1_BLOCK)
    if raw.ndim != 2:
        return values.numpy(), None
    rows = raw.shape[0]
    codes = GroupCodes("Q4_1", q.reshape(rows, -1), d.reshape(rows, -1), m.reshape(rows, -1))
    return values.numpy(), codes


def _q8_0(raw: np.ndarray) -> tuple[np.ndarray, GroupCodes | None]:
    blocks = torch.from_numpy(np.array(raw, copy=True)).reshape(-1, Q8_0_BYTES)
    d = _halves(blocks, 0)
    q = blocks[:, 2:].contiguous().view(torch.int8)
    out = q.float() * d
    values = _shaped(out, raw, Q8_0_BYTES, Q8_0_BLOCK)
    if raw.ndim != 2:
        return values.numpy(), None
    rows = raw.shape[0]
    return values.numpy(), GroupCodes("Q8_0", q.reshape(rows, -1), d.reshape(rows, -1), None)


FAST = {"Q4_1": _q4_1, "Q8_0": _q8_0}


def dequantize(raw: np.ndarray, qtype) -> np.ndarray:
    """float32 values of one tensor's raw blocks (`qtype`: gguf's GGMLQuantizationType)."""
    return dequantize_with_codes(raw, qtype)[0]


def dequantize_with_codes(raw: np.ndarray, qtype) -> tuple[np.ndarray, GroupCodes | None]:
    """The values, and for a 2-D tensor of a type read here (Q4_1, Q8_0) its own codes and scales."""
    fast = FAST.get(qtype.name)
    if fast is not None:
        return fast(raw)
    from gguf.quants import dequantize as slow

    return np.asarray(slow(raw, qtype), dtype=np.float32), None
