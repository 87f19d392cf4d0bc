"""Advice in the knobs of the agent that wrote the log (kvprobe.agents), priced on the log where it can be.

A diagnosis made on an agent's log (Claude Code, Codex, Gemini CLI, ...) gets the agent's advice for its cause
(`agents.advice_keys`): its `advice` becomes the agent's words, and the API advice it had moves to
`api_advice` (what an SDK user would do). For an expiry, where the agent's settings choose a longer lifetime,
the price of choosing it is worked out on this log (`LifetimeTrade`): every 5m write written at the longer
lifetime's price instead, against the rebuilds after pauses it would have spanned, which become reads.

Where the log holds no request bodies, fixes cannot be simulated: `no_bodies_note` says so and how to capture
them (per agent: `capture` / `capture_note` of its profile), in place of "none pays for itself"; every output
takes it from `Report.fixes_note`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvprobe.agents import AgentProfile, advice_keys, profile_for
from kvprobe.analysis.diagnosis import ADVICE, Diagnosis
from kvprobe.analysis.simulate import RequestResult
from kvprobe.analysis.usage_only import CACHING_OFF
from kvprobe.economics.bill_words import NO_BODIES
from kvprobe.economics.keep_alive import entry_lifetime_s
from kvprobe.pricing import PriceBook, multipliers
from kvprobe.wording import duration, plural, round_usd

MAIN, SUBAGENTS = "main", "subagents"


@dataclass(slots=True)
class LifetimeTrade:
    """What the agent's longer-lifetime setting would have cost and saved on this log, for one scope (the
    main conversation or the subagents)."""

    agent: str
    scope: str
    setting: str
    seconds: float
    written_tokens: int = 0  # 5m writes, each priced at the longer lifetime's write price instead
    rebuilds: int = 0  # expiries after pauses the longer lifetime spans: reads instead of writes
    rebuilt_tokens: int = 0
    extra_ie: float = 0.0  # input-equivalents the dearer writes add
    saved_ie: float = 0.0  # input-equivalents the avoided rebuilds save
    extra_usd: float | None = 0.0  # None: a request of the scope has no price
    saved_usd: float | None = 0.0

    @property
    def net_ie(self) -> float:
        return self.saved_ie - self.extra_ie

    @property
    def net_usd(self) -> float | None:
        return None if self.extra_usd is None or self.saved_usd is None else self.saved_usd - self.extra_usd

    def words(self) -> str:
        """One sentence: what the setting adds, what it saves, and the net, on this log."""
        usd = self.net_usd is not None
        extra = _amount(self.extra_usd, self.extra_ie, usd)
        saved = _amount(self.saved_usd, self.saved_ie, usd)
        net = self.net_usd if usd else self.net_ie
        who = "the main conversation" if self.scope == MAIN else "subagents"
        span = lifetime_words(self.seconds)
        head = (f"on this log ({who}) the {span} price on its {self.written_tokens:,} 5m-written tokens adds "
                f"{extra}, and it spares {plural(self.rebuilds, 'rebuild')} "
                f"({self.rebuilt_tokens:,} tokens, after pauses under {span}), saving {saved}: ")
        if net > 0:
            return head + f"it saves {_amount(net, net, usd)} net"
        return head + f"it costs {_amount(-net, -net, usd)} more than it saves, so it does not pay here"

    def to_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "scope": self.scope, "setting": self.setting, "lifetime_s": self.seconds,
                "written_tokens": self.written_tokens, "rebuilds": self.rebuilds,
                "rebuilt_tokens": self.rebuilt_tokens, "extra_input_equivalent_tokens": round(self.extra_ie, 1),
                "saved_input_equivalent_tokens": round(self.saved_ie, 1),
                "net_input_equivalent_tokens": round(self.net_ie, 1),
                "extra_usd": round_usd(self.extra_usd), "saved_usd": round_usd(self.saved_usd), "net_usd": round_usd(self.net_usd)}


def _amount(usd_value: float | None, ie: float, usd: bool) -> str:
    return f"${usd_value:,.2f}" if usd and usd_value is not None else f"{ie:,.0f} input-equivalents"


def advise(results: list[RequestResult], prices: PriceBook) -> list[LifetimeTrade]:
    """Put each agent-log diagnosis's advice in its agent's knobs; the lifetime trades priced on the way."""
    by_agent: dict[str, tuple[AgentProfile, list[RequestResult]]] = {}
    for r in results:
        profile = profile_for(r.sk.extra)
        if profile is not None:
            by_agent.setdefault(profile.name, (profile, []))[1].append(r)
    trades: list[LifetimeTrade] = []
    for profile, rs in by_agent.values():
        found = {t.scope: t for t in _trades(profile, rs, prices)}
        trades.extend(found.values())
        for r in rs:
            for d in r.diagnoses:
                _advise_one(d, r, profile, found.get(_scope(r)))
    return trades


def advise_one(r: RequestResult) -> None:
    """One request's diagnoses in its agent's knobs, as `watch` sees them: the longer lifetime is named where
    it spans the pause, but not priced (that takes the whole log: `advise`)."""
    profile = profile_for(r.sk.extra)
    if profile is not None:
        for d in r.diagnoses:
            _advise_one(d, r, profile, None)


# how the importers name a subagent's stream (Claude Code's agent-<id> and inline sidechains, the others'
# subagent-<id>); any other name is a main conversation (a captured trace names its agent as `--agent` said)
_SUBAGENT_PREFIXES = ("agent-", "sidechain", "subagent")


def _scope(r: RequestResult) -> str:
    agent = r.sk.agent or "main"
    return SUBAGENTS if agent.startswith(_SUBAGENT_PREFIXES) else MAIN


def _advise_one(d: Diagnosis, r: RequestResult, profile: AgentProfile, trade: LifetimeTrade | None) -> None:
    keys = advice_keys(d.kind, d.param, d.path, d.triggers, r.sk.extra.get("platform"))
    if r.sk.extra.get("cache_requested") == CACHING_OFF:  # the log says caching was off: that setting first
        keys.insert(0, "caching_off")
    found = profile.advise(keys)
    if found is None:
        return
    d.api_advice = d.advice or ADVICE.get(d.kind)
    d.agent = profile.name
    text = found.text
    if d.kind == "ttl_expired" and trade is not None:
        text = _lifetime_words(d, r, profile, trade, text)
    d.advice = text


def _lifetime_words(d: Diagnosis, r: RequestResult, profile: AgentProfile, trade: LifetimeTrade, text: str) -> str:
    """The longer lifetime's setting where it spans this pause, with its price on this log: first where it pays
    here, else after the agent's own advice, saying that it does not. Not where the request's stream already
    writes at the longer lifetime: its entry outlived that, and the setting is in force."""
    if _on_longer(r):
        return text
    gap = _pause(d, r)
    if gap is None or gap > trade.seconds:
        return text
    missing = [name for name in profile.missing_settings(r.sk.extra.get("client_version")) if name in trade.setting]
    older = (f" (this log's {profile.name} {r.sk.extra.get('client_version')} predates "
             f"{', '.join(missing)}: upgrade for {'them' if len(missing) > 1 else 'it'})") if missing else ""
    span = lifetime_words(trade.seconds)
    if trade.net_ie > 0 and (trade.net_usd is None or trade.net_usd > 0):
        return (f"use {trade.setting}{older}: entries then live {span}, long enough for this {duration(gap)} pause; "
                f"{trade.words()}")
    return (f"{text}. Setting {trade.setting}{older} would make entries live {span}, long enough for this "
            f"{duration(gap)} pause, but {trade.words()}")


def lifetime_words(seconds: float) -> str:
    """A lifetime as a person says it: "1 hour", "30 minutes", else the short duration."""
    if seconds % 3600 == 0:
        return f"{seconds / 3600:.0f} hour" + ("s" if seconds > 3600 else "")
    if seconds % 60 == 0 and seconds < 3600:
        return f"{seconds / 60:.0f} minutes"
    return duration(seconds)


def _on_longer(r: RequestResult) -> bool:
    """The request writes its entries at the 1 hour lifetime only: the log's own writes chose it (the lifetime
    its expiry was diagnosed with, analysis.usage_only)."""
    u = r.usage
    return u.cache_write_1h_tokens > 0 and not u.cache_write_5m_tokens


def _pause(d: Diagnosis, r: RequestResult) -> float | None:
    lifetime = entry_lifetime_s(r.rules)
    if d.seconds_past is None or lifetime is None:
        return None
    return d.seconds_past + lifetime


def _trades(profile: AgentProfile, rs: list[RequestResult], prices: PriceBook) -> list[LifetimeTrade]:
    longer = profile.longer_lifetime
    if longer is None:
        return []
    settings = {MAIN: longer.main, SUBAGENTS: longer.subagents or longer.main}
    trades: dict[str, LifetimeTrade] = {}
    for r in rs:
        u = r.usage
        if not u.cache_write_5m_tokens or not _has_longer(r):
            continue
        scope = _scope(r)
        t = trades.get(scope)
        if t is None:
            t = trades[scope] = LifetimeTrade(profile.name, scope, settings[scope], longer.seconds)
        _add(t, r, prices)
    return list(trades.values())


def _has_longer(r: RequestResult) -> bool:
    """Whether the provider offers the lifetime (a 1h breakpoint TTL) the agent's setting asks for."""
    table = r.rules.get("ttl_seconds")
    return isinstance(table, dict) and "1h" in table


