"""How wide each column of a table is, and a plain table written without rich (cli/tables.py says the rule).

Without rich: a command answered before rich loads (`kvprobe usage`, cli/fastusage.py) prints its table from
here where that gives the bytes rich prints, and `tables.print_table` does the same, so the two are one
path. Plain means off a terminal: columns two spaces apart under a header line, no box lines, no styles.
That holds for cells of one line in characters rich counts one cell wide (cli/plainout.py's `_SAFE`), none
of them to wrap; anything else is rich's to lay out (`plain_lines` returns None).
tests/test_cli_tables.py compares the two on the same tables.
"""
from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Literal, TextIO

MIN_WRAP = 12  # narrowest a wrapping column gets (unless its longest word is wider)
MIN_CUT = 6  # narrowest any column gets when the table cannot fit otherwise
ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class Col:
    header: str
    justify: Literal["left", "right"] = "left"
    wrap: bool = False  # free text: may wrap between words
    drop: int | None = None  # None: always shown; else dropped when too narrow, lowest first
    footer: str = ""
    style: str | None = None
    least: int = MIN_WRAP  # for `wrap` columns: the narrowest it gets before other columns are dropped
    cut: Literal["end", "start"] = "end"  # which end of a value too long for any layout gives way


def _longest_line(texts: list[str], cell_len: Callable[[str], int]) -> int:
    return max((cell_len(line) for t in texts for line in t.split("\n")), default=0)


def _longest_word(texts: list[str], cell_len: Callable[[str], int]) -> int:
    return max((cell_len(word) for t in texts for word in t.split()), default=0)


def _overhead(count: int, boxed: bool) -> int:
    """Characters a table adds around `count` columns: padding and separators (with edges when boxed)."""
    return 3 * count + 1 if boxed else max(2 * count - 2, 0)


def _constant(cells: list[str]) -> bool:
    return len(cells) > 1 and len(set(cells)) == 1


def _drop_order(cols: Sequence[Col], bodies: list[list[str]]) -> list[int]:
    """Droppable columns in the order they are left out: constant ones first, then by priority (the later
    of two equal priorities first)."""
    droppable = [i for i, c in enumerate(cols) if c.drop is not None]
    return sorted(droppable, key=lambda i: (not _constant(bodies[i]), cols[i].drop, -i))


def layout(cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int, boxed: bool,
           cell_len: Callable[[str], int] = len) -> dict[int, int]:
    """Column index -> width for the columns shown at `width` (`cell_len`: a text's width in cells)."""
    bodies = [[row[i] for row in rows] for i in range(len(cols))]
    texts = [[c.header, c.footer, *bodies[i]] for i, c in enumerate(cols)]
    natural = [_longest_line(t, cell_len) for t in texts]
    least = [min(natural[i], max(_longest_word(t, cell_len), cols[i].least)) if cols[i].wrap else natural[i]
             for i, t in enumerate(texts)]
    shown = list(range(len(cols)))
    for i in _drop_order(cols, bodies):
        if sum(least[k] for k in shown) + _overhead(len(shown), boxed) <= width:
            break
        shown.remove(i)
    widths = _fit(cols, shown, natural, least, width, boxed)
    # a column that says nothing (the same in every row) gives way to text that would otherwise wrap
    idle = [i for i in shown if cols[i].drop is not None and _constant(bodies[i])]
    while idle and any(cols[i].wrap and widths[i] < natural[i] for i in widths):
        shown.remove(idle.pop())
        widths = _fit(cols, shown, natural, least, width, boxed)
    return widths


