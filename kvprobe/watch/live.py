"""Running analysis for `watch`: each new request is simulated, diagnosed and priced once, as it arrives.

The simulator is stateful (`Simulator.step`), so a new request costs one step against the cache state the
earlier ones left, never a re-simulation of the whole trace. Requests of one poll are stepped in start
order; one that arrives after a later-starting request was already stepped is simulated where it arrives
(live order), which only matters for requests of concurrent agents written to different files.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.analysis.costing import miss_cost, price_results
from kvprobe.analysis.agent_advice import advise_one
from kvprobe.analysis.diagnose import Diagnoser
from kvprobe.analysis.simulate import RequestResult, Simulator
from kvprobe.analysis.skeleton import BlockStore, Skeleton, skeletons
from kvprobe.pricing import PriceBook
from kvprobe.request import RenderedRequest, render_request
from kvprobe.report import request_json
from kvprobe.trace import TraceRecord
from kvprobe.trace.reader import read_record_at
from kvprobe.usage import Usage


@dataclass(slots=True)
class Event:
    """One request as `watch` shows it."""

    result: RequestResult
    source: str | None
    miss_usd: float | None = None
    miss_input_equivalent: float = 0.0
    totals: dict[str, Any] = field(default_factory=dict)  # running totals including this request

    @property
    def is_miss(self) -> bool:
        return bool(self.result.diagnoses) and self.result.missed_tokens > 0

    def to_json(self) -> dict[str, Any]:
        """report --json's request keys (docs/contracts.md §3), plus where it came from and the totals so far."""
        out = request_json(self.result)
        out["source"] = self.source
        out["miss"] = self.is_miss
        out["miss_usd"] = None if self.miss_usd is None else round(self.miss_usd, 6)
        out["totals"] = self.totals
        return out


@dataclass(slots=True)
class Totals:
    requests: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    unpriced: int = 0
    misses: int = 0
    missed_read_tokens: int = 0
    miss_usd: float = 0.0
    failed: int = 0  # requests that failed (skeleton.failed_call): counted here, in no other figure

    @property
    def hit_ratio(self) -> float:
        return self.usage.cache_read_tokens / self.usage.input_tokens if self.usage.input_tokens else 0.0

    def to_json(self) -> dict[str, Any]:
        u = self.usage
        return {"requests": self.requests, "input_tokens": u.input_tokens, "cache_read_tokens": u.cache_read_tokens,
                "cache_write_tokens": u.cache_write_tokens, "fresh_input_tokens": u.fresh_input_tokens,
                "output_tokens": u.output_tokens, "token_hit_ratio": round(self.hit_ratio, 4),
                "cost_usd": round(self.cost_usd, 6), "unpriced_requests": self.unpriced, "misses": self.misses,
                "missed_read_tokens": self.missed_read_tokens, "miss_usd": round(self.miss_usd, 6),
                "failed_requests": self.failed}


def _reread(sk: Skeleton) -> RenderedRequest | None:
    """The full text of a traced request (for the exact change of a diagnosis), if its line is still there."""
    if sk.source is None or sk.offset is None or not Path(sk.source).is_file():
        return None
    try:
        rec = read_record_at(sk.source, sk.offset)
    except Exception:  # the file was rotated or rewritten since: the diagnosis keeps its block-level path
        return None
    if rec.id != sk.id or rec.request is None:
        return None
    return render_request(rec.request, rec.provider, rec.endpoint, rec.response)


class LiveAnalysis:
    def __init__(self, prices: PriceBook | None = None,
                 reread: Callable[[Skeleton], RenderedRequest | None] | None = _reread) -> None:
        self.store = BlockStore()
        self.sim = Simulator(self.store)
        self.diagnoser = Diagnoser(reread)
        self.prices = prices or PriceBook()
        self.totals = Totals()
        self._last_start = 0.0

    def add(self, record: TraceRecord) -> Event | None:
        """The request's event; None when it failed (counted in `totals.failed`, neither simulated nor priced,
        as in `report`)."""
        if record.started_at is None:  # keep the order it arrived in
            record.started_at = self._last_start
        self._last_start = max(self._last_start, record.started_at)
        sk = next(skeletons([record], self.store))
        if sk.failed:
            self.totals.failed += 1
            return None
        result = self.diagnoser.step(self.sim.step(sk))
        price_results([result], self.prices)
        advise_one(result)  # on an agent's log, in that agent's knobs
        event = Event(result, record.source)
        if event.is_miss:
            event.miss_input_equivalent, event.miss_usd = miss_cost(result, self.prices)
        self._count(event)
        event.totals = self.totals.to_json()
        return event

    def _count(self, event: Event) -> None:
        t, r = self.totals, event.result
        t.requests += 1
        t.usage = t.usage + r.usage
        if r.cost_usd is None:
            t.unpriced += 1
        else:
            t.cost_usd += r.cost_usd
        t.missed_read_tokens += r.missed_tokens
        if event.is_miss:
            t.misses += 1
            t.miss_usd += event.miss_usd or 0.0
