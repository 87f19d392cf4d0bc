"""Reports for people: the self-contained HTML page and the timeline chart (SVG, or PNG via headless Chromium)."""
from kvprobe.render.chart import Timeline, build_timeline
from kvprobe.render.page import render_html
from kvprobe.render.svg import render_svg
from kvprobe.render.write import write_chart, write_html

__all__ = ["Timeline", "build_timeline", "render_html", "render_svg", "write_chart", "write_html"]
