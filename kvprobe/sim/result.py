"""What a simulated cache predicts for one request, with the evidence behind it."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Evidence:
    """A fact the simulator saw that explains why less was read than an ideal cache would allow."""

    kind: str  # ttl_expired | not_yet_readable | lookback_exceeded | below_minimum | missing_breakpoint
    detail: str
    block_index: int | None = None
    seconds_past: float | None = None
    writer_id: str | None = None
    positions_back: int | None = None
    prefix_tokens: int | None = None
    minimum_tokens: int | None = None


@dataclass(slots=True)
class Prediction:
    """The input tokens one request reads from cache, writes to it (by lifetime) and sends fresh."""

    cache_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    fresh_input_tokens: int = 0
    evidence: list[Evidence] = field(default_factory=list)

    @property
    def cache_write_tokens(self) -> int:
        return self.cache_write_5m_tokens + self.cache_write_1h_tokens

    @property
    def input_tokens(self) -> int:
        return self.cache_read_tokens + self.cache_write_tokens + self.fresh_input_tokens

    def as_dict(self) -> dict[str, int]:
        return {"cache_read_tokens": self.cache_read_tokens, "cache_write_tokens": self.cache_write_tokens,
                "fresh_input_tokens": self.fresh_input_tokens}


def below_minimum(path: str, index: int, prefix_tokens: int, minimum: int) -> Evidence:
    """A breakpoint whose prefix is shorter than the model's minimum: nothing is written there."""
    return Evidence("below_minimum", f"the prefix through {path} is {prefix_tokens} tokens; the minimum for "
                    f"this model is {minimum}", index, prefix_tokens=prefix_tokens, minimum_tokens=minimum)
