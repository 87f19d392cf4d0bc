"""What a probe run supports, from the usage the provider returned, and nothing more."""
from __future__ import annotations

from dataclasses import dataclass, field

from kvprobe.probe.client import Outcome
from kvprobe.usage import Usage, normalize_usage


@dataclass(slots=True)
class Verdict:
    confirmed: bool  # request 2 read from cache
    supports: list[str] = field(default_factory=list)
    not_shown: list[str] = field(default_factory=list)
    advice: str | None = None


def usage_of(provider: str, outcome: Outcome) -> Usage | None:
    return normalize_usage("anthropic" if provider == "local" else provider, outcome.usage)


def judge(provider: str, outcomes: list[Outcome], minimum: int | None) -> Verdict:
    usages = [usage_of(provider, o) for o in outcomes]
    reads = [u.cache_read_tokens if u else None for u in usages]
    confirmed = len(reads) > 1 and bool(reads[1])
    v = Verdict(confirmed)
    if len(reads) > 1 and not confirmed:
        v.advice = ("request 2 repeated request 1 exactly but read nothing from cache. Check: the document's "
                    f"length against the model's minimum cacheable length ({minimum or 'unknown'} tokens), that the "
                    "cache marker reached the provider, and that less than the TTL (5 minutes) passed between "
                    "the two requests")
        return v
    if confirmed:
        v.supports.append(f"reuse of an identical prefix: request 2 read {reads[1]:,} tokens from cache")
    if len(reads) > 2 and reads[2]:
        v.supports.append(f"reuse despite a new final question: request 3 read {reads[2]:,} tokens "
                          "(the cache is keyed on the prefix, not the whole request)")
    if len(reads) > 3 and reads[3] is not None and reads[2] and reads[3] < reads[2]:
        v.supports.append(f"a changed beginning breaks reuse: request 4 read {reads[3]:,} tokens where request 3 "
                          f"read {reads[2]:,}, after only the version marker at the start changed")
    v.not_shown += ["how long entries live (TTL) or when they are evicted", "behaviour under concurrency",
                    "prices beyond this run's usage"]
    return v
