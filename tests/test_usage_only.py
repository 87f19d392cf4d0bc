"""Usage-only logs: causes from what the log itself shows (levels, events, the TTL of its own writes, noise),
advice that pays, compactions, and Codex turns timed as the user lived them.

The transcripts are written here in the real formats (tests/agent_logs.py); every expected figure below is
worked out by hand from the usage the test writes."""
from __future__ import annotations

import pytest

from agent_logs import ClaudeTranscript, CodexRollout, at
from kvprobe.report import build_report
from kvprobe.trace.record import parse_time


def _report(*paths):
    rep = build_report(list(paths), fixes=False)
    return rep, {r.sk.id: r for r in rep.results}


@pytest.fixture
def claude_session(tmp_path):
    """A 5m-TTL Sonnet session: a compaction, a task notification, a 16-token wobble, an /mcp reconnect, a
    19-minute pause, a 4-hour pause, a switch to Haiku and back."""
    s = ClaudeTranscript("s1")
    s.turn(0, "r1", read=0, write=20_000)
    s.turn(10, "r2", read=20_000, write=1_000)
    s.turn(20, "r3", read=21_000, write=500)
    s.compact_boundary(30, pre_tokens=21_503)
    s.turn(40, "r4", read=8_000, write=2_000)
    s.turn(50, "r5", read=10_000, write=300)
    s.task_notification(55)
    s.turn(60, "r6", read=8_000, write=2_600)
    s.turn(70, "r7", read=10_584, write=500)
    s.command(75, "/mcp", "Reconnected to srv.")
    s.turn(80, "r8", read=5_000, write=6_600)
    s.turn(1_230, "r9", read=0, write=11_700)
    s.turn(16_306, "r10", read=0, write=11_800)
    s.turn(16_316, "r11", read=0, write=12_000, model="claude-haiku-4-5-20251001")
    s.turn(16_326, "r12", read=11_800, write=300)
    root = tmp_path / "projects" / "-home-me-app"
    s.write(root / "s1.jsonl")
    summary = ClaudeTranscript("s1")  # Claude Code's compaction agent, in the session's subagents folder
    summary.turn(25, "sum", read=21_000, write=600, output=800)
    summary.write(root / "s1" / "subagents" / "agent-acompact-1.jsonl")
    return root


def test_the_read_falling_to_the_size_read_after_a_compaction_names_the_messages_level(claude_session):
    _, by_id = _report(claude_session)
    assert by_id["r4"].diagnoses == [] and by_id["r4"].missed_tokens == 0  # the compaction's own rebuild
    [d] = by_id["r6"].diagnoses
    assert (d.kind, d.path, d.token_position, d.inferred) == ("prefix_changed", "messages", 8_000, True)
    assert d.triggers == ["task_notification"] and "notification" in d.detail and "tools+system" in d.detail
    assert by_id["r6"].missed_tokens == 10_300 - 8_000  # r5 left 10,000 + 300 cached
    assert d.missed_tokens == 2_300


def test_a_shortfall_within_one_percent_is_no_miss(claude_session):
    _, by_id = _report(claude_session)
    r7 = by_id["r7"]  # 10,584 read of the 10,600 r6 left: 16 tokens, under 1% of its 11,087
    assert r7.diagnoses == [] and r7.missed_tokens == 0


def test_an_mcp_reconnect_just_before_is_the_likely_trigger(claude_session):
    _, by_id = _report(claude_session)
    [d] = by_id["r8"].diagnoses
    assert (d.kind, d.path, d.token_position) == ("prefix_changed", "tools", 5_000)
    assert d.triggers == ["tools_changed"] and "Reconnected to srv." in d.detail
    assert by_id["r8"].missed_tokens == 11_084 - 5_000
    assert "MCP" in d.advice


def test_a_pause_past_the_ttl_gets_the_keep_alive_that_pays(claude_session):
    _, by_id = _report(claude_session)
    [d] = by_id["r9"].diagnoses  # 1,150 s after r8, which left 11,600 cached; the entry lives 300 s
    assert d.kind == "ttl_expired" and d.seconds_past == pytest.approx(850)
    # 4 pings (ceil(850 / 270)), each 0.1 x 11,600 + 5 = 1,165 input-equivalents, against a rebuild of
    # (1.25 - 0.1) x 11,600 = 13,340; pings pay up to 300 + floor(13,340 / 1,165) x 270 = 3,270 s
    # the API's advice (a Claude Code user's own knobs are in d.advice: tests/test_agent_advice.py)
    api = d.api_advice
    assert "send 4 keep-alive requests" in api and "4,660 input-equivalents against 13,340" in api
    assert "up to 54m30s" in api and '"ttl": "1h"' in api  # the 1h lifetime covers 1,150 s too


