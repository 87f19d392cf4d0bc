"""Gemini explicit context caching: `cachedContents` created with a TTL, then named by later requests.

A creation is billed as input once (a write at the input price) plus storage per token-hour for its TTL.
A request naming a live cache reads all of its tokens; one naming an expired cache reads nothing (the API
refuses it). Entries are keyed by the cache's resource name, which the creation's response returns.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvprobe.catalog import ModelRules
from kvprobe.request.model import RenderedRequest
from kvprobe.sim.result import Evidence, Prediction


@dataclass(slots=True)
class ContextCache:
    name: str
    tokens: int
    created_at: float
    expires_at: float
    creator: str


def parse_ttl(value: object) -> float | None:
    """Gemini durations: "3600s" or "1.5s"; None when absent or malformed."""
    if isinstance(value, str) and value.endswith("s"):
        try:
            return float(value[:-1])
        except ValueError:
            return None
    return None


class GeminiContextCaches:
    def __init__(self) -> None:
        self.caches: dict[str, ContextCache] = {}

    def create(self, req: RenderedRequest, rules: ModelRules, request_id: str, start: float, name: str | None,
               ttl_s: float | None) -> tuple[Prediction, ContextCache]:
        total = sum(b.tokens for b in req.blocks)
        ttl = ttl_s if ttl_s is not None else float(rules.get("explicit_default_ttl_seconds", 3600))
        cache = ContextCache(name or f"cachedContents/{request_id}", total, start, start + ttl, request_id)
        self.caches[cache.name] = cache
        return Prediction(cache_write_5m_tokens=total), cache

    def read(self, req: RenderedRequest, request_id: str, start: float, name: str | None) -> Prediction:
        own = sum(b.tokens for b in req.blocks)
        cache = self.caches.get(name or "")
        pred = Prediction(fresh_input_tokens=own)
        if cache is None:
            pred.evidence.append(Evidence("unexplained", f"{name} was not created in this trace"))
        elif start >= cache.expires_at:
            pred.evidence.append(Evidence("ttl_expired", f"{name} (created by {cache.creator}) expired "
                                          f"{start - cache.expires_at:.0f}s before this request started",
                                          seconds_past=start - cache.expires_at))
        else:
            pred.cache_read_tokens = cache.tokens
        return pred


def storage_usd(cache: ContextCache, rules: ModelRules) -> float | None:
    """Storage billed for the cache's lifetime (its TTL): tokens x hours x price per million token-hours.
    None when the rules name no storage price: unknown, not free."""
    price = rules.get("storage_usd_per_mtok_hour")
    if price is None:
        return None
    hours = (cache.expires_at - cache.created_at) / 3600
    return cache.tokens * hours * float(price) / 1_000_000