def _add(t: LifetimeTrade, r: RequestResult, prices: PriceBook) -> None:
    """One request's share: its 5m writes at the longer lifetime's write price, and the rebuild it spares read
    instead (cost is linear in each token class, so both are differences of unit prices)."""
    u = r.usage
    d = r.diagnoses[0] if r.diagnoses else None
    gap = _pause(d, r) if d is not None and d.kind == "ttl_expired" else None
    written = u.cache_write_5m_tokens
    avoided = min(r.missed_tokens, written) if gap is not None and gap <= t.seconds else 0
    t.written_tokens += written
    if avoided:
        t.rebuilds += 1
        t.rebuilt_tokens += avoided
    w5m, w1h, read = multipliers(r.rules)
    t.extra_ie += written * (w1h - w5m)
    t.saved_ie += avoided * (w1h - read)
    if t.extra_usd is None or t.saved_usd is None:
        return
    unit = prices.unit_prices(r.sk.provider, r.sk.model, r.sk.started_at, u.input_tokens,
                              r.sk.extra.get("platform"))
    if unit is None:  # a request of the scope has no price: the dollars are unknown, not $0
        t.extra_usd = t.saved_usd = None
        return
    t.extra_usd += written * (unit["write_1h"] - unit["write_5m"])
    t.saved_usd += avoided * (unit["write_1h"] - unit["read"])