def test_a_pause_nothing_pays_for_is_a_new_start_not_an_expiry(claude_session):
    _, by_id = _report(claude_session)
    r10 = by_id["r10"]  # 15,076 s: 55 pings cost more than the rebuild, and the longest lifetime is 1 h
    assert r10.diagnoses == [] and r10.missed_tokens == 0 and r10.write_kind == "cold_start"


def test_a_model_switch_is_per_model_caches_with_nothing_charged(claude_session):
    rep, by_id = _report(claude_session)
    [d] = by_id["r11"].diagnoses
    assert (d.kind, d.param, d.b) == ("params_changed", "model", "claude-haiku-4-5-20251001")
    assert "caches are per model" in d.detail and by_id["r11"].missed_tokens == 0
    # back on Sonnet 20 s after r10: its own entry is still alive and fully read
    assert by_id["r12"].diagnoses == [] and by_id["r12"].missed_tokens == 0
    assert "r11" not in {m.result.sk.id for m in rep.misses}


def test_the_compaction_and_its_summary_request_are_found(claude_session):
    rep, by_id = _report(claude_session)
    [comp] = rep.compactions
    j = comp.to_json()
    assert (j["summary_request"], j["rebuild_request"]) == ("sum", "r4")
    assert (j["tokens_before"], j["tokens_after"], j["later_requests"]) == (21_503, 10_003, 8)
    assert j["break_even_turns"] is not None and j["summary_cost_usd"] == pytest.approx(by_id["sum"].cost_usd)


def test_copies_of_a_growing_session_hold_one_compaction(tmp_path):
    """The Entire CLI's checkpoints keep copies of one session as it grows (each a longer prefix of it). The
    copies' requests are read once, but each copy's compact_boundary waited for the next request that copy
    added: a public repository's report listed three compactions of one, two with made-up rebuild costs. By
    hand: the one compaction, after r2, rebuilt by r3."""
    def session(upto: int) -> ClaudeTranscript:
        s = ClaudeTranscript("s1")
        s.turn(0, "r1", read=0, write=20_000)
        s.turn(10, "r2", read=20_000, write=1_000)
        s.compact_boundary(30, pre_tokens=21_003)
        for i in range(3, upto + 1):  # after the compaction: r3 rebuilds, the next ones read on
            s.turn(20 + 10 * i, f"r{i}", read=8_000 + 500 * (i - 3), write=500)
        return s

    for name, upto in (("a", 4), ("b", 6), ("c", 8)):  # r1-r4, r1-r6, r1-r8
        session(upto).write(tmp_path / "checkpoints" / name / "full.jsonl")
    rep, by_id = _report(tmp_path / "checkpoints")
    assert sorted(by_id) == [f"r{i}" for i in range(1, 9)]
    [comp] = rep.compactions
    assert comp.to_json()["rebuild_request"] == "r3"


def test_misses_list_the_charged_ones_with_their_causes(claude_session):
    rep, _ = _report(claude_session)
    data = rep.to_json()
    assert {m["id"]: m["kinds"] for m in data["misses"]} == {
        "r6": ["prefix_changed"], "r8": ["prefix_changed"], "r9": ["ttl_expired"]}
    what = {m["id"]: m["what_to_do"] for m in data["misses"]}
    assert "promptCacheTtl" in what["r9"]  # in Claude Code's knobs


def test_the_ttl_in_force_comes_from_the_logs_own_1h_writes(tmp_path):
    s = ClaudeTranscript("h")
    s.turn(0, "h1", read=0, write=20_000, ttl="1h")
    s.turn(400, "h2", read=0, write=20_500, ttl="1h")
    s.turn(4_400, "h3", read=0, write=21_000, ttl="1h")
    _, by_id = _report(s.write(tmp_path / "h.jsonl"))
    [d2] = by_id["h2"].diagnoses  # 400 s is well inside a 1h entry's life: no expiry
    assert d2.kind == "unexplained" and "within the entry's lifetime" in d2.detail
    [d3] = by_id["h3"].diagnoses  # 4,000 s > 3,600 s
    assert d3.kind == "ttl_expired" and d3.seconds_past == pytest.approx(400) and "1h TTL" in d3.detail
    # 1 ping (ceil(400 / 3,570)) of 0.1 x 20,500 + 5 = 2,055 against (2.0 - 0.1) x 20,500 = 38,950
    api = d3.api_advice  # the API's advice (Claude Code's own knobs are in d3.advice)
    assert "send 1 keep-alive request " in api and "2,055 input-equivalents against 38,950" in api
    assert '"ttl": "1h"' not in api and "promptCacheTtl" not in d3.advice  # already in force: none longer


