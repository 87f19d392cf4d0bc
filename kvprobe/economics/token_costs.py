"""What each token class of one request cost: its price split by the unit prices it was priced at.

One split for every place that shows it (the page's chart in dollars, the `requests` table's dollar
columns): cache reads, cache writes (5-minute and 1-hour), fresh input and output, each at the unit price
of the request's provider, model, day, input size (long-context tiers) and platform (Bedrock, Vertex,
OpenRouter). Where the request's cost was logged rather than computed, the classes keep their shares of it,
so they always add up to the request's cost_usd. None when kvprobe could not price the request.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvprobe.analysis.simulate import RequestResult
    from kvprobe.pricing import PriceBook

CLASSES = ("read", "write_5m", "write_1h", "fresh", "output")


def token_class_usd(r: RequestResult, prices: PriceBook | None) -> dict[str, float] | None:
    """USD per token class of `r` (CLASSES), adding up to r.cost_usd; None when it is unpriced."""
    if prices is None or r.cost_usd is None:
        return None
    u = r.usage
    units = prices.unit_prices(r.sk.provider, r.sk.model, r.sk.started_at, u.input_tokens, r.sk.extra.get("platform"))
    if units is None:
        return None
    tokens = {"read": u.cache_read_tokens, "write_5m": u.cache_write_5m_tokens, "write_1h": u.cache_write_1h_tokens,
              "fresh": max(u.fresh_input_tokens, 0), "output": u.output_tokens}
    usd = {cls: units[cls] * n for cls, n in tokens.items()}
    total = sum(usd.values())
    if total > 0 and abs(total - r.cost_usd) > 1e-12:  # a logged cost: the classes keep their shares of it
        usd = {cls: v * r.cost_usd / total for cls, v in usd.items()}
    return usd
