"""Edits of sized skeletons: what a fix does to the blocks a simulation sees, without re-rendering any text.

Pricing a policy means simulating the whole log with it applied. Editing the records and rendering them again
would cost a parse per policy; instead the sized skeletons of the anchored pass are edited directly:

* a block's content changes (a volatile span moved out of it, a tool list made stable): it gets the body hash
  and size of its new content, and every block after it is chained again on the new keys;
* an identity parameter changes: the blocks from the level it invalidates are chained again with its salt;
* breakpoints, TTLs, start times change, or requests are added (keep-alive pings, a warm-up).

Chaining uses each block's body hash (content alone, computed when the text was rendered), as the parse
chains every block (`request.model.chain_hashes`): equal content after an edit gives equal keys, whatever it
was before, and edited and untouched requests compare. An edit is a function of the prefix it edits, and a block's old cache
key names that whole prefix, so new blocks are memoized by (edit variant, old key): every
unique block of the log is chained once per application of a policy, however many requests repeat it.
"""
from __future__ import annotations

from operator import attrgetter
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import xxhash

from kvprobe.analysis.skeleton import Skeleton
from kvprobe.request.model import Block, IdentityParam, RenderedRequest, level_salts

_ZERO = b"\0" * 16
T = TypeVar("T")
_SLOTS: dict[type, attrgetter] = {}
_RANK = {"all": 0, "tools": 0, "system": 1, "messages": 2}  # request.model.level_rank, as a table


def clone(obj):
    """A shallow copy of a slots dataclass (Block, Skeleton, RenderedRequest): `copy.copy` goes through
    `__reduce_ex__` and costs several times more on this path, run once per edited block and request."""
    cls = obj.__class__
    values = _SLOTS.get(cls)
    if values is None:  # a dataclass's slots are its fields, in order: its constructor takes them positionally
        values = _SLOTS[cls] = attrgetter(*cls.__slots__)
    return cls(*values(obj))


def _key_bytes(value: int) -> bytes:
    return value.to_bytes(16, "big")


# While a log is edited a part at a time (`Pricer.stream`), each policy's memo lives from one part to the
# next (a session's later requests find the blocks its earlier ones were given) but is bounded: past this
# many new blocks it starts afresh, keeping the ones looked up since (the sessions still active).
MEMO_BLOCKS = 8_192
TAKEN_OVER_PROBES = 8  # blocks from a list's end `Chainer.rechain` looks for a list made before
_HELD: list[dict[int, "Chainer"]] = []  # per `held_memos` block (innermost last): the chainers used in it


@contextmanager
def held_memos() -> Iterator[None]:
    """The memos of the chainers used inside live until the block ends (bounded by `MEMO_BLOCKS`), then are
    emptied, as each application would empty them."""
    _HELD.append({})
    try:
        yield
    finally:
        for chainer in _HELD.pop().values():
            chainer.memo.clear()
            chainer.older.clear()
            chainer.ends.clear()


