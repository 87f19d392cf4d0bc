"""The HTML report: one self-contained file (inline CSS, JS and SVG; nothing fetched) for a `Report`.

Sections: the money (spent, wasted by cause, saved by each fix), the timeline chart in dollars or tokens, the
fixes with their savings, findings across sessions, the costliest blocks, the costliest misses, every
request, and notes. All trace-derived text is escaped; a Content-Security-Policy forbids any network access and allows only
this module's own script (by hash), so even a markup slip could not run injected code.
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
from importlib.resources import files
from pathlib import Path

from kvprobe import __version__
from kvprobe.analysis.diagnosis import advice_for
from kvprobe.analysis.simulate import RequestResult
from kvprobe.pricing import PriceBook
from kvprobe.render.bill import bill_section, headline
from kvprobe.render.chart import MISS_KINDS, Timeline, build_timeline
from kvprobe.render.money import (blocks_table, cost_cards, fleet_section, grade, instances, reach,
                                  request_ids)
from kvprobe.render.svg import AGENT_COLOURS, MIN_SLOT, PLOT_WIDTH, esc, legend_items, render_svg
from kvprobe.importers.titles import shorten
from kvprobe.report import Report, fallback_lines
from kvprobe.trace.record import format_time
from kvprobe.wording import percent, plural, short_id, sources, usd, zone_name


def _asset(name: str) -> str:
    return files("kvprobe.render").joinpath(name).read_text(encoding="utf-8")


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    return (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; "
            "base-uri 'none'; form-action 'none'")


money = usd  # the terminal's figures, to the same decimals


def _chips(kinds: list[str]) -> str:
    return "".join(f'<span class="chip" style="background:{MISS_KINDS.get(k, MISS_KINDS["unexplained"])[2]}">'
                   f'{esc(k)}</span>' for k in kinds)


def _fixes(rep: Report) -> str:
    if not rep.fixes:
        why = rep.fixes_note or "fixes were not computed (--no-fixes)"
        return f'<section id="fixes"><h2>Fixes</h2><p class="hint">{esc(why)}</p></section>'
    total = rep.totals["input_equivalent_tokens"] or 1
    rows = []
    reaches = any("reach" in f for f in rep.fixes)
    for f in sorted(rep.fixes, key=lambda f: -(f.get("saving_input_equivalent_tokens") or 0)):
        share = min(100.0, 100 * (f.get("saving_input_equivalent_tokens") or 0) / total)
        rows.append(
            f'<tr data-kind="{esc(f["kind"])}"><td><code>{esc(f["kind"])}</code></td>'
            f'<td class="ids">{esc(request_ids(f.get("requests", []), 3))}{instances(f)}</td>'
            + (f'<td>{esc(reach(f))}</td>' if reaches else "") +
            f'<td class="num saving" data-v="{esc(f.get("saving_usd"))}">{esc(money(f.get("saving_usd")))}</td>'
            f'<td class="num opt" data-v="{esc(f.get("saving_input_equivalent_tokens"))}">'
            f'{f.get("saving_input_equivalent_tokens") or 0:,.0f}</td>'
            f'<td class="num opt"><span class="meter"><span style="width:{share:.1f}%"></span></span> {share:.1f}%</td>'
            f'<td>{esc(f.get("detail", ""))}</td></tr>')
    for a in rep.alternatives:  # the same misses, fixed another way that a chosen fix does better: priced only
        instead = " + ".join(a.get("instead_of", []))
        rows.append(
            f'<tr class="alt" data-kind="{esc(a["kind"])}"><td>or <code>{esc(a["kind"])}</code></td>'
            f'<td class="ids">{esc(request_ids(a.get("requests", []), 3))}</td>'
            + (f'<td>{esc(reach(a))}</td>' if reaches else "") +
            f'<td class="num" data-v="{esc(a.get("saving_usd"))}">{esc(money(a.get("saving_usd")))}</td>'
            f'<td class="num opt" data-v="{esc(a.get("saving_input_equivalent_tokens"))}">'
            f'{a.get("saving_input_equivalent_tokens") or 0:,.0f}</td>'
            f'<td class="num opt">instead of {esc(instead)}</td><td>{esc(a.get("detail", ""))}</td></tr>')
    head = ("<tr><th>fix</th><th>requests</th>" + ("<th>reach</th>" if reaches else "")
            + "<th class=num>saves</th><th class='num opt'>input-equivalents</th>"
            "<th class='num opt'>of total</th><th>what to change</th></tr>")
    note = ("Each saving comes from re-simulating the requests that change with only that fix; the total is "
            "one simulation of what `kvprobe fix` writes.")
    return (f'<section id="fixes"><h2>Fixes</h2><p class="hint">{esc(note)}</p>'
            f'<table id="kv-fixes"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table></section>')


def _misses(rep: Report) -> str:
    if not rep.misses:
        return ('<section id="misses"><h2>Costliest misses</h2><p class="hint">No misses: every request read '
                'what an ideal prefix cache would have.</p></section>')
    rows = []
    for m in rep.misses:
        d = m.result.diagnoses[0]
        rows.append(f'<tr><td><code>{esc(m.result.sk.id)}</code></td><td class="num">{esc(money(m.usd))}</td>'
                    f'<td class="num">{m.input_equivalent:,.0f}</td><td>{_chips([d.kind])}</td>'
                    f'<td>{esc(d.detail)}</td><td class="advice">{esc(advice_for(d))}</td></tr>')
    head = ("<tr><th>request</th><th class=num>cost of miss</th><th class=num>input-equivalents</th>"
            "<th>cause</th><th>why</th><th>what to do</th></tr>")
    return (f'<section id="misses"><h2>Costliest misses</h2><table id="kv-misses"><thead>{head}</thead>'
            f'<tbody>{"".join(rows)}</tbody></table></section>')


# (heading, sort type, shown on narrow screens): the optional columns give way below 1,000 px (report.css)
_COLUMNS = (("#", "num", True), ("time", "text", True), ("id", "text", True), ("session", "text", False),
            ("agent", "text", True), ("model", "text", False), ("input", "num", True), ("read", "num", True),
            ("write", "num", True), ("fresh", "num", False), ("hit %", "num", True), ("missed", "num", False),
            ("cost", "num", True), ("why", "text", True))
ID_CHARS = 12  # ids (request, session) are cut to this many characters; the cell's title holds the whole


def _id(value: str | None, keep: int = ID_CHARS) -> str:
    """An id in a cell: shortened (`3f2b9c1e-7d4…`) with the full value on hover."""
    text = value or ""
    return f'<code title="{esc(text)}">{esc(short_id(text, keep))}</code>' if text else ""


def _num(v: float | int | None, text: str, cls: str = "") -> str:
    return f'<td class="num{" " + cls if cls else ""}" data-v="{"" if v is None else v}">{esc(text)}</td>'


MAX_TABLE_ROWS = 5000  # beyond this, the table keeps the requests with the costliest misses, then the costliest


def _shown(ordered: list[RequestResult], limit: int) -> list[int]:
    if len(ordered) <= limit:
        return list(range(len(ordered)))
    rank = sorted(range(len(ordered)), key=lambda i: (-ordered[i].missed_tokens, -(ordered[i].cost_usd or 0)))
    return sorted(rank[:limit])


def _session(session: str, title: str | None) -> str:
    """A session cell: its title in the agent's log (shortened) when it has one, the id and title on hover."""
    if not title:
        return _id(session)
    return f'<span title="{esc(session)}: {esc(title)}">{esc(shorten(title, SESSION_CHARS))}</span>'