UNCACHED_SHARE = 0.5  # of a model's requests over its minimum that cached nothing: caching looks switched off
UNCACHED_MIN_REQUESTS = 3  # fewer say nothing: a cold start or two is no pattern


def uncached_notes(results: list[RequestResult]) -> list[str]:
    """Agent logs whose requests, long enough to cache, read and wrote nothing: no miss (nothing was cached to
    miss), but a bill paid at the full input price. Where the log says what caching each request asked for
    (`extra["cache_requested"]`), it says why: caching was off (the agent's `caching_off` advice names the
    setting), or it was asked for and the requests went through an endpoint that cached nothing (a gateway or
    proxy: `uncached_routed`); where it says nothing, most such requests of a model mean caching looks
    switched off (`uncached`)."""
    over: dict[tuple[str, str | None], int] = {}  # (agent, model) -> its requests long enough to cache
    counts: dict[tuple[str, str | None, str], list] = {}  # (agent, model, why) -> [profile, uncached, tokens]
    for r in results:
        profile = _agent_of_cacheable(r)
        if profile is None:
            continue
        over[profile.name, r.sk.model] = over.get((profile.name, r.sk.model), 0) + 1
        why = _why_uncached(r.sk.extra)
        if why is None or why not in profile.advice or _cached_any(r):
            continue
        entry = counts.setdefault((profile.name, r.sk.model, why), [profile, 0, 0])
        entry[1] += 1
        entry[2] += r.usage.input_tokens
    notes = []
    for (name, model, why), (profile, uncached, tokens) in counts.items():
        of = over[name, model]
        said = why == "caching_off"  # the log says so: one request is enough
        if said or (uncached >= UNCACHED_MIN_REQUESTS and uncached >= UNCACHED_SHARE * of):
            notes.append(f"{uncached:,} of {of:,} {name} requests to {model or 'an unnamed model'} "
                         f"({tokens:,} input tokens), each long enough to cache, {_UNCACHED_WORDS[why]}: "
                         f"{profile.advice[why].text}")
    return notes


