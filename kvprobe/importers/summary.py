"""`kvprobe usage`: tokens by class, token hit ratio and cost of imported logs, by day/session/agent/model.

Pricing a million requests one by one through genai-prices costs ~0.4 ms each; prices are linear inside a
long-context tier, so requests are summed per (provider, model, day, tier) and each group is priced once
from per-token rates read off the dataset (cliff tiers: the request's total input picks the tier).
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

from kvprobe.pricing import PriceBook
from kvprobe.trace import TraceRecord
from kvprobe.usage import Usage, normalize_usage

GROUPINGS = ("day", "session", "agent", "model")


@dataclass(slots=True)
class Totals:
    requests: int = 0
    usage: Usage = field(default_factory=Usage)  # tokens by class, summed
    cost_usd: float = 0.0
    unpriced_requests: int = 0  # model not in the price dataset
    errors: int = 0

    def add(self, u: Usage) -> None:
        self.requests += 1
        self.usage = self.usage + u

    @property
    def token_hit_ratio(self) -> float | None:
        """Σ cache reads ÷ Σ all input tokens (never an average of per-request ratios)."""
        u = self.usage
        return u.cache_read_tokens / u.input_tokens if u.input_tokens else None

    def to_json(self) -> dict[str, Any]:
        ratio, u = self.token_hit_ratio, self.usage
        return {"requests": self.requests, "input_tokens": u.input_tokens,
                "cache_read_tokens": u.cache_read_tokens, "cache_write_tokens": u.cache_write_tokens,
                "cache_write_5m_tokens": u.cache_write_5m_tokens,
                "cache_write_1h_tokens": u.cache_write_1h_tokens,
                "fresh_input_tokens": u.fresh_input_tokens, "output_tokens": u.output_tokens,
                "token_hit_ratio": round(ratio, 4) if ratio is not None else None,
                "cost_usd": round(self.cost_usd, 6), "unpriced_requests": self.unpriced_requests,
                "errors": self.errors}


@dataclass(slots=True)
class _Group:
    """Requests sharing provider, model, day and price tier: summed per table row, then priced once."""

    members: list[tuple[str, ...]] = field(default_factory=list)  # per-request row keys, in order
    member_usage: list[tuple[int, int, int, int, int]] = field(default_factory=list)


class GroupPricer:
    """Per-token USD rates per (provider, model, day, tier), from the shared PriceBook."""

    def __init__(self, book: PriceBook) -> None:
        self.book = book

    def tier_starts(self, provider: str | None, model: str | None, day: int | None) -> tuple[int, ...]:
        if provider == "local" or (model and model in self.book.overrides) or not model:
            return ()
        return tuple(self.book.tier_starts(provider, model, day) or ())

    def rates(self, provider: str | None, model: str | None, day: int | None, tier: int) -> tuple[float, ...] | None:
        """USD per token for fresh input, cache read, 5m write, 1h write, output."""
        starts = self.tier_starts(provider, model, day)
        n = (starts[tier - 1] + 1) if tier > 0 else 1  # a total input inside this tier
        units = self.book.unit_prices(provider, model, day * 86400.0 if day is not None else None, n)
        if units is None:
            return None
        return (units["fresh"], units["read"], units["write_5m"], units["write_1h"], units["output"])


@dataclass(slots=True)
class UsageSummary:
    totals: Totals = field(default_factory=Totals)
    by: dict[str, dict[str, Totals]] = field(default_factory=lambda: {g: {} for g in GROUPINGS})
    first_at: float | None = None
    last_at: float | None = None
    unknown_models: set[str] = field(default_factory=set)
    without_usage: int = 0  # records with no usage at all (failed calls): counted, not summed

    def rows(self, grouping: str) -> list[tuple[str, Totals]]:
        items = self.by[grouping].items()
        if grouping == "day":
            return sorted(items)
        return sorted(items, key=lambda kv: (-kv[1].cost_usd, -kv[1].usage.input_tokens, kv[0]))

    def to_json(self) -> dict[str, Any]:
        key_name = {"day": "day", "session": "session", "agent": "agent", "model": "model"}
        out: dict[str, Any] = {"totals": self.totals.to_json()}
        for g in GROUPINGS:
            out[f"by_{g}"] = [{key_name[g]: k, **t.to_json()} for k, t in self.rows(g)]
        out["unknown_models"] = sorted(self.unknown_models)
        out["records_without_usage"] = self.without_usage
        return out


def _day(ts: float | None, tz: dt.tzinfo) -> str:
    if ts is None:
        return "unknown"
    return dt.datetime.fromtimestamp(ts, tz).date().isoformat()


def _in_window(when: float | None, since: float | None, until: float | None) -> bool:
    if since is None and until is None:
        return True
    return when is not None and (since is None or when >= since) and (until is None or when < until)


def resolve_tz(name: str | None) -> dt.tzinfo:
    if not name or name.upper() == "UTC":
        return dt.timezone.utc
    if name == "local":
        return dt.datetime.now().astimezone().tzinfo or dt.timezone.utc
    return ZoneInfo(name)


def summarize(records: Iterable[TraceRecord], *, book: PriceBook | None = None, tz: dt.tzinfo = dt.timezone.utc,
              since: float | None = None, until: float | None = None) -> UsageSummary:
    """Aggregate usage by day, session, agent and model; price each (provider, model, day, tier) group once."""
    book = book or PriceBook()
    pricer = GroupPricer(book)
    summary = UsageSummary()
    groups: dict[tuple, _Group] = {}
    starts_cache: dict[tuple, tuple[int, ...]] = {}
    for record in records:
        when = record.started_at if record.started_at is not None else record.finished_at
        if not _in_window(when, since, until):
            continue
        u = normalize_usage(record.provider, record.usage)
        if u is None:
            summary.without_usage += 1
            continue
        model = record.model
        keys = (_day(when, tz), record.session or "(none)", record.agent or "(none)", model or "(unknown)")
        for grouping, key in zip(GROUPINGS, keys):
            bucket = summary.by[grouping].get(key)
            if bucket is None:
                bucket = summary.by[grouping][key] = Totals()
            bucket.add(u)
            bucket.errors += record.error is not None
        summary.totals.add(u)
        summary.totals.errors += record.error is not None
        if when is not None:
            summary.first_at = when if summary.first_at is None else min(summary.first_at, when)
            summary.last_at = when if summary.last_at is None else max(summary.last_at, when)
        uday = int(when // 86400) if when is not None else None
        skey = (record.provider, model, uday)
        starts = starts_cache.get(skey)
        if starts is None:
            starts = starts_cache[skey] = pricer.tier_starts(record.provider, model, uday)
        tier = sum(1 for s in starts if u.input_tokens > s)
        group = groups.get(skey + (tier,))
        if group is None:
            group = groups[skey + (tier,)] = _Group()
        vec = (u.fresh_input_tokens, u.cache_read_tokens, u.cache_write_5m_tokens, u.cache_write_1h_tokens,
               u.output_tokens)
        group.members.append(keys)
        group.member_usage.append(vec)
    _price(groups, pricer, summary)
    summary.unknown_models = set(book.unknown_models)
    return summary


def _price(groups: dict[tuple, _Group], pricer: GroupPricer, summary: UsageSummary) -> None:
    for (provider, model, day, tier), group in groups.items():
        rates = pricer.rates(provider, model, day, tier)
        # Sum per row key first, then price each row once: costs stay linear and exact within the tier.
        per_row: dict[tuple[str, ...], list[int]] = {}
        for keys, vec in zip(group.members, group.member_usage):
            acc = per_row.get(keys)
            if acc is None:
                per_row[keys] = list(vec) + [1]
            else:
                for i in range(5):
                    acc[i] += vec[i]
                acc[5] += 1
        for keys, acc in per_row.items():
            cost = sum(r * n for r, n in zip(rates, acc[:5])) if rates is not None else None
            for grouping, key in zip(GROUPINGS, keys):
                bucket = summary.by[grouping][key]
                if cost is None:
                    bucket.unpriced_requests += acc[5]
                else:
                    bucket.cost_usd += cost
            if cost is None:
                summary.totals.unpriced_requests += acc[5]
            else:
                summary.totals.cost_usd += cost
