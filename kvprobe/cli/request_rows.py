"""`report`'s request rows, as a person recognises them: local time, project, the session's title (or first
prompt), agent; past 50 requests the costliest, costliest first; a legend for what a blank "why" means."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from rich.text import Text

from kvprobe.analysis.simulate import RequestResult
from kvprobe.cli.common import money, out
from kvprobe.cli.tables import Col, print_table
from kvprobe.economics.bill import project_of
from kvprobe.importers.titles import shorten
from kvprobe.report import Report
from kvprobe.wording import zone_name

AUTO_ALL_ROWS, AUTO_ROWS = 50, 20  # --requests auto: every row up to 50 requests, else the 20 costliest
SESSION_CHARS = 24  # a session's title in a row (the bill's session table has 40)
# what a blank "why" cell means, said under the table whenever a row has one
BLANK_WHY = ("a blank why: the request read all that an ideal prefix cache would have (nothing to explain); "
             "cold start: nothing was cached before it")

# Narrow, the columns a row can do without go first: fresh, input, project, agent, id, then the session;
# what the cache did (read, write, hit %), what it cost, why and when stay longest. `why` wraps between
# words. project and session are columns only when the rows shown have more than one of them.
_COLUMNS = {"time": Col("time", drop=8), "project": Col("project", drop=3, cut="start"),
            "session": Col("session", drop=6, wrap=True, least=12), "id": Col("id", drop=5, cut="start"),
            "agent": Col("agent", drop=4),
            "input": Col("input", "right", drop=2), "read": Col("read", "right", wrap=True),
            "write": Col("write", "right", drop=7), "fresh": Col("fresh", "right", drop=1),
            "hit %": Col("hit %", "right"), "cost": Col("cost", "right"), "why": Col("why", wrap=True, least=16)}


def _diag_words(r: RequestResult) -> str:
    return "; ".join(d.short for d in r.diagnoses)


def _chosen(rep: Report, limit: int | None) -> tuple[list[RequestResult], bool]:
    """The rows to show and whether they are the costliest (costliest first) rather than every request."""
    results = rep.results
    if limit == -1:
        limit = None if len(results) <= AUTO_ALL_ROWS else AUTO_ROWS
    if limit is None or len(results) <= limit:
        return results, False
    missed = {id(m.result): m.input_equivalent for m in rep.misses}
    return sorted(results, key=lambda r: (-(r.cost_usd or 0.0), -missed.get(id(r), 0.0)))[:limit], True


def _stamps(shown: list[RequestResult], zone: dt.tzinfo) -> list[str]:
    """Each row's time in the zone: HH:MM:SS when all fall on one day there, else MM-DD HH:MM."""
    local = [dt.datetime.fromtimestamp(r.sk.started_at, zone) for r in shown]
    one_day = len({t.date() for t in local}) <= 1
    return [t.strftime("%H:%M:%S" if one_day else "%m-%d %H:%M") for t in local]


REBUILD_WORDS = {"summary": "after a compaction", "truncation": "older messages dropped"}


def render_requests(rep: Report, limit: int | None, zone: dt.tzinfo) -> None:
    shown, costliest = _chosen(rep, limit)
    titles = rep.bill.titles if rep.bill is not None else {}
    projects = [Path(p).name or p for p in map(project_of, shown)]
    sessions = [shorten(titles.get(r.sk.session) or r.sk.session, SESSION_CHARS) for r in shown]
    # a project or session shared by every row is no column: the bill's tables above name it
    names = ["time", *(["project"] if len(set(projects)) > 1 else []),
             *(["session"] if len(set(sessions)) > 1 else []),
             "id", "agent", "input", "read", "write", "fresh", "hit %", "cost", "why"]
    # the request that wrote a compaction's summary: its whole history sent to a new agent, the compaction's cost
    summaries = {id(c.summary) for c in rep.compactions if c.summary is not None}
    # the first request after a compaction writes the shorter history again: that, not a miss, is its cost
    rebuilds = {id(c.rebuild): REBUILD_WORDS[c.kind] for c in rep.compactions}
    rows = []
    for r, stamp, project, session in zip(shown, _stamps(shown, zone), projects, sessions):
        u, p = r.usage, r.predicted
        read = f"{u.cache_read_tokens:,}"
        if r.observed and p is not None and p.cache_read_tokens != u.cache_read_tokens:
            read += f" (pred {p.cache_read_tokens:,})"
        hit = f"{100 * u.cache_read_tokens / u.input_tokens:.0f}" if u.input_tokens else "-"
        why = _diag_words(r) or ("compaction summary" if id(r) in summaries else rebuilds.get(id(r)) or
                                 ("cold start" if r.write_kind == "cold_start" else ""))
        cells = {"time": stamp, "project": project, "session": session, "id": r.sk.id, "agent": r.sk.agent,
                 "input": f"{u.input_tokens:,}", "read": read, "write": f"{u.cache_write_tokens:,}",
                 "fresh": f"{u.fresh_input_tokens:,}", "hit %": hit, "cost": money(r.cost_usd),
                 "why": Text(why, style="yellow" if r.diagnoses else "dim")}
        rows.append([cells[n] for n in names])
    title = "Requests" if not costliest else \
        f"Requests: the {len(shown):,} costliest of {len(rep.results):,}, by cost (--requests all: every row)"
    print_table(title, [_COLUMNS[n] for n in names], rows)
    legend = [f"times in {zone_name(zone, shown[0].sk.started_at)} (--tz)"] if shown else []
    if any(not r.diagnoses for r in shown):
        legend.append(BLANK_WHY)
    if any(id(r) in rebuilds and not r.diagnoses for r in shown):
        legend.append("after a compaction / older messages dropped: the first request on the shorter history, "
                      "which it writes again (the compactions below)")
    if any(id(r) in summaries for r in shown):
        legend.append("compaction summary: the request that summarised the history (its cost is the compaction's, "
                      "below)")
    if legend:
        out.print(Text("; ".join(legend), style="dim"))
