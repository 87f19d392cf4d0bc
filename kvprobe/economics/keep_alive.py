"""Keep an entry alive through a pause, or let it expire and rebuild: which costs less, from the rules.

A pause longer than an entry's lifetime costs one rebuild: the prefix is written again (write multiplier)
where it would have been read (read multiplier). Keep-alive pings — the prefix sent again with max_tokens 1,
each before the entry expires — cost a read of the prefix plus their uncached tail and one output token
apiece. Pings pay only while they cost less than the rebuild they avoid, so there is a longest pause worth
bridging (the break-even pause); past it the advice is to let the entry expire (or use a longer lifetime,
where the provider offers one: `longer_lifetime` in `providers/`).

All figures are input-token equivalents (fresh input = 1), so no price is needed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvprobe.catalog import ModelRules
from kvprobe.sim.implicit import retention_seconds, ttl_table

MARGIN_S = 30.0  # a ping goes out this long before the entry would expire
OUTPUT_EQUIVALENT = 5.0  # one output token in input equivalents (output is priced ~5x input by most providers)


def entry_lifetime_s(rules: ModelRules) -> float | None:
    """The lifetime of an entry written with the provider's default settings (None: the rules give none)."""
    table = ttl_table(rules)
    if table and rules.get("matching") == "blocks":
        return table.get(str(rules.get("default_ttl", "5m")))
    return retention_seconds(rules) if rules.get("retention_seconds") is not None else None


def _multipliers(rules: ModelRules) -> tuple[float, float]:
    """(write, read) multipliers of an entry written with the default lifetime."""
    writes = rules.get("write_multipliers", {}) or {}
    default = str(rules.get("default_ttl", "5m")) if rules.get("matching") == "blocks" else "implicit"
    write = writes.get(default, writes.get("5m", writes.get("implicit", 1.0)))
    return float(write), float(rules.get("read_multiplier", 1.0))


@dataclass(frozen=True, slots=True)
class KeepAlivePlan:
    """What bridging one pause with pings would cost, against letting the entry expire."""

    pause_s: float
    lifetime_s: float
    interval_s: float  # a ping every this many seconds
    pings: int  # how many the pause needs
    ping_cost: float  # input equivalents per ping
    rebuild_cost: float  # what the expiry costs: the prefix written again instead of read
    break_even_s: float  # pings cost less than the rebuild for pauses shorter than this

    @property
    def needed(self) -> bool:
        return self.pings > 0

    @property
    def pays(self) -> bool:
        return self.needed and self.pings * self.ping_cost < self.rebuild_cost

    @property
    def saving(self) -> float:
        return self.rebuild_cost - self.pings * self.ping_cost

    def to_json(self) -> dict[str, Any]:
        return {"pause_s": round(self.pause_s, 1), "lifetime_s": self.lifetime_s, "interval_s": self.interval_s,
                "pings": self.pings, "ping_cost_input_equivalent_tokens": round(self.ping_cost, 1),
                "rebuild_cost_input_equivalent_tokens": round(self.rebuild_cost, 1),
                "break_even_pause_s": round(self.break_even_s, 1), "pays": self.pays}


def plan(rules: ModelRules, cached_tokens: int, pause_s: float, tail_tokens: int = 0) -> KeepAlivePlan | None:
    """Pings for a pause of `pause_s` after a request that left `cached_tokens` cached (its uncached tail
    `tail_tokens` is sent fresh by every ping). None when the rules give no lifetime to bridge."""
    lifetime = entry_lifetime_s(rules)
    if lifetime is None or lifetime <= MARGIN_S or cached_tokens <= 0:
        return None
    interval = lifetime - MARGIN_S
    # the entry lives `lifetime` after its last use and is gone at exactly that (as in kvprobe.sim); ping k at
    # k*interval keeps it until just before k*interval + lifetime, so a pause needs the first k past it
    pings = math.floor((pause_s - lifetime) / interval) + 1 if pause_s >= lifetime else 0
    write, read = _multipliers(rules)
    ping_cost = read * cached_tokens + tail_tokens + OUTPUT_EQUIVALENT
    rebuild = max(write - read, 0.0) * cached_tokens
    affordable = math.floor(rebuild / ping_cost - 1e-9) if ping_cost > 0 else 0  # pings that still pay
    break_even = lifetime + max(affordable, 0) * interval
    return KeepAlivePlan(pause_s, lifetime, interval, pings, ping_cost, rebuild, break_even)


def longer_lifetime(rules: ModelRules) -> dict[str, Any] | None:
    """The provider's own setting for a longer-lived entry (`longer_lifetime` in providers/), if any:
    {"setting": text to show, "seconds": its lifetime, "write_multiplier": its write price, and for a
    breakpoint cache "ttl": the value a breakpoint's ttl takes, for a prefix cache "retention": the retention a
    request asks for}."""
    value = rules.get("longer_lifetime")
    return value if isinstance(value, dict) and value.get("setting") else None


def pause_advice(rules: ModelRules, cached_tokens: int, pause_s: float, lifetime_s: float | None = None,
                 tail_tokens: int = 0) -> str | None:
    """What pays for one pause after which the entry had expired: keep-alive pings (under their break-even),
    or the provider's longer lifetime (where it covers the pause). None: nothing does — a new start."""
    from kvprobe.wording import duration

    lifetime = lifetime_s if lifetime_s is not None else entry_lifetime_s(rules)
    p = plan(rules, cached_tokens, pause_s, tail_tokens)
    longer = longer_lifetime(rules)
    covers = longer is not None and lifetime is not None and lifetime < float(longer["seconds"]) \
        and pause_s < float(longer["seconds"])  # gone at exactly its lifetime, as every entry
    longer_words = (f"use {longer['setting']}: entries live {duration(float(longer['seconds']))}, long enough for "
                    f"this pause (writes at {float(longer['write_multiplier']):g}× input)") if covers and longer else ""
    if p is not None and p.pays:
        advice = (f"send {p.pings} keep-alive request{'s' if p.pings > 1 else ''} (the same prefix, max_tokens 1) "
                  f"every {duration(p.interval_s)} through pauses like this one: {p.pings * p.ping_cost:,.0f} "
                  f"input-equivalents against {p.rebuild_cost:,.0f} for the rebuild (pings pay for pauses up to "
                  f"{duration(p.break_even_s)})")
        return advice + (f"; or {longer_words}" if covers else "")
    if covers:
        be = f" (they pay up to {duration(p.break_even_s)})" if p is not None else ""
        return f"keep-alive pings would cost more than the rebuild for a {duration(pause_s)} pause{be}; {longer_words}"
    return None
