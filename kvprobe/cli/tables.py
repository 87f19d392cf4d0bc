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

from rich.cells import cell_len, set_cell_size
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from kvprobe.cli import table_layout
from kvprobe.cli.console import out, plain, visible_cell
from kvprobe.cli.table_layout import ELLIPSIS, MIN_CUT, MIN_WRAP, Col  # noqa: F401  (commands import Col here)

Cell = str | Text


def _text(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def layout(cols: Sequence[Col], rows: Sequence[Sequence[Cell]], width: int, boxed: bool) -> dict[int, int]:
    """Column index -> width for the columns shown at `width` (cli/table_layout.py)."""
    return table_layout.layout(cols, [[_text(cell) for cell in row] for row in rows], width, boxed, cell_len)


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
    plain_console = not console.is_terminal and console.soft_wrap and console.color_system is None
    # off a terminal, the lines rich would print, written without it where they can be (table_layout)
    if not spaced and plain_console and table_layout.write_plain(
            title, cols, [[_text(visible_cell(c)) for c in row] for row in rows], console.width, console.file):
        return
    table, hidden = build(title, cols, rows, console, spaced=spaced)
    print_block(table, console)
    if hidden:
        console.print(Text(table_layout.hidden_note(console.width, hidden), style="dim"))


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
    """The first cell of a row that details the row above it (table_layout.sub_row), for `console`."""
    return table_layout.sub_row(label, plain(console))
