"""Values in sentences a user reads: JSON or words, never Python reprs (`None`, `{'type': 'any'}`)."""
from __future__ import annotations

import datetime as dt
import json
import math

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

MAX_CHARS = 60


def show(value: Any, limit: int | None = MAX_CHARS, quote: bool = True) -> str:
    """`"auto"`, `{"type": "any"}`, `3`, `true` — or "not set" for a missing value.

    quote=False prints a string as it is (a table cell); limit=None never shortens.
    """
    if value is None:
        return "not set"
    if isinstance(value, str):  # shorten inside the quotes, so a cut string still reads as one
        if limit is not None and len(value) > limit - 2:
            value = value[: limit - 3] + "…"
        return value if not quote else json.dumps(value, ensure_ascii=False)
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def duration(seconds: float) -> str:
    """Short human duration: 45s, 7m00s, 2h05m, 3d04h."""
    s = int(round(abs(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 2 * 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def percent(fraction: float) -> str:
    """A fraction as a percentage with one decimal: 0.399 is 39.9%."""
    return f"{100 * fraction:.1f}%"


def round_usd(value: float | None) -> float | None:
    """A dollar figure as JSON carries it: to the millionth, None (unknown) kept."""
    return None if value is None else round(value, 6)


def plural(n: int, word: str) -> str:
    """A count with its noun: 1 request, 3,150 requests."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def usd(value: float | None, digits: int = 4) -> str:
    """Dollars for a person: `digits` decimals ($0.0706), and an amount too small for them in two significant
    digits ($0.0038 where two decimals would say $0.00): a cost that is not zero never reads as zero. None
    (kvprobe could not price it) is n/a, never $0."""
    if value is None:
        return "n/a"
    size = abs(value)
    if size and size < 0.5 * 10 ** -digits:
        digits = 1 - math.floor(math.log10(size))
    return f"{'-' if value < 0 else ''}${size:,.{digits}f}"


def reach(sessions: int, sessions_with_cause: int, edited_requests: int) -> str:
    """How far a fix reaches: `3 of 4 sessions, 12 requests edited` (every fix, in every output)."""
    total = max(sessions_with_cause, sessions)
    return f"{sessions:,} of {plural(total, 'session')}, {plural(edited_requests, 'request')} edited"


def reach_of(value: Any) -> str:
    """A fix's `reach` as the report's JSON holds it, in words (its own text when it has one): never the raw
    object."""
    if isinstance(value, dict):
        if isinstance(value.get("text"), str):
            return value["text"]
        counts = [value.get(k) for k in ("sessions", "sessions_with_cause", "edited_requests")]
        if all(isinstance(c, int) for c in counts):
            return reach(*counts)  # type: ignore[arg-type]
    if value is None:
        return ""
    return value if isinstance(value, str) else show(value, limit=None)


def sources(names: list[str], shown: int = 3) -> str:
    """What a report covers, for its title: `trace.jsonl`, `a.jsonl, b.jsonl and 4 more`."""
    if not names:
        return "no input"
    head = ", ".join(names[:shown])
    return head if len(names) <= shown else f"{head} and {len(names) - shown:,} more"


def short_id(value: str, keep: int = 8) -> str:
    """A long id (a session UUID, a message id) cut to what tells it apart at a glance: `3f2b9c1e…`."""
    return value if len(value) <= keep + 2 else value[:keep] + "…"


def zone_name(zone: dt.tzinfo, when: float) -> str:
    """A time zone as a legend names it: its IANA key when it has one, else its abbreviation (UTC, CET)."""
    return getattr(zone, "key", None) or dt.datetime.fromtimestamp(when, zone).tzname() or "local time"
