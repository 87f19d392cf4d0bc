"""The HTML page in money: what was spent, what each cause of a miss wasted and what each fix saves, the
costliest blocks, a chart in dollars that fills the page, colours that mean something, titles never cut —
checked in headless Chromium at 1400 and 800 pixels, screenshots kept as artifacts."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvprobe.cli import app
from kvprobe.render.browser import dump_dom, screenshot
from kvprobe.render.money import grade
from test_html_report import SAMPLE, Dom, artifacts, chart_heights, colour_shares, needs_chromium, png_size

# claude-sonnet-4-5 per million tokens: input $3, 5m cache write $3.75, cache read $0.30. A token an ideal
# cache would have read but the request wrote instead costs 3.75 - 0.30 = $3.45 per million more.
MISS_PER_TOKEN = 3.45e-6
WASTE = {"ttl_expired": 3923 * MISS_PER_TOKEN,  # req_4 wrote the 3,923 tokens req_3 had cached
         "prefix_changed": 3594 * MISS_PER_TOKEN,  # req_3 wrote everything req_2 cached
         "params_changed": (1984 + 329) * MISS_PER_TOKEN}  # req_5 and req_6


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[dict, Path]:
    runner = CliRunner()
    out = tmp_path_factory.mktemp("money") / "report.html"
    assert runner.invoke(app, ["html", str(SAMPLE), "-o", str(out)]).exit_code == 0
    return json.loads(runner.invoke(app, ["report", str(SAMPLE), "--json"]).stdout), out


def _cards(dom: Dom) -> dict[str, tuple[str, str]]:
    """data-key -> (raw value, class of the shown value)."""
    found, key = {}, None
    for tag, a in dom.elements:
        if tag == "div" and "card" in a.get("class", "").split():
            key = a["data-key"]
            found[key] = (a["data-value"], "")
        elif tag == "div" and "value" in a.get("class", "").split() and key:
            found[key] = (found[key][0], a["class"].replace("value", "").strip())
    return found


def test_cost_cards_show_spent_wasted_by_cause_and_saved_by_each_fix(page):
    rep, out = page
    cards = _cards(Dom(out.read_text()))
    assert float(cards["cost_usd"][0]) == pytest.approx(0.070585)
    for kind, usd in WASTE.items():
        assert float(cards[f"wasted:{kind}"][0]) == pytest.approx(usd, abs=1e-6), kind
    assert float(cards["wasted_usd"][0]) == pytest.approx(9830 * MISS_PER_TOKEN, abs=1e-6)
    for fix in rep["fixes"]:
        assert float(cards[f"saved:{fix['kind']}"][0]) == pytest.approx(fix["saving_usd"])
    assert float(cards["with_all_fixes"][0]) == pytest.approx(rep["with_all_fixes"]["cost_usd"])
    text = out.read_text()
    assert "$0.0339" in text and "$0.0135" in text and "9,830 tokens not read" in text
    assert "Input-equivalents: the input cost in fresh-input tokens" in text  # defined where first shown


def test_a_hit_ratio_is_coloured_by_what_could_have_been_read(page):
    # 9,785 read of 9,785 + 9,830 an ideal cache would have read: 49.9%, red (below 70%)
    _, out = page
    assert _cards(Dom(out.read_text()))["token_hit_ratio"][1] == "bad"
    assert (grade(90, 100), grade(89, 100), grade(70, 100), grade(69, 100), grade(0, 0)) == \
        ("good", "fair", "fair", "bad", "")
    # per request: req_2 read all 3,265 req_1 cached (green), req_5 2,268 of 4,252 (53%: red)
    hits = {}
    for row in out.read_text().split('<tr id="row-')[1:]:
        rid = re.search(r'data-id="([^"]+)"', row).group(1)
        cells = re.findall(r'<td class="num ?([a-z]*)" data-v="[^"]*">', row.split("</tr>")[0])
        hits[rid] = cells[5]  # #, input, read, write, fresh, hit %
    assert hits["req_2"] == "good" and hits["req_5"] == "bad" and hits["req_1"] == ""  # a cold start: nothing to read


def test_the_costliest_blocks_are_listed_as_the_terminal_lists_them(page):
    rep, out = page
    rows = re.findall(r'<tr data-block="([0-9a-f]+|unattributed)">.*?class="num total" data-v="([0-9.e-]+)"',
                      out.read_text())
    assert [(h, round(float(v), 6)) for h, v in rows] == [(b["hash"], b["total_usd"]) for b in rep["blocks"][:10]]


def test_fleet_findings_reach_and_instances_are_shown_when_the_report_has_them():
    from kvprobe.analysis.fleet import SharedPrefix
    from kvprobe.render.page import render_html
    from kvprobe.report import build_report

    rep = build_report([SAMPLE])
    keep_alive = next(f for f in rep.fixes if f["kind"] == "keep_alive")
    assert 'id="fleet"' not in render_html(rep)  # one session: no fleet finding, no section
    rep.fleet = [SharedPrefix(["main"], [f"s{i}" for i in range(412)], 412, 13, 3_460, "system[0]",
                              breaks_at="system[0]", breaker="volatile span",
                              breaker_detail='e.g. "<b>date</b>"; 412 versions', could_share_tokens=3_460,
                              rewrote_sessions=411, rewritten_tokens=1_421_000, rewrite_usd=12.5)]
    html = render_html(rep)
    dom = Dom(html)
    assert "412" in dom.text_by_id["kv-fleet"] and "$12.5000" in dom.text_by_id["kv-fleet"]
    assert "&lt;b&gt;date&lt;/b&gt;" in html and "<b>date" not in html
    assert keep_alive["reach"]["text"] in dom.text_by_id["fixes"]  # "1 of 1 session, 1 request edited"
    assert "1 session" in dom.text_by_id["fixes"]
    saved = keep_alive["instances"][0]["saving_usd"]
    assert f"{saved:.4f}" in dom.text_by_id["kv-instances-keep_alive"]


MEASURE = """<script>
(function () {
  var doc = document, out = {};
  var wrap = doc.querySelector(".chart-wrap.unit-usd"), svg = wrap.querySelector("svg");
  out.wrap = wrap.clientWidth; out.svg = svg.getBoundingClientRect().width; out.scroll = wrap.scrollWidth;
  out.tokensShown = doc.querySelector(".chart-wrap.unit-tokens").getClientRects().length > 0;
  var pre = doc.createElement("pre"); pre.id = "measure"; pre.textContent = JSON.stringify(out);
  doc.body.appendChild(pre);
})();
</script></body>"""


def _measured(out: Path, tmp_path: Path, width: int) -> dict:
    probe = tmp_path / f"measure-{width}.html"
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", out.read_text())
    probe.write_text(page.replace("</body>", MEASURE))
    return json.loads(Dom(dump_dom(probe, width=width)).text_by_id["measure"])


@needs_chromium
def test_the_dollars_chart_fills_a_wide_page_and_fits_a_narrow_one(page, tmp_path):
    rep, out = page
    wide = _measured(out, tmp_path, 1400)
    assert wide["svg"] >= 0.98 * wide["wrap"] and wide["wrap"] > 1200 and not wide["tokensShown"]
    narrow = _measured(out, tmp_path, 800)
    # scaled to the page, never cut: its axis and (page-text) legend inside the 800 px window
    assert narrow["svg"] <= narrow["wrap"] and narrow["scroll"] <= narrow["wrap"] + 1
    # in dollars each bar is its request's cost: heights in one ratio to cost_usd (req_1: 3,265 written at
    # $3.75/M = $0.0122 of its $0.0140, the rest is output)
    heights = chart_heights(Dom(out.read_text()), "usd")
    costs = {r["id"]: r["cost_usd"] for r in rep["requests"]}
    per_usd = heights["req_1"]["write_5m"] / (3265 * 3.75e-6)
    for rid, h in heights.items():
        assert sum(v for k, v in h.items() if k != "missed") == pytest.approx(costs[rid] * per_usd, abs=0.1), rid
    assert heights["req_4"]["missed"] == pytest.approx(WASTE["ttl_expired"] * per_usd, abs=0.05)
    for width, height in ((1400, 2400), (800, 3400)):
        shot = artifacts(tmp_path) / f"html_money_{width}.png"
        screenshot(out, shot, width, height, scale=1)
        assert png_size(shot) == (width, height)
        waste_card, fix_card = colour_shares(shot, [(0xFE, 0xF2, 0xF2), (0xF0, 0xFD, 0xF4)])
        assert waste_card > 0.002 and fix_card > 0.002, width  # the money cards are drawn at both widths


TITLE = """<script>
(function () {
  var svg = document.querySelector("svg"), w = svg.viewBox.baseVal.width, out = [];
  svg.querySelectorAll("text.chart-title").forEach(function (t) {
    var b = t.getBBox(); out.push([b.x, b.x + b.width, w]);
  });
  var pre = document.createElement("pre"); pre.id = "title"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


@needs_chromium
@pytest.mark.parametrize("title", [None, "A long custom title · " + "with many words in it " * 12 + "· $0.0706"])
def test_plot_titles_are_never_cut_off(tmp_path, title):
    svg_file = tmp_path / "chart.svg"
    args = ["plot", str(SAMPLE), "-o", str(svg_file), "--unit", "usd"] + (["--title", title] if title else [])
    assert CliRunner().invoke(app, args).exit_code == 0
    probe = tmp_path / "title.html"
    probe.write_text(f"<!DOCTYPE html><html><body style='margin:0'>{svg_file.read_text().split('?>', 1)[1]}"
                     f"{TITLE}</body></html>")
    lines = json.loads(Dom(dump_dom(probe, width=1300)).text_by_id["title"])
    assert lines and all(0 <= left and right <= width for left, right, width in lines), lines
    text = svg_file.read_text()
    assert "$0.0706" in text  # the end of the title is there, not cut
    assert len(lines) == (1 if title is None else 3)


def test_an_unpriced_trace_is_drawn_in_tokens_only(tmp_path):
    trace = tmp_path / "acme.jsonl"  # a model no price list knows: its cost is n/a, never $0
    trace.write_text(SAMPLE.read_text().replace('"claude-sonnet-4-5"', '"acme-model-1"'))
    runner = CliRunner()
    out = tmp_path / "acme.html"
    assert runner.invoke(app, ["html", str(trace), "-o", str(out)]).exit_code == 0
    page = out.read_text()
    assert 'data-unit="usd"' not in page and 'data-unit="tokens"' in page and 'id="kv-unit-usd"' not in page
    assert "not every request could be priced" in page
    res = runner.invoke(app, ["plot", str(trace), "-o", str(tmp_path / "c.svg"), "--unit", "usd"])
    assert res.exit_code == 2 and "--unit" in res.output and not (tmp_path / "c.svg").exists()
