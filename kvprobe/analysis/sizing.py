"""Token sizes of blocks, anchored on observed usage where a trace has it.

A block's size is fixed the first time it appears. When the provider reported a request's total input, the
blocks new in that request share exactly what the total leaves after the already-sized prefix (consecutive
totals give the exact size of appended content); otherwise the estimate from `tokens.TokenCounter` is used.
"""
from __future__ import annotations

from kvprobe.analysis.skeleton import Skeleton
from kvprobe.tokens import TokenCounter

_MAX_SCALE, _MIN_SCALE = 3.0, 0.33  # beyond this the observed total is not about these blocks


class BlockSizer:
    def __init__(self) -> None:
        self._sized: set[int] = set()  # id() of shared blocks already sized

    def size(self, sk: Skeleton, counter: TokenCounter) -> str:
        """Fill the tokens of the request's new blocks; return how: observed | exact | estimated.

        With breakpoints, a provider's read + write is the exact size of the prompt through the last
        breakpoint and its fresh count the size after it (template tokens there included), so the two
        segments are anchored separately; otherwise the whole observed input anchors the new blocks.
        """
        req = sk.request
        assert req is not None
        overhead = int(counter.rules.get("per_message_overhead_tokens", 0))
        estimates = [counter.scale(raw) + (overhead if b.first_in_message else 0)
                     for b, raw in zip(req.blocks, sk.raw_tokens)]
        how = "exact" if counter.exact else "estimated"
        usage = sk.observed
        cut = req.breakpoint_indices[-1] + 1 if req.breakpoints else len(req.blocks)
        if usage and req.cache_mode != "implicit" and req.breakpoints and usage.cache_read_tokens + usage.cache_write_tokens:
            segments = [(0, cut, usage.cache_read_tokens + usage.cache_write_tokens),
                        (cut, len(req.blocks), usage.fresh_input_tokens)]
        elif usage and req.cache_mode == "gemini_cached":  # the named cache is not in the body
            segments = [(0, len(req.blocks), usage.input_tokens - usage.cache_read_tokens)]
        else:
            segments = [(0, len(req.blocks), usage.input_tokens if usage else 0)]
        for lo, hi, target in segments:
            if self._fill(req.blocks[lo:hi], estimates[lo:hi], target):
                how = "observed"
        return how

    def _fill(self, blocks: list, estimates: list[int], target: int) -> bool:
        """Size the unsized blocks of one segment; True when anchored on the observed target."""
        new = [(b, e) for b, e in zip(blocks, estimates) if id(b) not in self._sized]
        anchored = sum(b.tokens for b in blocks if id(b) in self._sized)
        sizes = [e for _, e in new]
        est_total = sum(sizes)
        used = False
        if target and est_total and target > anchored and _MIN_SCALE <= (target - anchored) / est_total <= _MAX_SCALE:
            sizes, used = _scaled(sizes, target - anchored), True
        for (block, _), tokens in zip(new, sizes):
            block.tokens = tokens
            block.tokens_exact = used
            self._sized.add(id(block))
        return used


def _scaled(estimates: list[int], target: int) -> list[int]:
    """Integer sizes proportional to the estimates that add up exactly to target."""
    total = sum(estimates)
    out, acc, acc_est = [], 0, 0
    for est in estimates:
        acc_est += est
        nxt = round(target * acc_est / total)
        out.append(nxt - acc)
        acc = nxt
    return out
