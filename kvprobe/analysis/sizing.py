"""Token sizes of blocks, anchored on observed usage where a trace has it — one sizing for everything.

A block's size is fixed the first time it appears. When the provider reported a request's total input, the
blocks new in that request share exactly what the total leaves after the already-sized prefix (consecutive
totals give the exact size of appended content); otherwise the estimate from `tokens.TokenCounter` is used.

What-if simulations, `fix`, `diff` of trace records and `compare` must price on the same sizes as `report`,
or every saving inherits the estimator's error. A `SizeBook` holds the sizes one anchored pass settled (by
chained key, then by block body, so a block moved or re-marked by a fix keeps its size) and the anchored /
estimated ratio per model for content that is new. A block a fix splits (a changing line moved out of it)
passes its size on to its parts through the edited record's `size_hints`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

from kvprobe.analysis.skeleton import BlockStore, Skeleton
from kvprobe.request.model import Block, RenderedRequest
from kvprobe.tokens import TokenCounter

_MAX_SCALE, _MIN_SCALE = 3.0, 0.33  # beyond this the observed total is not about these blocks
CARRIED_KEY = "block_tokens"  # trace-record key: the per-block sizes a written (fixed) trace was priced on


@dataclass(slots=True)
class SizeBook:
    """Sizes settled by an anchored pass, reused wherever the same content is simulated again."""

    by_key: dict[int, int] = field(default_factory=dict)
    by_body: dict[int, int] = field(default_factory=dict)
    scale: dict[tuple[str, str | None], float] = field(default_factory=dict)  # anchored / estimated

    def size(self, block: Block, estimate: int, model: tuple[str, str | None]) -> int:
        known = self.by_key.get(block.cache_key)
        if known is None:
            known = self.by_body.get(block.body_hash)
        if known is None:
            known = round(estimate * self.scale.get(model, 1.0))
        return known


_serials = count(1)


class BlockSizer:
    """Sizes the blocks of the requests given, in start order. What it noted of a block (sized; the tokens of
    a request through it) is kept on the block under this sizer's serial: a later sizer of the same blocks
    (a simulation again from the start, or on a book's sizes) sizes them afresh."""

    def __init__(self, book: SizeBook | None = None) -> None:
        self.serial = next(_serials)
        self.book = book
        self._anchored: dict[tuple[str, str | None], list[int]] = {}  # model -> [anchored, estimated]
        # body hash -> tokens * 2 + anchored, as first sized (one int, not a tuple: an entry per body of the log)
        self._by_body: dict[int, int] = {}

    def size(self, sk: Skeleton, counter: TokenCounter, raw: dict[int, int]) -> str:
        """Fill the tokens of the request's new blocks; return how: observed | carried | exact | estimated.

        With breakpoints, a provider's read + write is the exact size of the prompt through the last
        breakpoint and its fresh count the size after it (template tokens there included), so the two
        segments are anchored separately; otherwise the whole observed input anchors the new blocks.
        Without usage, sizes come from the record itself (a fixed trace carries them), then the book.
        """
        req = sk.request
        assert req is not None
        overhead = counter.message_overhead
        usage = sk.observed
        carried = sk.extra.get(CARRIED_KEY)
        if usage is None and isinstance(carried, list) and len(carried) == len(req.blocks):
            self._set(req.blocks, carried)
            return "carried"
        if usage is None and self.book is not None:
            model, book = (sk.provider, sk.model), self.book
            hints = sk.extra.get("size_hints") or {}  # the parts of a block a fix split keep its size
            for block in req.blocks:
                if block.sized_by != self.serial:  # shared blocks are sized once
                    estimate = counter.scale(raw[block.cache_key]) + (overhead if block.first_in_message else 0)
                    hinted = hints.get(block.path)
                    self._set([block], [hinted if hinted is not None else book.size(block, estimate, model)])
            return "observed" if book.scale else ("exact" if counter.exact else "estimated")
        # A request resends its whole history: its leading blocks, taken over from the previous request of its
        # stream, are sized already, and only the blocks after them need work (their tokens come as one sum).
        blocks, serial, exact, ratio = req.blocks, self.serial, counter.exact, counter.effective_ratio
        done = self._sized_prefix(req)
        estimates = [0 if b.sized_by == serial else
                     (raw[b.cache_key] if exact else round(raw[b.cache_key] * ratio))
                     + (overhead if b.first_in_message else 0)
                     for b in blocks[done:]]
        how = "exact" if counter.exact else "estimated"
        cut = req.breakpoint_indices[-1] + 1 if req.breakpoints else len(blocks)
        if usage and req.cache_mode != "implicit" and req.breakpoints and usage.cache_read_tokens + usage.cache_write_tokens:
            segments = [(0, cut, usage.cache_read_tokens + usage.cache_write_tokens),
                        (cut, len(blocks), usage.fresh_input_tokens)]
        elif usage and req.cache_mode == "gemini_cached":  # the named cache is not in the body
            segments = [(0, len(blocks), usage.input_tokens - usage.cache_read_tokens)]
        else:
            segments = [(0, len(blocks), usage.input_tokens if usage else 0)]
        for lo, hi, target in segments:
            start = max(lo, done)
            before = self._tokens_between(blocks, lo, min(hi, done))
            if self._fill(blocks[start:hi], estimates[start - done:max(hi - done, 0)], target,
                          (sk.provider, sk.model), before):
                how = "observed"
        self._note_running(blocks, done)
        return how

    def _sized_prefix(self, req: RenderedRequest) -> int:
        """How many leading blocks are known sized: the ones taken over from the previous request of the
        stream, when that request was sized here (its running totals were noted), else none."""
        done = req.shared_prefix
        if not done:
            return 0
        last = req.blocks[done - 1]
        return done if last.sized_by == self.serial and last.running is not None else 0

    def _tokens_between(self, blocks: list[Block], lo: int, hi: int) -> int:
        """Tokens of blocks[lo:hi], all inside the sized prefix, from the running totals."""
        if hi <= lo:
            return 0
        return blocks[hi - 1].running - (blocks[lo - 1].running if lo else 0)

    def _note_running(self, blocks: list[Block], done: int) -> None:
        """Running token totals through each block (a block's chained key fixes everything before it, so
        the total is the same in every request that holds it)."""
        total = blocks[done - 1].running if done else 0
        for block in blocks[done:]:
            total += block.tokens
            block.running = total

    def _set(self, blocks: list[Block], sizes: list[int]) -> None:
        serial = self.serial
        for block, tokens in zip(blocks, sizes):
            if block.sized_by != serial:
                block.tokens, block.tokens_exact = int(tokens), True  # as anchored or as carried
                block.sized_by, block.running = serial, None

    def _fill(self, blocks: list, estimates: list[int], target: int, model: tuple[str, str | None],
              before: int = 0) -> bool:
        """Size the unsized blocks of one segment; True when anchored on the observed target.

        A block whose content was sized before (moved: a tool inserted before it changes its chained key, not
        its body) keeps that size, so only content never seen shares what the total leaves."""
        serial = self.serial
        for block in blocks:
            known = self._by_body.get(block.body_hash) if block.sized_by != serial else None
            if known is not None:
                block.tokens, block.tokens_exact = known >> 1, bool(known & 1)
                block.sized_by, block.running = serial, None
        new = [(b, e) for b, e in zip(blocks, estimates) if b.sized_by != serial]
        anchored = before + sum(b.tokens for b in blocks if b.sized_by == serial)
        sizes = [e for _, e in new]
        est_total = sum(sizes)
        used = False
        if target and est_total and target > anchored and _MIN_SCALE <= (target - anchored) / est_total <= _MAX_SCALE:
            sizes, used = _scaled(sizes, target - anchored), True
            totals = self._anchored.setdefault(model, [0, 0])
            totals[0] += target - anchored
            totals[1] += est_total
        for (block, _), tokens in zip(new, sizes):
            block.tokens = tokens
            block.tokens_exact = used
            block.sized_by, block.running = serial, None
            self._by_body.setdefault(block.body_hash, tokens * 2 + used)
        return used

    def book_of(self, store: BlockStore) -> SizeBook:
        """The sizes this pass settled, for simulations of the same content (what-if, fix, diff)."""
        book = SizeBook(scale={m: a / e for m, (a, e) in self._anchored.items() if e})
        for key, block in store.blocks.items():
            book.by_key[key] = block.tokens
            book.by_body.setdefault(block.body_hash, block.tokens)
        return book


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
