"""What `kvprobe usage` prints on a terminal or a pipe: the table of usage by day, week, month, project,
session, agent or model, the notes under it, where to look next, and what was read and skipped. Neither
Typer nor rich is imported to print it off a terminal (cli/table_layout.py, cli/plainout.py): the command
(cli/usage_cmd.py) and its fast path (cli/fastusage.py) print it the same way."""
from __future__ import annotations

import sys
from pathlib import Path

from kvprobe.cli import plainout, table_layout
from kvprobe.cli.import_view import report_skips
from kvprobe.cli.plainout import Line
from kvprobe.cli.table_layout import Col, sub_row
from kvprobe.economics.bill_words import COLUMN_NAMES
from kvprobe.errors import InputError
from kvprobe.wording import plural, usd

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from kvprobe.importers import ImportReport
    from kvprobe.importers.summary import Totals, UsageSummary


def require_requests(summary: UsageSummary, report: ImportReport, sources: list[str],
                     window: dict[str, str | None]) -> None:
    """InputError (exit 2) where there is nothing to show: no request in any log (an empty input, as for
    `report`: said with where kvprobe looked, after what was skipped in the files read), or a --since/--until
    window that holds none of the requests read."""
    if not report.records:
        files = len(report.sources)
        if files:  # what was skipped in them, and why
            report_skips(report)
        from kvprobe.agents import profiles  # (here: the agents whose logs are read, named from their profiles)

        agents = ", ".join(sorted({profile.name for profile in profiles().values()}))
        raise InputError(f"no requests found in {', '.join(sources)} ({files} log file{'s' if files != 1 else ''} "
                         f"read): expected agent logs ({agents}), HAR, OpenTelemetry or LiteLLM logs, or kvprobe "
                         "traces")
    given = [f"{flag} {value}" for flag, value in window.items() if value is not None]
    if given and not summary.totals.requests:
        raise InputError(f"none of the {report.records:,} requests read is in {' and '.join(given)}",
                         field=given[0].split()[0] if len(given) == 1 else None)


def show(summary: UsageSummary, report: ImportReport, by: str, breakdown: bool, in_usd: bool, sources: list[str],
         named: bool) -> None:
    """Everything `usage` prints without --json: the table and its notes, where to look next (`named`: the
    sources were named on the command line), then on stderr what was read and skipped."""
    render(summary, by, breakdown, in_usd, sources)
    _say(f"Why it cost this: kvprobe report {' '.join(sources) if named else _found_hint(sources)} names each "
         "cache miss's cause, what it cost and what to do.", style="dim")
    report_skips(report)


def _found_hint(sources: list[str]) -> str:
    """The folder to name in the hint when none was given: the one found, or the first of those found."""
    home = str(Path("~").expanduser())
    shown = ["~" + s[len(home):] if s.startswith(home + "/") else s for s in sources]
    return shown[0] if len(shown) == 1 else f"FOLDER (one of: {', '.join(shown[:3])}{', …' if len(shown) > 3 else ''})"


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
    from kvprobe.importers.titles import SessionTitles, shorten  # (here: only a table of sessions reads titles)

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
    rows: list[tuple[list[str], bool]] = []  # (cells, whether the row details the one above: a model's)
    shown = summary.rows(by)
    named = _session_titles(sources, [k for k, _ in shown]) if by == "session" and sources else {}
    for key, t in shown:
        rows.append(([named.get(key, key), *cells(t)], False))
        if breakdown and by != "model":
            rows.extend(([model, *cells(m)], True) for model, m in t.ranked_models())
    _print_table(f"Usage by {by}", cols, rows)
    if summary.unknown_models:
        _say(f"* no price known for: {', '.join(sorted(summary.unknown_models))} (use --price-file)")
    if summary.logged_unpriced_usd:
        _say(f"* the logs' own cost for the requests not priced: {usd(summary.logged_unpriced_usd, 2)} "
             "(the agent's estimate, not a bill; not in the table's cost)")
    if summary.without_model:
        _say(f"* {plural(summary.without_model, 'request')} name no model (the log does not say which): "
             "unpriced (a --price-file prices models by name)")
    for note in summary.price_notes:
        _say(f"* {note}")
    if summary.without_usage:
        _say(f"{plural(summary.without_usage, 'request')} logged no usage (a failed call, or a stream sent "
             "without stream_options.include_usage): counted in the import, not in the table")


def _print_table(title: str, cols: list[Col], rows: list[tuple[list[str], bool]]) -> None:
    """The table: off a terminal written without rich where that gives rich's bytes (cli/table_layout.py),
    else through rich, a model's row under its row dim and on a branch."""
    width = plainout.plain_target()
    if width is not None and table_layout.write_plain(
            title, cols, [[sub_row(cells[0], plain=True), *cells[1:]] if detail else cells for cells, detail in rows],
            width, sys.stdout):
        return
    from rich.text import Text

    from kvprobe.cli import tables

    tables.print_table(title, cols, [[Text(tables.sub_row(cells[0]), style="dim"),
                                      *(Text(cell, style="dim") for cell in cells[1:])] if detail else cells
                                     for cells, detail in rows])


def _say(text: str, style: str = "") -> None:
    """A line on standard output, as the console prints it (written without rich where that is the same)."""
    if plainout.write([Line([(text, None)], style=style)]):
        return
    from rich.text import Text

    from kvprobe.cli.console import out

    out.print(Text(text, style=style))
