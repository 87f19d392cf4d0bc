"""`kvprobe report TRACE...`: every request's cache reads, writes, cost and the diagnosis of each miss."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from kvprobe.analysis.diagnosis import ADVICE
from kvprobe.cli.common import err, out, print_json, user_errors
from kvprobe.errors import InputError
from kvprobe.pricing import PriceBook
from kvprobe.report import Filters, Report, build_report
from kvprobe.trace.record import format_time, parse_time

PROGRESS_MIN_BYTES = 20_000_000


def report(
    traces: Annotated[list[Path], typer.Argument(help="Trace files (JSONL)")],
    json_out: Annotated[bool, typer.Option("--json", help="The contract JSON (contracts.md §3)")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="A Markdown summary for a PR comment")] = False,
    session: Annotated[str | None, typer.Option("--session", help="Only this session")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent")] = None,
    since: Annotated[str | None, typer.Option("--since", help="Only requests started at/after (RFC 3339)")] = None,
    price_file: Annotated[Path | None, typer.Option("--price-file", help="TOML/JSON price overrides")] = None,
    top: Annotated[int, typer.Option("--top", help="How many costliest misses to list")] = 10,
) -> None:
    """Simulate each provider's cache over a trace, compare with observed usage, explain every miss and
    price the task.

    Example: kvprobe report traces/sample_session.jsonl
    """
    with user_errors():
        filters = Filters(session, agent, _since(since))
        prices = PriceBook.from_file(price_file)
        rep = _build(traces, filters, prices, top, show_progress=not json_out)
    if json_out:
        print_json(rep.to_json())
    elif markdown:
        out.print(to_markdown(rep), markup=False, highlight=False, soft_wrap=True)
    else:
        render(rep)


def _since(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError:
        raise InputError(f"expected an RFC 3339 time, got {value!r}", field="--since") from None


def _build(traces: list[Path], filters: Filters, prices: PriceBook, top: int, show_progress: bool) -> Report:
    total = sum(p.stat().st_size for p in traces if p.is_file())
    if not show_progress or total < PROGRESS_MIN_BYTES:
        return build_report(traces, filters=filters, prices=prices, top=top)
    columns = (TextColumn("reading"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("read", total=total)
        return build_report(traces, filters=filters, prices=prices, top=top,
                            progress=lambda n: bar.advance(task, n))


def _money(v: float | None) -> str:
    return "n/a" if v is None else f"${v:,.4f}"


def _diag_words(r) -> str:
    return "; ".join(d.detail for d in r.diagnoses)


def render(rep: Report) -> None:
    table = Table(title="Requests", title_justify="left", show_lines=False)
    for col, just in (("time", "left"), ("id", "left"), ("agent", "left"), ("input", "right"), ("read", "right"),
                      ("write", "right"), ("fresh", "right"), ("hit %", "right"), ("cost", "right"),
                      ("why", "left")):
        table.add_column(col, justify=just, overflow="fold")
    for r in rep.results:
        u, p = r.usage, r.predicted
        read = f"{u.cache_read_tokens:,}"
        if r.observed and p is not None and p.cache_read_tokens != u.cache_read_tokens:
            read += f" (pred {p.cache_read_tokens:,})"
        hit = f"{100 * u.cache_read_tokens / u.input_tokens:.0f}" if u.input_tokens else "-"
        why = _diag_words(r) or ("cold start" if r.write_kind == "cold_start" else "")
        table.add_row(format_time(r.sk.started_at)[11:19], r.sk.id, r.sk.agent, f"{u.input_tokens:,}", read,
                      f"{u.cache_write_tokens:,}", f"{u.fresh_input_tokens:,}", hit, _money(r.cost_usd),
                      Text(why, style="yellow" if r.diagnoses else "dim"))
    out.print(table)
    t = rep.totals
    out.print(Text.assemble(("Total: ", "bold"), f"{t['requests']} requests · {t['input_tokens']:,} input tokens · ",
                            (f"hit ratio {100 * t['token_hit_ratio']:.1f}%", "green"), " · ",
                            f"{t['input_equivalent_tokens']:,.0f} input-equivalents · ",
                            (f"{_money(t['cost_usd'])}", "bold")))
    out.print(f"Writes: cold start {t['cold_start_write_tokens']:,} tokens, rebuilds "
              f"{t['rebuild_write_tokens']:,} tokens; missed reads {t['missed_read_tokens']:,} tokens")
    _render_misses(rep)
    _render_notes(rep)


def _render_misses(rep: Report) -> None:
    if not rep.misses:
        out.print(Text("No misses: every request read what an ideal prefix cache would have.", style="green"))
        return
    out.print(Text("Costliest misses", style="bold"))
    for m in rep.misses:
        d = m.result.diagnoses[0]
        out.print(Text.assemble(f"  {m.result.sk.id}: ", (f"{_money(m.usd)}", "bold red"),
                                f" ({m.input_equivalent:,.0f} input-equivalents) ", (d.kind, "magenta")))
        out.print(Text(f"    why: {d.detail}"))
        out.print(Text(f"    what to do: {ADVICE.get(d.kind, '')}", style="cyan"))


def _render_notes(rep: Report) -> None:
    for name, stats in rep.stats:
        if stats.skipped:
            err.print(f"{name}: skipped {stats.skipped} malformed lines")
    if rep.unknown_models:
        err.print(f"models not in the catalog (provider defaults used): {', '.join(rep.unknown_models)}")
    if rep.unpriced_models:
        err.print(f"no price for: {', '.join(rep.unpriced_models)} (use --price-file)")


def to_markdown(rep: Report) -> str:
    t = rep.totals
    lines = ["### kvprobe report", "",
             "| requests | input tokens | hit ratio | input-equivalents | cost |", "|---:|---:|---:|---:|---:|",
             f"| {t['requests']} | {t['input_tokens']:,} | {100 * t['token_hit_ratio']:.1f}% | "
             f"{t['input_equivalent_tokens']:,.0f} | {_money(t['cost_usd'])} |", ""]
    if rep.misses:
        lines += ["| request | cost of miss | cause | what to do |", "|---|---:|---|---|"]
        for m in rep.misses:
            d = m.result.diagnoses[0]
            lines.append(f"| {m.result.sk.id} | {_money(m.usd)} | {d.kind}: {d.detail} | {ADVICE.get(d.kind, '')} |")
    else:
        lines.append("No cache misses.")
    return "\n".join(lines)
