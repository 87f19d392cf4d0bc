"""The HTML page's bill: its first line (what misses wasted against the total, what most of the spend is) and
the spend by token class by model, project, session and agent (economics.bill), in dollars.

Pure: a `Report` in, HTML strings out. Every trace-derived string goes through `esc`.
"""
from __future__ import annotations

from kvprobe.economics.bill import Bill, Split
from kvprobe.economics.bill_words import COLUMN_NAMES
from kvprobe.importers.titles import shorten
from kvprobe.render.svg import esc
from kvprobe.report import Report
from kvprobe.wording import usd

MAX_ROWS = 20  # per grouping; `kvprobe report --json` has every row
_OPTIONAL = {"fresh"}  # gives way on narrow screens (report.css .opt): cents on most logs
PATH_CHARS = 40  # a project's path keeps its end, the part that tells projects apart


def headline(rep: Report) -> str:
    """The bill's first line, for the page's header ('' without a bill)."""
    return f'<p class="headline" id="kv-headline">{esc(rep.bill.headline)}</p>' if rep.bill is not None else ""


def _money(split: Split, tag: str = "td") -> str:
    priced = split.cost_usd is not None
    cells = "".join(f'<{tag} class="num{" opt" if cls in _OPTIONAL else ""}" '
                    f'data-v="{split.usd[cls] if priced else ""}">{esc(usd(split.usd[cls] if priced else None))}</{tag}>'
                    for cls, _ in COLUMN_NAMES)
    total = split.cost_usd
    return (f'<{tag} class="num opt" data-v="{split.requests}">{split.requests:,}</{tag}>{cells}'
            f'<{tag} class="num total" data-v="{"" if total is None else total}">{esc(usd(total))}</{tag}>')


def _label(bill: Bill, grouping: str, key: str) -> str:
    title = bill.titles.get(key) if grouping == "session" else None
    if title:
        return f'<span title="{esc(key)}: {esc(title)}">{esc(shorten(title))}</span>'
    shown = key if grouping != "project" or len(key) <= PATH_CHARS else "…" + key[-(PATH_CHARS - 1):]
    return f'<span title="{esc(key)}">{esc(shown)}</span>'


def _table(bill: Bill, grouping: str) -> str:
    rows = bill.groups[grouping]
    head = (f"<tr><th>{esc(grouping)}</th><th class='num opt'>requests</th>"
            + "".join(f"<th class='num{' opt' if cls in _OPTIONAL else ''}'>{esc(name)}</th>"
                      for cls, name in COLUMN_NAMES) + "<th class=num>total</th></tr>")
    body = "".join(f'<tr data-key="{esc(key)}"><td class="name">{_label(bill, grouping, key)}</td>{_money(split)}</tr>'
                   for key, split in rows[:MAX_ROWS])
    more = len(rows) - min(len(rows), MAX_ROWS)
    hint = f'<p class="hint">and {more:,} more in `kvprobe report --json`</p>' if more else ""
    foot = f"<tr><th>total</th>{_money(bill.total, 'th')}</tr>"
    return (f'<h3>By {esc(grouping)}</h3><div class="table-wrap"><table id="kv-bill-{esc(grouping)}">'
            f"<thead>{head}</thead><tbody>{body}</tbody><tfoot>{foot}</tfoot></table></div>{hint}")


def bill_section(rep: Report) -> str:
    """The bill by model, then by project, session and agent where there are several of them."""
    bill = rep.bill
    if bill is None:
        return ""
    tables = "".join(_table(bill, g) for g, rows in bill.groups.items() if g == "model" or len(rows) > 1)
    note = ("What the requests cost, split into cache reads, cache writes (5-minute and 1-hour), fresh input and "
            "output, at each request's own prices; every row adds up to its total.")
    return f'<section id="bill"><h2>The bill</h2><p class="hint">{esc(note)}</p>{tables}</section>'
