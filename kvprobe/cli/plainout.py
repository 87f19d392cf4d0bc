"""Lines of styled text written without rich where rich would write exactly them (rich's import is ~14 ms, a
sixth of `kvprobe diff`'s start-up).

The console every command prints through (cli/console.py: no markup, no emoji codes) writes a line that fits
its width as the line's text:
* off a terminal (soft wrap, no colours): the plain text, whatever its styles;
* on a terminal: each styled run as `ESC[<codes>m<text>ESC[0m` (bold 1, dim 2, italic 3, then the colour
  30-37: the same codes in every colour system for the eight standard colours; none under NO_COLOR), and an
  indented line (not one cut to the width) with its indent unstyled, as the console's hanging indent prints
  it.
That holds for text made of characters rich counts one cell wide and leaves as they are (`_SAFE`: no control
character, tab or newline, nothing wide or combining), in the styles `_codes` knows. Anything else (a line
to wrap or cut, another character or style, FORCE_COLOR/TTY_COMPATIBLE, a dumb terminal, Windows, IPython)
is left to rich, which then writes it. tests/test_plainout.py compares the two on the same lines.
"""
from __future__ import annotations

import builtins
import os
import re
import sys
from dataclasses import dataclass

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from rich.console import Console

# continuation lines of an indented line start this much further in than its first line (console.hanging)
HANG = 2
# ASCII, Latin-1 and Latin Extended-A letters, punctuation (– — ‘ ’ “ ” … •), arrows (→) and maths (≈ ≤):
# every one a cell wide in rich's table (compiled only for text that is not all printable ASCII)
_SAFE = "[\x20-\x7e\xa0-\u017f\u2010-\u2027\u2190-\u22ff]*"
_ATTRIBUTES = {"bold": 1, "dim": 2, "italic": 3}
_COLOURS = {"black": 0, "red": 1, "green": 2, "yellow": 3, "blue": 4, "magenta": 5, "cyan": 6, "white": 7}


@dataclass(slots=True)
class Line:
    """One line: pieces of text with their styles (None: the line's own), the style of the whole line, and
    whether it is cut to the console's width (printed with overflow="ellipsis") instead of wrapped."""

    pieces: list[tuple[str, str | None]]
    style: str = ""
    cut: bool = False


def write(lines: list[Line], stderr: bool = False) -> bool:
    """Write `lines` as the console would (the error console's, `stderr`: off a terminal only), and return
    True; or write nothing and return False where the console might write anything else (the caller prints
    through it)."""
    texts = ["".join(piece for piece, _ in line.pieces) for line in lines]
    if not one_cell_each("".join(texts)):
        return False
    target = _target(stderr)
    if target is None or (stderr and target[0]):
        return False
    terminal, colour, width = target
    if width is None and (terminal or any(line.cut for line in lines)):
        width = _width()
    if terminal:
        # strictly narrower than the width, and no trailing white space (the hanging indent strips it)
        if width is None or any(len(text) >= width or text[-1:].isspace() for text in texts):
            return False
        rendered = [_terminal_line(line, text, colour, width) for line, text in zip(lines, texts)]
        if any(text is None for text in rendered):
            return False
    else:
        if any(line.cut and (width is None or len(text) > width) for line, text in zip(lines, texts)):
            return False  # the ellipsis is rich's to place
        rendered = texts
    (sys.stderr if stderr else sys.stdout).write("".join(f"{text}\n" for text in rendered))
    return True


def one_cell_each(text: str) -> bool:
    """Whether every character of `text` is one cell wide to rich and left as it is (`_SAFE`)."""
    return text.isprintable() if text.isascii() else re.fullmatch(_SAFE, text) is not None


def plain_target(stderr: bool = False) -> int | None:
    """The width of the console (standard output's, or the error console's) where it is off a terminal and
    writes plain text; None where it may be a terminal (or rich must decide)."""
    target = _target(stderr)
    if target is None or target[0]:
        return None
    return target[2] if target[2] is not None else _width()


