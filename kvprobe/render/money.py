"""The HTML page's answer to "where does my money go": cost cards (spent, wasted by cause, saved by each fix),
the costliest blocks, and the findings across sessions, all in dollars first.

Pure: a `Report` in, HTML strings out. Every trace-derived string goes through `esc`.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kvprobe.render.chart import MISS_KINDS
from kvprobe.render.svg import esc
from kvprobe.report import Report
from kvprobe.wording import percent, reach_of, short_id, usd

# How a hit ratio is coloured: by the share of what an ideal prefix cache would have read that was read, not
# by the ratio itself (a short task with little to reuse is not "bad", a 39.9% that could be 80% is not good).
GOOD_SHARE, FAIR_SHARE = 0.9, 0.7
MAX_CARDS = 6  # per group; the tables below the cards list everything


def grade(read: int, reusable: int) -> str:
    """good | fair | bad for reads against the most an ideal cache would have read ('' when nothing could)."""
    if reusable <= 0:
        return ""
    share = read / reusable
    return "good" if share >= GOOD_SHARE else "fair" if share >= FAIR_SHARE else "bad"


@dataclass(slots=True)
class Waste:
    """What the misses of one cause cost above an ideal prefix cache."""

    kind: str
    usd: float | None = 0.0
    tokens: int = 0
    requests: list[str] = field(default_factory=list)


def waste_by_cause(rep: Report) -> list[Waste]:
    """Every diagnosed miss of the report (not only the costliest listed), summed by its main cause, costliest
    first: what it cost above an ideal prefix cache (`kvprobe report`'s figure; n/a if any is unpriced)."""
    # the report priced each miss once (`Miss.usd`); walked in request order, so the ids listed stay the first
    priced = {id(m.result): m for m in rep.misses}
    by_kind: dict[str, Waste] = {}
    for r in rep.results:
        m = priced.get(id(r))
        if m is None:
            continue
        w = by_kind.setdefault(r.diagnoses[0].kind, Waste(r.diagnoses[0].kind))
        w.usd = None if w.usd is None or m.usd is None else w.usd + m.usd
        w.tokens += r.missed_tokens
        w.requests.append(r.sk.id)
    return sorted(by_kind.values(), key=lambda w: (-(w.usd or 0), -w.tokens))


def _card(key: str, label: str, value: str, raw: Any, cls: str = "", sub: str = "", extra: str = "") -> str:
    sub_html = f'<div class="sub-value">{esc(sub)}</div>' if sub else ""
    return (f'<div class="card{extra}" data-key="{esc(key)}" data-value="{esc(raw)}"><div class="label">'
            f'{esc(label)}</div><div class="value {cls}">{esc(value)}</div>{sub_html}</div>')


def _group(title: str, note: str, cards: list[str], more: int = 0) -> str:
    tail = f'<p class="hint">and {more} more in the table below</p>' if more else ""
    return (f'<div class="card-group"><h3>{esc(title)}</h3><p class="hint">{esc(note)}</p>'
            f'<div class="cards">{"".join(cards)}</div>{tail}</div>')


def _spent(rep: Report) -> str:
    t = rep.totals
    read, missed = t["cache_read_tokens"], t["missed_read_tokens"]
    reusable = read + missed
    readable = f"an ideal prefix cache would read {percent(reusable / t['input_tokens'])}" \
        if t["input_tokens"] else ""
    cards = [
        _card("cost_usd", f"Cost ({rep.basis})", usd(t["cost_usd"]), t["cost_usd"],
              sub=f"{t['requests']:,} requests · {t['output_tokens']:,} output tokens"),
        _card("input_equivalent_tokens", "Input-equivalents", f"{t['input_equivalent_tokens']:,.0f}",
              t["input_equivalent_tokens"], sub=f"of {t['input_tokens']:,} input tokens"),
        _card("token_hit_ratio", "Hit ratio", percent(t["token_hit_ratio"]), t["token_hit_ratio"],
              grade(read, reusable), sub=readable),
        _card("input_tokens", "Input tokens", f"{t['input_tokens']:,}", t["input_tokens"],
              sub=f"read {read:,} · written {t['cache_write_tokens']:,} · fresh {t['fresh_input_tokens']:,}"),
    ]
    note = ("Input-equivalents: the input cost in fresh-input tokens (a cached read counts at its discount, a "
            "cache write at its premium). The hit ratio is green when the requests read at least "
            f"{GOOD_SHARE:.0%} of what an ideal prefix cache would have, amber from {FAIR_SHARE:.0%}, red below.")
    return _group("Spent", note, cards)


def _wasted(rep: Report) -> str:
    wastes = waste_by_cause(rep)
    t = rep.totals
    total = None if any(w.usd is None for w in wastes) else sum(w.usd or 0 for w in wastes)
    cards = [_card("wasted_usd", "All misses", usd(total), total, "bad" if total else "",
                   sub=f"{t['missed_read_tokens']:,} tokens not read")]
    for w in wastes[:MAX_CARDS]:
        label = MISS_KINDS.get(w.kind, MISS_KINDS["unexplained"])[1]
        cards.append(_card(f"wasted:{w.kind}", label, usd(w.usd), w.usd, "bad",
                           sub=f"{w.tokens:,} tokens not read · {', '.join(w.requests[:4])}"
                           + (" …" if len(w.requests) > 4 else ""), extra=" cause"))
    note = ("What the misses of each cause cost above an ideal prefix cache (a request counts under its main "
            "cause).")
    if not wastes:
        note = "No misses: every request read what an ideal prefix cache would have."
    return _group("Wasted by cause", note, cards, max(len(wastes) - MAX_CARDS, 0))


def _saved(rep: Report) -> str:
    if not rep.fixes:
        why = rep.fixes_note or "fixes were not computed (--no-fixes)"
        return _group("Saved by each fix", why, [])
    fixes = sorted(rep.fixes, key=lambda f: -(f.get("saving_usd") or 0))
    cards = []
    w = rep.with_all_fixes
    if w:
        base = w.get("baseline_predicted", {})
        cards.append(_card("with_all_fixes", "With all fixes (predicted)", usd(w["cost_usd"]), w["cost_usd"],
                           "good", sub=f"from {usd(base.get('cost_usd'))} · hit ratio "
                           f"{percent(base.get('token_hit_ratio', 0))} → {percent(w['token_hit_ratio'])}",
                           extra=" fixes"))
    for f in fixes[:MAX_CARDS]:
        where = reach(f) or request_ids(f.get("requests", []), 4)
        cards.append(_card(f"saved:{f['kind']}", f["kind"].replace("_", " "), usd(f.get("saving_usd")),
                           f.get("saving_usd"), "good",
                           sub=f"{f.get('saving_input_equivalent_tokens') or 0:,.0f} input-equivalents · {where}",
                           extra=" fix"))
    note = ("Each saving re-simulates the requests that change with only that fix; all fixes together are one "
            "simulation of what `kvprobe fix` writes.")
    return _group("Saved by each fix", note, cards, max(len(fixes) - MAX_CARDS, 0))


def cost_cards(rep: Report) -> str:
    """Spent, wasted by cause, saved by each fix: each figure a card (`data-key`, `data-value` hold it raw)."""
    return f'<section id="totals" class="money">{_spent(rep)}{_wasted(rep)}{_saved(rep)}</section>'


def _text(value: Any) -> str:
    """A value from the report JSON in words: numbers with separators, lists joined, objects as key: value."""
    if isinstance(value, dict):
        return ", ".join(f"{k.replace('_', ' ')}: {_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value)
    if isinstance(value, bool) or value is None:
        return "yes" if value is True else "no" if value is False else "–"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.4g}"
    return str(value)


def _cell(key: str, value: Any, opt: bool = False) -> str:
    extra = " opt" if opt else ""
    if key.endswith("usd") and (value is None or isinstance(value, (int, float))):
        return f'<td class="num{extra}" data-v="{esc(value)}">{esc(usd(value))}</td>'
    num = isinstance(value, (int, float)) and not isinstance(value, bool)
    cls = ("num" if num else "") + extra
    return f'<td{f" class={chr(34)}{cls.strip()}{chr(34)}" if cls.strip() else ""} data-v="{esc(value)}">' \
           f'{esc(_text(value))}</td>'


def generic_table(table_id: str, rows: Iterable[dict[str, Any]], optional: Iterable[str] = ()) -> str:
    """Rows of the report JSON as a table, one column per key (in first-seen order); `optional` columns give
    way on narrow screens (report.css), so the table fits the page."""
    rows, opt = list(rows), set(optional)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th{' class=opt' if k in opt else ''}>{esc(k.replace('_', ' '))}</th>" for k in keys)
    body = "".join("<tr>" + "".join(_cell(k, r.get(k), k in opt) for k in keys) + "</tr>" for r in rows)
    return f'<table id="{esc(table_id)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def blocks_table(rep: Report, limit: int = 10) -> str:
    """The costliest blocks over the task, as the terminal lists them, with each one's share of the input cost."""
    from kvprobe.economics.attribution import carry_note

    if not rep.blocks:
        return ""
    priced = rep.totals["cost_usd"] is not None
    total = sum(b.total_usd for b in rep.blocks) or 1.0

    def money(v: float) -> str:
        return usd(v if priced else None)
    rows = []
    for b in rep.blocks[:limit]:
        share = 100 * b.total_usd / total
        rows.append(f'<tr data-block="{esc(b.hash or "unattributed")}"><td><code>{esc(b.path)}</code></td>'
                    f'<td>{esc(b.kind)}</td><td><code title="{esc(b.first_request)}">{esc(short_id(b.first_request, 12))}</code></td>'
                    f'<td class="num">{b.tokens:,}</td><td class="num opt">{b.requests:,}</td>'
                    f'<td class="num">{esc(money(b.write_usd))}</td><td class="num">{esc(money(b.read_usd))}</td>'
                    f'<td class="num opt">{esc(money(b.fresh_usd))}</td>'
                    f'<td class="num total" data-v="{b.total_usd}">{esc(money(b.total_usd))}</td>'
                    f'<td class="num opt"><span class="meter bad"><span style="width:{share:.1f}%"></span></span> '
                    f'{share:.1f}%</td></tr>')
    head = ("<tr><th>block</th><th>kind</th><th>first sent by</th><th class=num>tokens</th>"
            "<th class='num opt'>requests</th><th class=num>write</th><th class=num>reads</th>"
            "<th class='num opt'>fresh</th><th class=num>total</th><th class='num opt'>of input cost</th></tr>")
    notes = "".join(f'<p class="hint">{esc(n)}</p>' for n in map(carry_note, rep.blocks[:limit]) if n)
    more = len(rep.blocks) - min(limit, len(rep.blocks))
    hint = (f"One row per block content, first sent by the request named: its cache write, the reads of it and "
            f"its uncached resends. {f'{more:,} more blocks are in `kvprobe report --json`.' if more else ''}")
    return (f'<section id="blocks"><h2>Costliest blocks</h2><p class="hint">{esc(hint)}</p>'
            f'<div class="table-wrap"><table id="kv-blocks"><thead>{head}</thead><tbody>{"".join(rows)}'
            f"</tbody></table></div>{notes}</section>")


def fleet_section(rep: Report) -> str:
    """Findings across sessions that share a prefix (the report's `fleet` list), when it has them."""
    if not rep.fleet:
        return ""
    rows = [f.to_json() for f in rep.fleet]
    cols = ("sessions", "shared_tokens", "breaks_at", "breaker", "could_share_tokens", "rewrote_sessions",
            "rewritten_tokens", "rewrite_usd", "fixes")
    table = generic_table("kv-fleet", [{k: r.get(k) for k in cols} for r in rows],
                          optional=("could_share_tokens", "rewrote_sessions", "rewritten_tokens"))
    said = "".join(f"<p>{esc(r.get('summary', ''))}</p>" for r in rows)
    return ('<section id="fleet"><h2>Across sessions</h2><p class="hint">Prefixes many sessions share, what breaks '
            'the sharing and what the rewrites cost; the fixes named are priced on the whole fleet.</p>'
            f'{said}<div class="table-wrap">{table}</div></section>')


def instances(fix: dict[str, Any]) -> str:
    """A fix's per-session instances (when the report lists them), folded under its row."""
    items = fix.get("instances") or []
    if not items:
        return ""
    rows = [i if isinstance(i, dict) else {"instance": i} for i in items]
    return (f'<details><summary>{len(rows):,} session{"s" if len(rows) != 1 else ""}</summary>'
            f'{generic_table("kv-instances-" + str(fix.get("kind", "")), rows)}</details>')


def reach(fix: dict[str, Any]) -> str:
    """How far a fix reaches, in words (kvprobe.wording.reach_of): never its raw JSON object."""
    return reach_of(fix.get("reach"))


def request_ids(ids: list[Any], shown: int = 6) -> str:
    """A policy can fix thousands of requests: the first few, and how many more."""
    ids = list(map(str, ids))
    return ", ".join(ids) if len(ids) <= shown else f"{', '.join(ids[:shown])} and {len(ids) - shown:,} more"
