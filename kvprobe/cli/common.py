"""What every command shares: consoles, JSON output, and turning library errors into exit codes."""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import orjson
import typer
from rich.console import Console

from kvprobe.errors import InputError, KvprobeError
from kvprobe.output import check_output


def _console(stderr: bool = False) -> Console:
    # rich already drops colours off a terminal; NO_COLOR (no-color.org) drops every style, bold included
    no_color = os.environ.get("NO_COLOR", "") != ""
    console = Console(stderr=stderr, highlight=False, color_system=None if no_color else "auto")
    # off a terminal, sentences stay on one line (grep, CI logs); tables are fitted to the width anyway
    console.soft_wrap = not console.is_terminal
    return console


out = _console()
err = _console(stderr=True)


def plain(console: Console) -> bool:
    """Output for a pipe, a CI log or NO_COLOR: no styles, no box lines."""
    return not console.is_terminal or console.color_system is None


def print_json(data: Any) -> None:
    encoded = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE,
                           default=str)
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:  # the bytes as they are: no decoded copy (tens of MB for a large report)
        sys.stdout.flush()
        buffer.write(encoded)
        buffer.flush()
    else:  # a text-only stream (some test runners)
        sys.stdout.write(encoded.decode())


def money(value: float | None) -> str:
    """USD for a person: n/a when kvprobe could not price it (an unknown cost is not $0)."""
    return "n/a" if value is None else f"${value:,.4f}"


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Library errors become one clean line on stderr and their exit code; never a traceback."""
    try:
        yield
    except KvprobeError as exc:
        fail(str(exc), exc.exit_code)
    except OSError as exc:
        fail(f"{getattr(exc, 'filename', '') or ''}: {exc.strerror or exc}", 2)


# Every command that writes a file takes `-o/--output` and `--force` and checks them the same way
# (kvprobe.output.check_output): never an input, never an existing file unless --force.
Force = Annotated[bool, typer.Option("--force", help="Replace the output file if it already exists")]


def output_path(output: str | Path | None, inputs: Iterable[str | Path] = (), *, force: bool = False,
                alias: str | Path | None = None, alias_name: str = "--out") -> Path:
    """The checked output path; `alias` is an older spelling of -o/--output (kept hidden)."""
    if alias is not None:
        if output is not None and str(output) != str(alias):
            raise InputError(f"given twice with different values ({output} and {alias_name} {alias})",
                             field="--output")
        output = alias
    if output is None:
        raise InputError("missing: pass -o/--output FILE", field="--output")
    return check_output(output, inputs, force=force)
