"""Which requests a fix can change: those that share cache entries with the requests it edits.

Two requests interact only through a cache entry both touch. Entries are keyed by chained block keys, so two
requests that share any entry share their first block's key (in the same provider cache); and an entry
outlives its last use by at most the longest lifetime the provider's rules allow. A *segment* is a run of
requests with one first-block key whose lifetimes overlap: nothing outside a segment can read what it wrote.
Sessions that share a system prompt within an hour are one segment; independent sessions are not.

A fix is priced by re-simulating only the segments its edited (or added) requests overlap, so the what-if
costs time linear in the trace instead of one whole re-simulation per candidate.
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from kvprobe.analysis.skeleton import Skeleton
from kvprobe.catalog import ModelRules

DEFAULT_LIFE_S = 3600.0  # when no rule gives a lifetime (no provider keeps an entry longer without a fee)


def entry_life(rules: ModelRules) -> float:
    """The longest an entry written under these rules can stay readable after its last use (seconds)."""
    values: list[float] = []
    for name in ("ttl_seconds", "retention_seconds", "explicit_default_ttl_seconds"):
        value = rules.get(name)
        items = value.values() if isinstance(value, dict) else [value]
        values += [float(v) for v in items if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return max(values, default=DEFAULT_LIFE_S)


def cache_key_of(sk: Skeleton) -> Hashable | None:
    """What a request's cache entries are keyed under, at its coarsest (None: it touches no cache)."""
    req = sk.request
    if req is None or not req.blocks:
        return None
    if req.cache_mode == "gemini_create":
        return ("gemini-named", sk.extra.get("cache_name") or f"cachedContents/{sk.id}")
    if req.cache_mode == "gemini_cached":
        return ("gemini-named", sk.extra.get("cache_ref"))
    return (sk.provider, req.cache_mode, req.blocks[0].cache_key)


def _life(sk: Skeleton, rules: ModelRules) -> float:
    return math.inf if sk.request is not None and sk.request.cache_mode.startswith("gemini_") else entry_life(rules)


@dataclass(slots=True)
class Segment:
    key: Hashable
    lo: float  # first start
    hi: float  # last start + lifetime: nothing it wrote is readable after this
    ids: list[str] = field(default_factory=list)

    def overlaps(self, lo: float, hi: float) -> bool:
        return lo <= self.hi and self.lo <= hi


@dataclass(slots=True)
class Segments:
    segments: list[Segment]
    of_id: dict[str, int]  # request id -> its segment index (requests touching no cache have none)
    by_key: dict[Hashable, list[int]]

    def touched(self, sk: Skeleton, rules: ModelRules) -> set[int]:
        """Segments a (new or edited) request could read from or write for."""
        key = cache_key_of(sk)
        if key is None:
            return set()
        lo, hi = sk.started_at, sk.started_at + _life(sk, rules)
        return {i for i in self.by_key.get(key, ()) if self.segments[i].overlaps(lo, hi)}


def segment(sks: Iterable[Skeleton], rules_of) -> Segments:
    """Split requests into segments: same first-block key, lifetimes chained without a gap."""
    by_key: dict[Hashable, list[Skeleton]] = {}
    for sk in sks:
        key = cache_key_of(sk)
        if key is not None:
            by_key.setdefault(key, []).append(sk)
    segments: list[Segment] = []
    of_id: dict[str, int] = {}
    index: dict[Hashable, list[int]] = {}
    for key, group in by_key.items():
        group.sort(key=lambda s: s.started_at)
        current: Segment | None = None
        for sk in group:
            end = sk.started_at + _life(sk, rules_of(sk))
            if current is None or sk.started_at > current.hi:
                current = Segment(key, sk.started_at, end)
                index.setdefault(key, []).append(len(segments))
                segments.append(current)
            current.hi = max(current.hi, end)
            current.ids.append(sk.id)
            of_id[sk.id] = len(segments) - 1
    return Segments(segments, of_id, index)
