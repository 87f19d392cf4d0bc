"""Replay skeletons in start order through each provider's cache rules (the simulate stage).

For every request this yields the prediction, the usage to report (observed when the provider gave it,
predicted otherwise), what an ideal prefix cache could have read, and the previous request of its stream.
Why a request read less is the next stage's question (`analysis.diagnose`), which reads these results.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from kvprobe.analysis.diagnosis import Diagnosis
from kvprobe.analysis.sizing import BlockSizer
from kvprobe.analysis.streams import Seen, Streams
from kvprobe.analysis.skeleton import BlockStore, Skeleton
from kvprobe.catalog import ModelRules, rules_for
from kvprobe.request import RenderedRequest
from kvprobe.sim import AnthropicCache, BreakpointCache, Prediction, PrefixCache, cache_for, cache_name
from kvprobe.sim.gemini_explicit import GeminiContextCaches, storage_usd
from kvprobe.usage import Usage


@dataclass(slots=True)
class RequestResult:
    sk: Skeleton
    rules: ModelRules
    usage: Usage  # observed when present, else predicted
    observed: bool
    predicted: Prediction | None
    ideal_read_tokens: int
    tokens_source: str  # observed | exact | estimated | usage-only
    write_kind: str = "none"  # cold_start | rebuild | extension | none
    diagnoses: list[Diagnosis] = field(default_factory=list)
    cost_usd: float | None = None
    cost_source: str = "unknown"
    input_equivalent: float = 0.0
    ideal_content_tokens: int = 0  # what an ideal cache would read had no identity parameter changed
    stream_tokens: int = 0  # what the previous request of this session/agent left cached, had nothing changed
    previous: "RequestResult | None" = None  # the previous request of its stream (analysis.streams)
    raw_ideal_tokens: int = 0  # the ideal read before the model's minimum length is applied

    @property
    def reusable_tokens(self) -> int:
        """The most this request could have read: the best of the three ideals."""
        best = max(self.ideal_read_tokens, self.ideal_content_tokens, self.stream_tokens)
        return min(best, self.usage.input_tokens)

    @property
    def missed_tokens(self) -> int:
        return max(self.reusable_tokens - self.usage.cache_read_tokens, 0)


def tolerance(rules: ModelRules) -> int:
    """Rounding the provider applies to reads (OpenAI 128-token steps, DeepSeek units)."""
    return int(rules.get("cached_token_step", rules.get("unit_tokens", 0)) or 0)


_CACHE_KEY, _CONTENT_HASH = attrgetter("cache_key"), attrgetter("content_hash")


def _longest(table: dict[int, int], req: RenderedRequest, key_of: Callable[[Any], int]) -> tuple[int, int]:
    """(tokens, blocks) of the longest prefix of `req` whose chained hashes `table` holds. A table holds every
    prefix of what it holds, so when the last block the request took over from the previous one of its
    stream is held, the walk starts after it instead of at the first block of the whole history."""
    blocks = req.blocks
    n = min(req.shared_prefix, len(blocks))
    best = table.get(key_of(blocks[n - 1])) if n else None
    if best is None:
        best, n = 0, 0
    for block in blocks[n:]:
        tokens = table.get(key_of(block))
        if tokens is None:
            break
        best, n = tokens, n + 1
    return best, n


@dataclass(slots=True)
class _Ideal:
    """A perfect prefix cache: infinite memory, every prefix written. Per provider (keys carry the model)."""

    by_key: dict[int, int] = field(default_factory=dict)
    by_content: dict[int, int] = field(default_factory=dict)

    def longest_key(self, req: RenderedRequest) -> tuple[int, int]:
        """Tokens of the longest prefix held under this request's keys, and how many blocks it spans."""
        return _longest(self.by_key, req, _CACHE_KEY)

    def longest_content(self, req: RenderedRequest) -> int:
        return _longest(self.by_content, req, _CONTENT_HASH)[0]

    def add(self, req: RenderedRequest, held: tuple[int, int]) -> None:
        """Write every prefix of the request. `held` = (tokens, blocks) already under its keys (a key names
        its whole prefix, so those blocks are in both tables already)."""
        tokens, start = held
        by_key, by_content = self.by_key, self.by_content
        blocks = req.blocks
        for i in range(start, len(blocks)):
            block = blocks[i]
            tokens += block.tokens
            by_key[block.cache_key] = tokens
            by_content.setdefault(block.content_hash, tokens)


