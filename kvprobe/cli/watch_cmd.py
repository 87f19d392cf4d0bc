"""`kvprobe watch [PATH...]`: follow a capture trace or agent transcripts and show each cache miss as it happens."""
from __future__ import annotations

import os
import sys
import time
from collections import deque
from typing import Annotated

import orjson
import typer
from rich.console import Group
from rich.live import Live
from rich.text import Text

from kvprobe.analysis.diagnosis import advice_for
from kvprobe.cli.common import err, fail, money, out, terminal_safe, user_errors
from kvprobe.cli.tables import Col, build, print_block
from kvprobe.importers import default_sources
from kvprobe.pricing import PriceBook
from kvprobe.trace.record import format_time
from kvprobe.watch import Event, Step, Watch

RECENT_MISSES = 8


def watch(
    paths: Annotated[list[str] | None, typer.Argument(
        help="Traces or transcript folders [default: ~/.claude/projects and ~/.codex/sessions, with ~/.gemini/tmp, ~/.qwen/projects, ~/.local/share/opencode, ~/.kimi/sessions, ~/.copilot/otel, Cline's tasks, ~/.openhands/conversations and ~/.vibe where present]")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON line per request on stdout (flushed)")] = False,
    once: Annotated[bool, typer.Option("--once", help="Analyse what is there now and exit")] = False,
    exit_after: Annotated[int | None, typer.Option("--exit-after", min=1, help="Exit after N requests")] = None,
    idle_timeout: Annotated[float | None, typer.Option(
        "--idle-timeout", min=0.0, help="Exit after this many seconds without a new request")] = None,
    from_start: Annotated[bool | None, typer.Option(
        "--from-start/--from-end", help="Count what the files already hold, or only what is written from now "
        "[default: from start for named paths, from end for the default agent folders]")] = None,
    interval: Annotated[float, typer.Option("--interval", min=0.01, help="Seconds between polls")] = 0.5,
    settle: Annotated[float, typer.Option(
        "--settle", min=0.0, help="Seconds a transcript's newest response may stay quiet before it counts as "
        "complete (it counts at once when anything follows it)")] = 5.0,
    price_file: Annotated[str | None, typer.Option("--price-file", help="TOML/JSON price overrides")] = None,
) -> None:
    """Follow traces and agent logs as they grow: requests, hit ratio, cost so far, and each miss with its cause.

    New files in a watched folder are picked up; a half-written last line waits for its newline.

    A rotated, truncated or deleted file never loses or double-counts a request.

    Ends on Ctrl-C, or with --once, --exit-after N or --idle-timeout S (for scripts and CI).

    Example: kvprobe watch trace.jsonl   (while `kvprobe capture --out trace.jsonl -- python agent.py` runs)
    """
    with user_errors():
        named = bool(paths)
        sources = list(paths or [str(p) for p in default_sources()])
        if not sources:
            fail("no logs found in ~/.claude/projects, ~/.codex/sessions, ~/.gemini/tmp, ~/.qwen/projects, "
                 "~/.local/share/opencode, ~/.kimi/sessions or ~/.copilot/otel: name a trace or a folder")
        w = Watch(sources, from_end=not (named if from_start is None else from_start), settle_s=settle,
                  prices=PriceBook.from_file(price_file))
        steps = w.run(interval=interval, once=once, exit_after=exit_after, idle_timeout=idle_timeout)
        try:
            if json_out:
                _stream_json(w, steps)
            else:
                _show_live(w, steps, sources, once)
        except KeyboardInterrupt:
            pass
        except BrokenPipeError:  # the reading end of a pipe went away (`| head`): nothing more to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None
    _summary(w, json_out)


def _notes(step: Step) -> list[str]:
    lines = [f"{e.path}: {e.kind}" for e in step.file_events if e.kind != "opened"]
    return lines + [f"skipped {s}" for s in step.skipped] + [f"failed, not priced: {f}" for f in step.failed]


def _stream_json(w: Watch, steps) -> None:
    for step in steps:
        for note in _notes(step):
            err.print(f"watch: {note}", soft_wrap=True)
        for event in step.events:
            sys.stdout.write(terminal_safe(orjson.dumps(event.to_json())).decode() + "\n")
            sys.stdout.flush()  # one complete line per request, as it happens, for the next tool in a pipe


def _cause(event: Event, detail: bool = True) -> Text:
    d = event.result.diagnoses[0]
    label = "reported by the API" if not d.inferred else "inferred"
    return Text.assemble((d.short, "magenta"), f" ({label})" + (f": {d.detail}" if detail else ""))


def stamp(seconds: float, today: str | None = None) -> str:
    """When a request started, as the user lived it: the time alone today, with the date on any other day
    (a watch over logs of several days, or one left running past midnight)."""
    text = format_time(seconds)
    today = today or format_time(time.time())[:10]
    if text[:10] == today:
        return text[11:19]
    return (text[5:10] if text[:4] == today[:4] else text[:10]) + " " + text[11:19]


def miss_line(event: Event) -> Text:
    r = event.result
    return Text.assemble((stamp(r.sk.started_at), "dim"), " ", ("miss ", "bold red"),
                         f"{r.sk.id} [{r.sk.session}/{r.sk.agent}] ", (f"{r.missed_tokens:,}", "bold"),
                         " tokens not read, ", (money(event.miss_usd), "red"), " extra · ", _cause(event),
                         (f" · what to do: {advice_for(r.diagnoses[0])}", "cyan"))


def _header(w: Watch, files: int) -> Text:
    t = w.totals
    return Text.assemble(("kvprobe watch", "bold"), f" · {files} file(s) · ", (f"{t.requests:,}", "bold"),
                         " requests · hit ratio ", (f"{100 * t.hit_ratio:.1f}%", "green"), " · cost so far ",
                         (money(t.cost_usd), "bold"), f" · {t.misses} miss(es) costing ", (money(t.miss_usd), "red"),
                         f" · {w.skips.total} malformed line(s) skipped" if w.skips.total else "")


def _view(w: Watch, recent: deque[Event]) -> Group:
    cols = (Col("time", drop=2), Col("request", wrap=True), Col("agent", wrap=True, drop=1),
            Col("not read", "right"), Col("extra cost", "right"), Col("cause", wrap=True))
    rows = [[stamp(e.result.sk.started_at), e.result.sk.id, e.result.sk.agent,
             f"{e.result.missed_tokens:,}", money(e.miss_usd), _cause(e, detail=False)] for e in recent]
    table, _ = build("Recent misses", cols, rows)
    parts = [_header(w, len(w.follower.files))]
    return Group(*parts, table) if recent else Group(*parts, Text("no misses so far", style="green"))


def _print_step(step: Step, recent: deque[Event], console) -> None:
    """Each miss (and each rotation, deletion or skipped request) as a line above the live view."""
    for note in _notes(step):
        console.print(Text(f"  {note}", style="dim"), soft_wrap=True)
    for event in step.events:
        if event.is_miss:
            recent.append(event)
            console.print(miss_line(event), soft_wrap=True)


def _show_live(w: Watch, steps, sources: list[str], once: bool) -> None:
    recent: deque[Event] = deque(maxlen=RECENT_MISSES)
    if not out.is_terminal:  # piped or logged: the miss lines as they happen, the totals at the end
        for step in steps:
            _print_step(step, recent, out)
        print_block(_view(w, recent))
        return
    if not once:
        err.print(f"watching {', '.join(sources)} (Ctrl-C to stop)", soft_wrap=True)
    with Live(_view(w, recent), console=out, auto_refresh=False, transient=False) as live:
        for step in steps:
            _print_step(step, recent, live.console)
            live.update(_view(w, recent), refresh=True)


def _summary(w: Watch, json_out: bool) -> None:
    t = w.totals
    line = (f"watch: {t.requests:,} requests, hit ratio {100 * t.hit_ratio:.1f}%, cost {money(t.cost_usd)}, "
            f"{t.misses} miss(es) costing {money(t.miss_usd)}")
    if t.unpriced:
        line += f", {t.unpriced} request(s) of unknown price"
    if t.failed:
        line += f", {t.failed} failed (not priced)"
    if json_out:
        err.print(line, soft_wrap=True)
    for reason, count in w.skips.reasons.most_common():
        err.print(f"watch: skipped {count:,}: {reason}", soft_wrap=True)
    if w.duplicates:
        err.print(f"watch: {w.duplicates:,} request(s) seen again in another file, counted once", soft_wrap=True)
    for path in sorted(w.follower.unknown):
        err.print(f"watch: ignored {path} (no known trace or log format)", soft_wrap=True)
