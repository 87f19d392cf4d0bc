"""`kvprobe html` and `kvprobe plot`: the page a user opens, checked in a real browser (headless Chromium).

The browser tests skip only when Chromium is absent (CI installs Debian's `chromium`). Screenshots are kept in
$KVPROBE_ARTIFACTS when set, else in pytest's tmp dir.
"""
from __future__ import annotations

import copy
import json
import re
import os
import struct
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kvprobe.render.browser import dump_dom, find_chromium, screenshot

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "traces" / "sample_session.jsonl"
EVIL_AGENT = "scout<img src=x onerror=\"document.title='pwned'\">"
EVIL_SESSION = "s<script>document.title='pwned2'</script>"
EVIL_ID = 'sc_2"><svg onload=alert(1)>'

needs_chromium = pytest.mark.skipif(find_chromium() is None, reason="Chromium is not installed (Debian: apt-get "
                                    "install chromium; CI's .ci/run installs it)")


def _subagent(base: dict, rid: str, start: str, first: str, write: int, read: int) -> dict:
    rec = copy.deepcopy(base)
    rec.update(id=rid, agent=EVIL_AGENT, session=EVIL_SESSION, started_at=start, first_token_at=first,
               finished_at=first)
    text = "You are Scout <img src=x onerror=\"document.title='pwned'\">, a read-only explorer. " * 120
    rec["request"]["system"] = [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
    rec["response"] = {"usage": {"input_tokens": 0, "cache_creation_input_tokens": write,
                                 "cache_read_input_tokens": read, "output_tokens": 50}}
    return rec


@pytest.fixture(scope="module")
def mixed_trace(tmp_path_factory) -> Path:
    """The sample session (prefix change, TTL expiry, params change) plus a subagent whose two siblings start
    concurrently; the subagent's names carry markup that must never run."""
    main = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    scout = [_subagent(main[0], "sc_1", "2025-09-10T10:08:40Z", "2025-09-10T10:08:44Z", 3500, 0),
             _subagent(main[0], EVIL_ID, "2025-09-10T10:08:40.5Z", "2025-09-10T10:08:44.5Z", 3500, 0),
             _subagent(main[0], "sc_3", "2025-09-10T10:08:50Z", "2025-09-10T10:08:52Z", 0, 3500)]
    path = tmp_path_factory.mktemp("trace") / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in main[:2] + scout + main[2:]))
    return path


