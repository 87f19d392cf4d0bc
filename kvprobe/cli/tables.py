"""Tables and indented lines that fit the terminal, for every command.

One layout rule instead of per-table tuning. Each table says, per column, what may give way when the
terminal is narrow, and in which order:

* `drop`: the column's priority. None: always shown; otherwise the lowest number is left out first. A
  droppable column whose cells are all the same (one agent, fresh input 0 throughout) says nothing a row
  does not, so it goes before any other. A note names what was left out (`--json` has every field).
* `wrap`: free text, wrapped between words (never inside one) down to `least` characters before any other
  column is dropped.
* `cut`: where a value that cannot fit at all loses characters, marked with "…": at its end ("end"), or at
  its start ("start") for paths and file locations, whose end is the part that tells them apart.

A column is otherwise as wide as its widest value. Output to a pipe, a CI log or under `NO_COLOR` gets a
plain layout without box lines (and, from the consoles in `common`, no styles).

Cells are plain strings (or rich `Text`); they never pass through console markup, so trace text with square
brackets prints as it is.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len, set_cell_size
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from kvprobe.cli.common import out, plain, visible_cell

Cell = str | Text
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


def _text(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _longest_line(texts: list[str]) -> int:
    return max((cell_len(line) for t in texts for line in t.split("\n")), default=0)


def _longest_word(texts: list[str]) -> int:
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


def layout(cols: Sequence[Col], rows: Sequence[Sequence[Cell]], width: int, boxed: bool) -> dict[int, int]:
    """Column index -> width for the columns shown at `width`."""
    bodies = [[_text(row[i]) for row in rows] for i in range(len(cols))]
    texts = [[c.header, c.footer, *bodies[i]] for i, c in enumerate(cols)]
    natural = [_longest_line(t) for t in texts]
    least = [min(natural[i], max(_longest_word(t), cols[i].least)) if cols[i].wrap else natural[i]
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


def _cut_start(cell: Cell, width: int) -> Cell:
    """A cell whose lines keep their end (paths, locations) when wider than the column, "…" marking where
    characters were taken out."""
    lines = _text(cell).split("\n")
    if all(cell_len(line) <= width for line in lines):
        return cell
    text = "\n".join(line if cell_len(line) <= width else ELLIPSIS + set_cell_size(line[::-1], width - 1)[::-1].rstrip()
                     for line in lines)
    return Text(text, style=cell.style) if isinstance(cell, Text) else text


def build(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Cell]],
          console: Console = out, *, spaced: bool = False) -> tuple[Table, list[str]]:
    """A rich Table fitted to the console, and the headers of the columns left out.

    spaced: a line between rows (rows of several lines each), blank when plain."""
    boxed = not plain(console)
    rows = [[visible_cell(cell) for cell in row] for row in rows]  # escapes measured as they will be shown
    widths = layout(cols, rows, console.width, boxed)
    # plain: columns apart by two spaces under a header line, as `docker ps` or `kubectl get` print them
    options = {} if boxed else {"box": None, "show_edge": False, "pad_edge": False}
    table = Table(title=title, title_justify="left", show_footer=any(c.footer for c in cols),
                  show_lines=spaced and boxed, **options)
    for i, c in enumerate(cols):
        if i in widths:
            # ellipsis, never fold: a value too long for any layout is cut visibly, not split mid-word
            table.add_column(c.header, footer=c.footer, justify=c.justify, style=c.style, no_wrap=not c.wrap,
                             overflow="ellipsis", min_width=widths[i], max_width=widths[i])
    for k, row in enumerate(rows):
        if spaced and not boxed and k:
            table.add_row(*("" for _ in widths))
        table.add_row(*(_cut_start(cell, widths[i]) if cols[i].cut == "start" else cell
                        for i, cell in enumerate(row) if i in widths))
    return table, [c.header for i, c in enumerate(cols) if i not in widths]


def print_table(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Cell]],
                console: Console = out, *, spaced: bool = False) -> None:
    table, hidden = build(title, cols, rows, console, spaced=spaced)
    print_block(table, console)
    if hidden:
        console.print(Text(f"(not shown at {console.width} columns: {', '.join(hidden)}; --json has every "
                           "field)", style="dim"))


def print_block(renderable: RenderableType, console: Console = out) -> None:
    """A table (or a group holding one) as laid out; plain output without trailing blanks (grep, diff,
    CI logs)."""
    if not plain(console):
        console.print(renderable, soft_wrap=False)
        return
    with console.capture() as captured:
        console.print(renderable, soft_wrap=False)
    console.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def sub_row(label: str, console: Console = out) -> str:
    """The first cell of a row that details the row above it (a model under a day): a tree branch on a
    terminal, a dash in plain output (no box-drawing characters off a terminal)."""
    return f"  {'└' if not plain(console) else '-'} {label}"
