"""`kvprobe lint REQUEST|TRACE...`: catch cache breakers in request bodies and traces before they cost."""
from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

from kvprobe.cli.common import Force, err, fail, out, output_path, print_json, user_errors
from kvprobe.cli.tables import Col, print_table
from kvprobe.checkout import in_repository
from kvprobe.lint import LintResult, lint_paths

_STYLE = {"error": "bold red", "warning": "yellow", "note": "cyan"}
PROGRESS_MIN_BYTES = 20_000_000


class Format(str, enum.Enum):
    table = "table"
    json = "json"
    sarif = "sarif"


class FailOn(str, enum.Enum):
    note = "note"
    warning = "warning"
    error = "error"
    never = "never"


def lint(
    inputs: Annotated[list[Path], typer.Argument(help="Request bodies or trace records (.json), traces (.jsonl)")],
    json_out: Annotated[bool, typer.Option("--json", help="Findings as JSON (same as --format json)")] = False,
    fmt: Annotated[Format, typer.Option("--format", help="table, json, or sarif (SARIF 2.1.0 for GitHub "
                                        "code scanning)")] = Format.table,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the JSON/SARIF here instead "
                                                "of standard output")] = None,
    force: Force = False,
    fail_on: Annotated[FailOn, typer.Option("--fail-on", help="Exit 1 on findings at or above this "
                                            "severity")] = FailOn.error,
    skip_non_requests: Annotated[bool | None, typer.Option(
        "--skip-non-requests/--no-skip-non-requests",
        help="Name a file that is not a request body, trace or agent log as skipped and lint the others (the "
             "default with several files; the pre-commit hook's setting) instead of exit 2")] = None,
) -> None:
    """Check request bodies (any supported API) or every request of traces for what breaks prompt caching:
    volatile text before the last breakpoint, breakpoints missing, too many or below the minimum, tools or
    identity parameters that change within a session, history past the lookback window. Files are named
    relative to the repository, from any folder; with several files, one that is not a request is named as
    skipped and the others' findings and exit code stand.

    Example: kvprobe lint traces/sample_session.jsonl --format sarif -o kvprobe.sarif --fail-on warning
    """
    chosen = Format.json if json_out else fmt
    if output is not None and chosen is Format.table:
        fail("--output writes JSON or SARIF: add --format json or --format sarif")
    with user_errors():
        if output is not None:  # checked before any work: never an input, never replaced without --force
            output = output_path(output, inputs, force=force)
        result = _lint(inputs, chosen is Format.table or output is not None, skip_non_requests)
    if chosen is Format.table:
        render(result)
    else:
        data = result.to_json() if chosen is Format.json else result.to_sarif()
        if chosen is Format.sarif:
            _say_left_out(result)
        _say_skipped(result)
        if output is None:
            print_json(data)
        else:
            _write(output, data)
    if fail_on is not FailOn.never and result.at_or_above(fail_on.value):
        raise typer.Exit(1)


def _lint(inputs: list[Path], show_progress: bool, skip: bool | None) -> LintResult:
    total = sum(p.stat().st_size for p in inputs if p.is_file())
    if not show_progress or total < PROGRESS_MIN_BYTES:
        return lint_paths(list(inputs), skip_bad=skip)
    columns = (TextColumn("linting"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("lint", total=total)
        return lint_paths(list(inputs), progress=lambda n: bar.advance(task, n), skip_bad=skip)


def _say_left_out(result: LintResult) -> None:
    from kvprobe.lint.sarif import outside

    left = outside(result)
    if left:
        err.print(f"note: {_plural(len(left), 'finding')} in files outside the repository (e.g. "
                  f"{left[0].subject.source}) left out of the SARIF: code scanning places results on files of the "
                  "checkout only (--format json has them)", markup=False, highlight=False, soft_wrap=True)


def _say_skipped(result: LintResult) -> None:
    """JSON and SARIF go to stdout or a file: the skipped files are named on stderr."""
    for s in result.inputs:
        if s.skipped:
            err.print(f"warning: {shown(s.file)}: skipped, not linted: {s.skipped}", markup=False, highlight=False,
                      soft_wrap=True)


def _write(path: Path, data: dict) -> None:
    """Whole file or nothing (temp file beside it, renamed when complete)."""
    import orjson

    from kvprobe.output import write_bytes_atomic

    with user_errors():
        write_bytes_atomic(path, orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")


def shown(source: str) -> str:
    """A file as the repository names it (from any working directory), else as it was given."""
    return in_repository(source) or source


def _where(f) -> str:
    s = f.subject
    place = f"{shown(s.source)}:{f.region.start_line}" if f.region is not None and s.source else s.id
    if f.region is not None and f.region.start_column:
        place += f":{f.region.start_column}"
    place += f"\n{s.id} (#{s.index})"
    if f.path:
        place += f"\n{f.path}"
    if f.span:
        place += f" [{f.span[0]}:{f.span[1]}]"
    return place


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# the location keeps its end when cut (line:column); the rule's name goes first, the finding wraps
LINT_COLUMNS = (Col("where", cut="start"), Col("rule"), Col("name", drop=1),
                Col("finding and fix", wrap=True, least=30))


def render(result: LintResult) -> None:
    if not result.findings:
        out.print(Text(f"No findings in {_plural(result.requests, 'request')}.", style="green"))
        _render_inputs(result)
        return
    rows = []
    for f in result.findings:
        finding = Text(f.message)
        if f.snippet:
            finding.append(f"\n{f.snippet}", style="dim")
        finding.append(f"\nfix: {f.fix}", style="cyan")
        if f.repeats:
            finding.append(f"\n(repeats in {_plural(f.repeats, 'later request')})", style="dim")
        rule = Text(f.rule.id)
        rule.append(f"\n{f.severity}", style=_STYLE[f.severity])
        rows.append([_where(f), rule, f.rule.name, finding])
    print_table(None, LINT_COLUMNS, rows, spaced=True)
    counts = ", ".join(_plural(n, sev) for sev, n in result.counts().items() if n)
    out.print(Text(f"{_plural(len(result.findings), 'finding')} in {_plural(result.requests, 'request')}: "
                   f"{counts}", style="bold"))
    _render_inputs(result)


def _render_inputs(result: LintResult) -> None:
    for s in result.inputs:
        if s.skipped:
            out.print(Text(f"{shown(s.file)}: skipped, not linted: {s.skipped}", style="yellow"), soft_wrap=True)
        if s.usage_only:
            out.print(Text(f"{shown(s.file)}: {s.usage_only} records have usage only (no request body): not linted",
                           style="yellow"), soft_wrap=True)
        if s.skipped_lines:
            out.print(Text(f"{shown(s.file)}: {s.skipped_lines} malformed lines skipped; first: {s.errors[0]}",
                           style="yellow"), soft_wrap=True)
