"""`kvprobe import SRC... -o trace.jsonl`: turn the logs people already have into a kvprobe trace."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvprobe.cli.common import Force, err, output_path, print_json, user_errors
from kvprobe.cli.import_view import byte_progress, report_skips
from kvprobe.errors import InputError
from kvprobe.importers import FORMATS, ImportReport, discover, load_any
from kvprobe.trace import write_trace


def import_(
    sources: Annotated[list[str], typer.Argument(help="Files or directories: HAR, Claude Code or Codex "
                                                  "JSONL, OTLP JSON spans, LiteLLM logs, kvprobe traces")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Trace file to write (JSON Lines, written "
                                         "atomically)")] = Path("trace.jsonl"),
    fmt: Annotated[str | None, typer.Option("--format", help=f"Force one format: {', '.join(FORMATS)}")] = None,
    redact: Annotated[bool, typer.Option("--redact", help="Scrub API keys, tokens and cloud credentials "
                                         "inside request and response bodies")] = False,
    hash_only: Annotated[bool, typer.Option("--hash-only", help="Store digests and token counts instead of "
                                            "prompt text (diff and report still work)")] = False,
    workers: Annotated[int, typer.Option("--workers", help="Processes parsing files in parallel (0: one per "
                                         "core for inputs over 64 MB)")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print what was read as JSON")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show example skipped lines")] = False,
    force: Force = False,
    out_alias: Annotated[Path | None, typer.Option("--out", hidden=True)] = None,
) -> None:
    """Convert agent logs and HTTP archives into one kvprobe trace, sorted by start time.

    Malformed lines are skipped and counted by reason. A request logged twice is kept once.

    Example: kvprobe import ~/.claude/projects/-home-me-app session.har -o trace.jsonl
    """
    report = ImportReport()
    with user_errors():
        target = output_path(None if out_alias else output, discover(sources), force=force, alias=out_alias)
        with byte_progress(sources, "importing", not json_out) as progress:
            records = list(load_any(sources, fmt=fmt, report=report, progress=progress,
                                    workers=max(workers, 0)))
        if not records:
            if report.sources:  # say what was read and skipped before saying nothing came of it
                report_skips(report, verbose)
            raise InputError("no records found: nothing to import (no file written)",
                             file=", ".join(map(str, sources)))
        records.sort(key=lambda r: (r.started_at is None, r.started_at or 0.0))
        if redact or hash_only:
            from kvprobe.capture.redact import scrub  # here: `kvprobe usage` shares this module, not the proxy

            for record in records:
                scrub(record, redact=redact, hash_only=hash_only)
        written = write_trace(target, records)
    if json_out:
        print_json({"out": str(target), "written": written, **report.to_json()})
        return
    report_skips(report, verbose)
    err.print(f"wrote {written:,} records to {target}", markup=False)
