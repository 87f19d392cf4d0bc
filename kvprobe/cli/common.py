"""What every command shares: consoles, JSON output, and turning library errors into exit codes."""
from __future__ import annotations

import contextlib
import errno
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderableType, RenderHook
from rich.measure import Measurement
from rich.segment import Segment
from rich.text import Text

from kvprobe.cli import INTERRUPTED
from kvprobe.cli.jsonout import print_json, terminal_safe  # noqa: F401  (commands import them from here)
from kvprobe.errors import InputError, KvprobeError
from kvprobe.output import check_output
from kvprobe.wording import usd


HANG = 2  # continuation lines of an indented line start this much further in than its first line
_PLAIN_KWARGS = frozenset(("markup", "highlight"))


def hanging(console: Console, text: Text, indent: int, hang: int = HANG) -> list[Text] | None:
    """`text` wrapped to the console's width as lines: the first at `indent`, the rest `hang` further in
    (None when the console is too narrow for that)."""
    width = console.width - indent
    if width - hang < 12 or not text.plain:
        return None
    first = text.wrap(console, width, overflow="fold")[0]
    first.rstrip()
    lines = [Text(" " * indent) + first]
    if not text.plain.startswith(first.plain):  # wrapping changed the text: let rich lay it out instead
        return None
    rest = text[len(first.plain):]
    rest = rest[len(rest.plain) - len(rest.plain.lstrip()):]  # the spaces (or newline) it broke at
    if rest.plain:
        for line in rest.wrap(console, width - hang, overflow="fold"):
            line.rstrip()
            lines.append(Text(" " * (indent + hang)) + line)
    return lines


class _Console(Console):
    """A console whose indented lines stay indented when they wrap. On a terminal, a line of text that starts
    with spaces ("    what to do: …") wraps with its continuation lines `HANG` further in, never back at
    column 0; off a terminal lines are not wrapped at all (soft wrap), so nothing changes there."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        lines = self._hanging(objects, kwargs)
        if lines is None:
            super().print(*objects, **kwargs)
            return
        for line in lines:
            super().print(line, soft_wrap=True)

    def _hanging(self, objects: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Text] | None:
        if len(objects) != 1 or set(kwargs) - _PLAIN_KWARGS or self.soft_wrap or not self.is_terminal:
            return None
        obj = objects[0]
        if isinstance(obj, str):
            obj = self.render_str(obj, markup=kwargs.get("markup"), highlight=False)
        if not isinstance(obj, Text) or not obj.plain.startswith(" ") or "\n" in obj.plain:
            return None
        indent = len(obj.plain) - len(obj.plain.lstrip(" "))
        return hanging(self, obj[indent:], indent)


# C0 and C1 control characters but tab and newline: an escape sequence from a trace (a model name, an id, an
# error text) would drive the user's terminal, so each is shown as its \x.. escape instead
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """Text with control characters spelled as escapes (`\x1b`), never sent to the terminal raw."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text) if _CONTROL.search(text) else text


def visible_cell(cell: str | Text) -> str | Text:
    """A table cell with control characters escaped before the layout measures it."""
    if isinstance(cell, str):
        return visible(cell)
    return Text(visible(cell.plain), style=cell.style) if _CONTROL.search(cell.plain) else cell


class _Visible:
    """A renderable whose text segments have their control characters escaped (rich's own control segments,
    cursor moves and styles, pass as they are: styles are added after this, when the segments are written)."""

    def __init__(self, inner: RenderableType) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for segment in console.render(self.inner, options):
            if segment.control or not _CONTROL.search(segment.text):
                yield segment
            else:
                yield Segment(visible(segment.text), segment.style)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.inner)


class _VisibleHook(RenderHook):
    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Visible(r) for r in renderables]


def _reader_gone() -> NoReturn:
    """The reader of our output left (`kvprobe report | head`): exit 2 quietly (an I/O error, not a result)."""
    _stdout_failed()
    raise SystemExit(2)


def _console(stderr: bool = False) -> Console:
    # rich already drops colours off a terminal; NO_COLOR (no-color.org) drops every style, bold included.
    # No markup and no emoji codes: text from traces and file names (`x[/]`, `[wip]/app`, `:smile:`) is
    # printed as it is, never read as rich markup; styles are given as Text styles instead.
    no_color = os.environ.get("NO_COLOR", "") != ""
    console = _Console(stderr=stderr, highlight=False, markup=False, emoji=False,
                       color_system=None if no_color else "auto")
    console.push_render_hook(_VisibleHook())
    console.on_broken_pipe = _reader_gone  # type: ignore[method-assign]  (rich's own exits 1: "threshold failed")
    # off a terminal, sentences stay on one line (grep, CI logs); tables are fitted to the width anyway
    console.soft_wrap = not console.is_terminal
    return console


out = _console()
err = _console(stderr=True)


def plain(console: Console) -> bool:
    """Output for a pipe, a CI log or NO_COLOR: no styles, no box lines."""
    return not console.is_terminal or console.color_system is None


def money(value: float | None) -> str:
    """USD for a person, to 4 decimals (`wording.usd`): n/a when kvprobe could not price it (an unknown cost
    is not $0), and a cost too small for 4 decimals in two significant digits (never $0.0000)."""
    return usd(value)


def fail(message: str, code: int = 2) -> NoReturn:
    # one line: a file name or value with a newline in it (a CI input) must not start a line of its own, which
    # a CI log could read as a command (GitHub's `::error::`, `::add-mask::`)
    message = message.replace("\r", "\\r").replace("\n", "\\n")
    err.print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)
    raise typer.Exit(code)


# errors of writing the output itself (a full disk, a closed pipe, a device error)
_OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EPIPE, errno.EIO, errno.EDQUOT, errno.EFBIG})


def _stdout_failed() -> bool:
    """True when standard output cannot take what is pending; it is then pointed at /dev/null, so that the
    interpreter's own flush at exit fails no more (which printed "Exception ignored" and exited 120)."""
    try:
        sys.stdout.flush()
        return False
    except (OSError, ValueError):
        pass
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return True


def unexpected(exc: BaseException) -> NoReturn:
    """What no command caught, as an exit code and one line: output that cannot be written (stdout on
    /dev/full, a closed pipe) and other I/O errors exit 2, input nested too deeply to analyse exits 2,
    Ctrl-C exits 130; never a traceback."""
    if isinstance(exc, KeyboardInterrupt):
        with contextlib.suppress(Exception):
            err.print("interrupted", style="dim")
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
