"""The bill: what the requests cost, split into cache reads, cache writes (5m / 1h), fresh input and output,
in total and by model, project, session and agent, with a first line that says what the misses wasted
against the total and what most of the spend is.

Priced results in, figures out (the sessions' titles are read from their logs only when an output asks,
importers.titles). Each request's split is economics.token_costs (the one split every output shows), so
every row adds up to the cost `report` prints for its requests.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvprobe.analysis.agent_advice import caching_off_counted
from kvprobe.economics.bill_words import CACHING_OFF_WORDS, SPEND_WORDS, WITHOUT_MISSES
from kvprobe.economics.token_costs import CLASSES, token_class_usd
from kvprobe.importers.summary import model_label, project_from
from kvprobe.importers.titles import SessionTitles
from kvprobe.wording import usd

if TYPE_CHECKING:
    from kvprobe.analysis.simulate import RequestResult
    from kvprobe.pricing import PriceBook

GROUPINGS = ("model", "project", "session", "agent")
# the JSON names of the classes (docs/contracts.md §3 `bill`; the same as the `requests` table's columns)
JSON_NAMES = {"read": "cache_read_usd", "write_5m": "cache_write_5m_usd", "write_1h": "cache_write_1h_usd",
              "fresh": "fresh_input_usd", "output": "output_usd"}


@dataclass(slots=True)
class Split:
    """The cost of some requests by token class (USD), over the requests that could be priced."""

    requests: int = 0
    unpriced_requests: int = 0
    usd: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0.0))

    def add(self, classes: dict[str, float] | None) -> None:
        self.requests += 1
        if classes is None:
            self.unpriced_requests += 1
            return
        for cls in CLASSES:
            self.usd[cls] += classes[cls]

    def merge(self, other: Split) -> None:
        self.requests += other.requests
        self.unpriced_requests += other.unpriced_requests
        for cls in CLASSES:
            self.usd[cls] += other.usd[cls]

    @property
    def cost_usd(self) -> float | None:
        """The classes added; None when none of its requests could be priced (an unknown cost is not $0)."""
        if self.requests and self.unpriced_requests == self.requests:
            return None
        return sum(self.usd.values())

    def share(self, cls: str) -> float | None:
        total = self.cost_usd
        return self.usd[cls] / total if total else None

    def to_json(self) -> dict[str, Any]:
        priced = self.cost_usd is not None
        out: dict[str, Any] = {"requests": self.requests}
        out |= {JSON_NAMES[cls]: round(self.usd[cls], 6) if priced else None for cls in CLASSES}
        out["cache_write_usd"] = round(self.usd["write_5m"] + self.usd["write_1h"], 6) if priced else None
        out["cost_usd"] = round(self.cost_usd, 6) if priced else None  # type: ignore[arg-type]
        out["unpriced_requests"] = self.unpriced_requests
        return out


def project_of(r: RequestResult) -> str:
    """The request's project: its logged working directory, else its Claude Code project folder."""
    return project_from(r.sk.extra.get("cwd"), r.sk.source)


@dataclass(slots=True)
class Bill:
    total: Split
    wasted_usd: float | None  # what the diagnosed misses cost above an ideal prefix cache (None: unpriced)
    groups: dict[str, list[tuple[str, Split]]]  # grouping -> rows, costliest first
    titles: SessionTitles = field(default_factory=SessionTitles)  # session -> its title in the agent's log
    # where some misses could not be priced (wasted_usd None): what the priced ones cost, and how many are not
    priced_waste_usd: float = 0.0
    unpriced_misses: int = 0
    # input sent without the cache by the requests the caching-off note counts (`agent_advice.caching_off_counted`)
    uncached_off_usd: float = 0.0

    @property
    def largest(self) -> tuple[str, float] | None:
        """The class most of the spend is, with its share (None when nothing was priced or spent)."""
        shares = [(cls, self.total.share(cls)) for cls in CLASSES]
        known = [(cls, s) for cls, s in shares if s is not None]
        return max(known, key=lambda kv: kv[1]) if known else None

    @property
    def headline(self) -> str:
        """`Misses wasted $2.69 of $51.74 (5.2%); 64% is re-reading long contexts from the cache: compact or
        clear between tasks.`"""
        total = self.total.cost_usd
        if total is None:
            return "The bill is unknown: none of the requests could be priced (use --price-file)."
        digits = 2 if total >= 1 else 4  # cents on a real bill; a small test log keeps its figures
        notes = [f"{self.total.unpriced_requests:,} requests unpriced"] if self.total.unpriced_requests else []
        if self.wasted_usd is None:  # a floor: the priced misses' cost, the others counted aside
            wasted = f"Misses wasted at least {usd(self.priced_waste_usd, digits)} of {usd(total, digits)}"
            n = self.unpriced_misses
            notes.append(f"{n:,} miss{'' if n == 1 else 'es'} among them not counted")
        else:
            share = f" ({100 * self.wasted_usd / total:.1f}%)" if total else ""
            wasted = f"Misses wasted {usd(self.wasted_usd, digits)} of {usd(total, digits)}{share}"
        wasted += f" ({'; '.join(notes)})" if notes else ""
        largest = self.largest
        if largest is None:
            return wasted + "."
        cls, share = largest
        what, advice = SPEND_WORDS[cls]
        if cls == "fresh" and self.uncached_off_usd >= 0.5 * self.total.usd["fresh"] > 0:
            advice = CACHING_OFF_WORDS
        elif self.wasted_usd == 0:
            advice = WITHOUT_MISSES.get(cls, advice)
        return f"{wasted}; {100 * share:.0f}% is {what}: {advice}."

    def to_json(self) -> dict[str, Any]:
        largest = self.largest
        return {
            "headline": self.headline,
            "wasted_usd": None if self.wasted_usd is None else round(self.wasted_usd, 6),
            "largest": None if largest is None else {"class": JSON_NAMES[largest[0]],
                                                     "share": round(largest[1], 4)},
            "total": self.total.to_json(),
            **{f"by_{g}": [{g: key, **({"title": self.titles.get(key)} if g == "session" else {}),
                            **split.to_json()} for key, split in rows]
               for g, rows in self.groups.items()},
        }


def build_bill(results: Iterable[RequestResult], prices: PriceBook | None, wasted: list[float | None],
               titles: SessionTitles | None = None) -> Bill:
    """The bill of priced results; `wasted` is what each of their misses cost (None: a miss not priced)."""
    # one split per (model, project, session, agent) first, then each grouping sums those: a large log adds
    # each request once, not once per grouping
    cells: dict[tuple[str, ...], Split] = {}
    off = 0.0
    for r in results:
        sk = r.sk
        key = (model_label(sk.model, sk.extra.get("platform")), project_of(r), sk.session, sk.agent)
        cell = cells.get(key)
        if cell is None:
            cell = cells[key] = Split()
        classes = token_class_usd(r, prices)
        cell.add(classes)
        if classes is not None and caching_off_counted(r):
            off += classes["fresh"]
    total = Split()
    groups: dict[str, dict[str, Split]] = {g: {} for g in GROUPINGS}
    for key, cell in cells.items():
        total.merge(cell)
        for g, k in zip(GROUPINGS, key):
            groups[g].setdefault(k, Split()).merge(cell)
    ranked = {g: sorted(rows.items(), key=lambda kv: (-(kv[1].cost_usd or 0.0), kv[0])) for g, rows in groups.items()}
    priced = [usd_value for usd_value in wasted if usd_value is not None]
    unpriced = len(wasted) - len(priced)
    return Bill(total, None if unpriced else sum(priced), ranked, titles or SessionTitles(), sum(priced), unpriced,
                off)
