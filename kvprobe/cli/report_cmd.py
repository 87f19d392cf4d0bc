"""`kvprobe report TRACE...`: every request's cache reads, writes, cost and the diagnosis of each miss."""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from kvprobe.analysis.diagnosis import advice_for
from kvprobe.cli.bill_view import render_bill
from kvprobe.cli.common import err, money, out, user_errors
from kvprobe.cli.jsonout import print_json_items
from kvprobe.cli.request_rows import render_requests
from kvprobe.cli.usage_data import zone_of
from kvprobe.cli.tables import Col, print_table
from kvprobe.economics.tasks import load_outcomes, overall
from kvprobe.errors import InputError
from kvprobe.pricing import PriceBook
from kvprobe.report import Filters, Report, build_report, fallback_lines
from kvprobe.trace.record import parse_since
from kvprobe.wording import duration, show

PROGRESS_MIN_BYTES = 20_000_000


def report(
    traces: Annotated[list[Path], typer.Argument(help="Trace files (JSONL)")],
    json_out: Annotated[bool, typer.Option(
        "--json", help="The contract JSON (`kvprobe schema report` describes it)")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="A Markdown summary for a PR comment")] = False,
    session: Annotated[str | None, typer.Option("--session", help="Only this session")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent")] = None,
    since: Annotated[str | None, typer.Option("--since", help="Only requests started at/after (RFC 3339)")] = None,
    price_file: Annotated[Path | None, typer.Option("--price-file", help="TOML/JSON price overrides")] = None,
    top: Annotated[int, typer.Option("--top", help="How many causes and costliest misses to list")] = 10,
    requests: Annotated[str, typer.Option("--requests", help="Request rows to show: all, or the N costliest "
                                          "(default: all up to 50 requests, else the 20 costliest)")] = "auto",
    what_if: Annotated[bool, typer.Option("--what-if", help="Show before/after with every fix applied")] = False,
    no_fixes: Annotated[bool, typer.Option("--no-fixes", help="Skip the what-if fixes")] = False,
    predicted: Annotated[bool, typer.Option("--predicted", help="Ignore logged usage; report the simulation")] = False,
    outcomes: Annotated[Path | None, typer.Option("--outcomes", help="Task outcomes JSONL "
                                                  "({task, passed, duration_s?})")] = None,
    tz: Annotated[str, typer.Option("--tz", help="Time zone of the request rows' times: local, UTC or an IANA "
                                    "name (Europe/Paris); --json stays in UTC")] = "local",
    cluster: Annotated[str | None, typer.Option("--cluster", envvar="KVPROBE_CLUSTER", help="Price the fixes on "
                                                "this Dask scheduler (tcp://HOST:8786; the `cluster` extra)")] = None,
) -> None:
    """Simulate each provider's cache over a trace, compare with observed usage, explain every miss and
    price the task.

    Example: kvprobe report traces/sample_session.jsonl
    """
    with user_errors():
        rows = _row_limit(requests)
        zone = zone_of(tz)
        filters = Filters(session, agent, parse_since(since, "--since"))
        prices = PriceBook.from_file(price_file)
        fixes = False if no_fixes else (True if what_if else None)
        loaded = load_outcomes(outcomes) if outcomes else None
        with on_cluster(cluster):
            rep = _build(traces, filters, prices, top, not json_out, fixes, predicted, loaded)
        require_requests(rep, traces, {"--session": session, "--agent": agent, "--since": since})
    if json_out:
        print_json_items(rep.json_items())
    elif markdown:
        out.print(to_markdown(rep), markup=False, highlight=False, soft_wrap=True)
    else:  # the answer first: the bill's first line, totals, what the misses cost by cause, the fixes; then
        render_headline(rep)  # the detail
        render_totals(rep)
        if rep.bill is not None:
            render_bill(rep.bill)
        render_causes(rep)
        render_fixes(rep)
        render_fleet(rep)
        render_requests(rep, rows, zone)
        render_blocks(rep)
        render_compactions(rep, zone)
        render_tasks(rep)
        if what_if:
            render_what_if(rep)
        _render_notes(rep)


def require_requests(rep: Report, traces: list[Path], filters: dict[str, str | None]) -> None:
    """An empty input or filters that match nothing is a mistake to report (exit 2), not an empty table. A
    trace whose every request failed is not: the report says so (nothing was billed)."""
    if rep.results or rep.failed:
        return
    if rep.considered:
        given = [f"{flag} {value}" for flag, value in filters.items() if value is not None]
        raise InputError(f"none of the {rep.considered:,} requests matches {' and '.join(given)}",
                         field=given[0].split()[0] if len(given) == 1 else None)
    names = ", ".join(map(str, traces))
    skipped = sum(stats.skipped for _, stats in rep.stats)
    why = f" ({skipped} malformed lines skipped)" if skipped else ""
    raise InputError(f"no requests found{why}: expected a kvprobe trace (JSONL) or agent logs kvprobe can "
                     "import", file=names)