class Simulator:
    """Stateful replay: feed skeletons in start order with `step`.

    presized: the blocks carry their sizes already (what-if skeletons, edited on sized ones): no sizing.
    ideal: also track what an ideal cache could have read (the diagnose stage needs it; pricing does not).
    predict: the logged usage is not read; every request's usage is the prediction (the what-if prices the
    report's own skeletons: a copy of each without its usage was ~0.2 KB a request of every pricing's floor).
    chained: each result names the previous request of its stream (`RequestResult.previous`); a replay that
    keeps no result does without (the latest request of every stream, held to the end, held every block an
    edit made: ~80 MB over a pricing of 105,000 requests of a fleet).
    """

    def __init__(self, store: BlockStore | None = None, sizer: BlockSizer | None = None, *,
                 presized: bool = False, ideal: bool = True, predict: bool = False, chained: bool = True) -> None:
        self.predict = predict
        self.caches: dict[str, AnthropicCache | BreakpointCache | PrefixCache] = {}
        self.context_caches = GeminiContextCaches()
        # per provider and model, as the providers cache: another model's entries are no request's to read
        # (a model switch is seen through the previous request of the stream, `stream_tokens`)
        self.ideal: dict[tuple[str, str | None], _Ideal] | None = {} if ideal else None
        self.sizer = None if presized else (sizer or BlockSizer())
        self.store = store or BlockStore()  # the parse pass's store: its token counters are reused
        # the previous request of each one's stream
        self.streams: Streams[RequestResult] | None = Streams() if chained else None
        self.rules: dict[tuple, ModelRules] = {}

    def step(self, sk: Skeleton) -> RequestResult:
        key = sk.rules_key
        rules = self.rules.get(key)
        if rules is None:  # the same few models all through a trace: looked up once per simulation
            rules = self.rules[key] = rules_for(*key)
        if sk.request is None:
            return self._usage_only(sk, rules)
        req = sk.request
        how = self.sizer.size(sk, self.store.counter(sk.provider, sk.model), self.store.raw) \
            if self.sizer is not None else "carried"
        if req.cache_mode in ("gemini_create", "gemini_cached"):
            pred = self._context_cache(sk, req, rules)
        else:
            name = cache_name(sk.provider, key[2], req.cache_mode)
            cache = self.caches.get(name)
            if cache is None:
                cache = self.caches[name] = cache_for(req.cache_mode)
                if hasattr(cache, "explain"):
                    cache.explain = self.ideal is not None  # no diagnosis reads a pricing simulation's evidence
            pred = cache.process(req, rules, sk.id, sk.started_at, sk.readable_at)
        observed = None if self.predict else sk.observed
        usage = observed or Usage(pred.input_tokens, pred.cache_read_tokens, pred.cache_write_5m_tokens,
                                  pred.cache_write_1h_tokens, _output_tokens(sk))
        streams = self.streams
        if streams is None:
            return RequestResult(sk, rules, usage, observed is not None, pred, 0, how)
        seen = Seen(None, sk.model, req, 0)
        result = RequestResult(sk, rules, usage, observed is not None, pred, 0, how,
                               previous=streams.previous((sk.session, sk.agent), seen))
        if self.ideal is not None:
            self._ideals(result, req, rules)
        seen.item = result
        streams.add((sk.session, sk.agent), seen)
        return result

    def forget_expired(self, now: float) -> None:
        """Drop the entries expired by `now` where that changes no later result (a replay in start order that
        diagnoses nothing: `replay`); each cache knows which of its entries it may forget."""
        for cache in self.caches.values():
            cache.forget_expired(now)

    def _ideals(self, result: RequestResult, req: RenderedRequest, rules: ModelRules) -> None:
        """What an ideal prefix cache could have read, and what the previous request of the stream left."""
        sk = result.sk
        ideal = self.ideal.setdefault((sk.provider, sk.model), _Ideal())
        minimum = int(rules.get("min_cacheable_tokens", 0))
        # a prefix under the model's minimum can never be cached: no ideal cache holds it either
        held = ideal.longest_key(req)
        result.raw_ideal_tokens = held[0]
        result.ideal_read_tokens = _at_least(held[0], minimum)
        result.ideal_content_tokens = _at_least(ideal.longest_content(req), minimum)
        ideal.add(req, held)
        result.stream_tokens = _at_least(_stream_tokens(result.previous), minimum)
        result.write_kind = _write_kind(result.usage, result.reusable_tokens, tolerance(rules))
        if req.cache_mode == "gemini_cached":  # the named cache is the whole reusable prefix
            named = self.context_caches.caches.get(sk.extra.get("cache_ref") or "")
            result.ideal_read_tokens = named.tokens if named else 0

    def _context_cache(self, sk: Skeleton, req: RenderedRequest, rules: ModelRules) -> Prediction:
        if req.cache_mode == "gemini_cached":
            return self.context_caches.read(req, sk.id, sk.started_at, sk.extra.get("cache_ref"))
        pred, cache = self.context_caches.create(req, rules, sk.id, sk.started_at, sk.extra.get("cache_name"),
                                                 sk.extra.get("cache_ttl_s"))
        sk.extra["storage_usd"] = storage_usd(cache, rules)
        return pred

    def _usage_only(self, sk: Skeleton, rules: ModelRules) -> RequestResult:
        """No body to simulate: what it could have read is inferred from the log (`analysis.usage_only`, in the
        diagnose stage)."""
        observed = None if self.predict else sk.observed
        usage = observed or Usage()
        streams = self.streams
        if streams is None:
            return RequestResult(sk, rules, usage, observed is not None, None, 0, "usage-only")
        seen = Seen(None, sk.model, None, usage.input_tokens)
        result = RequestResult(sk, rules, usage, observed is not None, None, 0, "usage-only",
                               previous=streams.previous((sk.session, sk.agent), seen))
        seen.item = result
        streams.add((sk.session, sk.agent), seen)
        return result