@pytest.fixture(scope="module")
def built(mixed_trace, tmp_path_factory):
    """(report JSON, the written HTML file) for the mixed trace, via the CLI."""
    from typer.testing import CliRunner

    from kvprobe.cli import app

    runner = CliRunner()
    out = tmp_path_factory.mktemp("html") / "report.html"
    res = runner.invoke(app, ["html", str(mixed_trace), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["requests"] == 9
    rep = json.loads(runner.invoke(app, ["report", str(mixed_trace), "--json"]).stdout)
    return rep, out


def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("KVPROBE_ARTIFACTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def chart_heights(dom: "Dom", unit: str) -> dict[str, dict[str, float]]:
    """Request id -> segment class -> drawn height, in the chart of `unit` (tokens or usd)."""
    heights: dict[str, dict[str, float]] = {}
    owner = chart = None
    for t, a in dom.elements:  # segments follow their bar group, bar groups their chart, in document order
        if t == "svg" and "kv-chart" in a.get("class", ""):
            chart = a.get("data-unit")
        elif t == "g" and "req" in a.get("class", "").split():
            owner = a["data-id"]
        elif t == "rect" and a.get("class", "").split()[:1] in (["seg"], ["missed"]) and owner and chart == unit:
            heights.setdefault(owner, {})[a["class"].split()[-1]] = float(a["height"])
    return heights


class Dom(HTMLParser):
    """Every element as (tag, attrs), plus text by element id: enough to check a dumped DOM."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text_by_id: dict[str, str] = {}
        self._open: list[str | None] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        self._open.append(a.get("id"))
        if a.get("id"):
            self.text_by_id.setdefault(a["id"], "")

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        for ident in self._open:
            if ident:
                self.text_by_id[ident] += data

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements
                if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def with_class(self, tag: str, cls: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and cls in a.get("class", "").split()]


def test_html_is_one_self_contained_file_with_every_trace_string_escaped(built):
    _, out = built
    page = out.read_text()
    assert page.count("<script") == 1 and "<link" not in page and "@import" not in page
    assert " src=" not in page.replace("src=x", "")  # nothing loaded from anywhere (src=x only inside text)
    refs = [u for u in ("http://", "https://", "//cdn", "url(") if u in page]
    assert set(refs) <= {"http://", "url("}
    assert page.count("http://") == page.count('xmlns="http://www.w3.org/2000/svg"')  # SVG namespace only
    # the only url() references: each chart's own hatch pattern (dollars and tokens)
    assert set(re.findall(r"url\(([^)]*)\)", page)) == {"#kv-hatch", "#kv-hatch-usd"}
    csp = Dom(page).find("meta", http_equiv="Content-Security-Policy")[0]["content"]
    assert "default-src 'none'" in csp and "script-src 'sha256-" in csp and "unsafe-inline" not in csp.split(
        "script-src")[1]
    for raw in ("<img src=x", "<svg onload", "<script>document.title"):
        assert raw not in page
    assert "scout&lt;img src=x onerror=&quot;document.title=&#x27;pwned&#x27;&quot;&gt;" in page


@needs_chromium
def test_chromium_renders_the_chart_and_the_numbers(built, tmp_path):
    rep, out = built
    dom = Dom(dump_dom(out))
    html_tag = next(a for t, a in dom.elements if t == "html")
    assert html_tag.get("data-ready") == "1"  # the page's script ran under its own CSP
    assert not [a for t, a in dom.elements if t == "img"], "trace text became an element"
    assert not [a for _, a in dom.elements if any(k.startswith("on") for k in a)], "an event handler got in"
    assert dom.text_by_id["kv-js-summary"].startswith("9 requests drawn, 5 with a miss cause")

    in_order = [r["id"] for r in sorted(rep["requests"], key=lambda r: r["started_at"])]
    bars = [b for b in dom.with_class("g", "req") if not b["id"].endswith("-usd")]  # the tokens chart
    assert [b["data-id"] for b in bars] == in_order
    assert [b["data-id"] for b in dom.with_class("g", "req") if b["id"].endswith("-usd")] == in_order
    assert {b["data-agent"] for b in bars} == {"main", EVIL_AGENT}  # escaped in the file, exact in the DOM
    by_id = {r["id"]: r for r in rep["requests"]}
    heights = chart_heights(dom, "tokens")
    assert sum(len(h) for h in heights.values()) >= 9
    per_token = heights["req_1"]["write_5m"] / by_id["req_1"]["cache_write_tokens"]
    for rid, h in heights.items():
        r = by_id[rid]
        assert h.get("read", 0) == pytest.approx(r["cache_read_tokens"] * per_token, abs=0.05)
        assert h.get("write_5m", 0) == pytest.approx(r["cache_write_5m_tokens"] * per_token, abs=0.05)

    def kinds(rid: str) -> set[str]:
        bar = next(b for b in bars if b["data-id"] == rid)
        return set(bar["data-kinds"].split())
    assert kinds("req_3") == {"prefix_changed"} and kinds("req_4") == {"ttl_expired"}
    assert kinds(EVIL_ID) == {"not_yet_readable"} and kinds("req_2") == set()
    marks = {a["data-kind"] for a in dom.with_class("circle", "mark")}
    assert {"prefix_changed", "ttl_expired", "params_changed", "not_yet_readable"} <= marks
    index = {b["data-id"]: b["data-i"] for b in bars}
    assert [a["data-i"] for a in dom.with_class("g", "expiry")] == [index["req_4"]] * 2  # in both charts
    overlaps = [(a["data-writer"], a["data-i"]) for a in dom.with_class("g", "overlap")]
    assert overlaps == [(index["sc_1"], index[EVIL_ID])] * 2
    assert [a["data-before"] for a in dom.with_class("line", "gap")] == [index["req_4"]] * 2  # the 7-minute pause
    assert {a["data-agent"] for a in dom.with_class("g", "lane")} == {"main", EVIL_AGENT}

    cards = {a["data-key"]: a["data-value"] for a in dom.with_class("div", "card")}
    t = rep["totals"]
    for key in ("input_tokens", "token_hit_ratio", "cost_usd", "input_equivalent_tokens"):
        assert float(cards[key]) == pytest.approx(t[key])
    assert float(cards["with_all_fixes"]) == pytest.approx(rep["with_all_fixes"]["cost_usd"])
    assert {a["data-kind"] for a in dom.find("tr") if "data-kind" in a} == {f["kind"] for f in rep["fixes"]}
    saving_text = dom.text_by_id["fixes"]
    for fix in rep["fixes"]:
        assert f"${fix['saving_usd']:,.4f}" in saving_text
    rows = [a for a in dom.find("tr") if a.get("id", "").startswith("row-")]
    assert len(rows) == 9 and "$0.1001" in dom.text_by_id["totals"]

    shot = artifacts(tmp_path) / "html_report.png"
    screenshot(out, shot, 1400, 1800, scale=1)
    assert png_size(shot) == (1400, 1800) and shot.stat().st_size > 50_000  # a page, not a blank


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) into rows of raw pixels."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, rows, prev = zlib.decompress(idat), [], bytearray(width * bpp)
    stride = width * bpp + 1
    for y in range(height):
        kind, line = raw[y * stride], bytearray(raw[y * stride + 1:(y + 1) * stride])
        for i in range(len(line)):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line if bpp == 3 else b"".join(line[i:i + 3] for i in range(0, len(line), 4))))
        prev = line
    return width, height, rows


def png_size(path: Path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def colour_shares(path: Path, colours: list[tuple[int, int, int]], step: int = 3) -> list[float]:
    """Share of (sampled) pixels within a small distance of each colour."""
    _, _, rows = png_pixels(path)
    hits, total = [0] * len(colours), 0
    for row in rows[::step]:
        for i in range(0, len(row), 3 * step):
            total += 1
            px = row[i:i + 3]
            for n, rgb in enumerate(colours):
                hits[n] += all(abs(px[k] - rgb[k]) <= 6 for k in range(3))
    return [h / total for h in hits]


@needs_chromium
def test_plot_draws_the_chart_as_a_png(cli, mixed_trace, tmp_path):
    out = artifacts(tmp_path) / "timeline.png"
    res = cli("plot", mixed_trace, "-o", out, "--scale", "1", "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert png_size(out) == (info["width"], info["height"]) and info["requests"] == 9
    read, write, concurrent = colour_shares(out, [(0x2A, 0x9D, 0x8F), (0xF4, 0xA2, 0x61), (0xDB, 0x27, 0x77)])
    assert read > 0.01 and write > 0.01 and concurrent > 0  # read and write bars, the concurrent-start marks
    assert not list(out.parent.glob(".timeline.png.*"))  # no temp file left behind


def test_plot_svg_needs_no_browser(cli, mixed_trace, tmp_path, monkeypatch):
    import xml.etree.ElementTree as ET

    monkeypatch.setenv("KVPROBE_CHROMIUM", str(tmp_path / "no-such-browser"))
    out = tmp_path / "timeline.svg"
    res = cli("plot", mixed_trace, "-o", out)
    assert res.exit_code == 0, res.output
    root = ET.parse(out).getroot()
    groups = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "req"]
    assert len(groups) == 9 and {g.get("data-agent") for g in groups} == {"main", EVIL_AGENT}


def test_plot_png_without_chromium_is_a_clean_error(cli, mixed_trace, tmp_path, monkeypatch):
    monkeypatch.setenv("KVPROBE_CHROMIUM", str(tmp_path / "no-such-browser"))
    out = tmp_path / "timeline.png"
    res = cli("plot", mixed_trace, "-o", out)
    assert res.exit_code == 2 and "Chromium" in res.output and "Traceback" not in res.output
    assert not out.exists()
    res = cli("plot", mixed_trace, "-o", tmp_path / "timeline.jpg")
    assert res.exit_code == 2 and "--output" in res.output and ".png or .svg" in res.output


def test_bad_input_exits_2_and_leaves_the_old_output(cli, tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text(SAMPLE.read_text().splitlines()[0] + "\n" + json.dumps({"id": 5, "started_at": "noon",
                                                                         "response": {"usage": {}}}) + "\n")
    out = tmp_path / "report.html"
    out.write_text("previous report")
    res = cli("html", bad, "-o", out, "--force")
    assert res.exit_code == 2 and "t.jsonl:2" in res.output and "started_at" in res.output
    assert "Traceback" not in res.output and out.read_text() == "previous report"
    res = cli("html", SAMPLE, "-o", tmp_path / "missing-dir" / "r.html")
    assert res.exit_code == 2 and "folder does not exist" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "t.jsonl"]


def test_empty_input_or_no_match_exits_2_and_writes_nothing(cli, mixed_trace, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for command, name in (("html", "r.html"), ("plot", "r.svg")):
        res = cli(command, empty, "-o", tmp_path / name)
        assert res.exit_code == 2 and "no requests found" in res.output, res.output
        res = cli(command, mixed_trace, "-o", tmp_path / name, "--agent", "nobody")
        assert res.exit_code == 2 and "--agent nobody" in res.output, res.output
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "r.svg").exists()


def test_filters_narrow_the_page(cli, mixed_trace, tmp_path):
    out = tmp_path / "main.html"
    res = cli("html", mixed_trace, "-o", out, "--agent", "main", "--no-fixes", "--title", "Main <agent>")
    assert res.exit_code == 0, res.output
    page = out.read_text()
    # 6 bars in each chart (tokens, and dollars)
    assert len(re.findall(r'class="req" id="bar-\d+-\d+"', page)) == 6 and page.count('class="req"') == 12
    assert "<title>Main &lt;agent&gt;</title>" in page
    assert "fixes were not computed" in page


def test_huge_traces_sum_consecutive_requests_into_slots(mixed_trace, tmp_path):
    from kvprobe.render.chart import build_timeline
    from kvprobe.render.page import _requests
    from kvprobe.render.svg import render_svg
    from kvprobe.report import build_report

    rep = build_report([mixed_trace], fixes=False)
    tl = build_timeline(rep.results, max_slots=4)
    assert tl.per_slot == 3 and tl.slots == 3 and tl.requests == 9
    t = rep.totals
    assert sum(b.read for b in tl.bars) == t["cache_read_tokens"]
    assert sum(b.write_5m + b.write_1h for b in tl.bars) == t["cache_write_tokens"]
    assert sum(b.count for b in tl.bars) == 9 and {b.agent for b in tl.bars} == {"main", EVIL_AGENT}
    assert [(o.writer, o.index, o.writer_id) for o in tl.overlaps] == [(0, 1, "sc_1")]  # slots, not requests
    assert [(e.index, e.agent) for e in tl.expiries] == [(2, "main")]
    svg, _, _ = render_svg(tl)
    assert svg.count('class="req"') == len(tl.bars) and "3 requests: " in svg

    table = _requests(tl, rep, limit=3)  # the table keeps the largest missed reads
    shown = Dom(table).find("tr")
    ids = sorted(a["data-id"] for a in shown if a.get("data-id"))
    assert ids == sorted([EVIL_ID, "req_4", "req_3"]) and "Showing 3 of 9 requests" in table


PROBE = """<script>
(function () {
  var out = {}, doc = document;
  function click(el) { el.dispatchEvent(new MouseEvent("click", {bubbles: true})); }
  var bar = doc.querySelector('g.req[data-id="req_4"]');
  click(bar);
  out.selectedRow = (doc.querySelector("tr.sel") || {}).id || null;
  out.selectedBar = (doc.querySelector("g.req.sel") || {id: null}).id;
  bar.dispatchEvent(new MouseEvent("mousemove", {bubbles: true, clientX: 50, clientY: 50}));
  var tip = doc.getElementById("kv-tip");
  out.tip = tip.hidden ? null : tip.textContent;
  var costHeader = Array.prototype.find.call(doc.querySelectorAll("#kv-requests th"),
                                             function (th) { return th.textContent === "cost"; });
  click(costHeader);
  out.firstByCost = doc.querySelector("#kv-requests tbody tr").dataset.id;
  var filter = doc.getElementById("kv-filter");
  filter.value = "ttl_expired";
  filter.dispatchEvent(new Event("input"));
  var rows = Array.prototype.slice.call(doc.querySelectorAll("#kv-requests tbody tr"));
  out.visible = rows.filter(function (tr) { return !tr.hidden; }).map(function (tr) { return tr.dataset.id; });
  out.dimmed = doc.querySelectorAll("g.req.dim").length;
  var pre = doc.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
  doc.body.appendChild(pre);
})();
</script></body>"""


@needs_chromium
def test_the_page_script_links_chart_and_table(built, tmp_path):
    """Click a bar, hover it, sort by cost, filter by cause: what a reader does, driven from an added script
    (the copy drops the page's CSP, which would rightly block that script)."""
    import re

    rep, out = built
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", out.read_text())
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", PROBE))
    dom = Dom(dump_dom(probe))
    seen = json.loads(dom.text_by_id["probe"])
    by_id = {r["id"]: r for r in rep["requests"]}
    in_order = [r["id"] for r in sorted(rep["requests"], key=lambda r: r["started_at"])]
    assert seen["selectedRow"] == f"row-{in_order.index('req_4')}"
    assert seen["selectedBar"].startswith("bar-") and "req_4" in seen["tip"] and "TTL expired" in seen["tip"]
    assert seen["firstByCost"] == max(by_id, key=lambda i: by_id[i]["cost_usd"])
    assert seen["visible"] == ["req_4"] and seen["dimmed"] == 2 * 8  # the other 8, in both charts
