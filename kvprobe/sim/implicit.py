"""Implicit token-prefix caches (OpenAI automatic caching, DeepSeek context cache, Gemini implicit).

Every processed request stores its whole prefix (block by block, chained cache keys); a later request reads
the longest stored prefix, rounded down to the provider's step (OpenAI 128 tokens, DeepSeek 64-token units),
and only when it reaches the minimum length. Matching is at block granularity here; `diff` adds the partial
block. Writes carry no fee.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvprobe.catalog import ModelRules
from kvprobe.request.model import RenderedRequest
from kvprobe.sim.positions import cumulative_tokens
from kvprobe.sim.result import Evidence, Prediction, below_minimum


@dataclass(slots=True)
class PrefixEntry:
    """A cached prefix: until when it lives, from when it can be read, and the request that wrote it."""

    expires_at: float
    readable_at: float
    writer_id: str


def round_cached(matched: int, rules: ModelRules, total: int) -> int:
    """Tokens a provider reports as cached for a matched prefix of `matched` tokens."""
    minimum = int(rules.get("min_cacheable_tokens", 0))
    step = int(rules.get("cached_token_step", rules.get("unit_tokens")) or 1)  # none: every token
    matched = min(matched, max(total - 1, 0))  # the last token is always computed
    if matched < minimum:
        return 0
    return matched // step * step


def retention_seconds(rules: ModelRules) -> float:
    value = rules.get("retention_seconds", 600)
    if isinstance(value, dict):
        # the retention the rules name, else the shortest (OpenAI's in-memory one when none is named)
        value = value.get(rules.get("default_retention"), min(value.values()))
    return routing_capped(float(value), rules)


def ttl_table(rules: ModelRules, default: dict[str, float] | None = None) -> dict[str, float]:
    """Seconds an entry of each TTL class stays readable, the platform's routing cap applied: what every
    simulator, lifetime and keep-alive reads (once per rules object)."""
    key = ("ttl_table", None if default is None else tuple(default.items()))
    found = rules.derived.get(key)
    if found is None:
        table = rules.get("ttl_seconds")
        table = table if isinstance(table, dict) and table else (default or {})
        found = rules.derived[key] = {ttl: routing_capped(float(s), rules) for ttl, s in table.items()}
    return found


def routing_capped(seconds: float, rules: ModelRules) -> float:
    """An entry's useful life where the platform routes a conversation away after an idle time (OpenRouter's
    sticky routing ends after 10 idle minutes: the next request lands on another provider's cache)."""
    cap = rules.get("sticky_routing_idle_seconds")
    return min(seconds, float(cap)) if isinstance(cap, (int, float)) and not isinstance(cap, bool) else seconds


class PrefixCache:
    def __init__(self) -> None:
        self.entries: dict[int, PrefixEntry] = {}

    def forget_expired(self, now: float) -> None:
        """Drop the entries expired by `now`, for a replay in start order that gathers no evidence: to every
        later request an expired entry is as good as none (the longest live prefix stops at either, and a
        write replaces it with the same readability)."""
        self.entries = {key: entry for key, entry in self.entries.items() if now < entry.expires_at}

    def process(self, req: RenderedRequest, rules: ModelRules, request_id: str, start: float,
                readable_at: float) -> Prediction:
        pred = Prediction()
        if not req.blocks:
            return pred
        cum = cumulative_tokens(req.blocks)
        matched_block = self._longest_live(req, start, pred)
        matched = cum[matched_block] if matched_block is not None else 0
        pred.cache_read_tokens = round_cached(matched, rules, cum[-1])
        minimum = int(rules.get("min_cacheable_tokens", 0))
        if 0 < matched < minimum:  # a stored prefix, too short to be read
            path = req.blocks[matched_block].path  # type: ignore[index]  # something matched: a block did
            pred.evidence.append(below_minimum(path, matched_block, matched, minimum))
        pred.fresh_input_tokens = cum[-1] - pred.cache_read_tokens
        keep = retention_seconds(rules)  # the retention this request asks for, where it asks (catalog.rules_for)
        for block in req.blocks:
            old = self.entries.get(block.cache_key)
            if old is not None and start < old.expires_at:  # a live entry: a shorter retention does not cut it
                self.entries[block.cache_key] = PrefixEntry(max(old.expires_at, start + keep),
                                                            min(old.readable_at, readable_at), request_id)
            else:
                self.entries[block.cache_key] = PrefixEntry(start + keep, readable_at, request_id)
        return pred

    def _longest_live(self, req: RenderedRequest, start: float, pred: Prediction) -> int | None:
        last = None
        for i, block in enumerate(req.blocks):
            entry = self.entries.get(block.cache_key)
            if entry is None:
                break
            if start >= entry.expires_at:
                pred.evidence.append(Evidence("ttl_expired", f"the prefix through {block.path} expired "
                                              f"{start - entry.expires_at:.0f}s before this request started", i,
                                              seconds_past=start - entry.expires_at))
                break
            if start < entry.readable_at:
                pred.evidence.append(Evidence("not_yet_readable", f"the prefix through {block.path} was still "
                                              f"being processed by {entry.writer_id}", i, writer_id=entry.writer_id))
                break
            last = i
        return last
