"""What the timeline chart shows, as plain data: one bar per request, the marks around it.

Pure: simulated results in, a `Timeline` out. Drawing lives in `svg.py`; this module decides *what* is worth
showing (misses and their causes, idle gaps, TTL expiries, concurrent starts) so the HTML page, the PNG and
the tests all agree on one model.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvprobe.analysis.costing import miss_cost
from kvprobe.analysis.simulate import RequestResult
from kvprobe.economics.token_costs import token_class_usd
from kvprobe.pricing import PriceBook

if TYPE_CHECKING:
    from kvprobe.report import Miss

MAX_LANES = 5  # a lane each for the busiest agents (the first one always); the others share the last lane
IDLE_GAP_SECONDS = 60.0  # a pause at least this long between two starts gets a marked gap on the chart
MAX_SLOTS = 2500  # beyond this many requests, consecutive requests share a slot (one summed bar per agent)

# Diagnosis kind -> (glyph drawn on the marker, short label, colour). Order is the legend order.
MISS_KINDS: dict[str, tuple[str, str, str]] = {
    "prefix_changed": ("P", "prefix changed", "#d62828"),
    "params_changed": ("A", "params changed", "#7b2cbf"),
    "ttl_expired": ("T", "TTL expired", "#b45309"),
    "lookback_exceeded": ("L", "lookback exceeded", "#0369a1"),
    "below_minimum": ("M", "below minimum", "#4d7c0f"),
    "not_yet_readable": ("C", "concurrent start", "#db2777"),
    "missing_breakpoint": ("B", "missing breakpoint", "#0f766e"),
    "stale_read": ("S", "stale replica", "#a16207"),
    "routing": ("R", "routed elsewhere", "#6d28d9"),
    "unexplained": ("?", "unexplained", "#475569"),
}


@dataclass(slots=True)
class Mark:
    """A miss cause drawn above a bar."""

    kind: str
    detail: str


@dataclass(slots=True)
class Bar:
    index: int  # the bar's slot on the x axis (the request's position in start order, unless aggregated)
    id: str
    session: str
    agent: str
    model: str | None
    started_at: float
    readable_at: float
    read: int
    write_5m: int
    write_1h: int
    fresh: int
    output: int
    missed: int  # tokens an ideal prefix cache would have read that this request did not
    cost_usd: float | None
    input_equivalent: float
    write_kind: str
    marks: list[Mark] = field(default_factory=list)
    first: int = 0  # position in start order of the (first) request drawn by this bar
    count: int = 1  # requests summed into this bar
    # USD of each token class (read, write_5m, write_1h, fresh, output: they add up to the request's cost)
    # and "missed": what its misses cost above an ideal prefix cache. None: not priced
    usd: dict[str, float] | None = None

    @property
    def input_tokens(self) -> int:
        return self.read + self.write_5m + self.write_1h + self.fresh


@dataclass(slots=True)
class Gap:
    """An idle pause before bar `before` (between slots before-1 and before)."""

    before: int
    seconds: float
    ttl_expired: bool  # a request after this pause found its cache entry expired


@dataclass(slots=True)
class Expiry:
    """A cache entry that ran out before bar `index` started (its `ttl_expired` diagnosis)."""

    index: int
    agent: str
    seconds_past: float | None
    detail: str


@dataclass(slots=True)
class Overlap:
    """Bar `index` started while bar `writer` was still in flight (no response yet, so nothing readable)."""

    writer: int
    index: int
    seconds_after: float
    writer_id: str
    id: str


@dataclass(slots=True)
class Timeline:
    bars: list[Bar]
    lanes: list[str]  # agents, in order of first appearance
    gaps: list[Gap]
    expiries: list[Expiry]
    overlaps: list[Overlap]
    sessions: list[tuple[str, int, int]]  # (session, first slot, last slot) for each contiguous run
    per_slot: int = 1  # requests per slot (1: a bar per request)
    requests: int = 0
    lane_of_agent: dict[str, int] = field(default_factory=dict)  # agent -> its lane (several share the last)

    def lane(self, agent: str) -> int:
        return self.lane_of_agent.get(agent, 0)

    @property
    def slots(self) -> int:
        return max((b.index for b in self.bars), default=-1) + 1

    @property
    def priced(self) -> bool:
        """Every bar has its cost by class: the chart can be drawn in dollars."""
        return bool(self.bars) and all(b.usd is not None for b in self.bars)

    @property
    def kinds(self) -> list[str]:
        present = {m.kind for b in self.bars for m in b.marks}
        return [k for k in MISS_KINDS if k in present]


USD_CLASSES = ("read", "write_5m", "write_1h", "fresh", "output")


def _dollars(r: RequestResult, prices: PriceBook | None, miss: Miss | None = None) -> dict[str, float] | None:
    """What each token class of the request cost (its cost split by the unit prices it was priced at)."""
    usd = token_class_usd(r, prices)
    if usd is None:
        return None
    # the report priced its diagnosed misses; a request that missed tokens without a diagnosis is priced here
    missed = (miss.usd if miss is not None else miss_cost(r, prices)[1]) if r.missed_tokens > 0 else 0.0
    usd["missed"] = max(missed or 0.0, 0.0)
    return usd


def _bar(index: int, r: RequestResult, prices: PriceBook | None = None, miss: Miss | None = None) -> Bar:
    u = r.usage
    # a mark is a miss cause: a diagnosis of a request that read all it could (the provider read more than
    # predicted) is no miss, and the page's money figures do not count it either
    marks = [Mark(d.kind if d.kind in MISS_KINDS else "unexplained", d.detail) for d in r.diagnoses] \
        if r.missed_tokens > 0 else []
    return Bar(index, r.sk.id, r.sk.session, r.sk.agent, r.sk.model, r.sk.started_at, r.sk.readable_at,
               u.cache_read_tokens, u.cache_write_5m_tokens, u.cache_write_1h_tokens,
               max(u.fresh_input_tokens, 0), u.output_tokens, r.missed_tokens, r.cost_usd, r.input_equivalent,
               r.write_kind, marks, first=index, usd=_dollars(r, prices, miss))


def _overlaps(results: list[RequestResult]) -> list[Overlap]:
    """For each request, the earliest same-provider request still in flight when it started."""
    found: list[Overlap] = []
    in_flight: list[int] = []
    for i, r in enumerate(results):
        start = r.sk.started_at
        in_flight = [w for w in in_flight if results[w].sk.readable_at > start]
        writer = next((w for w in in_flight if results[w].sk.provider == r.sk.provider), None)
        named = next((d.writer_id for d in r.diagnoses if d.kind == "not_yet_readable" and d.writer_id), None)
        if named is not None:
            writer = next((w for w in range(i) if results[w].sk.id == named), writer)
        if writer is not None:
            found.append(Overlap(writer, i, start - results[writer].sk.started_at, results[writer].sk.id, r.sk.id))
        in_flight.append(i)
    return found


def _sessions(bars: list[Bar]) -> list[tuple[str, int, int]]:
    runs: list[tuple[str, int, int]] = []
    for b in bars:
        if runs and runs[-1][0] == b.session:
            runs[-1] = (b.session, runs[-1][1], b.index)
        else:
            runs.append((b.session, b.index, b.index))
    return runs


def build_timeline(results: list[RequestResult], max_slots: int = MAX_SLOTS,
                   prices: PriceBook | None = None, misses: Iterable[Miss] = ()) -> Timeline:
    """The chart model of simulated results (any order: bars follow start time, then input order). With
    `prices` (those the results were priced with), each bar also carries its cost by token class; `misses`
    (the report's) already hold what their requests' misses cost."""
    ordered = sorted(results, key=lambda r: (r.sk.started_at, r.sk.order))
    priced = {id(m.result): m for m in misses}
    bars = [_bar(i, r, prices, priced.get(id(r))) for i, r in enumerate(ordered)]
    lanes, lane_of = lane_names(bars)
    expiries = [Expiry(i, r.sk.agent, d.seconds_past, d.detail) for i, r in enumerate(ordered)
                for d in r.diagnoses if d.kind == "ttl_expired"]
    expired = {e.index for e in expiries}
    gaps = [Gap(i, bars[i].started_at - bars[i - 1].started_at, i in expired) for i in range(1, len(bars))
            if bars[i].started_at - bars[i - 1].started_at >= IDLE_GAP_SECONDS]
    tl = Timeline(bars, lanes, gaps, expiries, _overlaps(ordered), _sessions(bars), 1, len(bars), lane_of)
    return tl if len(bars) <= max_slots else _aggregate(tl, math.ceil(len(bars) / max_slots))


def lane_names(bars: list[Bar], most: int = MAX_LANES) -> tuple[list[str], dict[str, int]]:
    """A lane per agent that has requests, in order of first appearance; beyond `most` agents (a Claude Code
    folder has a subagent per task), the first agent and the busiest others keep theirs and the rest share
    one lane, "N other agents", so the chart keeps lanes tall enough to read."""
    agents = list(dict.fromkeys(b.agent for b in bars))
    if len(agents) <= most:
        return agents, {a: i for i, a in enumerate(agents)}
    counts: dict[str, int] = {}
    for b in bars:
        counts[b.agent] = counts.get(b.agent, 0) + b.count
    busiest = sorted(agents[1:], key=lambda a: -counts[a])[: most - 2]
    kept = [a for a in agents if a == agents[0] or a in busiest]
    lane_of = {a: i for i, a in enumerate(kept)}
    rest = [a for a in agents if a not in lane_of]
    for a in rest:
        lane_of[a] = len(kept)
    return kept + [f"{len(rest):,} other agents"], lane_of


def _sum(slot: int, group: list[Bar]) -> Bar:
    a, z = group[0], group[-1]
    costs = [b.cost_usd for b in group]
    marks = list({m.kind: m for b in group for m in b.marks}.values())
    usd = None if any(b.usd is None for b in group) else \
        {k: sum(b.usd[k] for b in group) for k in (*USD_CLASSES, "missed")}  # type: ignore[index]
    return Bar(slot, f"{a.id} … {z.id}" if len(group) > 1 else a.id, a.session, a.agent, a.model, a.started_at,
               z.readable_at, sum(b.read for b in group), sum(b.write_5m for b in group),
               sum(b.write_1h for b in group), sum(b.fresh for b in group), sum(b.output for b in group),
               sum(b.missed for b in group), None if None in costs else sum(costs),
               sum(b.input_equivalent for b in group), a.write_kind, marks, first=a.first, count=len(group),
               usd=usd)


def _aggregate(tl: Timeline, k: int) -> Timeline:
    """Sum each run of k consecutive requests into one slot (a bar per agent in it), so huge traces stay
    drawable; every mark moves to the slot of its request."""
    groups: dict[tuple[int, int], list[Bar]] = {}
    for b in tl.bars:  # one summed bar per slot and lane (agents sharing a lane share its bar)
        groups.setdefault((b.index // k, tl.lane(b.agent)), []).append(b)
    bars = [_sum(slot, group) for (slot, _), group in groups.items()]
    gaps: dict[int, Gap] = {}
    for g in tl.gaps:
        old = gaps.get(g.before // k)
        gaps[g.before // k] = Gap(g.before // k, max(g.seconds, old.seconds if old else 0),
                                  g.ttl_expired or bool(old and old.ttl_expired))
    expiries = list({(e.index // k, e.agent): Expiry(e.index // k, e.agent, e.seconds_past, e.detail)
                     for e in tl.expiries}.values())
    overlaps = list({(o.writer // k, o.index // k): Overlap(o.writer // k, o.index // k, o.seconds_after,
                                                             o.writer_id, o.id)
                     for o in tl.overlaps if o.writer // k != o.index // k}.values())
    sessions = [(name, a // k, z // k) for name, a, z in tl.sessions]
    return Timeline(bars, tl.lanes, list(gaps.values()), expiries, overlaps, sessions, k, tl.requests,
                    tl.lane_of_agent)