def _output_tokens(sk: Skeleton) -> int:
    """Output of a predicted request: what the log said (a fix does not change answers), 1 for a keep-alive."""
    if sk.extra.get("keep_alive"):
        return 1
    value = sk.extra.get("output_tokens")
    return value if isinstance(value, int) and value >= 0 else 0


def _at_least(tokens: int, minimum: int) -> int:
    return tokens if tokens >= minimum else 0


def _stream_tokens(prev: RequestResult | None) -> int:
    """Tokens the previous request of the stream left in cache (through its last breakpoint, or all)."""
    if prev is None or prev.sk.request is None:
        return 0
    req = prev.sk.request
    if req.cache_mode != "implicit":
        end = req.breakpoint_indices[-1] + 1 if req.breakpoints else 0
    else:
        end = len(req.blocks)
    return sum(b.tokens for b in req.blocks[:end])


def _write_kind(usage: Usage, ideal: int, tol: int) -> str:
    if not usage.cache_write_tokens:
        return "none"
    if ideal == 0:
        return "extension" if usage.cache_read_tokens else "cold_start"
    return "rebuild" if usage.cache_read_tokens + tol < ideal else "extension"


def start_order(sk: Skeleton) -> tuple[float, int]:
    return sk.started_at, sk.order


def simulate(skeletons: Iterable[Skeleton], store: BlockStore | None = None, sizer: BlockSizer | None = None,
             *, presized: bool = False, ideal: bool = True, predict: bool = False) -> list[RequestResult]:
    """Simulate a whole trace (skeletons in any order: they are replayed by start time), in start order.

    Failed requests (`skeleton.failed_call`) are left out: they reached no cache, so they are neither
    simulated nor given a result to price or diagnose (the report lists them apart).
    sizer: pass one to keep the sizes it settles (`BlockSizer.book_of`), or one holding a `SizeBook`."""
    sim = Simulator(store, sizer, presized=presized, ideal=ideal, predict=predict)
    return [sim.step(sk) for sk in sorted(skeletons, key=start_order) if not sk.failed]


