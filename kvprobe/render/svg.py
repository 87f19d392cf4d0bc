"""Draw a `Timeline` as one SVG: a lane per agent, a stacked bar per request (read / write / fresh, in tokens;
or, in dollars, what each of them and the output cost) in start order, miss causes above the bars, idle gaps and TTL expiries as vertical rules, concurrent starts as
brackets, and a legend. Server-side, so the chart reads without JavaScript and screenshots to a PNG as is.

Every string that came from a trace goes through `esc` (ids, agents, sessions, models and diagnosis text
can hold anything a prompt held).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from kvprobe.render.chart import MISS_KINDS, Bar, Timeline
from kvprobe.wording import duration
from kvprobe.trace.record import format_time
from kvprobe.wording import usd

SEGMENTS = (  # (attribute of Bar, legend label, colour), bottom to top
    ("read", "cache read", "#2a9d8f"),
    ("write_5m", "cache write (5m)", "#f4a261"),
    ("write_1h", "cache write (1h)", "#c2410c"),
    ("fresh", "fresh input", "#94a3b8"),
)
USD_SEGMENTS = SEGMENTS + (("output", "output", "#6d5bd0"),)  # in dollars a bar is the whole request's cost
AGENT_COLOURS = ("#3b6ea8", "#8e5ea2", "#3c8d5a", "#b8860b", "#4a9bb0", "#a0522d", "#6b7280", "#c2185b")
MISSED_COLOUR = "#d62828"
GAP_COLOUR, EXPIRY_COLOUR, OVERLAP_COLOUR = "#64748b", "#b45309", "#db2777"

LEFT, RIGHT, TOP = 132, 24, 44  # margins (px): lane labels on the left, gap labels on top
MARK_BAND = 34  # headroom above the tallest bar in each lane for miss markers
MIN_SLOT, MAX_BAR = 3.0, 56.0
# The chart is drawn this wide and the page scales it to its width (a few requests get wide slots, their
# bars at most MAX_BAR); many requests widen it beyond, MIN_SLOT per bar, and the page scrolls it.
DESIGN_WIDTH = 1240
PLOT_WIDTH = float(DESIGN_WIDTH - LEFT - RIGHT)
TITLE_SIZE, TITLE_LINE = 13, 18
TITLE_CHAR = 0.62 * TITLE_SIZE  # a bold DejaVu Sans character's width, rounded up: titles are wrapped by it
FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def tokens_short(n: float) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.3g}M"
    if n >= 1000:
        return f"{n / 1000:.3g}k"
    return f"{n:.0f}"


def usd_short(v: float) -> str:
    """An axis label in dollars: $0, $0.005, $0.02, $1.5, $120."""
    return "$0" if v == 0 else f"${v:,.0f}" if v >= 100 else f"${v:.3g}"


def nice_step(top: float, ticks: int = 4) -> float:
    raw = (top if top > 0 else 1) / ticks
    base = 10 ** math.floor(math.log10(raw))
    return next(m * base for m in (1, 2, 2.5, 5, 10) if m * base >= raw)


@dataclass(slots=True)
class Geometry:
    slot: float
    bar: float
    lane_h: float
    y_max: float
    plot_w: float
    lanes_top: float
    lanes_bottom: float
    top: float = TOP  # where the lanes' header band (gap labels) starts: below the title
    unit: str = "tokens"  # tokens | usd
    suffix: str = ""  # appended to element ids: two charts of one page stay apart

    def x(self, index: int) -> float:
        return LEFT + index * self.slot + (self.slot - self.bar) / 2

    def centre(self, index: int) -> float:
        return LEFT + (index + 0.5) * self.slot

    def boundary(self, index: int) -> float:
        return LEFT + index * self.slot

    def lane_base(self, lane: int) -> float:
        return self.lanes_top + (lane + 1) * self.lane_h - 6

    def height(self, tokens: float) -> float:
        return (self.lane_h - MARK_BAND - 6) * tokens / self.y_max if self.y_max else 0.0


def value(b: Bar, attr: str, unit: str) -> float:
    """A bar's segment (or "missed") in the chart's unit: tokens, or dollars."""
    if unit == "usd":
        return (b.usd or {}).get(attr, 0.0)
    return getattr(b, attr)


def segments(unit: str) -> tuple[tuple[str, str, str], ...]:
    return USD_SEGMENTS if unit == "usd" else SEGMENTS


def _geometry(tl: Timeline, unit: str, top: float, suffix: str) -> Geometry:
    n = max(tl.slots, 1)
    slot = max(MIN_SLOT, PLOT_WIDTH / n)
    bar = min(slot * 0.72, MAX_BAR) if slot >= 6 else max(slot - 1, 1.5)
    lane_h = 190.0 if len(tl.lanes) <= 2 else 150.0 if len(tl.lanes) <= 4 else 110.0
    y_top = max((sum(value(b, a, unit) for a, _, _ in segments(unit)) for b in tl.bars), default=0)
    step = nice_step(y_top)
    y_max = step * math.ceil(y_top / step) if y_top else step
    lanes_top = top + 8
    return Geometry(slot, bar, lane_h, y_max, slot * n, lanes_top, lanes_top + lane_h * max(len(tl.lanes), 1),
                    top, unit, suffix)


def _text(x: float, y: float, body: str, *, size: int = 11, anchor: str = "start", fill: str = "#1f2937",
          cls: str = "", weight: str = "normal") -> str:
    c = f' class="{cls}"' if cls else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" '
            f'font-weight="{weight}"{c}>{esc(body)}</text>')


def _lanes(tl: Timeline, g: Geometry) -> list[str]:
    parts = ['<g class="lanes">']
    step = nice_step(g.y_max)
    for i, agent in enumerate(tl.lanes or ["-"]):
        top, base = g.lanes_top + i * g.lane_h, g.lane_base(i)
        colour = AGENT_COLOURS[i % len(AGENT_COLOURS)]
        parts.append(f'<g class="lane" data-lane="{i}" data-agent="{esc(agent)}">')
        parts.append(f'<rect x="{LEFT}" y="{top:.1f}" width="{g.plot_w:.1f}" height="{g.lane_h:.1f}" '
                     f'fill="{"#f8fafc" if i % 2 == 0 else "#ffffff"}"/>')
        parts.append(f'<rect x="8" y="{top + 8:.1f}" width="4" height="{g.lane_h - 16:.1f}" fill="{colour}"/>')
        label = agent if len(agent) <= 16 else agent[:15] + "…"
        parts.append(_text(18, top + 20, label, size=12, fill=colour, weight="bold", cls="lane-label"))
        tick = 0.0
        while tick <= g.y_max + 1e-9:
            y = base - g.height(tick)
            parts.append(f'<line x1="{LEFT}" x2="{LEFT + g.plot_w:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                         f'stroke="#e2e8f0" stroke-width="1"/>')
            label = usd_short(tick) if g.unit == "usd" else tokens_short(tick)
            parts.append(_text(LEFT - 6, y + 4, label, size=10, anchor="end", fill="#64748b"))
            tick += step
        parts.append("</g>")
    parts.append("</g>")
    return parts


def _tooltip(b: Bar) -> str:
    head = f"{b.count:,} requests: {b.id}" if b.count > 1 else b.id
    lines = [f"{head}  ({b.agent}, {b.session})", format_time(b.started_at),
             f"input {b.input_tokens:,}: read {b.read:,} · write {b.write_5m + b.write_1h:,} · fresh {b.fresh:,}"]
    if b.missed:
        lines.append(f"missed reads: {b.missed:,} tokens could have been read")
    if b.cost_usd is not None:
        lines.append(f"cost {usd(b.cost_usd)} · {b.input_equivalent:,.0f} input-equivalents")
    if b.usd and b.usd["missed"]:
        lines.append(f"the misses cost {usd(b.usd['missed'])} above an ideal cache")
    lines += [f"{MISS_KINDS[m.kind][1]}: {m.detail}" for m in b.marks]
    return "\n".join(lines)


def _bar(b: Bar, lane: int, g: Geometry) -> list[str]:
    kinds = " ".join(m.kind for m in b.marks)
    attrs = (f'class="req" id="bar-{b.index}-{lane}{g.suffix}" data-i="{b.index}" data-row="row-{b.first}" '
             f'data-count="{b.count}" data-id="{esc(b.id)}" data-agent="{esc(b.agent)}" '
             f'data-input="{b.input_tokens}" data-read="{b.read}" data-write="{b.write_5m + b.write_1h}" '
             f'data-fresh="{b.fresh}" data-missed="{b.missed}" data-kinds="{esc(kinds)}"')
    parts = [f"<g {attrs}>", f"<title>{esc(_tooltip(b))}</title>"]
    x, y = g.x(b.index), g.lane_base(lane)
    parts.append(f'<rect class="hit" x="{g.boundary(b.index):.1f}" y="{g.lanes_top + lane * g.lane_h:.1f}" '
                 f'width="{g.slot:.1f}" height="{g.lane_h:.1f}" fill="transparent"/>')
    for attr, _, colour in segments(g.unit):
        h = g.height(value(b, attr, g.unit))
        if h > 0:
            y -= h
            parts.append(f'<rect class="seg {attr}" x="{x:.1f}" y="{y:.2f}" width="{g.bar:.1f}" height="{h:.2f}" '
                         f'fill="{colour}"/>')
    missed = value(b, "missed", g.unit)
    if missed:  # on top of the reads: what a working cache would have read (tokens) or saved (dollars)
        h, base = g.height(missed), g.lane_base(lane) - g.height(value(b, "read", g.unit))
        parts.append(f'<rect class="missed" x="{x:.1f}" y="{base - h:.2f}" width="{g.bar:.1f}" height="{h:.2f}" '
                     f'fill="url(#kv-hatch{g.suffix})" stroke="{MISSED_COLOUR}" stroke-width="1.2" '
                     f'stroke-dasharray="3 2"/>')
    top = g.lane_base(lane) - g.height(sum(value(b, a, g.unit) for a, _, _ in segments(g.unit)))
    for k, mark in enumerate(b.marks[:3]):
        glyph, label, colour = MISS_KINDS[mark.kind]
        cy, r = top - 9 - k * 15, min(7.0, max(g.slot / 2 - 0.5, 2.5))
        parts.append(f'<circle class="mark" data-kind="{mark.kind}" cx="{g.centre(b.index):.1f}" cy="{cy:.1f}" '
                     f'r="{r:.1f}" fill="{colour}"/>')
        if r >= 5:
            parts.append(_text(g.centre(b.index), cy + 3.5, glyph, size=9, anchor="middle", fill="#fff",
                               weight="bold"))
    parts.append("</g>")
    return parts


def _gaps(tl: Timeline, g: Geometry) -> list[str]:
    parts, last_label = ['<g class="gaps">'], -1e9
    for gap in tl.gaps:
        x = g.boundary(gap.before)
        colour = EXPIRY_COLOUR if gap.ttl_expired else GAP_COLOUR
        parts.append(f'<line class="gap" data-before="{gap.before}" x1="{x:.1f}" x2="{x:.1f}" y1="{g.top - 4}" '
                     f'y2="{g.lanes_bottom:.1f}" stroke="{colour}" stroke-width="1.2" stroke-dasharray="4 3">'
                     f'<title>{esc(f"idle {duration(gap.seconds)} before this request")}</title></line>')
        if x - last_label >= 64:
            parts.append(_text(x, g.top - 8, f"idle {duration(gap.seconds)}", size=10, anchor="middle", fill=colour))
            last_label = x
    parts.append("</g>")
    return parts


def _expiries(tl: Timeline, g: Geometry) -> list[str]:
    parts = ['<g class="expiries">']
    for e in tl.expiries:
        lane = tl.lane(e.agent)
        x, top = g.boundary(e.index), g.lanes_top + lane * g.lane_h
        past = f" {duration(e.seconds_past)} before this request" if e.seconds_past is not None else ""
        parts.append(f'<g class="expiry" data-i="{e.index}"><title>{esc("TTL expired" + past + ": " + e.detail)}'
                     f'</title><line x1="{x:.1f}" x2="{x:.1f}" y1="{top + 4:.1f}" y2="{g.lane_base(lane):.1f}" '
                     f'stroke="{EXPIRY_COLOUR}" stroke-width="2.5"/>'
                     f'<path d="M{x - 5:.1f} {top + 4:.1f} h10 l-10 12 h10 z" fill="{EXPIRY_COLOUR}"/></g>')
    parts.append("</g>")
    return parts


def _overlap_rows(tl: Timeline, max_rows: int = 4) -> list[int]:
    """Greedy rows so brackets on one row do not overlap (past `max_rows`, the least busy row is shared)."""
    ends: list[int] = []  # the last bar each row's brackets reach
    rows = []
    for o in tl.overlaps:
        row = next((k for k, end in enumerate(ends) if end < o.writer), None)
        if row is None and len(ends) < max_rows:
            ends.append(-1)
            row = len(ends) - 1
        elif row is None:
            row = min(range(len(ends)), key=ends.__getitem__)
        ends[row] = max(ends[row], o.index)
        rows.append(row)
    return rows


def _overlaps(tl: Timeline, g: Geometry, y0: float) -> tuple[list[str], float]:
    if not tl.overlaps:
        return [], y0
    rows = _overlap_rows(tl)
    parts = ['<g class="overlaps">', _text(LEFT - 6, y0 + 12, "concurrent", size=10, anchor="end",
                                            fill=OVERLAP_COLOUR)]
    for o, row in zip(tl.overlaps, rows):
        y = y0 + 8 + row * 9
        x1, x2 = g.centre(o.writer), g.centre(o.index)
        tip = f"{o.id} started {o.seconds_after:.1f}s after {o.writer_id}, before its response began (concurrent start)"
        parts.append(f'<g class="overlap" data-writer="{o.writer}" data-i="{o.index}"><title>{esc(tip)}</title>'
                     f'<path d="M{x1:.1f} {y - 4:.1f} V{y:.1f} H{max(x2, x1 + 3):.1f} V{y - 4:.1f}" fill="none" '
                     f'stroke="{OVERLAP_COLOUR}" stroke-width="1.6"/></g>')
    parts.append("</g>")
    return parts, y0 + 14 + max(rows) * 9


def _axis(tl: Timeline, g: Geometry, y0: float) -> tuple[list[str], float]:
    parts = ['<g class="axis">', f'<line x1="{LEFT}" x2="{LEFT + g.plot_w:.1f}" y1="{y0:.1f}" y2="{y0:.1f}" '
                                 f'stroke="#94a3b8"/>']
    every = max(1, math.ceil(64 / g.slot))
    starts: dict[int, float] = {}
    for b in tl.bars:
        starts[b.index] = min(starts.get(b.index, b.started_at), b.started_at)
    for slot in range(0, tl.slots, every):
        x = g.centre(slot)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0:.1f}" y2="{y0 + 4:.1f}" stroke="#94a3b8"/>')
        if slot in starts:
            parts.append(_text(x, y0 + 15, format_time(starts[slot])[11:19], size=10, anchor="middle",
                               fill="#475569"))
    day = format_time(min(starts.values()))[:10] if starts else ""
    parts.append(_text(LEFT - 28, y0 + 15, f"UTC {day}", size=10, anchor="end", fill="#475569"))
    parts.append("</g>")
    return parts, y0 + 22


def _sessions(tl: Timeline, g: Geometry, y0: float) -> tuple[list[str], float]:
    if len({s for s, _, _ in tl.sessions}) < 2:
        return [], y0
    parts = ['<g class="sessions">', _text(LEFT - 6, y0 + 10, "session", size=10, anchor="end", fill="#475569")]
    for k, (name, first, last) in enumerate(tl.sessions):
        x, w = g.boundary(first), (last - first + 1) * g.slot
        parts.append(f'<rect x="{x:.1f}" y="{y0 + 2:.1f}" width="{w:.1f}" height="10" '
                     f'fill="{"#cbd5e1" if k % 2 == 0 else "#e2e8f0"}"><title>{esc(name)}</title></rect>')
        if w > 7 * len(name) + 6:
            parts.append(_text(x + 3, y0 + 10.5, name, size=9, fill="#334155"))
    parts.append("</g>")
    return parts, y0 + 18


def legend_items(tl: Timeline, unit: str, hatch: str) -> list[tuple[str, str]]:
    """(swatch as SVG shapes in a 12x12 box, label) of everything the chart draws; `hatch`: the fill of
    the missed-read swatch (the chart's hatch pattern, or a plain colour outside it)."""
    items: list[tuple[str, str]] = [(f'<rect width="12" height="12" fill="{c}"/>', label)
                                    for _, label, c in segments(unit)]
    missed = "what the misses cost above an ideal cache" if unit == "usd" else \
        "missed read (an ideal cache would have read it)"
    items.append((f'<rect width="12" height="12" fill="{hatch}" stroke="{MISSED_COLOUR}" '
                  f'stroke-dasharray="3 2"/>', missed))
    for kind in tl.kinds:
        glyph, label, colour = MISS_KINDS[kind]
        items.append((f'<circle cx="6" cy="6" r="6.5" fill="{colour}"/><text x="6" y="9.5" font-size="9" '
                      f'text-anchor="middle" fill="#fff" font-weight="bold">{esc(glyph)}</text>', label))
    if tl.gaps:
        items.append((f'<line x1="6" x2="6" y1="-1" y2="13" stroke="{GAP_COLOUR}" stroke-dasharray="4 3"/>',
                      "idle gap"))
    if tl.expiries:
        items.append((f'<path d="M1 0 h10 l-10 12 h10 z" fill="{EXPIRY_COLOUR}"/>', "cache entry expired (TTL)"))
    if tl.overlaps:
        items.append((f'<path d="M0 2 V8 H12 V2" fill="none" stroke="{OVERLAP_COLOUR}" stroke-width="1.6"/>',
                      "concurrent start (earlier response not begun)"))
    return items


def _legend(tl: Timeline, g: Geometry, width: float, y0: float) -> tuple[list[str], float]:
    items = legend_items(tl, g.unit, f"url(#kv-hatch{g.suffix})")
    parts, x, y = ['<g class="legend">'], float(LEFT), y0 + 8
    for swatch, label in items:
        w = 20 + 6.8 * len(label) + 18  # 11px DejaVu Sans, rounded up
        if x + w > width - RIGHT and x > LEFT:
            x, y = float(LEFT), y + 20
        parts.append(f'<g transform="translate({x:.1f},{y:.1f})">{swatch}{_text(18, 10.5, label, size=11)}</g>')
        x += w
    parts.append("</g>")
    return parts, y + 24


def title_lines(title: str, width: float) -> list[str]:
    """The title in lines that fit `width` (split between its " · " parts, then between words)."""
    room = max(int(width // TITLE_CHAR), 20)
    lines: list[str] = []
    for part in title.split(" · "):
        joined = f"{lines[-1]} · {part}" if lines else part
        if lines and len(joined) <= room:
            lines[-1] = joined
            continue
        words, line = part.split(" "), ""
        for word in words:  # a part longer than a line wraps between its words
            if line and len(line) + 1 + len(word) > room:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return lines


def render_svg(tl: Timeline, *, title: str | None = None, unit: str = "tokens",
               suffix: str = "", legend: bool = True) -> tuple[str, int, int]:
    """The chart as an SVG element (no XML prolog: inline it in HTML, or wrap it with `standalone`).

    unit: "tokens" (read / write / fresh input per request) or "usd" (what each of them and the output cost;
    needs a timeline built with prices). suffix: appended to element ids, for a second chart on one page.
    legend=False leaves the legend out (the HTML page sets it as text beside the chart, readable at any
    width)."""
    width = int(max(DESIGN_WIDTH, LEFT + max(tl.slots, 1) * MIN_SLOT + RIGHT))
    lines = title_lines(title, width - 24) if title else []
    g = _geometry(tl, unit, TOP + TITLE_LINE * len(lines), suffix)
    width = int(max(DESIGN_WIDTH, LEFT + g.plot_w + RIGHT))
    body = _lanes(tl, g) + _gaps(tl, g) + _expiries(tl, g)
    body.append('<g class="bars">')
    for b in tl.bars:
        body += _bar(b, tl.lane(b.agent), g)
    body.append("</g>")
    y = g.lanes_bottom + 2
    for section in (_overlaps, _axis, _sessions):
        parts, y = section(tl, g, y)
        body += parts
    if legend:
        parts, y = _legend(tl, g, width, y)
        body += parts
    if not tl.bars:
        body.append(_text(LEFT + 12, g.lanes_top + 40, "no requests", size=14, fill="#64748b"))
    height = int(math.ceil(y))
    # a page scales the chart to its width; one drawn wider (many requests) keeps its size and scrolls
    wide = f' style="min-width:{width}px"' if width > DESIGN_WIDTH else ""
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="kv-chart" data-unit="{unit}" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}"{wide} role="img" '
            f'aria-label="{esc(title or "kvprobe timeline")}" {FONT}>'
            f'<defs><pattern id="kv-hatch{suffix}" width="6" height="6" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fde2e2" fill-opacity="0.55"/>'
            f'<line x1="0" y1="0" x2="0" y2="6" stroke="{MISSED_COLOUR}" stroke-width="1.6"/></pattern></defs>'
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>')
    for k, line in enumerate(lines):  # from the left edge, wrapped to the width: never cut off
        head += _text(12, 18 + k * TITLE_LINE, line, size=TITLE_SIZE, weight="bold", cls="chart-title")
    return head + "".join(body) + "</svg>", width, height