def test_a_prefix_several_sessions_share_names_the_system_level(tmp_path):
    for name in ("a", "b"):
        s = ClaudeTranscript(name)
        s.turn(0, f"{name}1", read=5_000, write=3_000)
        s.write(tmp_path / f"{name}.jsonl")
    c = ClaudeTranscript("c")
    c.turn(0, "c1", read=5_000, write=3_000)
    c.turn(10, "c2", read=8_000, write=1_000)
    c.turn(20, "c3", read=5_000, write=4_500)
    c.write(tmp_path / "c.jsonl")
    _, by_id = _report(tmp_path)
    [d] = by_id["c3"].diagnoses
    assert (d.kind, d.path, d.token_position) == ("prefix_changed", "system", 5_000)
    assert by_id["c3"].missed_tokens == 9_000 - 5_000


def test_a_size_reads_fall_to_again_and_again_is_named_even_the_first_time(tmp_path):
    d = ClaudeTranscript("d")
    d.turn(0, "d1", read=0, write=10_000)
    d.turn(10, "d2", read=10_000, write=2_000)
    d.turn(20, "d3", read=7_000, write=5_500)  # the first fall to 7,000: named once the whole log is read
    d.turn(30, "d4", read=12_500, write=500)
    d.turn(40, "d5", read=7_000, write=6_500)
    _, by_id = _report(d.write(tmp_path / "d.jsonl"))
    for rid, missed in (("d3", 12_000 - 7_000), ("d5", 13_000 - 7_000)):
        [diag] = by_id[rid].diagnoses
        assert diag.kind == "prefix_changed" and "again and again" in diag.detail
        assert by_id[rid].missed_tokens == missed


def test_an_unexplained_drop_says_nothing_in_the_log_explains_it(tmp_path):
    e = ClaudeTranscript("e")
    e.turn(0, "e1", read=0, write=10_000)
    e.turn(10, "e2", read=10_000, write=2_000)
    e.turn(20, "e3", read=4_000, write=8_500)
    _, by_id = _report(e.write(tmp_path / "e.jsonl"))
    [d] = by_id["e3"].diagnoses
    # the transcript's messages only grew (issue #38): content is ruled out, eviction or routing is left
    assert d.kind == "unexplained" and d.evidence == "transcript"
    assert "history only grew, so the content did not change: the entry was evicted or served elsewhere" in d.detail


@pytest.fixture
def codex_rollout(tmp_path):
    """Three requests on the first evening, 11h41m idle, a turn at another effort, a compaction."""
    x = CodexRollout("cx")
    x.context(0)
    x.start_turn(1)
    x.request(5, input_tokens=10_000, cached=0)
    x.context(6)
    x.request(10, input_tokens=12_000, cached=9_984)
    x.context(11)
    x.request(15, input_tokens=14_000, cached=11_904)
    x.complete(20)
    x.start_turn(42_080, effort="medium")
    x.request(42_090, input_tokens=15_000, cached=0)
    x.context(42_095, effort="medium")
    x.compacted(42_100)
    x.request(42_110, input_tokens=6_000, cached=2_048)
    x.write(tmp_path / "codex")
    return tmp_path / "codex"


def test_codex_turns_start_when_the_user_starts_them(codex_rollout):
    rep, by_id = _report(codex_rollout)
    after_idle = by_id["cx#4"]
    assert after_idle.sk.started_at == pytest.approx(parse_time(at(42_080)))  # task_started, not task_complete


def test_codex_day_totals_follow_the_turns(cli, codex_rollout):
    import json
    res = cli("usage", codex_rollout, "--by", "day", "--json")
    assert res.exit_code == 0, res.output
    days = {row["day"]: (row["requests"], row["input_tokens"]) for row in json.loads(res.stdout)["by_day"]}
    # 2026-02-11 20:00 UTC + 42,080 s is 2026-02-12 07:41
    assert days == {"2026-02-11": (3, 36_000), "2026-02-12": (2, 21_000)}


