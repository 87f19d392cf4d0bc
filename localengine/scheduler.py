"""Continuous batching: each step computes the prompts of newly admitted requests and one token for every
running request, in a single forward pass.

Plain Python (no torch). The engine calls `schedule()`, hands the batch to the model runner, then calls
`postprocess()` with the sampled tokens.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .config import SchedulerConfig
from .sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class ScheduledBatch:
    prefills: list[Sequence] = field(default_factory=list)  # compute tokens [num_computed, num_tokens)
    decodes: list[Sequence] = field(default_factory=list)  # compute their newest token
    block_copies: list[tuple[int, int]] = field(default_factory=list)  # (src, dst) copy-on-write

    @property
    def seqs(self) -> list[Sequence]:
        return self.prefills + self.decodes

    @property
    def num_prefill_tokens(self) -> int:
        return sum(s.num_tokens - s.num_computed_tokens for s in self.prefills)

    def __bool__(self) -> bool:
        return bool(self.prefills or self.decodes)


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        block_manager: BlockManager,
        eos_token_ids: tuple[int, ...],
        max_model_len: int = 1 << 62,
    ):
        self.config = config
        self.max_model_len = max_model_len
        self.block_manager = block_manager
        self.eos_token_ids = frozenset(eos_token_ids)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        """Queue a request; refuse one that could not finish even with the whole cache to itself."""
        if seq.num_tokens > self.max_model_len:
            raise ValueError(f"prompt of {seq.num_tokens} tokens exceeds the context length {self.max_model_len}")
        bm = self.block_manager
        final_len = min(seq.num_tokens + seq.params.max_tokens, self.max_model_len)
        blocks = (final_len + bm.block_size - 1) // bm.block_size
        if blocks > bm.num_blocks:
            raise ValueError(
                f"{seq.num_tokens} prompt tokens + up to {seq.params.max_tokens} new ones need {blocks} KV blocks; "
                f"the cache has {bm.num_blocks} of {bm.block_size} tokens"
            )
        self.waiting.append(seq)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def abort(self, seq: Sequence) -> None:
        if seq in self.waiting:
            self.waiting.remove(seq)
        elif seq in self.running:
            self.running.remove(seq)
            self.block_manager.deallocate(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = seq.finish_reason or "abort"

    # -- scheduling -------------------------------------------------------------------------------
    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        self._schedule_decodes(batch)
        self._schedule_prefills(batch)
        return batch

    def _schedule_decodes(self, batch: ScheduledBatch) -> None:
        """One more token for every running sequence; preempt the newest ones if blocks run out."""
        bm = self.block_manager
        kept: list[Sequence] = []
        queue = deque(self.running)
        while queue:
            seq = queue.popleft()
            while not bm.can_append(seq) and queue:
                self._preempt(queue.pop())
            if not bm.can_append(seq):
                self._preempt(seq)
                continue
            copy = bm.append_slot(seq)
            if copy is not None:
                batch.block_copies.append(copy)
            kept.append(seq)
            batch.decodes.append(seq)
        self.running = kept

    def _preempt(self, seq: Sequence) -> None:
        """Free a running sequence's blocks; it is recomputed (prompt + tokens so far) when readmitted."""
        self.block_manager.deallocate(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def _schedule_prefills(self, batch: ScheduledBatch) -> None:
        bm, cfg = self.block_manager, self.config
        budget = cfg.max_num_batched_tokens
        deferred: list[Sequence] = []
        while self.waiting and len(self.running) < cfg.max_num_seqs:
            seq = self.waiting[0]
            num_cached, next_pending = bm.lookup(seq)
            if cfg.wait_for_shared_prefix and next_pending:
                deferred.append(self.waiting.popleft())
                continue
            num_new = seq.num_tokens - num_cached
            if batch.prefills and num_new > budget:
                break  # over this step's token budget: admit it next step
            if not bm.allocate(seq):
                break
            budget -= num_new
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            batch.prefills.append(seq)
        self.waiting.extendleft(reversed(deferred))

    # -- after the forward pass --------------------------------------------------------------------
    def postprocess(self, batch: ScheduledBatch, token_ids: list[int | None]) -> list[Sequence]:
        """Record computed K/V and sampled tokens; returns the sequences that finished this step."""
        now = time.perf_counter()
        finished: list[Sequence] = []
        for seq, token_id in zip(batch.seqs, token_ids):
            seq.num_computed_tokens = seq.num_tokens
            self.block_manager.publish(seq)
            if seq.first_token_time is None:
                seq.first_token_time = now
            if token_id is not None:
                seq.append_token(token_id)
            reason = self._finish_reason(seq, token_id)
            if reason is not None:
                seq.status, seq.finish_reason, seq.finish_time = SequenceStatus.FINISHED, reason, now
                self.running.remove(seq)
                self.block_manager.deallocate(seq)
                finished.append(seq)
        return finished

    def _finish_reason(self, seq: Sequence, token_id: int | None) -> str | None:
        params = seq.params
        if token_id is None:
            return "length"  # max_tokens=0: the prompt only
        if token_id in params.stop_token_ids or (not params.ignore_eos and token_id in self.eos_token_ids):
            return "stop"
        if seq.num_completion_tokens >= params.max_tokens or seq.num_tokens >= self.max_model_len:
            return "length"
        return None
