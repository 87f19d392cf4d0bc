"""`kvprobe usage`: tokens by class, token hit ratio and cost of imported logs, grouped by day, week, month,
project, session, agent or model, each row with its per-model breakdown.

Pricing a million requests one by one through genai-prices costs ~0.4 ms each; prices are linear inside a
long-context tier, so requests are summed per combination of row keys and (provider, model, price period,
tier), and each such cell is priced once from per-token rates read off the dataset (cliff tiers: the
request's total input picks the tier). Every grouping is then a sum of cells, so all groupings add up to
the same totals.
"""
from __future__ import annotations

import datetime as dt
import re
from bisect import bisect_left
from collections import namedtuple
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from kvprobe.pricing import PriceBook
from kvprobe.trace import TraceRecord
from kvprobe.usage import Usage, normalize_usage

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

GROUPINGS = ("day", "week", "month", "project", "session", "agent", "model")
CALENDAR = ("day", "week", "month")  # rows in time order; the others costliest first
# Per-cell sums, in this order.
_FRESH, _READ, _W5M, _W1H, _OUT, _REASON, _REQS, _ERRS, _LOGGED = range(9)


@dataclass(slots=True)
class Totals:
    requests: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    output_tokens: int = 0
    reasoning_output_tokens: int = 0
    cost_usd: float = 0.0
    # cost_usd by token class, in _FRESH, _READ, _W5M, _W1H, _OUT order (what `--usd` and the JSON's *_usd show)
    class_usd: list[float] = field(default_factory=lambda: [0.0] * 5)
    unpriced_requests: int = 0  # model not in the price dataset
    errors: int = 0
    models: dict[str, "Totals"] = field(default_factory=dict)  # per-model breakdown of this row (by model_label)
    model_id: str | None = None  # a model's row: its id and the platform that served it (model_label's parts)
    platform: str | None = None

    def add_cell(self, acc: list[int], costs: tuple[float, ...] | None) -> None:
        """Add a priced cell: its sums (acc) and its cost per token class (None: unpriced)."""
        self.requests += acc[_REQS]
        self.errors += acc[_ERRS]
        self.cache_read_tokens += acc[_READ]
        self.cache_write_5m_tokens += acc[_W5M]
        self.cache_write_1h_tokens += acc[_W1H]
        self.input_tokens += acc[_FRESH] + acc[_READ] + acc[_W5M] + acc[_W1H]
        self.output_tokens += acc[_OUT]
        self.reasoning_output_tokens += acc[_REASON]
        if costs is None:
            self.unpriced_requests += acc[_REQS]
        else:
            self.cost_usd += sum(costs)
            for i, usd in enumerate(costs):
                self.class_usd[i] += usd

    @property
    def usage(self) -> Usage:
        return Usage(self.input_tokens, self.cache_read_tokens, self.cache_write_5m_tokens,
                     self.cache_write_1h_tokens, self.output_tokens,
                     reasoning_output_tokens=self.reasoning_output_tokens)

    @property
    def token_hit_ratio(self) -> float | None:
        """Σ cache reads ÷ Σ all input tokens (never an average of per-request ratios)."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else None

    def ranked_models(self) -> list[tuple[str, "Totals"]]:
        return sorted(self.models.items(), key=lambda kv: (-kv[1].cost_usd, -kv[1].input_tokens, kv[0]))

    def to_json(self, with_models: bool = False) -> dict[str, Any]:
        ratio, u = self.token_hit_ratio, self.usage
        out = {"requests": self.requests, "input_tokens": u.input_tokens,
               "cache_read_tokens": u.cache_read_tokens, "cache_write_tokens": u.cache_write_tokens,
               "cache_write_5m_tokens": u.cache_write_5m_tokens,
               "cache_write_1h_tokens": u.cache_write_1h_tokens,
               "fresh_input_tokens": u.fresh_input_tokens, "output_tokens": u.output_tokens,
               "reasoning_output_tokens": self.reasoning_output_tokens,
               "token_hit_ratio": round(ratio, 4) if ratio is not None else None,
               "cost_usd": round(self.cost_usd, 6), **self.usd_json(),
               "unpriced_requests": self.unpriced_requests, "errors": self.errors}
        if with_models:
            out["models"] = [t.model_json(m) for m, t in self.ranked_models()]
        return out

    def usd_json(self) -> dict[str, float]:
        """The cost by token class (the names of `report`'s bill: docs/contracts.md §6)."""
        fresh, read, w5m, w1h, out = self.class_usd
        return {"cache_read_usd": round(read, 6), "cache_write_5m_usd": round(w5m, 6),
                "cache_write_1h_usd": round(w1h, 6), "cache_write_usd": round(w5m + w1h, 6),
                "fresh_input_usd": round(fresh, 6), "output_usd": round(out, 6)}

    def model_json(self, label: str) -> dict[str, Any]:
        """A model's row: the model id and its platform (null: the provider's own API), then the figures."""
        return {"model": self.model_id or label, "platform": self.platform, **self.to_json()}


class GroupPricer:
    """Per-token USD rates per (provider, model, platform, day, tier), from the shared PriceBook: the same
    `unit_prices` that prices each request of `report` (analysis.costing, via PriceBook.cost), asked with
    the same platform (TraceRecord.platform), so both commands price a Bedrock-served request alike."""

    def __init__(self, book: PriceBook) -> None:
        self.book = book
        self._starts: dict[tuple, tuple[int, ...]] = {}
        self._rates: dict[tuple, tuple[float, ...] | None] = {}

    def tier_starts(self, provider: str | None, model: str | None, day: int | None,
                    platform: str | None = None) -> tuple[int, ...]:
        key = (provider, model, day, platform)
        starts = self._starts.get(key)
        if starts is None:
            if provider == "local" or (model and model in self.book.overrides) or not model:
                starts = ()
            else:
                starts = tuple(self.book.tier_starts(provider, model, day, platform) or ())
            self._starts[key] = starts
        return starts

    def rates(self, provider: str | None, model: str | None, day: int | None, tier: int,
              platform: str | None = None) -> tuple[float, ...] | None:
        """USD per token for fresh input, cache read, 5m write, 1h write, output."""
        key = (provider, model, day, tier, platform)
        if key not in self._rates:
            starts = self.tier_starts(provider, model, day, platform)
            n = (starts[tier - 1] + 1) if tier > 0 else 1  # a total input inside this tier
            units = self.book.unit_prices(provider, model, day * 86400.0 if day is not None else None, n, platform)
            self._rates[key] = None if units is None else (
                units["fresh"], units["read"], units["write_5m"], units["write_1h"], units["output"])
        return self._rates[key]


@dataclass(slots=True)
class UsageSummary:
    totals: Totals = field(default_factory=Totals)
    by: dict[str, dict[str, Totals]] = field(default_factory=lambda: {g: {} for g in GROUPINGS})
    first_at: float | None = None
    last_at: float | None = None
    unknown_models: set[str] = field(default_factory=set)
    without_usage: int = 0  # records with no usage at all (failed calls): counted, not summed
    without_model: int = 0  # requests whose log names no model (Kimi's wire, an old Cline task): unpriced
    logged_unpriced_usd: float = 0.0  # what the logs themselves say the requests kvprobe cannot price cost
    price_notes: list[str] = field(default_factory=list)  # how prices were found (an alias used: PriceBook.notes)

    def rows(self, grouping: str) -> list[tuple[str, Totals]]:
        items = self.by[grouping].items()
        if grouping in CALENDAR:
            return sorted(items)
        return sorted(items, key=lambda kv: (-kv[1].cost_usd, -kv[1].input_tokens, kv[0]))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"totals": self.totals.to_json(with_models=True)}
        for g in GROUPINGS:
            out[f"by_{g}"] = [t.model_json(k) if g == "model" else {g: k, **t.to_json(with_models=True)}
                              for k, t in self.rows(g)]
        out["unknown_models"] = sorted(self.unknown_models)
        out["records_without_usage"] = self.without_usage
        out["requests_without_model"] = self.without_model
        out["logged_cost_of_unpriced_usd"] = round(self.logged_unpriced_usd, 6)
        out["price_notes"] = self.price_notes
        return out


