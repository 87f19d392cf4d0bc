"""The provider-neutral request model: ordered cacheable blocks with chained hashes.

A provider request body is rendered into the blocks the provider's cache sees, in prefix order. Each block
carries two chained hashes (as vLLM chains KV block hashes, parent hash + this block's bytes):

* ``content_hash`` — content only: two requests share a prefix exactly as far as these agree (``diff``);
* ``cache_key`` — content plus the identity parameters of each cache level (model, tool_choice, ...),
  mixed in where that level starts, so a parameter change invalidates exactly the levels it should.

Cache markers (``cache_control``) are recorded as breakpoints and kept out of both hashes: moving a marker
never changes a prefix's identity.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import orjson
import xxhash

from kvprobe.errors import InputError

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

LEVELS = ("tools", "system", "messages")


@dataclass(slots=True)
class Block:
    """One cacheable unit of a request: a tool, a system block, a message content block, ..."""

    path: str  # tools[i] | system | system[i] | messages[i] | messages[i].content[j] | input[i] ...
    level: str  # tools | system | messages
    kind: str  # tool_definition, text, image, document, tool_use, tool_result, thinking, ...
    text: str  # canonical content text: what char offsets index into
    meta: str = ""  # other identity bytes: ids, media digests, non-text fields
    role: str = ""
    message_index: int | None = None
    first_in_message: bool = False
    breakpoint: str | None = None  # TTL of a cache breakpoint ending at this block ("5m", "1h")
    breakpoint_source: str | None = None  # "explicit" | "automatic"
    content_hash: int = 0
    cache_key: int = 0
    body_hash: int = 0  # this block alone (not chained): dedupes token counting across a session
    tokens: int = 0  # tokens of this block (filled by a TokenCounter)
    tokens_exact: bool = False
    # what one sizing pass (`analysis.sizing.BlockSizer`, by its serial) noted of this block: that it sized it,
    # and the tokens of a request through it (None: not noted). On the block, not in tables by id() of block: those
    # were ~0.25 KB a block of a log, held to the end of its simulation (~100 MB at 105,000 requests of a fleet)
    sized_by: int = field(default=0, compare=False, repr=False)
    running: int | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class IdentityParam:
    """A request parameter that is part of the cache identity, and the level a change of it invalidates."""

    name: str
    value: Any
    invalidates: str  # tools | system | messages | all

    @staticmethod
    def of(name: str, value: Any, invalidates: str) -> IdentityParam:
        """The one shared instance for these values (made once): a trace repeats the same few models and
        settings on every request, and the split parse then pickles each distinct parameter once, not once
        per request. A value that is not hashable (a `tool_choice` object) is told apart by its repr, and
        the instance keeps a copy of it, so later edits of a request body cannot reach it."""
        try:
            key: tuple = (name, invalidates, value.__class__, value)
            found = _INTERNED.get(key)
            hashable = True
        except TypeError:
            key = (name, invalidates, value.__class__, repr(value))
            found = _INTERNED.get(key)
            hashable = False
        if found is None:
            found = IdentityParam(name, value if hashable else copy.deepcopy(value), invalidates)
            if len(_INTERNED) < _MAX_INTERNED:
                _INTERNED[key] = found
        return found


_INTERNED: dict[tuple, IdentityParam] = {}
_MAX_INTERNED = 100_000  # a bound for pathological traces (a new value on every request)


@dataclass(slots=True)
class RenderedRequest:
    """A request as its provider caches it: ordered blocks, identity parameters and breakpoints."""

    provider: str
    api: str  # anthropic_messages | openai_chat | openai_responses
    model: str | None
    blocks: list[Block]
    params: dict[str, IdentityParam]
    automatic_breakpoint: bool = False
    warnings: list[str] = field(default_factory=list)
    # (block index, ttl) of each cache breakpoint. Held here, not only on blocks, because a session's
    # requests share deduplicated block objects while each request places its own markers.
    # None: read off the blocks (a fresh rendering); given when blocks are shared with another request.
    breakpoints: list[tuple[int, str]] = None  # type: ignore[assignment]
    # "breakpoints" (Anthropic, Qwen's explicit cache), "managed" / "explicit" (OpenAI GPT-5.6+ implicit and
    # explicit modes), "implicit" (a prefix cache), "gemini_create" / "gemini_cached"
    cache_mode: str = "implicit"
    # leading blocks taken over from the previous request of the stream (request.incremental): already
    # interned when that request was, so a block store need not look them up again
    shared_prefix: int = field(default=0, compare=False)
    managed_breakpoint: int | None = None  # GPT-5.6+ implicit mode: the breakpoint OpenAI places itself
    # the cache retention the request asks for (OpenAI's `prompt_cache_retention`: `in_memory`, `24h`), which
    # selects the rules it is simulated under (`catalog.rules_for`); None: the provider's default
    retention: str | None = None

    def __post_init__(self) -> None:
        if self.breakpoints is None:
            self.breakpoints = [(i, b.breakpoint) for i, b in enumerate(self.blocks) if b.breakpoint]

    @property
    def breakpoint_indices(self) -> list[int]:
        return [i for i, _ in self.breakpoints]

    @property
    def total_tokens(self) -> int:
        return sum(b.tokens for b in self.blocks)


def canonical_json(value: Any) -> str:
    """Stable text for structured content. Key order is kept: the provider renders what it was sent."""
    try:
        return orjson.dumps(value, default=str).decode()
    except (orjson.JSONEncodeError, TypeError) as exc:  # nested deeper than 255 levels, integers over 64 bits
        raise InputError(f"content kvprobe cannot render: {exc}") from None


def digest(data: str | bytes) -> str:
    """Short content digest for media: identity without holding megabytes of base64."""
    raw = data.encode() if isinstance(data, str) else data
    return xxhash.xxh3_128_hexdigest(raw)


def level_rank(level: str) -> int:
    return 0 if level == "all" else LEVELS.index(level)


def chain_hashes(blocks: list[Block], params: dict[str, IdentityParam], start: int = 0) -> None:
    """Fill body_hash, content_hash and cache_key of every block: each block's bytes are hashed once (its body
    hash), and the chain runs over parent hash and body hash. An edit of a sized skeleton (whatif.reshape)
    chains a block's new content the same way, so an untouched request and an edited one with the same content
    have the same keys without chaining the log a second time.

    Blocks before `start` are already hashed under the same parameters (a prefix reused from another
    request): the chain continues from the last of them.
    """
    salts = level_salts(params)
    parent_content = parent_key = b"\0" * 16
    seen_ranks: set[int] = set()
    if start:
        last = blocks[start - 1]
        parent_content, parent_key = last.content_hash.to_bytes(16, "big"), last.cache_key.to_bytes(16, "big")
        # (the distinct levels first: a long reused history has a handful of them)
        seen_ranks = set(range(max(level_rank(level) for level in {b.level for b in blocks[:start]}) + 1))
    for block in blocks[start:] if start else blocks:
        payload = (block.kind + "\0" + block.role + "\0" + block.meta + "\0" + block.text).encode(
            "utf-8", "surrogatepass")
        block.body_hash = xxhash.xxh3_64_intdigest(payload)
        body = block.body_hash.to_bytes(8, "big")
        content = xxhash.xxh3_128_digest(parent_content + body)
        rank = level_rank(block.level)
        salt = b""
        for r in range(rank + 1):  # mix each level's parameters in at the first block at or after it
            if r not in seen_ranks:
                seen_ranks.add(r)
                salt += salts.get(r, b"")
        key = xxhash.xxh3_128_digest(parent_key + salt + body)
        block.content_hash = int.from_bytes(content, "big")
        block.cache_key = int.from_bytes(key, "big")
        parent_content, parent_key = content, key


def level_salts(params: dict[str, IdentityParam]) -> dict[int, bytes]:
    grouped: dict[int, list[tuple[str, Any]]] = {}
    for p in params.values():
        grouped.setdefault(level_rank(p.invalidates), []).append((p.name, p.value))
    return {rank: canonical_json(sorted(items, key=lambda kv: kv[0])).encode() for rank, items in grouped.items()}
