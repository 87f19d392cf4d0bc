"""One request as the scheduler and block manager see it: token ids, a block table, counters, timings.

Plain Python (no torch) so the control plane can be tested on its own.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


@dataclass(slots=True)
class SamplingParams:
    max_tokens: int = 64  # 0: compute the prompt (and publish its blocks) without generating
    temperature: float = 0.0  # 0: greedy
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    use_prefix_cache: bool = True  # False: compute every prompt token (blocks are still published)
    return_logits: bool = False  # keep the last prompt position's logits on the sequence

    def __post_init__(self) -> None:
        if self.max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")


_seq_ids = itertools.count()


class Sequence:
    """Token ids of one request (prompt, then completion) and the KV blocks that hold them."""

    def __init__(self, token_ids: list[int], params: SamplingParams, block_size: int, arrival: float = 0.0):
        if not token_ids:
            raise ValueError("a prompt needs at least one token")
        self.seq_id = next(_seq_ids)
        self.status = SequenceStatus.WAITING
        self.params = params
        self.block_size = block_size
        self.token_ids: list[int] = list(token_ids)
        self.num_prompt_tokens = len(token_ids)
        self.block_table: list[int] = []
        # Prompt tokens whose K/V came from the prefix cache (set when blocks are allocated).
        self.num_cached_tokens = 0
        # Tokens whose K/V is in the cache (computed or reused); the rest are computed by the next step.
        self.num_computed_tokens = 0
        # Full blocks whose hash is registered with the block manager (their K/V is written).
        self.num_published_blocks = 0
        self.block_hashes: list[int] = []  # hash of each full block, filled in as blocks fill up
        self.finish_reason: str | None = None
        self.logits: Any = None  # last prompt position's logits when params.return_logits
        # Accounting mode (localengine.accounting): the whole prompt the client sent, which tokens of it
        # the model attends to, and the ledger's view of it (set by the engine; None when not used).
        self.full_prompt: list[int] | None = None
        self.window: Any = None  # accounting.Window
        self.ledger: Sequence | None = None
        # Timings (perf_counter seconds).
        self.arrival = arrival
        self.prefill_start: float | None = None
        self.first_token_time: float | None = None
        self.finish_time: float | None = None

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_blocks_needed(self) -> int:
        return (len(self.token_ids) + self.block_size - 1) // self.block_size

    @property
    def num_full_blocks(self) -> int:
        return len(self.token_ids) // self.block_size

    @property
    def reported_cached_tokens(self) -> int:
        """Prompt tokens the prefix cache reused: the KV store's own count when the model ran the whole
        prompt, else the ledger's for the whole prompt (accounting mode)."""
        if self.window is None or self.window.is_whole:
            return self.num_cached_tokens
        return self.ledger.num_cached_tokens if self.ledger is not None else 0

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def block_tokens(self, index: int) -> list[int]:
        start = index * self.block_size
        return self.token_ids[start : start + self.block_size]

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)

    def __repr__(self) -> str:
        return (
            f"Sequence(id={self.seq_id}, status={self.status.name}, tokens={len(self.token_ids)}, "
            f"cached={self.num_cached_tokens}, blocks={self.block_table})"
        )