SESSION_CHARS = 24


def _row(i: int, r: RequestResult, tl: Timeline, zone: dt.tzinfo, title: str | None = None) -> str:
    u, sk = r.usage, r.sk
    fresh = max(u.fresh_input_tokens, 0)
    hit = u.cache_read_tokens / u.input_tokens if u.input_tokens else None
    kinds = [d.kind for d in r.diagnoses]
    why = "; ".join(d.detail for d in r.diagnoses) or ("cold start" if r.write_kind == "cold_start" else "")
    lane = tl.lane(sk.agent)
    colour = AGENT_COLOURS[lane % len(AGENT_COLOURS)]
    level = grade(u.cache_read_tokens, r.reusable_tokens)
    return (
        f'<tr id="row-{i}" data-i="{i}" data-bar="bar-{i // tl.per_slot}-{lane}" data-id="{esc(sk.id)}"'
        f'{" class=missed" if kinds else ""}>{_num(i + 1, str(i + 1))}'
        f'<td data-v="{sk.started_at}">{dt.datetime.fromtimestamp(sk.started_at, zone).strftime("%H:%M:%S.%f")[:12]}</td>'
        f'<td data-v="{esc(sk.id)}">{_id(sk.id)}</td>'
        f'<td class="name opt" data-v="{esc(sk.session)}">{_session(sk.session, title)}</td>'
        f'<td class="name" data-v="{esc(sk.agent)}"><span class="agent" style="background:{colour}"></span>'
        f'<span title="{esc(sk.agent)}">{esc(short_id(sk.agent, 16))}</span></td>'
        f'<td class="name opt" data-v="{esc(sk.model or "")}" title="{esc(sk.model or "")}">{esc(sk.model or "")}</td>'
        f'{_num(u.input_tokens, f"{u.input_tokens:,}")}{_num(u.cache_read_tokens, f"{u.cache_read_tokens:,}")}'
        f'{_num(u.cache_write_tokens, f"{u.cache_write_tokens:,}")}{_num(fresh, f"{fresh:,}", "opt")}'
        f'{_num(None if hit is None else round(hit, 4), "-" if hit is None else f"{100 * hit:.0f}", level)}'
        f'{_num(r.missed_tokens, f"{r.missed_tokens:,}" if r.missed_tokens else "", "opt")}'
        f'{_num(r.cost_usd, money(r.cost_usd))}'
        f'<td class="why" data-v="{esc(" ".join(kinds))}">{_chips(kinds)}{esc(why)}</td></tr>')