def _fit(cols: Sequence[Col], shown: list[int], natural: list[int], least: list[int], width: int,
         boxed: bool) -> dict[int, int]:
    widths = {i: least[i] for i in shown}
    spare = width - sum(widths.values()) - _overhead(len(shown), boxed)
    while spare < 0 and max(widths.values()) > MIN_CUT:  # nothing left to drop: narrow the widest column,
        widest = max(widths, key=lambda i: (widths[i], i))  # whose longest values then lose characters
        widths[widest] -= 1
        spare += 1
    # wrapping columns grow back toward their natural width, the nearest first: most columns on one line
    for i in sorted((i for i in shown if cols[i].wrap), key=lambda i: natural[i] - widths[i]):
        grow = max(min(spare, natural[i] - widths[i]), 0)
        widths[i] += grow
        spare -= grow
    return widths


def sub_row(label: str, plain: bool) -> str:
    """The first cell of a row that details the row above it (a model under a day): a tree branch on a
    terminal, a dash in plain output (no box-drawing characters off a terminal)."""
    return f"  {'-' if plain else '└'} {label}"


def hidden_note(width: int, hidden: list[str]) -> str:
    """The line under a table that names the columns left out."""
    return f"(not shown at {width} columns: {', '.join(hidden)}; --json has every field)"


def write_plain(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int,
                file: TextIO) -> bool:
    """The plain table (`plain_lines`) and the line naming the columns left out, written to `file`; False,
    nothing written, where rich must lay it out."""
    made = plain_lines(title, cols, rows, width)
    if made is None:
        return False
    lines, hidden = made
    file.write("".join(f"{line}\n" for line in lines) + (f"{hidden_note(width, hidden)}\n" if hidden else ""))
    return True


def plain_lines(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int
                ) -> tuple[list[str], list[str]] | None:
    """The lines of a plain table as rich prints it at `width` (each without trailing blanks), and the headers
    of the columns left out; None where rich must lay it out: a cell of several lines, one that would wrap,
    a character that is not one cell wide, a title wider than the table, a table wider than `width`.
    `rows`: the cells as the table shows them (control characters already made visible)."""
    from kvprobe.cli.plainout import one_cell_each  # (here: cli/plainout.py is imported by the console too)

    texts = [title or "", *(c.header for c in cols), *(c.footer for c in cols), *(t for row in rows for t in row)]
    if not one_cell_each("".join(texts)) or any("\n" in t for t in texts):
        return None
    widths = layout(cols, rows, width, boxed=False)
    shown = sorted(widths)
    if not shown:
        return None  # (every column left out: rich's to print)
    table_width = sum(widths.values()) + _overhead(len(shown), False)
    if table_width > width or (title and (len(title) > table_width or not title.strip() or title[0].isspace())):
        return None  # (a title that wraps, or whose leading blanks rich may place otherwise)
    lines = [title.rstrip()] if title else []  # (no line for an empty title, none of its trailing blanks)
    body = [(False, [c.header for c in cols]), *((True, row) for row in rows)]
    if any(c.footer for c in cols):
        body.append((False, [c.footer for c in cols]))
    for is_row, row in body:
        cells = [_fitted(cols[i], row[i], widths[i], is_row) for i in shown]
        if any(cell is None for cell in cells):
            return None
        lines.append("  ".join(cells).rstrip())  # type: ignore[arg-type]
    return lines, [c.header for i, c in enumerate(cols) if i not in widths]


def _fitted(col: Col, text: str, width: int, is_row: bool) -> str | None:
    """A cell at its column's width, as rich writes it (rich's `Lines.justify` and `Text.truncate`): a
    value too long cut with "…" (a row's value of a `cut="start"` column at its start, as cli/tables.py's
    `_cut_start` does before rich sees it), padded on the side its justification leaves; None for text rich
    would wrap."""
    if col.wrap and len(text) > width:
        return None
    if is_row and col.cut == "start" and len(text) > width:
        text = ELLIPSIS + text[len(text) - (width - 1):].rstrip() if width > 1 else ELLIPSIS
    if col.justify == "right":
        text = text.rstrip()
    if len(text) > width:
        text = text[:width - 1] + ELLIPSIS
    return " " * (width - len(text)) + text if col.justify == "right" else text + " " * (width - len(text))
