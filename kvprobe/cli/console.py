"""The terminal consoles every command prints through (rich, no Typer): a command answered before Typer
loads (`kvprobe diff`, cli/fastdiff.py) prints the same bytes as the full command."""
from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderableType, RenderHook
from rich.measure import Measurement
from rich.segment import Segment
from rich.text import Text

from kvprobe.cli.plainout import HANG  # (cli/plainout.py prints diff's indented lines as `hanging` does)

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
