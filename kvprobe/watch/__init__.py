"""`watch`: follow traces and agent logs as they grow and analyse each new request as it arrives.

    w = Watch(["trace.jsonl"])
    for step in w.run(interval=0.5, exit_after=10):
        for event in step.events:      # one per new request: simulated, diagnosed, priced
            ...
    w.totals                           # requests, hit ratio, cost so far, misses

`Follower` (follow.py) finds new complete requests (partial lines, rotation, truncation, deletion, new
files); `LiveAnalysis` (live.py) steps the simulator once per request.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kvprobe.errors import InputError
from kvprobe.pricing import PriceBook
from kvprobe.watch.follow import Follower, Skips
from kvprobe.watch.live import Event, LiveAnalysis, Totals
from kvprobe.watch.tail import FileTail, TailEvent

__all__ = ["Watch", "Step", "Event", "Totals", "Follower", "FileTail", "TailEvent", "LiveAnalysis", "Skips"]


@dataclass(slots=True)
class Step:
    events: list[Event] = field(default_factory=list)
    file_events: list[TailEvent] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # requests that could not be analysed: "file:line: why"
    failed: list[str] = field(default_factory=list)  # requests that failed, not priced: "id: error"
    final: bool = False


class Watch:
    def __init__(self, paths: Iterable[str | Path], *, from_end: bool = False, settle_s: float = 5.0,
                 prices: PriceBook | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.follower = Follower(paths, from_end=from_end, settle_s=settle_s, clock=clock)
        self.live = LiveAnalysis(prices)
        self.clock = clock
        self.duplicates = 0

    @property
    def totals(self) -> Totals:
        return self.live.totals

    @property
    def _seen(self) -> int:
        """Requests analysed so far, failed ones included (they count towards --exit-after)."""
        return self.totals.requests + self.totals.failed

    @property
    def skips(self) -> Skips:
        return self.follower.skips

    def step(self, final: bool = False, limit: int | None = None) -> Step:
        """Analyse whatever is new. `limit` stops after that many requests (the rest are not counted)."""
        batch = self.follower.poll(final)
        self.duplicates += batch.duplicates
        step = Step(file_events=batch.events, final=final)
        for rec in batch.records[:limit]:
            try:
                event = self.live.add(rec)
                if event is None:
                    step.failed.append(f"{rec.id}: {rec.error}")
                else:
                    step.events.append(event)
            except InputError as exc:  # one bad request body: counted, the watch goes on
                where = f"{rec.source}:{rec.line}" if rec.source else rec.id
                self.skips.add(exc.message, where)
                step.skipped.append(f"{where}: {exc.message}")
        return step

    def run(self, *, interval: float = 0.5, once: bool = False, exit_after: int | None = None,
            idle_timeout: float | None = None, sleep: Callable[[float], None] = time.sleep) -> Iterator[Step]:
        """Poll until an exit condition: `once` (what is there now), `exit_after` requests, or no new request
        for `idle_timeout` seconds. Without any, it runs until interrupted. The last step is `final`."""
        last_new = self.clock()
        try:
            while True:
                left = None if exit_after is None else exit_after - self._seen
                idle = idle_timeout is not None and self.clock() - last_new >= idle_timeout
                final = once or idle
                step = self.step(final=final, limit=left)
                if step.events or step.failed:
                    last_new = self.clock()
                done = final or (exit_after is not None and self._seen >= exit_after)
                step.final = done
                yield step
                if done:
                    return
                sleep(interval)
        finally:
            self.follower.close()