# how often a replay drops the entries no later request can read: a pricing's entries stay those alive
SWEEP_EVERY = 4096


def replay(skeletons: Iterable[Skeleton], store: BlockStore | None = None, ordered: bool = False
           ) -> Iterator[RequestResult]:
    """`simulate` of presized skeletons one result at a time, for a pass that adds the results up and keeps
    none (the what-if's pricing): predicted usage, no ideal cache, and no result holds its stream's previous
    one (that chain kept every result of a session alive as long as its last; only the ideal cache's stage
    reads it). ordered: the skeletons come in start order already (an edited log streamed a part at a time)."""
    replayer = Replayer(store)
    for sk in skeletons if ordered else sorted(skeletons, key=start_order):
        result = replayer.step(sk)
        if result is not None:
            yield result


class Replayer:
    """`replay` given one skeleton at a time, in start order (a pass that takes an edited log as its parts
    come): every `SWEEP_EVERY` skeletons its caches drop the entries no later request can read."""

    def __init__(self, store: BlockStore | None = None) -> None:
        self.sim = Simulator(store, presized=True, ideal=False, predict=True, chained=False)
        self.n = 0  # skeletons given, failed ones included

    def step(self, sk: Skeleton) -> RequestResult | None:
        """Its result; None for a failed request (never simulated)."""
        n, self.n = self.n, self.n + 1
        if sk.failed:
            return None
        if n % SWEEP_EVERY == SWEEP_EVERY - 1:
            self.sim.forget_expired(sk.started_at)
        return self.sim.step(sk)


POLL_EVERY = 1024  # requests a leading simulation steps between two calls of its caller's `now_and_then`


class LeadingSimulation:
    """`simulate` in two parts, for a parse that has the leading share of a trace's skeletons before the rest
    (the split parse, while its second process still reads): the share is stepped at once. That is the
    replay `simulate` makes whenever nothing in the rest starts before the share's last request, as in a
    trace written in time order; otherwise (or when `lead` was never called) `finish` simulates the whole
    trace, from a fresh sizer. `sizer` is the one whose sizes the results carry."""

    def __init__(self, store: BlockStore) -> None:
        self._store = store
        self.sizer = BlockSizer()
        self._sim: Simulator | None = None  # once `lead` has run
        self._results: list[RequestResult] = []
        self._led = 0  # skeletons of the leading share (failed ones included: they have no result)

    def lead(self, leading: list[Skeleton], now_and_then: Callable[[], None] | None = None) -> None:
        """Step the leading share; `now_and_then` is called every `POLL_EVERY` requests (the split parse takes
        its helper's share there as soon as it is ready)."""
        self._sim = Simulator(self._store, self.sizer)
        self._led = len(leading)
        step, results = self._sim.step, []
        self._results = results
        for n, sk in enumerate(sorted(leading, key=start_order)):
            if now_and_then is not None and n % POLL_EVERY == 0:
                now_and_then()
            if not sk.failed:
                results.append(step(sk))

    def finish(self, skeletons: list[Skeleton]) -> list[RequestResult]:
        """All the skeletons, the leading share first (as the parse joined them)."""
        rest = sorted((sk for sk in skeletons[self._led:] if not sk.failed), key=start_order)
        led = self._results
        if self._sim is None or (rest and led and start_order(rest[0]) < start_order(led[-1].sk)):
            self.sizer = BlockSizer()
            return simulate(skeletons, self._store, self.sizer)
        return led + [self._sim.step(sk) for sk in rest]