def _requests(tl: Timeline, rep: Report, limit: int = MAX_TABLE_ROWS, zone: dt.tzinfo = dt.timezone.utc) -> str:
    ordered = sorted(rep.results, key=lambda r: (r.sk.started_at, r.sk.order))
    shown = _shown(ordered, limit)
    titles = rep.bill.titles if rep.bill is not None else {}
    rows = "".join(_row(i, ordered[i], tl, zone, titles.get(ordered[i].sk.session)) for i in shown)
    note = ""
    if len(shown) < len(ordered):
        note = (f'<p class="hint">Showing {len(shown):,} of {len(ordered):,} requests: those with the largest '
                "missed reads, then the costliest. For all of them: kvprobe db load, then kvprobe sql.</p>")
    when = f"time ({zone_name(zone, ordered[0].sk.started_at)})" if ordered else "time"
    head = "".join(f'<th data-type="{t}" class="{"num" if t == "num" else ""}{"" if narrow else " opt"}">'
                   f'{esc(when if c == "time" else c)}</th>' for c, t, narrow in _COLUMNS)
    return ('<section id="requests"><h2>Requests</h2>'
            '<input id="kv-filter" type="search" placeholder="filter: id, agent, session, cause…" '
            f'aria-label="filter requests">{note}'
            f'<div class="table-wrap"><table id="kv-requests"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody>'
            "</table></div></section>")


def _notes(rep: Report) -> str:
    items = [f"{name}: {s.records:,} records" + (f", {s.skipped:,} malformed lines skipped" if s.skipped else "")
             for name, s in rep.stats]
    items += list(rep.notes)
    items += [f"not in the catalog: {line}" for line in fallback_lines(rep)]
    if rep.unpriced_models:
        items.append("no price for: " + ", ".join(rep.unpriced_models))
    lis = "".join(f"<li>{esc(i)}</li>" for i in items)
    return f'<section id="notes"><h2>Inputs and notes</h2><ul class="notes">{lis}</ul></section>'


def _legend(tl: Timeline, unit: str) -> str:
    """The chart's legend as page text: it wraps to any width (the chart itself is scaled to the page)."""
    items = "".join(f'<li><svg width="14" height="14" viewBox="-1 -1 14 14" aria-hidden="true">{swatch}</svg>'
                    f'{esc(label)}</li>' for swatch, label in legend_items(tl, unit, "#fde2e2"))
    return f'<ul class="legend">{items}</ul>'


def _timeline(tl: Timeline, tokens_svg: str, usd_svg: str | None) -> str:
    """The chart, in dollars (when priced) and in tokens, switched by two radio buttons (CSS only)."""
    per_slot = f" (each bar sums {tl.per_slot} consecutive requests)" if tl.per_slot > 1 else ""
    if usd_svg is None:
        charts = f'<div class="chart-wrap">{tokens_svg}{_legend(tl, "tokens")}</div>'
        unit = "tokens (not every request could be priced)"
    else:
        charts = ('<input type="radio" name="kv-unit" id="kv-unit-usd" checked>'
                  '<label for="kv-unit-usd">dollars</label>'
                  '<input type="radio" name="kv-unit" id="kv-unit-tokens"><label for="kv-unit-tokens">tokens</label>'
                  f'<div class="chart-wrap unit-usd">{usd_svg}{_legend(tl, "usd")}</div>'
                  f'<div class="chart-wrap unit-tokens">{tokens_svg}{_legend(tl, "tokens")}</div>')
        unit = "dollars (each bar is the request's cost by token class) or tokens"
    return ('<section id="timeline"><h2>Timeline</h2>'
            f'<div class="chart-switch">{charts}</div>'
            f'<p class="hint">One bar per request in start order{esc(per_slot)}, a lane per agent, in {esc(unit)}.</p>'
            '<p class="hint" id="kv-js-summary">Hover a bar for details.</p></section>')


