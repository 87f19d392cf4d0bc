"""Fleet findings: prefixes that many sessions share, what breaks the sharing, and what the rewrites cost.

A team's log is many sessions of one agent product, each resending the same tools and system prompt. Their
first requests are compared block by block (chained keys: a block is shared only when everything before it
is too): the sessions that agree longest form a group, and the block where they part is the breaker —
a volatile span inside an otherwise equal block, a tool list in another order, an identity parameter, or
simply where per-session content starts. Every session that wrote the shared part again paid the write
price for what another session's entry held; whether it could have read it instead depends on how far apart
sessions start against how long entries live, which the what-if prices (`whatif.propose_fleet`).
"""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kvprobe.analysis.simulate import RequestResult
from kvprobe.analysis.spans import find_template
from kvprobe.analysis.texts import TextSource
from kvprobe.economics.keep_alive import entry_lifetime_s
from kvprobe.pricing import PriceBook
from kvprobe.request.paths import text_at
from kvprobe.sim import cache_name
from kvprobe.sim.positions import cumulative_tokens
from kvprobe.wording import show

MIN_SESSIONS = 3  # fewer sessions than this sharing a prefix is not a fleet


@dataclass(slots=True)
class SharedPrefix:
    agents: list[str]  # the agents whose first requests share it (main agents and subagents alike)
    sessions: list[str]  # the sessions whose first requests share the prefix
    all_sessions: int  # sessions of the log with a request body
    shared_blocks: int
    shared_tokens: int
    last_path: str
    breaks_at: str | None = None  # path of the first block the sessions do not share
    breaker: str = "per-session content"  # volatile span | tool list | parameter | per-session content
    breaker_detail: str = ""
    could_share_tokens: int = 0  # shared through the breaking block, were the breaker fixed
    marked: bool = False  # a breakpoint ends the (could-be) shared prefix in the first requests
    rewrote_sessions: int = 0
    rewritten_tokens: int = 0
    rewrite_usd: float | None = 0.0  # the write premium over a read for every rewrite after the first
    median_gap_s: float | None = None  # between consecutive sessions' first requests
    lifetime_s: float | None = None
    fixes: list[str] = field(default_factory=list)  # keys of the policies that address it (filled by what-if)

    @property
    def prefix_tokens(self) -> int:
        return max(self.shared_tokens, self.could_share_tokens)

    @property
    def summary(self) -> str:
        n, total = len(self.sessions), self.all_sessions
        who = self.agents[0] if len(self.agents) == 1 else f"{len(self.agents)} agents: {', '.join(self.agents[:4])}" \
            + (", ..." if len(self.agents) > 4 else "")
        head = (f"{n:,} of {total:,} sessions ({who}) share a {self.shared_tokens:,}-token prefix "
                f"(through {self.last_path})")
        if self.breaker != "per-session content" and self.breaks_at:
            head += (f"; {self.breaker} at {self.breaks_at} breaks it ({self.breaker_detail}), without which they "
                     f"would share {self.could_share_tokens:,} tokens")
        cost = f"${self.rewrite_usd:,.4f}" if self.rewrite_usd is not None else "cost unknown"
        head += (f". {self.rewrote_sessions:,} wrote it anew: {self.rewritten_tokens:,} tokens, {cost} over "
                 "reading it")
        if self.median_gap_s is not None and self.lifetime_s is not None:
            head += (f"; sessions start {self.median_gap_s:,.0f}s apart (median), entries live "
                     f"{self.lifetime_s:,.0f}s")
        return head

    def to_json(self) -> dict[str, Any]:
        return {"agents": self.agents, "sessions": len(self.sessions), "all_sessions": self.all_sessions,
                "shared_blocks": self.shared_blocks, "shared_tokens": self.shared_tokens,
                "last_path": self.last_path, "breaks_at": self.breaks_at, "breaker": self.breaker,
                "breaker_detail": self.breaker_detail, "could_share_tokens": self.could_share_tokens,
                "marked": self.marked, "rewrote_sessions": self.rewrote_sessions,
                "rewritten_tokens": self.rewritten_tokens,
                "rewrite_usd": None if self.rewrite_usd is None else round(self.rewrite_usd, 6),
                "median_gap_s": None if self.median_gap_s is None else round(self.median_gap_s, 1),
                "lifetime_s": self.lifetime_s, "fixes": self.fixes, "summary": self.summary}


def _firsts(results: list[RequestResult]) -> list[RequestResult]:
    """The first request with a body of each stream (session and agent)."""
    seen: set[tuple[str, str]] = set()
    out: list[RequestResult] = []
    for r in results:
        key = (r.sk.session, r.sk.agent)
        if r.sk.request is None or not r.sk.request.blocks or key in seen:
            continue
        seen.add(key)
        out.append(r)
    return out


def _cache_of(r: RequestResult) -> str:
    """The cache a request's entries live in: sessions served by another platform (or in another cache mode)
    share no entry, whatever their prompts share (`sim.cache_name`)."""
    return cache_name(r.sk.provider, r.sk.rules_key[2], r.sk.request.cache_mode)  # type: ignore[union-attr]


