"""Tables that fit the terminal, for every command.

One layout rule instead of per-table tuning: a column is as wide as its widest value; free text (`wrap`)
may wrap between words but never inside one; when the table is still too wide, the columns marked
droppable go first (lowest `drop` first) and a note names them (`--json` has every field); a value that
cannot fit at all is cut with "…", never folded into pieces. Output to a pipe, a CI log or under
`NO_COLOR` gets a plain layout without box lines (and, from the consoles in `common`, no styles).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvprobe.cli.common import out, plain

Cell = str | Text
MIN_WRAP = 12  # narrowest a wrapping column gets (unless its longest word is wider)
MIN_CUT = 6  # narrowest any column gets when the table cannot fit otherwise


@dataclass(frozen=True, slots=True)
class Col:
    header: str
    justify: Literal["left", "right"] = "left"
    wrap: bool = False  # free text: may wrap between words
    drop: int | None = None  # None: always shown; else dropped when too narrow, lowest first
    footer: str = ""
    style: str | None = None
    least: int = MIN_WRAP  # for `wrap` columns: the narrowest it gets before other columns are dropped


def _text(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _longest_line(texts: list[str]) -> int:
    return max((cell_len(line) for t in texts for line in t.split("\n")), default=0)


def _longest_word(texts: list[str]) -> int:
    return max((cell_len(word) for t in texts for word in t.split()), default=0)


def _overhead(count: int, boxed: bool) -> int:
    """Characters a table adds around `count` columns: padding and separators (with edges when boxed)."""
    return 3 * count + 1 if boxed else max(2 * count - 2, 0)


def layout(cols: Sequence[Col], rows: Sequence[Sequence[Cell]], width: int, boxed: bool) -> dict[int, int]:
    """Column index -> width for the columns shown at `width`."""
    texts = [[c.header, c.footer, *(_text(row[i]) for row in rows)] for i, c in enumerate(cols)]
    natural = [_longest_line(t) for t in texts]
    least = [min(natural[i], max(_longest_word(t), cols[i].least)) if cols[i].wrap else natural[i]
             for i, t in enumerate(texts)]
    shown = list(range(len(cols)))
    while sum(least[i] for i in shown) + _overhead(len(shown), boxed) > width:
        droppable = [i for i in shown if cols[i].drop is not None]
        if not droppable:
            break
        shown.remove(min(droppable, key=lambda i: (cols[i].drop, -i)))
    widths = {i: least[i] for i in shown}
    spare = width - sum(widths.values()) - _overhead(len(shown), boxed)
    while spare < 0 and max(widths.values()) > MIN_CUT:  # nothing left to drop: narrow the widest column,
        widest = max(widths, key=lambda i: (widths[i], i))  # whose longest words then end in "…"
        widths[widest] -= 1
        spare += 1
    # wrapping columns grow back toward their natural width, the nearest first: most columns on one line
    for i in sorted((i for i in shown if cols[i].wrap), key=lambda i: natural[i] - widths[i]):
        grow = max(min(spare, natural[i] - widths[i]), 0)
        widths[i] += grow
        spare -= grow
    return widths


def build(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Cell]],
          console: Console = out) -> tuple[Table, list[str]]:
    """A rich Table fitted to the console, and the headers of the columns left out."""
    boxed = not plain(console)
    widths = layout(cols, rows, console.width, boxed)
    # plain: columns apart by two spaces under a header line, as `docker ps` or `kubectl get` print them
    options = {} if boxed else {"box": None, "show_edge": False, "pad_edge": False}
    table = Table(title=title, title_justify="left", show_footer=any(c.footer for c in cols), **options)
    for i, c in enumerate(cols):
        if i in widths:
            # ellipsis, never fold: a value too long for any layout is cut visibly, not split mid-word
            table.add_column(c.header, footer=c.footer, justify=c.justify, style=c.style, no_wrap=not c.wrap,
                             overflow="ellipsis", min_width=widths[i], max_width=widths[i])
    for row in rows:
        table.add_row(*(cell for i, cell in enumerate(row) if i in widths))
    return table, [c.header for i, c in enumerate(cols) if i not in widths]


def print_table(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Cell]],
                console: Console = out) -> None:
    table, hidden = build(title, cols, rows, console)
    if plain(console):  # no trailing blanks for grep, diff and CI logs
        with console.capture() as captured:
            console.print(table, soft_wrap=False)
        console.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    else:
        console.print(table, soft_wrap=False)
    if hidden:
        console.print(Text(f"(not shown at {console.width} columns: {', '.join(hidden)}; --json has every "
                           "field)", style="dim"))
