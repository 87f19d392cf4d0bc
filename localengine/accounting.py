"""Accounting mode: prefix-cache ground truth for prompts longer than the model can attend to.

Real agents send prompts of 12k-200k tokens; the bundled model attends to a few thousand on a CPU in a
second or two. So every prompt is split in two views of the same tokens:

* the **ledger**: a second `BlockManager` (the same chained block hashes, hit confirmation by token ids, ref
  counts, LRU eviction and tail-first release as the engine's KV store) that holds no K/V at all. It sees
  every prompt whole, so what it reports as reused is what a paged prefix cache of its size would reuse for
  the prompt the client really sent, however long;
* the **window**: the tokens the model really runs on, the first `head` tokens of the prompt (its stable
  start: the system prompt, which also keeps attention anchored) and its tail (the newest turn and the
  assistant prompt), laid out as one sequence for the model. The tail starts on a grid, so consecutive
  turns of one conversation usually share it and the window's prefix is reused from the KV store too.

A prompt that fits the model is run whole; the ledger still sees it, so a conversation that grows past the
window keeps its history of hits. Plain Python (no torch).
"""
from __future__ import annotations

from dataclasses import dataclass

from .block_manager import BlockManager
from .sequence import SamplingParams, Sequence


@dataclass(frozen=True, slots=True)
class Window:
    """Which tokens of a `total`-token prompt the model attends to: [0, head) and [tail_start, total)."""

    total: int
    head: int
    tail_start: int

    @classmethod
    def whole(cls, total: int) -> Window:
        return cls(total, total, total)

    @property
    def is_whole(self) -> bool:
        return self.tail_start <= self.head

    @property
    def model_tokens(self) -> int:
        return self.total if self.is_whole else self.head + self.total - self.tail_start

    def select(self, token_ids: list[int]) -> list[int]:
        return list(token_ids) if self.is_whole else token_ids[: self.head] + token_ids[self.tail_start :]

    def to_json(self) -> dict[str, list[int]]:
        """The prompt's token ranges the model saw, [start, end) each."""
        if self.is_whole:
            return {"attended": [[0, self.total]], "accounted_only": []}
        return {"attended": [[0, self.head], [self.tail_start, self.total]],
                "accounted_only": [[self.head, self.tail_start]]}


def plan_window(total: int, limit: int, head: int, grid: int) -> Window:
    """The window of a prompt of `total` tokens for a model that can take `limit` of them.

    The tail is as long as fits after the head, its start rounded up to a multiple of `grid` (so it holds
    between `limit - head - grid + 1` and `limit - head` tokens): a conversation that grows by less than
    `grid` tokens between turns keeps the same window start."""
    if total <= limit:
        return Window.whole(total)
    head = max(0, min(head, limit // 2))
    grid = max(1, min(grid, limit - head - 1))
    start = total - (limit - head)
    start = -(-start // grid) * grid
    return Window(total, head, min(start, total - 1))


class PrefixLedger:
    """The prefix cache's bookkeeping for whole prompts, without K/V (see the module docstring)."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.blocks = BlockManager(num_blocks, block_size)

    @property
    def capacity_tokens(self) -> int:
        return self.blocks.num_blocks * self.blocks.block_size

    def admit(self, token_ids: list[int]) -> Sequence | None:
        """Look the prompt up and hold its blocks until `release`; None when requests in flight already hold
        every block (nothing is known about this one then)."""
        seq = Sequence(token_ids, SamplingParams(max_tokens=0), self.blocks.block_size)
        return seq if self.blocks.allocate(seq) else None

    def computed(self, seq: Sequence) -> None:
        """The request's prefill ran: its full blocks become hits for later prompts (as `publish` does for
        blocks whose K/V is written)."""
        seq.num_computed_tokens = seq.num_tokens
        self.blocks.publish(seq)

    def release(self, seq: Sequence) -> None:
        self.blocks.deallocate(seq)

    def clear(self) -> None:
        self.blocks.clear_cache()
