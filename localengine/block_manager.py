"""The paged KV store's bookkeeping: which block holds which tokens, who uses it, what is reusable.

No torch here: the model runner owns the tensor of `num_blocks` x `block_size` slots; this module only
hands out block ids and remembers their contents.

Prefix caching, as in vLLM and nano-vllm:
- a *full* block is identified by a chained hash of (parent block's hash, its token ids), so a hash names
  the whole prefix up to the end of that block; a hit is confirmed by comparing token ids;
- a block's hash is published only after its K/V has been written (`publish`), so nothing can hit a block
  whose contents are still being computed;
- blocks are reference-counted; a block with references is never handed out again;
- a released block goes to the back of the free queue *keeping its hash*: it stays a hit until the queue
  reaches it and it is reallocated (that is an eviction);
- a finished request releases its blocks tail-first, so its unshared suffix is evicted before the prefix
  other requests are likely to share;
- at most `n - 1` prompt tokens are reused: the last prompt token is always computed, since its logits
  are needed;
- a shared, partially-filled last block (after `fork`) is copied before anything is appended to it.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass

import xxhash

from .sequence import Sequence


def block_hash(token_ids: list[int], parent: int | None) -> int:
    """Chained 128-bit hash of a full block: identifies the whole prefix ending with this block."""
    h = xxhash.xxh3_128()
    if parent is not None:
        h.update(parent.to_bytes(16, "little"))
    h.update(array("q", token_ids).tobytes())
    return h.intdigest()


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None  # set once the block is full and its K/V written
    token_ids: tuple[int, ...] = ()


@dataclass(slots=True)
class BlockStats:
    prefix_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_hits: int = 0  # of those, tokens served from cached blocks
    evictions: int = 0  # cached blocks whose contents were dropped to reuse the block


class OutOfBlocks(RuntimeError):
    """No free block is left (the scheduler preempts before this can happen)."""


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, release_tail_first: bool = True):
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.block_size = block_size
        # False releases head first: only there to measure what tail-first buys.
        self.release_tail_first = release_tail_first
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.hash_to_block_id: dict[int, int] = {}
        # LRU order: the front is reallocated first. Values unused (an ordered set).
        self.free_block_ids: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        # Hashes of full blocks allocated in this step whose K/V is not yet written.
        self.pending_hashes: set[int] = set()
        self.stats = BlockStats()

    # -- queries ---------------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    @property
    def num_cached_free_blocks(self) -> int:
        """Free blocks that still hold a reusable prefix."""
        return sum(1 for b in self.free_block_ids if self._is_cached(self.blocks[b]))

    def _prompt_block_hashes(self, seq: Sequence) -> list[int]:
        """Hashes of the sequence's full blocks (computed once, extended as it grows)."""
        for i in range(len(seq.block_hashes), seq.num_full_blocks):
            parent = seq.block_hashes[i - 1] if i else None
            seq.block_hashes.append(block_hash(seq.block_tokens(i), parent))
        return seq.block_hashes

    def _lookup(self, seq: Sequence) -> tuple[list[int], bool]:
        """Cached blocks for the longest reusable prefix, and whether the next block is pending."""
        hits: list[int] = []
        if not seq.params.use_prefix_cache:
            return hits, False
        hashes = self._prompt_block_hashes(seq)
        max_blocks = (seq.num_tokens - 1) // self.block_size  # the last token is always computed
        for i in range(max_blocks):
            block_id = self.hash_to_block_id.get(hashes[i])
            if block_id is None or self.blocks[block_id].token_ids != tuple(seq.block_tokens(i)):
                return hits, hashes[i] in self.pending_hashes
            hits.append(block_id)
        return hits, False

    def lookup(self, seq: Sequence) -> tuple[int, bool]:
        """Without allocating: how many prompt tokens would be reused, and whether the block after them is
        being computed for another request in this step (so waiting one step would reuse it too)."""
        hits, next_pending = self._lookup(seq)
        return len(hits) * self.block_size, next_pending

    # -- allocation --------------------------------------------------------------------------------
    def _take_free_block(self, block_id: int | None = None) -> Block:
        if block_id is None:
            if not self.free_block_ids:
                raise OutOfBlocks("no free KV block")
            block_id, _ = self.free_block_ids.popitem(last=False)
        else:
            del self.free_block_ids[block_id]
        block = self.blocks[block_id]
        block.ref_count = 1
        return block

    def _new_block(self, after: int | None = None, same_hash: int | None = None) -> int:
        """A fresh block: the one right after block `after` when it is free and holds no cached prefix, or
        holds the very block about to be computed (`same_hash`: a prompt's last full block, recomputed
        because its last token always is; it is published again once rewritten). A sequence's K/V then
        stays one run of slots, which decode attends to in one call. Else the front of the free queue,
        evicting whatever prefix it still held."""
        nxt = after + 1 if after is not None else None
        if nxt is not None and nxt < len(self.blocks) and nxt in self.free_block_ids:
            block = self.blocks[nxt]
            cached = self._is_cached(block)
            if not cached or block.hash == same_hash:
                self._take_free_block(nxt)
                if cached:
                    del self.hash_to_block_id[block.hash]
                block.hash, block.token_ids = None, ()
                return nxt
        block = self._take_free_block()
        if self._is_cached(block):
            del self.hash_to_block_id[block.hash]
            self.stats.evictions += 1
        block.hash, block.token_ids = None, ()
        return block.block_id

    def _is_cached(self, block: Block) -> bool:
        """Reachable by a lookup (a duplicate published later may have taken over its hash)."""
        return block.hash is not None and self.hash_to_block_id.get(block.hash) == block.block_id

    def allocate(self, seq: Sequence) -> bool:
        """Give a waiting sequence blocks for all its tokens, reusing cached ones; False if they don't fit."""
        if seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} already has blocks")
        hits, _ = self._lookup(seq)
        num_new = seq.num_blocks_needed - len(hits)
        hits_in_free_queue = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        if num_new + hits_in_free_queue > self.num_free_blocks:
            return False
        for block_id in hits:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                self._take_free_block(block_id)
            else:
                block.ref_count += 1
        table, hashes = list(hits), self._prompt_block_hashes(seq)
        for _ in range(num_new):
            same = hashes[len(table)] if len(table) < len(hashes) else None
            table.append(self._new_block(after=table[-1] if table else None, same_hash=same))
        seq.block_table = table
        seq.num_cached_tokens = len(hits) * self.block_size
        seq.num_computed_tokens = seq.num_cached_tokens
        seq.num_published_blocks = len(hits)
        for i in range(len(hits), seq.num_full_blocks):
            self.pending_hashes.add(self._prompt_block_hashes(seq)[i])
        if seq.params.use_prefix_cache:
            self.stats.prefix_queries += seq.num_tokens
            self.stats.prefix_hits += seq.num_cached_tokens
        return True

    def can_append(self, seq: Sequence) -> bool:
        """Whether the sequence's newest token can get a slot (a new block or a private copy)."""
        return not self._needs_block(seq) or self.num_free_blocks >= 1

    def _needs_block(self, seq: Sequence) -> bool:
        if len(seq.block_table) < seq.num_blocks_needed:
            return True
        return self.blocks[seq.block_table[-1]].ref_count > 1  # shared last block: copy on write

    def append_slot(self, seq: Sequence) -> tuple[int, int] | None:
        """Make room for the newest token before it is computed.

        Returns (src, dst) when the shared last block was copied to a private one: the runner must copy
        the K/V of `src` into `dst` before writing the new token.
        """
        if len(seq.block_table) < seq.num_blocks_needed:
            seq.block_table.append(self._new_block(after=seq.block_table[-1] if seq.block_table else None))
            return None
        last = self.blocks[seq.block_table[-1]]
        if last.ref_count == 1:
            return None
        new_id = self._new_block(after=seq.block_table[-2] if len(seq.block_table) > 1 else None)
        last.ref_count -= 1
        seq.block_table[-1] = new_id
        return last.block_id, new_id

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Let `child` share every block of `parent` (parallel samples of one prompt)."""
        for block_id in parent.block_table:
            self.blocks[block_id].ref_count += 1
        child.block_table = list(parent.block_table)
        child.num_cached_tokens = parent.num_cached_tokens
        child.num_computed_tokens = parent.num_computed_tokens
        child.num_published_blocks = parent.num_published_blocks
        child.block_hashes = list(parent.block_hashes)

    # -- after a step ------------------------------------------------------------------------------
    def publish(self, seq: Sequence) -> None:
        """Register the hashes of blocks that became full now that their K/V is written."""
        hashes = self._prompt_block_hashes(seq)
        num_full_computed = seq.num_computed_tokens // self.block_size
        for i in range(seq.num_published_blocks, num_full_computed):
            block = self.blocks[seq.block_table[i]]
            self.pending_hashes.discard(hashes[i])
            if block.hash is None:
                block.hash, block.token_ids = hashes[i], tuple(seq.block_tokens(i))
                # The newest copy wins: it is the one that will stay in the free queue longest.
                self.hash_to_block_id[hashes[i]] = block.block_id
        seq.num_published_blocks = max(seq.num_published_blocks, num_full_computed)

    def deallocate(self, seq: Sequence) -> None:
        """Release the sequence's blocks, tail first, so shared prefixes are evicted last."""
        for i in range(seq.num_published_blocks, len(seq.block_hashes)):
            self.pending_hashes.discard(seq.block_hashes[i])
        order = reversed(seq.block_table) if self.release_tail_first else iter(seq.block_table)
        for block_id in order:
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_block_ids[block_id] = None
        seq.block_table = []
        seq.num_computed_tokens = 0
        seq.num_published_blocks = 0

    def clear_cache(self) -> int:
        """Forget every cached prefix (blocks in use keep their contents); returns blocks dropped."""
        dropped = len(self.hash_to_block_id)
        self.hash_to_block_id.clear()
        for block in self.blocks:
            block.hash, block.token_ids = None, ()
        return dropped