def _walk(group: list[RequestResult]) -> tuple[list[RequestResult], int]:
    """The largest set of sessions of one cache agreeing on the most leading blocks, and how many."""
    depth = 0
    caches = {id(r): _cache_of(r) for r in group}  # (once per request, not once per block it is walked at)
    while True:
        parts: dict[tuple[str, int], list[RequestResult]] = {}
        for r in group:
            blocks = r.sk.request.blocks  # type: ignore[union-attr]
            if depth < len(blocks):
                parts.setdefault((caches[id(r)], blocks[depth].cache_key), []).append(r)
        best = max(parts.values(), key=_session_count, default=[])
        if _session_count(best) < MIN_SESSIONS:
            return group, depth
        group, depth = best, depth + 1


def _session_count(group: list[RequestResult]) -> int:
    return len({r.sk.session for r in group})


def find_shared_prefixes(results: list[RequestResult], texts: TextSource, prices: PriceBook) -> list[SharedPrefix]:
    out = []
    firsts = _firsts(results)
    pool = firsts
    while _session_count(pool) >= MIN_SESSIONS:  # a log of two products: a finding per product
        group, depth = _walk(pool)
        taken = {id(r) for r in group}
        pool = [r for r in pool if id(r) not in taken] if depth else []
        if depth == 0:
            break
        lead = group[0]
        blocks = lead.sk.request.blocks  # type: ignore[union-attr]
        cum = cumulative_tokens(blocks)
        minimum = int(lead.rules.get("min_cacheable_tokens", 0))
        if cum[depth - 1] < minimum:
            continue
        found = SharedPrefix(sorted({r.sk.agent for r in group}), sorted({r.sk.session for r in group}),
                             _session_count(firsts), depth, cum[depth - 1], blocks[depth - 1].path)
        _breaker(found, group, depth, texts)
        end = depth if found.could_share_tokens else depth - 1
        found.marked = all(end in r.sk.request.breakpoint_indices for r in group)  # type: ignore[union-attr]
        _rewrites(found, results, prices)
        _gaps(found, group)
        out.append(found)
    out.sort(key=lambda f: -(f.rewrite_usd or 0.0))
    return out


def _breaker(found: SharedPrefix, group: list[RequestResult], depth: int, texts: TextSource) -> None:
    """What the sessions' first requests differ in at the first block they do not share."""
    nxt = [r.sk.request.blocks[depth] for r in group if depth < len(r.sk.request.blocks)]  # type: ignore
    if len(nxt) < len(group):
        return
    found.breaks_at = nxt[0].path
    cum = cumulative_tokens(group[0].sk.request.blocks)  # type: ignore[union-attr]
    if len({b.content_hash for b in nxt}) == 1:
        params = _differing_params(group)
        found.breaker, found.breaker_detail = "parameter", ", ".join(params) or "an identity parameter"
        found.could_share_tokens = cum[depth]
        return
    if nxt[0].level == "tools" and all(b.level == "tools" for b in nxt):
        sets = {frozenset(b.body_hash for b in r.sk.request.blocks if b.level == "tools") for r in group}  # type: ignore
        if len(sets) == 1:
            found.breaker, found.breaker_detail = "tool list", "the same tools in another order"
            return
    if nxt[0].level in ("tools", "system") and len({b.path for b in nxt}) == 1:
        versions = Counter()
        for r in group:
            rec = texts.record(r.sk)
            text = text_at(rec.request, found.breaks_at) if rec is not None else None
            if text is not None:
                versions[text] += 1
        template = find_template(list(versions), versions) if len(versions) > 1 else None
        if template is not None:
            found.breaker = "volatile span"
            found.breaker_detail = f"e.g. {show(template.sample[:60])}; {len(versions):,} versions"
            found.could_share_tokens = cum[depth]


def _differing_params(group: list[RequestResult]) -> list[str]:
    names = []
    for name in group[0].sk.request.params:  # type: ignore[union-attr]
        values = {repr(r.sk.request.params[name].value) for r in group if name in r.sk.request.params}  # type: ignore
        if len(values) > 1:
            names.append(name)
    return names


def _rewrites(found: SharedPrefix, results: list[RequestResult], prices: PriceBook) -> None:
    """Tokens of the (could-be) shared prefix each session's requests wrote, and the premium of all writes
    after the first over reading them."""
    sessions, agents, limit = set(found.sessions), set(found.agents), found.prefix_tokens
    by_session: dict[str, int] = {}
    premium: float | None = 0.0
    first_writer: str | None = None
    for r in results:
        if r.sk.session not in sessions or r.sk.agent not in agents or r.sk.request is None:
            continue
        u = r.usage
        written = max(0, min(limit, u.cache_read_tokens + u.cache_write_tokens) - u.cache_read_tokens)
        if not written:
            continue
        by_session[r.sk.session] = by_session.get(r.sk.session, 0) + written
        if first_writer is None:
            first_writer = r.sk.id
            continue
        units = prices.unit_prices(r.sk.provider, r.sk.model, r.sk.started_at, u.input_tokens,
                                   r.sk.extra.get("platform"))
        if units is None or premium is None:
            premium = None
        else:
            premium += written * (units["write_5m"] - units["read"])
    found.rewrote_sessions = len(by_session)
    found.rewritten_tokens = sum(by_session.values())
    found.rewrite_usd = premium


def _gaps(found: SharedPrefix, group: list[RequestResult]) -> None:
    starts = sorted({r.sk.session: r.sk.started_at for r in reversed(group)}.values())  # each session's first
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    found.median_gap_s = statistics.median(gaps) if gaps else None
    found.lifetime_s = entry_lifetime_s(group[0].rules)
