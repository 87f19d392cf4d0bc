"""Cumulative token counts and lookback positions of a rendered request's blocks."""
from __future__ import annotations

from itertools import accumulate

from kvprobe.request.model import Block

_GROUPED_KINDS = frozenset({"tool_use", "tool_result"})


def cumulative_tokens(blocks: list[Block]) -> list[int]:
    """cum[i] = tokens of blocks[0..i] inclusive."""
    return list(accumulate(b.tokens for b in blocks))


def lookback_positions(blocks: list[Block], counting: str) -> "Column":
    """Position number per block, counted as the simulator counts them (`PrefixFacts`): 'grouped_tool_runs':
    a run of consecutive tool_use (or tool_result) blocks is one position; 'blocks': every block is one."""
    return Column(PrefixFacts(counting), blocks, 1)


# ~160 bytes an entry: a simulation touches ~5 block objects a request of a fleet, so unbounded (or at 500,000)
# the memo was ~0.85 KB a request of every pricing's peak; emptied at this bound, a request after it walks its
# history once again (a few dozen blocks per session then active): the same figures, ~10 MB at most
MEMO_BLOCKS = 65_536


class PrefixFacts:
    """Tokens through each block and its lookback position, computed once per block object for a whole
    simulation: a block object stands for its prefix (interned by chained key), so every request that repeats
    a history shares the figures, and a request costs only its new blocks, not its whole length."""

    def __init__(self, counting: str) -> None:
        self.grouped = counting == "grouped_tool_runs"
        # id(block) -> (tokens through it, position, kind, the block): holding the block keeps its id from
        # being reused by another (a server renders every request anew), and a bound keeps a server's flat
        self.memo: dict[int, tuple[int, int, str, Block]] = {}

    def through(self, blocks: list[Block], i: int) -> tuple[int, int]:
        """(tokens of blocks[0..i], lookback position of blocks[i]), for a block not in the memo (Column
        looks there first): from the nearest earlier block that is."""
        if i < 0:
            i += len(blocks)
        memo = self.memo
        if len(memo) > MEMO_BLOCKS:
            memo.clear()
        j = i - 1
        while j >= 0 and id(blocks[j]) not in memo:
            j -= 1
        cum, pos, kind = memo[id(blocks[j])][:3] if j >= 0 else (0, 0, "")
        for k in range(j + 1, i + 1):
            block = blocks[k]
            cum += block.tokens
            if not (self.grouped and block.kind in _GROUPED_KINDS and block.kind == kind):
                pos += 1
            kind = block.kind
            memo[id(block)] = (cum, pos, kind, block)
        return cum, pos


class Column:
    """One of `PrefixFacts`' figures of a request's blocks, read like the list `cumulative_tokens` returns
    (only the entries asked for are computed)."""

    __slots__ = ("facts", "blocks", "which")

    def __init__(self, facts: PrefixFacts, blocks: list[Block], which: int) -> None:
        self.facts, self.blocks, self.which = facts, blocks, which

    def __getitem__(self, i: int) -> int:
        found = self.facts.memo.get(id(self.blocks[i]))  # nearly always: a block's figures once computed
        return found[self.which] if found is not None else self.facts.through(self.blocks, i)[self.which]

    def __len__(self) -> int:
        return len(self.blocks)