def test_codex_expiry_advice_uses_the_providers_own_knob(codex_rollout):
    _, by_id = _report(codex_rollout)
    [d] = by_id["cx#4"].diagnoses  # 11h41m after cx#3, which read 11,904
    api = d.api_advice  # (d.advice is in Codex's own knobs: tests/test_agent_advice.py)
    assert d.kind == "ttl_expired" and "prompt_cache_retention" in api and '"ttl"' not in api
    # pings: 0.1 x 11,904 + 5 = 1,195.4 each against 0.9 x 11,904 = 10,713.6: 8 pay, up to 600 + 8 x 570 s
    assert "they pay up to 1h26m" in api
    assert d.triggers == ["settings_changed"] and "effort" in d.detail


def test_codex_compaction_is_found_with_its_summary_unknown(codex_rollout):
    rep, by_id = _report(codex_rollout)
    assert by_id["cx#5"].diagnoses == [] and by_id["cx#5"].missed_tokens == 0
    [comp] = rep.compactions
    j = comp.to_json()
    assert (j["summary_request"], j["rebuild_request"], j["tokens_before"], j["tokens_after"]) == \
        (None, "cx#5", 15_000, 6_000)
    assert j["break_even_turns"] is None and j["paid_off"] is None  # unknown, as its break-even: not "false"


def test_a_codex_read_past_the_nominal_lifetime_that_shows_the_entry_alive_is_no_expiry(tmp_path):
    """OpenAI's in-memory entries go after 5-10 minutes of inactivity, within an hour: the 10 minutes in the
    rules is a nominal lifetime. A public Codex rollout read 69,504 of 86,056 tokens 25m42s after the request
    before and was told "TTL expired"; its own entry had outlived the pause. A read of no more than an expiry
    leaves (the 4,992 tokens cached before the conversation began, which its first request read) is still
    one. By hand: cx#3 reads 15,000 of the 19,968 cx#2 read, 25 minutes on; cx#4 4,992 of those 15,000, 25 more."""
    c = CodexRollout("cx")
    c.start_turn(0)
    c.request(2, input_tokens=20_000, cached=4_992)
    c.request(30, input_tokens=22_000, cached=19_968)
    for turn, (input_tokens, cached) in enumerate([(24_000, 15_000), (26_000, 4_992)], start=1):
        c.complete(40 + (turn - 1) * 1_500)  # the user comes back 25 minutes later
        c.start_turn(40 + turn * 1_500)
        c.request(42 + turn * 1_500, input_tokens=input_tokens, cached=cached)
    _, by_id = _report(c.write(tmp_path))
    [alive] = by_id["cx#3"].diagnoses
    assert alive.kind != "ttl_expired" and "lifetime" not in alive.kind, alive
    [gone] = by_id["cx#4"].diagnoses
    assert gone.kind == "ttl_expired"


def test_a_codex_routing_miss_counts_the_conversations_requests_in_the_minute_before(tmp_path):
    """OpenAI sends a prompt_cache_key's requests past ~15 a minute to other machines; the advice "fewer
    parallel Codex threads" applies only there, and public rollouts never came near it. A read of nothing 20 s
    into a calm conversation says how many requests it sent in the minute before. By hand: each request starts
    when the one before ended (its tool's output), so cx#1, cx#2 and cx#3 started at 0, 2.5 and 12.5 s, all
    within the minute before cx#4 (22.5 s): 3 requests."""
    c = CodexRollout("cx")
    c.start_turn(0)
    for t, (input_tokens, cached) in zip((2, 12, 22, 32), [(20_000, 0), (21_000, 19_968), (22_000, 20_864),
                                                           (23_000, 0)]):
        c.request(t, input_tokens=input_tokens, cached=cached)
    _, by_id = _report(c.write(tmp_path))
    [d] = by_id["cx#4"].diagnoses
    assert d.kind in ("routing", "unexplained"), d
    assert "this conversation sent 3 requests in the minute before it, under the ~15 a minute past which OpenAI's " \
           "prefix-hash routing sends some elsewhere" in d.detail, d.detail
    assert "no Codex setting changes" in d.advice


def test_a_compactions_summary_request_is_named_in_the_requests_table(claude_session, monkeypatch):
    """The request Claude Code's compaction agent makes sends the whole history to a new agent: a public log's
    second costliest row ($0.77), its why blank ("nothing to explain"). It is named for what it is, the cost the
    compaction line below prices."""
    import subprocess
    import sys

    monkeypatch.setenv("COLUMNS", "200")
    res = subprocess.run([sys.executable, "-m", "kvprobe", "report", str(claude_session), "--requests", "all"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    row = next(line for line in res.stdout.splitlines() if " sum " in f" {line} ")
    assert row.rstrip().endswith("compaction summary"), row
    assert "compaction summary: the request that summarised the history" in res.stdout
