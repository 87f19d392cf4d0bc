"""Replay skeletons in start order through each provider's cache rules; compare with observed usage.

For every request this yields the prediction, the usage to report (observed when the provider gave it,
predicted otherwise), what an ideal prefix cache could have read, and the diagnoses of any shortfall.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from kvprobe.analysis.diagnosis import Diagnosis, from_provider_reason
from kvprobe.analysis.explain import estimate_noise, explain_miss, from_evidence
from kvprobe.analysis.siblings import diagnose_siblings
from kvprobe.analysis.sizing import BlockSizer
from kvprobe.analysis.skeleton import BlockStore, Skeleton
from kvprobe.analysis.usage_only import UsageOnly
from kvprobe.catalog import ModelRules, rules_for
from kvprobe.request import RenderedRequest
from kvprobe.sim import AnthropicCache, Prediction, PrefixCache, cache_for
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
    """Stateful replay: feed skeletons in start order with `step`."""

    def __init__(self, reread: Callable[[Skeleton], RenderedRequest | None] | None = None,
                 store: BlockStore | None = None, sizer: BlockSizer | None = None) -> None:
        self.caches: dict[str, AnthropicCache | PrefixCache] = {}
        self.context_caches = GeminiContextCaches()
        self.ideal: dict[str, _Ideal] = {}
        self.sizer = sizer or BlockSizer()
        self.store = store or BlockStore()  # the parse pass's store: its token counters are reused
        self.previous: dict[tuple[str, str], RequestResult] = {}
        self.reread = reread
        self.usage_only = UsageOnly()  # requests without bodies: causes from the log's own evidence

    def step(self, sk: Skeleton) -> RequestResult:
        rules = rules_for(sk.provider, sk.model)
        if sk.request is None:
            return self._usage_only(sk, rules)
        req = sk.request
        how = self.sizer.size(sk, self.store.counter(sk.provider, sk.model), self.store.raw)
        if req.cache_mode in ("gemini_create", "gemini_cached"):
            pred = self._context_cache(sk, req, rules)
        else:
            cache_name = f"{sk.provider}/{req.cache_mode}"
            cache = self.caches.setdefault(cache_name, cache_for(sk.provider, req.cache_mode))
            pred = cache.process(req, rules, sk.id, sk.started_at, sk.readable_at)
        ideal = self.ideal.setdefault(sk.provider, _Ideal())
        minimum = int(rules.get("min_cacheable_tokens", 0))
        # a prefix under the model's minimum can never be cached: no ideal cache holds it either
        held = ideal.longest_key(req)
        raw_key = held[0]
        ideal_key, ideal_content = _at_least(raw_key, minimum), _at_least(ideal.longest_content(req), minimum)
        ideal.add(req, held)
        usage = sk.observed or Usage(pred.input_tokens, pred.cache_read_tokens, pred.cache_write_5m_tokens,
                                     pred.cache_write_1h_tokens, _output_tokens(sk))
        result = RequestResult(sk, rules, usage, sk.observed is not None, pred, ideal_key, how,
                               ideal_content_tokens=ideal_content)
        prev = self.previous.get((sk.session, sk.agent))
        result.stream_tokens = _at_least(_stream_tokens(prev), minimum)
        result.write_kind = _write_kind(usage, result.reusable_tokens, tolerance(rules))
        if req.cache_mode == "gemini_cached":  # the named cache is the whole reusable prefix
            named = self.context_caches.caches.get(sk.extra.get("cache_ref") or "")
            result.ideal_read_tokens = named.tokens if named else 0
            result.diagnoses = from_evidence(result) if result.missed_tokens else []
        else:
            result.diagnoses = self._diagnose(result, prev, ideal_content)
        if not result.diagnoses and raw_key > usage.cache_read_tokens and not ideal_key:
            # content was repeated but is too short to cache: say so, though no ideal cache could do better
            result.diagnoses = [d for d in _below_minimum(pred, req)]
        self.previous[(sk.session, sk.agent)] = result
        return result

    def _context_cache(self, sk: Skeleton, req: RenderedRequest, rules: ModelRules) -> Prediction:
        if req.cache_mode == "gemini_cached":
            return self.context_caches.read(req, sk.id, sk.started_at, sk.extra.get("cache_ref"))
        pred, cache = self.context_caches.create(req, rules, sk.id, sk.started_at, sk.extra.get("cache_name"),
                                                 sk.extra.get("cache_ttl_s"))
        sk.extra["storage_usd"] = storage_usd(cache, rules)
        return pred

    def _diagnose(self, result: RequestResult, prev: RequestResult | None, ideal_content: int) -> list[Diagnosis]:
        sk, tol = result.sk, tolerance(result.rules)
        reported = [from_provider_reason(sk.observed.miss_reason, sk.extra.get("reported_missed_tokens"))] \
            if sk.observed and sk.observed.miss_reason else []
        short = result.usage.cache_read_tokens + tol < result.reusable_tokens
        mismatch = result.observed and result.predicted is not None and \
            abs(result.usage.cache_read_tokens - result.predicted.cache_read_tokens) > tol
        if not short and not mismatch and not reported:
            return []
        found = explain_miss(result, prev, ideal_content, self.reread) if (short or mismatch) else []
        missed = result.missed_tokens
        for d in reported + found:
            d.missed_tokens = missed
        # beside a reported cause, kvprobe's own finding stays when it says more (the exact block changed)
        return reported + [d for d in found if not reported or d.kind != reported[0].kind or d.path]

    def _usage_only(self, sk: Skeleton, rules: ModelRules) -> RequestResult:
        result = RequestResult(sk, rules, sk.observed or Usage(), sk.observed is not None, None, 0, "usage-only")
        self.usage_only.step(result)  # its ideal read, write kind and diagnoses
        self.previous[(sk.session, sk.agent)] = result
        return result


def _below_minimum(pred: Prediction, req: RenderedRequest) -> list[Diagnosis]:
    return [Diagnosis(e.kind, e.detail, path=req.blocks[e.block_index].path if e.block_index is not None else None,
                      prefix_tokens=e.prefix_tokens, minimum_tokens=e.minimum_tokens)
            for e in pred.evidence if e.kind == "below_minimum"][:1]


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


def _start_order(sk: Skeleton) -> tuple[float, int]:
    return sk.started_at, sk.order


def simulate(skeletons: Iterable[Skeleton], reread: Callable[[Skeleton], RenderedRequest | None] | None = None,
             store: BlockStore | None = None, sizer: BlockSizer | None = None) -> list[RequestResult]:
    """Simulate a whole trace (skeletons in any order: they are replayed by start time).

    sizer: pass one to keep the sizes it settles (`BlockSizer.book_of`), or one holding a `SizeBook`."""
    sim = Simulator(reread, store, sizer)
    return _finished([sim.step(sk) for sk in sorted(skeletons, key=_start_order)], sim)


def _finished(results: list[RequestResult], sim: Simulator) -> list[RequestResult]:
    diagnose_siblings(results, estimate_noise)
    sim.usage_only.revisit(results)  # with every cache level the whole trace shows
    return results


class LeadingSimulation:
    """`simulate` in two parts, for a parse that has the leading share of a trace's skeletons before the rest
    (the split parse, while its second process still reads): the share is stepped at once. That is the
    replay `simulate` makes whenever nothing in the rest starts before the share's last request, as in a
    trace written in time order; otherwise (or when `lead` was never called) `finish` simulates the whole
    trace, from a fresh sizer. `sizer` is the one whose sizes the results carry."""

    def __init__(self, reread_factory: Callable[[], Callable[[Skeleton], RenderedRequest | None] | None],
                 store: BlockStore) -> None:
        self._reread_factory, self._store = reread_factory, store
        self.sizer = BlockSizer()
        self._sim: Simulator | None = None  # once `lead` has run
        self._results: list[RequestResult] = []

    def lead(self, leading: list[Skeleton]) -> None:
        self._sim = Simulator(self._reread_factory(), self._store, self.sizer)
        self._results = [self._sim.step(sk) for sk in sorted(leading, key=_start_order)]

    def finish(self, skeletons: list[Skeleton]) -> list[RequestResult]:
        """All the skeletons, the leading share first (as the parse joined them)."""
        rest = sorted(skeletons[len(self._results):], key=_start_order)
        led = self._results
        if self._sim is None or (rest and led and _start_order(rest[0]) < _start_order(led[-1].sk)):
            self.sizer = BlockSizer()
            return simulate(skeletons, self._reread_factory(), self._store, self.sizer)
        return _finished(led + [self._sim.step(sk) for sk in rest], self._sim)
