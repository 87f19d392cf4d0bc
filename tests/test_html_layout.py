"""The HTML page of a Claude Code folder outside the repository (three sessions, a main agent and six subagents,
written line by line in the real transcript format), laid out by headless Chromium at 1,400 and 800 px: a title
that names the logs, lanes for the busiest agents and one shared by the rest, the chart (axis and legend) and
every table inside the window, ids shortened with the whole value on hover. Screenshots of both widths are
kept as artifacts (KVPROBE_ARTIFACTS)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_logs import ClaudeTranscript
from kvprobe.cli import app
from kvprobe.render.browser import dump_dom, screenshot
from test_html_report import Dom, artifacts, needs_chromium, png_size

SESSIONS = ("3f2b9c1e-7d4a-4e8b-9a61-2c5d8e0f4b17", "a90e6d42-1b3c-4f7e-8d25-6e4f1a7c9b03",
            "c5d1e8f0-2a4b-4c6d-9e8f-0a1b2c3d4e5f")


def claude_project(root: Path) -> Path:
    """Each session: a main agent with a pause past the 5-minute TTL and a model switch, and two subagents."""
    project = root / "projects" / "-home-me-webapp"
    for k, sid in enumerate(SESSIONS):
        t0 = k * 5400
        main = ClaudeTranscript(sid)
        main.turn(t0, f"r{k}a", read=0, write=18_000)
        main.turn(t0 + 30, f"r{k}b", read=18_000, write=900)
        main.turn(t0 + 500, f"r{k}c", read=0, write=19_200)
        for j in range(2):
            sub = ClaudeTranscript(sid)
            sub.turn(t0 + 520 + j, f"s{k}{j}", read=0, write=6_000 + j)
            sub.turn(t0 + 560 + j, f"s{k}{j}b", read=6_000, write=300)
            call = dict(sub.lines[-1])
            main.lines.append({"type": "progress", "sessionId": sid, "uuid": f"p{k}{j}", "timestamp": call["timestamp"],
                               "data": {"type": "agent_progress", "agentId": f"a{k}{j}", "message": call}})
            sub.write(project / sid / "subagents" / f"agent-a{k}{j}.jsonl")
        main.turn(t0 + 600, f"r{k}d", read=19_200, write=700)
        main.turn(t0 + 640, f"r{k}e", read=0, write=20_100, model="claude-opus-4-5")
        main.write(project / f"{sid}.jsonl")
    return project


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("claude-home")
    out = root / "report.html"
    res = CliRunner().invoke(app, ["html", str(claude_project(root)), "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_the_page_names_the_logs_and_gives_the_busiest_agents_a_lane(page):
    html = page.read_text()
    dom = Dom(html)
    assert "<title>kvprobe report: Claude Code logs in -home-me-webapp</title>" in html
    assert "27 requests · 7 agents" in html
    # main and the three busiest subagents have a lane each (two requests apiece: the first three in order
    # of appearance), the other three share the fifth: one axis, no lane without requests
    lanes = re.findall(r'<g class="lane" data-lane="\d+" data-agent="([^"]+)"', html.split('data-unit="usd"')[1].split('data-unit="tokens"')[0])
    assert lanes == ["main", "agent-a00", "agent-a01", "agent-a10", "3 other agents"]
    assert html.count('<g class="axis">') == 2  # one time axis per chart (dollars, tokens), shared by every lane
    # sessions: by their first prompt (ClaudeTranscript's "go on"), the whole UUID on hover
    row = re.search(r'<tr id="row-0".*?</tr>', html).group(0)
    assert f'<span title="{SESSIONS[0]}: go on">go on</span>' in row
    assert "sessions with cause" not in dom.text_by_id.get("totals", "")


MEASURE = """<script>
(function () {
  var doc = document, out = {page: doc.documentElement.scrollWidth, window: window.innerWidth, over: []};
  function right(el) { return el.getBoundingClientRect().right; }
  doc.querySelectorAll("table, .chart-wrap, svg.kv-chart, ul.legend, svg.kv-chart g.axis").forEach(function (el) {
    if (el.getClientRects().length && right(el) > window.innerWidth + 0.5)
      out.over.push((el.id || el.className.baseVal || el.className || el.tagName) + ":" + Math.round(right(el)));
  });
  var pre = doc.createElement("pre"); pre.id = "measure"; pre.textContent = JSON.stringify(out);
  doc.body.appendChild(pre);
})();
</script></body>"""


@needs_chromium
@pytest.mark.parametrize("width", [1400, 800])
def test_chart_legend_axis_and_tables_fit_the_window(page, tmp_path, width):
    probe = tmp_path / "probe.html"
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    probe.write_text(html.replace("</body>", MEASURE))
    measured = json.loads(Dom(dump_dom(probe, width=width)).text_by_id["measure"])
    assert measured["over"] == [] and measured["page"] <= measured["window"], measured
    shot = artifacts(tmp_path) / f"html_claude_folder_{width}.png"
    screenshot(page, shot, width, 2200, scale=1)
    assert png_size(shot) == (width, 2200)