@contextmanager
def on_cluster(address: str | None) -> Iterator[None]:
    """The report's independent units run on this Dask scheduler (none: on this machine)."""
    if not address:
        yield
        return
    from kvprobe import run
    from kvprobe.run.cluster import ClusterUnavailable

    try:
        executor = run.connect(address)
    except ClusterUnavailable as exc:
        raise InputError(str(exc), field="--cluster") from None
    try:
        with run.using(executor):
            yield
    finally:
        executor.close()


def _row_limit(value: str) -> int | None:
    """None: every row; else how many of the costliest."""
    if value == "all":
        return None
    if value == "auto":
        return -1
    if value.isdigit() and int(value) > 0:
        return int(value)
    raise InputError(f"expected all or a number of rows, got {show(value)}", field="--requests")


def _build(traces: list[Path], filters: Filters, prices: PriceBook, top: int, show_progress: bool,
           fixes: bool | None, predicted: bool, outcomes: dict | None) -> Report:
    total = sum(p.stat().st_size for p in traces if p.is_file())
    kwargs = {"filters": filters, "prices": prices, "top": top, "fixes": fixes, "predicted_only": predicted,
              "outcomes": outcomes}
    if not show_progress or total < PROGRESS_MIN_BYTES:
        return build_report(traces, **kwargs)
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn  # ~0.1 s

    columns = (TextColumn("reading"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("read", total=total)
        return build_report(traces, progress=lambda n: bar.advance(task, n), **kwargs)


def render_headline(rep: Report) -> None:
    """The bill's first line: what the misses wasted against the total, and what most of the spend is."""
    if rep.bill is not None:
        out.print(Text(rep.bill.headline, style="bold"))


def render_totals(rep: Report) -> None:
    t = rep.totals
    sessions = len({r.sk.session for r in rep.results})
    out.print(Text.assemble((f"Total ({rep.basis}): ", "bold"),
                            f"{t['requests']:,} requests in {sessions:,} session{'s' if sessions != 1 else ''} · "
                            f"{t['input_tokens']:,} input tokens · ",
                            (f"hit ratio {100 * t['token_hit_ratio']:.1f}%", _ratio_style(t['token_hit_ratio'])),
                            " · ", f"{t['input_equivalent_tokens']:,.0f} input-equivalents · ",
                            (_total_cost(t), "bold")))
    out.print(Text("  (input-equivalents: the input priced in fresh-input tokens, each cache write and read at its "
                   "provider's multiplier, e.g. Claude 1.25x 5m writes, 2x 1h, 0.1x reads: one unit across providers)",
                   style="dim"))
    if rep.failed_note:  # beside the total it is left out of
        out.print(Text(f"Failed: {rep.failed_note}", style="yellow"))
    written = t["cache_write_tokens"]
    out.print(f"Writes: {written:,} tokens (cold start {t['cold_start_write_tokens']:,}, rebuilds "
              f"{t['rebuild_write_tokens']:,}, extensions {t['extension_write_tokens']:,}); missed reads "
              f"{t['missed_read_tokens']:,} tokens")


def _ratio_style(ratio: float) -> str:
    return "green" if ratio >= 0.8 else ("yellow" if ratio >= 0.5 else "red")


def render_causes(rep: Report) -> None:
    causes = rep.causes
    if not causes:
        out.print(Text("No misses: every request read what an ideal prefix cache would have.", style="green"))
        return
    cols = [Col("cause", wrap=True, least=18), Col("requests", "right"), Col("sessions", "right", drop=2),
            Col("missed tokens", "right", drop=1), Col("cost", "right"), Col("fixed by", wrap=True, drop=3)]
    rows = [[c.label, f"{len(c.requests):,}", f"{len(c.sessions):,}", f"{c.missed_tokens:,}",
             money(c.usd), ", ".join(c.fixes) or "-"] for c in causes[: rep.top]]
    print_table("What the misses cost, by cause", cols, rows)
    for c in causes[: min(rep.top, 5)]:
        assert c.example is not None
        more = f" (and {len(c.requests) - 1:,} more like it)" if len(c.requests) > 1 else ""
        out.print(Text.assemble("  ", (c.label, "magenta"), f", e.g. {c.example_request}{more}"))
        out.print(Text(f"    why: {c.example.detail}"))
        out.print(Text(f"    what to do: {advice_for(c.example)}", style="cyan"))
    if len(causes) > rep.top:
        out.print(Text(f"  ({len(causes) - rep.top} more causes in --json)", style="dim"))


def _total_cost(t: dict) -> str:
    unpriced = t["unpriced_requests"]
    if t["cost_usd"] is None or not unpriced:
        return money(t["cost_usd"])
    return f"{money(t['cost_usd'])} + n/a for {unpriced} unpriced request{'s' if unpriced > 1 else ''}"


def render_blocks(rep: Report) -> None:
    if not rep.blocks:
        return
    # narrow, the counts go first, then what kind of block it is; "first" tells apart two versions of one
    # path (system[0] before and after an edit) and stays longest; the money columns stay
    cols = [Col("block", wrap=True), Col("kind", wrap=True, drop=4), Col("first", drop=5)]
    cols += [Col(name, "right", drop=drop) for name, drop in (("tokens", 3), ("requests", 2), ("write", None),
                                                              ("reads", None), ("fresh", 1), ("total", None))]
    priced = rep.totals["cost_usd"] is not None  # blocks of an unpriced trace cost n/a, not $0

    def usd(value: float) -> str:
        return money(value if priced else None)
    rows = [[b.path, b.kind, b.first_request, f"{b.tokens:,}", str(b.requests), usd(b.write_usd),
             usd(b.read_usd), usd(b.fresh_usd), usd(b.total_usd)] for b in rep.blocks[:5]]
    print_table("Costliest blocks over the task", cols, rows)
    from kvprobe.economics.attribution import carry_note
    for b in rep.blocks[:10]:  # every block is in --json; the notes follow the costliest
        note = carry_note(b)
        if note:
            out.print(Text(f"  {note}", style="yellow"))


def render_compactions(rep: Report, zone: dt.tzinfo = dt.timezone.utc) -> None:
    """Each compaction's economics (usage-only logs too: the transcript marks them), at the time the rows above
    show (an id alone is hard to find in a long log)."""
    for c in rep.compactions:
        j = c.to_json()
        at = dt.datetime.fromtimestamp(c.rebuild.sk.started_at, zone).strftime("%m-%d %H:%M:%S")
        be = j["break_even_turns"]
        if j["summary_request"] is None and j["kind"] != "truncation":
            verdict = "break-even unknown (the summarising call logged no usage)"
        elif be:
            verdict = f"pays back after {be} turns ({'paid off' if j['paid_off'] else 'not yet paid off'})"
        else:
            verdict = "never pays back"
        summary = f"summary {money(j['summary_cost_usd'])}, " if j["summary_request"] is not None else ""
        what = "Older messages dropped" if j["kind"] == "truncation" else "Compaction"
        out.print(Text(f"{what} at {at} ({j['rebuild_request']}): {j['tokens_before']:,} → {j['tokens_after']:,} tokens; "
                       f"{summary}rebuild {money(j['rebuild_cost_usd'])}; {verdict}", style="cyan"))


def render_tasks(rep: Report) -> None:
    if len(rep.tasks) < 2 and not any(t.outcome.passed is not None for t in rep.tasks):
        return
    o = overall(rep.tasks)
    times = f" · median {duration(o['median_duration_s'])} · slowest decile {duration(o['slowest_decile_duration_s'])}"
    if o["pass_rate"] is None:  # no outcome known (no --outcomes): a pass rate and a cost per accepted task say nothing
        out.print(Text.assemble(("Tasks: ", "bold"), f"{o['tasks']}{times} (--outcomes: pass rate and cost per "
                                "accepted task)"))
        return
    rate = f"{100 * o['pass_rate']:.0f}%"
    out.print(Text.assemble(("Tasks: ", "bold"), f"{o['tasks']} · pass rate {rate} · cost per accepted task ",
                            (money(o["cost_per_accepted_task_usd"]), "bold"), times))


def render_fixes(rep: Report) -> None:
    if rep.what_if is None:
        return
    if not rep.fixes:
        out.print(Text(f"Fixes: {rep.fixes_note}.", style="dim"))
        return
    out.print(Text("Fixes, most valuable first (each priced by one simulation of the whole log with it applied)",
                   style="bold"))
    for n, fix in enumerate(rep.fixes, start=1):
        on_top = f" on top of {', '.join(fix['requires'])}" if fix.get("requires") else ""
        out.print(Text.assemble(f"  {n}. ", (fix["kind"], "magenta"), " saves ",
                                (money(fix["saving_usd"]), "bold green"),
                                f" ({fix['saving_input_equivalent_tokens']:,.0f} input-equivalents{on_top}) · "
                                f"{fix['reach']['text']}"))
        out.print(Text(f"     {fix['detail']}", style="cyan"))
    for alt in rep.alternatives:  # same misses, a chosen fix does better: priced, not applied
        variant = f" ({alt['variant']})" if alt.get("variant") else ""
        out.print(Text.assemble("  or ", (alt["kind"] + variant, "magenta"),
                                f" instead of {' + '.join(alt.get('instead_of', []))}"
                                f": saves {money(alt['saving_usd'])} ({alt['saving_input_equivalent_tokens']:,.0f} "
                                f"input-equivalents) · {alt['reach']['text']}", style="dim"))
        out.print(Text(f"     {alt['detail']}", style="dim"))
    a, b = rep.with_all_fixes["baseline_predicted"], rep.with_all_fixes
    # both sides are kvprobe's prediction; say so next to the logged total printed above
    logged = rep.totals["cost_usd"] if any(r.observed for r in rep.results) else None
    out.print(Text.assemble(("With all fixes (predicted before → after): ", "bold"),
                            f"hit ratio {100 * a['token_hit_ratio']:.1f}% → ",
                            (f"{100 * b['token_hit_ratio']:.1f}%", "green"), f", {money(a['cost_usd'])} → ",
                            (money(b["cost_usd"]), "green"),
                            " (one simulation of what `kvprobe fix` writes"
                            + (f"; the logged total is {money(logged)})" if logged is not None else ")")))


def render_fleet(rep: Report) -> None:
    for f in rep.fleet:
        out.print(Text.assemble(("Fleet: ", "bold"), f.summary))
        if f.fixes:
            out.print(Text(f"  fixed by: {', '.join(f.fixes)}", style="cyan"))


def render_what_if(rep: Report) -> None:
    if rep.what_if is None:
        return
    before = {r.sk.id: r for r in rep.what_if.baseline}
    # "before → after" cells never wrap at their arrow: narrow, fresh and then write are left out
    cols = [Col("id", wrap=True)] + [Col(name, "right", drop=drop) for name, drop in (
        ("read", None), ("write", 2), ("fresh", 1), ("cost", None))]
    rows = []
    for r in rep.what_if.fixed:
        b = before.get(r.sk.id)
        cost = f"{money(b.cost_usd)} → {money(r.cost_usd)}" if b else f"+{money(r.cost_usd)}"
        cells = [_before_after(b.usage if b else None, r.usage, name)
                 for name in ("cache_read_tokens", "cache_write_tokens", "fresh_input_tokens")]
        rows.append([r.sk.id + (" (keep-alive)" if r.sk.extra.get("keep_alive") else ""), *cells, cost])
    print_table("What if: predicted before → after all fixes", cols, rows)


def _before_after(before, after, name: str) -> str:
    now = getattr(after, name)
    return f"{getattr(before, name):,} → {now:,}" if before is not None else f"+{now:,}"


def _render_notes(rep: Report) -> None:  # on stderr, after everything
    for note in rep.notes:
        if note != rep.failed_note:  # shown with the totals
            err.print(note)
    for name, stats in rep.stats:
        if stats.skipped:
            err.print(f"{name}: skipped {stats.skipped} malformed lines")
    for line in fallback_lines(rep):
        err.print(f"not in the catalog: {line}")
    if rep.unpriced_models:
        err.print(f"no price for: {', '.join(rep.unpriced_models)} (use --price-file)")


def to_markdown(rep: Report) -> str:
    t = rep.totals
    lines = ["### kvprobe report", "", *([rep.bill.headline, ""] if rep.bill is not None else []),
             "| requests | input tokens | hit ratio | input-equivalents | cost |", "|---:|---:|---:|---:|---:|",
             f"| {t['requests']} | {t['input_tokens']:,} | {100 * t['token_hit_ratio']:.1f}% | "
             f"{t['input_equivalent_tokens']:,.0f} | {money(t['cost_usd'])} |", ""]
    if rep.misses:
        lines += ["| request | cost of miss | cause | what to do |", "|---|---:|---|---|"]
        for m in rep.misses[: rep.top]:
            d = m.result.diagnoses[0]
            lines.append(f"| {m.result.sk.id} | {money(m.usd)} | {d.kind}: {d.detail} | {advice_for(d)} |")
    else:
        lines.append("No cache misses.")
    return "\n".join(lines)
