"""Pricing on the second core: policy sets whose simulations are independent, shared between this process and
a forked child.

The what-if's cost is a constant number of whole-log simulations (`evaluate`), and most of them price one
policy on the baseline: nothing one of them computes is read by another. A forked child inherits the pricer
(its skeletons, sizes and baseline) without copying or pickling it and sends back only what the report keeps
of each set (`Summary`: savings, edited requests, per-session instances), a few kilobytes.

The two processes take sets from one queue (a pipe holding one byte per set: a one-byte read from a pipe is
atomic), so neither waits while the other has several left: sets differ tenfold in cost (a span moved in every
request against a few pings), and no estimate made before pricing them ranks them well.

Only where it pays: a system that forks, two usable CPUs, a log large enough that a simulation outweighs the
fork (`forked.MIN_REQUESTS`). Whatever goes wrong in the child, this process prices its sets itself.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvprobe import forked
from kvprobe.forked import Forked
from kvprobe.whatif.policies import Instance, Policy

if TYPE_CHECKING:
    from kvprobe.whatif.evaluate import Priced, Pricer

_QUEUE_MAX = 255  # sets a one-byte queue can name; more (never seen: a log has a few dozen policies) go 2 ways


@dataclass(slots=True)
class Summary:
    """What the report keeps of one priced set (a `Priced` without its simulation)."""

    saving_ie: float
    saving_usd: float | None
    base_ie: float
    edited: dict[str, int]
    instances: list[Instance]


def summarize(pricer: Pricer, policies: list[Policy]) -> Summary:
    return summary_of(pricer, pricer.price(policies))


def summary_of(pricer: Pricer, priced: Priced) -> Summary:
    return Summary(priced.saving_ie, priced.saving_usd, priced.base_ie, priced.edited, pricer.instances(priced))


class _Queue:
    """Indices 0..n-1, taken in order by whichever process asks first."""

    def __init__(self, n: int) -> None:
        self._fd, write_end = os.pipe()
        try:
            os.write(write_end, bytes(range(n)))  # n <= 255: well under a pipe's buffer
        finally:
            os.close(write_end)  # once emptied, a read returns nothing

    def take(self) -> int | None:
        data = os.read(self._fd, 1)
        return data[0] if data else None

    def close(self) -> None:
        os.close(self._fd)


def price_sets(pricer: Pricer, sets: list[list[Policy]], first: Callable[[], None] | None = None
               ) -> list[Summary]:
    """Each set's summary. `first` is work this process must do itself (pricings others start from): it runs
    here while a child, when one is worth it, starts on the sets."""
    share = len(sets) >= 2 or (first is not None and len(sets) >= 1)
    if not share or len(sets) > _QUEUE_MAX or not forked.worth_forking(len(pricer.base_sks)):
        if first is not None:
            first()
        return [summarize(pricer, s) for s in sets]
    queue = _Queue(len(sets))
    child = Forked(lambda: _drain(pricer, sets, queue, in_child=True))
    found: dict[int, Summary] = {}
    try:
        if first is not None:
            first()
        found.update(_drain(pricer, sets, queue))
        ok, theirs = child.result()
    finally:
        child.close()
        queue.close()
    if ok and isinstance(theirs, list):
        found.update((i, s) for i, s in theirs if s is not None)
    return [found[i] if i in found else summarize(pricer, s) for i, s in enumerate(sets)]


def _drain(pricer: Pricer, sets: list[list[Policy]], queue: _Queue, in_child: bool = False
           ) -> list[tuple[int, Summary | None]]:
    """Sets priced until the queue is empty, by index."""
    out: list[tuple[int, Summary | None]] = []
    while (i := queue.take()) is not None:
        try:
            out.append((i, summarize(pricer, sets[i])))
        except Exception:  # noqa: BLE001 - a child's error: the parent prices the set again and reports it
            if not in_child:
                raise
            out.append((i, None))
    return out