class _Calendar:
    """Day, week (its Monday) and month of a timestamp in one time zone, cached per quarter hour (every
    UTC offset in use is a multiple of 15 minutes, so a quarter hour never straddles two local days)."""

    def __init__(self, tz: dt.tzinfo) -> None:
        self.tz = tz
        self._cache: dict[int, tuple[str, str, str]] = {}

    def keys(self, ts: float | None) -> tuple[str, str, str]:
        if ts is None:
            return ("unknown", "unknown", "unknown")
        slot = int(ts // 900)
        found = self._cache.get(slot)
        if found is None:
            day = dt.datetime.fromtimestamp(ts, self.tz).date()
            monday = day - dt.timedelta(days=day.weekday())
            found = self._cache[slot] = (day.isoformat(), monday.isoformat(), day.isoformat()[:7])
        return found


def model_label(model: str | None, platform: str | None) -> str:
    """A usage row's model: its id, with the platform that served it when not the provider's own API
    (`claude-haiku-4-5 (bedrock)`): such requests are priced at the platform's list, so they get their own row."""
    name = model or "(unknown)"
    return f"{name} ({platform})" if platform else name


def project_of(record: TraceRecord) -> str:
    """The project a request belongs to: its working directory, else the Claude Code project folder."""
    return project_from(record.extra.get("cwd"), record.source)


def project_from(cwd: object, source: str | None) -> str:
    """A working directory logged with a request, else the Claude Code project folder its log sits in
    (`usage --by project` and `report`'s bill read the same)."""
    if isinstance(cwd, str) and cwd:
        return cwd
    return _project_folder(source)


@lru_cache(maxsize=4096)  # a log's requests share their file: its path is split once
def _project_folder(source: str | None) -> str:
    """Claude Code's project folder (`projects/<cwd with / as ->`), or the folder a Gemini CLI or Kimi CLI
    session names its project by (`tmp/<SHA-256 of the directory>/chats/`, `sessions/<MD5 of the
    directory>/<session>/`: its first 12 characters, as `ls` shows the folder)."""
    if source:
        parts = Path(source).parts
        if "projects" in parts[:-1]:
            return parts[parts.index("projects") + 1]
        hashed = len(parts) >= 4 and (parts[-2] == "chats" or parts[-4] == "sessions")
        if hashed and _HEX.fullmatch(parts[-3]):
            return f"(project {parts[-3][:12]}…)"
    return "(none)"


_HEX = re.compile(r"[0-9a-f]{32,}")


def _in_window(when: float | None, since: float | None, until: float | None) -> bool:
    if since is None and until is None:
        return True
    return when is not None and (since is None or when >= since) and (until is None or when < until)


def resolve_tz(name: str | None) -> dt.tzinfo:
    if not name or name.upper() == "UTC":
        return dt.timezone.utc
    if name == "local":
        return dt.datetime.now().astimezone().tzinfo or dt.timezone.utc
    from zoneinfo import ZoneInfo  # here: it loads sysconfig (~3 ms of `usage`'s start-up), and UTC needs none

    return ZoneInfo(name)


# What `usage` needs of one request: small enough to send back from the processes that parse the logs. A named
# tuple, not a dataclass: 100k frozen dataclasses cost ~1 s to pickle and ~1 s to unpickle, named tuples ~0.4 s
# each way (whole records, with their bodies and metadata, several times more); collections' (typing's
# NamedTuple would import typing, ~2-3 ms of every `usage`'s start). Its fields:
#   id: str, the record's identity across files (TraceRecord.identity), what duplicates are merged on
#   via: str | None, how the request was known (see importers.claude_code.VIA_PROGRESS)
#   when: float | None; provider, model: str | None
#   platform: str | None, who served it when not the provider's own API (TraceRecord.platform): its prices
#   project: str; session, agent: str | None
#   usage: (fresh input, cache read, 5m write, 1h write, output, reasoning output (part of output)) in tokens;
#          None: the record has no usage
#   error: bool
#   logged: the cost the log itself gives the request (USD; 0.0 when none): said where kvprobe has no price
UsageRow = namedtuple("UsageRow", ("id", "via", "when", "provider", "model", "platform", "project", "session",
                                   "agent", "usage", "error", "logged"))


def usage_row(record: TraceRecord) -> UsageRow:
    return row_of(record.identity, record.via,
                  record.started_at if record.started_at is not None else record.finished_at,
                  record.provider, record.model, record.platform, project_of(record), record.session,
                  record.agent if record.agent is not None else _client(record),
                  record.usage, record.error is not None, _logged(record))


def row_of(identity: str, via: str | None, when: float | None, provider: str | None, model: str | None,
           platform: str | None, project: str, session: str | None, agent: str | None, usage: dict[str, Any] | None,
           error: bool, logged: float) -> UsageRow:
    """A usage row of these values, `usage` as the provider logged it (an importer that reads rows without
    records makes them here too: `claude_code.usage_rows`)."""
    u = normalize_usage(provider, usage)
    # (fresh input spelled out, not through Usage's two properties: this runs for every request read)
    figures = None if u is None else (
        u.input_tokens - u.cache_read_tokens - u.cache_write_5m_tokens - u.cache_write_1h_tokens,
        u.cache_read_tokens, u.cache_write_5m_tokens, u.cache_write_1h_tokens, u.output_tokens,
        u.reasoning_output_tokens)
    # _make: a named tuple's own __new__ is a Python function, one more call per request read
    return UsageRow._make((identity, via, when, provider, model, platform, project, session, agent, figures, error,
                           logged))


def _logged(record: TraceRecord) -> float:
    """The cost the agent logged for the request (Cline's, OpenHands'), 0.0 when none (most: one look-up)."""
    cost = record.extra.get("logged_cost_usd")
    return 0.0 if cost is None else logged_cost(cost)


def logged_cost(cost: object) -> float:
    """A cost an agent logged, in USD, as a usage row keeps it: a positive number, else 0.0 (none, or no amount:
    a flag, text, an integer past any float)."""
    if cost.__class__ not in (int, float) or not cost > 0:  # type: ignore[operator]
        return 0.0
    try:
        return float(cost)  # type: ignore[arg-type]
    except OverflowError:
        return 0.0


def _client(record: TraceRecord) -> str | None:
    """A captured request's agent, where the trace names no agent: the program `kvprobe capture` ran."""
    client = record.extra.get("client") if record.extra else None
    return client if isinstance(client, str) else None


def summarize(records: Iterable[TraceRecord | UsageRow | Partial], *, book: PriceBook | None = None,
              tz: dt.tzinfo = dt.timezone.utc, since: float | None = None, until: float | None = None) -> UsageSummary:
    """Aggregate usage by every grouping (with per-model breakdowns); price each cell once. A `Partial` among the
    records is what another process summed of the records in its place (`UsageSums.partial`)."""
    sums = UsageSums(book or PriceBook(), tz, since, until)
    sums.add(records)
    return sums.summary()


@dataclass(slots=True)
class Partial:
    """What one process summed of its records, to be added where they would have been (`UsageSums.merge`)."""

    cells: dict[tuple, list[int]]
    first: float | None
    last: float | None
    without_usage: int
    unknown_models: set[str]
    notes: list[str]  # the book's notes, in the order they were made


class UsageSums:
    """The cells `summarize` adds records into, and what it prices them into at the end."""

    def __init__(self, book: PriceBook, tz: dt.tzinfo = dt.timezone.utc, since: float | None = None,
                 until: float | None = None) -> None:
        self.book, self.since, self.until = book, since, until
        self.pricer = GroupPricer(book)
        self.calendar = _Calendar(tz)
        self.cells: dict[tuple, list[int]] = {}
        self.first: float | None = None
        self.last: float | None = None
        self.without_usage = 0
        # (provider, model, platform, UTC day) -> (price period day, tier starts, model label): one look-up per
        # request instead of three
        self.periods: dict[tuple, tuple[int | None, tuple[int, ...], str]] = {}

    def add(self, records: Iterable[TraceRecord | UsageRow | Partial]) -> None:
        # (this loop runs in the parent for every request of every process: locals, no attribute look-ups)
        book, pricer, calendar, cells, periods = self.book, self.pricer, self.calendar, self.cells, self.periods
        since, until = self.since, self.until
        first, last, without_usage = self.first, self.last, self.without_usage
        windowed = since is not None or until is not None
        for item in records:
            if item.__class__ is UsageRow:
                row = item
            elif item.__class__ is Partial:
                self.first, self.last, self.without_usage = first, last, without_usage
                self.merge(item)
                first, last, without_usage = self.first, self.last, self.without_usage
                continue
            else:
                row = usage_row(item)
            when = row.when
            if windowed and not _in_window(when, since, until):
                continue
            u = row.usage
            if u is None:
                without_usage += 1
                continue
            fresh, read, w5m, w1h, out, reasoning = u
            if when is not None:
                first = when if first is None or when < first else first
                last = when if last is None or when > last else last
            model = row.model
            day = int(when // 86400) if when is not None and model else None
            platform = row.platform
            period = periods.get((row.provider, model, platform, day))
            if period is None:
                uday = book.period_day(row.provider, model, day, platform) if day is not None else None
                period = periods[(row.provider, model, platform, day)] = \
                    (uday, pricer.tier_starts(row.provider, model, uday, platform), model_label(model, platform))
            uday, starts, label = period
            tier = bisect_left(starts, fresh + read + w5m + w1h) if starts else 0  # starts the total is above
            key = (*calendar.keys(when), row.project, row.session or "(none)", row.agent or "(none)",
                   label, row.provider, model, platform, uday, tier)
            acc = cells.get(key)
            if acc is None:
                acc = cells[key] = [0, 0, 0, 0, 0, 0, 0, 0, 0.0]
            # the indices are _FRESH, _READ, _W5M, _W1H, _OUT, _REASON, _REQS, _ERRS, _LOGGED, as literals (no global
            # look-ups)
            acc[0] += fresh
            acc[1] += read
            acc[2] += w5m
            acc[3] += w1h
            acc[4] += out
            acc[5] += reasoning
            acc[6] += 1
            acc[7] += row.error
            acc[8] += row.logged
        self.first, self.last, self.without_usage = first, last, without_usage

    def partial(self) -> Partial:
        return Partial(self.cells, self.first, self.last, self.without_usage, set(self.book.unknown_models),
                       list(self.book.notes))

    def merge(self, other: Partial) -> None:
        """Add what another process summed, as if its records came here now: its cells after these (the order
        the cells are priced and added up in), its book's notes after these (each once)."""
        cells = self.cells
        for key, acc in other.cells.items():
            mine = cells.get(key)
            if mine is None:
                cells[key] = list(acc)
            else:
                for k, n in enumerate(acc):
                    mine[k] += n
        if other.first is not None and (self.first is None or other.first < self.first):
            self.first = other.first
        if other.last is not None and (self.last is None or other.last > self.last):
            self.last = other.last
        self.without_usage += other.without_usage
        self.book.unknown_models.update(other.unknown_models)
        self.book.notes.extend(n for n in other.notes if n not in self.book.notes)

    def summary(self) -> UsageSummary:
        summary = UsageSummary()
        summary.without_usage = self.without_usage
        summary.first_at, summary.last_at = self.first, self.last
        _price(self.cells, self.pricer, summary)
        summary.unknown_models, summary.price_notes = set(self.book.unknown_models), list(self.book.notes)
        return summary


def _price(cells: dict[tuple, list[int]], pricer: GroupPricer, summary: UsageSummary) -> None:
    for key, acc in cells.items():
        provider, model, platform, day, tier = key[-5:]
        rates = pricer.rates(provider, model, day, tier, platform)
        cost = tuple(r * n for r, n in zip(rates, acc[:5])) if rates is not None else None
        model_key = key[len(GROUPINGS) - 1]
        if not model and provider != "local":
            summary.without_model += acc[_REQS]
        if rates is None:
            summary.logged_unpriced_usd += acc[_LOGGED]
        summary.totals.add_cell(acc, cost)
        _model_row(summary.totals.models, model_key, model, platform).add_cell(acc, cost)
        for grouping, row_key in zip(GROUPINGS, key):
            row = summary.by[grouping].get(row_key)
            if row is None:
                row = summary.by[grouping][row_key] = Totals(model_id=model, platform=platform) \
                    if grouping == "model" else Totals()
            row.add_cell(acc, cost)
            if grouping != "model":
                _model_row(row.models, model_key, model, platform).add_cell(acc, cost)


def _model_row(models: dict[str, Totals], label: str, model: str | None, platform: str | None) -> Totals:
    row = models.get(label)
    if row is None:
        row = models[label] = Totals(model_id=model, platform=platform)
    return row
