"""Price each simulated request: USD (genai-prices) and input-token equivalents (provider multipliers)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kvprobe.analysis.simulate import RequestResult
from kvprobe.catalog import ModelRules
from kvprobe.pricing import PriceBook, multipliers
from kvprobe.usage import Usage


def input_equivalent(usage: Usage, rules: ModelRules) -> float:
    """fresh x 1 + 5m writes x 1.25 + 1h writes x 2 + reads x read multiplier (from `providers/`)."""
    w5m, w1h, read = multipliers(rules)
    return (usage.fresh_input_tokens + usage.cache_write_5m_tokens * w5m + usage.cache_write_1h_tokens * w1h
            + usage.cache_read_tokens * read)


def with_reads(usage: Usage, read: int) -> Usage:
    """The same request had it read `read` tokens: extra reads come out of its writes first, then fresh."""
    extra = max(read - usage.cache_read_tokens, 0)
    from_1h = min(extra, usage.cache_write_1h_tokens)
    from_5m = min(extra - from_1h, usage.cache_write_5m_tokens)
    return Usage(usage.input_tokens, usage.cache_read_tokens + extra, usage.cache_write_5m_tokens - from_5m,
                 usage.cache_write_1h_tokens - from_1h, usage.output_tokens)


def price_results(results: list[RequestResult], book: PriceBook) -> None:
    for r in results:
        price_result(r, book)


def price_result(r: RequestResult, book: PriceBook) -> None:
    cost = book.cost(r.sk.provider, r.sk.model, r.usage, r.sk.started_at, r.sk.extra.get("platform"))
    r.cost_usd, r.cost_source = cost.usd, cost.source
    if "storage_usd" in r.sk.extra and r.cost_usd is not None:  # Gemini explicit caches bill storage
        storage = r.sk.extra["storage_usd"]  # per token-hour; None: no storage price, so the cost is unknown
        r.cost_usd = None if storage is None else r.cost_usd + storage
    r.input_equivalent = input_equivalent(r.usage, r.rules)


@dataclass(slots=True)
class Tally:
    """Priced results added up as they come, none kept: the total and each session's (input equivalents,
    USD; USD None once any request's price is unknown), each summed in the order given."""

    input_equivalent: float = 0.0
    usd: float | None = 0.0
    sessions: dict[str, tuple[float, float | None]] = field(default_factory=dict)


def tally(results: Iterable[RequestResult]) -> Tally:
    return tally_rows((r.sk.session, r.input_equivalent, r.cost_usd) for r in results)


def tally_rows(rows: Iterable[tuple[str, float, float | None]]) -> Tally:
    """`tally` of (session, input equivalents, USD) rows: what a streamed pricing keeps of each result."""
    out = Tally()
    sessions = out.sessions
    for session, ie, usd in rows:
        out.input_equivalent += ie
        out.usd = None if out.usd is None or usd is None else out.usd + usd
        was = sessions.get(session)
        if was is None:
            sessions[session] = (ie, usd)
        else:
            sessions[session] = (was[0] + ie, None if was[1] is None or usd is None else was[1] + usd)
    return out


def miss_cost(r: RequestResult, book: PriceBook) -> tuple[float, float | None]:
    """(input equivalents, USD) this request paid above what an ideal cache would have charged."""
    if r.missed_tokens <= 0:
        return 0.0, 0.0
    ideal = with_reads(r.usage, r.usage.cache_read_tokens + r.missed_tokens)
    ie = r.input_equivalent - input_equivalent(ideal, r.rules)
    ideal_cost = book.cost(r.sk.provider, r.sk.model, ideal, r.sk.started_at, r.sk.extra.get("platform")).usd
    usd = None if r.cost_usd is None or ideal_cost is None else r.cost_usd - ideal_cost
    return ie, usd
