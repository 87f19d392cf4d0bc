"""`kvprobe usage [PATH...]`: tokens by class, cache hit ratio and cost of agent logs, by day, week, month,
project, session, agent or model, with a per-model breakdown of every row."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from kvprobe.cli.common import fail, out, print_json, user_errors
from kvprobe.cli.import_cmd import byte_progress, report_skips
from kvprobe.cli.tables import Col, print_table, sub_row
from kvprobe.cli.usage_data import collect, day_bound, zone_of
from kvprobe.economics.bill_words import COLUMN_NAMES
from kvprobe.errors import InputError
from kvprobe.importers import FORMATS, ImportReport, default_sources
from kvprobe.importers.summary import GROUPINGS, Totals, UsageSummary
from kvprobe.wording import plural, show, usd


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
        fail(f"field '--by': expected one of {', '.join(GROUPINGS)}, got {show(by)}")
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
        _require_records(report, sources)
        _require_requests(summary, report, {"--since": since, "--until": until})
    if json_out:
        print_json({**summary.to_json(), "import": report.to_json()})
        return
    render(summary, by, breakdown, in_usd, sources)
    out.print(Text(f"Why it cost this: kvprobe report {' '.join(sources) if paths else _found_hint(sources)}"
                   " names each cache miss's cause, what it cost and what to do.", style="dim"))
    report_skips(report)


def _found_hint(sources: list[str]) -> str:
    """The folder to name in the hint when none was given: the one found, or the first of those found."""
    home = str(Path("~").expanduser())
    shown = ["~" + s[len(home):] if s.startswith(home + "/") else s for s in sources]
    return shown[0] if len(shown) == 1 else f"FOLDER (one of: {', '.join(shown[:3])}{', …' if len(shown) > 3 else ''})"


DEFAULT_PLACES = ("~/.claude/projects and ~/.config/claude/projects (or $CLAUDE_CONFIG_DIR), ~/.codex/sessions "
                  "(or $CODEX_HOME), ~/.gemini/tmp (or $GEMINI_DATA_DIR), ~/.qwen/projects (or $QWEN_DATA_DIR), "
                  "~/.local/share/opencode (or $OPENCODE_DATA_DIR), ~/.kimi/sessions (or $KIMI_SHARE_DIR), "
                  "~/.copilot/otel (or $COPILOT_OTEL_FILE_EXPORTER_PATH), ~/.cline/data (or $CLINE_DIR) and the "
                  "Cline, Roo Code and Kilo Code extensions' storage, ~/.openhands/conversations (or "
                  "$OPENHANDS_CONVERSATIONS_DIR), ~/.vibe/logs/session/unified (or $VIBE_HOME)")


def _require_records(report: ImportReport, sources: list[str]) -> None:
    """No request in any log is an empty input (exit 2, as for `report`), said with where kvprobe looked
    (requests read but none inside --since/--until: `_require_requests`)."""
    if report.records:
        return
    files = len(report.sources)
    if files:  # what was skipped in them, and why
        report_skips(report)
    from kvprobe.agents import profiles  # (here: the agents whose logs are read, named from their profiles)

    agents = ", ".join(sorted({profile.name for profile in profiles().values()}))
    raise InputError(f"no requests found in {', '.join(sources)} ({files} log file{'s' if files != 1 else ''} "
                     f"read): expected agent logs ({agents}), HAR, OpenTelemetry or LiteLLM logs, or kvprobe traces")


def _require_requests(summary, report: ImportReport, window: dict[str, str | None]) -> None:
    """A window that holds none of the requests read is a mistake to report (exit 2), as `report` does."""
    given = [f"{flag} {value}" for flag, value in window.items() if value is not None]
    if given and report.records and not summary.totals.requests:
        raise InputError(f"none of the {report.records:,} requests read is in {' and '.join(given)}",
                         field=given[0].split()[0] if len(given) == 1 else None)


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
    if t.requests and t.unpriced_requests == t.requests:
        return "n/a*"  # nothing of the row could be priced: unknown, never $0
    text = usd(t.cost_usd, 2)  # a Haiku row of 3,000 written tokens reads $0.0037, not $0.00
    return text + "*" if t.unpriced_requests else text


# the --usd columns: report's bill classes (COLUMN_NAMES) as indices of Totals.class_usd; narrow, fresh goes first
_USD_INDEX = {"read": 1, "write_5m": 2, "write_1h": 3, "fresh": 0, "output": 4}
_USD_DROP = {"read": None, "write_5m": 5, "write_1h": 6, "fresh": 2, "output": 3}


def _usd_cells(t: Totals, digits: int) -> list[str]:
    return [f"{t.requests:,}"] + [usd(t.class_usd[_USD_INDEX[cls]], digits) for cls, _ in COLUMN_NAMES] + \
        [_ratio(t), _cost(t)]


def _cells(t: Totals, reasoning: bool) -> list[str]:
    u = t.usage
    cells = [f"{t.requests:,}", _n(u.input_tokens), _n(u.cache_read_tokens), _n(u.cache_write_tokens),
             _n(u.fresh_input_tokens), _n(u.output_tokens)]
    if reasoning:
        cells.append(_n(t.reasoning_output_tokens))
    return cells + [_ratio(t), _cost(t)]


def _session_titles(sources: list[str], sessions: list[str]) -> dict[str, str]:
    """The titles of the sessions a table shows, from their logs (for a terminal row a person recognises; the
    JSON keeps the ids): each session's log found by its name (Claude Code's <session>.jsonl, a Codex rollout
    ending in its id, a Cline task's folder), read only for the rows shown."""
    from kvprobe.importers import discover
    from kvprobe.importers.titles import SessionTitles, shorten

    wanted = set(sessions)
    found: dict[str, list[str]] = {}
    for path in discover(sources):
        for key in (path.stem, path.stem[-36:], path.parent.name):
            if key in wanted and key not in found and path.parent.name != "subagents":
                found[key] = [str(path)]
    titles = SessionTitles(found)
    return {s: shorten(t) for s in sessions if (t := titles.get(s))}


