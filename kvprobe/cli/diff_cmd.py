"""`kvprobe diff A B`: where B's prefix first differs from A's, and what that costs B."""
from __future__ import annotations

from typing import Annotated

import typer

from kvprobe.cli.common import user_errors
from kvprobe.cli.diff_view import answer, compare


def diff(
    a: Annotated[str, typer.Argument(help="Request A: body.json, record.json, trace.jsonl or trace.jsonl#ID")],
    b: Annotated[str, typer.Argument(help="Request B, in the same forms")],
    json_out: Annotated[bool, typer.Option(
        "--json", help="The contract JSON (`kvprobe schema diff` describes it)")] = False,
    exit_code: Annotated[bool, typer.Option("--exit-code", help="Exit 1 when B cannot reuse all of A")] = False,
    no_content: Annotated[bool, typer.Option("--no-content", help="Print no prompt content (snippets)")] = False,
) -> None:
    """Show the earliest change between two requests and what B would reuse if A was cached.

    Example: kvprobe diff examples/request_a.json examples/request_b.json
    """
    with user_errors():
        done = compare(a, b)
    answer(done, json_out, no_content)
    if exit_code and done.result.breaks_reuse:
        raise typer.Exit(1)
