"""`report`'s bill in the terminal: the spend by token class, by model, project, session and agent."""
from __future__ import annotations

from rich.text import Text

from kvprobe.cli.common import out
from kvprobe.cli.tables import Col, print_table
from kvprobe.economics.bill import Bill, Split
from kvprobe.economics.bill_words import COLUMN_NAMES
from kvprobe.importers.titles import shorten
from kvprobe.wording import usd

BILL_ROWS = 5  # rows per grouping in the terminal (--json has every one)
# narrow, the classes that are the least of the bill go first (fresh input, cents on most logs, then what
# else is smallest: a log on 1h entries keeps its 1h writes before its 5m ones); reads and the total stay
_KEPT = ("read",)


def money_cells(split: Split, digits: int) -> list[str]:
    """A split's classes and total as table cells, in COLUMN_NAMES order ("n/a" when unpriced)."""
    priced = split.cost_usd is not None
    cells = [usd(split.usd[cls] if priced else None, digits) for cls, _ in COLUMN_NAMES]
    total = usd(split.cost_usd, digits)
    return cells + [total + ("*" if split.unpriced_requests and priced else "")]


def money_columns(first: Col, total: Split, digits: int) -> list[Col]:
    """The first column, then one per token class and the total, the bill's total in the footer."""
    footers = money_cells(total, digits)
    return [first] + [Col(name, "right", drop=_drop_order(total).get(cls), footer=footers[i])
                      for i, (cls, name) in enumerate(COLUMN_NAMES)] + [Col("total", "right", footer=footers[-1])]


def _drop_order(total: Split) -> dict[str, int]:
    """Each droppable class's priority (the lowest left out first): the smaller its share of the bill, the
    sooner; ties in the classes' own order, fresh input first."""
    order = ("fresh", "output", "write_1h", "write_5m")
    ranked = sorted((cls for cls in order if cls not in _KEPT), key=lambda cls: (total.usd[cls], order.index(cls)))
    return {cls: rank for rank, cls in enumerate(ranked, start=1)}


def _label(bill: Bill, grouping: str, key: str) -> str:
    title = bill.titles.get(key) if grouping == "session" else None
    return shorten(title) if title else key


def _distinct(labels: list[str], keys: list[str]) -> list[str]:
    """Rows that would read the same (two sessions begun with the same prompt) told apart by the end of their
    id, the part `usage --by session` and the JSON show."""
    seen: dict[str, int] = {}
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
    return [f"{label} ({key[-6:]})" if seen[label] > 1 and label != key else label
            for label, key in zip(labels, keys)]


def render_bill(bill: Bill) -> None:
    """The bill by model, then by project, session and agent where there are several; every table's footer
    is the whole bill."""
    digits = 2 if (bill.total.cost_usd or 0) >= 1 else 4  # cents on a real bill, as its first line
    for grouping, rows in bill.groups.items():
        if grouping != "model" and len(rows) < 2:
            continue  # one project (session, agent): its row is the total, shown under the model table
        first = Col(grouping, footer="Total", cut="start" if grouping == "project" else "end")
        labels = _distinct([_label(bill, grouping, key) for key, _ in rows[:BILL_ROWS]],
                           [key for key, _ in rows[:BILL_ROWS]])
        cells = [[label, *money_cells(split, digits)] for label, (_, split) in zip(labels, rows[:BILL_ROWS])]
        more = f" (the {BILL_ROWS} costliest of {len(rows):,})" if len(rows) > BILL_ROWS else ""
        print_table(f"The bill by {grouping}{more}", money_columns(first, bill.total, digits), cells)
    if bill.total.unpriced_requests:
        out.print(Text(f"* {bill.total.unpriced_requests:,} requests could not be priced: left out of the "
                       "figures (use --price-file)", style="dim"))
