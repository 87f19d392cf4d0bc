"""`kvprobe usage [PATH...]`: tokens by class, cache hit ratio and cost of agent logs, by day, week, month,
project, session, agent or model, with a per-model breakdown of every row."""
from __future__ import annotations

from typing import Annotated

import typer

from kvprobe.cli.common import fail, print_json, user_errors
from kvprobe.cli.import_view import byte_progress
from kvprobe.cli.usage_data import collect, day_bound, zone_of
from kvprobe.cli.usage_view import require_requests, show
from kvprobe.importers import FORMATS, ImportReport, default_sources
from kvprobe.importers.summary import GROUPINGS
from kvprobe.wording import show as shown


def usage(
    paths: Annotated[list[str] | None, typer.Argument(
        help="Logs or traces (files or directories) [default: ~/.claude/projects and ~/.codex/sessions, with ~/.gemini/tmp, ~/.qwen/projects, ~/.local/share/opencode, ~/.kimi/sessions, ~/.copilot/otel, Cline's tasks, ~/.openhands/conversations and ~/.vibe where present]")] = None,
    by: Annotated[str, typer.Option("--by", help=f"Rows of the table: {', '.join(GROUPINGS)} "
                                    "(week: from Monday; project: working directory)")] = "day",
    since: Annotated[str | None, typer.Option("--since", help="Only requests from this day (in --tz) or "
                                              "RFC 3339 time on")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Only requests up to this day (included) or "
                                              "before this RFC 3339 time")] = None,
    tz: Annotated[str, typer.Option("--tz", help="Time zone for days: UTC, local or an IANA name")] = "UTC",
    breakdown: Annotated[bool, typer.Option("--breakdown", help="A sub-row per model under each row")] = False,
    in_usd: Annotated[bool, typer.Option("--usd", help="The token classes in dollars: what cache reads, 5m and "
                                         "1h cache writes, fresh input and output cost (report's bill)")] = False,
    fmt: Annotated[str | None, typer.Option("--format", help=f"Force one format: {', '.join(FORMATS)}")] = None,
    price_file: Annotated[str | None, typer.Option("--price-file", help="TOML/JSON price overrides")] = None,
    workers: Annotated[int, typer.Option("--workers", help="Processes parsing files in parallel (0: one per "
                                         "core for inputs over 12 MB)")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Totals and every grouping, each row with its "
                                           "models, as JSON")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Read every file (by default a Claude Code "
                                           "transcript or Codex rollout unchanged since the last run is not read "
                                           "again: its rows are kept in the user's cache)")] = False,
) -> None:
    """Summarise what agent logs cost: tokens by class, token hit ratio and USD by day, week, month, project,
    session, agent or model.

    The hit ratio is Σ cache-read tokens ÷ Σ all input tokens. Reasoning tokens (Codex, OpenAI) are part of
    output and shown apart.

    Example: kvprobe usage ~/.claude/projects --by week --since 2026-09-01 --breakdown
    """
    if by not in GROUPINGS:
        fail(f"field '--by': expected one of {', '.join(GROUPINGS)}, got {shown(by)}")
    report = ImportReport()
    with user_errors():
        zone = zone_of(tz)
        start, end = day_bound(since, "--since", zone), day_bound(until, "--until", zone, end_of_day=True)
        sources = list(paths or [str(p) for p in default_sources()])
        if not sources:
            fail(f"no logs found: looked in {DEFAULT_PLACES}; name a file or directory")
        with byte_progress(sources, "reading", not json_out) as progress:
            summary = collect(sources, report, fmt=fmt, price_file=price_file, workers=workers, zone=zone,
                              since=start, until=end, progress=progress, keep_rows=not no_cache)
        require_requests(summary, report, sources, {"--since": since, "--until": until})
    if json_out:
        print_json({**summary.to_json(), "import": report.to_json()})
        return
    show(summary, report, by, breakdown, in_usd, sources, named=bool(paths))


DEFAULT_PLACES = ("~/.claude/projects and ~/.config/claude/projects (or $CLAUDE_CONFIG_DIR), ~/.codex/sessions "
                  "(or $CODEX_HOME), ~/.gemini/tmp (or $GEMINI_DATA_DIR), ~/.qwen/projects (or $QWEN_DATA_DIR), "
                  "~/.local/share/opencode (or $OPENCODE_DATA_DIR), ~/.kimi/sessions (or $KIMI_SHARE_DIR), "
                  "~/.copilot/otel (or $COPILOT_OTEL_FILE_EXPORTER_PATH), ~/.cline/data (or $CLINE_DIR) and the "
                  "Cline, Roo Code and Kilo Code extensions' storage, ~/.openhands/conversations (or "
                  "$OPENHANDS_CONVERSATIONS_DIR), ~/.vibe/logs/session/unified (or $VIBE_HOME)")