def render(summary: UsageSummary, by: str, breakdown: bool = False, in_usd: bool = False,
           sources: list[str] | None = None) -> None:
    total = summary.totals
    reasoning = total.reasoning_output_tokens > 0 and not in_usd  # a column only when some log reports them
    # (header, drop order: None = always shown). Narrow, the detail goes first: reasoning (a part of output),
    # fresh input, output, the request count; what the cache did and cost (read, write, hit, cost) stays
    names = [("reqs", 4), ("input", 5), ("read", None), ("write", 6), ("fresh", 2), ("output", 3)] + \
        ([("reasoning", 1)] if reasoning else []) + [("hit", None), ("cost", None)]
    digits = 2 if total.cost_usd >= 1 else 4  # cents on a real bill (report's bill does the same)
    cells = (lambda t: _cells(t, reasoning)) if not in_usd else (lambda t: _usd_cells(t, digits))
    if in_usd:
        names = [("reqs", 4)] + [(name, _USD_DROP[cls]) for cls, name in COLUMN_NAMES] + [("hit", None),
                                                                                            ("cost", None)]
    # row labels stay on one line; a path (project) too long for any layout keeps its end
    cols = [Col(by, footer="Total", cut="start" if by == "project" else "end")] + [Col(name, "right", footer=footer, drop=drop)
                                                    for (name, drop), footer in zip(names, cells(total))]
    rows: list[list[str | Text]] = []
    shown = summary.rows(by)
    named = _session_titles(sources, [k for k, _ in shown]) if by == "session" and sources else {}
    for key, t in shown:
        rows.append([named.get(key, key), *cells(t)])
        if breakdown and by != "model":
            for model, m in t.ranked_models():
                rows.append([Text(sub_row(model), style="dim"),
                             *(Text(cell, style="dim") for cell in cells(m))])
    print_table(f"Usage by {by}", cols, rows)
    if summary.unknown_models:
        out.print(f"* no price known for: {', '.join(sorted(summary.unknown_models))} (use --price-file)",
                  markup=False)
    if summary.logged_unpriced_usd:
        out.print(f"* the logs' own cost for the requests not priced: {usd(summary.logged_unpriced_usd, 2)} "
                  "(the agent's estimate, not a bill; not in the table's cost)", markup=False)
    if summary.without_model:
        out.print(f"* {plural(summary.without_model, 'request')} name no model (the log does not say which): "
                  "unpriced (a --price-file prices models by name)", markup=False)
    for note in summary.price_notes:
        out.print(f"* {note}", markup=False)
    if summary.without_usage:
        out.print(f"{plural(summary.without_usage, 'request')} logged no usage (a failed call, or a stream sent "
                  "without stream_options.include_usage): counted in the import, not in the table", markup=False)
