"""`kvprobe.analyse(...)`: the analysis `kvprobe report` prints, as the `Report` dataclass it renders."""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

from kvprobe.pricing import PriceBook
from kvprobe.report import Filters, Report, build_report
from kvprobe.trace.record import parse_since


def _since(value: str | float | dt.datetime | None) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return parse_since(value, "since")


def analyse(paths: str | Path | Sequence[str | Path], *, session: str | None = None, agent: str | None = None,
           since: str | float | dt.datetime | None = None, prices: PriceBook | None = None,
           price_file: str | Path | None = None, fixes: bool | None = None, top: int = 10) -> Report:
    """Simulate each provider's cache over traces (or agent logs), diagnose every miss and price the task,
    exactly as `kvprobe report` does: `.to_json()` is its `--json` output, `.totals` its total line,
    `.bill` the spend by token class (`.bill.headline` its first line, `.bill.total`, `.bill.groups["model"]`,
    `["project"]`, `["session"]`, `["agent"]`: (key, Split) rows, costliest first; `.bill.titles` the sessions'
    titles), `.misses` the costliest misses, `.fixes` the fixes with their savings, `.blocks` the costliest
    blocks.

    All files are simulated together (ids made unique across them); `session`, `agent` and `since` (RFC
    3339, epoch seconds or a datetime) narrow the requests as the CLI flags do. `fixes`: False skips the
    what-if fixes; True or None (the default) computes them, at any size. Pass the result to `kvprobe.load(...)` for
    every table as DataFrames. (Not `kvprobe.report`: that name is the module `kvprobe/report.py`.) Raises kvprobe.InputError on bad input, naming file, line and field.
    """
    names = [paths] if isinstance(paths, (str, Path)) else list(paths)
    book = prices or PriceBook.from_file(price_file)
    return build_report(names, filters=Filters(session, agent, _since(since)), prices=book, fixes=fixes, top=top)