def _target(stderr: bool = False) -> tuple[bool, bool, int | None] | None:
    """(on a terminal, in colour, the width when known) of the console, or None where rich must print."""
    module = sys.modules.get("kvprobe.cli.console")
    if module is not None:  # rich is loaded already (the full CLI, tests): its own settings decide
        console: Console = module.err if stderr else module.out
        if console.width < 1:  # (COLUMNS=0: rich prints nothing at all, however much it is given)
            return None
        if not console.is_terminal and console.soft_wrap and console.color_system is None:
            return False, False, console.width
        if console.is_terminal and not console.soft_wrap and not console.is_jupyter and not \
                console.legacy_windows and not console.is_dumb_terminal and \
                console.color_system in (None, "standard", "256", "truecolor"):
            return True, console.color_system is not None, console.width
        return None
    # the console, made now (rich's Console.is_terminal, is_dumb_terminal, _is_jupyter; console.py's colours)
    columns = os.environ.get("COLUMNS")
    if columns and not columns.strip("0"):  # COLUMNS=0: rich's (as above)
        return None
    if "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ or sys.platform == "win32":
        return None
    if hasattr(builtins, "get_ipython"):  # Jupyter or IPython: rich renders for the notebook
        return None
    if getattr(sys.stdin, "__module__", "").startswith("idlelib"):  # IDLE: a "terminal" rich writes plain to
        return None
    isatty = getattr(sys.stderr if stderr else sys.stdout, "isatty", None)
    try:
        terminal = isatty is not None and isatty()
    except ValueError:  # a closed stream: rich's to report
        return None
    if terminal and os.environ.get("TERM", "").lower() in ("dumb", "unknown"):
        return None
    return terminal, terminal and os.environ.get("NO_COLOR", "") == "", None


def _width() -> int | None:
    """The console's width as rich reads it: $COLUMNS, else the first of standard input, output and error
    that is a terminal, else 80. None when $COLUMNS is no number Python reads."""
    columns = os.environ.get("COLUMNS")
    if columns is not None and columns.isdigit():
        try:
            return int(columns)
        except ValueError:  # digits int() refuses ("²"): rich's to fail on
            return None
    for fd in (0, 1, 2):
        try:
            return os.get_terminal_size(fd).columns or 80
        except (AttributeError, ValueError, OSError):
            continue
    return 80


def _terminal_line(line: Line, text: str, colour: bool, width: int) -> str | None:
    """A line as the console prints it on a terminal; None for a style `_codes` does not know."""
    pieces = [(piece, style) for piece, style in line.pieces if piece]  # (rich keeps no span of "")
    indent = len(text) - len(text.lstrip(" "))
    prefix = ""
    if indent and not line.cut and indent < len(text) and width - indent - HANG >= 12:  # console.hanging
        prefix, pieces = " " * indent, _without_head(pieces, indent)
    runs: list[str] = []
    unstyled = ""  # pieces of the line's own style run together: rich sets no boundary between them
    for piece, style in pieces:
        if style is None:
            unstyled += piece
            continue
        if unstyled:
            runs.append(_run(unstyled, (line.style,), colour))
            unstyled = ""
        runs.append(_run(piece, (line.style, style), colour))
    if unstyled:
        runs.append(_run(unstyled, (line.style,), colour))
    return None if any(run is None for run in runs) else prefix + "".join(runs)  # type: ignore[arg-type]


def _without_head(pieces: list[tuple[str, str | None]], size: int) -> list[tuple[str, str | None]]:
    """The pieces with their first `size` characters taken off (a piece left empty is dropped)."""
    out = []
    for piece, style in pieces:
        if size >= len(piece):
            size -= len(piece)
            continue
        out.append((piece[size:], style))
        size = 0
    return out


def _run(text: str, styles: tuple[str, ...], colour: bool) -> str | None:
    codes = _codes(styles)
    if codes is None:
        return None
    return f"\x1b[{codes}m{text}\x1b[0m" if codes and colour else text


def _codes(styles: tuple[str, ...]) -> str | None:
    """The SGR codes of styles combined in order (rich's Style.combine: attributes add up, the last colour
    wins), or None for a word that is not bold, dim, italic or one of the eight standard colours."""
    attributes: set[int] = set()
    colour = None
    for style in styles:
        for word in style.split():
            if word in _ATTRIBUTES:
                attributes.add(_ATTRIBUTES[word])
            elif word in _COLOURS:
                colour = _COLOURS[word]
            else:
                return None
    return ";".join([*map(str, sorted(attributes)), *([str(30 + colour)] if colour is not None else [])])
