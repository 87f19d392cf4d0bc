"""Pricing policy sets through the executor seam (`kvprobe.run`): sets whose simulations are independent.

The what-if's cost is a constant number of whole-log simulations (`evaluate`), and most of them price one
policy on the baseline: nothing one of them computes is read by another. Each set is one unit: the pricer (its
skeletons, sizes and baseline) is the map's shared value, inherited by forked workers or sent once to each
worker of a cluster, and what comes back is what the report keeps of the set (`Summary`: savings, edited
requests, per-session instances), a few kilobytes.

Processes only where they pay: a log large enough that a simulation outweighs starting them
(`forked.MIN_REQUESTS`), or a cluster the caller chose. A worker that dies or stalls costs time: the seam runs
its sets again.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvprobe import forked, run
from kvprobe.whatif.policies import Instance, Policy

if TYPE_CHECKING:
    from kvprobe.whatif.evaluate import Priced, Pricer


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


def _price(shared: tuple[Pricer, list[list[Policy]]], unit: tuple[int, str]) -> Summary:
    """One unit: the set at this index, priced together (its labels ride along to name it should it fail)."""
    pricer, sets = shared
    return summarize(pricer, sets[unit[0]])


def _price_chain(shared: tuple[Pricer, list[list[Policy]]], unit: tuple[int, str]) -> list[Summary]:
    """One unit: the chain at this index (`Pricer.price_chain`), a summary per policy."""
    pricer, chains = shared
    return [summary_of(pricer, priced) for priced in pricer.price_chain(chains[unit[0]])]


def price_sets(pricer: Pricer, sets: list[list[Policy]], first: Callable[[], None] | None = None
               ) -> list[Summary]:
    """Each set's summary (its policies priced together). `first` is work this process must do itself: it runs
    here while the sets are priced elsewhere, when that is worth it."""
    return _map(pricer, _price, sets, first)


def price_chains(pricer: Pricer, chains: list[list[Policy]], first: Callable[[], None] | None = None
                 ) -> list[list[Summary]]:
    """Each chain's summaries: its first policy priced alone (or on top of what it requires), each next one on
    top of the first (`Pricer.price_chain`). `first` as in `price_sets`."""
    return _map(pricer, _price_chain, chains, first)


def _map(pricer: Pricer, fn: Callable[[tuple[Pricer, list[list[Policy]]], tuple[int, str]], Any],
         sets: list[list[Policy]], first: Callable[[], None] | None) -> list[Any]:
    share = len(sets) >= 2 or (first is not None and len(sets) >= 1)
    executor = run.current(parallel=share and forked.worth_forking(len(pricer.base_sks)))
    units = [(i, " + ".join(p.label for p in s)) for i, s in enumerate(sets)]
    pending = executor.start(fn, units, shared=(pricer, sets))
    try:
        if first is not None:
            first()
        return pending.results()
    finally:
        pending.close()