_UNCACHED_WORDS = {"caching_off": "were sent with prompt caching off (the log says so) and read and wrote no cache",
                   "uncached_routed": "asked for caching (the log says so) but read and wrote no cache",
                   "uncached": "read and wrote no cache"}
# the routes (`extra["route"]`) that reach the provider through someone else's endpoint: a gateway or proxy
_PROXIED_ROUTES = ("customEndpoint", "gateway")


def caching_off_counted(r: RequestResult) -> bool:
    """A request the caching-off note counts (and the bill's first line with it): its log says caching was off,
    its agent names the setting that does it, it was long enough to cache, and it read and wrote nothing."""
    if r.sk.extra.get("cache_requested") != CACHING_OFF or _cached_any(r):
        return False
    profile = _agent_of_cacheable(r)
    return profile is not None and "caching_off" in profile.advice


def _agent_of_cacheable(r: RequestResult) -> AgentProfile | None:
    """The profile of the agent that wrote a request long enough to cache (its model's minimum); None else."""
    minimum = r.rules.get("min_cacheable_tokens")
    if not isinstance(minimum, int) or r.usage.input_tokens < minimum:
        return None
    return profile_for(r.sk.extra)


def _cached_any(r: RequestResult) -> bool:
    return bool(r.usage.cache_read_tokens or r.usage.cache_write_tokens)


def _why_uncached(extra: dict[str, Any]) -> str | None:
    """Which advice a request that read and wrote nothing falls under: what its log says it asked for, where it
    says; None where caching was asked for on a route that says nothing more (no cause the log backs)."""
    asked = extra.get("cache_requested")
    if asked is None:
        return "uncached"
    if asked == CACHING_OFF:
        return "caching_off"
    return "uncached_routed" if extra.get("route") in _PROXIED_ROUTES else None


def no_bodies_note(results: list[RequestResult]) -> str | None:
    """Why no fix is priced on a log with usage but no request bodies, and how to capture them; None when
    some request has its body (the what-if then simulated what it could)."""
    if not results or any(r.sk.request is not None for r in results):
        return None
    found: dict[str, AgentProfile] = {}
    for r in results:
        profile = profile_for(r.sk.extra)
        if profile is not None:
            found.setdefault(profile.name, profile)
    ways = [_capture_words(p) for p in found.values()] or ["`kvprobe capture -- <agent> …`"]
    return f"{NO_BODIES}; capture them to price fixes: {'; '.join(ways)}"


def _capture_words(profile: AgentProfile) -> str:
    command = f"`{profile.capture} …` ({profile.name})" if profile.capture else profile.name
    return f"{command}: {profile.capture_note}" if profile.capture_note else command
