"""What `kvprobe usage` reads and adds up, without Typer or rich: the command (cli/usage_cmd.py) and its fast
path (cli/fastusage.py, `usage --json` answered before Typer loads) share it."""
from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable

from kvprobe.errors import InputError
from kvprobe.importers import ImportReport, load_any
from kvprobe.importers.row_cache import RowCache
from kvprobe.importers.row_cache import enabled as row_cache_enabled
from kvprobe.importers.summary import UsageRow, UsageSummary, UsageSums, resolve_tz, summarize, usage_row
from kvprobe.pricing import PriceBook
from kvprobe.trace.record import parse_time
from kvprobe.wording import show


def collect(sources: list[str], report: ImportReport, *, fmt: str | None, price_file: str | None, workers: int,
            zone: dt.tzinfo, since: float | None, until: float | None,
            progress: Callable[[int], None] | None = None, keep_rows: bool = True) -> UsageSummary:
    """Every request of `sources` added up by every grouping (what was read and skipped goes to `report`).
    Read without each request's rebuilt message list (importers' `history`): usage needs none of it.
    `keep_rows`: files unchanged since an earlier run are not read again (importers.row_cache)."""
    book = PriceBook.from_file(price_file)
    cache = _row_cache(sources) if keep_rows and row_cache_enabled() else None
    rows = load_any(sources, fmt=fmt, report=report, progress=progress, workers=max(workers, 0),
                    reduce=usage_row, history=False, fold=lambda: UsageSums(book, zone, since, until), cache=cache)
    return summarize(rows, book=book, tz=zone, since=since, until=until)


def _row_cache(sources: list[str]) -> RowCache | None:
    """The rows kept for these sources; None where no cache folder can be named (no home folder): read all."""
    try:
        return RowCache(UsageRow, sources)
    except (OSError, RuntimeError, KeyError):
        return None


def day_bound(value: str | None, name: str, zone: dt.tzinfo, end_of_day: bool = False) -> float | None:
    """A bound of --since/--until: an RFC 3339 time, or a day (2026-09-10 or 20260910) in the --tz zone.

    A day given to --until includes that whole day, as a reader of "until the 10th" expects.
    """
    if value is None:
        return None
    text = value.strip()
    if len(text) == 8 and text.isdigit():
        text = f"{text[:4]}-{text[4:6]}-{text[6:]}"
    try:
        if "T" in text:
            return parse_time(text)
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise InputError(f"expected a date (2026-09-10) or RFC 3339 time, got {show(value)}", field=name) from None
    if end_of_day:
        if day == dt.date.max:  # through the last day there is: no end
            return math.inf
        day += dt.timedelta(days=1)
    return dt.datetime.combine(day, dt.time(), zone).timestamp()


def zone_of(tz: str) -> dt.tzinfo:
    """--tz (usage, report, html): local, UTC or an IANA name (zoneinfo); an unknown one is a usage error naming
    the flag."""
    try:
        return resolve_tz(tz)
    except Exception:
        raise InputError(f"unknown time zone {show(tz)}: expected local, UTC or an IANA name such as "
                         "Europe/Paris", field="--tz") from None
