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
        """Fill the tokens of the request's new blocks; return how: observed | exact | estimated."""
        req = sk.request
        assert req is not None
        overhead = int(counter.rules.get("per_message_overhead_tokens", 0))
        new, estimates, anchored = [], [], 0
        for block, raw in zip(req.blocks, sk.raw_tokens):
            if id(block) in self._sized:
                anchored += block.tokens
                continue
            new.append(block)
            estimates.append(counter.scale(raw) + (overhead if block.first_in_message else 0))
        how = "exact" if counter.exact else "estimated"
        observed = sk.observed.input_tokens if sk.observed else 0
        est_total = sum(estimates)
        if observed and est_total and observed > anchored:
            scale = (observed - anchored) / est_total
            if _MIN_SCALE <= scale <= _MAX_SCALE:
                estimates = _scaled(estimates, observed - anchored)
                how = "observed"
        for block, tokens in zip(new, estimates):
            block.tokens = tokens
            block.tokens_exact = how != "estimated"
            self._sized.add(id(block))
        return how


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
