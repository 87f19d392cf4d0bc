"""`kvprobe usage [PATH...]`: tokens by class, cache hit ratio and cost of agent logs, by day/session/agent/model."""
from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from kvprobe.cli.common import fail, out, print_json, user_errors
from kvprobe.cli.import_cmd import byte_progress, report_skips
from kvprobe.errors import InputError
from kvprobe.importers import FORMATS, ImportReport, auto_workers, default_sources, load_any
from kvprobe.importers.summary import GROUPINGS, Totals, UsageSummary, resolve_tz, summarize
from kvprobe.pricing import PriceBook
from kvprobe.trace.record import parse_time


def _date(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_time(value if "T" in value else value + "T00:00:00Z")
    except ValueError:
        raise InputError(f"expected a date (2026-09-10) or RFC 3339 time, got {value!r}", field=name) from None


def usage(
    paths: Annotated[list[str] | None, typer.Argument(
        help="Logs or traces (files or directories) [default: ~/.claude/projects and ~/.codex/sessions]")] = None,
    by: Annotated[str, typer.Option("--by", help=f"Rows of the table: {', '.join(GROUPINGS)}")] = "day",
    since: Annotated[str | None, typer.Option("--since", help="Only requests from this date/time on")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Only requests before this date/time")] = None,
    tz: Annotated[str, typer.Option("--tz", help="Time zone for days: UTC, local or an IANA name")] = "UTC",
    fmt: Annotated[str | None, typer.Option("--format", help=f"Force one format: {', '.join(FORMATS)}")] = None,
    price_file: Annotated[str | None, typer.Option("--price-file", help="TOML/JSON price overrides")] = None,
    workers: Annotated[int, typer.Option("--workers", help="Processes parsing files in parallel (0: one per "
                                         "core for inputs over 64 MB)")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Totals and every grouping as JSON")] = False,
) -> None:
    """Summarise what agent logs cost: tokens by class, token hit ratio and USD by day, session, agent, model.

    The hit ratio is Σ cache-read tokens ÷ Σ all input tokens.

    Example: kvprobe usage ~/.claude/projects --by session --since 2026-09-01
    """
    if by not in GROUPINGS:
        fail(f"field '--by': expected one of {', '.join(GROUPINGS)}, got {by!r}")
    report = ImportReport()
    with user_errors():
        zone = _zone(tz)
        start, end = _date(since, "--since"), _date(until, "--until")
        sources = list(paths or [str(p) for p in default_sources()])
        if not sources:
            fail("no logs found in ~/.claude/projects or ~/.codex/sessions: name a file or directory")
        book = PriceBook.from_file(price_file)
        with byte_progress(sources, "reading", not json_out) as progress:
            records = load_any(sources, fmt=fmt, report=report, progress=progress,
                               workers=workers if workers > 0 else auto_workers(sources))
            summary = summarize(records, book=book, tz=zone, since=start, until=end)
    if json_out:
        print_json({**summary.to_json(), "import": report.to_json()})
        return
    render(summary, by)
    report_skips(report)


def _zone(tz: str):
    try:
        return resolve_tz(tz)
    except Exception:
        raise InputError(f"unknown time zone {tz!r}", field="--tz") from None


def _ratio(t: Totals) -> str:
    r = t.token_hit_ratio
    return f"{r:.1%}" if r is not None else "-"


def _n(tokens: int) -> str:
    """Token counts that fit a terminal: 812, 45.3k, 12.1M, 3.40B."""
    for limit, suffix in ((1e9, "B"), (1e6, "M"), (1e4, "k")):
        if abs(tokens) >= limit:
            value = tokens / (limit if suffix != "k" else 1e3)
            return f"{value:.2f}{suffix}" if value < 10 else f"{value:.1f}{suffix}"
    return f"{tokens:,}"


def _cost(t: Totals) -> str:
    text = f"${t.cost_usd:,.2f}"
    return text + "*" if t.unpriced_requests else text


def render(summary: UsageSummary, by: str) -> None:
    table = Table(title=f"Usage by {by}", title_justify="left", show_footer=True)
    total = summary.totals
    columns = [(by, "Total"), ("reqs", f"{total.requests:,}"), ("input", _n(total.usage.input_tokens)),
               ("read", _n(total.usage.cache_read_tokens)), ("write", _n(total.usage.cache_write_tokens)),
               ("fresh", _n(total.usage.fresh_input_tokens)), ("output", _n(total.usage.output_tokens)),
               ("hit", _ratio(total)), ("cost", _cost(total))]
    for i, (name, footer) in enumerate(columns):
        if i == 0:
            widest = max((len(key) for key, _ in summary.rows(by)), default=10)
            table.add_column(name, footer=footer, min_width=min(max(widest, 10), 40), overflow="fold")
        else:
            table.add_column(name, footer=footer, justify="right", no_wrap=True)
    for key, t in summary.rows(by):
        u = t.usage
        table.add_row(key, f"{t.requests:,}", _n(u.input_tokens), _n(u.cache_read_tokens),
                      _n(u.cache_write_tokens), _n(u.fresh_input_tokens), _n(u.output_tokens), _ratio(t), _cost(t))
    out.print(table)
    if summary.unknown_models:
        out.print(f"* no price known for: {', '.join(sorted(summary.unknown_models))} (use --price-file)",
                  markup=False)
