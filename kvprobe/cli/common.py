"""What every command shares: consoles, JSON output, and turning library errors into exit codes."""
from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from kvprobe.cli import INTERRUPTED
from kvprobe.cli.console import (HANG, _Console, _stdout_failed, err, hanging, out, plain,  # noqa: F401
                                 visible, visible_cell)  # (commands import them from here)
from kvprobe.cli.import_view import say_error
from kvprobe.cli.jsonout import print_json, terminal_safe  # noqa: F401  (commands import them from here)
from kvprobe.errors import InputError, KvprobeError
from kvprobe.interrupts import say_interrupted
from kvprobe.output import check_output
from kvprobe.wording import usd


def money(value: float | None) -> str:
    """USD for a person, to 4 decimals (`wording.usd`): n/a when kvprobe could not price it (an unknown cost
    is not $0), and a cost too small for 4 decimals in two significant digits (never $0.0000)."""
    return usd(value)


def fail(message: str, code: int = 2) -> NoReturn:
    # one line: a file name or value with a newline in it (a CI input) must not start a line of its own, which
    # a CI log could read as a command (GitHub's `::error::`, `::add-mask::`)
    say_error(message)
    raise typer.Exit(code)


# errors of writing the output itself (a full disk, a closed pipe, a device error, output closed at start)
_OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EPIPE, errno.EIO, errno.EDQUOT, errno.EFBIG, errno.EBADF})


def unexpected(exc: BaseException) -> NoReturn:
    """What no command caught, as an exit code and one line: output that cannot be written (stdout on
    /dev/full, a closed pipe) and other I/O errors exit 2, input nested too deeply to analyse exits 2,
    Ctrl-C exits 130; never a traceback."""
    if isinstance(exc, KeyboardInterrupt):
        say_interrupted(exc)
        raise typer.Exit(INTERRUPTED)
    if isinstance(exc, RecursionError):
        fail("the input is nested too deeply to analyse")
    assert isinstance(exc, OSError)
    on_stdout = _stdout_failed() or (exc.errno in _OUTPUT_ERRNOS and not exc.filename)
    if on_stdout and exc.errno == errno.EPIPE:  # the reader has gone (`| head`): nothing to tell it
        raise typer.Exit(2)
    with contextlib.suppress(OSError, ValueError):
        fail(f"cannot write the output: {exc.strerror or exc}" if on_stdout
             else f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
    raise typer.Exit(2)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Library errors become one clean line on stderr and their exit code; never a traceback."""
    try:
        yield
    except KvprobeError as exc:
        fail(str(exc), exc.exit_code)
    except (OSError, RecursionError) as exc:
        unexpected(exc)


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
