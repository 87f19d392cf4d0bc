"""`kvprobe schema [NAME]`: print the JSON Schema of a trace record or of a command's --json output."""
from __future__ import annotations

import sys
from typing import Annotated

import typer

from kvprobe.cli.common import print_json, user_errors
from kvprobe.cli.tables import Col, print_table
from kvprobe.schemas import NAMES, load_schema, schema_text


def schema(
    name: Annotated[str | None, typer.Argument(help=f"One of: {' | '.join(NAMES)}")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Without NAME: the list as JSON")] = False,
) -> None:
    """Print the JSON Schema of a format (each field described in it); without NAME, list them.

    The formats: the trace record, each command's --json output, and the files kvprobe reads (baseline,
    gate-config, price-file, each with an example).

    Example: kvprobe schema trace > trace.schema.json
    """
    with user_errors():
        if name is not None:
            sys.stdout.write(schema_text(name))  # the shipped file byte for byte: JSON either way
            return
        titles = {n: load_schema(n)["title"] for n in NAMES}
    if json_out:
        print_json([{"name": n, "title": t} for n, t in titles.items()])
        return
    print_table("kvprobe schema NAME prints one (JSON Schema 2020-12)", (Col("name"), Col("describes", wrap=True)),
                [[n, t] for n, t in titles.items()])
