"""`kvprobe html TRACE... -o report.html`: the whole report as one self-contained HTML page."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvprobe.cli.common import Force, out, output_path, print_json, user_errors
from kvprobe.pricing import PriceBook
from kvprobe.cli.report_cmd import require_requests
from kvprobe.cli.usage_data import zone_of
from kvprobe.report import Filters, Report, build_report
from kvprobe.trace.record import parse_since

Traces = Annotated[list[Path], typer.Argument(help="Trace files (JSONL)")]
Session = Annotated[str | None, typer.Option("--session", help="Only this session")]
Agent = Annotated[str | None, typer.Option("--agent", help="Only this agent")]
Since = Annotated[str | None, typer.Option("--since", help="Only requests started at/after (RFC 3339)")]
PriceFile = Annotated[Path | None, typer.Option("--price-file", help="TOML/JSON price overrides")]
Title = Annotated[str | None, typer.Option("--title", help="Page/chart title (default: the trace names)")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print what was written as JSON")]


def load_report(traces: list[Path], session: str | None, agent: str | None, since: str | None,
                prices: PriceBook, fixes: bool | None = None) -> Report:
    """The report both `html` and `plot` draw (library errors propagate to `user_errors`)."""
    start = parse_since(since, "--since")
    rep = build_report(traces, filters=Filters(session, agent, start), prices=prices, fixes=fixes)
    # an empty input or filters that match nothing: exit 2 and write nothing, as `report` does
    require_requests(rep, traces, {"--session": session, "--agent": agent, "--since": since})
    return rep


def html(
    traces: Traces,
    output: Annotated[Path, typer.Option("--output", "-o", help="HTML file to write")] = Path("report.html"),
    session: Session = None, agent: Agent = None, since: Since = None, price_file: PriceFile = None,
    title: Title = None,
    what_if: Annotated[bool, typer.Option("--what-if", help="Compute fixes (the default at every size; kept for scripts)")] = False,
    no_fixes: Annotated[bool, typer.Option("--no-fixes", help="Skip the what-if fixes")] = False,
    json_out: JsonOut = False,
    force: Force = False,
    tz: Annotated[str, typer.Option("--tz", help="Time zone of the requests table: local, UTC or an IANA name "
                                    "(Europe/Paris); the chart's axis stays in UTC")] = "local",
) -> None:
    """Write the report as one self-contained HTML page (no network needed to view it).

    The page leads with the money: what was spent, what the misses of each cause wasted, what each fix
    saves. Then a timeline chart in dollars or tokens (cache read / write / fresh per request, misses marked
    with their cause, idle gaps, TTL expiries, concurrent starts, a lane per agent), the fixes, the costliest
    blocks, the costliest misses and every request. Trace text is escaped; a Content-Security-Policy blocks any
    network access.

    Example: kvprobe html traces/sample_session.jsonl -o report.html
    """
    from kvprobe.render import write_html

    with user_errors():
        output = output_path(output, [*traces, *([price_file] if price_file else [])], force=force)
        fixes = False if no_fixes else (True if what_if else None)
        prices = PriceBook.from_file(price_file)
        zone = zone_of(tz)
        rep = load_report(traces, session, agent, since, prices, fixes)
        size = write_html(rep, output, title, prices, zone)
    info = {"output": str(output), "bytes": size, "requests": len(rep.results), "fixes": len(rep.fixes)}
    if json_out:
        print_json(info)
    else:
        out.print(f"wrote {output} ({len(rep.results):,} requests, {len(rep.fixes)} fixes, {size / 1024:,.0f} KiB)")
