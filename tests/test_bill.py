"""The bill: spend split into cache reads, cache writes (5m / 1h), fresh input and output, by model, project,
session and agent, in the text report, its JSON, the HTML page, the Python API and `usage`; its first line;
request rows a person recognises (local time, project, session title, costliest first); and the fixes line on
a log without request bodies.

The log is tests/bill_logs.py's Claude Code folder. Every figure below is worked out by hand from its usage
lines and Anthropic's list prices (USD per million tokens: Sonnet 4.5 input 3, output 15; Haiku 4.5 input 1,
output 5; reads 0.1x input, 5m writes 1.25x, 1h writes 2x):

    rA1 sonnet  write 10,000 (5m) x 3.75 = 0.0375, fresh 1,000 x 3 = 0.003, output 1,000 x 15 = 0.015
    rA2 sonnet  read 10,000 x 0.30 = 0.003, write 2,000 (1h) x 6 = 0.012, output 2,000 x 15 = 0.030
    rA3 haiku   (subagent agent-a1) fresh 2,000 x 1 = 0.002, output 100 x 5 = 0.0005
    rB1 haiku   write 20,000 (5m) x 1.25 = 0.025, output 500 x 5 = 0.0025
    rB2 haiku   the same, 20 minutes after rB1: the 5-minute entry expired; an ideal cache would have read
                the 20,000 at 0.10 instead of writing them at 1.25: 20,000 x 1.15 = 0.023 wasted
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import kvprobe
from bill_logs import bill_folder
from test_cli_tables import _header, _run

CLASSES = ("cache_read_usd", "cache_write_5m_usd", "cache_write_1h_usd", "fresh_input_usd", "output_usd", "cost_usd")
SESSION_A = dict(zip(CLASSES, (0.003, 0.0375, 0.012, 0.005, 0.0455, 0.103)), requests=3)
SESSION_B = dict(zip(CLASSES, (0.0, 0.05, 0.0, 0.0, 0.005, 0.055)), requests=2)
HAND = {
    "total": dict(zip(CLASSES, (0.003, 0.0875, 0.012, 0.005, 0.0505, 0.158)), requests=5),
    "by_model": [("claude-sonnet-4-5", dict(zip(CLASSES, (0.003, 0.0375, 0.012, 0.003, 0.045, 0.1005)), requests=2)),
                 ("claude-haiku-4-5-20251001", dict(zip(CLASSES, (0.0, 0.05, 0.0, 0.002, 0.0055, 0.0575)),
                                                    requests=3))],
    "by_project": [("/home/me/app", SESSION_A), ("/home/me/api", SESSION_B)],
    "by_session": [("sA", SESSION_A), ("sB", SESSION_B)],
    "by_agent": [("main", dict(zip(CLASSES, (0.003, 0.0875, 0.012, 0.003, 0.05, 0.1555)), requests=4)),
                 ("agent-a1", dict(zip(CLASSES, (0.0, 0.0, 0.0, 0.002, 0.0005, 0.0025)), requests=1))],
}
# 0.023 of 0.158 is 14.6%; the 5m writes, 0.0875 of 0.158, are 55% of the spend
HEADLINE = ("Misses wasted $0.0230 of $0.1580 (14.6%); 55% is writing contexts to the cache (5-minute lifetime): "
            "the causes below say which writes rebuilt what was cached.")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return bill_folder(tmp_path_factory.mktemp("bill") / "projects")


def _same(row: dict, hand: dict) -> None:
    assert row["requests"] == hand["requests"]
    assert {k: row[k] for k in CLASSES} == pytest.approx({k: hand[k] for k in CLASSES}, abs=1e-9)


def test_report_json_splits_the_bill_as_worked_out_by_hand(cli, folder):
    res = cli("report", str(folder), "--json")
    assert res.exit_code == 0, res.output
    bill = json.loads(res.stdout)["bill"]
    _same(bill["total"], HAND["total"])
    assert bill["total"]["cache_write_usd"] == pytest.approx(0.0995)  # 5m + 1h
    for grouping in ("by_model", "by_project", "by_session", "by_agent"):
        key = grouping[3:]
        assert [r[key] for r in bill[grouping]] == [k for k, _ in HAND[grouping]], grouping  # costliest first
        for row, (_, hand) in zip(bill[grouping], HAND[grouping]):
            _same(row, hand)
    # sA was renamed with /rename; sB's title is the first prompt typed
    assert [r["title"] for r in bill["by_session"]] == ["fix the login bug", "add rate limits to the API"]
    assert bill["wasted_usd"] == pytest.approx(0.023)
    assert bill["largest"] == {"class": "cache_write_5m_usd", "share": pytest.approx(0.0875 / 0.158, abs=1e-4)}
    assert bill["headline"] == HEADLINE


def test_the_text_report_starts_with_the_bill_and_says_fixes_cannot_be_simulated(folder):
    text = _run("report", folder, columns=120)
    lines = text.splitlines()
    assert lines[0] == HEADLINE
    by_session = lines.index("The bill by session")
    assert _header(text, "The bill by session", "session") == ["session", "reads", "5m writes", "1h writes",
                                                               "fresh", "output", "total"]
    assert lines[by_session + 2].split() == ["fix", "the", "login", "bug", "$0.0030", "$0.0375", "$0.0120",
                                             "$0.0050", "$0.0455", "$0.1030"]
    assert lines[by_session + 4].split()[0] == "Total" and lines[by_session + 4].endswith("$0.1580")
    # Claude Code logs carry no request bodies: nothing to re-simulate, and the report says so
    (fixes,) = [line for line in lines if line.startswith("Fixes:")]
    assert fixes.startswith("Fixes: no request bodies: fixes cannot be simulated; capture them to price fixes: ")
    assert "`kvprobe capture -- claude …` (Claude Code)" in " ".join(text.split())  # (the line may wrap)
    assert "none pays" not in text


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_bill_tables_fit_and_keep_reads_and_total(folder, width):
    text = _run("report", folder, columns=width)
    for title, first in (("The bill by model", "model"), ("The bill by agent", "agent")):
        shown = _header(text, title, first)
        assert {first, "reads", "5m writes", "total"} <= set(shown), (width, shown)
        block = text.split(title, 1)[1].split("\n\n")[0].splitlines()[:5]
        assert all(len(line) <= width for line in block), block


def test_request_rows_are_in_local_time_costliest_first(folder):
    text = _run("report", folder, "--tz", "Europe/Paris", "--requests", "3", columns=80)
    rows = text.split("Requests: the 3 costliest of 5, by cost", 1)[1].splitlines()
    # rA1 $0.0555 (sent 20:00:00 UTC), rA2 $0.0450 (20:00:10), rB2 $0.0275 and a miss (21:20:00): in Paris
    # (UTC+1 in February) an hour later, all on one day, so without the date
    times = [line.split()[0] for line in rows[2:] if re.match(r"\d\d:\d\d:\d\d ", line)]
    assert times == ["21:00:00", "21:00:10", "22:20:00"]
    assert _header(text, None, "time")[:2] == ["time", "session"]  # kept at 80 columns, then the session title
    assert "times in Europe/Paris (--tz)" in text
    assert "a blank why: the request read all that an ideal prefix cache would have" in text  # rA2's why


def test_an_unknown_time_zone_is_a_usage_error_naming_the_flag(cli, folder):
    res = cli("report", str(folder), "--tz", "Mars/Olympus")
    assert res.exit_code == 2 and "--tz" in res.output and "Mars/Olympus" in res.output


def test_usage_has_the_same_columns_in_dollars_and_points_to_report(cli, folder):
    res = cli("usage", str(folder), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    _same(data["totals"], HAND["total"])
    sessions = {r["session"]: r for r in data["by_session"]}
    _same(sessions["sA"], SESSION_A)
    _same(sessions["sB"], SESSION_B)
    text = _run("usage", folder, "--usd", columns=120)
    assert _header(text, "Usage by day", "day") == ["day", "reqs", "reads", "5m writes", "1h writes", "fresh",
                                                    "output", "hit", "cost"]
    assert f"Why it cost this: kvprobe report {folder} names each cache miss's cause" in text


def test_the_python_api_has_the_bill_and_its_table(folder):
    rep = kvprobe.analyse(folder)
    assert rep.bill.headline == HEADLINE
    assert [key for key, _ in rep.bill.groups["project"]] == ["/home/me/app", "/home/me/api"]
    table = kvprobe.load(rep).bill().set_index(["grouping", "key"])
    for grouping in ("model", "project", "session", "agent"):
        for key, hand in HAND[f"by_{grouping}"]:
            row = table.loc[(grouping, key)]
            assert {k: row[k] for k in CLASSES} == pytest.approx({k: hand[k] for k in CLASSES}, abs=1e-9)
    assert table.loc[("session", "sA"), "title"] == "fix the login bug"
    requests = kvprobe.load(folder).requests().set_index("request_id")
    assert requests.loc["rA2", "cache_write_1h_usd"] == pytest.approx(0.012)
    assert requests.loc["rA1", "cache_write_5m_usd"] == pytest.approx(0.0375)
    assert requests.loc["rB1", "project"] == "/home/me/api"


def test_the_html_page_leads_with_the_bill(cli, folder, tmp_path):
    from test_html_report import Dom

    out = tmp_path / "bill.html"
    assert cli("html", str(folder), "-o", str(out), "--tz", "Asia/Tokyo").exit_code == 0
    html = out.read_text()
    dom = Dom(html)
    assert dom.text_by_id["kv-headline"].strip() == HEADLINE
    # each table's rows carry the raw dollars: sB's row of the session table, its five classes and total
    row = re.search(r'<tr data-key="sB">(.*?)</tr>', html.split('id="kv-bill-session"')[1]).group(1)
    values = [float(v) for v in re.findall(r'data-v="([0-9.e-]+)"', row)]
    assert values == pytest.approx([2, 0.0, 0.05, 0.0, 0.0, 0.005, 0.055])  # requests, classes, total
    assert "add rate limits to the API" in row
    assert "no request bodies: fixes cannot be simulated" in dom.text_by_id["fixes"]
    # the requests table in --tz: rA1, sent 2026-02-11 20:00:00 UTC, is 05:00 the next morning in Tokyo
    assert "<th data-type=\"text\" class=\"\">time (Asia/Tokyo)</th>" in html
    assert re.search(r'data-id="rA1">.*?<td data-v="[0-9.]+">05:00:00\.000</td>', html)


def test_titles_name_a_slash_command_and_a_codex_prompt(tmp_path):
    from agent_logs import ClaudeTranscript, CodexRollout
    from kvprobe.importers.titles import session_title, shorten

    s = ClaudeTranscript("s1")
    s.user(0, "<command-message>review</command-message>\n<command-name>/review</command-name>\n"
              "<command-args>the auth module</command-args>")
    s.assistant(2, "r1", read=0, write=5_000)
    assert session_title(s.write(tmp_path / "p" / "s1.jsonl")) == "/review the auth module"
    c = CodexRollout("c1")
    c.start_turn(1)
    c.request(2, input_tokens=5_000, cached=0)
    assert session_title(c.write(tmp_path / "codex")) == "do it"
    assert shorten("Work on bead spotter-fum. Run bd show spotter-fum to see the issue") == \
        "Work on bead spotter-fum. Run bd show…"
    c = ClaudeTranscript("s3")  # a session begun with /clear: its first prompt is the one after it
    c.user(0, "<command-name>/clear</command-name>\n<command-message>clear</command-message>\n"
              "<command-args></command-args>")
    c.user(1, "Add retries to the upload client")
    c.assistant(3, "r3", read=0, write=5_000)
    assert session_title(c.write(tmp_path / "p" / "s3.jsonl")) == "Add retries to the upload client"
    m = ClaudeTranscript("s2")  # a plan pasted as a markdown document: its heading, without the "# "
    m.user(0, "# Fix: SQL grammar for nested joins\n\n## Context\n...")
    m.assistant(2, "r2", read=0, write=5_000)
    assert session_title(m.write(tmp_path / "p" / "s2.jsonl")).startswith("Fix: SQL grammar for nested joins\n")


def test_a_hostile_title_is_shown_as_text(cli, tmp_path):
    from agent_logs import ClaudeTranscript

    title = "[bold red]rm[/] \x1b[2J<script>alert(1)</script>"
    for sid in ("h1", "h2"):  # two sessions: the bill's session table and the rows' session column
        s = ClaudeTranscript(sid)
        s.user(0, "go")
        s.assistant(2, f"r-{sid}", read=0, write=5_000)
        s.lines.append({"type": "custom-title", "customTitle": title, "sessionId": sid})
        s.write(tmp_path / "projects" / "-home-me-app" / f"{sid}.jsonl")
    text = _run("report", tmp_path / "projects", columns=160)
    assert "[bold red]rm[/]" in text and "\x1b[2J" not in text  # markup printed as typed, the escape made visible
    out = tmp_path / "page.html"
    assert cli("html", str(tmp_path / "projects"), "-o", str(out)).exit_code == 0
    html = out.read_text()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


def test_past_50_requests_the_20_costliest_are_listed_by_cost_with_their_time_at_80_columns(tmp_path):
    from agent_logs import ClaudeTranscript

    # 60 requests 50 minutes apart (three days), Claude Code's long request ids; request k writes
    # 1,000 + 100 x (37k mod 60) tokens: the costs all differ and are not in time order
    s = ClaudeTranscript("long")
    for k in range(60):
        s.turn(k * 3000, f"req_011CY2wdZ9Q4EUkpEG{k:06d}", read=0, write=1_000 + (37 * k) % 60 * 100)
    s.write(tmp_path / "projects" / "-home-me-app" / "long.jsonl")
    text = _run("report", tmp_path / "projects", "--tz", "UTC", columns=80)
    assert "Requests: the 20 costliest of 60, by cost (--requests all: every row)" in " ".join(text.split())
    assert _header(text, None, "time")[0] == "time"
    rows = [line for line in text.split("Requests: the 20 costliest", 1)[1].splitlines()
            if re.match(r"\d\d-\d\d \d\d:\d\d ", line)]
    costs = [float(re.search(r"\$([0-9.]+)", line).group(1)) for line in rows]
    assert len(rows) == 20 and costs == sorted(costs, reverse=True) and len(set(costs)) == 20
    # the days show as month-day: the costliest is k = 47 (37 x 47 = 1,739, 59 mod 60: 6,900 tokens written
    # at $3.75 per million, 3 fresh at $3, 50 output at $15: $0.026634), sent 47 x 3,000 s = 39 h 10 min
    # after 2026-02-11 20:00 UTC: 02-13 11:10
    assert rows[0].startswith("02-13 11:10") and costs[0] == pytest.approx(0.0266, abs=1e-4)


def test_with_request_bodies_and_nothing_to_fix_the_fixes_line_says_none_pays(cli, tmp_path):
    from conftest import anthropic_body

    # one captured request, a cold start: its body is there, so fixes were simulated, and none pays
    record = {"kvprobe": 1, "id": "r1", "provider": "anthropic", "started_at": "2026-02-11T20:00:00.000Z",
              "request": anthropic_body(), "response": {"usage": {"input_tokens": 20, "output_tokens": 10,
                                                                  "cache_creation_input_tokens": 1_500,
                                                                  "cache_read_input_tokens": 0}}}
    trace = tmp_path / "one.jsonl"
    trace.write_text(json.dumps(record) + "\n")
    assert "Fixes: none pays for itself on this log." in _run("report", trace, columns=120)
    assert json.loads(cli("report", str(trace), "--json").stdout)["fixes_note"] == "none pays for itself on this log"


def test_a_log_without_misses_is_told_its_fresh_input_was_new_to_any_cache(cli, tmp_path):
    """Where no miss cost anything, the headline does not send the reader to the causes (there are none) nor tell
    them to place breakpoints (Claude Code places its own): what was sent fresh was new to the cache. One
    Claude Code session, one request: 20,000 fresh input tokens at $3 / M = $0.06, 100 output at $15 / M =
    $0.0015; $0.0615 in all, 97.6% of it fresh input."""
    from agent_logs import ClaudeTranscript

    s = ClaudeTranscript("s1", cwd="/home/me/app")
    s.user(0, "explain this repository")
    s.assistant(2, "r1", read=0, write=0, fresh=20_000, output=100, model="claude-sonnet-4-5")
    s.write(tmp_path / "projects" / "-home-me-app" / "s1.jsonl")
    res = cli("report", str(tmp_path / "projects"), "--json")
    assert res.exit_code == 0, res.output
    bill = json.loads(res.stdout)["bill"]
    assert bill["wasted_usd"] == 0 and bill["total"]["cost_usd"] == pytest.approx(0.0615)
    assert bill["headline"] == ("Misses wasted $0.0000 of $0.0615 (0.0%); 98% is input sent without the cache: "
                                "new to the cache when sent (a session's start or a return after a pause no "
                                "lifetime covers, each turn's new part); no cache could have read it.")


def test_misses_on_requests_that_cannot_be_priced_make_the_waste_unknown_and_say_why(cli, tmp_path):
    """A miss on a model no price list names (an expiry 10 minutes into its session) has no price, so what all
    the misses wasted is unknown; the headline said "an unknown amount (some are unpriced) of $X", where a
    public log's 195 priced misses of 198 had cost $24.55. It says the priced misses' cost as a floor, and how
    many misses it leaves out. Here the priced session has no miss: at least $0."""
    from agent_logs import ClaudeTranscript

    priced = ClaudeTranscript("s1")
    priced.turn(0, "p1", read=0, write=20_000)
    priced.turn(20, "p2", read=20_000, write=500)
    priced.write(tmp_path / "projects" / "-home-me-app" / "s1.jsonl")
    mystery = ClaudeTranscript("s2")
    mystery.turn(0, "m1", read=0, write=20_000, model="claude-mystery-1")
    mystery.turn(600, "m2", read=0, write=20_000, model="claude-mystery-1")  # 10 minutes: the 5m entry expired
    mystery.write(tmp_path / "projects" / "-home-me-app" / "s2.jsonl")
    bill = json.loads(cli("report", str(tmp_path / "projects"), "--json").stdout)["bill"]
    assert bill["wasted_usd"] is None and bill["total"]["unpriced_requests"] == 2
    total = f"${bill['total']['cost_usd']:.4f}"
    assert bill["headline"].startswith(f"Misses wasted at least $0.0000 of {total} (2 requests unpriced; 1 miss "
                                       "among them not counted); ")


def test_narrow_the_bill_keeps_the_larger_of_its_write_columns(tmp_path):
    """A log on 1h entries: at 80 columns the bill kept its 5m writes ($0.00 here) and left out the 1h writes
    that were most of its writes, so a row did not visibly add up. The least of the bill goes first."""
    from agent_logs import ClaudeTranscript

    s = ClaudeTranscript("h1")
    s.turn(0, "h1", read=0, write=60_000, ttl="1h")
    s.turn(20, "h2", read=60_000, write=5_000, ttl="1h")
    s.write(tmp_path / "projects" / "-home-me-app" / "h1.jsonl")
    text = _run("report", tmp_path / "projects", columns=60)
    shown = _header(text, "The bill by model", "model")
    assert {"reads", "1h writes", "total"} <= set(shown) and "5m writes" not in shown, shown
