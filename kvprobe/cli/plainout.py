"""Lines of text written without rich where rich would write exactly them (rich's import is ~14 ms, a sixth
of `kvprobe diff`'s start-up).

Off a terminal, the console every command prints through (cli/console.py: soft wrap, no colours, no markup,
no emoji codes) writes each line as its plain text, whatever its styles, and cuts a line printed with
overflow="ellipsis" to the console's width. That holds for text made of characters rich counts one cell
wide and leaves as they are (`_SAFE`: no control character, tab or newline, nothing wide or combining); any
other text, a terminal, FORCE_COLOR/TTY_COMPATIBLE or a line to cut is left to rich, which then writes it.
tests/test_plainout.py compares the two on the same lines.
"""
from __future__ import annotations

import builtins
import os
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

# ASCII, Latin-1 and Latin Extended-A letters, punctuation (– — ‘ ’ “ ” … •), arrows (→) and maths (≈ ≤):
# every one a cell wide in rich's table (compiled only for text that is not all printable ASCII)
_SAFE = "[\x20-\x7e\xa0-\u017f\u2010-\u2027\u2190-\u22ff]*"


def write(lines: list[tuple[str, bool]]) -> bool:
    """Write `lines` (text, whether it is cut to the width) as the console would, and return True; or write
    nothing and return False where the console might write anything else (the caller prints through it)."""
    text = "".join(line for line, _ in lines)
    if not (text.isprintable() if text.isascii() else re.fullmatch(_SAFE, text)):
        return False
    console = _loaded_console()
    if console is not None:  # rich is loaded already (the full CLI, tests): its own settings decide
        if console.is_terminal or not console.soft_wrap or console.color_system is not None:
            return False
        width: int | None = console.width
    elif not _off_terminal():
        return False
    else:
        width = None
    if any(cut for _, cut in lines):
        width = _width() if width is None else width
        if width is None or any(cut and len(line) > width for line, cut in lines):
            return False  # the ellipsis is rich's to place
    sys.stdout.write("".join(line + "\n" for line, _ in lines))
    return True


def _loaded_console() -> Console | None:
    module = sys.modules.get("kvprobe.cli.console")
    return None if module is None else module.out


def _off_terminal() -> bool:
    """Whether the console, made now, would see no terminal (rich's Console.is_terminal and _is_jupyter)."""
    if "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ or sys.platform == "win32":
        return False
    if hasattr(builtins, "get_ipython"):  # Jupyter or IPython: rich renders for the notebook
        return False
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        return isatty is None or not isatty()
    except ValueError:  # a closed stream: rich's to report
        return False


def _width() -> int | None:
    """The console's width off a terminal, as rich reads it: $COLUMNS, else the first of standard input,
    output and error that is a terminal, else 80. None when $COLUMNS is no number Python reads."""
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
