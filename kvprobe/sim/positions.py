"""Cumulative token counts and lookback positions of a rendered request's blocks."""
from __future__ import annotations

from itertools import accumulate

from kvprobe.request.model import Block

_GROUPED_KINDS = frozenset({"tool_use", "tool_result"})


def cumulative_tokens(blocks: list[Block]) -> list[int]:
    """cum[i] = tokens of blocks[0..i] inclusive."""
    return list(accumulate(b.tokens for b in blocks))


def lookback_positions(blocks: list[Block], counting: str) -> list[int]:
    """Position number per block. 'grouped_tool_runs': a run of consecutive tool_use (or tool_result)
    blocks is one position; 'blocks': every block is one position."""
    positions, pos, prev_kind = [], 0, None
    for block in blocks:
        same_run = counting == "grouped_tool_runs" and block.kind in _GROUPED_KINDS and block.kind == prev_kind
        if not same_run:
            pos += 1
        positions.append(pos)
        prev_kind = block.kind
    return positions