def render_html(rep: Report, *, title: str | None = None, prices: PriceBook | None = None,
                zone: dt.tzinfo = dt.timezone.utc) -> str:
    """The whole report page as one string. `prices`: those the report was priced with, for the dollars of
    the chart and of the waste (default: kvprobe's offline prices, as `build_report` uses); `zone`: the
    requests table's times (the chart's axis stays in UTC)."""
    prices = prices or PriceBook()
    # as many bars as the page's width holds (consecutive requests share one beyond): it never scrolls sideways
    tl = build_timeline(rep.results, max_slots=PAGE_SLOTS, prices=prices, misses=rep.misses)
    title = title or f"kvprobe report: {report_sources(rep)}"
    tokens_svg, _, _ = render_svg(tl, legend=False)
    usd_svg = render_svg(tl, unit="usd", suffix="-usd", legend=False)[0] if tl.priced else None
    script, style = _asset("report.js"), _asset("report.css")
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    starts = [r.sk.started_at for r in rep.results]
    span = f" · {format_time(min(starts))} → {format_time(max(starts))}" if starts else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{esc(_csp(script))}">'
        '<meta name="referrer" content="no-referrer"><meta name="viewport" content="width=device-width">'
        f"<title>{esc(title)}</title><style>{style}</style></head><body>"
        f"<header><h1>{esc(title)}</h1><p class=\"sub\">{tl.requests:,} requests · {plural(len(tl.lane_of_agent), 'agent')}"
        f"{esc(span)} · generated {esc(generated)} by kvprobe {esc(__version__)}</p>{headline(rep)}</header>"
        f"{cost_cards(rep)}{bill_section(rep)}{_timeline(tl, tokens_svg, usd_svg)}"
        f"{_fixes(rep)}{fleet_section(rep)}{blocks_table(rep)}{_misses(rep)}{_requests(tl, rep, zone=zone)}{_notes(rep)}"
        "<footer>Self-contained report: no network access, no external files.</footer>"
        f'<div id="kv-tip" hidden></div><script>{script}</script></body></html>\n')


PAGE_SLOTS = int(PLOT_WIDTH // MIN_SLOT)
LOG_NAMES = {"claude_code": "Claude Code", "codex": "Codex", "gemini_cli": "Gemini CLI", "qwen_code": "Qwen Code",
             "opencode": "OpenCode", "har": "HAR", "otel": "OpenTelemetry", "litellm": "LiteLLM"}


def _source(path: str) -> str:
    """One input in words: a trace by its file name, a folder of agent logs by what it holds and its name
    (`Claude Code logs in -home-me-app`)."""
    name = Path(path).name or path
    if not Path(path).is_dir():
        return name
    from kvprobe.importers import agent_log, discover

    kinds = {agent_log(f) for f in discover([path])[:50]} - {None}
    labels = sorted({LOG_NAMES.get(k, k) for k in kinds if k})
    return f"{' and '.join(labels)} logs in {name}" if labels else name


def report_sources(rep: Report) -> str:
    """What the report covers, for titles: its inputs as the user named them (kvprobe.wording.sources)."""
    return sources([_source(p) for p in rep.inputs] or [Path(n).name for n, _ in rep.stats])


def chart_title(rep: Report) -> str:
    """A one-line caption for a standalone chart: sources and the totals that matter (wrapped to fit)."""
    t = rep.totals
    return (f"{report_sources(rep)} · {t['requests']:,} requests · hit ratio {percent(t['token_hit_ratio'])} · "
            f"{t['missed_read_tokens']:,} missed read tokens · {money(t['cost_usd'])}")


def chart_page(svg: str) -> str:
    """A page holding only the chart, sized to it (what `kvprobe plot` screenshots)."""
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            "<style>html,body{margin:0;padding:0;background:#fff;overflow:hidden}svg{display:block}</style>"
            f"</head><body>{svg}</body></html>\n")
