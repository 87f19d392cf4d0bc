"""Write reports to disk atomically: a temp file in the target folder, renamed over the target when complete."""
from __future__ import annotations

import datetime as dt
import tempfile
from pathlib import Path

from kvprobe.errors import InputError
from kvprobe.output import write_bytes_atomic
from kvprobe.render.browser import screenshot
from kvprobe.render.chart import build_timeline
from kvprobe.render.page import chart_page, render_html
from kvprobe.render.svg import render_svg
from kvprobe.pricing import PriceBook
from kvprobe.report import Report

CHART_SUFFIXES = (".png", ".svg")


def _check_target(path: Path, field: str) -> None:
    if path.is_dir():
        raise InputError("is a folder; expected a file name", file=str(path), field=field)
    if not path.parent.exists():
        raise InputError("its folder does not exist", file=str(path), field=field)


def atomic_write(path: Path, data: bytes) -> None:
    write_bytes_atomic(path, data, 0o644)


def write_html(rep: Report, path: Path, title: str | None = None, prices: PriceBook | None = None,
               zone: dt.tzinfo = dt.timezone.utc) -> int:
    """Write the self-contained HTML report; returns its size in bytes. `prices`: those the report used."""
    _check_target(path, "--output")
    data = render_html(rep, title=title, prices=prices, zone=zone).encode("utf-8")
    atomic_write(path, data)
    return len(data)


def write_chart(rep: Report, path: Path, *, title: str | None = None, scale: float = 2.0, unit: str = "tokens",
                prices: PriceBook | None = None) -> tuple[int, int]:
    """Write the timeline chart as PNG (drawn by headless Chromium) or SVG, by the file's suffix, in tokens
    or in dollars (`unit` "usd": priced with `prices`, those the report used).

    Returns the chart's (width, height) in CSS pixels."""
    _check_target(path, "--output")
    suffix = path.suffix.lower()
    if suffix not in CHART_SUFFIXES:
        raise InputError(f"expected a .png or .svg file name, got {path.suffix or 'no suffix'!r}",
                         file=str(path), field="--output")
    tl = build_timeline(rep.results, prices=prices or PriceBook(), misses=rep.misses)
    if unit == "usd" and not tl.priced:
        raise InputError("not every request has a price: draw it in tokens, or give --price-file",
                         file=str(path), field="--unit")
    svg, width, height = render_svg(tl, title=title, unit=unit)
    if suffix == ".svg":
        atomic_write(path, b'<?xml version="1.0" encoding="UTF-8"?>\n' + svg.encode("utf-8") + b"\n")
        return width, height
    page = chart_page(svg)
    with tempfile.TemporaryDirectory(prefix="kvprobe-plot-") as tmp:
        html = Path(tmp) / "chart.html"
        html.write_text(page, encoding="utf-8")
        png = Path(tmp) / "chart.png"
        screenshot(html, png, width, height, scale)
        atomic_write(path, png.read_bytes())
    return width, height
