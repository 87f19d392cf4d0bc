"""The parse pass: trace records -> light request skeletons whose blocks are shared across a session.

Agents resend their whole history every turn, so a trace repeats the same blocks many times. Each unique
block (by chained cache key) is kept once, with its text dropped and its raw token count computed once; a
request keeps references to those shared blocks plus its own breakpoints. Memory grows with the number of
new blocks, not with session length squared. Text needed later (diff snippets) is re-read from the file.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from sys import intern
from typing import Protocol

from kvprobe.analysis.reported import Reported, read_reported
from kvprobe.errors import InputError
from kvprobe.request import RenderedRequest
from kvprobe.request.incremental import StreamRenderer
from kvprobe.request.model import Block
from kvprobe.request.responses_chain import ResponseChain
from kvprobe.sim.gemini_explicit import parse_ttl
from kvprobe.tokens import TokenCounter, count_block_text, pooled_counter
from kvprobe.trace import TraceRecord
from kvprobe.usage import Usage, normalize_usage

_NOT_A_CAUSE = ("unavailable", "previous_message_not_found")
PENDING = -1  # a raw token count not known yet (BlockStore.pending)
READABLE_EPSILON = 0.001  # a request with no response timing is taken as readable right after it starts


@dataclass(slots=True)
class Skeleton:
    """What the simulator needs of one request (no prompt text)."""

    id: str
    order: int  # position in the input, the tie-break for equal start times
    session: str
    agent: str
    provider: str
    model: str | None
    started_at: float
    readable_at: float
    finished_at: float | None
    observed: Usage | None
    request: RenderedRequest | None  # None for usage-only records
    source: str | None = None
    line: int | None = None
    offset: int | None = None
    error: str | None = None
    task: str | None = None
    extra: dict = field(default_factory=dict)
    failed: bool = False  # `failed_call`: never simulated, priced or diagnosed; listed as failed


    @property
    def rules_key(self) -> tuple[str, str | None, str | None, str | None, str | None]:
        """What the rules that apply to it depend on: `catalog.rules_for(*sk.rules_key)`."""
        req = self.request
        return self.provider, self.model, self.extra.get("platform"), \
            req.cache_mode if req is not None else None, req.retention if req is not None else None


class PendingCounts(Protocol):
    """Takes the text of each new block (by body hash) to count later, elsewhere."""

    def add(self, body: int, encoding: str, text: str, meta: str) -> int | None:
        """None: counted later (`BlockStore.settle`); else the raw count, made at once after all."""


@dataclass(slots=True)
class BlockStore:
    """Deduplicates blocks by chained cache key and counts each unique block's tokens once."""

    blocks: dict[int, Block] = field(default_factory=dict)
    raw: dict[int, int] = field(default_factory=dict)  # cache_key -> raw token count
    raw_by_body: dict[int, int] = field(default_factory=dict)  # a moved block (new key, same body): counted once
    counters: dict[tuple[str, str | None], TokenCounter] = field(default_factory=dict)
    # where the texts of new blocks go to be counted elsewhere (split_parse hands them to the process that has
    # the tokenizer loaded; `settle` puts the counts in later); None counts at once
    pending: PendingCounts | None = None

    def counter(self, provider: str, model: str | None) -> TokenCounter:
        return pooled_counter(self.counters, provider, model)

    def intern(self, req: RenderedRequest, counter: TokenCounter) -> None:
        """Replace the request's blocks by the stored ones (one object per chained key), counting the tokens
        of each new body once; a block's raw count is then `raw[block.cache_key]`."""
        start = req.shared_prefix
        if start and self.blocks.get(req.blocks[start - 1].cache_key) is not req.blocks[start - 1]:
            start = 0  # not this store's objects (another store interned them): look every block up
        shared = req.blocks[:start]
        for block in req.blocks[start:] if start else req.blocks:
            known = self.blocks.get(block.cache_key)
            if known is None:
                raw = self.raw_by_body.get(block.body_hash)
                if raw is None and self.pending is not None:
                    raw = self.pending.add(block.body_hash, counter.encoding, block.text, block.meta)
                    raw = self.raw_by_body[block.body_hash] = PENDING if raw is None else raw
                elif raw is None:
                    raw = count_block_text(block.text, block.meta, counter.encoding)
                    self.raw_by_body[block.body_hash] = raw
                block.text = block.meta = ""  # the text is not needed again here; memory stays flat
                # every session has a `messages[3].content[0]`, a `text` and a `user`: one string of each
                block.path, block.kind, block.role = intern(block.path), intern(block.kind), intern(block.role)
                self.blocks[block.cache_key], self.raw[block.cache_key] = block, raw
                known = block
            shared.append(known)
        req.blocks = shared

    def forget_blocks(self) -> None:
        """Drop the tables by key and body once the log is sized (the blocks live on in the skeletons): what
        prices sized skeletons afterwards needs only the counters. ~0.7 KB a request on a fleet."""
        self.blocks, self.raw, self.raw_by_body = {}, {}, {}

    def settle(self, counts: dict[int, int]) -> None:
        """Put the counts of the pending blocks (by body hash) where placeholders stand."""
        for body, raw in self.raw_by_body.items():
            if raw == PENDING:
                self.raw_by_body[body] = counts[body]
        for key, raw in self.raw.items():
            if raw == PENDING:
                self.raw[key] = counts[self.blocks[key].body_hash]
        self.pending = None