@dataclass(slots=True)
class Chainer:
    """New blocks for old ones, chained on new parents; one per policy (its memo is the policy's)."""

    memo: dict[tuple[Hashable, int], Block] = field(default_factory=dict)
    older: dict[tuple[Hashable, int], Block] = field(default_factory=dict)  # the memo before its last bound
    # (variant, old key of a list's last block) -> the list `rechain` made of it: a request resends the list
    # an earlier one of its session was edited into, and takes it over instead of looking each block up again
    ends: dict[tuple[Hashable, int], list[Block]] = field(default_factory=dict)

    def scoped(self, edit: Callable[[], T]) -> T:
        """`edit()` with the memo emptied after it: a memo kept from one application of a policy to the next
        held a new block per block of the log for as long as the policy lived (3.5 KB a request on a fleet);
        the edited log holds the blocks it needs. Inside `held_memos` it is kept, bounded, until that ends."""
        try:
            return edit()
        finally:
            if not _HELD:
                self.memo.clear()
                self.ends.clear()
            else:
                _HELD[-1][id(self)] = self
                if len(self.memo) > MEMO_BLOCKS:
                    self.memo, self.older, self.ends = {}, self.memo, {}

    def _found(self, memo_key: tuple[Hashable, int]) -> Block | None:
        found = self.memo.get(memo_key)
        if found is None and self.older:
            found = self.older.get(memo_key)
            if found is not None:
                self.memo[memo_key] = found
        return found

    def chain(self, block: Block, parent: Block | None, salt: bytes, variant: Hashable,
              body_hash: int | None = None, tokens: int | None = None, path: str | None = None) -> Block:
        """`block` (or its new content: body hash and size) chained after `parent`."""
        memo_key = (variant, block.cache_key)
        found = self._found(memo_key)
        if found is not None:
            return found
        new = clone(block)
        if body_hash is not None:
            new.body_hash = body_hash
        if tokens is not None:
            new.tokens = tokens
        if path is not None:
            new.path = path
        return self._keyed(new, parent, salt, memo_key)

    def _keyed(self, new: Block, parent: Block | None, salt: bytes, memo_key: tuple[Hashable, int]) -> Block:
        """`new` (this chainer's own copy) given the keys of its content after `parent`, and memoized."""
        body = new.body_hash.to_bytes(8, "big")
        parent_key = _key_bytes(parent.cache_key) if parent is not None else _ZERO
        parent_content = _key_bytes(parent.content_hash) if parent is not None else _ZERO
        new.cache_key = int.from_bytes(xxhash.xxh3_128_digest(parent_key + salt + body), "big")
        new.content_hash = int.from_bytes(xxhash.xxh3_128_digest(parent_content + body), "big")
        self.memo[memo_key] = new
        return new

    def rechain(self, blocks: list[Block], start: int, params: dict[str, IdentityParam],
                variant: Hashable) -> list[Block]:
        """blocks[:start] kept and blocks[start:] chained on them: salts mixed in where each level starts, as
        `request.model.chain_hashes` does. The list made is the caller's (it may append to it)."""
        out = self._taken_over(blocks, start, variant)
        n = len(out)
        if n == start:  # blocks chained before (another request repeats this prefix): as they were
            found_in = self._found
            for block in blocks[start:]:
                found = found_in((variant, block.cache_key))
                if found is None:
                    break
                out.append(found)
            n = len(out)
        if n < len(blocks):
            salts = _salts(params)
            # blocks come in level order: the levels reached are those up to the last block's
            seen = set(range(_RANK[out[-1].level] + 1 if out else 0))
            for block in blocks[n:]:
                rank = _RANK[block.level]
                salt = b""
                for r in range(rank + 1):
                    if r not in seen:
                        seen.add(r)
                        salt += salts.get(r, b"")
                out.append(self.chain(block, out[-1] if out else None, salt, variant))
        if len(blocks) > start:  # (a caller appends to the list at most: its first len(blocks) stay these)
            self.ends[(variant, blocks[-1].cache_key)] = out
        return out

    def _taken_over(self, blocks: list[Block], start: int, variant: Hashable) -> list[Block]:
        """blocks[:start], and after them what an earlier list with the same prefix was chained into: the
        longest such prefix among the last `TAKEN_OVER_PROBES` blocks (a request adds a few blocks to its
        session's previous one). A block's old key names its whole prefix, and what a caller keeps before
        `start` follows from the old blocks and the variant (its last block, a memoized one, is the same
        object), so the blocks it was chained into are those."""
        ends = self.ends
        if ends:
            for j in range(len(blocks) - 1, max(start, len(blocks) - TAKEN_OVER_PROBES) - 1, -1):
                made = ends.get((variant, blocks[j].cache_key))
                if made is not None and (not start or made[start - 1] is blocks[start - 1]):
                    out = blocks[:start]
                    out += made[start:j + 1]
                    return out
        return blocks[:start]

    def fresh(self, template: Block, parent: Block | None, body_hash: int, tokens: int, path: str,
              variant: Hashable, salt: bytes = b"") -> Block:
        """A block of new content (a moved span, a tool a request did not send) chained after `parent`."""
        # the salt in the memo key too: a first block has no parent key to carry it (one session's requests
        # of two models)
        memo_key = (("fresh", variant, salt), (parent.cache_key if parent is not None else 0) ^ body_hash)
        found = self._found(memo_key)
        if found is not None:
            return found
        seed = clone(template)  # (dataclasses.replace: several times the cost, once per moved block)
        seed.path, seed.body_hash, seed.tokens, seed.breakpoint, seed.breakpoint_source = \
            path, body_hash, tokens, None, None
        return self._keyed(seed, parent, salt, memo_key)


_SALTS: dict[tuple[int, ...], dict[int, bytes]] = {}


def _salts(params: dict[str, IdentityParam]) -> dict[int, bytes]:
    """`level_salts` once per set of parameters (instances are interned: a trace repeats a few sets)."""
    key = tuple(map(id, params.values()))
    found = _SALTS.get(key)
    if found is None:
        if len(_SALTS) > 10_000:
            _SALTS.clear()
        found = _SALTS[key] = level_salts(params)
    return found


def salt_at(req: RenderedRequest, i: int) -> bytes:
    """The identity salt `chain_hashes` mixes in at block i: that of every level first reached there (blocks
    come in level order, so the levels before i end at block i - 1's)."""
    salts = _salts(req.params)
    seen = _RANK[req.blocks[i - 1].level] if i else -1
    return b"".join(salts.get(r, b"") for r in range(seen + 1, _RANK[req.blocks[i].level] + 1))


def with_request(sk: Skeleton, req: RenderedRequest, **changes) -> Skeleton:
    """A copy of the skeleton carrying `req` (no logged usage: a fix's effect is predicted)."""
    new = clone(sk)  # `dataclasses.replace` would re-run __init__: several times slower on this hot path
    new.request, new.observed = req, None
    for name, value in changes.items():
        setattr(new, name, value)
    return new


def with_blocks(req: RenderedRequest, blocks: list[Block], breakpoints: list[tuple[int, str]] | None = None,
                params: dict[str, IdentityParam] | None = None) -> RenderedRequest:
    """A copy of the request with new blocks (and breakpoints, parameters); no block is shared with the stream
    any more, so the simulator's ideal cache walks it whole. Breakpoints and parameters not given are the
    request's own lists and dicts (nothing edits them in place: an edit passes new ones), not copies of them."""
    new = clone(req)
    new.blocks, new.shared_prefix, new.warnings = blocks, 0, []
    if breakpoints is not None:
        new.breakpoints = list(breakpoints)
    if params is not None:
        new.params = dict(params)
    return new


def index_of(req: RenderedRequest, path: str) -> int | None:
    for i, block in enumerate(req.blocks):
        if block.path == path:
            return i
    return None


def body_hash_of(text: str, kind: str, role: str, meta: str = "") -> int:
    """The body hash `chain_hashes` gives a block of this content."""
    payload = (kind + "\0" + role + "\0" + meta + "\0" + text).encode("utf-8", "surrogatepass")
    return xxhash.xxh3_64_intdigest(payload)
