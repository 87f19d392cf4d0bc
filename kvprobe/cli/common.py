"""What every command shares: consoles, JSON output, and turning library errors into exit codes."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

import orjson
import typer
from rich.console import Console

from kvprobe.errors import KvprobeError

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS,
                                  default=str).decode() + "\n")


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