def _render(record: TraceRecord, renderer: StreamRenderer) -> RenderedRequest:
    try:
        return renderer.render(record.request, record.provider, record.endpoint, record.response,
                               (record.session, record.agent), record.extra.get("request_headers"), record.platform)
    except InputError as exc:
        field = f"request.{exc.field}" if exc.field else "request"
        raise InputError(exc.message, file=record.source, line=record.line, field=field) from None


def _context_cache_facts(rec: TraceRecord, req: RenderedRequest | None) -> dict:
    """Gemini explicit caching: the created cache's name and TTL, or the cache a request names."""
    if req is None or req.cache_mode not in ("gemini_create", "gemini_cached"):
        return {}
    body = rec.request or {}
    if req.cache_mode == "gemini_cached":
        return {"cache_ref": body.get("cachedContent")}
    name = rec.response.get("name") if isinstance(rec.response, dict) else None
    return {"cache_name": name, "cache_ttl_s": parse_ttl(body.get("ttl"))}


def _miss_reason(response: dict | None) -> Reported | None:
    """Anthropic's `diagnostics.cache_miss_reason` when it names a cause of lost reads. `unavailable` and
    `previous_message_not_found` say the API could not compare: kvprobe's inference stands."""
    reported = read_reported(response)
    if reported is None or reported.reason is None or reported.reason in _NOT_A_CAUSE:
        return None
    return None if reported.missed_tokens == 0 else reported  # diverged after all it could have read


# Record keys a skeleton keeps: task outcome, keep-alive pings, and what a written (fixed) trace carries in
# place of logged usage: the block sizes it was priced on and the output tokens of the original request
# (and, inside the what-if only, the sizes of the parts of a block a fix split, by path); what a usage-only
# log showed before the request (`events`, analysis.usage_only), the platform that served it, its rebuilt
# message list (`history`, analysis.rebuilt), whose knobs the advice names (source_format, client_version,
# client, writer: kvprobe.agents — the importer's format, the logged version, the program `kvprobe capture`
# ran, the agent that wrote a format several write) and the project a request belongs to (cwd: the bill and
# the request rows).
_CARRIED = ("task_passed", "keep_alive", "block_tokens", "output_tokens", "size_hints", "events", "platform",
            "history", "source_format", "client_version", "client", "writer", "cwd", "cache_requested", "route")


def failed_call(error: str | None, logged: Usage | None, http_status: object) -> bool:
    """The one rule for a request that failed (every stage and command reads it, `gate` first): it has an
    error and the provider logged no usage for it (nothing listening, a reset before any byte, a 5xx), or the
    provider refused it (HTTP 4xx: a refused request reached no model and wrote no cache, whatever its body
    says). A stream cut after its usage arrived did reach the model: it is priced as logged."""
    if error is None:
        return False
    refused = isinstance(http_status, int) and not isinstance(http_status, bool) and 400 <= http_status < 500
    return logged is None or refused


def without_usage(sk: Skeleton) -> Skeleton:
    """The request as a simulation sees it when its input usage is to be predicted: the logged output kept
    (`skeletons` notes it in `extra`, which the two share: no stage changes a skeleton's extra, and a copy of
    it per request was ~0.3 KB a request for the what-if's whole log)."""
    return replace(sk, observed=None)


def _name(value: str | None) -> str | None:
    """One string object for a session, agent or model name, however many requests repeat it."""
    return intern(value) if type(value) is str else value


def skeletons(records: Iterable[TraceRecord], store: BlockStore, use_observed: bool = True,
              chain: ResponseChain | None = None) -> Iterator[Skeleton]:
    """Skeletons in input order. use_observed=False simulates as if no usage had been logged (what-if).
    chain: the stateful Responses conversations of the records before these (a parse of a file's second part)."""
    last_start = 0.0
    # each request's repeated history is not rendered (nor kept) twice
    renderer = StreamRenderer(share=True, chain=chain)
    for order, rec in enumerate(records):
        start = rec.started_at if rec.started_at is not None else last_start + READABLE_EPSILON
        last_start = start
        provider = _name(rec.provider) or "anthropic"
        req = None
        if rec.request is not None:
            req = _render(rec, renderer)
            provider = req.provider = _name(req.provider)
            req.model = _name(req.model)
            store.intern(req, store.counter(provider, req.model))
        readable = rec.readable_at or start + READABLE_EPSILON
        logged = normalize_usage(provider, rec.usage)
        observed = logged if use_observed else None
        kept = {k: rec.extra[k] for k in _CARRIED if k in rec.extra}
        platform = rec.platform
        if platform is not None:  # who served it: part of the rules a request is simulated under
            kept["platform"] = platform
        if logged is not None:  # what a prediction of it answers with (`without_usage`, simulate)
            kept.setdefault("output_tokens", logged.output_tokens)
        reported = _miss_reason(rec.response)
        if observed is not None and reported and not observed.miss_reason:
            observed = replace(observed, miss_reason=reported.reason)
        task = rec.extra.get("task")
        yield Skeleton(rec.id, order, _name(rec.session or "-"), _name(rec.agent or "main"), provider,
                       _name(req.model if req else rec.model), start, readable, rec.finished_at,
                       observed, req, rec.source, rec.line, rec.offset, rec.error,
                       str(task) if task is not None else None,
                       kept | _context_cache_facts(rec, req)
                       | ({"reported_missed_tokens": reported.missed_tokens} if reported and reported.missed_tokens
                          is not None else {}),
                       failed_call(rec.error, logged, rec.extra.get("http_status")))
